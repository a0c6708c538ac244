//! Establishing connections: TCP (to the origin or the proxy), an optional `CONNECT` tunnel,
//! and an optional TLS handshake with ALPN. Every socket is created by the calling task.

use std::fmt;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::BytesMut;
use rustls_pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Instant;
use url::{Host, Url};

use crate::error::FetchError;
use crate::h1;

/// The scheme, host and port an object is fetched from.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Origin {
    pub https: bool,
    /// Lower-case host name, or an IP literal (IPv6 without brackets).
    pub host: String,
    pub port: u16,
}

impl Origin {
    pub fn of(url: &Url) -> Result<Origin, FetchError> {
        let https = match url.scheme() {
            "http" => false,
            "https" => true,
            other => return Err(FetchError::UnsupportedScheme(other.to_string())),
        };
        let host = match url.host() {
            Some(Host::Domain(d)) => d.to_ascii_lowercase(),
            Some(Host::Ipv4(ip)) => ip.to_string(),
            Some(Host::Ipv6(ip)) => ip.to_string(),
            None => {
                return Err(FetchError::InvalidUrl {
                    url: url.to_string(),
                    reason: "no host".into(),
                })
            }
        };
        let port = url
            .port_or_known_default()
            .unwrap_or(if https { 443 } else { 80 });
        Ok(Origin { https, host, port })
    }

    /// The host as an IP address if it is a literal (no lookup needed).
    pub fn ip(&self) -> Option<IpAddr> {
        self.host.parse().ok()
    }

    fn default_port(&self) -> u16 {
        if self.https {
            443
        } else {
            80
        }
    }

    /// `host[:port]` for Host headers (port omitted when default).
    pub fn host_header(&self) -> String {
        let h = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        if self.port == self.default_port() {
            h
        } else {
            format!("{h}:{}", self.port)
        }
    }

    /// `host:port` for CONNECT.
    pub fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}://{}",
            if self.https { "https" } else { "http" },
            self.authority()
        )
    }
}

/// A connected byte stream, plain or TLS.
pub enum Stream {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// The application protocol spoken on a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    Http10,
    Http11,
    H2,
}

impl Protocol {
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Http10 => "http/1.0",
            Protocol::Http11 => "http/1.1",
            Protocol::H2 => "h2",
        }
    }
}

/// What a connection needs to be set up.
#[derive(Debug, Clone)]
pub struct Target {
    /// Addresses to try in order (the origin's, or the proxy's).
    pub addrs: Vec<SocketAddr>,
    /// Tunnel through the proxy with CONNECT to this origin first.
    pub tunnel_to: Option<Origin>,
    /// Do TLS for this origin (server name) after TCP (and the tunnel).
    pub tls_for: Option<Origin>,
    /// ALPN protocols offered.
    pub alpn: Vec<Vec<u8>>,
}

/// An established connection and the times its setup phases took.
pub struct Established {
    pub stream: Stream,
    pub peer: SocketAddr,
    pub alpn_h2: bool,
    pub tcp_start: Instant,
    pub tls: Option<(Instant, Instant)>,
    pub end: Instant,
}

fn connect_error(addr: SocketAddr, e: &io::Error) -> FetchError {
    if e.kind() == io::ErrorKind::ConnectionRefused {
        FetchError::ConnectionRefused(addr)
    } else {
        FetchError::Connect {
            addr,
            reason: e.to_string(),
        }
    }
}

async fn tcp_connect(addrs: &[SocketAddr]) -> Result<(TcpStream, SocketAddr), FetchError> {
    let mut last: Option<FetchError> = None;
    for &addr in addrs {
        match TcpStream::connect(addr).await {
            Ok(s) => {
                let _ = s.set_nodelay(true);
                return Ok((s, addr));
            }
            Err(e) => last = Some(connect_error(addr, &e)),
        }
    }
    Err(last.unwrap_or_else(|| FetchError::Connect {
        addr: SocketAddr::from(([0, 0, 0, 0], 0)),
        reason: "no address to connect to".into(),
    }))
}

async fn connect_tunnel(
    s: &mut TcpStream,
    to: &Origin,
    user_agent: &str,
    max_head: usize,
) -> Result<(), FetchError> {
    let req = h1::RequestHead {
        method: "CONNECT".into(),
        target: to.authority(),
        http11: true,
        headers: vec![
            ("Host".into(), to.authority()),
            ("User-Agent".into(), user_agent.into()),
        ],
    };
    let fail = |reason: String| FetchError::ProxyConnect {
        target: to.authority(),
        reason,
    };
    s.write_all(&req.to_bytes())
        .await
        .map_err(|e| fail(e.to_string()))?;
    let mut buf = BytesMut::with_capacity(1024);
    loop {
        // Read byte-wise so nothing after the proxy's head is consumed.
        let b = s.read_u8().await.map_err(|e| fail(e.to_string()))?;
        buf.extend_from_slice(&[b]);
        match h1::parse_head(&buf, max_head) {
            Ok(None) => continue,
            Ok(Some(head)) if (200..300).contains(&head.status) => return Ok(()),
            Ok(Some(head)) => return Err(fail(format!("{} {}", head.status, head.reason))),
            Err(e) => return Err(fail(e.to_string())),
        }
    }
}

