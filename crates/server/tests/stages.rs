//! The stage pipeline: a stage is plugged in through its factory (the built-ins and any
//! other alike), its `[stages.NAME]` keys are checked, its metrics registered; the
//! Server-Timing stage end to end; a stage making sub-requests through its handle to the
//! pipeline (waiting for one in `page_filter`, starting one in `after_response`).

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use http::header::{self, HeaderMap, HeaderValue};
use tokio::sync::mpsc;
use webpep_server::stage::{
    BoxFuture, LogRecord, Original, PageChange, Registry, Section, Stage, StageCtx, StageFactory,
    Stages, SubReply, SubRequests, Timing,
};
use webpep_server::stages::default_stages;
use webpep_server::{CancellationToken, Server, ServerConfig};

fn with_server_timing(mut cfg: ServerConfig) -> ServerConfig {
    let mut t = toml::Table::new();
    t.insert("enabled".into(), toml::Value::Boolean(true));
    cfg.stages.insert("server-timing".into(), t);
    cfg
}

/// `proxy;dur=…, origin;dur=…` → the names in order, each with a non-negative duration.
fn timing_names(v: &str) -> Vec<String> {
    timings(v).into_iter().map(|(n, _)| n).collect()
}

/// `proxy;dur=1.234, …` → (name, microseconds).
fn timings(v: &str) -> Vec<(String, u64)> {
    v.split(',')
        .map(|m| {
            let (name, dur) = m.trim().split_once(";dur=").expect(v);
            let (ms, us) = dur.split_once('.').expect(v);
            assert_eq!(us.len(), 3, "{v}");
            let micros = ms.parse::<u64>().expect(v) * 1000 + us.parse::<u64>().expect(v);
            (name.to_string(), micros)
        })
        .collect()
}

#[tokio::test]
async fn server_timing_reports_the_proxy_and_origin_time() {
    let o = Origin::start(|_r: &OriginRequest| {
        OriginReply::ok("text/plain", "timed").header("Cache-Control", "max-age=600")
    })
    .await;
    let mut cfg = with_server_timing(test_config());
    cfg.cache.enabled = true;
    let p = start_proxy(cfg).await;
    let url = format!("http://{}/t", o.addr);

    let miss = get_once(p.addr, &url, "").await;
    assert_eq!(miss.text(), "timed");
    let v = miss
        .header("server-timing")
        .expect("Server-Timing on a miss");
    assert_eq!(timing_names(v), ["proxy", "origin"], "{v}");

    // A hit never asked the origin: the proxy's own time only.
    let hit = get_once(p.addr, &url, "").await;
    let v = hit.header("server-timing").expect("Server-Timing on a hit");
    assert_eq!(timing_names(v), ["proxy"], "{v}");
    assert_eq!(o.requests(), 1);

    assert_eq!(metric(&p, "webpep_server_timing_responses_total"), 2);
    // The metric sums exactly the proxy durations the two responses carried.
    let proxy = |r: &Resp| timings(r.header("server-timing").unwrap())[0].1;
    assert_eq!(
        metric(&p, "webpep_server_timing_proxy_microseconds_total"),
        proxy(&miss) + proxy(&hit)
    );
}

#[tokio::test]
async fn server_timing_counts_the_transform_time_when_a_body_filter_ran() {
    let body = "compress me, ".repeat(200);
    let o =
        Origin::start(move |_r: &OriginRequest| OriginReply::ok("text/html", body.clone())).await;
    let mut cfg = with_server_timing(test_config());
    cfg.compress.enabled = true;
    let p = start_proxy(cfg).await;
    let r = get_once(
        p.addr,
        &format!("http://{}/page", o.addr),
        "Accept-Encoding: gzip\r\n",
    )
    .await;
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    let v = r.header("server-timing").unwrap();
    // The wait for a transform worker, then its work.
    assert_eq!(
        timing_names(v),
        ["proxy", "origin", "queue", "transform"],
        "{v}"
    );
}

