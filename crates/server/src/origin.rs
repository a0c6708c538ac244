//! The wired side: resolving origin names at the edge (never over the air), refusing
//! restricted destinations *after* resolution, connecting with a timeout, TLS to `https://`
//! origins (verified against `[origin] tls-roots`, ALPN h2 and http/1.1), and a pooled hyper
//! client (HTTP/1.1, h2 when ALPN says so, or h2c with prior knowledge) on top of that
//! connector.

use std::collections::BTreeMap;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{StatusCode, Uri};
use http_body_util::Full;
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::client::ResolvesClientCert;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{CertificateError, ClientConfig, RootCertStore};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use crate::acl::Acl;
use crate::config::{OriginConfig, TlsRoots};
use crate::mode::split_authority;

/// The response field that marks an error page the edge made (not the origin's answer).
pub const ERROR_HEADER: &str = "webpep-error";
/// [`ERROR_HEADER`]'s value when an origin's certificate did not verify.
pub const ORIGIN_CERTIFICATE: &str = "origin-certificate";
/// The response field that tells a client proxy to tunnel this host from now on.
pub const PASSTHROUGH_HEADER: &str = "webpep-passthrough";
/// [`PASSTHROUGH_HEADER`]'s value when the origin asked for a client certificate.
pub const CLIENT_CERTIFICATE: &str = "client-certificate";

/// A boxed future, as the resolver trait returns.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Name resolution for origins.
pub trait Resolve: Send + Sync {
    /// The addresses of `host` (a DNS name; IP literals never reach here).
    fn resolve<'a>(&'a self, host: &'a str) -> BoxFuture<'a, Result<Vec<IpAddr>, String>>;
}

/// Resolution through the edge's caching stub resolver (`webpep_dns`), honouring TTLs.
pub struct StubResolve(pub webpep_dns::StubResolver);

impl Resolve for StubResolve {
    fn resolve<'a>(&'a self, host: &'a str) -> BoxFuture<'a, Result<Vec<IpAddr>, String>> {
        Box::pin(async move { self.0.lookup(host).await.map_err(|e| e.to_string()) })
    }
}

/// Resolution through the system (getaddrinfo): used when no DNS upstream is known.
pub struct SystemResolve;

impl Resolve for SystemResolve {
    fn resolve<'a>(&'a self, host: &'a str) -> BoxFuture<'a, Result<Vec<IpAddr>, String>> {
        Box::pin(async move {
            tokio::net::lookup_host((host, 0))
                .await
                .map(|it| it.map(|a| a.ip()).collect())
                .map_err(|e| e.to_string())
        })
    }
}

/// Why the proxy could not reach an origin; each maps to a status with the reason.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The resolved address is private/loopback and not allowed → 403.
    #[error("destination not allowed: {0} is a private, loopback or reserved address; an operator allows it with `--allow-destination {0}` or `[acl] allow-destinations`")]
    NotAllowed(IpAddr),
    /// The name did not resolve → 502.
    #[error("cannot resolve {host}: {reason}")]
    Resolve {
        /// The name.
        host: String,
        /// Why.
        reason: String,
    },
    /// Refused, unreachable, reset → 502.
    #[error("cannot connect to {addr}: {source}")]
    Io {
        /// The address tried last.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
    /// Resolution plus connection took too long → 504.
    #[error("connect timeout after {0:?}")]
    Timeout(Duration),
    /// The URI had no usable host.
    #[error("bad origin address {0:?}")]
    BadAddress(String),
    /// The origin's certificate did not verify → 502 with `webpep-error: origin-certificate`:
    /// nothing of that origin is served.
    #[error("the certificate of {host} was refused: {reason}; nothing from {host} is served")]
    Certificate {
        /// The origin's host name (or address).
        host: String,
        /// Why, in words.
        reason: String,
    },
    /// The origin asked for a client certificate, which the edge has none of → 502 with
    /// `webpep-passthrough: client-certificate`: a client proxy tunnels that host instead.
    #[error("{host}: the origin asks for a client certificate; the edge has none to give, so only a tunnel to {host} can work")]
    ClientCertificate {
        /// The origin's host name (or address).
        host: String,
    },
    /// Any other failed TLS handshake (no common ALPN, a protocol error, the origin hung up).
    #[error("TLS with {host} failed: {reason}")]
    Tls {
        /// The origin's host name (or address).
        host: String,
        /// Why.
        reason: String,
    },
}

