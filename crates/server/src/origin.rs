//! The wired side: resolving origin names at the edge (never over the air), refusing
//! restricted destinations *after* resolution, connecting with a timeout, and a pooled
//! hyper client (HTTP/1.1, or h2c with prior knowledge) on top of that connector.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{StatusCode, Uri};
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;

use crate::acl::Acl;
use crate::config::OriginConfig;
use crate::mode::split_authority;

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
        let work = async {
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
        };
        match tokio::time::timeout(self.timeout, work).await {
            Ok(r) => r,
            Err(_) => Err(ConnectError::Timeout(self.timeout)),
        }
    }
}

impl tower_service::Service<Uri> for Dialer {
    type Response = TokioIo<TcpStream>;
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
            let (host, port) =
                split_authority(&auth, 80).ok_or_else(|| ConnectError::BadAddress(auth.clone()))?;
            this.connect(&host, port).await.map(TokioIo::new)
        })
    }
}

/// The pooled origin client.
pub type OriginClient = Client<Dialer, Full<Bytes>>;

/// Builds the pooled client.
pub fn build_client(dialer: Dialer, cfg: &OriginConfig) -> OriginClient {
    Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(cfg.max_idle_per_host)
        .pool_timer(hyper_util::rt::TokioTimer::new())
        .pool_idle_timeout(Duration::from_secs(60))
        .http2_only(cfg.http2)
        .build(dialer)
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
