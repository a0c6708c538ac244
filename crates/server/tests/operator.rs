//! What an operator reads off the edge proxy: `/metrics` counters that mean what their help
//! says, a refusal that names the setting that allows it, and the PAC file for browsers.

mod common;

use common::*;

/// An unlabelled counter of the in-process proxy.
fn counter(p: &Proxy, name: &str) -> u64 {
    p.server
        .metrics_text()
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("{name} on /metrics"))
}

/// A page with a small stylesheet and image: inlining looks both up in the cache through the
/// pipeline, and prefetch fetches them, yet one client request that is a hit is one hit.
#[tokio::test]
async fn one_client_request_answered_from_the_cache_is_one_hit() {
    let o = step(Origin::start(|r| match r.path.as_str() {
        "/" => OriginReply::ok(
            "text/html",
            "<html><head><link rel=stylesheet href=/s.css></head><body><img src=/i.png>hi</body></html>",
        )
        .header("Cache-Control", "max-age=600"),
        "/s.css" => {
            OriginReply::ok("text/css", "body{color:red}").header("Cache-Control", "max-age=600")
        }
        _ => OriginReply::ok("image/png", vec![0u8; 40]).header("Cache-Control", "max-age=600"),
    }))
    .await;
    let mut cfg = test_config();
    cfg.cache.enabled = true;
    cfg.inline.enabled = true;
    cfg.prefetch.enabled = true;
    let p = step(start_proxy(cfg)).await;
    let page = format!("http://{}/", o.addr);
    let first = get_once(p.addr, &page, "").await;
    assert_eq!(first.status, 200);
    let misses = counter(&p, "webpep_cache_misses_total");
    assert_eq!(misses, 1, "the client's one request: one miss");
    let hits = counter(&p, "webpep_cache_hits_total");
    let second = get_once(p.addr, &page, "").await;
    assert_eq!(second.status, 200);
    assert_eq!(counter(&p, "webpep_cache_hits_total"), hits + 1);
    assert_eq!(counter(&p, "webpep_cache_misses_total"), misses);
}

/// Requests to origins count their heads, not only bodies: a GET has no body but is sent.
#[tokio::test]
async fn bytes_to_and_from_origins_are_counted() {
    let o = step(Origin::start(hello())).await;
    let p = step(start_proxy(test_config())).await;
    let r = get_once(p.addr, &format!("http://{}/abc", o.addr), "").await;
    assert_eq!(r.text(), "hello /abc");
    let out = counter(&p, "webpep_origin_bytes_out_total");
    // "GET /abc HTTP/1.1\r\n" and at least a Host field and the blank line.
    assert!(out >= 19 + 8 + 2, "{out}");
    // The head the origin wrote ("HTTP/1.1 200 X", Content-Type, Content-Length: 64 bytes)
    // and the body.
    assert_eq!(counter(&p, "webpep_origin_bytes_in_total"), 64 + 10);
}

#[tokio::test]
async fn a_refused_destination_names_the_setting_that_allows_it() {
    let mut cfg = test_config();
    cfg.acl.allow_destinations.clear();
    let p = step(start_proxy(cfg)).await;
    let r = get_once(p.addr, "http://127.0.0.1:9/", "").await;
    assert_eq!(r.status, 403);
    let t = r.text();
    assert!(
        t.contains("--allow-destination 127.0.0.1") && t.contains("allow-destinations"),
        "{t}"
    );
}

#[tokio::test]
async fn the_proxy_serves_a_pac_file_naming_itself() {
    let p = step(start_proxy(test_config())).await;
    let mut c = step(Client::connect(p.addr)).await;
    step(c.send(&format!(
        "GET /proxy.pac HTTP/1.1\r\nHost: {}\r\n\r\n",
        p.addr
    )))
    .await;
    let r = step(c.read(false)).await.expect("a response");
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("content-type"),
        Some("application/x-ns-proxy-autoconfig")
    );
    let pac = r.text();
    assert!(pac.contains("function FindProxyForURL(url, host)"), "{pac}");
    assert!(pac.contains(&format!("PROXY {}; DIRECT", p.addr)), "{pac}");
}