impl ConnectError {
    /// The status the client gets.
    pub fn status(&self) -> StatusCode {
        match self {
            ConnectError::NotAllowed(_) => StatusCode::FORBIDDEN,
            ConnectError::Timeout(_) => StatusCode::GATEWAY_TIMEOUT,
            ConnectError::BadAddress(_) => StatusCode::BAD_REQUEST,
            _ => StatusCode::BAD_GATEWAY,
        }
    }
}

/// Resolves, checks the ACL and connects; shared by the HTTP client and CONNECT tunnels.
#[derive(Clone)]
pub struct Dialer {
    resolver: Arc<dyn Resolve>,
    hosts: Arc<BTreeMap<String, IpAddr>>,
    acl: Arc<Acl>,
    timeout: Duration,
}

impl Dialer {
    /// A dialer with the given resolver, static hosts, ACL and connect timeout.
    pub fn new(resolver: Arc<dyn Resolve>, cfg: &OriginConfig, acl: Arc<Acl>) -> Self {
        Dialer {
            resolver,
            hosts: Arc::new(
                cfg.hosts
                    .iter()
                    .map(|(k, v)| (k.to_ascii_lowercase(), *v))
                    .collect(),
            ),
            acl,
            timeout: cfg.connect_timeout.0,
        }
    }

    /// The allowed addresses of `host` (refuses when any resolved address is restricted, so
    /// a name cannot smuggle a private address in behind a public one).
    pub async fn addresses(&self, host: &str) -> Result<Vec<IpAddr>, ConnectError> {
        let ips = if let Ok(ip) = host.parse::<IpAddr>() {
            vec![ip]
        } else if let Some(ip) = self.hosts.get(&host.to_ascii_lowercase()) {
            vec![*ip]
        } else {
            self.resolver
                .resolve(host)
                .await
                .map_err(|reason| ConnectError::Resolve {
                    host: host.to_string(),
                    reason,
                })?
        };
        if ips.is_empty() {
            return Err(ConnectError::Resolve {
                host: host.to_string(),
                reason: "no addresses".into(),
            });
        }
        if let Some(bad) = ips.iter().find(|ip| !self.acl.destination_allowed(**ip)) {
            return Err(ConnectError::NotAllowed(*bad));
        }
        Ok(ips)
    }

    /// Connects to `host:port`, trying each address in turn, within the connect timeout.
    pub async fn connect(&self, host: &str, port: u16) -> Result<TcpStream, ConnectError> {
        self.within_timeout(self.dial(host, port)).await
    }

    async fn within_timeout<T>(
        &self,
        work: impl Future<Output = Result<T, ConnectError>>,
    ) -> Result<T, ConnectError> {
        match tokio::time::timeout(self.timeout, work).await {
            Ok(r) => r,
            Err(_) => Err(ConnectError::Timeout(self.timeout)),
        }
    }

    async fn dial(&self, host: &str, port: u16) -> Result<TcpStream, ConnectError> {
        let ips = self.addresses(host).await?;
        let mut last = None;
        for ip in ips {
            let addr = SocketAddr::new(ip, port);
            match TcpStream::connect(addr).await {
                Ok(s) => {
                    let _ = s.set_nodelay(true);
                    return Ok(s);
                }
                Err(e) => last = Some(ConnectError::Io { addr, source: e }),
            }
        }
        Err(last.unwrap_or_else(|| ConnectError::BadAddress(host.to_string())))
    }
}

/// The origin client's connector: the [`Dialer`]'s TCP for `http://`, and TLS on top of it
/// for `https://` (the handshake within the same connect timeout).
#[derive(Clone)]
pub struct Connector {
    dialer: Dialer,
    tls: Arc<ClientConfig>,
}

impl Connector {
    /// A connector dialing with `dialer` and speaking TLS as `tls` says ([`tls_config`]).
    pub fn new(dialer: Dialer, tls: Arc<ClientConfig>) -> Self {
        Connector { dialer, tls }
    }

