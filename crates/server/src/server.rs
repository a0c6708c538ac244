//! The server: shared state, accept loops on pre-bound listeners, the admin endpoint and
//! graceful shutdown.

use std::sync::Arc;

use http::{Method, StatusCode};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::acl::Acl;
use crate::auth::Authenticator;
use crate::config::{first_nameserver, ServerConfig};
use crate::conn::{answer_and_close, serve_connection};
use crate::http1;
use crate::limits::{Buffers, ClientLimits};
use crate::metrics::Metrics;
use crate::mode::Mode;
use crate::origin::{
    build_client, tls_config, Connector, Dialer, Resolve, StubResolve, SystemResolve,
};
use crate::reply::Reply;
use crate::request::ClientRequest;
use crate::stage::{StageFactory, Stages};
use crate::stages::default_stages;
pub use crate::state::{Clock, Server, SystemClock};
use crate::transform_pool::TransformPool;

/// Why the server could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The configuration is unusable.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// The cache could not be opened.
    #[error("cache: {0}")]
    Cache(String),
    /// `[auth] users-file` is missing, unreadable or has a bad line.
    #[error("auth.users-file: {0}")]
    Auth(#[from] crate::auth::UsersFileError),
    /// `[origin] tls-roots` names a file that cannot be read or holds no certificate.
    #[error("origin.tls-roots: {0}")]
    TlsRoots(String),
    /// `[intercept]` is on and its CA cannot be used (missing, or a key others can read).
    #[error("{0}")]
    Intercept(String),
}

impl Server {
    /// Builds the proxy with the built-in stages (opens the cache; no sockets yet).
    pub fn new(cfg: ServerConfig) -> Result<Arc<Server>, ServerError> {
        Server::with_stages(cfg, &default_stages())
    }

    /// Builds the proxy with these stages (the built-ins are [`default_stages`]).
    pub fn with_stages(
        cfg: ServerConfig,
        factories: &[Box<dyn StageFactory>],
    ) -> Result<Arc<Server>, ServerError> {
        cfg.validate("configuration")?;
        let stages = Stages::build(&cfg, factories, "configuration")?;
        let acl = Arc::new(Acl::new(&cfg.acl));
        // Read once, at start: a bad users file stops the proxy from starting.
        let auth = Authenticator::from_config(&cfg.auth)?;
        // Loaded at start: a missing CA or a key others can read stops the proxy.
        let intercept = crate::intercept::Interception::from_config(&cfg.intercept)
            .map_err(ServerError::Intercept)?;
        let upstream = cfg.origin.dns_upstream.or_else(|| {
            std::fs::read_to_string("/etc/resolv.conf")
                .ok()
                .and_then(|t| first_nameserver(&t))
        });
        let resolver: Arc<dyn Resolve> = match upstream {
            Some(addr) => Arc::new(StubResolve(webpep_dns::StubResolver::new(
                addr,
                webpep_dns::StubConfig::default(),
            ))),
            None => Arc::new(SystemResolve),
        };
        let dialer = Dialer::new(resolver, &cfg.origin, acl.clone());
        let tls = tls_config(&cfg.origin).map_err(ServerError::TlsRoots)?;
        let client = build_client(Connector::new(dialer.clone(), tls), &cfg.origin);
        let cache = if cfg.cache.enabled {
            let dir = cfg
                .cache
                .dir
                .clone()
                .unwrap_or_else(|| std::env::temp_dir().join("webpep-cache"));
            let mut cc = webpep_cache::CacheConfig::new(dir);
            cc.max_bytes = cfg.cache.max_bytes;
            cc.memory_bytes = cfg.cache.memory_bytes;
            Some(
                webpep_cache::AsyncHttpCache::open(cc)
                    .map_err(|e| ServerError::Cache(e.to_string()))?,
            )
        } else {
            None
        };
        let limits = ClientLimits::new(&cfg.limits);
        let instance = instance_id();
        let stages_filter = stages.filter_bodies();
        Ok(Arc::new(Server {
            acl,
            auth,
            intercept,
            dialer,
            client,
            cache,
            stages,
            metrics: Metrics::default(),
            via: via_values(&instance),
            instance,
            transform_pool: TransformPool::with_memory(
                cfg.limits.transform_workers,
                cfg.limits.transform_memory,
            ),
            clock: Arc::new(SystemClock),
            links: crate::client_link::ClientLinks::new(),
            air_budgets: crate::air_budget::AirBudgets::new(cfg.air.budget_config()),
            measure_links: cfg.air.adapt && (cfg.inline.enabled || stages_filter),
            costs: crate::adapt::Costs::default(),
            making: crate::adapt::Making::default(),
            buffers: Buffers::new(&cfg.limits),
            cfg,
            limits,
        }))
    }

