//! The request pipeline's optimizations as stages, in the manner of Pingora's `ProxyHttp`
//! phases and mitmproxy's addons: a [`Stage`] has one hook per phase, each doing nothing by
//! default, and a [`StageFactory`] declares the stage's configuration keys (with defaults and
//! help), checks them at start-up, registers its metrics and builds the stage. The built-in
//! stages are listed by [`crate::stages::default_stages`] through the same mechanism any new stage uses: a new
//! stage is one file in `stages/` and one line there.
//!
//! Phases of one request, in order (the pipeline itself is [`crate::proxy`]):
//! `upstream_request_filter` (the request to the origin) → `before_lookup` (a client's
//! request may wait, e.g. for a prefetch of its URL under way) → cache lookup by
//! `variant_part`s → origin → `upstream_response_filter` (before the cache stores the
//! original) → `page_filter`s (the original bytes at hand: a miss, a revalidation or a hit
//! on the original; may replace the body, e.g. with stylesheets inlined) → `body_filter`s in
//! `order()` (decoded body; the result is stored as the variant unless a page filter said
//! not to) → `after_response` (the original bytes again; may start background work, e.g.
//! prefetch) → `response_filter` (every response, hits included) → `logging`.
//!
//! Sub-requests: `page_filter` and `after_response` get a [`SubRequests`] handle to the
//! pipeline, through which a stage makes GETs for other URLs below the request (as the
//! client's browser would ask for them; through the cache, the origin and every stage;
//! depth and the page's allowance carried down), and runs CPU work on the transform workers.
//! The inline stage fetches a page's stylesheets, scripts and images through it and waits
//! for them; the prefetch stage spawns fetches of a page's objects and does not wait.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::HeaderMap;
use http::{Method, StatusCode, Uri};

use crate::config::{ConfigError, ServerConfig};

pub use crate::optimize::Applied;
pub use crate::subrequest::{BoxFuture, SubReply, SubRequest, SubRequests};

/// What a stage may look at about the request a response is for.
#[derive(Debug, Clone, Copy)]
pub struct StageCtx<'a> {
    /// The client's `Accept`.
    pub accept: Option<&'a str>,
    /// The client's `Accept-Encoding`.
    pub accept_encoding: Option<&'a str>,
    /// The client's request header fields.
    pub client_headers: &'a HeaderMap,
    /// In URL mode: the origin URL of the response and the proxy authority.
    pub url_mode: Option<(&'a url::Url, &'a str)>,
    /// The proxy's own fetch (a prefetch or an inline fetch), not a client's request.
    pub background: bool,
    /// The link to the client as measured (`None`: not measured, or `[air] adapt` off):
    /// what [`crate::adapt`] scales the stages' limits with.
    pub link: Option<crate::adapt::Measured>,
    /// The client's smoothed RTT when known, even before its rate is (a new connection's
    /// handshake measured it): the inline wait scales with it alone.
    pub srtt: Option<std::time::Duration>,
}

/// Where the proxy's time on one request went, for `response_filter` and `logging`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Timing {
    /// From the request's arrival to the response leaving the pipeline.
    pub total: Duration,
    /// Waiting for the origin (connect, request, response), when it was asked.
    pub origin: Option<Duration>,
    /// Running body filters (transcode, rewrite, compress), when they ran: their work on a
    /// transform worker.
    pub transform: Option<Duration>,
    /// Waiting for a transform worker (or its memory) before that work.
    pub queue: Option<Duration>,
    /// What was decided about holding the response for its transform at the client's
    /// measured rate, when a decision was made ([`crate::adapt::hold_for_transform`]).
    pub hold: Option<crate::adapt::Hold>,
    /// What that decision weighed (the rate, the transform's expected cost, what it saves,
    /// the time of the bytes ahead of it), when it was made on a measured link.
    pub decision: Option<crate::adapt::HoldDecision>,
    /// From the request's arrival to the first byte of the response at the proxy: the
    /// origin's head, or the cache's answer (`None`: the proxy answered itself).
    pub first_in: Option<Duration>,
}

/// What the access log line of a request says, for `logging`.
#[derive(Debug, Clone, Copy)]
pub struct LogRecord<'a> {
    /// The response status.
    pub status: StatusCode,
    /// The cache result ("HIT", "MISS", …).
    pub cache: &'a str,
    /// Where the time went.
    pub timing: Timing,
}

/// A response whose original bytes (the origin's, from the origin or the cache) the pipeline
/// holds, for `page_filter` and `after_response`.
#[derive(Debug, Clone, Copy)]
pub struct Original<'a> {
    /// The request's method.
    pub method: &'a Method,
    /// The request's absolute URI (its origin URL).
    pub uri: &'a Uri,
    /// The status.
    pub status: StatusCode,
    /// The header fields (the origin's coding kept: `Content-Encoding` may be set).
    pub headers: &'a HeaderMap,
    /// The body, in the coding `headers` say.
    pub body: &'a Bytes,
    /// A stage chose the codings the origin was asked for (`upstream_request_filter`
    /// changed `Accept-Encoding`), so the proxy encodes what the client gets.
    pub proxy_codings: bool,
}

