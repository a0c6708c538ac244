//! The response pipeline for proxied HTTP requests, as phases (Pingora-style):
//! request filter → the stages' `before_lookup` → cache lookup (variant, then the origin's
//! bytes, then revalidation) → origin fetch → store the original → page filters → decode →
//! body filters (transcode, URL rewrite, compress) → store the variant → the stages'
//! `after_response` → respond ([`crate::stage`] lists the hooks). Stages make sub-requests
//! through this same pipeline: the server is their [`Pipeline`] ([`crate::subrequest`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use webpep_cache::{CachedResponse, Lookup, ValidUntil};
use webpep_optimize::compress;

use crate::adapt::{Hold, Kind};
use crate::http1::{strip_hop_by_hop, via_has};
use crate::metrics::Metrics;
use crate::mode::Mode;
use crate::optimize::{content_coding, Applied};
use crate::origin::{
    connect_error, error_reason, ConnectError, CLIENT_CERTIFICATE, ERROR_HEADER,
    ORIGIN_CERTIFICATE, PASSTHROUGH_HEADER,
};
use crate::reply::{Body, Reply};
use crate::request::ClientRequest;
use crate::stage::{Original, StageCtx, Timing};
use crate::state::Server;
use crate::subrequest::{Below, BoxFuture, Pipeline, SubReply, SubRequests};
use crate::transform_pool::{Priority, TransformPool};

/// Everything the phases share about one request.
#[derive(Clone)]
struct Exchange {
    server: Arc<Server>,
    req: Arc<ClientRequest>,
    /// The request as the cache sees it (absolute URI, end-to-end headers).
    parts: http::request::Parts,
    /// Where to connect (differs from `parts.uri` for intercepted connections).
    connect_uri: Uri,
    /// In URL mode: the origin URL and the proxy authority.
    url_mode: Option<(url::Url, String)>,
    /// None for a client's request; for a stage's sub-request, where it stands below the
    /// client's ([`crate::subrequest`]).
    below: Option<Below>,
}

impl Exchange {
    fn ctx(&self) -> StageCtx<'_> {
        let h = &self.req.head.headers;
        StageCtx {
            accept: h.get(header::ACCEPT).and_then(|v| v.to_str().ok()),
            accept_encoding: h.get(header::ACCEPT_ENCODING).and_then(|v| v.to_str().ok()),
            client_headers: h,
            url_mode: self.url_mode.as_ref().map(|(u, a)| (u, a.as_str())),
            background: self.below.is_some(),
            link: if self.server.measure_links {
                crate::adapt::Measured::of(self.req.link.as_ref())
            } else {
                None
            },
            srtt: self
                .req
                .link
                .filter(|_| self.server.measure_links)
                .and_then(|l| l.srtt.or(l.min_rtt)),
        }
    }
}

/// The origin's and the body filters' time on one request, in microseconds (`u64::MAX`:
/// not spent), what was decided about holding it for a transform, and when its first byte
/// reached the proxy; shared by the phases of an exchange (on the stack of its future).
#[derive(Debug)]
struct TimingCell {
    origin: AtomicU64,
    transform: AtomicU64,
    queue: AtomicU64,
    /// 0: no decision; else 1 + the [`Hold`]'s place in [`HOLDS`].
    hold: std::sync::atomic::AtomicU8,
    decision: std::sync::Mutex<Option<crate::adapt::HoldDecision>>,
    first_in: std::sync::OnceLock<tokio::time::Instant>,
}

const HOLDS: [Hold; 3] = [Hold::Transform, Hold::Defer, Hold::Skip];

impl Default for TimingCell {
    fn default() -> Self {
        TimingCell {
            origin: u64::MAX.into(),
            transform: u64::MAX.into(),
            queue: u64::MAX.into(),
            hold: 0.into(),
            decision: std::sync::Mutex::new(None),
            first_in: std::sync::OnceLock::new(),
        }
    }
}

impl TimingCell {
    fn set(slot: &AtomicU64, d: Duration) {
        slot.store(
            d.as_micros().min(u64::MAX as u128 - 1) as u64,
            Ordering::Relaxed,
        );
    }
    fn get(slot: &AtomicU64) -> Option<Duration> {
        match slot.load(Ordering::Relaxed) {
            u64::MAX => None,
            us => Some(Duration::from_micros(us)),
        }
    }
    /// The response's first byte is at the proxy now (the origin's head, the cache's
    /// answer); the first mark counts.
    fn first_byte_in(&self) {
        let _ = self.first_in.set(tokio::time::Instant::now());
    }
    fn set_hold(&self, h: Hold) {
        let i = HOLDS.iter().position(|x| *x == h).unwrap_or(0) as u8;
        self.hold.store(i + 1, Ordering::Relaxed);
    }
    fn set_decision(&self, d: crate::adapt::HoldDecision) {
        *self.decision.lock().unwrap_or_else(|e| e.into_inner()) = Some(d);
    }
    fn timing(&self, started: tokio::time::Instant, total: Duration) -> Timing {
        Timing {
            total,
            origin: Self::get(&self.origin),
            transform: Self::get(&self.transform),
            queue: Self::get(&self.queue),
            hold: match self.hold.load(Ordering::Relaxed) {
                0 => None,
                i => HOLDS.get(usize::from(i) - 1).copied(),
            },
            decision: *self.decision.lock().unwrap_or_else(|e| e.into_inner()),
            first_in: self
                .first_in
                .get()
                .map(|t| t.saturating_duration_since(started)),
        }
    }
}

/// Serves a request for an origin (explicit, transparent or URL mode).
pub async fn proxy_http(server: Arc<Server>, req: Arc<ClientRequest>) -> Reply {
    if let Some(r) = last_hop_answer(&req) {
        return r;
    }
    let started = tokio::time::Instant::now();
    let ex = match exchange(&server, req.clone(), None) {
        Ok(ex) => ex,
        Err(reply) => return *reply,
    };
    // One view of the request for every hook, and one timing record, for the whole exchange.
    let ctx = ex.ctx();
    let cell = TimingCell::default();
    let mut reply = run(&ex, &ctx, &cell).await;
    if matches!(req.mode, Mode::UrlPath { .. }) {
        rewrite_location(&mut reply.headers, &ex);
    }
    let timing = cell.timing(started, started.elapsed());
    server.stages.response(&ctx, &mut reply.headers, &timing);
    server.stages.log(&crate::stage::LogRecord {
        status: reply.status,
        cache: reply.cache,
        timing,
    });
    reply.trace = crate::reply::Trace {
        timing: Some(timing),
        first_in: cell.first_in.get().map(|t| t.into_std()),
    };
    add_via(&mut reply.headers, req.head.version, &server);
    reply
}

