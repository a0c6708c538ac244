//! The edge proxy's shared state: what every front end, the pipeline and the transports
//! hold through `Arc<Server>`. Building it and serving on sockets are in [`crate::server`];
//! this module imports only what the state is made of, so the modules that use the state
//! import it without importing each other.

use std::sync::Arc;
use std::time::SystemTime;

use crate::acl::Acl;
use crate::auth::Authenticator;
use crate::config::ServerConfig;
use crate::limits::{Buffers, ClientLimits};
use crate::metrics::Metrics;
use crate::origin::{Dialer, OriginClient};
use crate::stage::Stages;
use crate::transform_pool::TransformPool;

/// Where the pipeline reads the wall-clock time: the cache's request and response times and
/// its freshness decisions. Injectable ([`Server::with_clock`]) so that a test moves time on
/// by setting a clock, not by sleeping.
pub trait Clock: Send + Sync {
    /// The time now.
    fn now(&self) -> SystemTime;
}

/// The default clock: the system's.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }
}

/// The edge proxy.
pub struct Server {
    pub(crate) cfg: ServerConfig,
    pub(crate) acl: Arc<Acl>,
    /// Proxy authentication, when `[auth] users-file` is set.
    pub(crate) auth: Option<Authenticator>,
    /// TLS interception of CONNECTs, when `[intercept]` is enabled.
    pub(crate) intercept: Option<crate::intercept::Interception>,
    pub(crate) dialer: Dialer,
    pub(crate) client: OriginClient,
    pub(crate) cache: Option<webpep_cache::AsyncHttpCache>,
    /// The stages the configuration turns on, in order ([`crate::stage`]).
    pub(crate) stages: Stages,
    pub(crate) metrics: Metrics,
    /// Per-client connection and rate limits.
    pub(crate) limits: ClientLimits,
    /// The budget of bodies held in memory (`max-buffered-bytes`).
    pub(crate) buffers: Arc<Buffers>,
    /// Names this process in `Via` (loop detection).
    pub(crate) instance: String,
    /// This process's `Via` entries for HTTP/1.0 and 1.1 messages (`1.x webpep-INSTANCE`),
    /// made once rather than per request.
    pub(crate) via: [http::HeaderValue; 2],
    /// Where transforms run, at most `[limits] transform-workers` at once.
    pub(crate) transform_pool: TransformPool,
    /// The wall clock of the pipeline ([`SystemClock`] unless [`Server::with_clock`]).
    pub(crate) clock: Arc<dyn Clock>,
    /// Each client's link as last measured ([`crate::adapt`] scales with it).
    pub(crate) links: crate::client_link::ClientLinks,
    /// Each client's budget of bytes in flight ([`crate::air_budget`]).
    pub(crate) air_budgets: crate::air_budget::AirBudgets,
    /// Some stage scales with the client's link (inlining, body filters): the link is read
    /// after every response, not only for the access log.
    pub(crate) measure_links: bool,
    /// What each kind of transform has cost and saved ([`crate::adapt::CostEstimate`]).
    pub(crate) costs: crate::adapt::Costs,
    /// The variants being made in the background for the next client.
    pub(crate) making: crate::adapt::Making,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}