/// What a `page_filter` did to a response.
#[derive(Debug, Default)]
pub struct PageChange {
    /// The new header fields and body (in the coding the fields say), when the filter
    /// replaced them; later page filters and the body filters see these.
    pub replaced: Option<(HeaderMap, Bytes)>,
    /// What goes to the client must not be stored as the variant: it depends on other
    /// responses, or may come out otherwise next time.
    pub uncacheable: bool,
}

/// One optimization of the pipeline. Every hook does nothing unless the stage overrides it.
pub trait Stage: Send + Sync {
    /// Short name (logs; the factory's name).
    fn name(&self) -> &'static str;
    /// Position among the body filters: lower runs first (transcode 100, URL rewrite 200,
    /// compress 300).
    fn order(&self) -> i32;
    /// Adjusts the request sent to the origin (e.g. ask for every coding the proxy decodes).
    fn upstream_request_filter(&self, _headers: &mut HeaderMap) {}
    /// The part of the cache variant key this stage contributes for this request (the same
    /// request must always give the same part), or `None` when it never applies.
    fn variant_part(&self, _ctx: &StageCtx<'_>) -> Option<String> {
        None
    }
    /// Sees the origin's response head before the cache stores it.
    fn upstream_response_filter(
        &self,
        _ctx: &StageCtx<'_>,
        _status: StatusCode,
        _headers: &mut HeaderMap,
    ) {
    }
    /// True when the stage has a body filter at all (responses go to the transform workers
    /// only when some stage has one).
    fn filters_bodies(&self) -> bool {
        false
    }
    /// True when `body_filter` would work on a response with these headers (so the pipeline
    /// decodes the origin's content coding first).
    fn wants_body(&self, _headers: &HeaderMap, _ctx: &StageCtx<'_>) -> bool {
        false
    }
    /// True when `page_filter` or `after_response` would look at the body of a response with
    /// these headers. A response no stage wants the body of streams through to the client
    /// as it comes (the cache gets a copy). By default true (a stage that says nothing holds
    /// every body, as before); a stage without those hooks, or with a narrower interest,
    /// says so.
    fn wants_original(&self, _status: StatusCode, _headers: &HeaderMap) -> bool {
        true
    }
    /// Memory the body filter may take at its peak for this body (reserved before it runs).
    fn body_memory(&self, _body: &[u8]) -> u64 {
        0
    }
    /// Transforms a `200` body in identity coding, updating `headers`. Runs off the async
    /// runtime, at most `[limits] transform-workers` at once.
    fn body_filter(&self, _ctx: &StageCtx<'_>, _headers: &mut HeaderMap, _body: &[u8]) -> Applied {
        Applied::Unchanged("no body filter".into())
    }
    /// Runs before the cache lookup of every request that may be answered from the cache
    /// (sub-requests included: `ctx.background`); the lookup waits for the future it
    /// returns. `None` (the default) costs nothing.
    fn before_lookup<'a>(
        &'a self,
        _ctx: &StageCtx<'_>,
        _uri: &'a Uri,
    ) -> Option<BoxFuture<'a, ()>> {
        None
    }
    /// Runs when the pipeline holds a response's original bytes (a miss, a revalidation, a
    /// hit on the original), before the body filters: may replace the header fields and body
    /// (and say whether the result may be stored as the variant), fetching other URLs
    /// through `sub` and waiting for them. `None` (the default): nothing to do for this
    /// response, decided without waiting.
    fn page_filter<'a>(
        &'a self,
        _ctx: &'a StageCtx<'a>,
        _page: Original<'a>,
        _sub: &'a SubRequests,
    ) -> Option<BoxFuture<'a, PageChange>> {
        None
    }
    /// Runs after the response with the original bytes has been made (page and body filters
    /// done), before it goes to the client: may start background work through `sub`
    /// (spawned; the response does not wait).
    fn after_response(&self, _ctx: &StageCtx<'_>, _original: Original<'_>, _sub: &SubRequests) {}
    /// Adjusts every response on its way to the client, cache hits included.
    fn response_filter(&self, _ctx: &StageCtx<'_>, _headers: &mut HeaderMap, _timing: &Timing) {}
    /// Sees each request the pipeline answered (after `response_filter`).
    fn logging(&self, _record: &LogRecord<'_>) {}
}

/// One configuration key of a stage, for checking and for the documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyDoc {
    /// The key, kebab-case.
    pub key: &'static str,
    /// Its default, as TOML.
    pub default: &'static str,
    /// What it does.
    pub help: &'static str,
}

