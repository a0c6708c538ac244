//! The response pipeline's cache and compression phases, end to end through the proxy.

mod common;

use common::*;
use webpep_optimize::compress::{self, Coding, CompressConfig};

fn page() -> String {
    let mut s = String::from("<html><body>");
    for i in 0..200 {
        s.push_str(&format!(
            "<p>Paragraph {i} of a page that compresses well over a slow link.</p>\n"
        ));
    }
    s.push_str("</body></html>");
    s
}

fn cached_config() -> webpep_server::ServerConfig {
    let mut cfg = test_config();
    cfg.cache.enabled = true;
    cfg
}

#[tokio::test]
async fn second_request_is_a_cache_hit() {
    let o = Origin::start(|_r: &OriginRequest| {
        OriginReply::ok("text/plain", "cached body").header("Cache-Control", "max-age=600")
    })
    .await;
    let p = start_proxy(cached_config()).await;
    let url = format!("http://{}/c", o.addr);
    assert_eq!(get_once(p.addr, &url, "").await.text(), "cached body");
    let r = get_once(p.addr, &url, "").await;
    assert_eq!(r.text(), "cached body");
    assert!(r.header("age").is_some());
    assert_eq!(o.requests(), 1);
    // HEAD is answered from the same entry.
    let mut c = Client::connect(p.addr).await;
    c.send(&format!("HEAD {url} HTTP/1.1\r\nHost: x\r\n\r\n"))
        .await;
    let h = c.read(true).await.unwrap();
    assert_eq!(h.status, 200);
    assert_eq!(h.header("content-length"), Some("11"));
    assert_eq!(o.requests(), 1);
    // A conditional request from the client → 304 from cache.
    let t = get_once(
        p.addr,
        &url,
        "If-Modified-Since: Sat, 01 Jan 2100 00:00:00 GMT\r\n",
    )
    .await;
    assert_eq!(t.status, 200, "no Last-Modified: cannot be 304");
    let m = p.server.metrics_text();
    assert!(m.contains("webpep_cache_hits_total 3"), "{m}");
}

#[tokio::test]
async fn client_conditional_gets_304_from_cache() {
    let o = Origin::start(|_r: &OriginRequest| {
        OriginReply::ok("text/plain", "v1")
            .header("Cache-Control", "max-age=600")
            .header("ETag", "\"e1\"")
    })
    .await;
    let p = start_proxy(cached_config()).await;
    let url = format!("http://{}/e", o.addr);
    get_once(p.addr, &url, "").await;
    let r = get_once(p.addr, &url, "If-None-Match: \"e1\"\r\n").await;
    assert_eq!(r.status, 304);
    assert_eq!(o.requests(), 1);
}

#[tokio::test]
async fn vary_keeps_variants_apart() {
    let o = Origin::start(|r: &OriginRequest| {
        OriginReply::ok(
            "text/plain",
            format!("lang={}", r.header("x-lang").unwrap_or("none")),
        )
        .header("Cache-Control", "max-age=600")
        .header("Vary", "X-Lang")
    })
    .await;
    let p = start_proxy(cached_config()).await;
    let url = format!("http://{}/v", o.addr);
    assert_eq!(
        get_once(p.addr, &url, "X-Lang: en\r\n").await.text(),
        "lang=en"
    );
    assert_eq!(
        get_once(p.addr, &url, "X-Lang: fr\r\n").await.text(),
        "lang=fr"
    );
    assert_eq!(
        get_once(p.addr, &url, "X-Lang: en\r\n").await.text(),
        "lang=en"
    );
    assert_eq!(
        get_once(p.addr, &url, "X-Lang: fr\r\n").await.text(),
        "lang=fr"
    );
    assert_eq!(o.requests(), 2);
}

// A stale entry revalidated with a 304 and freshened: tests/clock.rs, on an injected clock
// (no sleep).

#[tokio::test]
async fn only_if_cached_miss_is_504() {
    let o = Origin::start(|_r: &OriginRequest| OriginReply::ok("text/plain", "x")).await;
    let p = start_proxy(cached_config()).await;
    let r = get_once(
        p.addr,
        &format!("http://{}/o", o.addr),
        "Cache-Control: only-if-cached\r\n",
    )
    .await;
    assert_eq!(r.status, 504);
    assert_eq!(o.requests(), 0);
}