    /// TCP to `host:port`, then the TLS handshake for `host`.
    async fn connect_tls(&self, host: &str, port: u16) -> Result<OriginStream, ConnectError> {
        let name = ServerName::try_from(host.to_string())
            .map_err(|_| ConnectError::BadAddress(host.to_string()))?;
        let tcp = self.dialer.dial(host, port).await?;
        // A configuration of this connection's own, so that its resolver can tell whether
        // this origin, not some other, asked for a client certificate.
        let asked = Arc::new(AtomicBool::new(false));
        let mut cfg = (*self.tls).clone();
        cfg.client_auth_cert_resolver = Arc::new(NoClientCert(asked.clone()));
        let result = tokio_rustls::TlsConnector::from(Arc::new(cfg))
            .connect(name, tcp)
            .await;
        // Asked is what counts, whether the handshake then failed (TLS 1.2, or an origin
        // that requires one) or not (TLS 1.3 finishes before the origin's verdict; an origin
        // that merely allows one would take the browser's).
        if asked.load(Ordering::Relaxed) {
            tracing::info!(
                host,
                "origin asks for a client certificate: refused, for a tunnel"
            );
            return Err(ConnectError::ClientCertificate {
                host: host.to_string(),
            });
        }
        let tls = result.map_err(|e| handshake_error(host, &e))?;
        let session = tls.get_ref().1;
        let h2 = session.alpn_protocol() == Some(b"h2");
        // The chain expires with its first certificate to expire.
        let valid_until = session.peer_certificates().and_then(|chain| {
            chain
                .iter()
                .map(|c| webpep_intercept::certificate_expiry(c))
                .collect::<Option<Vec<_>>>()?
                .into_iter()
                .min()
        });
        Ok(OriginStream::Tls {
            stream: Box::new(tls),
            h2,
            valid_until,
        })
    }
}

/// A failed handshake's [`ConnectError`]: the rustls error inside the I/O error, in words.
fn handshake_error(host: &str, e: &io::Error) -> ConnectError {
    let rustls_error = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>());
    let err = match rustls_error {
        Some(rustls::Error::InvalidCertificate(c)) => ConnectError::Certificate {
            host: host.to_string(),
            reason: certificate_reason(c, host),
        },
        Some(rustls::Error::AlertReceived(rustls::AlertDescription::NoApplicationProtocol)) => {
            ConnectError::Tls {
                host: host.to_string(),
                reason: "the origin speaks none of the protocols offered (ALPN: h2, http/1.1)"
                    .into(),
            }
        }
        Some(other) => ConnectError::Tls {
            host: host.to_string(),
            reason: other.to_string(),
        },
        None => ConnectError::Tls {
            host: host.to_string(),
            reason: e.to_string(),
        },
    };
    tracing::info!(host, error = %err, "origin TLS handshake failed");
    err
}

/// Why a certificate was refused, in the words a browser user reads.
fn certificate_reason(e: &CertificateError, host: &str) -> String {
    match e {
        CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
            "the certificate has expired".into()
        }
        CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
            "the certificate is not valid yet".into()
        }
        CertificateError::UnknownIssuer => {
            "the certificate is not trusted (self-signed or unknown issuer)".into()
        }
        CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
            format!("the certificate is not valid for {host}")
        }
        CertificateError::Revoked => "the certificate has been revoked".into(),
        CertificateError::BadSignature => "the certificate's signature is not valid".into(),
        other => rustls::Error::InvalidCertificate(other.clone()).to_string(),
    }
}

/// The client-certificate resolver of one origin connection: it has no certificate, and
/// records that the origin asked for one.
#[derive(Debug)]
struct NoClientCert(Arc<AtomicBool>);

impl ResolvesClientCert for NoClientCert {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[rustls::SignatureScheme],
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        self.0.store(true, Ordering::Relaxed);
        None
    }

    fn has_certs(&self) -> bool {
        false
    }
}

impl tower_service::Service<Uri> for Connector {
    type Response = TokioIo<OriginStream>;
    type Error = ConnectError;
    type Future = BoxFuture<'static, Result<Self::Response, ConnectError>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), ConnectError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let auth = uri
                .authority()
                .map(|a| a.as_str().to_string())
                .ok_or_else(|| ConnectError::BadAddress(uri.to_string()))?;
            let secure = uri.scheme() == Some(&http::uri::Scheme::HTTPS);
            let (host, port) = split_authority(&auth, if secure { 443 } else { 80 })
                .ok_or_else(|| ConnectError::BadAddress(auth.clone()))?;
            let stream = if secure {
                let d = &this.dialer;
                d.within_timeout(this.connect_tls(&host, port)).await?
            } else {
                OriginStream::Plain(this.dialer.connect(&host, port).await?)
            };
            Ok(TokioIo::new(stream))
        })
    }
}

/// A connection to an origin: plain TCP, or TLS over it.
pub enum OriginStream {
    /// `http://`.
    Plain(TcpStream),
    /// `https://`; `h2` when the origin chose h2 by ALPN (no answer: HTTP/1.1).
    Tls {
        /// The TLS session.
        stream: Box<tokio_rustls::client::TlsStream<TcpStream>>,
        /// ALPN said h2.
        h2: bool,
        /// When the origin's certificate chain expires (its responses are reused no longer).
        valid_until: Option<SystemTime>,
    },
}