/// How long a connection's set-up may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SetupTimeouts {
    /// TCP connect plus the proxy tunnel; TLS too unless `tls_handshake` is set.
    pub connect: Duration,
    /// The TLS handshake's own limit, counted from its start, as Chromium's (30 s, its
    /// `SSLConnectJob` restarts its timer for the handshake once TCP is up). `None`: the
    /// handshake shares `connect`'s budget.
    pub tls_handshake: Option<Duration>,
}

/// Set up a connection: TCP, then the tunnel, then TLS, within `timeouts`.
pub async fn establish(
    target: &Target,
    tls: Option<Arc<rustls::ClientConfig>>,
    timeouts: SetupTimeouts,
    user_agent: &str,
    max_head: usize,
) -> Result<Established, (FetchError, Instant)> {
    let tcp_start = Instant::now();
    let deadline = tcp_start + timeouts.connect;
    let first_addr = target
        .addrs
        .first()
        .copied()
        .unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)));
    let connect_timed_out = || {
        (
            FetchError::ConnectTimeout {
                addr: first_addr,
                after: timeouts.connect,
            },
            Instant::now(),
        )
    };
    let transport = async {
        let (mut tcp, peer) = tcp_connect(&target.addrs).await?;
        if let Some(to) = &target.tunnel_to {
            connect_tunnel(&mut tcp, to, user_agent, max_head).await?;
        }
        Ok::<_, FetchError>((tcp, peer))
    };
    let (tcp, peer) = match tokio::time::timeout_at(deadline, transport).await {
        Ok(Ok(t)) => t,
        Ok(Err(e)) => return Err((e, Instant::now())),
        Err(_) => return Err(connect_timed_out()),
    };
    let Some(origin) = &target.tls_for else {
        return Ok(Established {
            stream: Stream::Plain(tcp),
            peer,
            alpn_h2: false,
            tcp_start,
            tls: None,
            end: Instant::now(),
        });
    };
    let Some(base) = tls else {
        return Err((
            FetchError::Tls("no CA configured for https".into()),
            Instant::now(),
        ));
    };
    let mut cfg = (*base).clone();
    cfg.alpn_protocols = target.alpn.clone();
    let name = ServerName::try_from(origin.host.clone()).map_err(|e| {
        (
            FetchError::Tls(format!("server name {:?}: {e}", origin.host)),
            Instant::now(),
        )
    })?;
    let connector = tokio_rustls::TlsConnector::from(Arc::new(cfg));
    let tls_start = Instant::now();
    let handshake = connector.connect(name, tcp);
    let done = match timeouts.tls_handshake {
        Some(limit) => tokio::time::timeout(limit, handshake).await.map_err(|_| {
            (
                FetchError::TlsHandshakeTimeout {
                    host: origin.host.clone(),
                    after: limit,
                },
                Instant::now(),
            )
        })?,
        None => tokio::time::timeout_at(deadline, handshake)
            .await
            .map_err(|_| connect_timed_out())?,
    };
    let stream = done.map_err(|e| (FetchError::Tls(e.to_string()), Instant::now()))?;
    let tls_end = Instant::now();
    let alpn_h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
    Ok(Established {
        stream: Stream::Tls(Box::new(stream)),
        peer,
        alpn_h2,
        tcp_start,
        tls: Some((tls_start, tls_end)),
        end: tls_end,
    })
}

/// Build the TLS client configuration trusting the CA certificates in `pem`.
pub fn tls_config(pem: &[u8]) -> Result<Arc<rustls::ClientConfig>, String> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::CertificateDer;
    let mut roots = rustls::RootCertStore::empty();
    let mut n = 0;
    for cert in CertificateDer::pem_slice_iter(pem) {
        let cert = cert.map_err(|e| format!("reading CA PEM: {e}"))?;
        roots
            .add(cert)
            .map_err(|e| format!("CA certificate rejected: {e}"))?;
        n += 1;
    }
    if n == 0 {
        return Err("no certificate in the CA PEM".into());
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS versions: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(cfg))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins() {
        let u = Url::parse("http://WWW.Example.test/a").expect("url");
        let o = Origin::of(&u).expect("origin");
        assert_eq!(o.host_header(), "www.example.test");
        assert_eq!(o.authority(), "www.example.test:80");
        let u = Url::parse("https://[::1]:8443/").expect("url");
        let o = Origin::of(&u).expect("origin");
        assert_eq!(o.host_header(), "[::1]:8443");
        assert!(o.ip().is_some());
        assert!(Origin::of(&Url::parse("ftp://x/").expect("url")).is_err());
        assert!(tls_config(b"not pem").is_err());
    }
}
