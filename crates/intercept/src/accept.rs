//! The browser's side of an intercepted CONNECT, shared by the device's client and the edge:
//! read the ClientHello, check that it names the CONNECT's host, finish the handshake with a
//! leaf for that host. What the browser sent after its CONNECT head is read first.

use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::{valid_host_name, CaError, LeafCache};

/// Why an intercepted connection failed before any request (each is logged; nothing is
/// served on that connection, and the proxy goes on).
#[derive(Debug, thiserror::Error)]
pub enum AcceptError {
    #[error("the browser's ClientHello: {0}")]
    Hello(std::io::Error),
    #[error("the ClientHello names {sni:?}, not the CONNECT's host {host}")]
    OtherName { sni: String, host: String },
    #[error("the ClientHello's server name {0:?} is not a valid host name")]
    BadName(String),
    #[error("no certificate for {host}: {source}")]
    Certificate { host: String, source: CaError },
    #[error("TLS handshake with the browser: {0}")]
    Handshake(std::io::Error),
}

impl AcceptError {
    /// The browser closed the connection before sending anything: an unused preconnect,
    /// not a fault worth a warning.
    pub fn is_silent_close(&self) -> bool {
        matches!(self, AcceptError::Hello(e) if e.kind() == std::io::ErrorKind::UnexpectedEof)
    }
}

/// A browser's TLS connection, ended here.
pub struct Accepted<S> {
    pub tls: tokio_rustls::server::TlsStream<Rewind<S>>,
    /// The browser and this proxy agreed on HTTP/2 (ALPN `h2`); else HTTP/1.1.
    pub h2: bool,
}

/// Ends the browser's TLS on `stream` (after `early`, the bytes read past the CONNECT head)
/// with a leaf for `host` from `leaves`. A ClientHello without a server name gets the
/// CONNECT's host; one that names another host, or something that is not a host name, is
/// refused rather than given a certificate for a host the requests do not go to.
pub async fn accept_browser<S>(
    stream: S,
    early: Vec<u8>,
    host: &str,
    leaves: &LeafCache,
) -> Result<Accepted<S>, AcceptError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let acceptor = tokio_rustls::LazyConfigAcceptor::new(
        rustls::server::Acceptor::default(),
        Rewind::new(early, stream),
    );
    let start = acceptor.await.map_err(AcceptError::Hello)?;
    if let Some(sni) = start.client_hello().server_name() {
        let sni = sni.trim_end_matches('.');
        if !valid_host_name(sni) {
            return Err(AcceptError::BadName(sni.to_string()));
        }
        if !sni.eq_ignore_ascii_case(host) {
            return Err(AcceptError::OtherName {
                sni: sni.to_string(),
                host: host.to_string(),
            });
        }
    }
    let config = leaves
        .server_config(host)
        .map_err(|source| AcceptError::Certificate {
            host: host.to_string(),
            source,
        })?;
    let tls = start
        .into_stream(config)
        .await
        .map_err(AcceptError::Handshake)?;
    let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
    Ok(Accepted { tls, h2 })
}

/// `host[:port]` as a request target's authority names it: the port left out when 443,
/// brackets around an IPv6 literal.
pub fn https_authority(host: &str, port: u16) -> String {
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_string()
    };
    if port == 443 {
        host
    } else {
        format!("{host}:{port}")
    }
}

/// A stream whose first bytes were already read (what the browser sent right after its
/// CONNECT head): they are read again first.
pub struct Rewind<S> {
    prefix: Vec<u8>,
    at: usize,
    inner: S,
}

impl<S> Rewind<S> {
    pub fn new(prefix: Vec<u8>, inner: S) -> Self {
        Rewind {
            prefix,
            at: 0,
            inner,
        }
    }

    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Rewind<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if this.at < this.prefix.len() {
            let n = (this.prefix.len() - this.at).min(buf.remaining());
            buf.put_slice(&this.prefix[this.at..this.at + n]);
            this.at += n;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Rewind<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authorities() {
        assert_eq!(https_authority("a.test", 443), "a.test");
        assert_eq!(https_authority("a.test", 8443), "a.test:8443");
        assert_eq!(https_authority("::1", 443), "[::1]");
        assert_eq!(https_authority("::1", 8443), "[::1]:8443");
    }

    #[tokio::test]
    async fn rewind_reads_the_prefix_first() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (a, mut b) = tokio::io::duplex(64);
        b.write_all(b" world").await.unwrap();
        drop(b);
        let mut r = Rewind::new(b"hello".to_vec(), a);
        let mut s = String::new();
        r.read_to_string(&mut s).await.unwrap();
        assert_eq!(s, "hello world");
    }
}