impl Connection for OriginStream {
    fn connected(&self) -> Connected {
        match self {
            OriginStream::Plain(_) => Connected::new(),
            OriginStream::Tls {
                h2, valid_until, ..
            } => {
                let mut c = Connected::new();
                if *h2 {
                    c = c.negotiated_h2();
                }
                if let Some(t) = valid_until {
                    // hyper hands it to every response of this connection.
                    c = c.extra(webpep_cache::ValidUntil(*t));
                }
                c
            }
        }
    }
}

/// Either stream, to read and write through.
trait Io: AsyncRead + AsyncWrite + Unpin {}

impl<T: AsyncRead + AsyncWrite + Unpin> Io for T {}

impl OriginStream {
    fn io(&mut self) -> Pin<&mut dyn Io> {
        match self {
            OriginStream::Plain(s) => Pin::new(s),
            OriginStream::Tls { stream, .. } => Pin::new(stream.as_mut()),
        }
    }
}

impl AsyncRead for OriginStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.get_mut().io().poll_read(cx, buf)
    }
}

impl AsyncWrite for OriginStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().io().poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().io().poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            OriginStream::Plain(s) => s.is_write_vectored(),
            OriginStream::Tls { stream, .. } => stream.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().io().poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().io().poll_shutdown(cx)
    }
}

/// The TLS configuration for origins: ring (passed here, no process-wide default), the
/// roots `[origin] tls-roots` names, ALPN h2 then http/1.1 (h2 alone with `http2 = true`,
/// as the client then speaks nothing else), no client certificate.
pub fn tls_config(cfg: &OriginConfig) -> Result<Arc<ClientConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut c = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(trust_roots(&cfg.tls_roots)?)
        .with_no_client_auth();
    c.alpn_protocols = if cfg.http2 {
        vec![b"h2".to_vec()]
    } else {
        vec![b"h2".to_vec(), b"http/1.1".to_vec()]
    };
    Ok(Arc::new(c))
}

/// The trust roots: the system's (the bundled ones when it has none), the bundled ones, or
/// those of PEM files (an error naming a file that cannot be read or holds no certificate).
fn trust_roots(roots: &TlsRoots) -> Result<RootCertStore, String> {
    let mut store = RootCertStore::empty();
    let bundled = |store: &mut RootCertStore| {
        store.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    };
    match roots {
        TlsRoots::System => {
            let found = rustls_native_certs::load_native_certs();
            let (added, _) = store.add_parsable_certificates(found.certs);
            if added == 0 {
                let why = match found.errors.first() {
                    Some(e) => e.to_string(),
                    None => "no certificates found".into(),
                };
                tracing::warn!(
                    reason = %why,
                    "origin.tls-roots = \"system\": the system's certificate store is empty or unreadable; using the bundled web roots"
                );
                bundled(&mut store);
            }
        }
        TlsRoots::Bundled => bundled(&mut store),
        TlsRoots::Files(files) => {
            for f in files {
                let named = |e: &dyn std::fmt::Display| format!("{}: {e}", f.display());
                let mut n = 0;
                for cert in CertificateDer::pem_file_iter(f).map_err(|e| named(&e))? {
                    store
                        .add(cert.map_err(|e| named(&e))?)
                        .map_err(|e| named(&e))?;
                    n += 1;
                }
                if n == 0 {
                    return Err(named(&"holds no PEM certificate"));
                }
            }
        }
    }
    Ok(store)
}

/// The pooled origin client.
pub type OriginClient = Client<Connector, Full<Bytes>>;

/// Builds the pooled client.
pub fn build_client(connector: Connector, cfg: &OriginConfig) -> OriginClient {
    Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(cfg.max_idle_per_host)
        .pool_timer(hyper_util::rt::TokioTimer::new())
        .pool_idle_timeout(Duration::from_secs(60))
        .http2_only(cfg.http2)
        .build(connector)
}

/// Finds the connector's error inside a client error, if that is what failed.
pub fn connect_error<'a>(err: &'a (dyn std::error::Error + 'static)) -> Option<&'a ConnectError> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cur {
        if let Some(c) = e.downcast_ref::<ConnectError>() {
            return Some(c);
        }
        cur = e.source();
    }
    None
}

/// A readable reason for a client error: the deepest message in the chain.
pub fn error_reason(err: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = vec![err.to_string()];
    let mut cur = err.source();
    while let Some(e) = cur {
        let s = e.to_string();
        if !parts.contains(&s) {
            parts.push(s);
        }
        cur = e.source();
    }
    parts.join(": ")
}