/// A counter a stage registered; rendered on `/metrics` with its help.
#[derive(Debug, Clone)]
pub struct StageCounter {
    /// Full metric name (`webpep_…_total`).
    pub name: String,
    /// Its help text.
    pub help: String,
    /// The value.
    pub value: Arc<AtomicU64>,
}

/// Where factories register their metrics.
#[derive(Debug, Default)]
pub struct Registry {
    counters: Vec<StageCounter>,
}

impl Registry {
    /// A counter named `name` with `help`; the same name twice gives the same counter.
    pub fn counter(&mut self, name: &str, help: &str) -> Arc<AtomicU64> {
        if let Some(c) = self.counters.iter().find(|c| c.name == name) {
            return c.value.clone();
        }
        let value = Arc::new(AtomicU64::new(0));
        self.counters.push(StageCounter {
            name: name.to_string(),
            help: help.to_string(),
            value: value.clone(),
        });
        value
    }

    /// The registered counters, in registration order.
    pub fn into_counters(self) -> Vec<StageCounter> {
        self.counters
    }
}

/// A stage's configuration section: a built-in's typed section of [`ServerConfig`], or the
/// `[stages.NAME]` table of any other stage.
pub enum Section<'a> {
    /// The whole configuration: a built-in reads its own typed section.
    BuiltIn(&'a ServerConfig),
    /// `[stages.NAME]`, already checked against the factory's keys (empty when absent).
    Table(&'a toml::Table),
}

/// Builds one stage from the configuration.
pub trait StageFactory: Send + Sync {
    /// The stage's name; also its section `[stages.NAME]` unless it is a built-in.
    fn name(&self) -> &'static str;
    /// True for the built-ins whose keys live in their own section of [`ServerConfig`]
    /// (`[compress]`, `[transcode]`, …) rather than under `[stages.NAME]`.
    fn built_in(&self) -> bool {
        false
    }
    /// The keys of `[stages.NAME]` (built-ins: documented with their sections).
    fn keys(&self) -> &'static [KeyDoc] {
        &[]
    }
    /// The stage, or `None` when the configuration turns it off. Errors name the key.
    fn build(
        &self,
        section: Section<'_>,
        registry: &mut Registry,
    ) -> Result<Option<Arc<dyn Stage>>, (String, String)>;
}

/// The stages a configuration turns on, ordered, with their counters.
#[derive(Default)]
pub struct Stages {
    stages: Vec<Arc<dyn Stage>>,
    counters: Vec<StageCounter>,
    /// Some stage has a body filter.
    bodies: bool,
}

impl std::fmt::Debug for Stages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.stages.iter().map(|s| s.name()))
            .finish()
    }
}

impl Stages {
    /// Builds every stage of `factories` that `cfg` turns on, checking each `[stages.NAME]`
    /// table against its factory's keys (an unknown stage or key is an error naming it).
    pub fn build(
        cfg: &ServerConfig,
        factories: &[Box<dyn StageFactory>],
        source: &str,
    ) -> Result<Stages, ConfigError> {
        let invalid = |key: String, message: String| ConfigError::Invalid {
            source_name: source.to_string(),
            key,
            message,
        };
        for name in cfg.stages.keys() {
            if !factories.iter().any(|f| !f.built_in() && f.name() == name) {
                let known: Vec<&str> = factories
                    .iter()
                    .filter(|f| !f.built_in())
                    .map(|f| f.name())
                    .collect();
                return Err(invalid(
                    format!("stages.{name}"),
                    format!("no such stage (stages: {})", known.join(", ")),
                ));
            }
        }
        let empty = toml::Table::new();
        let mut registry = Registry::default();
        let mut stages = Vec::new();
        for f in factories {
            let section = if f.built_in() {
                Section::BuiltIn(cfg)
            } else {
                let table = cfg.stages.get(f.name()).unwrap_or(&empty);
                for key in table.keys() {
                    if !f.keys().iter().any(|k| k.key == key) {
                        let known: Vec<&str> = f.keys().iter().map(|k| k.key).collect();
                        return Err(invalid(
                            format!("stages.{}.{key}", f.name()),
                            format!("unknown key (keys: {})", known.join(", ")),
                        ));
                    }
                }
                Section::Table(table)
            };
            let prefix = if f.built_in() {
                String::new()
            } else {
                format!("stages.{}.", f.name())
            };
            if let Some(s) = f
                .build(section, &mut registry)
                .map_err(|(k, m)| invalid(format!("{prefix}{k}"), m))?
            {
                stages.push(s);
            }
        }
        stages.sort_by_key(|s| s.order());
        Ok(Stages {
            bodies: stages.iter().any(|s| s.filters_bodies()),
            stages,
            counters: registry.into_counters(),
        })
    }