#[tokio::test]
async fn compression_follows_accept_encoding_and_sets_vary() {
    let body = page();
    let b2 = body.clone();
    let o = Origin::start(move |_r: &OriginRequest| {
        OriginReply::ok("text/html; charset=utf-8", b2.clone())
    })
    .await;
    let mut cfg = test_config();
    cfg.compress.enabled = true;
    let p = start_proxy(cfg).await;
    let url = format!("http://{}/page.html", o.addr);
    for (ae, coding) in [
        ("br", "br"),
        ("gzip", "gzip"),
        ("zstd", "zstd"),
        ("gzip;q=0.5, br;q=0", "gzip"),
    ] {
        let r = get_once(p.addr, &url, &format!("Accept-Encoding: {ae}\r\n")).await;
        assert_eq!(r.header("content-encoding"), Some(coding), "{ae}");
        assert!(r.body.len() < body.len() / 3);
        let plain = compress::decode(&r.body, coding, 1 << 20).unwrap();
        assert_eq!(plain, body.as_bytes());
        assert!(r
            .header("vary")
            .is_some_and(|v| v.to_ascii_lowercase().contains("accept-encoding")));
    }
    let r = get_once(p.addr, &url, "").await;
    assert_eq!(r.header("content-encoding"), None);
    assert_eq!(r.body, body.as_bytes());
    assert!(p
        .server
        .metrics_text()
        .lines()
        .any(|l| l.starts_with("webpep_compress_saved_bytes_total ") && !l.ends_with(" 0")));
}

#[tokio::test]
async fn origin_gzip_recoded_for_the_client_and_cached_per_coding() {
    let body = page();
    let gz = compress::encode(body.as_bytes(), Coding::Gzip, &CompressConfig::default());
    let o = Origin::start(move |r: &OriginRequest| {
        assert!(r
            .header("accept-encoding")
            .is_some_and(|a| a.contains("gzip")));
        OriginReply::ok("text/html", gz.clone())
            .header("Content-Encoding", "gzip")
            .header("Cache-Control", "max-age=600")
    })
    .await;
    let mut cfg = cached_config();
    cfg.compress.enabled = true;
    let p = start_proxy(cfg).await;
    let url = format!("http://{}/g.html", o.addr);
    let r = get_once(p.addr, &url, "Accept-Encoding: br\r\n").await;
    assert_eq!(r.header("content-encoding"), Some("br"));
    assert_eq!(
        compress::decode(&r.body, "br", 1 << 20).unwrap(),
        body.as_bytes()
    );
    let r = get_once(p.addr, &url, "").await;
    assert_eq!(
        r.header("content-encoding"),
        None,
        "identity client gets identity"
    );
    assert_eq!(r.body, body.as_bytes());
    let r = get_once(p.addr, &url, "Accept-Encoding: br\r\n").await;
    assert_eq!(r.header("content-encoding"), Some("br"));
    assert_eq!(o.requests(), 1);
}

#[tokio::test]
async fn images_are_not_compressed() {
    let img: Vec<u8> = (0..4000u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    let i2 = img.clone();
    let o = Origin::start(move |_r: &OriginRequest| OriginReply::ok("image/png", i2.clone())).await;
    let mut cfg = test_config();
    cfg.compress.enabled = true;
    let p = start_proxy(cfg).await;
    let r = get_once(
        p.addr,
        &format!("http://{}/i.png", o.addr),
        "Accept-Encoding: gzip, br\r\n",
    )
    .await;
    assert_eq!(r.header("content-encoding"), None);
    assert_eq!(r.body, img);
}

#[tokio::test]
async fn gzip_bomb_passes_through_untouched() {
    let zeros = vec![0u8; 8 << 20];
    let bomb = compress::encode(&zeros, Coding::Gzip, &CompressConfig::default());
    assert!(bomb.len() < 64 * 1024);
    let b2 = bomb.clone();
    let o = Origin::start(move |_r: &OriginRequest| {
        OriginReply::ok("text/html", b2.clone()).header("Content-Encoding", "gzip")
    })
    .await;
    let mut cfg = test_config();
    cfg.compress.enabled = true;
    cfg.limits.max_body_transform = 1 << 20;
    let p = start_proxy(cfg).await;
    let url = format!("http://{}/bomb.html", o.addr);
    let r = get_once(p.addr, &url, "Accept-Encoding: gzip, br\r\n").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_eq!(r.body, bomb);
    // Healthy afterwards.
    let r = get_once(p.addr, &url, "Accept-Encoding: gzip\r\n").await;
    assert_eq!(r.body, bomb);
}

#[tokio::test]
async fn large_bodies_stream_through() {
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    let b2 = big.clone();
    let o =
        Origin::start(move |_r: &OriginRequest| OriginReply::ok("text/plain", b2.clone())).await;
    let mut cfg = test_config();
    cfg.compress.enabled = true;
    cfg.limits.max_body_transform = 1 << 20;
    let p = start_proxy(cfg).await;
    let mut c = Client::connect(p.addr).await;
    let r = c
        .get(
            &format!("http://{}/big", o.addr),
            "Accept-Encoding: gzip\r\n",
        )
        .await;
    assert_eq!(r.header("content-encoding"), None);
    assert_eq!(r.body.len(), big.len());
    assert!(r.body == big);
    // The connection is still usable (the stream ended cleanly).
    let r = c.get(&format!("http://{}/big", o.addr), "").await;
    assert_eq!(r.body.len(), big.len());
}