/// Adds this process's `Via` entry (`http1::add_via`'s, made once: [`Server`]'s `via`).
fn add_via(headers: &mut HeaderMap, version: http::Version, server: &Server) {
    let v = &server.via[usize::from(version != http::Version::HTTP_10)];
    headers.append(header::VIA, v.clone());
}

/// TRACE and OPTIONS with `Max-Forwards: 0` are for this proxy (RFC 9110 §7.6.2): OPTIONS
/// gets what the proxy allows, TRACE the request as received, less credentials and cookies.
fn last_hop_answer(req: &ClientRequest) -> Option<Reply> {
    let m = &req.head.method;
    if (*m != Method::TRACE && *m != Method::OPTIONS)
        || crate::http1::max_forwards(&req.head.headers) != Some(0)
    {
        return None;
    }
    let mut r = Reply::text(StatusCode::OK, "");
    if *m == Method::OPTIONS {
        r.headers.insert(
            header::ALLOW,
            HeaderValue::from_static(
                "GET, HEAD, POST, PUT, DELETE, OPTIONS, TRACE, PATCH, CONNECT",
            ),
        );
        r.body = Body::Empty;
        return Some(r);
    }
    let mut echo = format!("TRACE {} {:?}\r\n", req.head.target, req.head.version).into_bytes();
    for (name, value) in &req.head.headers {
        if [
            header::PROXY_AUTHORIZATION,
            header::AUTHORIZATION,
            header::COOKIE,
        ]
        .contains(name)
        {
            continue;
        }
        echo.extend_from_slice(name.as_str().as_bytes());
        echo.extend_from_slice(b": ");
        echo.extend_from_slice(value.as_bytes());
        echo.extend_from_slice(b"\r\n");
    }
    r.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("message/http"),
    );
    r.body = Body::Full(Bytes::from(echo));
    Some(r)
}

/// The exchange for a request (a client's, or a stage's sub-request `below` a client's), or
/// the reply that refuses it.
fn exchange(
    server: &Arc<Server>,
    req: Arc<ClientRequest>,
    below: Option<Below>,
) -> Result<Exchange, Box<Reply>> {
    let Some(origin_url) = req.mode.origin_url() else {
        return Err(Box::new(Reply::text(
            StatusCode::BAD_REQUEST,
            "not a proxied request",
        )));
    };
    let Ok(uri) = origin_url.parse::<Uri>() else {
        return Err(Box::new(Reply::text(
            StatusCode::BAD_REQUEST,
            "bad origin URL",
        )));
    };
    if req.head.headers.contains_key(header::VIA) && via_has(&req.head.headers, &server.instance) {
        // E.g. a Host naming the proxy on another of its ports: it would call itself forever.
        return Err(Box::new(Reply::text(
            StatusCode::LOOP_DETECTED,
            "request loops through this proxy",
        )));
    }
    let mut headers = req.head.headers.clone();
    strip_hop_by_hop(&mut headers);
    if req.head.method == Method::TRACE || req.head.method == Method::OPTIONS {
        if let Some(n) = crate::http1::max_forwards(&headers) {
            headers.insert(header::MAX_FORWARDS, HeaderValue::from(n.saturating_sub(1)));
        }
    }
    if let Some(a) = uri.authority() {
        if let Ok(v) = HeaderValue::from_str(a.as_str()) {
            headers.insert(header::HOST, v);
        }
    }
    server.stages.upstream_request(&mut headers);
    let connect_uri = match (&req.mode, req.original_dst) {
        (Mode::Transparent { path, .. }, Some(dst)) => format!("http://{dst}{path}")
            .parse()
            .unwrap_or_else(|_| uri.clone()),
        _ => uri.clone(),
    };
    let mut builder = Request::builder().method(req.head.method.clone()).uri(uri);
    if let Some(h) = builder.headers_mut() {
        *h = headers;
    }
    let Ok(r) = builder.body(()) else {
        return Err(Box::new(Reply::text(
            StatusCode::BAD_REQUEST,
            "bad request",
        )));
    };
    let (parts, ()) = r.into_parts();
    let url_mode = match &req.mode {
        Mode::UrlPath { .. } => match (
            url::Url::parse(&origin_url),
            server.cfg.url_rewrite.proxy_authority.clone(),
        ) {
            (Ok(u), Some(a)) => Some((u, a)),
            _ => None,
        },
        _ => None,
    };
    Ok(Exchange {
        server: server.clone(),
        req,
        parts,
        connect_uri,
        url_mode,
        below,
    })
}

/// The server is the pipeline the stages' sub-requests go through.
impl Pipeline for Server {
    fn fetch(self: Arc<Self>, req: ClientRequest, below: Below) -> BoxFuture<'static, SubReply> {
        Box::pin(async move {
            let reply = match exchange(&self, Arc::new(req), Some(below)) {
                Ok(ex) => run(&ex, &ex.ctx(), &TimingCell::default()).await,
                Err(r) => *r,
            };
            SubReply {
                status: reply.status,
                body: match reply.body {
                    Body::Full(b) => Some(b),
                    _ => None,
                },
                headers: reply.headers,
                cache: reply.cache,
            }
        })
    }
    fn now(&self) -> SystemTime {
        self.clock.now()
    }
    fn transform_pool(&self) -> &TransformPool {
        &self.transform_pool
    }
}

