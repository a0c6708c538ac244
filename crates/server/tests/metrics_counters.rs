//! `/metrics` (issue 31 item 4): every metric means what its HELP says. Each test drives the
//! real proxy on loopback (with real origins on loopback) through a precisely known set of
//! client requests, scrapes `/metrics` over HTTP from the admin listener, and asserts the
//! exact change of the counters it is about and, where it can, that no other counter moved.
//! The last test fails when `/metrics` shows a metric that no test here (or one named in
//! [`COVERED`]) checks, so a new counter comes with its test.
//!
//! Waits poll with a bounded retry ([`settled`], [`until`]); the bounds are failure guards,
//! never what a test asserts.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use webpep_server::config::Secs;
use webpep_server::{CancellationToken, Server, ServerConfig};

/// The failure guard of one step (generous for a shared machine; never asserted on).
const GUARD: Duration = Duration::from_secs(10);

async fn guarded<F: std::future::Future>(what: &str, f: F) -> F::Output {
    match tokio::time::timeout(GUARD, f).await {
        Ok(v) => v,
        Err(_) => panic!("{what}: not done within {GUARD:?}"),
    }
}

// ---------------------------------------------------------------------------------------
// Scraping /metrics
// ---------------------------------------------------------------------------------------

/// One scrape of `/metrics`: each series (name with labels) and its value, and each metric
/// family's TYPE.
#[derive(Debug, Clone)]
struct Scrape {
    values: BTreeMap<String, f64>,
    types: BTreeMap<String, String>,
}

fn family(series: &str) -> &str {
    series.split('{').next().unwrap_or(series)
}

impl Scrape {
    fn parse(text: &str) -> Scrape {
        let (mut values, mut types) = (BTreeMap::new(), BTreeMap::new());
        for line in text.lines() {
            if let Some(t) = line.strip_prefix("# TYPE ") {
                let (name, ty) = t.split_once(' ').expect("TYPE name type");
                types.insert(name.to_string(), ty.to_string());
            } else if !line.starts_with('#') && !line.is_empty() {
                let (series, v) = line.rsplit_once(' ').expect("series value");
                let v: f64 = v.parse().unwrap_or_else(|_| panic!("value of {line:?}"));
                assert!(
                    values.insert(series.to_string(), v).is_none(),
                    "{series} twice"
                );
            }
        }
        for s in values.keys() {
            assert!(types.contains_key(family(s)), "{s} without a TYPE line");
        }
        Scrape { values, types }
    }

    fn get(&self, series: &str) -> f64 {
        *self
            .values
            .get(series)
            .unwrap_or_else(|| panic!("{series} not on /metrics"))
    }
}

/// `/metrics` from the proxy's admin listener, over HTTP as Prometheus reads it.
async fn scrape(p: &Proxy) -> Scrape {
    let raw = guarded("/metrics", async {
        let mut s = TcpStream::connect(p.admin).await.unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: admin\r\n\r\n")
            .await
            .unwrap();
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).await.unwrap();
        raw
    })
    .await;
    assert_eq!(status_of(&raw), 200);
    let body = body_of(&raw);
    Scrape::parse(std::str::from_utf8(&body).expect("UTF-8 metrics"))
}

/// The counters (TYPE counter) that changed between two scrapes, by how much; families in
/// `ignore` left out.
fn deltas(before: &Scrape, after: &Scrape, ignore: &[&str]) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for (series, v) in &after.values {
        let fam = family(series);
        if after.types.get(fam).map(String::as_str) != Some("counter") || ignore.contains(&fam) {
            continue;
        }
        let was = before.values.get(series).copied().unwrap_or(0.0);
        assert!(*v >= was, "counter {series} went down: {was} → {v}");
        if *v != was {
            out.insert(series.clone(), (*v - was) as u64);
        }
    }
    out
}

fn wanted(want: &[(&str, u64)]) -> BTreeMap<String, u64> {
    want.iter()
        .filter(|(_, n)| *n != 0)
        .map(|(s, n)| (s.to_string(), *n))
        .collect()
}

/// Asserts the counters (but those of the families in `ignore`) changed by exactly `want`,
/// and no other counter changed.
#[track_caller]
fn assert_deltas(before: &Scrape, after: &Scrape, ignore: &[&str], want: &[(&str, u64)]) {
    assert_eq!(deltas(before, after, ignore), wanted(want));
}

