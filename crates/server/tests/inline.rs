//! Inlining, end to end: a page served to a client gets its small, shareable, long-lived
//! stylesheets and scripts copied in (through the proxy's own pipeline and cache); everything
//! else stays external, and nothing is inlined where the page forbids it.

mod common;

use std::time::Duration;

use common::*;

const PAGE: &str = "<html><head>\
    <link rel=stylesheet href=\"/css/s.css\" media=print>\
    <script src=\"/js/a.js\"></script>\
    <script src=\"/js/big.js\"></script>\
    <script src=\"/js/private.js\"></script>\
    <script src=\"/js/short.js\"></script>\
    <script src=\"/js/ends.js\"></script>\
    <script src=\"/js/slow.js\"></script>\
    <script src=\"/js/async.js\" async></script>\
    <script src=\"http://10.1.2.3/far.js\"></script>\
    </head><body><img src=\"/a.gif\"></body></html>";

fn site(r: &OriginRequest) -> OriginReply {
    let long = |ct: &str, body: &str| {
        OriginReply::ok(ct, body.as_bytes().to_vec()).header("Cache-Control", "max-age=86400")
    };
    match r.path.as_str() {
        "/" | "/csp" | "/notransform" => {
            let page = OriginReply::ok("text/html; charset=utf-8", PAGE)
                .header("Cache-Control", "max-age=60")
                .header("ETag", "\"p1\"");
            match r.path.as_str() {
                "/csp" => page.header("Content-Security-Policy", "script-src 'self'"),
                "/notransform" => page.header("Cache-Control", "no-transform"),
                _ => page,
            }
        }
        "/slowonly" => OriginReply::ok(
            "text/html",
            slow_only("<script src=\"/js/slow.js\"></script>"),
        )
        .header("Cache-Control", "max-age=60"),
        "/gz" => OriginReply::ok("text/html; charset=utf-8", gzip(PAGE))
            .header("Content-Encoding", "gzip")
            .header("Cache-Control", "max-age=60"),
        "/css/s.css" => long("text/css", "body { background: url(../img/bg.png) }"),
        "/js/a.js" => long("application/javascript", "var a = 1 < 2;"),
        "/js/big.js" => long("application/javascript", &"x".repeat(5000)),
        "/js/private.js" => OriginReply::ok("application/javascript", "secret()")
            .header("Cache-Control", "private, max-age=86400"),
        "/js/short.js" => OriginReply::ok("application/javascript", "short()")
            .header("Cache-Control", "max-age=10"),
        "/js/ends.js" => long("application/javascript", "document.write('</script>')"),
        "/js/slow.js" => {
            long("application/javascript", "slow()").delay(Duration::from_millis(1500))
        }
        "/js/async.js" => long("application/javascript", "later()"),
        "/img/bg.png" | "/a.gif" => long("image/png", "png"),
        _ => OriginReply::ok("text/plain", "none").status(404),
    }
}

/// A page (long enough to be worth compressing) around `script`.
fn slow_only(script: &str) -> String {
    format!(
        "<html><head>{script}</head><body>{}</body></html>",
        "<p>news of the day</p>".repeat(100)
    )
}

fn gzip(text: &str) -> Vec<u8> {
    use webpep_optimize::compress::{encode, Coding, CompressConfig};
    encode(text.as_bytes(), Coding::Gzip, &CompressConfig::default())
}

fn config(inline: bool) -> webpep_server::ServerConfig {
    let mut cfg = test_config();
    cfg.cache.enabled = true;
    cfg.compress.enabled = true;
    cfg.inline.enabled = inline;
    cfg.inline.timeout = webpep_server::config::Secs(Duration::from_millis(500));
    // Only what inlining fetches itself reaches the origin.
    cfg.prefetch.enabled = false;
    cfg
}