    /// The same server reading the wall-clock time from `clock` (the cache's request and
    /// response times, freshness and `Age`). For tests; call it before the server is shared.
    ///
    /// # Panics
    ///
    /// If another `Arc` to the server exists (it is serving, or was cloned).
    pub fn with_clock(mut self: Arc<Self>, clock: Arc<dyn Clock>) -> Arc<Self> {
        Arc::get_mut(&mut self)
            .expect("Server::with_clock before the server is shared")
            .clock = clock;
        self
    }

    /// The same server taking every client's link to be `link`, whatever its connection
    /// measures (tests: loopback measures no link worth scaling by). Call it before the
    /// server is shared.
    ///
    /// # Panics
    ///
    /// If another `Arc` to the server exists.
    pub fn with_fixed_link(mut self: Arc<Self>, link: crate::client_link::ClientLink) -> Arc<Self> {
        let s =
            Arc::get_mut(&mut self).expect("Server::with_fixed_link before the server is shared");
        s.links = crate::client_link::ClientLinks::fixed(link);
        s.measure_links = true;
        self
    }

    /// The configuration in use.
    pub fn config(&self) -> &ServerConfig {
        &self.cfg
    }

    /// Stylesheets and scripts inlined into pages so far (`webpep_inlined_objects_total`).
    pub fn inlined_objects(&self) -> u64 {
        self.stages
            .counter("webpep_inlined_objects_total")
            .unwrap_or(0)
    }

    /// Prometheus text of the counters.
    pub fn metrics_text(&self) -> String {
        let mut s = self.metrics.render();
        s.push_str(&self.transform_pool.metrics_text());
        s.push_str(&self.costs.metrics_text());
        s.push_str(&format!(
            "# HELP webpep_buffered_bytes Bytes of request and response bodies held in memory now (limits.max-buffered-bytes).\n# TYPE webpep_buffered_bytes gauge\nwebpep_buffered_bytes {}\n",
            self.buffers.held()
        ));
        for c in self.stages.counters() {
            s.push_str(&format!(
                "# HELP {0} {1}\n# TYPE {0} counter\n{0} {2}\n",
                c.name,
                c.help,
                c.value.load(std::sync::atomic::Ordering::Relaxed)
            ));
        }
        if let Some(c) = &self.cache {
            let st = c.stats();
            s.push_str(&format!(
                "# HELP webpep_cache_entries Entries in the cache.\n# TYPE webpep_cache_entries gauge\nwebpep_cache_entries {}\n# HELP webpep_cache_bytes Bytes in the cache.\n# TYPE webpep_cache_bytes gauge\nwebpep_cache_bytes {}\n",
                st.entries, st.bytes
            ));
        }
        s
    }

    /// Serves proxy traffic on `listeners` (every mode on each) and metrics on `admin`;
    /// returns after `cancel` fires and in-flight requests finished (or the grace period
    /// passed).
    pub async fn serve(
        self: Arc<Self>,
        listeners: Vec<std::net::TcpListener>,
        admin: Option<std::net::TcpListener>,
        cancel: CancellationToken,
    ) -> std::io::Result<()> {
        let tracker = TaskTracker::new();
        let hard = CancellationToken::new();
        // Held while serving; the kernel detaches the program when it drops.
        let _initial_rto = self.initial_rto(&listeners);
        for l in listeners {
            l.set_nonblocking(true)?;
            let l = TcpListener::from_std(l)?;
            tracing::info!(addr = ?l.local_addr().ok(), "proxy listening");
            let (srv, cancel, hard, tr) =
                (self.clone(), cancel.clone(), hard.clone(), tracker.clone());
            tracker.spawn(async move { accept_loop(srv, l, cancel, hard, tr).await });
        }
        if let Some(a) = admin {
            a.set_nonblocking(true)?;
            let a = TcpListener::from_std(a)?;
            tracing::info!(addr = ?a.local_addr().ok(), "admin listening");
            let (srv, cancel) = (self.clone(), cancel.clone());
            tracker.spawn(async move { admin_loop(srv, a, cancel).await });
        }
        tracker.close();
        cancel.cancelled().await;
        let grace = self.cfg.limits.shutdown_grace.0;
        if tokio::time::timeout(grace, tracker.wait()).await.is_err() {
            tracing::warn!(
                ?grace,
                "shutdown grace period over; closing remaining connections"
            );
            hard.cancel();
            let _ = tokio::time::timeout(std::time::Duration::from_secs(1), tracker.wait()).await;
        }
        Ok(())
    }

    /// `[air] initial-rto` for the connections of `listeners` (matched by namespace and
    /// listening port, so the origin side keeps the kernel's timer). A failure is logged, not
    /// fatal, like the other air tuning.
    fn initial_rto(
        &self,
        listeners: &[std::net::TcpListener],
    ) -> Option<crate::initial_rto::InitialRto> {
        use crate::initial_rto::{netns_cookie, InitialRto, RtoRule};
        use std::os::fd::AsFd;
        let timeout = self.cfg.air.initial_rto.as_ref()?.0;
        let rules = listeners
            .iter()
            .map(|l| {
                Ok(RtoRule {
                    netns_cookie: netns_cookie(l.as_fd())?,
                    local_port: Some(l.local_addr()?.port()),
                    timeout,
                })
            })
            .collect::<std::io::Result<Vec<_>>>();
        match rules.and_then(|r| InitialRto::install(&r)) {
            Ok(guard) => Some(guard),
            Err(e) => {
                tracing::warn!(error = %e, "air.initial-rto not applied; the kernel's 1 s stays");
                None
            }
        }
    }