/// Scrapes until the counters (but `ignore`d families) changed by exactly `want` since
/// `before` (for counts the proxy makes after the client has seen its answer, such as a
/// tunnel's); that scrape.
async fn settled(p: &Proxy, before: &Scrape, ignore: &[&str], want: &[(&str, u64)]) -> Scrape {
    let want = wanted(want);
    let mut last = BTreeMap::new();
    let waited = tokio::time::timeout(GUARD, async {
        loop {
            let s = scrape(p).await;
            last = deltas(before, &s, ignore);
            if last == want {
                return s;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    match waited {
        Ok(s) => s,
        Err(_) => panic!("counters never changed by {want:?}; last: {last:?}"),
    }
}

/// Scrapes until `cond` holds of a scrape (a gauge reaching a value); that scrape.
async fn until(p: &Proxy, what: &str, cond: impl Fn(&Scrape) -> bool) -> Scrape {
    let waited = tokio::time::timeout(GUARD, async {
        loop {
            let s = scrape(p).await;
            if cond(&s) {
                return s;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    waited.unwrap_or_else(|_| panic!("{what}: never"))
}

/// The series of `webpep_requests_total` for a mode and status class.
fn requests(mode: &str, class: &str) -> String {
    format!("webpep_requests_total{{mode=\"{mode}\",class=\"{class}\"}}")
}

const CLIENT_IN: &str = "webpep_client_bytes_in_total";
const CLIENT_OUT: &str = "webpep_client_bytes_out_total";
const ORIGIN_IN: &str = "webpep_origin_bytes_in_total";
const ORIGIN_OUT: &str = "webpep_origin_bytes_out_total";
const CONNECTIONS: &str = "webpep_connections_total";
const REQUESTS: &str = "webpep_requests_total";
/// The counters every exchange moves; left out where a test is about others.
const TRAFFIC: [&str; 6] = [
    CLIENT_IN,
    CLIENT_OUT,
    ORIGIN_IN,
    ORIGIN_OUT,
    CONNECTIONS,
    REQUESTS,
];

// ---------------------------------------------------------------------------------------
// The origin (common's, which counts every byte) and a raw client
// ---------------------------------------------------------------------------------------

/// A response as an origin writes it: status line, `headers`, Content-Length, body.
fn response(status: &str, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut out = format!("HTTP/1.1 {status}\r\n");
    for (k, v) in headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    let mut out = out.into_bytes();
    out.extend_from_slice(body);
    out
}

/// An origin's answer: exactly these bytes.
fn send(b: Vec<u8>) -> OriginReply {
    OriginReply::raw(vec![Part::Send(b)])
}

/// Sends `request` on a new connection and reads until the proxy closes it (the requests
/// here say `Connection: close`, so every byte the proxy wrote is in the answer).
async fn exchange(proxy: SocketAddr, request: &[u8]) -> Vec<u8> {
    guarded("an exchange", async {
        let mut s = TcpStream::connect(proxy).await.unwrap();
        s.write_all(request).await.unwrap();
        read_all(&mut s).await
    })
    .await
}

/// Everything until the peer closes (or resets).
async fn read_all(s: &mut TcpStream) -> Vec<u8> {
    let mut raw = Vec::new();
    let mut tmp = [0u8; 16384];
    while let Ok(n) = s.read(&mut tmp).await {
        if n == 0 {
            break;
        }
        raw.extend_from_slice(&tmp[..n]);
    }
    raw
}

/// `GET url` through the proxy, closing after the answer.
fn get(url: &str, extra: &str) -> String {
    format!("GET {url} HTTP/1.1\r\nHost: x\r\n{extra}Connection: close\r\n\r\n")
}

fn parse_head(raw: &[u8]) -> (u16, Vec<(String, String)>, usize) {
    let mut hs = [httparse::EMPTY_HEADER; 64];
    let mut r = httparse::Response::new(&mut hs);
    match r.parse(raw) {
        Ok(httparse::Status::Complete(n)) => (
            r.code.unwrap(),
            r.headers
                .iter()
                .map(|h| {
                    (
                        h.name.to_ascii_lowercase(),
                        String::from_utf8_lossy(h.value).into_owned(),
                    )
                })
                .collect(),
            n,
        ),
        _ => panic!("no response head in {:?}", String::from_utf8_lossy(raw)),
    }
}

fn status_of(raw: &[u8]) -> u16 {
    parse_head(raw).0
}

fn header_of(raw: &[u8], name: &str) -> Option<String> {
    parse_head(raw)
        .1
        .into_iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v)
}

/// The body of the one response in `raw` (Content-Length, chunked, or to the end).
fn body_of(raw: &[u8]) -> Vec<u8> {
    let (_, headers, n) = parse_head(raw);
    let rest = &raw[n..];
    let get = |k: &str| headers.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    if get("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        let mut dec = webpep_server::http1::ChunkedDecoder::new(1 << 30);
        let mut body = Vec::new();
        dec.decode(rest, &mut body).unwrap();
        assert!(dec.is_done(), "chunked body incomplete");
        return body;
    }
    match get("content-length").and_then(|v| v.parse::<usize>().ok()) {
        Some(len) => {
            assert_eq!(rest.len(), len, "body as long as declared");
            rest.to_vec()
        }
        None => rest.to_vec(),
    }
}

/// A proxy on `listener` (with an admin listener on loopback).
fn proxy_on(listener: std::net::TcpListener, cfg: ServerConfig) -> Proxy {
    let a = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let (addr, admin) = (listener.local_addr().unwrap(), a.local_addr().unwrap());
    let server = Server::new(cfg).unwrap();
    let cancel = CancellationToken::new();
    let done = tokio::spawn(
        server
            .clone()
            .serve(vec![listener], Some(a), cancel.clone()),
    );
    Proxy {
        addr,
        admin,
        server,
        cancel,
        done,
        _cache_dir: None,
    }
}

/// A loopback port nothing listens on.
fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

// ---------------------------------------------------------------------------------------
// The metrics, each with its test
// ---------------------------------------------------------------------------------------

/// Every metric family (or, for a family whose labels are reasons, every series) and the
/// test that checks it. The last test fails when `/metrics` shows one that is not here.
const COVERED: &[(&str, &str)] = &[
    ("webpep_requests_total", "requests_are_counted_once_by_mode_and_status_class (and every test here: no other class moves)"),
    (CLIENT_IN, "a_get_counts_one_request_and_every_byte_both_ways, a_request_body_and_100_continue_are_counted, tunnels_and_tls_relays_count_their_bytes_once, refused_connections_are_counted_with_their_bytes"),
    (CLIENT_OUT, "the same four"),
    (ORIGIN_IN, "a_get_counts_one_request_and_every_byte_both_ways, streamed_responses_and_their_bytes, tunnels_and_tls_relays_count_their_bytes_once"),
    (ORIGIN_OUT, "a_get_counts_one_request_and_every_byte_both_ways, a_request_body_and_100_continue_are_counted, tunnels_and_tls_relays_count_their_bytes_once"),
    ("webpep_cache_hits_total", "cache_counters_count_client_requests"),
    ("webpep_cache_misses_total", "cache_counters_count_client_requests"),
    ("webpep_cache_stale_total", "cache_counters_count_client_requests"),
    ("webpep_cache_validated_total", "cache_counters_count_client_requests"),
    ("webpep_cache_entries", "cache_counters_count_client_requests (gauge)"),
    ("webpep_cache_bytes", "cache_counters_count_client_requests (gauge)"),
    ("webpep_compress_saved_bytes_total", "compression_runs_one_transform_and_counts_what_it_saved"),
    ("webpep_transcode_saved_bytes_total", "transcoding_counts_what_it_saved"),
    ("webpep_transforms_run_total", "compression_runs_one_transform_and_counts_what_it_saved, transcoding_counts_what_it_saved"),
    ("webpep_transform_work_microseconds_total", "compression_runs_one_transform_and_counts_what_it_saved, transcoding_counts_what_it_saved (by kind)"),
    ("webpep_transform_bytes_in_total", "compression_runs_one_transform_and_counts_what_it_saved, transcoding_counts_what_it_saved (by kind)"),
    ("webpep_transform_bytes_out_total", "compression_runs_one_transform_and_counts_what_it_saved, transcoding_counts_what_it_saved (by kind)"),
    ("webpep_transform_holds_total", "tests/adapt.rs: a_transform_not_worth_its_time_at_the_rate_is_made_for_the_next_client (held and deferred; a measured link only)"),
    ("webpep_responses_streamed_total", "streamed_responses_and_their_bytes"),
    ("webpep_inlined_objects_total", "inlining_counts_each_object_inlined (and tests/inline.rs)"),
    // Prefetching is asynchronous and has its own exact tests; not repeated here.
    ("webpep_prefetch_started_total", "tests/prefetch.rs: a_pages_objects_are_in_cache_before_the_browser_asks (exactly 5), without_prefetch_only_the_page_is_fetched (0)"),
    ("webpep_prefetch_skipped_total", "tests/prefetch.rs: objects_over_max_per_page_are_not_prefetched (exactly 7), a_page_and_its_stylesheets_share_one_allowance (1)"),
    ("webpep_server_timing_responses_total", "tests/stages.rs: server_timing_reports_the_proxy_and_origin_time (exactly 2), server_timing_is_off_by_default (absent)"),
    ("webpep_server_timing_proxy_microseconds_total", "tests/stages.rs: server_timing_reports_the_proxy_and_origin_time (the sum of the two responses' proxy durations)"),
    ("webpep_prefetch_joined_total", "tests/prefetch.rs: a_request_joins_the_prefetch_of_its_url_under_way (exactly 1), a_request_does_not_wait_behind_the_prefetch_queue (0)"),
    (CONNECTIONS, "a_get_counts_one_request_and_every_byte_both_ways, refused_connections_are_counted_with_their_bytes, connection_limits_count_refusals_by_reason_and_evictions"),
    ("webpep_connections_refused_total", "refused_connections_are_counted_with_their_bytes"),
    ("webpep_intercepted_connections_total", "tests/explicit_intercept.rs: an_intercepted_connect_serves_http2_through_the_pipeline and _http11_ (exactly 2), a_garbled_client_hello_fails_only_that_connection (1: not the failed one), an_excluded_host_is_tunnelled_untouched and with_interception_off_a_connect_is_a_tunnel (0)"),
    ("webpep_connections_evicted_total", "connection_limits_count_refusals_by_reason_and_evictions"),
    ("webpep_client_limit_refusals_total{reason=\"connections\"}", "connection_limits_count_refusals_by_reason_and_evictions"),
    ("webpep_client_limit_refusals_total{reason=\"total\"}", "connection_limits_count_refusals_by_reason_and_evictions"),
    ("webpep_client_limit_refusals_total{reason=\"rate\"}", "request_limits_count_refusals_by_reason"),
    ("webpep_client_limit_refusals_total{reason=\"buffer\"}", "request_limits_count_refusals_by_reason"),
    ("webpep_client_timeouts_total", "slow_heads_and_bodies_are_client_timeouts"),
    ("webpep_auth_failures_total{reason=\"missing\"}", "auth_failures_by_reason_and_verifications"),
    ("webpep_auth_failures_total{reason=\"scheme\"}", "auth_failures_by_reason_and_verifications"),
    ("webpep_auth_failures_total{reason=\"malformed\"}", "auth_failures_by_reason_and_verifications"),
    ("webpep_auth_failures_total{reason=\"invalid\"}", "auth_failures_by_reason_and_verifications"),
    ("webpep_auth_failures_total{reason=\"transparent\"}", "auth_failures_by_reason_and_verifications"),
    ("webpep_auth_failures_total{reason=\"throttled\"}", "auth_failures_by_reason_and_verifications"),
    ("webpep_auth_verifications_total", "auth_failures_by_reason_and_verifications"),
    ("webpep_active_connections", "gauges_of_connections_and_buffered_bytes_return_to_zero"),
    ("webpep_buffered_bytes", "gauges_of_connections_and_buffered_bytes_return_to_zero"),
    ("webpep_transform_workers", "transform_pool_gauges"),
    ("webpep_transforms_running", "transform_pool_gauges"),
    ("webpep_transforms_running_max", "transform_pool_gauges"),
    ("webpep_transforms_waiting", "transform_pool_gauges"),
    ("webpep_transform_memory_limit_bytes", "transform_pool_gauges"),
    ("webpep_transform_memory_reserved_bytes", "transform_pool_gauges"),
    ("webpep_quic_client_connections_total", "tests/quic_front.rs: a_browser_request_crosses_the_quic_link_through_the_edge_pipeline (per enrolled client)"),
    ("webpep_quic_client_requests_total", "tests/quic_front.rs: a_browser_request_crosses_the_quic_link_through_the_edge_pipeline"),
    ("webpep_quic_client_bytes_in_total", "tests/quic_front.rs: a_browser_request_crosses_the_quic_link_through_the_edge_pipeline"),
    ("webpep_quic_client_bytes_out_total", "tests/quic_front.rs: a_browser_request_crosses_the_quic_link_through_the_edge_pipeline"),
];

/// Prometheus reads `/metrics` every few seconds: that must count nothing.
#[tokio::test]
async fn scraping_counts_nothing() {
    let p = start_proxy(test_config()).await;
    let first = scrape(&p).await;
    let second = scrape(&p).await;
    assert_deltas(&first, &second, &[], &[]);
    // A fresh proxy has counted nothing.
    for (series, v) in &first.values {
        if first.types[family(series)] == "counter" {
            assert_eq!(*v, 0.0, "{series}");
        }
    }
    assert_eq!(first.get("webpep_active_connections"), 0.0);
}

/// One GET: one request of its mode and class, one connection, and every byte counted where
/// its HELP says, exactly as the client and the origin saw them.
#[tokio::test]
async fn a_get_counts_one_request_and_every_byte_both_ways() {
    let o = Origin::start(|_| {
        send(response(
            "200 OK",
            &[("Content-Type", "text/plain"), ("X-Note", "counted")],
            b"hello world",
        ))
    })
    .await;
    let p = start_proxy(test_config()).await;
    let before = scrape(&p).await;
    let req = get(&format!("http://{}/a?b=c", o.addr), "User-Agent: t\r\n");
    let raw = exchange(p.addr, req.as_bytes()).await;
    assert_eq!(status_of(&raw), 200);
    assert_eq!(body_of(&raw), b"hello world");
    let after = scrape(&p).await;
    let r = requests("explicit", "2xx");
    assert_deltas(
        &before,
        &after,
        &[],
        &[
            (&r, 1),
            (CONNECTIONS, 1),
            (CLIENT_IN, req.len() as u64),
            (CLIENT_OUT, raw.len() as u64),
            (ORIGIN_OUT, o.read()),
            (ORIGIN_IN, o.written()),
        ],
    );
    // A second request on a kept-alive origin connection counts its own bytes only.
    let (read, written) = (o.read(), o.written());
    let raw2 = exchange(p.addr, req.as_bytes()).await;
    let third = scrape(&p).await;
    assert_deltas(
        &after,
        &third,
        &[],
        &[
            (&r, 1),
            (CONNECTIONS, 1),
            (CLIENT_IN, req.len() as u64),
            (CLIENT_OUT, raw2.len() as u64),
            (ORIGIN_OUT, o.read() - read),
            (ORIGIN_IN, o.written() - written),
        ],
    );
}

/// A request body is read from the client and sent to the origin; the `100 Continue` the
/// client waited for is written to it.
#[tokio::test]
async fn a_request_body_and_100_continue_are_counted() {
    let o = Origin::start(|_| send(response("201 Created", &[], b"ok"))).await;
    let p = start_proxy(test_config()).await;
    let before = scrape(&p).await;
    let body = b"twelve bytes";
    let head = format!(
        "POST http://{}/up HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n",
        o.addr,
        body.len()
    );
    let raw = guarded("the upload", async {
        let mut s = TcpStream::connect(p.addr).await.unwrap();
        s.write_all(head.as_bytes()).await.unwrap();
        let mut got = Vec::new();
        let mut tmp = [0u8; 1024];
        while !got.ends_with(b"\r\n\r\n") {
            let n = s.read(&mut tmp).await.unwrap();
            assert!(n > 0, "closed before 100 Continue");
            got.extend_from_slice(&tmp[..n]);
        }
        assert_eq!(got, b"HTTP/1.1 100 Continue\r\n\r\n");
        s.write_all(body).await.unwrap();
        got.extend(read_all(&mut s).await);
        got
    })
    .await;
    let final_response = &raw[b"HTTP/1.1 100 Continue\r\n\r\n".len()..];
    assert_eq!(status_of(final_response), 201);
    assert_eq!(o.seen()[0].body, body);
    let after = scrape(&p).await;
    let r = requests("explicit", "2xx");
    assert_deltas(
        &before,
        &after,
        &[],
        &[
            (&r, 1),
            (CONNECTIONS, 1),
            (CLIENT_IN, (head.len() + body.len()) as u64),
            (CLIENT_OUT, raw.len() as u64),
            (ORIGIN_OUT, o.read()),
            (ORIGIN_IN, o.written()),
        ],
    );
}

/// One request of each mode and status class: each adds one to its own series, and to no
/// other.
#[tokio::test]
async fn requests_are_counted_once_by_mode_and_status_class() {
    let o = Origin::start(|r| match r.path.as_str() {
        "/moved" => send(response("302 Found", &[("Location", "/ok")], b"")),
        "/missing" => send(response("404 Not Found", &[], b"no")),
        _ => send(response("200 OK", &[], b"ok")),
    })
    .await;
    let port = o.addr.port();
    let mut cfg = test_config();
    cfg.acl.connect_ports = vec![port];
    let p = start_proxy(cfg).await;
    let u = start_proxy(url_mode(test_config())).await;
    let dead = closed_port();
    let base = format!("http://{}", o.addr);
    let cases: Vec<(&Proxy, String, &str, &str, u16)> = vec![
        (&p, get(&format!("{base}/ok"), ""), "explicit", "2xx", 200),
        (&p, get(&format!("{base}/moved"), ""), "explicit", "3xx", 302),
        (&p, get(&format!("{base}/missing"), ""), "explicit", "4xx", 404),
        (
            &p,
            get(&format!("http://127.0.0.1:{dead}/"), ""),
            "explicit",
            "5xx",
            502,
        ),
        (
            &p,
            format!("GET /ok HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"),
            "transparent",
            "2xx",
            200,
        ),
        (
            &u,
            format!("GET /www.a.test:{port}/ok HTTP/1.1\r\nHost: proxy.test:3128\r\nConnection: close\r\n\r\n"),
            "url",
            "2xx",
            200,
        ),
        (
            &p,
            format!(
                "GET /proxy.pac HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
                p.addr
            ),
            "local",
            "2xx",
            200,
        ),
        (
            &p,
            format!(
                "GET /nothing HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
                p.addr
            ),
            "local",
            "4xx",
            404,
        ),
        (
            &p,
            "CONNECT 127.0.0.1:1 HTTP/1.1\r\nHost: 127.0.0.1:1\r\n\r\n".to_string(),
            "connect",
            "4xx",
            403,
        ),
        (
            &p,
            "NOT HTTP AT ALL\r\n\r\n".to_string(),
            "none",
            "4xx",
            400,
        ),
        (
            &p,
            get("ftp://127.0.0.1/x", ""),
            "none",
            "4xx",
            400,
        ),
    ];
    for (proxy, req, mode, class, status) in cases {
        let before = scrape(proxy).await;
        let raw = exchange(proxy.addr, req.as_bytes()).await;
        assert_eq!(status_of(&raw), status, "{req}");
        let after = scrape(proxy).await;
        let only: Vec<&str> = TRAFFIC.into_iter().filter(|f| *f != REQUESTS).collect();
        let r = requests(mode, class);
        assert_deltas(&before, &after, &only, &[(&r, 1)]);
    }
    // CONNECT 2xx and tls: tunnels_and_tls_relays_count_their_bytes_once.
}

/// The cache counters count clients' requests by what the cache had for them; the gauges
/// show what it holds.
#[tokio::test]
async fn cache_counters_count_client_requests() {
    let versions = Arc::new(AtomicU64::new(0));
    let v = versions.clone();
    let o = Origin::start(move |r| match r.path.as_str() {
        "/fresh" => send(response(
            "200 OK",
            &[("Cache-Control", "max-age=600")],
            b"fresh body",
        )),
        // Stale at once, and still the same when revalidated.
        "/same" if r.header("if-none-match") == Some("\"s1\"") => send(response(
            "304 Not Modified",
            &[("ETag", "\"s1\""), ("Cache-Control", "max-age=0")],
            b"",
        )),
        "/same" => send(response(
            "200 OK",
            &[("ETag", "\"s1\""), ("Cache-Control", "max-age=0")],
            b"same body",
        )),
        // Stale at once, and changed by the time it is revalidated.
        _ => {
            let n = v.fetch_add(1, Ordering::SeqCst);
            let etag = format!("\"c{n}\"");
            send(response(
                "200 OK",
                &[("ETag", &etag), ("Cache-Control", "max-age=0")],
                format!("changed {n}").as_bytes(),
            ))
        }
    })
    .await;
    let mut cfg = test_config();
    cfg.cache.enabled = true;
    let p = start_proxy(cfg).await;
    let start = scrape(&p).await;
    assert_eq!(start.get("webpep_cache_entries"), 0.0);
    assert_eq!(start.get("webpep_cache_bytes"), 0.0);
    let hits = "webpep_cache_hits_total";
    let misses = "webpep_cache_misses_total";
    let stale = "webpep_cache_stale_total";
    let validated = "webpep_cache_validated_total";
    // Path, the counters it moves, requests the origin gets.
    type Step<'a> = (&'a str, &'a [(&'a str, u64)], usize);
    let steps: [Step; 6] = [
        ("/fresh", &[(misses, 1)], 1),
        ("/fresh", &[(hits, 1)], 0),
        ("/same", &[(misses, 1)], 1),
        ("/same", &[(stale, 1), (validated, 1)], 1),
        ("/changed", &[(misses, 1)], 1),
        ("/changed", &[(stale, 1)], 1),
    ];
    for (path, want, to_origin) in steps {
        let before = scrape(&p).await;
        let asked = o.seen().len();
        let raw = exchange(
            p.addr,
            get(&format!("http://{}{path}", o.addr), "").as_bytes(),
        )
        .await;
        assert_eq!(status_of(&raw), 200, "{path}");
        assert_eq!(o.seen().len() - asked, to_origin, "{path}");
        let after = scrape(&p).await;
        assert_deltas(&before, &after, &TRAFFIC, want);
    }
    assert_eq!(o.seen()[2].header("if-none-match"), Some("\"s1\""));
    assert_eq!(
        body_of(
            &exchange(
                p.addr,
                get(&format!("http://{}/changed", o.addr), "").as_bytes()
            )
            .await
        ),
        b"changed 2"
    );
    // One entry per URL; the bytes at least their bodies.
    let end = scrape(&p).await;
    assert_eq!(end.get("webpep_cache_entries"), 3.0);
    let bodies = (b"fresh body".len() + b"same body".len() + b"changed 2".len()) as f64;
    assert!(end.get("webpep_cache_bytes") >= bodies, "{end:?}");
}

fn page() -> String {
    let mut s = String::from("<html><body>");
    for i in 0..100 {
        s.push_str(&format!("<p>Paragraph {i}, which compresses well.</p>\n"));
    }
    s.push_str("</body></html>");
    s
}

/// A compressible page for a client that accepts gzip: one transform run, and the bytes saved
/// are what the client did not have to receive. The stored result answers the next client
/// without another run.
#[tokio::test]
async fn compression_runs_one_transform_and_counts_what_it_saved() {
    let text = page();
    let t = text.clone();
    let o = Origin::start(move |_| {
        send(response(
            "200 OK",
            &[
                ("Content-Type", "text/html; charset=utf-8"),
                ("Cache-Control", "max-age=600"),
            ],
            t.as_bytes(),
        ))
    })
    .await;
    let mut cfg = test_config();
    cfg.cache.enabled = true;
    cfg.compress.enabled = true;
    let p = start_proxy(cfg).await;
    let req = get(
        &format!("http://{}/p.html", o.addr),
        "Accept-Encoding: gzip\r\n",
    );
    let before = scrape(&p).await;
    let raw = exchange(p.addr, req.as_bytes()).await;
    assert_eq!(header_of(&raw, "content-encoding").as_deref(), Some("gzip"));
    let sent = body_of(&raw);
    assert!(sent.len() < text.len() / 3);
    let after = scrape(&p).await;
    let run = run_deltas("text", (&before, &after), text.len(), sent.len());
    let mut want = vec![
        ("webpep_cache_misses_total", 1),
        ("webpep_transforms_run_total", 1),
        (
            "webpep_compress_saved_bytes_total",
            (text.len() - sent.len()) as u64,
        ),
    ];
    want.extend(run.iter().map(|(s, n)| (s.as_str(), *n)));
    assert_deltas(&before, &after, &TRAFFIC, &want);
    let raw = exchange(p.addr, req.as_bytes()).await;
    assert_eq!(body_of(&raw), sent);
    let again = scrape(&p).await;
    assert_deltas(&after, &again, &TRAFFIC, &[("webpep_cache_hits_total", 1)]);
}

/// The counters one transform run of `kind` moves: its input and output bytes, and its work
/// (whatever it took, as the scrapes say).
fn run_deltas(
    kind: &str,
    (before, after): (&Scrape, &Scrape),
    bytes_in: usize,
    bytes_out: usize,
) -> Vec<(String, u64)> {
    let work = format!("webpep_transform_work_microseconds_total{{kind=\"{kind}\"}}");
    vec![
        (
            format!("webpep_transform_bytes_in_total{{kind=\"{kind}\"}}"),
            bytes_in as u64,
        ),
        (
            format!("webpep_transform_bytes_out_total{{kind=\"{kind}\"}}"),
            bytes_out as u64,
        ),
        (work.clone(), (after.get(&work) - before.get(&work)) as u64),
    ]
}

/// A photo-like JPEG at high quality: the proxy's JPEG is smaller.
fn photo_jpeg() -> Vec<u8> {
    let (w, h) = (200u32, 150u32);
    let mut seed = 7u32;
    let img = image::RgbImage::from_fn(w, h, |x, y| {
        seed = seed.wrapping_mul(1103515245).wrapping_add(12345);
        let n = ((seed >> 16) % 6) as u8;
        image::Rgb([
            (x * 255 / w) as u8 ^ n,
            (y * 255 / h) as u8,
            ((x + y) % 256) as u8,
        ])
    });
    let mut out = Vec::new();
    let enc =
        image::codecs::jpeg::JpegEncoder::new_with_quality(std::io::Cursor::new(&mut out), 95);
    img.write_with_encoder(enc).unwrap();
    out
}

#[tokio::test]
async fn transcoding_counts_what_it_saved() {
    let jpeg = photo_jpeg();
    let j = jpeg.clone();
    let o = Origin::start(move |_| send(response("200 OK", &[("Content-Type", "image/jpeg")], &j)))
        .await;
    let mut cfg = test_config();
    cfg.transcode.enabled = true;
    let p = start_proxy(cfg).await;
    let before = scrape(&p).await;
    let raw = exchange(
        p.addr,
        get(&format!("http://{}/photo.jpg", o.addr), "Accept: */*\r\n").as_bytes(),
    )
    .await;
    assert_eq!(
        header_of(&raw, "content-type").as_deref(),
        Some("image/jpeg")
    );
    let sent = body_of(&raw);
    assert!(sent.len() < jpeg.len(), "{} !< {}", sent.len(), jpeg.len());
    let after = scrape(&p).await;
    let run = run_deltas("image", (&before, &after), jpeg.len(), sent.len());
    assert!(run[2].1 > 0, "a transcode is work: {run:?}");
    let mut want = vec![
        ("webpep_transforms_run_total", 1),
        (
            "webpep_transcode_saved_bytes_total",
            (jpeg.len() - sent.len()) as u64,
        ),
    ];
    want.extend(run.iter().map(|(s, n)| (s.as_str(), *n)));
    assert_deltas(&before, &after, &TRAFFIC, &want);
}

/// An event stream and a response slower than `buffer-timeout` are streamed and counted; a
/// response too large to transform streams too but is neither (its HELP says which count).
/// Streamed bodies count as bytes from the origin as they pass.
#[tokio::test]
async fn streamed_responses_and_their_bytes() {
    let gate = Arc::new(Notify::new());
    let g = gate.clone();
    let events = ["data: 1\n\n", "data: two\n\n", "data: three\n\n"];
    let o = Origin::start(move |r| match r.path.as_str() {
        "/events" => {
            let mut b = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
            for e in events {
                b.extend_from_slice(format!("{:x}\r\n{e}\r\n", e.len()).as_bytes());
            }
            b.extend_from_slice(b"0\r\n\r\n");
            send(b)
        }
        "/slow" => halves(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 20\r\n\r\n",
            &g,
        ),
        _ => send(response("200 OK", &[("Content-Type", "text/plain")], &[b'x'; 5000])),
    })
    .await;
    let mut cfg = test_config();
    cfg.limits.max_body_transform = 1000;
    cfg.limits.buffer_timeout = Secs(Duration::from_millis(100));
    // A stage that works on text bodies, so they are buffered at all (a body no stage works
    // on streams through from its first byte).
    cfg.compress.enabled = true;
    let p = start_proxy(cfg).await;
    let streamed = "webpep_responses_streamed_total";
    let r = requests("explicit", "2xx");
    let traffic = [CLIENT_IN, CLIENT_OUT, CONNECTIONS];

    let before = scrape(&p).await;
    let written = o.written();
    let raw = exchange(
        p.addr,
        get(&format!("http://{}/events", o.addr), "").as_bytes(),
    )
    .await;
    assert_eq!(body_of(&raw), events.concat().as_bytes());
    let after = scrape(&p).await;
    let head =
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n";
    let framing: usize =
        o.written() as usize - written as usize - head.len() - events.concat().len();
    assert_eq!(framing, 3 * 5 + 5, "precondition: chunk framing");
    assert_deltas(
        &before,
        &after,
        &traffic,
        &[
            (&r, 1),
            (streamed, 1),
            // The head and the events; chunk framing is not body.
            (ORIGIN_IN, (head.len() + events.concat().len()) as u64),
            (ORIGIN_OUT, o.read()),
        ],
    );

    // Slower than buffer-timeout: what came goes out, then the rest as it comes.
    let (read, written) = (o.read(), o.written());
    let before = scrape(&p).await;
    let raw = guarded("the slow response", async {
        let mut s = TcpStream::connect(p.addr).await.unwrap();
        s.write_all(get(&format!("http://{}/slow", o.addr), "").as_bytes())
            .await
            .unwrap();
        let mut got = read_until(&mut s, b"first half").await;
        gate.notify_one();
        got.extend(read_all(&mut s).await);
        got
    })
    .await;
    assert_eq!(body_of(&raw), b"first halfother half");
    let after = scrape(&p).await;
    assert_deltas(
        &before,
        &after,
        &traffic,
        &[
            (&r, 1),
            (streamed, 1),
            (ORIGIN_IN, o.written() - written),
            (ORIGIN_OUT, o.read() - read),
        ],
    );

    // Over max-body-transform: streamed untouched, not counted as streamed.
    let (read, written) = (o.read(), o.written());
    let before = scrape(&p).await;
    let raw = exchange(
        p.addr,
        get(&format!("http://{}/large", o.addr), "").as_bytes(),
    )
    .await;
    assert_eq!(body_of(&raw).len(), 5000);
    let after = scrape(&p).await;
    assert_deltas(
        &before,
        &after,
        &traffic,
        &[
            (&r, 1),
            (ORIGIN_IN, o.written() - written),
            (ORIGIN_OUT, o.read() - read),
        ],
    );
}

/// A TCP server on `ip` that echoes what it reads; once `reset` is notified it resets the
/// connection instead of closing it.
async fn echo_on(ip: &str, reset: Option<Arc<Notify>>) -> SocketAddr {
    let l = TcpListener::bind((ip, 0)).await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let reset = reset.clone();
            tokio::spawn(async move {
                let mut b = [0u8; 4096];
                loop {
                    let read = match &reset {
                        Some(r) => tokio::select! {
                            n = s.read(&mut b) => n,
                            _ = r.notified() => {
                                let _ = socket2::SockRef::from(&s).set_linger(Some(Duration::ZERO));
                                return;
                            }
                        },
                        None => s.read(&mut b).await,
                    };
                    match read {
                        Ok(n) if n > 0 => {
                            if s.write_all(&b[..n]).await.is_err() {
                                return;
                            }
                        }
                        _ => return,
                    }
                }
            });
        }
    });
    addr
}

/// A ClientHello for `name` as rustls writes it (an IP address: no server name in it).
fn client_hello(name: &str) -> Vec<u8> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    let server_name = rustls::pki_types::ServerName::try_from(name.to_string()).unwrap();
    let mut conn = rustls::ClientConnection::new(Arc::new(cfg), server_name).unwrap();
    let mut out = Vec::new();
    conn.write_tls(&mut out).unwrap();
    out
}

