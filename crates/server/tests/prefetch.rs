//! Prefetch, end to end: a page served to a client makes the proxy fetch its objects (and its
//! stylesheets' objects) into the cache before the browser asks; the browser's requests then
//! cost the origin nothing, or join a prefetch under way.

mod common;

use std::time::{Duration, Instant};

use common::*;

const PAGE: &str = "<html><head><link rel=stylesheet href=\"/s.css\"></head><body>\
    <img src=\"/a.gif\"><a href=\"/next.html\">next</a><img src=\"/private.gif\">\
    <img src=\"http://10.1.2.3/far.gif\"></body></html>";

fn site(r: &OriginRequest) -> OriginReply {
    let cached = |ct: &str, body: &str| {
        OriginReply::ok(ct, body.as_bytes().to_vec()).header("Cache-Control", "max-age=600")
    };
    match r.path.as_str() {
        "/" => cached("text/html", PAGE),
        "/s.css" => cached("text/css", "body { background: url(bg.png) }"),
        "/a.gif" => cached("image/gif", "GIF89a-not-really"),
        "/bg.png" => cached("image/png", "png-bytes"),
        "/private.gif" => {
            OriginReply::ok("image/gif", "per-user").header("Cache-Control", "private")
        }
        "/slow.gif" => cached("image/gif", "slow").delay(Duration::from_millis(400)),
        _ => OriginReply::ok("text/plain", "other").status(404),
    }
}

fn config(prefetch: bool) -> webpep_server::ServerConfig {
    let mut cfg = test_config();
    cfg.cache.enabled = true;
    cfg.prefetch.enabled = prefetch;
    cfg
}

fn paths(o: &Origin) -> Vec<String> {
    let mut p: Vec<String> = o
        .log
        .lock()
        .unwrap()
        .iter()
        .map(|r| r.path.clone())
        .collect();
    p.sort();
    p
}

/// Waits (bounded) until the origin has seen `n` requests.
async fn origin_reaches(o: &Origin, n: usize) {
    let t0 = Instant::now();
    while o.requests() < n && t0.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_pages_objects_are_in_cache_before_the_browser_asks() {
    let o = Origin::start(site).await;
    let p = start_proxy(config(true)).await;
    let base = format!("http://{}", o.addr);
    let page = get_once(p.addr, &format!("{base}/"), "Cookie: id=secret\r\n").await;
    assert_eq!(page.status, 200);
    // The page, its stylesheet, the image, the stylesheet's image and the private image; not
    // the link (a navigation) nor the refused 10/8 destination.
    origin_reaches(&o, 5).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        paths(&o),
        ["/", "/a.gif", "/bg.png", "/private.gif", "/s.css"]
    );
    for r in o.log.lock().unwrap().iter().filter(|r| r.path != "/") {
        assert_eq!(
            r.header("cookie"),
            None,
            "{}: credentials are not sent",
            r.path
        );
        let referer = if r.path == "/bg.png" {
            format!("{base}/s.css")
        } else {
            format!("{base}/")
        };
        assert_eq!(r.header("referer"), Some(referer.as_str()), "{}", r.path);
    }
    assert_eq!(metric(&p, "webpep_prefetch_started_total"), 5);
    // The browser's requests: the cached ones cost the origin nothing; the private one is
    // fetched for the client, as without prefetch.
    for path in ["/s.css", "/a.gif", "/bg.png"] {
        let r = get_once(p.addr, &format!("{base}{path}"), "").await;
        assert_eq!(r.status, 200, "{path}");
    }
    assert_eq!(o.requests(), 5);
    let r = get_once(
        p.addr,
        &format!("{base}/private.gif"),
        "Cookie: id=secret\r\n",
    )
    .await;
    assert_eq!(r.text(), "per-user");
    assert_eq!(o.requests(), 6);
    assert_eq!(o.last().unwrap().header("cookie"), Some("id=secret"));
}

#[tokio::test]
async fn without_prefetch_only_the_page_is_fetched() {
    let o = Origin::start(site).await;
    let p = start_proxy(config(false)).await;
    let page = get_once(p.addr, &format!("http://{}/", o.addr), "").await;
    assert_eq!(page.status, 200);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(paths(&o), ["/"]);
    assert_eq!(metric(&p, "webpep_prefetch_started_total"), 0);
}

