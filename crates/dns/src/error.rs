//! The crate's error type.

/// What can go wrong in the DNS proxy, the rewriter and the stub resolver.
#[derive(Debug, thiserror::Error)]
pub enum DnsError {
    /// A packet that is not a well-formed DNS message (or not the kind expected here).
    #[error("malformed DNS message: {0}")]
    Malformed(String),
    /// A message could not be encoded (e.g. a name too long).
    #[error("DNS encoding: {0}")]
    Encode(String),
    /// A host name that is not a valid DNS name.
    #[error("invalid host name {0:?}")]
    InvalidName(String),
    /// The name has no address (NXDOMAIN, or no A/AAAA record).
    #[error("{0}: no such host")]
    NotFound(String),
    /// The upstream resolver failed: timeout, SERVFAIL, refused, unrelated answers.
    #[error("upstream DNS: {0}")]
    Upstream(String),
    /// A configuration file that cannot be used.
    #[error("configuration: {0}")]
    Config(String),
    /// A socket error.
    #[error("DNS socket: {0}")]
    Io(#[from] std::io::Error),
}