/// Tunnel bytes are counted once each, on both sides, whichever way the tunnel ends: a byte
/// sent with the CONNECT head, the echo, a tunnel closed cleanly, one reset by its
/// destination; the TLS relay the same.
#[tokio::test]
async fn tunnels_and_tls_relays_count_their_bytes_once() {
    let reset = Arc::new(Notify::new());
    let echo = echo_on("127.0.0.1", None).await;
    let resetting = echo_on("127.0.0.1", Some(reset.clone())).await;
    let mut cfg = test_config();
    cfg.acl.connect_ports = vec![echo.port(), resetting.port()];
    let p = start_proxy(cfg).await;
    let established = b"HTTP/1.1 200 Connection established\r\n\r\n";
    let r = requests("connect", "2xx");
    for (dest, resets) in [(echo, false), (resetting, true)] {
        let before = scrape(&p).await;
        // The first tunnel bytes in the same segment as the CONNECT head.
        let head = format!("CONNECT {dest} HTTP/1.1\r\nHost: {dest}\r\n\r\n");
        let (first, second) = (b"ping".as_slice(), b"second".as_slice());
        let mut out = head.clone().into_bytes();
        out.extend_from_slice(first);
        let got = guarded("the tunnel", async {
            let mut s = TcpStream::connect(p.addr).await.unwrap();
            s.write_all(&out).await.unwrap();
            let mut got = Vec::new();
            let mut tmp = [0u8; 1024];
            let want = established.len() + first.len();
            while got.len() < want {
                let n = s.read(&mut tmp).await.unwrap();
                assert!(n > 0);
                got.extend_from_slice(&tmp[..n]);
            }
            s.write_all(second).await.unwrap();
            while got.len() < want + second.len() {
                let n = s.read(&mut tmp).await.unwrap();
                assert!(n > 0);
                got.extend_from_slice(&tmp[..n]);
            }
            if resets {
                reset.notify_one();
            } else {
                s.shutdown().await.unwrap();
            }
            got.extend(read_all(&mut s).await);
            got
        })
        .await;
        let mut expected = established.to_vec();
        expected.extend_from_slice(first);
        expected.extend_from_slice(second);
        assert_eq!(got, expected, "resets: {resets}");
        let carried = (first.len() + second.len()) as u64;
        settled(
            &p,
            &before,
            &[],
            &[
                (&r, 1),
                (CONNECTIONS, 1),
                (CLIENT_IN, (head.len() as u64) + carried),
                (CLIENT_OUT, established.len() as u64 + carried),
                (ORIGIN_OUT, carried),
                (ORIGIN_IN, carried),
            ],
        )
        .await;
    }

    // The TLS relay: a proxy on another loopback address at the destination's port.
    let echo = echo_on("127.0.0.1", None).await;
    let mut cfg = test_config();
    cfg.acl.connect_ports = vec![echo.port()];
    cfg.origin
        .hosts
        .insert("origin.test".into(), "127.0.0.1".parse().unwrap());
    let listener = std::net::TcpListener::bind(("127.0.0.2", echo.port())).unwrap();
    let t = proxy_on(listener, cfg);
    let hello = client_hello("origin.test");
    let before = scrape(&t).await;
    let got = guarded("the relay", async {
        let mut s = TcpStream::connect(t.addr).await.unwrap();
        s.write_all(&hello).await.unwrap();
        let mut got = vec![0u8; hello.len()];
        s.read_exact(&mut got).await.unwrap();
        s.shutdown().await.unwrap();
        got.extend(read_all(&mut s).await);
        got
    })
    .await;
    assert_eq!(got, hello, "the destination's echo of the hello");
    let n = hello.len() as u64;
    let r = requests("tls", "2xx");
    settled(
        &t,
        &before,
        &[],
        &[
            (&r, 1),
            (CONNECTIONS, 1),
            (CLIENT_IN, n),
            (CLIENT_OUT, n),
            (ORIGIN_OUT, n),
            (ORIGIN_IN, n),
        ],
    )
    .await;
    // A hello without a server name is refused with an alert, which is written to the client.
    let hello = client_hello("127.0.0.1");
    let before = scrape(&t).await;
    let raw = exchange(t.addr, &hello).await;
    assert_eq!(raw.first(), Some(&21), "a TLS alert record");
    let r = requests("tls", "4xx");
    settled(
        &t,
        &before,
        &[],
        &[
            (&r, 1),
            (CONNECTIONS, 1),
            (CLIENT_IN, hello.len() as u64),
            (CLIENT_OUT, raw.len() as u64),
        ],
    )
    .await;
}

