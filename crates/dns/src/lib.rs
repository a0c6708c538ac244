//! webpep's DNS side (papers 002 §3.2 and §5, 003 §6).
//!
//! - [`rewrite_response`]: the pure core of DNS rewriting. For names that match a
//!   [`RewritePolicy`], an upstream answer gets the proxy's address(es) first with a long TTL,
//!   and (for the mobility fallback of 002 §5) the original addresses after them.
//! - [`DnsProxy`]: `webpep dns`, a UDP and TCP DNS proxy that forwards to one upstream resolver
//!   and rewrites its answers.
//! - [`StubResolver`]: the edge proxy's own caching resolver for origin names, so that lookups
//!   happen on the wired side and are cached for their TTL, on an injectable [`Clock`].
//! - [`FileConfig`]: the TOML configuration file of `webpep dns`.
//! - [`TcpFrames`]: the length-prefixed framing of DNS over TCP as a pure decoder over bytes.

mod config;
mod error;
mod policy;
mod proxy;
mod rewrite;
mod stub;
mod upstream;
mod wire;

pub use config::{parse_config_file, FileConfig};
pub use error::DnsError;
/// The DNS wire-format library this crate is built on, re-exported so that callers (the fuzz
/// target, tests elsewhere) parse and build messages with the very same version.
pub use hickory_proto;
pub use ipnet;
pub use policy::{NameMatch, RewritePolicy, DEFAULT_PROXY_TTL};
pub use proxy::{loopback_only, DnsProxy, DnsProxyConfig, DnsProxyLimits, DnsProxyStats};
pub use rewrite::rewrite_response;
pub use stub::{Clock, StubConfig, StubResolver, StubStats, TokioClock};
/// Re-exported so that callers of [`DnsProxy::serve`] need not depend on `tokio-util`.
pub use tokio_util::sync::CancellationToken;
pub use wire::{FrameError, TcpFrames};
