//! webpep's edge proxy for browsers without client software (`webpep server`, issue 4):
//! an HTTP/1.1 proxy serving explicit (absolute-form), CONNECT, transparent (DNS rewriting
//! or L4 interception) and URL-rewriting requests on the same listener, with a shared
//! cache, compression, image transcoding, air-side TCP tuning, access control, metrics and
//! graceful shutdown (DESIGN §2, §3, §5, §9).
//!
//! Layout: [`http1`] (pure wire format, fuzzed) → [`conn`] (one client connection:
//! pipelining, in-order answers) → [`server`] (accept loops, admin, shutdown) → [`proxy`]
//! (the response pipeline's phases) with [`stage`] (the stage trait, its factories and
//! registry) and [`stages`] (one file per built-in stage: compress, transcode, URL rewrite,
//! inline, prefetch, Server-Timing), [`subrequest`] (the handle through which stages fetch
//! other URLs through the pipeline), [`optimize`] (what they share),
//! [`origin`] (resolver, ACL-checked dialer, pooled client), [`tunnel`] (CONNECT),
//! [`tls_relay`] (TLS relayed by its server name, for DNS rewriting and port-443 interception),
//! [`intercept`] (opt-in: CONNECTs opened with the edge's own CA and their requests served),
//! [`transform_pool`] (transforms bounded to a few at once), [`prefetch`] (the prefetch
//! stage's bookkeeping: claims, joins, a page's objects), [`inline`] (the inline stage's
//! decisions),
//! [`acl`], [`auth`] (proxy authentication), [`limits`] (per-client connections and rate), [`mode`], [`air`], [`metrics`],
//! [`config`].

pub mod acl;
pub mod adapt;
pub mod air;
pub mod air_budget;
pub mod auth;
pub mod client_link;
pub mod config;
pub mod conn;
pub mod front;
pub mod http1;
pub mod initial_rto;
pub mod inline;
pub mod intercept;
pub mod limits;
pub mod metrics;
pub mod mode;
pub mod optimize;
pub mod origin;
pub mod prefetch;
pub mod proxy;
pub mod quic;
pub mod reply;
pub mod request;
pub mod server;
pub mod stage;
pub mod stages;
pub mod state;
pub mod subrequest;
pub mod tls_relay;
pub mod transform_pool;
pub mod tunnel;
pub mod url_rewrite;

pub use config::{ConfigError, ServerConfig};
/// Re-exported for the CLI (CIDR flags).
pub use ipnet;
pub use server::ServerError;
pub use state::Server;
pub use tokio_util::sync::CancellationToken;
/// Re-exported for the CLI (config overrides).
pub use toml;