/// A client the ACL refuses: its connection is accepted and refused, and the refusal's bytes
/// are bytes to and from a client.
#[tokio::test]
async fn refused_connections_are_counted_with_their_bytes() {
    let mut cfg = test_config();
    cfg.acl.allow_clients = vec!["127.0.0.2/32".parse().unwrap()];
    let p = start_proxy(cfg).await;
    let before = scrape(&p).await;
    let req = get("http://127.0.0.1:9/", "");
    let raw = guarded("the refusal", async {
        let mut s = TcpStream::connect(p.addr).await.unwrap();
        s.write_all(req.as_bytes()).await.unwrap();
        s.shutdown().await.unwrap();
        read_all(&mut s).await
    })
    .await;
    assert_eq!(status_of(&raw), 403);
    settled(
        &p,
        &before,
        &[],
        &[
            (CONNECTIONS, 1),
            ("webpep_connections_refused_total", 1),
            (CLIENT_IN, req.len() as u64),
            (CLIENT_OUT, raw.len() as u64),
        ],
    )
    .await;
}

/// A client connection that answered one request and waits for the next (the proxy has
/// counted it).
async fn idle_client(p: &Proxy, o: &Origin) -> TcpStream {
    guarded("an idle client", async {
        let mut s = TcpStream::connect(p.addr).await.unwrap();
        s.write_all(format!("GET http://{}/idle HTTP/1.1\r\nHost: x\r\n\r\n", o.addr).as_bytes())
            .await
            .unwrap();
        let mut got = Vec::new();
        let mut tmp = [0u8; 1024];
        while !got.ends_with(b"ok") {
            let n = s.read(&mut tmp).await.unwrap();
            assert!(n > 0);
            got.extend_from_slice(&tmp[..n]);
        }
        s
    })
    .await
}