#[tokio::test]
async fn a_request_joins_the_prefetch_of_its_url_under_way() {
    let o = Origin::start(|r: &OriginRequest| {
        if r.path == "/" {
            OriginReply::ok("text/html", "<img src=\"/slow.gif\">")
                .header("Cache-Control", "max-age=600")
        } else {
            site(r)
        }
    })
    .await;
    let p = start_proxy(config(true)).await;
    let base = format!("http://{}", o.addr);
    get_once(p.addr, &format!("{base}/"), "").await;
    // The prefetch has asked the origin, which takes 400 ms to answer.
    origin_reaches(&o, 2).await;
    let t0 = Instant::now();
    let r = get_once(p.addr, &format!("{base}/slow.gif"), "").await;
    assert_eq!(r.text(), "slow");
    assert!(t0.elapsed() < Duration::from_secs(5));
    assert_eq!(
        o.requests(),
        2,
        "one origin fetch for the prefetch and the request"
    );
    assert_eq!(metric(&p, "webpep_prefetch_joined_total"), 1);
}

#[tokio::test]
async fn objects_over_max_per_page_are_not_prefetched() {
    let o = Origin::start(|r: &OriginRequest| {
        if r.path == "/" {
            let imgs: String = (0..10)
                .map(|i| format!("<img src=\"/i{i}.gif\">"))
                .collect();
            OriginReply::ok("text/html", imgs).header("Cache-Control", "max-age=600")
        } else {
            OriginReply::ok("image/gif", "x").header("Cache-Control", "max-age=600")
        }
    })
    .await;
    let mut cfg = config(true);
    cfg.prefetch.max_per_page = 3;
    let p = start_proxy(cfg).await;
    get_once(p.addr, &format!("http://{}/", o.addr), "").await;
    origin_reaches(&o, 4).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(paths(&o), ["/", "/i0.gif", "/i1.gif", "/i2.gif"]);
    assert_eq!(metric(&p, "webpep_prefetch_skipped_total"), 7);
}

fn chain(r: &OriginRequest) -> OriginReply {
    let css = |body: &str| {
        OriginReply::ok("text/css", body.as_bytes().to_vec()).header("Cache-Control", "max-age=60")
    };
    match r.path.as_str() {
        "/" => OriginReply::ok("text/html", "<link rel=stylesheet href=/a.css>")
            .header("Cache-Control", "max-age=60"),
        "/a.css" => css("@import 'b.css';"),
        "/b.css" => css("@import 'c.css'; p { background: url(b.png) }"),
        // Back to the top: a loop must end by the depth bound.
        "/c.css" => css("@import 'a.css'; p { background: url(c.png) }"),
        _ => OriginReply::ok("image/png", "png").header("Cache-Control", "max-age=60"),
    }
}

#[tokio::test]
async fn nesting_stops_three_levels_below_the_page() {
    let o = Origin::start(chain).await;
    let p = start_proxy(config(true)).await;
    get_once(p.addr, &format!("http://{}/", o.addr), "").await;
    origin_reaches(&o, 5).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    // a.css (1), b.css (2), c.css and b.png (3); not c.png (4), and a.css not again.
    assert_eq!(paths(&o), ["/", "/a.css", "/b.css", "/b.png", "/c.css"]);
}

#[tokio::test]
async fn a_page_and_its_stylesheets_share_one_allowance() {
    let o = Origin::start(chain).await;
    let mut cfg = config(true);
    cfg.prefetch.max_per_page = 3;
    let p = start_proxy(cfg).await;
    get_once(p.addr, &format!("http://{}/", o.addr), "").await;
    origin_reaches(&o, 4).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(paths(&o), ["/", "/a.css", "/b.css", "/c.css"]);
    assert_eq!(metric(&p, "webpep_prefetch_skipped_total"), 1, "b.png");
}

#[tokio::test]
async fn a_request_does_not_wait_behind_the_prefetch_queue() {
    let o = Origin::start(|r: &OriginRequest| match r.path.as_str() {
        "/" => OriginReply::ok("text/html", "<img src=/slow.gif><img src=/b.gif>")
            .header("Cache-Control", "max-age=60"),
        "/slow.gif" => OriginReply::ok("image/gif", "slow")
            .header("Cache-Control", "max-age=60")
            .delay(Duration::from_millis(600)),
        _ => OriginReply::ok("image/gif", "b").header("Cache-Control", "max-age=60"),
    })
    .await;
    let mut cfg = config(true);
    cfg.prefetch.concurrency = 1;
    let p = start_proxy(cfg).await;
    let base = format!("http://{}", o.addr);
    get_once(p.addr, &format!("{base}/"), "").await;
    // slow.gif is being prefetched; b.gif's prefetch waits for the one slot.
    origin_reaches(&o, 2).await;
    let t0 = Instant::now();
    let r = get_once(p.addr, &format!("{base}/b.gif"), "").await;
    assert_eq!(r.text(), "b");
    assert!(
        t0.elapsed() < Duration::from_millis(400),
        "{:?}",
        t0.elapsed()
    );
    // The called-off prefetch fetches nothing once its slot comes.
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert_eq!(paths(&o), ["/", "/b.gif", "/slow.gif"]);
    assert_eq!(metric(&p, "webpep_prefetch_joined_total"), 0);
}