async fn run(ex: &Exchange, ctx: &StageCtx<'_>, timing: &TimingCell) -> Reply {
    let method = &ex.parts.method;
    let cache = ex
        .server
        .cache
        .as_ref()
        .filter(|_| *method == Method::GET || *method == Method::HEAD);
    if let Some(c) = &ex.server.cache {
        if !method.is_safe() {
            c.invalidate(&ex.parts).await;
        }
    }
    let metrics = &ex.server.metrics;
    // The origin's path is boxed: its state (the origin request, buffering, transforms)
    // would otherwise make every request's future, hits included, several KB to move.
    let Some(cache) = cache else {
        return Box::pin(fetch_and_process(ex, ctx, timing, None, "")).await;
    };
    // The cache counters count clients' requests; the stages' sub-requests look the cache
    // up too, and would count a client's one request many times.
    let count = |c: &std::sync::atomic::AtomicU64| {
        if ex.below.is_none() {
            Metrics::add(c, 1);
        }
    };
    // Phase: the stages' waits (e.g. a fetch of this URL under way finishes first).
    ex.server.stages.before_lookup(ctx, &ex.parts.uri).await;
    let now = ex.server.clock.now();
    let variant = ex.server.stages.variant(ctx);
    // Phase: a stored transformed variant for exactly this kind of client.
    if !variant.is_empty() {
        if let Lookup::Fresh(c) = cache.lookup(&ex.parts, &variant, now).await {
            timing.first_byte_in();
            count(&metrics.cache_hits);
            return from_cached(ex, c, "HIT");
        }
    }
    // Phase: the origin's bytes.
    match cache.lookup(&ex.parts, "", now).await {
        Lookup::Fresh(c) => {
            timing.first_byte_in();
            count(&metrics.cache_hits);
            let held = Held {
                received: Received::from_cache(now, &c),
                status: c.status,
                headers: c.headers,
                body: c.body,
            };
            let out = held_phases(ex, ctx, timing, &variant, held).await;
            from_cached_reply(ex, out, "HIT")
        }
        Lookup::Stale(c) => {
            count(&metrics.cache_stale);
            if webpep_cache::only_if_cached(&ex.parts) {
                return Reply::text(
                    StatusCode::GATEWAY_TIMEOUT,
                    "only-if-cached: not fresh in cache",
                );
            }
            Box::pin(fetch_and_process(ex, ctx, timing, Some(c), &variant)).await
        }
        Lookup::Miss => {
            count(&metrics.cache_misses);
            if webpep_cache::only_if_cached(&ex.parts) {
                return Reply::text(StatusCode::GATEWAY_TIMEOUT, "only-if-cached: not in cache");
            }
            Box::pin(fetch_and_process(ex, ctx, timing, None, &variant)).await
        }
    }
}

/// A cached (and possibly just transformed) response for the client, answering the
/// client's own conditional request with 304.
fn from_cached(ex: &Exchange, c: CachedResponse, label: &'static str) -> Reply {
    let not_modified = webpep_cache::client_not_modified(&ex.parts, &c);
    full_or_not_modified(not_modified, c.status, c.headers, c.body, label)
}

/// The full response, or a 304 with its headers (no Content-Length) when the client's
/// validators already match.
fn full_or_not_modified(
    not_modified: bool,
    status: StatusCode,
    mut headers: HeaderMap,
    body: Bytes,
    label: &'static str,
) -> Reply {
    if not_modified {
        headers.remove(header::CONTENT_LENGTH);
        return Reply {
            status: StatusCode::NOT_MODIFIED,
            headers,
            body: Body::Empty,
            close: false,
            cache: label,
            lease: None,
            trace: Default::default(),
        };
    }
    Reply {
        status,
        headers,
        body: Body::Full(body),
        close: false,
        cache: label,
        lease: None,
        trace: Default::default(),
    }
}

/// A response whose original bytes the pipeline holds (from the origin or the cache).
struct Held {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
    received: Received,
}

/// When a response was asked for and came, and until when it may be reused at all: the
/// certificate an `https://` origin proved itself with expires then (its cache entries, and
/// the variants made from it, are fresh no longer: [`webpep_cache::ValidUntil`]).
#[derive(Clone, Copy, Debug)]
struct Received {
    request_time: SystemTime,
    response_time: SystemTime,
    valid_until: Option<SystemTime>,
}

impl Received {
    /// A response from the origin, with what its connection said of its certificate.
    fn from_origin(
        request_time: SystemTime,
        response_time: SystemTime,
        parts: &http::response::Parts,
    ) -> Self {
        Received {
            request_time,
            response_time,
            valid_until: parts.extensions.get::<ValidUntil>().map(|v| v.0),
        }
    }

    /// A stored response served at `now`.
    fn from_cache(now: SystemTime, c: &CachedResponse) -> Self {
        Received {
            request_time: now,
            response_time: now,
            valid_until: c.valid_until(),
        }
    }

    /// The response parts a stored variant is described by (its certificate's expiry kept).
    fn parts(&self, status: StatusCode, headers: &HeaderMap) -> Option<http::response::Parts> {
        let mut rb = http::Response::builder().status(status);
        if let Some(h) = rb.headers_mut() {
            *h = headers.clone();
        }
        if let Some(t) = self.valid_until {
            rb = rb.extension(ValidUntil(t));
        }
        rb.body(()).ok().map(|r| r.into_parts().0)
    }
}

/// The output of the transform phase.
struct Transformed {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

fn from_cached_reply(ex: &Exchange, t: Transformed, label: &'static str) -> Reply {
    let not_modified =
        t.status == StatusCode::OK && not_modified_for(&ex.parts.headers, &t.headers);
    full_or_not_modified(not_modified, t.status, t.headers, t.body, label)
}

/// RFC 9110 §13.1.1–13.1.3 for a response the proxy holds: If-None-Match (weak comparison)
/// wins over If-Modified-Since.
pub fn not_modified_for(req: &HeaderMap, resp: &HeaderMap) -> bool {
    let opaque = |t: &str| t.trim().trim_start_matches("W/").to_string();
    if let Some(inm) = req.get(header::IF_NONE_MATCH).and_then(|v| v.to_str().ok()) {
        let Some(etag) = resp.get(header::ETAG).and_then(|v| v.to_str().ok()) else {
            return false;
        };
        let etag = opaque(etag);
        return inm.split(',').any(|t| t.trim() == "*" || opaque(t) == etag);
    }
    let ims = req
        .get(header::IF_MODIFIED_SINCE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| httpdate::parse_http_date(v).ok());
    let lm = resp
        .get(header::LAST_MODIFIED)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| httpdate::parse_http_date(v).ok());
    matches!((ims, lm), (Some(i), Some(l)) if l <= i)
}