fn refusals(reason: &str) -> String {
    format!("webpep_client_limit_refusals_total{{reason=\"{reason}\"}}")
}

/// Per-client and total connection limits: each refusal counted under its reason, and an
/// idle connection closed for a new client counted as evicted.
#[tokio::test]
async fn connection_limits_count_refusals_by_reason_and_evictions() {
    let gate = Arc::new(Notify::new());
    let g = gate.clone();
    let o = Origin::start(move |r| {
        let ok = Part::Send(response("200 OK", &[], b"ok"));
        OriginReply::raw(if r.path == "/hold" {
            vec![Part::Wait(g.clone()), ok]
        } else {
            vec![ok]
        })
    })
    .await;
    let refused = |p: &Proxy| {
        let addr = p.addr;
        async move { exchange(addr, b"").await }
    };

    // Per client: the second connection of a client allowed one.
    let mut cfg = test_config();
    cfg.limits.max_client_connections = 1;
    let p = start_proxy(cfg).await;
    let first = idle_client(&p, &o).await;
    let before = scrape(&p).await;
    let raw = refused(&p).await;
    assert_eq!(status_of(&raw), 503);
    let after = scrape(&p).await;
    let reason = refusals("connections");
    assert_deltas(
        &before,
        &after,
        &[CLIENT_OUT],
        &[(CONNECTIONS, 1), (&reason, 1)],
    );
    drop(first);

    // In total, while the one connection allowed is busy.
    let mut cfg = test_config();
    cfg.limits.max_connections = 1;
    let p = start_proxy(cfg).await;
    let mut busy = TcpStream::connect(p.addr).await.unwrap();
    busy.write_all(get(&format!("http://{}/hold", o.addr), "").as_bytes())
        .await
        .unwrap();
    guarded("the origin sees /hold", async {
        while !o.seen().iter().any(|s| s.path == "/hold") {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    let before = scrape(&p).await;
    let raw = refused(&p).await;
    assert_eq!(status_of(&raw), 503);
    let after = scrape(&p).await;
    let reason = refusals("total");
    assert_deltas(
        &before,
        &after,
        &[CLIENT_OUT],
        &[(CONNECTIONS, 1), (&reason, 1)],
    );
    gate.notify_one();
    let raw = guarded("the held answer", read_all(&mut busy)).await;
    assert_eq!(body_of(&raw), b"ok");

    // At the total limit, an idle connection gives way to a new client: evicted.
    let idle = idle_client(&p, &o).await;
    let before = scrape(&p).await;
    let raw = exchange(
        p.addr,
        get(&format!("http://{}/new", o.addr), "").as_bytes(),
    )
    .await;
    assert_eq!(status_of(&raw), 200);
    let after = scrape(&p).await;
    let r = requests("explicit", "2xx");
    assert_deltas(
        &before,
        &after,
        &[CLIENT_IN, CLIENT_OUT, ORIGIN_IN, ORIGIN_OUT],
        &[
            (CONNECTIONS, 1),
            (&r, 1),
            ("webpep_connections_evicted_total", 1),
        ],
    );
    drop(idle);
}

/// Requests over the client's rate, and a request body over the buffered-body budget: each
/// refusal counted under its reason, and answered as a request.
#[tokio::test]
async fn request_limits_count_refusals_by_reason() {
    let o = Origin::start(|_| send(response("200 OK", &[], b"ok"))).await;
    let mut cfg = test_config();
    cfg.limits.client_rate = 0.001;
    cfg.limits.client_burst = 1;
    let p = start_proxy(cfg).await;
    let url = format!("http://{}/r", o.addr);
    assert_eq!(
        status_of(&exchange(p.addr, get(&url, "").as_bytes()).await),
        200
    );
    let before = scrape(&p).await;
    let raw = exchange(p.addr, get(&url, "").as_bytes()).await;
    assert_eq!(status_of(&raw), 429);
    let after = scrape(&p).await;
    let (reason, r) = (refusals("rate"), requests("explicit", "4xx"));
    assert_deltas(
        &before,
        &after,
        &[CLIENT_IN, CLIENT_OUT],
        &[(CONNECTIONS, 1), (&r, 1), (&reason, 1)],
    );

    // One upload holds most of the budget while a second asks for its share.
    let mut cfg = test_config();
    cfg.limits.max_request_body = 1000;
    cfg.limits.max_client_buffered_bytes = 1000;
    cfg.limits.max_buffered_bytes = 1000;
    let p = start_proxy(cfg).await;
    let upload = |len: usize| {
        format!(
            "POST {url} HTTP/1.1\r\nHost: x\r\nContent-Length: {len}\r\nConnection: close\r\n\r\n"
        )
    };
    let mut holding = TcpStream::connect(p.addr).await.unwrap();
    holding.write_all(upload(800).as_bytes()).await.unwrap();
    until(&p, "the first upload's share", |s| {
        s.get("webpep_buffered_bytes") == 800.0
    })
    .await;
    let before = scrape(&p).await;
    // The head alone: the proxy refuses before reading a body.
    let head = upload(800);
    let raw = exchange(p.addr, head.as_bytes()).await;
    assert_eq!(status_of(&raw), 503);
    let after = scrape(&p).await;
    // Refused before the request's mode is known: a rejected request.
    let (reason, r) = (refusals("buffer"), requests("none", "5xx"));
    assert_deltas(
        &before,
        &after,
        &[],
        &[
            (CONNECTIONS, 1),
            (&r, 1),
            (&reason, 1),
            (CLIENT_IN, head.len() as u64),
            (CLIENT_OUT, raw.len() as u64),
        ],
    );
    drop(holding);
    assert_eq!(o.seen().len(), 1, "no upload reached the origin");
}

/// A head not completed within `header-timeout` and a body below `body-min-rate`: 408, one
/// client timeout each.
#[tokio::test]
async fn slow_heads_and_bodies_are_client_timeouts() {
    let mut cfg = test_config();
    cfg.limits.header_timeout = Secs(Duration::from_millis(200));
    cfg.limits.body_min_rate = 1000;
    let p = start_proxy(cfg).await;
    let timeouts = "webpep_client_timeouts_total";
    let r = requests("none", "4xx");
    for partial in [
        "GET http://127.0.0.1:9/ HTTP/1.1\r\nHost:".to_string(),
        "POST http://127.0.0.1:9/ HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789"
            .to_string(),
    ] {
        let before = scrape(&p).await;
        // Sent, then nothing more: the proxy's own timeout answers.
        let raw = exchange(p.addr, partial.as_bytes()).await;
        assert_eq!(status_of(&raw), 408, "{partial}");
        let after = scrape(&p).await;
        assert_deltas(
            &before,
            &after,
            &[],
            &[
                (timeouts, 1),
                (&r, 1),
                (CONNECTIONS, 1),
                (CLIENT_IN, partial.len() as u64),
                (CLIENT_OUT, raw.len() as u64),
            ],
        );
    }
}

fn basic(user_pass: &str) -> String {
    use base64::Engine as _;
    format!(
        "Proxy-Authorization: Basic {}\r\n",
        base64::engine::general_purpose::STANDARD.encode(user_pass)
    )
}

/// Each kind of refused credentials under its reason; a password hash computed only when
/// the credentials were not verified lately, and never for a throttled address.
#[tokio::test]
async fn auth_failures_by_reason_and_verifications() {
    let o = Origin::start(|_| send(response("200 OK", &[], b"ok"))).await;
    let dir = tempfile::tempdir().unwrap();
    let users: PathBuf = dir.path().join("users");
    std::fs::write(
        &users,
        format!(
            "alice:{}\n",
            webpep_server::auth::hash_password_with("pw", b"alice-salt-16byt", 1000)
        ),
    )
    .unwrap();
    let mut cfg = test_config();
    cfg.auth.users_file = Some(users);
    cfg.auth.max_failures = 2;
    cfg.auth.failure_backoff = Secs(Duration::from_secs(600));
    cfg.auth.max_failure_backoff = Secs(Duration::from_secs(600));
    let p = start_proxy(cfg).await;
    let url = format!("http://{}/a", o.addr);
    let failed = |reason: &str| format!("webpep_auth_failures_total{{reason=\"{reason}\"}}");
    let verified = "webpep_auth_verifications_total";
    let transparent = format!(
        "GET /a HTTP/1.1\r\nHost: {}\r\n{}Connection: close\r\n\r\n",
        o.addr,
        basic("alice:pw")
    );
    // Request, status, the counters it moves.
    type Step = (String, u16, Vec<(String, u64)>);
    let steps: Vec<Step> = vec![
        (get(&url, ""), 407, vec![(failed("missing"), 1)]),
        (
            get(&url, "Proxy-Authorization: Bearer abc\r\n"),
            407,
            vec![(failed("scheme"), 1)],
        ),
        (
            get(&url, "Proxy-Authorization: Basic !!!\r\n"),
            407,
            vec![(failed("malformed"), 1)],
        ),
        (
            get(&url, &basic("alice:pw")),
            200,
            vec![(verified.into(), 1)],
        ),
        // Remembered: no second hash.
        (get(&url, &basic("alice:pw")), 200, vec![]),
        (transparent, 403, vec![(failed("transparent"), 1)]),
        (
            get(&url, &basic("alice:wrong")),
            407,
            vec![(failed("invalid"), 1), (verified.into(), 1)],
        ),
        (
            get(&url, &basic("mallory:guess")),
            407,
            vec![(failed("invalid"), 1), (verified.into(), 1)],
        ),
        // Two failures in a row: the address waits, and its guesses are not checked.
        (
            get(&url, &basic("alice:again")),
            429,
            vec![(failed("throttled"), 1)],
        ),
    ];
    for (req, status, want) in steps {
        let before = scrape(&p).await;
        let raw = exchange(p.addr, req.as_bytes()).await;
        assert_eq!(status_of(&raw), status, "{req}");
        let after = scrape(&p).await;
        let want: Vec<(&str, u64)> = want.iter().map(|(s, n)| (s.as_str(), *n)).collect();
        assert_deltas(&before, &after, &TRAFFIC, &want);
    }
}

/// The gauges of what is open and held now: back to zero when nothing is.
#[tokio::test]
async fn gauges_of_connections_and_buffered_bytes_return_to_zero() {
    let gate = Arc::new(Notify::new());
    let g = gate.clone();
    let o = Origin::start(move |r| {
        if r.path == "/held" {
            let mut first =
                b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 1000\r\n\r\n"
                    .to_vec();
            first.extend_from_slice(&[b'a'; 500]);
            OriginReply::raw(vec![
                Part::Send(first),
                Part::Wait(g.clone()),
                Part::Send(vec![b'b'; 500]),
            ])
        } else {
            send(response("200 OK", &[], b"ok"))
        }
    })
    .await;
    let mut cfg = test_config();
    // The held response must stay buffered, not stream: compression works on its body, and
    // it may take its time.
    cfg.compress.enabled = true;
    cfg.limits.buffer_timeout = Secs(Duration::from_secs(60));
    let p = start_proxy(cfg).await;
    let active = "webpep_active_connections";
    let buffered = "webpep_buffered_bytes";
    assert_eq!(scrape(&p).await.get(active), 0.0);
    let a = idle_client(&p, &o).await;
    let b = idle_client(&p, &o).await;
    assert_eq!(scrape(&p).await.get(active), 2.0);
    drop(a);
    drop(b);
    until(&p, "no connection open", |s| s.get(active) == 0.0).await;

    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(get(&format!("http://{}/held", o.addr), "").as_bytes())
        .await
        .unwrap();
    // The half the origin sent is held, and only that.
    until(&p, "500 bytes buffered", |s| s.get(buffered) == 500.0).await;
    gate.notify_one();
    let raw = guarded("the held response", read_all(&mut s)).await;
    assert_eq!(body_of(&raw).len(), 1000);
    let after = scrape(&p).await;
    assert_eq!(after.get(buffered), 0.0, "released once written");
    drop(s);
    until(&p, "no connection open", |s| s.get(active) == 0.0).await;
}

/// The transform pool's gauges: its configured bounds, nothing running or waiting at rest,
/// and the most that ran at once.
#[tokio::test]
async fn transform_pool_gauges() {
    let text = page();
    let o = Origin::start(move |_| {
        send(response(
            "200 OK",
            &[("Content-Type", "text/html")],
            text.as_bytes(),
        ))
    })
    .await;
    let mut cfg = test_config();
    cfg.compress.enabled = true;
    cfg.limits.transform_workers = 3;
    // Whole 64 KiB units: the pool reserves in those.
    cfg.limits.transform_memory = 3 << 20;
    let p = start_proxy(cfg).await;
    let at_rest = |s: &Scrape, max: f64| {
        assert_eq!(s.get("webpep_transform_workers"), 3.0);
        assert_eq!(
            s.get("webpep_transform_memory_limit_bytes"),
            (3u64 << 20) as f64
        );
        assert_eq!(s.get("webpep_transforms_running"), 0.0);
        assert_eq!(s.get("webpep_transforms_waiting"), 0.0);
        assert_eq!(s.get("webpep_transform_memory_reserved_bytes"), 0.0);
        assert_eq!(s.get("webpep_transforms_running_max"), max);
    };
    at_rest(&scrape(&p).await, 0.0);
    let raw = exchange(
        p.addr,
        get(&format!("http://{}/", o.addr), "Accept-Encoding: gzip\r\n").as_bytes(),
    )
    .await;
    assert_eq!(header_of(&raw, "content-encoding").as_deref(), Some("gzip"));
    let after = scrape(&p).await;
    at_rest(&after, 1.0);
}

/// A page with one small stylesheet: one object inlined (tests/inline.rs counts more cases).
#[tokio::test]
async fn inlining_counts_each_object_inlined() {
    let o = Origin::start(|r| match r.path.as_str() {
        "/" => send(response(
            "200 OK",
            &[
                ("Content-Type", "text/html"),
                ("Cache-Control", "max-age=600"),
            ],
            b"<html><head><link rel=stylesheet href=/s.css></head><body>hi</body></html>",
        )),
        _ => send(response(
            "200 OK",
            &[
                ("Content-Type", "text/css"),
                ("Cache-Control", "max-age=600"),
            ],
            b"body{color:red}",
        )),
    })
    .await;
    let mut cfg = test_config();
    cfg.cache.enabled = true;
    cfg.inline.enabled = true;
    cfg.prefetch.enabled = false;
    let p = start_proxy(cfg).await;
    let before = scrape(&p).await;
    let raw = exchange(p.addr, get(&format!("http://{}/", o.addr), "").as_bytes()).await;
    assert!(
        String::from_utf8_lossy(&body_of(&raw)).contains("<style>body{color:red}</style>"),
        "{}",
        String::from_utf8_lossy(&raw)
    );
    let after = scrape(&p).await;
    // The page's miss only: the proxy's own lookup of the stylesheet is not a client request.
    assert_deltas(
        &before,
        &after,
        &TRAFFIC,
        &[
            ("webpep_inlined_objects_total", 1),
            ("webpep_cache_misses_total", 1),
        ],
    );
}

/// Every metric `/metrics` shows (with every optional section and stage on) has its test
/// named in [`COVERED`], and everything named there is still shown.
#[tokio::test]
async fn every_metric_on_metrics_is_covered_by_a_test() {
    let mut cfg = test_config();
    cfg.cache.enabled = true;
    cfg.compress.enabled = true;
    cfg.transcode.enabled = true;
    cfg.inline.enabled = true;
    for name in webpep_server::stages::documented_keys().keys() {
        let mut on = webpep_server::toml::Table::new();
        on.insert("enabled".into(), true.into());
        cfg.stages.insert(name.to_string(), on);
    }
    let p = start_proxy(cfg).await;
    let s = scrape(&p).await;
    let covered: BTreeSet<&str> = COVERED.iter().map(|(n, _)| *n).collect();
    let uncovered: Vec<&String> = s
        .values
        .keys()
        .filter(|series| !covered.contains(series.as_str()) && !covered.contains(family(series)))
        .collect();
    assert!(
        uncovered.is_empty(),
        "metrics without a test in tests/metrics_counters.rs (add one, then add them to COVERED): {uncovered:?}"
    );
    let gone: Vec<&&str> = covered
        .iter()
        .filter(|c| !s.values.contains_key(**c) && !s.types.contains_key(**c))
        .collect();
    assert!(gone.is_empty(), "in COVERED but not on /metrics: {gone:?}");
}
