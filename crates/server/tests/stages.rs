//! The stage pipeline: a stage is plugged in through its factory (the built-ins and any
//! other alike), its `[stages.NAME]` keys are checked, its metrics registered; the
//! Server-Timing stage end to end.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use common::*;
use http::header::{HeaderMap, HeaderValue};
use webpep_server::stage::{LogRecord, Registry, Section, Stage, StageCtx, StageFactory, Timing};
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
    assert_eq!(timing_names(v), ["proxy", "origin", "transform"], "{v}");
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