#[tokio::test]
async fn server_timing_is_off_by_default() {
    let o = Origin::start(hello()).await;
    let p = start_proxy(test_config()).await;
    let r = get_once(p.addr, &format!("http://{}/", o.addr), "").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("server-timing"), None);
    assert!(!p
        .server
        .metrics_text()
        .contains("webpep_server_timing_responses_total"));
}

#[test]
fn stage_keys_are_checked_by_name() {
    let err = |toml: &str| {
        let cfg = ServerConfig::from_toml(toml, "t.toml").unwrap();
        Server::new(cfg).unwrap_err().to_string()
    };
    let e = err("[stages.nope]\nenabled = true\n");
    assert!(
        e.contains("stages.nope") && e.contains("server-timing"),
        "{e}"
    );
    let e = err("[stages.server-timing]\nenable = true\n");
    assert!(
        e.contains("stages.server-timing.enable") && e.contains("enabled"),
        "{e}"
    );
    let e = err("[stages.server-timing]\nenabled = \"yes\"\n");
    assert!(e.contains("stages.server-timing.enabled"), "{e}");
    // A good one builds, and prints back.
    let cfg =
        ServerConfig::from_toml("[stages.server-timing]\nenabled = true\n", "t.toml").unwrap();
    assert!(cfg.to_toml().contains("[stages.server-timing]"));
    assert!(Server::new(cfg).is_ok());
}

/// A stage from outside the crate, plugged in the way the built-ins are: it adds a header
/// to every client response and counts them in a metric it registered.
struct Tagging;

struct TagStage(Arc<AtomicU64>, Arc<AtomicU64>);