    /// The stages, in order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<dyn Stage>> {
        self.stages.iter()
    }

    /// True when some stage has a body filter.
    pub fn filter_bodies(&self) -> bool {
        self.bodies
    }

    /// Every stage's `before_lookup`, awaited in order.
    pub async fn before_lookup(&self, ctx: &StageCtx<'_>, uri: &Uri) {
        for s in &self.stages {
            if let Some(wait) = s.before_lookup(ctx, uri) {
                wait.await;
            }
        }
    }

    /// Every stage's `after_response`.
    pub fn after_response(&self, ctx: &StageCtx<'_>, original: Original<'_>, sub: &SubRequests) {
        for s in &self.stages {
            s.after_response(ctx, original, sub);
        }
    }

    /// The counter a stage registered as `name`, when one did.
    pub fn counter(&self, name: &str) -> Option<u64> {
        self.counters
            .iter()
            .find(|c| c.name == name)
            .map(|c| c.value.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// Names of the stages, in order.
    pub fn names(&self) -> Vec<&'static str> {
        self.stages.iter().map(|s| s.name()).collect()
    }

    /// The counters the stages registered.
    pub fn counters(&self) -> &[StageCounter] {
        &self.counters
    }

    /// The cache variant key for a request: every stage's part, joined. Empty when no stage
    /// filters bodies: nothing but the body filters' output is stored as a variant, so there
    /// is none to look up.
    pub fn variant(&self, ctx: &StageCtx<'_>) -> String {
        let mut key = String::new();
        if !self.bodies {
            return key;
        }
        for part in self.stages.iter().filter_map(|s| s.variant_part(ctx)) {
            if !key.is_empty() {
                key.push('|');
            }
            key.push_str(&part);
        }
        key
    }

    /// Every stage's `upstream_request_filter`.
    pub fn upstream_request(&self, headers: &mut HeaderMap) {
        for s in &self.stages {
            s.upstream_request_filter(headers);
        }
    }

    /// Every stage's `upstream_response_filter`.
    pub fn upstream_response(
        &self,
        ctx: &StageCtx<'_>,
        status: StatusCode,
        headers: &mut HeaderMap,
    ) {
        for s in &self.stages {
            s.upstream_response_filter(ctx, status, headers);
        }
    }

    /// Some stage's body filter wants this response.
    pub fn wants_body(&self, headers: &HeaderMap, ctx: &StageCtx<'_>) -> bool {
        self.stages.iter().any(|s| s.wants_body(headers, ctx))
    }

    /// Some stage wants the whole body of this response (a body filter, a page filter or
    /// `after_response`): it is held, not streamed through.
    pub fn holds_body(&self, ctx: &StageCtx<'_>, status: StatusCode, headers: &HeaderMap) -> bool {
        (self.bodies && status == StatusCode::OK && self.wants_body(headers, ctx))
            || self.wants_original(status, headers)
    }

    /// Some stage's `page_filter` or `after_response` reads the body of this response.
    pub fn wants_original(&self, status: StatusCode, headers: &HeaderMap) -> bool {
        self.stages
            .iter()
            .any(|s| s.wants_original(status, headers))
    }

    /// The most any body filter may take in memory for this body.
    pub fn body_memory(&self, body: &[u8]) -> u64 {
        self.stages
            .iter()
            .map(|s| s.body_memory(body))
            .max()
            .unwrap_or(0)
    }

    /// Every stage's `response_filter`.
    pub fn response(&self, ctx: &StageCtx<'_>, headers: &mut HeaderMap, timing: &Timing) {
        for s in &self.stages {
            s.response_filter(ctx, headers, timing);
        }
    }

    /// Every stage's `logging`.
    pub fn log(&self, record: &LogRecord<'_>) {
        for s in &self.stages {
            s.logging(record);
        }
    }
}

/// Reads a boolean key of a `[stages.NAME]` table, or its default.
pub fn bool_key(table: &toml::Table, key: &str, default: bool) -> Result<bool, (String, String)> {
    match table.get(key) {
        None => Ok(default),
        Some(toml::Value::Boolean(b)) => Ok(*b),
        Some(v) => Err((
            key.to_string(),
            format!("expected true or false, found {v}"),
        )),
    }
}

/// Reads a string key of a `[stages.NAME]` table, or its default.
pub fn str_key(table: &toml::Table, key: &str, default: &str) -> Result<String, (String, String)> {
    match table.get(key) {
        None => Ok(default.to_string()),
        Some(toml::Value::String(s)) => Ok(s.clone()),
        Some(v) => Err((key.to_string(), format!("expected a string, found {v}"))),
    }
}