/// Phase: origin fetch (conditional when `stale` is given) and everything after it.
async fn fetch_and_process(
    ex: &Exchange,
    ctx: &StageCtx<'_>,
    timing: &TimingCell,
    stale: Option<CachedResponse>,
    variant: &str,
) -> Reply {
    let server = &ex.server;
    let metrics = &server.metrics;
    let mut headers = ex.parts.headers.clone();
    if let Some(s) = &stale {
        for (k, v) in s.conditional_headers().iter() {
            headers.insert(k.clone(), v.clone());
        }
    }
    add_via(&mut headers, ex.req.head.version, &ex.server);
    let mut b = Request::builder()
        .method(ex.parts.method.clone())
        .uri(ex.connect_uri.clone());
    if let Some(h) = b.headers_mut() {
        *h = headers;
    }
    let Ok(origin_req) = b.body(Full::new(ex.req.body.clone())) else {
        return Reply::text(StatusCode::BAD_REQUEST, "cannot build the origin request");
    };
    Metrics::add(
        &metrics.origin_bytes_out,
        request_head_bytes(&origin_req) + ex.req.body.len() as u64,
    );
    let request_time = server.clock.now();
    let asked = tokio::time::Instant::now();
    let o = &server.cfg.origin;
    // Resolving and connecting (within connect-timeout) count towards response-timeout.
    let limit = o.response_timeout.0;
    let resp = match tokio::time::timeout(limit, server.client.request(origin_req)).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => return origin_error(&e),
        Err(_) => {
            return Reply::text(
                StatusCode::GATEWAY_TIMEOUT,
                &format!(
                    "origin did not answer within {:?} (origin.response-timeout)",
                    limit
                ),
            )
        }
    };
    let response_time = server.clock.now();
    timing.first_byte_in();
    TimingCell::set(&timing.origin, asked.elapsed());
    let (mut rparts, incoming) = resp.into_parts();
    let received = Received::from_origin(request_time, response_time, &rparts);
    // The head is received whatever the status: a 304 or a HEAD answer is all head (only
    // bodies were counted, unlike the request heads origin bytes out counts).
    Metrics::add(&metrics.origin_bytes_in, response_head_bytes(&rparts));
    if rparts.status.is_informational() {
        // The proxy never asks an origin to switch protocols (Upgrade is hop-by-hop and
        // dropped), so a 101 is not the answer to this request.
        return Reply::text_close(
            StatusCode::BAD_GATEWAY,
            &format!(
                "origin answered {} to a request that asked for no upgrade",
                rparts.status
            ),
        );
    }
    strip_hop_by_hop(&mut rparts.headers);
    server
        .stages
        .upstream_response(ctx, rparts.status, &mut rparts.headers);
    // Phase: revalidation result.
    if let (Some(s), StatusCode::NOT_MODIFIED) = (&stale, rparts.status) {
        if let Some(cache) = &server.cache {
            if let Some(fresh) = cache.freshen(s, &rparts, request_time, response_time).await {
                Metrics::add(&metrics.cache_validated, 1);
                let held = Held {
                    received: Received {
                        request_time,
                        response_time,
                        valid_until: fresh.valid_until(),
                    },
                    status: fresh.status,
                    headers: fresh.headers,
                    body: fresh.body,
                };
                let out = held_phases(ex, ctx, timing, variant, held).await;
                return from_cached_reply(ex, out, "REVALIDATED");
            }
        }
    }
    let no_body = ex.parts.method == Method::HEAD
        || rparts.status.is_informational()
        || rparts.status == StatusCode::NO_CONTENT
        || rparts.status == StatusCode::NOT_MODIFIED;
    if no_body {
        return Reply {
            status: rparts.status,
            headers: rparts.headers,
            body: Body::Empty,
            close: false,
            cache: "MISS",
            lease: None,
            trace: Default::default(),
        };
    }
    // Phase: buffer the body when small enough to transform, within the buffered-body
    // budget and `buffer-timeout`; otherwise stream it as it comes.
    let max = server.cfg.limits.max_body_transform;
    let declared = webpep_http1::fields::content_length(&rparts.headers);
    // A stage waiting on this fetch may give up on it now, from the head alone (the fetch
    // goes on into the cache).
    if let Some(w) = ex.below.as_ref().and_then(|b| b.head.as_ref()) {
        w.tell(crate::subrequest::HeadSeen {
            status: rparts.status,
            declared,
        });
    }
    let stall = o.response_timeout.0;
    if declared.is_some_and(|n| n > max as u64) || is_event_stream(&rparts.headers) {
        if declared.is_none() {
            Metrics::add(&metrics.responses_streamed, 1);
        }
        return stream_reply(rparts, Bytes::new(), incoming, declared, stall);
    }
    let mut lease = server.buffers.lease(ex.req.peer.ip());
    let passes = ex.below.is_none()
        && !server
            .stages
            .holds_body(ctx, rparts.status, &rparts.headers);
    let deferred = if passes {
        None
    } else {
        hold_at_head(ex, ctx, timing, variant, &rparts, declared)
    };
    if passes || deferred.is_some() {
        // No stage works on this body (no transform wants its type, no page filter its
        // bytes), or its transform is not worth holding it for at the client's rate (decided
        // from its declared length): it goes to the client as it comes, the cache keeping a
        // copy (and making the variant from it for the next client). The stages' own fetches
        // still hold theirs: they want the bytes.
        tracing::debug!(url = %ex.parts.uri, ?deferred, "response passed through as it comes");
        let then = (deferred == Some(Hold::Defer)).then_some(variant);
        let tee = passing_copy(ex, &rparts, received, lease, then);
        let mut reply = stream_reply(rparts, Bytes::new(), incoming, declared, stall);
        if let Body::Stream { tee: t, .. } = &mut reply.body {
            *t = Some(tee);
        }
        if stale.is_some() {
            reply.cache = "STALE-REFETCH";
        }
        return reply;
    }
    let deadline = tokio::time::Instant::now() + server.cfg.limits.buffer_timeout.0;
    let body = match read_limited(incoming, max, stall, deadline, &mut lease).await {
        Ok(Buffered::Whole(b)) => b,
        Ok(Buffered::Partial(prefix, rest, why)) => {
            // The rest is counted as it streams (reply::write_reply); this part was not.
            Metrics::add(&metrics.origin_bytes_in, prefix.len() as u64);
            if why != Unbuffered::TooLarge {
                Metrics::add(&metrics.responses_streamed, 1);
            }
            tracing::debug!(url = %ex.parts.uri, reason = ?why, "response streamed");
            return stream_reply(rparts, prefix, rest, declared, stall);
        }
        Err(reason) => return Reply::text_close(StatusCode::BAD_GATEWAY, &reason),
    };
    Metrics::add(&metrics.origin_bytes_in, body.len() as u64);
    TimingCell::set(&timing.origin, asked.elapsed());
    // Phase: store the origin's bytes.
    if let Some(cache) = &server.cache {
        if ex.parts.method == Method::GET {
            let t0 = tokio::time::Instant::now();
            if let Err(e) = cache
                .store(&ex.parts, &rparts, &body, "", request_time, response_time)
                .await
            {
                tracing::warn!(error = %e, "cache store failed");
            }
            tracing::debug!(target: "webpep::cache", url = %ex.parts.uri, bytes = body.len(), ms = t0.elapsed().as_millis() as u64, background = ex.below.is_some(), "stored");
        }
    }
    let held = Held {
        status: rparts.status,
        headers: rparts.headers,
        body,
        received,
    };
    let out = held_phases(ex, ctx, timing, variant, held).await;
    Reply {
        status: out.status,
        headers: out.headers,
        body: Body::Full(out.body),
        close: false,
        cache: if stale.is_some() {
            "STALE-REFETCH"
        } else {
            "MISS"
        },
        lease: Some(lease),
        trace: Default::default(),
    }
}

