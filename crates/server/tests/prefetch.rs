//! Prefetch, end to end: a page served to a client makes the proxy fetch its objects (and its
//! stylesheets' objects) into the cache before the browser asks; the browser's requests then
//! cost the origin nothing, or join a prefetch under way.

mod common;

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

/// Waits until the origin has seen `n` requests (failing the test, with what it saw, after a
/// generous guard).
async fn origin_reaches(o: &Origin, n: usize) {
    o.wait_requests(n).await
}

/// Waits until the proxy's prefetching is over: the page's claims are made (`started` and
/// `skipped` at these values) and the origin has answered every request it got.
async fn prefetches_done(p: &Proxy, o: &Origin, started: u64, skipped: u64) {
    o.wait_for("the claimed prefetches answered", |o| {
        metric(p, "webpep_prefetch_started_total") >= started
            && metric(p, "webpep_prefetch_skipped_total") >= skipped
            && o.in_flight() == 0
    })
    .await;
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
    prefetches_done(&p, &o, 5, 0).await;
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
    assert_eq!(paths(&o), ["/"]);
    // Nothing fetched the image meanwhile: the browser's request for it is the origin's
    // first, and it joins nothing.
    let r = get_once(p.addr, &format!("http://{}/a.gif", o.addr), "").await;
    assert_eq!(r.status, 200);
    assert_eq!(paths(&o), ["/", "/a.gif"]);
    assert_eq!(metric(&p, "webpep_prefetch_started_total"), 0);
    assert_eq!(metric(&p, "webpep_prefetch_joined_total"), 0);
}

#[tokio::test]
async fn a_request_joins_the_prefetch_of_its_url_under_way() {
    let gate = Gate::new();
    let g = gate.clone();
    let o = Origin::start(move |r: &OriginRequest| match r.path.as_str() {
        "/" => OriginReply::ok("text/html", "<img src=\"/slow.gif\">")
            .header("Cache-Control", "max-age=600"),
        "/slow.gif" => OriginReply::ok("image/gif", "slow")
            .header("Cache-Control", "max-age=600")
            .gate(&g),
        _ => site(r),
    })
    .await;
    let (probe, mut lookups) = lookup_probe();
    let p = start_proxy_with(config(true), vec![probe]).await;
    let base = format!("http://{}", o.addr);
    get_once(p.addr, &format!("{base}/"), "").await;
    assert_eq!(lookups.recv().await.as_deref(), Some("/"));
    // The prefetch has asked the origin, which holds the answer.
    origin_reaches(&o, 2).await;
    let request = tokio::spawn(get_once(p.addr, format!("{base}/slow.gif").leak(), ""));
    // The browser's request has reached the lookup (and the prefetch stage's hook) while the
    // prefetch still waits for the origin; then the origin answers.
    assert_eq!(step(lookups.recv()).await.as_deref(), Some("/slow.gif"));
    assert!(!request.is_finished(), "answered before the origin was");
    gate.open();
    let r = step(request).await.unwrap();
    assert_eq!(r.text(), "slow");
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
    prefetches_done(&p, &o, 3, 7).await;
    assert_eq!(paths(&o), ["/", "/i0.gif", "/i1.gif", "/i2.gif"]);
    assert_eq!(metric(&p, "webpep_prefetch_started_total"), 3);
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
    // c.css is fetched at the last level: its objects are not even claimed.
    prefetches_done(&p, &o, 4, 0).await;
    // a.css (1), b.css (2), c.css and b.png (3); not c.png (4), and a.css not again.
    assert_eq!(paths(&o), ["/", "/a.css", "/b.css", "/b.png", "/c.css"]);
    assert_eq!(metric(&p, "webpep_prefetch_started_total"), 4);
    assert_eq!(metric(&p, "webpep_prefetch_skipped_total"), 0);
}

#[tokio::test]
async fn a_page_and_its_stylesheets_share_one_allowance() {
    let o = Origin::start(chain).await;
    let mut cfg = config(true);
    cfg.prefetch.max_per_page = 3;
    let p = start_proxy(cfg).await;
    get_once(p.addr, &format!("http://{}/", o.addr), "").await;
    origin_reaches(&o, 4).await;
    prefetches_done(&p, &o, 3, 1).await;
    assert_eq!(paths(&o), ["/", "/a.css", "/b.css", "/c.css"]);
    assert_eq!(metric(&p, "webpep_prefetch_started_total"), 3);
    assert_eq!(metric(&p, "webpep_prefetch_skipped_total"), 1, "b.png");
}

#[tokio::test]
async fn a_request_does_not_wait_behind_the_prefetch_queue() {
    let gate = Gate::new();
    let g = gate.clone();
    let o = Origin::start(move |r: &OriginRequest| match r.path.as_str() {
        "/" => OriginReply::ok("text/html", "<img src=/slow.gif><img src=/b.gif>")
            .header("Cache-Control", "max-age=60"),
        "/2.html" => {
            OriginReply::ok("text/html", "<img src=/c.gif>").header("Cache-Control", "max-age=60")
        }
        "/slow.gif" => OriginReply::ok("image/gif", "slow")
            .header("Cache-Control", "max-age=60")
            .gate(&g),
        _ => OriginReply::ok("image/gif", "b").header("Cache-Control", "max-age=60"),
    })
    .await;
    let mut cfg = config(true);
    cfg.prefetch.concurrency = 1;
    let p = start_proxy(cfg).await;
    let base = format!("http://{}", o.addr);
    get_once(p.addr, &format!("{base}/"), "").await;
    // slow.gif is being prefetched, held at the origin; b.gif's prefetch waits for the one
    // slot.
    origin_reaches(&o, 2).await;
    // b.gif is answered while slow.gif's prefetch still holds the slot (its answer is held
    // until after this): the request did not wait behind the queue.
    let r = tokio::time::timeout(WAIT_GUARD, get_once(p.addr, &format!("{base}/b.gif"), ""))
        .await
        .expect("b.gif answered while slow.gif's prefetch holds the only slot");
    assert_eq!(r.text(), "b");
    assert_eq!(
        o.events(),
        [
            Event::Arrived("/".into()),
            Event::Answered("/".into()),
            Event::Arrived("/slow.gif".into()),
            Event::Arrived("/b.gif".into()),
            Event::Answered("/b.gif".into()),
        ]
    );
    // The called-off prefetch fetches nothing once its slot comes. The slot is handed out in
    // order: once the prefetch of another page's image (claimed after b.gif's) has reached
    // the origin, b.gif's had its turn.
    gate.open();
    get_once(p.addr, &format!("{base}/2.html"), "").await;
    o.wait_for("c.gif prefetched", |o| {
        o.events().contains(&Event::Arrived("/c.gif".into()))
    })
    .await;
    assert_eq!(paths(&o), ["/", "/2.html", "/b.gif", "/c.gif", "/slow.gif"]);
    assert_eq!(metric(&p, "webpep_prefetch_joined_total"), 0);
    // That prefetch worked: c.gif comes from the cache (or joins the prefetch's last steps).
    let r = get_once(p.addr, &format!("{base}/c.gif"), "").await;
    assert_eq!(r.status, 200);
    assert_eq!(o.requests(), 5);
}