impl Stage for TagStage {
    fn name(&self) -> &'static str {
        "tag"
    }
    fn order(&self) -> i32 {
        500
    }
    fn variant_part(&self, _ctx: &StageCtx<'_>) -> Option<String> {
        Some("tag=1".into())
    }
    fn response_filter(&self, ctx: &StageCtx<'_>, headers: &mut HeaderMap, _t: &Timing) {
        if !ctx.background {
            headers.insert("x-tag", HeaderValue::from_static("tagged"));
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
    fn logging(&self, record: &LogRecord<'_>) {
        if record.status == 200 && record.cache == "MISS" {
            self.1.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl StageFactory for Tagging {
    fn name(&self) -> &'static str {
        "tag"
    }
    fn build(
        &self,
        _section: Section<'_>,
        registry: &mut Registry,
    ) -> Result<Option<Arc<dyn Stage>>, (String, String)> {
        let n = registry.counter("webpep_tagged_total", "Responses tagged.");
        let logged = registry.counter("webpep_tag_logged_total", "Misses the stage saw logged.");
        Ok(Some(Arc::new(TagStage(n, logged))))
    }
}

#[tokio::test]
async fn a_new_stage_plugs_in_through_its_factory() {
    let o = Origin::start(hello()).await;
    let mut factories = default_stages();
    factories.push(Box::new(Tagging));
    let server = Server::with_stages(test_config(), &factories).unwrap();
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let cancel = CancellationToken::new();
    let done = tokio::spawn(server.clone().serve(vec![l], None, cancel.clone()));
    let r = get_once(addr, &format!("http://{}/", o.addr), "").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-tag"), Some("tagged"));
    assert!(server
        .metrics_text()
        .contains("# HELP webpep_tagged_total Responses tagged.\n# TYPE webpep_tagged_total counter\nwebpep_tagged_total 1\n"));
    assert!(server
        .metrics_text()
        .contains("\nwebpep_tag_logged_total 1\n"));
    cancel.cancel();
    done.await.unwrap().unwrap();
}

#[test]
fn built_in_stages_check_their_sections() {
    for (text, key) in [
        ("[inline]\ntimeout = \"0s\"\n", "inline.timeout"),
        ("[inline]\nconcurrency = 0\n", "inline.concurrency"),
        // Checked when the stage is off too, as before it was a stage.
        (
            "[inline]\nenabled = false\nconcurrency = 0\n",
            "inline.concurrency",
        ),
        ("[prefetch]\nconcurrency = 0\n", "prefetch.concurrency"),
    ] {
        let cfg = ServerConfig::from_toml(text, "i.toml").unwrap();
        let e = Stages::build(&cfg, &default_stages(), "i.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("i.toml") && e.contains(key), "{text}: {e}");
        assert!(Server::new(cfg).is_err(), "{text}");
    }
    let names = Stages::build(&ServerConfig::default(), &default_stages(), "d")
        .unwrap()
        .names();
    assert_eq!(names, ["transcode", "compress", "inline", "prefetch"]);
}

/// What the handle stage saw of a response in `after_response`: its path, depth below the
/// client's request, whether it was background work.
type Seen = (String, u8, bool);

/// A stage that, for a client's `/page`, fetches `/sheet.css` through the pipeline in its
/// page filter and writes the sub-request's cache result and body into the page; and that,
/// after `/page`'s response is made, starts a background GET of `/later.gif` (reported on
/// `later`). Every `after_response` it sees goes to `seen`.
struct HandleStage {
    seen: mpsc::UnboundedSender<Seen>,
    later: mpsc::UnboundedSender<SubReply>,
}

impl Stage for HandleStage {
    fn name(&self) -> &'static str {
        "handle"
    }
    fn order(&self) -> i32 {
        600
    }
    fn page_filter<'a>(
        &'a self,
        ctx: &'a StageCtx<'a>,
        original: Original<'a>,
        sub: &'a SubRequests,
    ) -> Option<BoxFuture<'a, PageChange>> {
        if ctx.background || original.uri.path() != "/page" {
            return None;
        }
        Some(Box::pin(async move {
            assert_eq!(sub.depth(), 0);
            let url = sub.url().unwrap().join("/sheet.css").unwrap();
            let mut req = sub.request(&url, sub.allowance(4)).unwrap();
            assert_eq!(req.below().depth, 1);
            req.headers_mut().remove(header::ACCEPT_ENCODING);
            let reply = sub.get(req).await;
            let mut body = original.body.to_vec();
            body.extend_from_slice(format!(" + {} ", reply.cache).as_bytes());
            body.extend_from_slice(reply.body.as_deref().unwrap_or(b"none"));
            let mut headers = original.headers.clone();
            headers.remove(header::CONTENT_LENGTH);
            headers.remove(header::ETAG);
            PageChange {
                replaced: Some((headers, body.into())),
                uncacheable: true,
            }
        }))
    }
    fn after_response(&self, ctx: &StageCtx<'_>, original: Original<'_>, sub: &SubRequests) {
        let path = original.uri.path().to_string();
        let _ = self.seen.send((path.clone(), sub.depth(), ctx.background));
        if path != "/page" || ctx.background {
            return;
        }
        let url = sub.url().unwrap().join("/later.gif").unwrap();
        let req = sub.request(&url, sub.allowance(4)).unwrap();
        let (get, later) = (sub.get(req), self.later.clone());
        tokio::spawn(async move {
            let _ = later.send(get.await);
        });
    }
}

struct HandleFactory(Arc<HandleStage>);

impl StageFactory for HandleFactory {
    fn name(&self) -> &'static str {
        "handle"
    }
    fn build(
        &self,
        _section: Section<'_>,
        _registry: &mut Registry,
    ) -> Result<Option<Arc<dyn Stage>>, (String, String)> {
        Ok(Some(self.0.clone()))
    }
}

/// A bounded wait for the next value on a channel (a failure guard, never asserted on).
async fn next<T>(rx: &mut mpsc::UnboundedReceiver<T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("within the guard")
        .expect("a value")
}