/// The size of a request's HTTP/1.1 head as it goes to the origin: request line, fields,
/// blank line.
fn request_head_bytes<B>(r: &Request<B>) -> u64 {
    let target = r.uri().path_and_query().map_or(1, |p| p.as_str().len());
    let line = r.method().as_str().len() + 1 + target + " HTTP/1.1\r\n".len();
    let fields: usize = r
        .headers()
        .iter()
        .map(|(n, v)| n.as_str().len() + 2 + v.len() + 2)
        .sum();
    (line + fields + 2) as u64
}

/// The size of a response's HTTP/1.1 head as the origin sent it: status line (with the
/// origin's own reason phrase), fields, blank line.
fn response_head_bytes(p: &http::response::Parts) -> u64 {
    let reason = match p.extensions.get::<hyper::ext::ReasonPhrase>() {
        Some(r) => r.as_bytes().len(),
        None => p.status.canonical_reason().map_or(0, str::len),
    };
    let line = "HTTP/1.1 200 ".len() + reason + 2;
    let fields: usize = p
        .headers
        .iter()
        .map(|(n, v)| n.as_str().len() + 2 + v.len() + 2)
        .sum();
    (line + fields + 2) as u64
}

fn stream_reply(
    rparts: http::response::Parts,
    prefix: Bytes,
    rest: Incoming,
    len: Option<u64>,
    stall: Duration,
) -> Reply {
    Reply {
        status: rparts.status,
        headers: rparts.headers,
        body: Body::Stream {
            prefix,
            rest,
            len,
            stall,
            tee: None,
        },
        close: false,
        cache: "MISS",
        lease: None,
        trace: Default::default(),
    }
}

/// The copy of a response that streams through untransformed: for the cache (as the
/// origin's bytes) once it has come whole, within `max-body-transform` and the buffered-body
/// budget, when there is a cache and the request is a GET; otherwise for nobody (only a front
/// end without a wire reads it).
fn passing_copy(
    ex: &Exchange,
    rparts: &http::response::Parts,
    received: Received,
    lease: crate::limits::BufferLease,
    then_variant: Option<&str>,
) -> crate::reply::Tee {
    let server = ex.server.clone();
    let max = server.cfg.limits.max_body_transform;
    if server.cache.is_none() || ex.parts.method != Method::GET {
        return crate::reply::Tee::new(max, lease, None);
    }
    let (req, resp) = (ex.parts.clone(), rparts.clone());
    // With a variant to make: from the copy, once stored, for the next client.
    let then = then_variant.map(|v| (ex.clone(), v.to_string()));
    let done: crate::reply::TeeDone = Box::new(move |body: Bytes| {
        Box::pin(async move {
            let Some(cache) = &server.cache else { return };
            let (request_time, response_time) = (received.request_time, received.response_time);
            if let Err(e) = cache
                .store(&req, &resp, &body, "", request_time, response_time)
                .await
            {
                tracing::warn!(error = %e, "cache store failed");
            }
            if let Some((ex, variant)) = then {
                let held = Held {
                    status: resp.status,
                    headers: resp.headers,
                    body,
                    received,
                };
                make_in_background(&ex, &variant, held);
            }
        })
    });
    crate::reply::Tee::new(max, lease, Some(done))
}

/// An event stream (server-sent events) never ends by design: it goes on as it comes.
fn is_event_stream(h: &HeaderMap) -> bool {
    h.get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .eq_ignore_ascii_case("text/event-stream")
        })
}

/// What buffering a response body gave.
enum Buffered {
    /// All of it.
    Whole(Bytes),
    /// What came before buffering stopped, and the rest to stream.
    Partial(Bytes, Incoming, Unbuffered),
}

/// Why a response was not buffered whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unbuffered {
    /// Over `max-body-transform`.
    TooLarge,
    /// Not whole within `buffer-timeout`.
    Slow,
    /// Over the buffered-body budget.
    Budget,
}

