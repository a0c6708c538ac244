//! Time as an input: the proxy's cache decides freshness on the server's clock
//! ([`Server::with_clock`]), so a test moves time on by setting that clock, not by sleeping.
//! Requests go through the in-memory front end (`Server::serve_request`) to a loopback origin.

mod common;
#[path = "common/tls_origin.rs"]
mod tls_origin;

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use common::*;
use webpep_server::reply::{Body, Reply};
use webpep_server::request::Arrival;
use webpep_server::server::Clock;
use webpep_server::Server;

/// A wall clock that moves only when told to.
struct ManualClock(Mutex<SystemTime>);

impl ManualClock {
    fn advance(&self, by: Duration) {
        *self.0.lock().unwrap() += by;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> SystemTime {
        *self.0.lock().unwrap()
    }
}

async fn get(server: &Arc<Server>, url: &str) -> Reply {
    let req = http::Request::get(url).body(Bytes::new()).unwrap();
    let at = Arrival {
        peer: "127.0.0.1:40000".parse().unwrap(),
        local: "127.0.0.1:3128".parse().unwrap(),
        original_dst: None,
    };
    server.serve_request(req, at).await
}

fn text(r: &Reply) -> String {
    match &r.body {
        Body::Full(b) => String::from_utf8_lossy(b).into_owned(),
        Body::Empty => String::new(),
        Body::Stream { .. } => panic!("streamed"),
    }
}

fn header<'a>(r: &'a Reply, name: &str) -> Option<&'a str> {
    r.headers.get(name).and_then(|v| v.to_str().ok())
}

#[tokio::test]
async fn freshness_is_decided_by_the_injected_clock() {
    let o = Origin::start(|r: &OriginRequest| {
        let reply = if r.header("if-none-match") == Some("\"v1\"") {
            OriginReply::ok("text/plain", "").status(304)
        } else {
            OriginReply::ok("text/plain", "version one")
        };
        reply
            .header("Cache-Control", "max-age=60")
            .header("ETag", "\"v1\"")
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = test_config();
    cfg.cache.enabled = true;
    cfg.cache.dir = Some(dir.path().to_path_buf());
    // Any start will do; the origin sends no Date, so only this clock says how old things are.
    let clock = Arc::new(ManualClock(Mutex::new(SystemTime::now())));
    let server = Server::new(cfg).unwrap().with_clock(clock.clone());
    let url = format!("http://{}/fresh", o.addr);

    let r = get(&server, &url).await;
    assert_eq!((r.status.as_u16(), text(&r).as_str()), (200, "version one"));
    assert_eq!(o.requests(), 1);

    // 59 s later on the server's clock: still fresh, a hit 59 s old.
    clock.advance(Duration::from_secs(59));
    let r = get(&server, &url).await;
    assert_eq!((r.status.as_u16(), text(&r).as_str()), (200, "version one"));
    assert_eq!(o.requests(), 1, "a hit");
    assert_eq!(header(&r, "age"), Some("59"));

    // 61 s: stale, so revalidated with the origin, which says it has not changed.
    clock.advance(Duration::from_secs(2));
    let r = get(&server, &url).await;
    assert_eq!((r.status.as_u16(), text(&r).as_str()), (200, "version one"));
    assert_eq!(o.requests(), 2, "revalidated");
    assert_eq!(o.last().unwrap().header("if-none-match"), Some("\"v1\""));
    let m = server.metrics_text();
    assert!(m.contains("webpep_cache_validated_total 1"), "{m}");

    // Freshened by the 304 at that time: a hit again for another 60 s of the clock.
    clock.advance(Duration::from_secs(30));
    let r = get(&server, &url).await;
    assert_eq!(text(&r), "version one");
    assert_eq!(o.requests(), 2, "a hit after freshening");
}

#[tokio::test]
async fn a_response_from_an_https_origin_is_fresh_no_longer_than_its_certificate() {
    let ca = tls_origin::Ca::new();
    // The leaf expires on 2090-01-01; the response says it may be reused for a century.
    let leaf = ca.leaf(&["origin.test"], tls_origin::VALID);
    let (port, answered) =
        tls_origin::tls_origin(tls_origin::OriginTls::new(leaf, &[b"h2", b"http/1.1"])).await;
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = test_config();
    cfg.cache.enabled = true;
    cfg.cache.dir = Some(dir.path().to_path_buf());
    cfg.origin
        .hosts
        .insert("origin.test".into(), "127.0.0.1".parse().unwrap());
    cfg.origin.tls_roots = webpep_server::config::TlsRoots::Files(vec![ca.pem.clone()]);
    let clock = Arc::new(ManualClock(Mutex::new(SystemTime::now())));
    let server = Server::new(cfg).unwrap().with_clock(clock.clone());
    let url = format!("https://origin.test:{port}/cached");

    let r = get(&server, &url).await;
    assert_eq!(r.status, 200, "{}", text(&r));
    let r = get(&server, &url).await;
    assert_eq!(r.cache, "HIT");
    assert_eq!(answered.load(std::sync::atomic::Ordering::SeqCst), 1);

    // Past the certificate's expiry on the server's clock (the handshake still checks the
    // real time, at which the certificate is valid): not served from the cache, fetched again.
    let past_expiry = SystemTime::UNIX_EPOCH + Duration::from_secs(3_786_912_000); // 2090-01-01
    clock.advance(past_expiry.duration_since(clock.now()).unwrap() + Duration::from_secs(60));
    let r = get(&server, &url).await;
    assert_eq!(r.status, 200, "{}", text(&r));
    assert_ne!(r.cache, "HIT");
    assert_eq!(answered.load(std::sync::atomic::Ordering::SeqCst), 2);
}
