//! The lab's virtual web hosting (DESIGN §7.3, paper 000 §2.2): a replay server that serves a
//! [`webpep_corpus::Corpus`] over HTTP/1.1 (keep-alive, pipelining, optional pre-emptive close),
//! HTTP/2 and TLS with a lab CA; an authoritative DNS server for the corpus domains; and the
//! caching resolver the `edge` namespace runs.
//!
//! This crate knows nothing of network namespaces. Every server starts from sockets the caller
//! has already bound (std `TcpListener` / `UdpSocket`, made on a thread that entered the right
//! namespace) and runs as a future on the caller's tokio runtime; the lab runs each on a
//! current-thread runtime (`enable_all`) on such a thread. Every server stops when its
//! [`CancellationToken`] fires, closing its connections before the future returns.
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use webpep_replay::*;
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let corpus = webpep_corpus::Corpus::open(std::path::Path::new("corpus"))?;
//! let server = ReplayServer::new(&corpus, ReplayConfig::default());
//! let ca = LabCa::load_or_generate(std::path::Path::new("lab"))?; // writes lab/ca.pem
//! let tls = ca.server_config(server.domains())?;
//! // one address per domain: 127.0.0.2, 127.0.0.3, ... (in `net` in the lab)
//! let mut listeners = Vec::new();
//! for (i, domain) in server.domains().iter().enumerate() {
//!     let ip = std::net::Ipv4Addr::new(127, 0, 0, 2 + i as u8);
//!     listeners.push(Listener {
//!         socket: std::net::TcpListener::bind((ip, 80))?,
//!         domain: Some(domain.clone()),
//!         tls: None,
//!     });
//!     listeners.push(Listener {
//!         socket: std::net::TcpListener::bind((ip, 443))?,
//!         domain: Some(domain.clone()),
//!         tls: Some(tls.clone()),
//!     });
//! }
//! let cancel = tokio_util::sync::CancellationToken::new();
//! let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
//! rt.block_on(server.serve(listeners, cancel.clone()))?;
//! # Ok(()) }
//! ```

mod content;
pub mod dns;
mod h1;
pub mod resolver;
pub mod server;
pub mod tls;

pub use dns::{AuthDns, AuthDnsStats, DnsError, Transport, DEFAULT_TTL};
pub use resolver::{CachingResolver, Clock, ResolverConfig, ResolverStats, TokioClock};
pub use server::{
    ConnectionStats, Listener, Protocol, ReplayConfig, ReplayError, ReplayServer, ReplayStats,
};
pub use tls::{IssuedCert, LabCa, TlsError, ALPN};
pub use tokio_util::sync::CancellationToken;