/// Reads at most `max` body bytes, holding them in `lease`, until `deadline`. `Err`: the
/// origin broke off, or sent nothing for `stall`.
async fn read_limited(
    mut incoming: Incoming,
    max: usize,
    stall: Duration,
    deadline: tokio::time::Instant,
    lease: &mut crate::limits::BufferLease,
) -> Result<Buffered, String> {
    let mut buf = bytes::BytesMut::new();
    loop {
        let wait = (tokio::time::Instant::now() + stall).min(deadline);
        let frame = match tokio::time::timeout_at(wait, incoming.frame()).await {
            Err(_) if tokio::time::Instant::now() >= deadline => {
                return Ok(Buffered::Partial(buf.freeze(), incoming, Unbuffered::Slow))
            }
            Err(_) => return Err(format!("origin body stalled for {stall:?}")),
            Ok(None) => return Ok(Buffered::Whole(buf.freeze())),
            Ok(Some(Err(e))) => return Err(format!("origin body failed: {}", error_reason(&e))),
            Ok(Some(Ok(f))) => f,
        };
        if let Ok(d) = frame.into_data() {
            let why = if buf.len() + d.len() > max {
                Some(Unbuffered::TooLarge)
            } else if !lease.grow_to((buf.len() + d.len()) as u64) {
                Some(Unbuffered::Budget)
            } else {
                None
            };
            buf.extend_from_slice(&d);
            if let Some(why) = why {
                return Ok(Buffered::Partial(buf.freeze(), incoming, why));
            }
        }
    }
}

fn origin_error(e: &hyper_util::client::legacy::Error) -> Reply {
    if let Some(c) = connect_error(e) {
        let mut r = Reply::text(c.status(), &c.to_string());
        // Machine-readable for a client proxy: a certificate error is shown, never worked
        // around; an origin that wants a client certificate is for a tunnel from now on.
        let mark = match c {
            ConnectError::Certificate { .. } => Some((ERROR_HEADER, ORIGIN_CERTIFICATE)),
            ConnectError::ClientCertificate { .. } => {
                Some((PASSTHROUGH_HEADER, CLIENT_CERTIFICATE))
            }
            _ => None,
        };
        if let Some((name, value)) = mark {
            r.headers.insert(name, HeaderValue::from_static(value));
        }
        return r;
    }
    Reply::text(
        StatusCode::BAD_GATEWAY,
        &format!("origin error: {}", error_reason(e)),
    )
}

/// Phases after a response's original bytes are at hand: the stages' page filters (which may
/// make sub-requests through `sub` and replace the body), the body filters (their result
/// stored as the variant unless a page filter said it may not be), then the stages'
/// `after_response` with the original.
async fn held_phases(
    ex: &Exchange,
    ctx: &StageCtx<'_>,
    timing: &TimingCell,
    variant: &str,
    held: Held,
) -> Transformed {
    let stages = &ex.server.stages;
    let sub = SubRequests::new(
        ex.server.clone(),
        ex.req.clone(),
        ex.parts.uri.clone(),
        ex.below.clone(),
    );
    let proxy_codings = proxy_chose_codings(ex);
    let status = held.status;
    let mut store = true;
    let mut page: Option<(HeaderMap, Bytes)> = None;
    for stage in stages.iter() {
        let (h, b) = match &page {
            Some((h, b)) => (h, b),
            None => (&held.headers, &held.body),
        };
        let Some(filter) = stage.page_filter(ctx, original(ex, status, h, b, proxy_codings), &sub)
        else {
            continue;
        };
        let change = filter.await;
        store &= !change.uncacheable;
        if let Some(replaced) = change.replaced {
            page = Some(replaced);
        }
    }
    let variant = if store { variant } else { "" };
    let received = held.received;
    let out = match page {
        // Boxed, as the origin's path is: a cache hit that transforms nothing does not carry
        // the transform's state.
        Some((h, b)) => {
            Box::pin(transform_off_thread(
                ex, timing, variant, status, h, b, received, false,
            ))
            .await
        }
        None if needs_transform(ex, status, &held.body) => {
            let (h, b) = (held.headers.clone(), held.body.clone());
            // The origin's own response: it may go out as it is while its variant is made.
            Box::pin(transform_off_thread(
                ex, timing, variant, status, h, b, received, true,
            ))
            .await
        }
        None => {
            // Nothing runs in between: the original is handed on without a copy.
            let o = original(ex, status, &held.headers, &held.body, proxy_codings);
            stages.after_response(ctx, o, &sub);
            let t = Transformed {
                status,
                headers: held.headers,
                body: held.body,
            };
            return client_decodable(ex, t);
        }
    };
    let o = original(ex, status, &held.headers, &held.body, proxy_codings);
    stages.after_response(ctx, o, &sub);
    out
}

/// What `page_filter` and `after_response` see of a response.
fn original<'a>(
    ex: &'a Exchange,
    status: StatusCode,
    headers: &'a HeaderMap,
    body: &'a Bytes,
    proxy_codings: bool,
) -> Original<'a> {
    Original {
        method: &ex.parts.method,
        uri: &ex.parts.uri,
        status,
        headers,
        body,
        proxy_codings,
    }
}

/// Whether a response goes to the body filters at all.
fn needs_transform(ex: &Exchange, status: StatusCode, body: &Bytes) -> bool {
    status == StatusCode::OK && ex.server.stages.filter_bodies() && !body.is_empty()
}