#[tokio::test]
async fn a_stage_fetches_through_its_handle_and_the_second_time_from_the_cache() {
    let o = Origin::start(|r: &OriginRequest| {
        let cached = |ct: &str, body: &str| {
            OriginReply::ok(ct, body.as_bytes().to_vec()).header("Cache-Control", "max-age=600")
        };
        match r.path.as_str() {
            "/page" => cached("text/plain", "page"),
            "/sheet.css" => cached("text/css", "sheet"),
            "/later.gif" => cached("image/gif", "GIF89a"),
            _ => OriginReply::ok("text/plain", "no").status(404),
        }
    })
    .await;
    let (seen_tx, mut seen) = mpsc::unbounded_channel();
    let (later_tx, mut later) = mpsc::unbounded_channel();
    let stage = Arc::new(HandleStage {
        seen: seen_tx,
        later: later_tx,
    });
    let mut factories = default_stages();
    factories.push(Box::new(HandleFactory(stage)));
    let mut cfg = test_config();
    cfg.cache.enabled = true;
    cfg.prefetch.enabled = false;
    let dir = tempfile::tempdir().unwrap();
    cfg.cache.dir = Some(dir.path().to_path_buf());
    let server = Server::with_stages(cfg, &factories).unwrap();
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let cancel = CancellationToken::new();
    let done = tokio::spawn(server.clone().serve(vec![l], None, cancel.clone()));
    let page = format!("http://{}/page", o.addr);
    let client = "User-Agent: test-agent\r\nCookie: id=secret\r\nAccept-Encoding: gzip\r\n";

    // The page filter waited for its sub-request, which went to the origin.
    let first = get_once(addr, &page, client).await;
    assert_eq!(first.text(), "page + MISS sheet");
    // The sub-request ran through the pipeline: its own after_response, one level down,
    // as background work; then the page's.
    assert_eq!(next(&mut seen).await, ("/sheet.css".into(), 1, true));
    assert_eq!(next(&mut seen).await, ("/page".into(), 0, false));
    // The background GET after the page's response.
    let l = next(&mut later).await;
    assert_eq!((l.status.as_u16(), l.cache), (200, "MISS"));
    assert_eq!(l.body.as_deref(), Some(&b"GIF89a"[..]));
    assert_eq!(next(&mut seen).await, ("/later.gif".into(), 1, true));
    let sheet = o
        .seen()
        .into_iter()
        .find(|r| r.path == "/sheet.css")
        .unwrap();
    assert_eq!(sheet.header("referer"), Some(page.as_str()));
    assert_eq!(sheet.header("user-agent"), Some("test-agent"));
    assert_eq!(sheet.header("cookie"), None, "no credentials below a page");

    // The second time: the page from the cache (its filtered version was not stored as a
    // variant, so the filter ran again), the sub-request a hit; the origin saw each URL
    // once.
    let second = get_once(addr, &page, client).await;
    assert_eq!(second.text(), "page + HIT sheet");
    assert_eq!(next(&mut seen).await, ("/sheet.css".into(), 1, true));
    assert_eq!(next(&mut seen).await, ("/page".into(), 0, false));
    assert_eq!(next(&mut later).await.cache, "HIT");
    // The browser's own request for what was fetched in the background: a hit.
    let gif = get_once(addr, &format!("http://{}/later.gif", o.addr), client).await;
    assert_eq!(gif.text(), "GIF89a");
    let mut paths: Vec<String> = o.seen().into_iter().map(|r| r.path).collect();
    paths.sort();
    assert_eq!(paths, ["/later.gif", "/page", "/sheet.css"]);
    // The cache counters count the client's requests only: /page twice, /later.gif once.
    let m = server.metrics_text();
    let count = |name: &str| {
        m.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .map(|v| v.parse::<u64>().unwrap())
    };
    assert_eq!(count("webpep_cache_misses_total"), Some(1));
    assert_eq!(count("webpep_cache_hits_total"), Some(2));
    cancel.cancel();
    done.await.unwrap().unwrap();
}
