//! Errors: per-object fetch failures (recorded, never fatal to a page load) and configuration errors.

use std::net::SocketAddr;
use std::time::Duration;

/// Why one object (or one connection or lookup) failed. Recorded in the object's entry; the page
/// load goes on with the rest.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FetchError {
    /// The URL could not be parsed or resolved against its base.
    #[error("invalid URL {url:?}: {reason}")]
    InvalidUrl { url: String, reason: String },
    /// Only http and https are fetched.
    #[error("unsupported URL scheme {0:?}")]
    UnsupportedScheme(String),
    /// The resolver gave no usable answer.
    #[error("DNS lookup of {host} failed: {reason}")]
    Dns { host: String, reason: String },
    /// The peer refused the TCP connection.
    #[error("connection to {0} refused")]
    ConnectionRefused(SocketAddr),
    /// TCP connect (plus proxy tunnel, and TLS where it has no limit of its own) did not
    /// finish within the connect timeout.
    #[error("connecting to {addr} timed out after {after:?}")]
    ConnectTimeout { addr: SocketAddr, after: Duration },
    /// The TLS handshake did not finish within its own limit, counted from its start.
    #[error("TLS handshake with {host} not done within {after:?}")]
    TlsHandshakeTimeout { host: String, after: Duration },
    /// Any other connect failure.
    #[error("connecting to {addr} failed: {reason}")]
    Connect { addr: SocketAddr, reason: String },
    /// The proxy answered a CONNECT with a non-2xx status (or garbage).
    #[error("proxy refused CONNECT {target}: {reason}")]
    ProxyConnect { target: String, reason: String },
    /// TLS handshake or configuration failure.
    #[error("TLS: {0}")]
    Tls(String),
    /// No response bytes for the response timeout while a request was outstanding.
    #[error("no response progress within {0:?}")]
    ResponseTimeout(Duration),
    /// The response could not be parsed.
    #[error("bad response: {0}")]
    BadResponse(String),
    /// The connection closed in the middle of a response.
    #[error("connection closed in the middle of the response")]
    Truncated,
    /// The connection closed before any byte of the response, more often than the retry limit.
    #[error("connection closed before the response ({retries} retries)")]
    ConnectionClosed { retries: u32 },
    /// The response body exceeded the configured maximum.
    #[error("response larger than {0} bytes")]
    TooLarge(u64),
    /// HTTP/2 protocol or stream error.
    #[error("HTTP/2: {0}")]
    H2(String),
    /// An I/O error on an established connection.
    #[error("I/O: {0}")]
    Io(String),
    /// The whole-page timeout (this long) expired before this object finished.
    #[error("page load timed out after {0:?}")]
    PageTimeout(Duration),
    /// The page has more objects than the configured maximum; this one was not fetched.
    #[error("too many objects on the page (limit {0})")]
    TooManyObjects(usize),
    /// The main page redirected in a loop or more often than the limit.
    #[error("{0}")]
    Redirects(String),
    /// A real browser's own error for the request (Chromium's `net::ERR_…` text).
    #[error("browser: {0}")]
    Browser(String),
}

impl FetchError {
    /// The error with its durations multiplied by `k` (a load run `k` times faster than the
    /// link states its timeouts in the link's own time).
    pub fn scaled(self, k: f64) -> FetchError {
        if !(k.is_finite() && k > 0.0) || k == 1.0 {
            return self;
        }
        match self {
            FetchError::ConnectTimeout { addr, after } => FetchError::ConnectTimeout {
                addr,
                after: after.mul_f64(k),
            },
            FetchError::TlsHandshakeTimeout { host, after } => FetchError::TlsHandshakeTimeout {
                host,
                after: after.mul_f64(k),
            },
            FetchError::ResponseTimeout(d) => FetchError::ResponseTimeout(d.mul_f64(k)),
            FetchError::PageTimeout(d) => FetchError::PageTimeout(d.mul_f64(k)),
            other => other,
        }
    }

    /// A short, stable name for the kind of failure (for tables and counters).
    pub fn kind(&self) -> &'static str {
        match self {
            FetchError::InvalidUrl { .. } => "invalid-url",
            FetchError::UnsupportedScheme(_) => "unsupported-scheme",
            FetchError::Dns { .. } => "dns",
            FetchError::ConnectionRefused(_) => "refused",
            FetchError::ConnectTimeout { .. } => "connect-timeout",
            FetchError::Connect { .. } => "connect",
            FetchError::ProxyConnect { .. } => "proxy-connect",
            FetchError::Tls(_) => "tls",
            FetchError::TlsHandshakeTimeout { .. } => "tls-timeout",
            FetchError::ResponseTimeout(_) => "timeout",
            FetchError::BadResponse(_) => "bad-response",
            FetchError::Truncated => "truncated",
            FetchError::ConnectionClosed { .. } => "closed",
            FetchError::TooLarge(_) => "too-large",
            FetchError::H2(_) => "h2",
            FetchError::Io(_) => "io",
            FetchError::PageTimeout(_) => "page-timeout",
            FetchError::TooManyObjects(_) => "too-many-objects",
            FetchError::Redirects(_) => "redirects",
            FetchError::Browser(_) => "browser",
        }
    }

    pub(crate) fn io(e: &std::io::Error) -> FetchError {
        FetchError::Io(e.to_string())
    }
}

/// A configuration value that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("unknown browser policy {0:?} (expected http10, http11, http11-N, pipelining, pipelining-D, pipelining-NxD or h2)")]
    UnknownPolicy(String),
    #[error("invalid policy parameter in {0:?}: must be a whole number from 1 to 64")]
    BadPolicyParameter(String),
    #[error("CA certificate PEM: {0}")]
    CaPem(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_are_stated_in_link_time() {
        let e = FetchError::ResponseTimeout(Duration::from_millis(1200)).scaled(10.0);
        assert_eq!(e, FetchError::ResponseTimeout(Duration::from_secs(12)));
        assert_eq!(e.to_string(), "no response progress within 12s");
        let e = FetchError::TlsHandshakeTimeout {
            host: "a.test".into(),
            after: Duration::from_secs(3),
        }
        .scaled(10.0);
        assert_eq!(
            e.to_string(),
            "TLS handshake with a.test not done within 30s"
        );
        assert_eq!(e.kind(), "tls-timeout");
        let addr: SocketAddr = "10.0.0.1:80".parse().unwrap();
        let e = FetchError::ConnectTimeout {
            addr,
            after: Duration::from_millis(7500),
        }
        .scaled(10.0);
        assert!(e.to_string().ends_with("timed out after 75s"), "{e}");
        let e = FetchError::PageTimeout(Duration::from_secs(180)).scaled(10.0);
        assert_eq!(e, FetchError::PageTimeout(Duration::from_secs(1800)));
        assert_eq!(e.to_string(), "page load timed out after 1800s");
        // Other errors, and a scale of 1, are left as they are.
        assert_eq!(FetchError::Truncated.scaled(10.0), FetchError::Truncated);
        let d = FetchError::ResponseTimeout(Duration::from_secs(3));
        assert_eq!(d.clone().scaled(1.0), d);
    }
}