/// Runs the transform phases in the transform pool (blocking threads, at most `[limits]
/// transform-workers` at once): image transcoding and brotli take milliseconds of CPU that
/// must not stall other connections on this worker. A panic in a transform costs only the
/// transformation: the original goes out. With `may_defer` (the origin's own response to a
/// client, or to a stage's sub-request for one), the client's measured link decides whether
/// the response waits for the transform at all ([`crate::adapt::hold_for_transform`]); the
/// work is measured either way. A sub-request decides as its client would: its result goes
/// to that client over the same link, and a client's request that joins a prefetch waits
/// for whatever the prefetch waits for (a prefetch that held every image for background
/// transcoding made the browser's requests wait seconds for them over LTE).
#[allow(clippy::too_many_arguments)]
async fn transform_off_thread(
    ex: &Exchange,
    timing: &TimingCell,
    variant: &str,
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
    received: Received,
    may_defer: bool,
) -> Transformed {
    if !needs_transform(ex, status, &body) {
        return client_decodable(
            ex,
            Transformed {
                status,
                headers,
                body,
            },
        );
    }
    let server = &ex.server;
    let ctx = ex.ctx();
    let kind = Kind::of(crate::optimize::content_type(&headers));
    let measured = server.stages.wants_body(&headers, &ctx);
    if !measured {
        // No body filter works on it (each checks what it wants first): no trip to a worker.
        let original = Transformed {
            status,
            headers,
            body,
        };
        return client_decodable(ex, original);
    }
    let memory = server.stages.body_memory(&body);
    let cacheable = cacheable_variant(ex, variant);
    let held = Held {
        status,
        headers: headers.clone(),
        body: body.clone(),
        received,
    };
    // Held for a transform within what it saves at the client's rate (`None`: no bound);
    // a prefetch, whose answer nothing waits for, is never held.
    let mut bound = None;
    let unattended = ex.below.as_ref().is_some_and(|b| b.unattended);
    let not_held = if !may_defer {
        None
    } else if unattended && cacheable {
        server.costs.decided(kind, Hold::Defer);
        Some(Hold::Defer)
    } else if ctx.link.is_some() {
        let d = hold_decision(ex, &ctx, kind, body.len() as u64, cacheable);
        timing.set_decision(d);
        if d.hold == Hold::Transform {
            bound = d.bound();
            None
        } else {
            server.costs.decided(kind, d.hold);
            timing.set_hold(d.hold);
            Some(d.hold)
        }
    } else {
        None
    };
    if let Some(hold) = not_held {
        if hold == Hold::Defer {
            make_in_background(ex, variant, held);
        }
        let original = Transformed {
            status,
            headers,
            body,
        };
        return client_decodable(ex, original);
    }
    let work = expected_work(ex, &held);
    let run = measured_run(ex, variant, held);
    let priority = match ex.below {
        None => Priority::Client,
        Some(_) => Priority::Background,
    };
    let started = tokio::time::Instant::now();
    let pool = server.transform_pool.clone();
    let done = match bound {
        None => pool.run_costed(priority, memory, work, run).await,
        Some(limit) => {
            // Spawned: past the bound the job goes on (and stores the variant) without us.
            let mut job =
                tokio::spawn(async move { pool.run_costed(priority, memory, work, run).await });
            match tokio::time::timeout(limit, &mut job).await {
                Ok(r) => {
                    server.costs.decided(kind, Hold::Transform);
                    timing.set_hold(Hold::Transform);
                    r.unwrap_or(Err(crate::transform_pool::JobError::Panicked))
                }
                Err(_) => {
                    // It costs more than it saves: the original goes out now.
                    let h = if cacheable { Hold::Defer } else { Hold::Skip };
                    server.costs.decided(kind, h);
                    timing.set_hold(h);
                    TimingCell::set(&timing.queue, started.elapsed());
                    let original = Transformed {
                        status,
                        headers,
                        body,
                    };
                    return client_decodable(ex, original);
                }
            }
        }
    };
    let elapsed = started.elapsed();
    if let Ok((_, work)) = &done {
        TimingCell::set(&timing.transform, *work);
        TimingCell::set(&timing.queue, elapsed.saturating_sub(*work));
    } else {
        TimingCell::set(&timing.transform, elapsed);
    }
    match done {
        Ok((t, _)) => t,
        Err(e) => {
            tracing::error!(error = ?e, url = %ex.parts.uri, "transform failed; original passed through");
            client_decodable(
                ex,
                Transformed {
                    status,
                    headers,
                    body,
                },
            )
        }
    }
}

/// From the origin's head: a client's response whose only use for its body is a transform
/// (no page filter reads it), of a declared length, in no content coding, of a kind whose
/// cost is known, that is not worth holding for its transform at the client's measured
/// rate: the decision (deferred or skipped, recorded), so that it streams through instead of
/// being read whole first. `None`: read it whole and decide then, as usual.
fn hold_at_head(
    ex: &Exchange,
    ctx: &StageCtx<'_>,
    timing: &TimingCell,
    variant: &str,
    rparts: &http::response::Parts,
    declared: Option<u64>,
) -> Option<Hold> {
    let (stages, headers, status) = (&ex.server.stages, &rparts.headers, rparts.status);
    let n = declared.filter(|&n| n > 0)?;
    if ex.below.is_some()
        || ctx.link.is_none()
        || status != StatusCode::OK
        || content_coding(headers).is_some()
        || !stages.filter_bodies()
        || stages.wants_original(status, headers)
        || !stages.wants_body(headers, ctx)
    {
        return None;
    }
    let kind = Kind::of(crate::optimize::content_type(headers));
    ex.server.costs.estimate(kind)?;
    let d = hold_decision(ex, ctx, kind, n, cacheable_variant(ex, variant));
    timing.set_decision(d);
    if d.hold == Hold::Transform {
        return None;
    }
    ex.server.costs.decided(kind, d.hold);
    timing.set_hold(d.hold);
    Some(d.hold)
}

/// A client's response of this variant would be kept as the variant for the next client.
fn cacheable_variant(ex: &Exchange, variant: &str) -> bool {
    !variant.is_empty() && ex.parts.method == Method::GET && ex.server.cache.is_some()
}

/// Whether a client's response of `kind`, `bytes` long, is held for its transform at the
/// client's measured link ([`crate::adapt::hold_for_transform`], fed the pool's queue and
/// the kind's measured cost).
fn hold_decision(
    ex: &Exchange,
    ctx: &StageCtx<'_>,
    kind: Kind,
    bytes: u64,
    cacheable: bool,
) -> crate::adapt::HoldDecision {
    let pool = &ex.server.transform_pool;
    crate::adapt::hold_for_transform(
        ctx.link,
        bytes,
        ex.server.costs.estimate(kind),
        pool.work_ahead_of_client() / pool.workers().max(1) as u32,
        cacheable,
        ex.server.air_budgets.waiting_bytes(ex.req.peer.ip()),
    )
}