    /// Answers one parsed request (everything but CONNECT).
    pub(crate) async fn handle(self: Arc<Self>, req: ClientRequest) -> Reply {
        match &req.mode {
            Mode::Local { path } if path == "/proxy.pac" || path.starts_with("/proxy.pac?") => {
                pac_file(&req)
            }
            Mode::Local { path } => Reply::text(
                StatusCode::NOT_FOUND,
                &format!("no such path on this proxy: {path}"),
            ),
            Mode::Connect { .. } => Reply::text(StatusCode::BAD_REQUEST, "unexpected CONNECT"),
            _ => crate::proxy::proxy_http(self.clone(), Arc::new(req)).await,
        }
    }
}

/// A proxy auto-config file (`/proxy.pac`) that sends browsers through this proxy at the
/// address they fetched it from, and lets them go direct when the proxy is unreachable.
fn pac_file(req: &ClientRequest) -> Reply {
    let here = req
        .head
        .headers
        .get(http::header::HOST)
        .and_then(|v| v.to_str().ok())
        .filter(|h| {
            !h.is_empty()
                && h.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b".-:[]".contains(&b))
        })
        .map_or_else(|| req.local.to_string(), str::to_string);
    let mut r = Reply::text(StatusCode::OK, "");
    r.headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/x-ns-proxy-autoconfig"),
    );
    r.body = crate::reply::Body::Full(bytes::Bytes::from(format!(
        "function FindProxyForURL(url, host) {{\n  if (isPlainHostName(host) || host == \"localhost\" || shExpMatch(host, \"127.*\"))\n    return \"DIRECT\";\n  return \"PROXY {here}; DIRECT\";\n}}\n"
    )));
    r
}

/// A short id that differs between proxy processes and between servers in one process.
/// The `Via` entries `http1::add_via` would add for HTTP/1.0 and 1.1.
fn via_values(instance: &str) -> [http::HeaderValue; 2] {
    [http::Version::HTTP_10, http::Version::HTTP_11].map(|v| {
        let mut h = http::HeaderMap::new();
        http1::add_via(&mut h, v, instance);
        h.remove(http::header::VIA)
            .unwrap_or_else(|| http::HeaderValue::from_static("1.1 webpep"))
    })
}

fn instance_id() -> String {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "{:x}",
        (std::process::id() as u64) << 32 ^ (t as u64) ^ ((n as u64) << 20)
    )
}

async fn accept_loop(
    server: Arc<Server>,
    l: TcpListener,
    cancel: CancellationToken,
    hard: CancellationToken,
    tracker: TaskTracker,
) {
    while let Some((s, peer)) = webpep_accept::accept(&l, &cancel, "proxy").await {
        let (srv, c, h) = (server.clone(), cancel.clone(), hard.clone());
        tracker.spawn(async move { serve_connection(srv, s, peer, c, h).await });
    }
}

async fn admin_loop(server: Arc<Server>, l: TcpListener, cancel: CancellationToken) {
    while let Some((mut s, _peer)) = webpep_accept::accept(&l, &cancel, "metrics").await {
        let srv = server.clone();
        tokio::spawn(async move {
            let mut buf = bytes::BytesMut::with_capacity(1024);
            let head = loop {
                match http1::parse_request_head(&buf, 16 * 1024) {
                    Ok(Some(h)) => break Some(h),
                    Ok(None) => {}
                    Err(_) => break None,
                }
                match tokio::time::timeout(
                    std::time::Duration::from_secs(10),
                    tokio::io::AsyncReadExt::read_buf(&mut s, &mut buf),
                )
                .await
                {
                    Ok(Ok(n)) if n > 0 => {}
                    _ => return,
                }
            };
            let reply = match head {
                Some(h)
                    if h.method == Method::GET
                        && (h.target == "/metrics" || h.target.starts_with("/metrics?")) =>
                {
                    let mut r = Reply::text(StatusCode::OK, "");
                    r.headers.insert(
                        http::header::CONTENT_TYPE,
                        http::HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
                    );
                    r.body = crate::reply::Body::Full(bytes::Bytes::from(srv.metrics_text()));
                    r
                }
                Some(_) => Reply::text(StatusCode::NOT_FOUND, "only /metrics here"),
                None => Reply::text(StatusCode::BAD_REQUEST, "malformed request"),
            };
            answer_and_close(&mut s, reply, &srv.metrics).await;
        });
    }
}