/// Waits until `url` is in the proxy's cache, asking with `only-if-cached` (never the
/// origin) every 20 ms: a bounded poll, failing after a generous guard.
async fn wait_cached(p: &Proxy, url: &str) {
    let polling = async {
        loop {
            let r = get_once(p.addr, url, "Cache-Control: only-if-cached\r\n").await;
            if r.status == 200 {
                return;
            }
            assert_eq!(r.status, 504, "{}", r.text());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(WAIT_GUARD, polling)
        .await
        .unwrap_or_else(|_| panic!("{url} not in the cache within {WAIT_GUARD:?}"));
}

#[tokio::test]
async fn small_shareable_stylesheets_and_scripts_go_into_the_page() {
    let o = Origin::start(site).await;
    let p = start_proxy(config(true)).await;
    let base = format!("http://{}", o.addr);
    let r = step(get_once(
        p.addr,
        &format!("{base}/"),
        "Accept-Encoding: identity\r\n",
    ))
    .await;
    assert_eq!(r.status, 200);
    let html = r.text();
    // The stylesheet, its image made absolute, its media kept; the small script.
    assert!(
        html.contains(&format!(
            "<style media=\"print\">body {{ background: url({base}/img/bg.png) }}</style>"
        )),
        "{html}"
    );
    assert!(html.contains("<script>var a = 1 < 2;</script>"), "{html}");
    // Too big, private, fresh for less time than the page, would end the element, too slow,
    // async, at a destination the proxy refuses: external as before.
    for kept in [
        "big.js",
        "private.js",
        "short.js",
        "ends.js",
        "slow.js",
        "async.js",
    ] {
        assert!(html.contains(&format!("/js/{kept}\"")), "{kept}: {html}");
    }
    assert!(html.contains("\"http://10.1.2.3/far.js\""), "{html}");
    assert_eq!(metric(&p, "webpep_inlined_objects_total"), 2);
    // The page's bytes now depend on other responses: no validators.
    assert_eq!(r.header("etag"), None);
    // The browser's own request for an inlined file is a cache hit.
    let before = o.requests();
    let css = step(get_once(p.addr, &format!("{base}/css/s.css"), "")).await;
    assert_eq!(css.status, 200);
    assert_eq!(o.requests(), before);
}

#[tokio::test]
async fn the_page_is_put_together_again_from_the_cache() {
    let o = Origin::start(site).await;
    let p = start_proxy(config(true)).await;
    let url = format!("http://{}/", o.addr);
    let first = step(get_once(p.addr, &url, "Accept-Encoding: gzip\r\n")).await;
    assert_eq!(first.header("content-encoding"), Some("gzip"));
    // The slow script, late for the page, finishes into the cache.
    wait_cached(&p, &format!("http://{}/js/slow.js", o.addr)).await;
    let n = o.requests();
    let again = step(get_once(p.addr, &url, "Accept-Encoding: identity\r\n")).await;
    assert!(again.text().contains("<script>var a = 1 < 2;</script>"));
    // The slow script missed the first page's deadline but finished into the cache: in now.
    assert!(again.text().contains("<script>slow()</script>"));
    // Everything came from the cache except the parts that may not be stored: the private
    // script (and nothing else) went to the origin again.
    let fetched: Vec<String> = o.log.lock().unwrap()[n..]
        .iter()
        .map(|r| r.path.clone())
        .collect();
    assert_eq!(fetched, ["/js/private.js"]);
    assert_eq!(metric(&p, "webpep_inlined_objects_total"), 2 + 3);
}

#[tokio::test]
async fn nothing_is_inlined_where_the_page_forbids_it_or_when_off() {
    let o = Origin::start(site).await;
    let base = format!("http://{}", o.addr);
    let p = start_proxy(config(true)).await;
    for path in ["/csp", "/notransform"] {
        let r = step(get_once(p.addr, &format!("{base}{path}"), "")).await;
        assert_eq!(r.text(), PAGE, "{path}");
    }
    assert_eq!(metric(&p, "webpep_inlined_objects_total"), 0);
    // Without compression a page the origin gzipped would go out larger: left as it came.
    let mut plain = config(true);
    plain.compress.enabled = false;
    let p2 = start_proxy(plain).await;
    let r = step(get_once(
        p2.addr,
        &format!("{base}/gz"),
        "Accept-Encoding: gzip\r\n",
    ))
    .await;
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_eq!(r.body, gzip(PAGE));
    assert_eq!(metric(&p2, "webpep_inlined_objects_total"), 0);
    let off = start_proxy(config(false)).await;
    let r = step(get_once(off.addr, &format!("{base}/"), "")).await;
    assert_eq!(r.text(), PAGE);
    assert_eq!(r.header("etag"), Some("\"p1\""));
}

/// A 1×1 GIF (43 bytes).
const DOT_GIF: &[u8] = b"GIF89a\x01\x00\x01\x00\x80\x00\x00\xff\xff\xff\x00\x00\x00!\xf9\x04\x01\x00\x00\x00\x00,\x00\x00\x00\x00\x01\x00\x01\x00\x00\x02\x02D\x01\x00;";

const IMAGES: &str = "<html><body>\
    <img src=\"/i/dot.gif\" alt=\"dot\">\
    <img src=\"/i/big.gif\">\
    <img src=\"/i/twice.gif\"><img src=\"/i/twice.gif\">\
    <img src=\"/i/lazy.gif\" loading=\"lazy\">\
    <img src=\"/i/fake.gif\">\
    <img src=\"/i/private.gif\">\
    </body></html>";

fn image_site(r: &OriginRequest) -> OriginReply {
    let long = |ct: &str, body: Vec<u8>| {
        OriginReply::ok(ct, body).header("Cache-Control", "max-age=86400")
    };
    match r.path.as_str() {
        "/" => OriginReply::ok("text/html", IMAGES).header("Cache-Control", "max-age=60"),
        "/i/dot.gif" | "/i/twice.gif" | "/i/lazy.gif" => long("image/gif", DOT_GIF.to_vec()),
        "/i/big.gif" => long("image/gif", [DOT_GIF, &[0u8; 2000]].concat()),
        "/i/fake.gif" => long("image/gif", b"<html>not an image</html>".to_vec()),
        "/i/private.gif" => OriginReply::ok("image/gif", DOT_GIF.to_vec())
            .header("Cache-Control", "private, max-age=86400"),
        "/styled" => OriginReply::ok("text/html", STYLED).header("Cache-Control", "max-age=60"),
        "/css/s.css" => long(
            "text/css",
            b"a{background:url(../i/dot.gif)} b{background:url(/i/big.gif)} \
              c{background:url(/i/twice.gif)} @import url(/css/more.css);"
                .to_vec(),
        ),
        _ => OriginReply::ok("text/plain", "none").status(404),
    }
}

const STYLED: &str = "<html><head><link rel=stylesheet href=\"/css/s.css\"></head>\
    <body><img src=\"/i/twice.gif\"></body></html>";

const GECKO: &str =
    "User-Agent: Mozilla/5.0 (X11; U; Linux i686; en-US; rv:1.4) Gecko/20030624\r\n";

#[tokio::test]
async fn tiny_images_go_into_the_page_as_data_uris() {
    use base64::Engine as _;
    let o = Origin::start(image_site).await;
    let p = start_proxy(config(true)).await;
    let url = format!("http://{}/", o.addr);
    let r = step(get_once(p.addr, &url, GECKO)).await;
    let html = r.text();
    let dot = base64::engine::general_purpose::STANDARD.encode(DOT_GIF);
    assert!(
        html.contains(&format!(
            "<img src=\"data:image/gif;base64,{dot}\" alt=\"dot\">"
        )),
        "{html}"
    );
    // Over image-max-bytes, referenced twice, lazy, not an image, private: external.
    for kept in ["big", "twice", "lazy", "fake", "private"] {
        assert!(
            html.contains(&format!("\"/i/{kept}.gif\"")),
            "{kept}: {html}"
        );
    }
    assert_eq!(metric(&p, "webpep_inlined_objects_total"), 1);
    let vary: Vec<&str> = r
        .headers
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case("vary"))
        .map(|(_, v)| v.as_str())
        .collect();
    assert!(vary.join(",").contains("User-Agent"), "{vary:?}");
    // Internet Explorer 6 does not show data: images; a client without a User-Agent is
    // not known to.
    for ua in [
        "User-Agent: Mozilla/4.0 (compatible; MSIE 6.0; Windows NT 5.1)\r\n",
        "",
    ] {
        let r = step(get_once(p.addr, &url, ua)).await;
        assert_eq!(r.text(), IMAGES, "{ua}");
    }
    // The page stored for them is not what the next Gecko gets.
    let again = step(get_once(p.addr, &url, GECKO)).await;
    assert!(again.text().contains("data:image/gif;base64,"));
    assert_eq!(metric(&p, "webpep_inlined_objects_total"), 2);
    // `images = false` keeps them all external.
    let mut cfg = config(true);
    cfg.inline.images = false;
    let off = start_proxy(cfg).await;
    let r = step(get_once(off.addr, &url, GECKO)).await;
    assert_eq!(r.text(), IMAGES);
    assert_eq!(metric(&off, "webpep_inlined_objects_total"), 0);
}

#[tokio::test]
async fn tiny_images_of_an_inlined_stylesheet_go_into_its_urls() {
    use base64::Engine as _;
    let o = Origin::start(image_site).await;
    let p = start_proxy(config(true)).await;
    let base = format!("http://{}", o.addr);
    let r = step(get_once(p.addr, &format!("{base}/styled"), GECKO)).await;
    let html = r.text();
    let dot = base64::engine::general_purpose::STANDARD.encode(DOT_GIF);
    // The small image in the sheet goes in; the big one stays (made absolute), as does the one
    // the page also shows with <img>; the import is not an image.
    assert!(
        html.contains(&format!(
            "<style>a{{background:url(data:image/gif;base64,{dot})}} \
             b{{background:url({base}/i/big.gif)}} c{{background:url({base}/i/twice.gif)}} \
             @import url({base}/css/more.css);</style>"
        )),
        "{html}"
    );
    assert!(html.contains("<img src=\"/i/twice.gif\">"), "{html}");
    // The stylesheet and its image.
    assert_eq!(metric(&p, "webpep_inlined_objects_total"), 2);
    // Internet Explorer 6 gets the stylesheet without data: images.
    let r = step(get_once(
        p.addr,
        &format!("{base}/styled"),
        "User-Agent: Mozilla/4.0 (compatible; MSIE 6.0; Windows NT 5.1)\r\n",
    ))
    .await;
    assert!(
        r.text().contains(&format!("url({base}/i/dot.gif)")),
        "{}",
        r.text()
    );
}

#[tokio::test]
async fn in_the_url_mode_stylesheet_images_are_fetched_from_their_origin() {
    use base64::Engine as _;
    let o = Origin::start(image_site).await;
    let port = o.addr.port();
    let p = start_proxy(url_mode(config(true))).await;
    let mut c = Client::connect(p.addr).await;
    c.send(&format!(
        "GET /www.a.test:{port}/styled HTTP/1.1\r\nHost: proxy.test:3128\r\n{GECKO}\r\n"
    ))
    .await;
    let r = step(c.read(false)).await.unwrap();
    let html = r.text();
    let dot = base64::engine::general_purpose::STANDARD.encode(DOT_GIF);
    // The sheet came through the URL mode (its url()s point at the proxy); its small image
    // went in all the same, and the rest point at the proxy.
    let at = format!("http://proxy.test:3128/www.a.test:{port}");
    assert!(
        html.contains(&format!("a{{background:url(data:image/gif;base64,{dot})}}")),
        "{html}"
    );
    assert!(html.contains(&format!("url({at}/i/big.gif)")), "{html}");
    assert!(
        html.contains(&format!("<img src=\"{at}/i/twice.gif\">")),
        "{html}"
    );
    assert_eq!(metric(&p, "webpep_inlined_objects_total"), 2);
}

#[tokio::test]
async fn a_page_whose_candidates_were_late_is_not_stored_without_them() {
    use webpep_optimize::compress::decode;
    let o = Origin::start(site).await;
    let p = start_proxy(config(true)).await;
    let url = format!("http://{}/slowonly", o.addr);
    // Compressed for this client, the page would be stored as its variant; but its script
    // missed the deadline and is still on its way into the cache.
    let first = step(get_once(p.addr, &url, "Accept-Encoding: gzip\r\n")).await;
    assert_eq!(first.header("content-encoding"), Some("gzip"));
    let text = decode(&first.body, "gzip", 1 << 20).unwrap();
    assert_eq!(
        text,
        slow_only("<script src=\"/js/slow.js\"></script>").as_bytes()
    );
    wait_cached(&p, &format!("http://{}/js/slow.js", o.addr)).await;
    let again = step(get_once(p.addr, &url, "Accept-Encoding: gzip\r\n")).await;
    let text = decode(&again.body, "gzip", 1 << 20).unwrap();
    assert_eq!(text, slow_only("<script>slow()</script>").as_bytes());
}