/// The work transforming `held` is expected to take, from its kind's measured cost (zero
/// before the kind has run).
fn expected_work(ex: &Exchange, held: &Held) -> Duration {
    let kind = Kind::of(crate::optimize::content_type(&held.headers));
    ex.server
        .costs
        .estimate(kind)
        .map_or(Duration::ZERO, |e| e.work_for(held.body.len() as u64))
}

/// The transform phases of `held` as a job for the workers, timing its work into the kind's
/// cost record; the job gives the result and its work.
fn measured_run(
    ex: &Exchange,
    variant: &str,
    held: Held,
) -> impl FnOnce() -> (Transformed, Duration) + Send + 'static {
    let job = ex.clone();
    let variant = variant.to_string();
    let kind = Kind::of(crate::optimize::content_type(&held.headers));
    move || {
        let bytes_in = held.body.len() as u64;
        let t0 = std::time::Instant::now();
        let out = transform_and_store(
            &job,
            &variant,
            held.status,
            held.headers,
            held.body,
            held.received,
        );
        let work = t0.elapsed();
        job.server
            .costs
            .ran(kind, bytes_in, out.body.len() as u64, work);
        (out, work)
    }
}

/// Makes the variant of `held` for the next client, at background priority, once: while it
/// is being made, a client asking for it gets the original without starting it again.
fn make_in_background(ex: &Exchange, variant: &str, held: Held) {
    let Some(claim) = ex
        .server
        .making
        .claim(format!("{} {variant}", ex.parts.uri))
    else {
        return;
    };
    let memory = ex.server.stages.body_memory(&held.body);
    let work = expected_work(ex, &held);
    let run = measured_run(ex, variant, held);
    let pool = ex.server.transform_pool.clone();
    tokio::spawn(async move {
        let _ = pool
            .run_costed(Priority::Background, memory, work, run)
            .await;
        drop(claim);
    });
}

/// Phases: decode → transforms → store the variant. Never fails: on any problem the
/// original passes through untouched.
fn transform_and_store(
    ex: &Exchange,
    variant: &str,
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
    received: Received,
) -> Transformed {
    let server = &ex.server;
    let metrics = &server.metrics;
    let ctx = ex.ctx();
    let original = Transformed {
        status,
        headers: headers.clone(),
        body: body.clone(),
    };
    if status != StatusCode::OK || !server.stages.filter_bodies() {
        return client_decodable(ex, original);
    }
    let wants = server.stages.wants_body(&headers, &ctx);
    let mut headers = headers;
    let mut body = body;
    let coding = content_coding(&headers);
    if let Some(ce) = &coding {
        if !wants {
            return client_decodable(ex, original);
        }
        match compress::decode(&body, ce, server.cfg.limits.max_body_transform) {
            Ok(d) => {
                body = Bytes::from(d);
                headers.remove(header::CONTENT_ENCODING);
                headers.remove(header::CONTENT_LENGTH);
            }
            Err(e) => {
                // A gzip bomb or corrupt coding: the original goes through as it is.
                tracing::info!(error = %e, url = %ex.parts.uri, "not decoding origin body; passed through");
                return client_decodable(ex, original);
            }
        }
    }
    // A job no transform wants (a response of no type any of them works on) transforms
    // nothing: not a run.
    if wants {
        Metrics::add(&metrics.transforms_run, 1);
    }
    for stage in server.stages.iter() {
        match stage.body_filter(&ctx, &mut headers, &body) {
            Applied::Changed { body: out } => body = Bytes::from(out),
            Applied::Unchanged(why) => {
                tracing::trace!(stage = stage.name(), why = %why, "unchanged");
            }
        }
    }
    // Stored changed or not: a variant that is the original still saves the next client's
    // request the transforms' work (an image the transcoder cannot shrink costs as much CPU
    // every time). Bodies are stored by hash, so an unchanged one takes no second copy.
    if !variant.is_empty() && ex.parts.method == Method::GET {
        if let Some(cache) = &server.cache {
            if let Some(rp) = received.parts(status, &headers) {
                // On the transform pool's blocking thread: the synchronous cache.
                if let Err(e) = cache.blocking().store(
                    &ex.parts,
                    &rp,
                    &body,
                    variant,
                    received.request_time,
                    received.response_time,
                ) {
                    tracing::warn!(error = %e, "cache store of variant failed");
                }
            }
        }
    }
    Transformed {
        status,
        headers,
        body,
    }
}

/// A stage (compression) asked the origin for other codings than the client did: the proxy
/// then encodes what goes to the client itself.
fn proxy_chose_codings(ex: &Exchange) -> bool {
    ex.parts.headers.get(header::ACCEPT_ENCODING)
        != ex.req.head.headers.get(header::ACCEPT_ENCODING)
}

/// When the proxy asked the origin for a coding the client did not accept, decodes it
/// (within the limit); otherwise returns the response as it is.
fn client_decodable(ex: &Exchange, t: Transformed) -> Transformed {
    let Some(ce) = content_coding(&t.headers) else {
        return t;
    };
    let client_ae = ex
        .req
        .head
        .headers
        .get(header::ACCEPT_ENCODING)
        .and_then(|v| v.to_str().ok());
    let accepted = ce.split(',').all(|c| compress::accepts(client_ae, c));
    if accepted || !proxy_chose_codings(ex) {
        return t;
    }
    match compress::decode(&t.body, &ce, ex.server.cfg.limits.max_body_transform) {
        Ok(d) => {
            let mut headers = t.headers;
            headers.remove(header::CONTENT_ENCODING);
            headers.remove(header::CONTENT_LENGTH);
            Transformed {
                status: t.status,
                headers,
                body: Bytes::from(d),
            }
        }
        Err(_) => t,
    }
}

/// In URL mode a redirect's Location must point back at the proxy too.
fn rewrite_location(headers: &mut HeaderMap, ex: &Exchange) {
    let Some((page, authority)) = &ex.url_mode else {
        return;
    };
    let Some(loc) = headers.get(header::LOCATION).and_then(|v| v.to_str().ok()) else {
        return;
    };
    let Ok(target) = page.join(loc) else { return };
    if let Some(p) = crate::url_rewrite::to_proxy_url(&target, authority) {
        if let Ok(v) = HeaderValue::from_str(&p) {
            headers.insert(header::LOCATION, v);
        }
    }
}
