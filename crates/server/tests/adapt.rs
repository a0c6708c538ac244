//! The edge adapts to the link it serves (issue 33 items 1 and 2), end to end: the inline
//! sizes and wait follow the client's measured rate × RTT, a candidate its origin declares
//! too big is given up at its head, an origin lying about Content-Length does not stall the
//! page, a transform that costs more than its bytes save at the client's rate is made for the
//! next client instead, and the access log gives the edge's added latency (first byte in to
//! first byte out) for a hit, a miss and a transformed image.
//!
//! The proxy is given its clients' links (`Server::with_fixed_link`): a loopback connection
//! measures gigabytes a second and microseconds.

#[path = "common/access_log.rs"]
mod access_log;
mod common;

use std::sync::Arc;
use std::time::Duration;

use access_log::*;
use common::*;
use tokio::sync::Notify;
use webpep_server::client_link::ClientLink;

/// A guard against a hang, never a latency bound.
async fn bounded<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(60), f)
        .await
        .expect("no answer within the 60 s guard")
}

fn link(rate: u64, min_rtt: Duration, srtt: Duration) -> ClientLink {
    ClientLink {
        delivery_rate: Some(rate),
        min_rtt: Some(min_rtt),
        srtt: Some(srtt),
    }
}

const SMALL_JS: usize = 1000;
const MID_JS: usize = 3000;

fn page() -> String {
    "<html><head><script src=\"/js/small.js\"></script>\
     <script src=\"/js/mid.js\"></script></head><body>news</body></html>"
        .to_string()
}

fn js(fill: u8, n: usize) -> Vec<u8> {
    let mut b = b"var s='".to_vec();
    b.resize(n - 2, fill);
    b.extend_from_slice(b"';");
    b
}

fn head(ct: &str, len: usize) -> Vec<u8> {
    format!(
        "HTTP/1.1 200 OK\r\nContent-Type: {ct}\r\nCache-Control: max-age=86400\r\nContent-Length: {len}\r\n\r\n"
    )
    .into_bytes()
}

/// A site whose `/js/mid.js` sends its head at once and its body only once `release` is
/// notified; `/js/liar.js` declares 500 bytes, sends 100 and holds the rest until `release`.
fn site(release: Arc<Notify>) -> impl Fn(&OriginRequest) -> OriginReply + Send + Sync {
    move |r: &OriginRequest| {
        let long = |ct: &str, body: Vec<u8>| {
            OriginReply::ok(ct, body).header("Cache-Control", "max-age=86400")
        };
        match r.path.as_str() {
            "/" => long("text/html", page().into_bytes()),
            "/liar" => long(
                "text/html",
                page().replace("mid.js", "liar.js").into_bytes(),
            ),
            "/js/small.js" => long("application/javascript", js(b'a', SMALL_JS)),
            "/js/mid.js" => OriginReply::raw(vec![
                Part::Send(head("application/javascript", MID_JS)),
                Part::Wait(release.clone()),
                Part::Send(js(b'm', MID_JS)),
            ]),
            "/js/liar.js" => OriginReply::raw(vec![
                Part::Send(head("application/javascript", 500)),
                Part::Send(js(b'l', 100)),
                Part::Wait(release.clone()),
                Part::Send(js(b'l', 400)),
            ]),
            _ => OriginReply::ok("text/plain", "none").status(404),
        }
    }
}

fn inline_config(timeout: Duration) -> webpep_server::ServerConfig {
    let mut cfg = test_config();
    cfg.cache.enabled = true;
    cfg.inline.enabled = true;
    cfg.inline.timeout = webpep_server::config::Secs(timeout);
    // Only the page's own inline fetches reach the origins.
    cfg.prefetch.enabled = false;
    cfg
}

fn inlined(r: &Resp, fill: u8, n: usize) -> bool {
    let text = String::from_utf8_lossy(&js(fill, n)).into_owned();
    r.text().contains(&text)
}

#[tokio::test]
async fn inline_sizes_follow_the_measured_link_and_a_too_big_candidate_is_not_waited_for() {
    // GPRS-like, 38.4 kbit/s and 700 ms: half of rate × RTT is 1,680 bytes, so the 3,000-byte
    // script is out, from its head. The smoothed RTT and the timeout are long (a 60 s wait):
    // the page comes back while that script's body is still held, so nothing waited for it.
    let release = Arc::new(Notify::new());
    let o = Origin::start(site(release.clone())).await;
    let slow = link(4_800, Duration::from_millis(700), Duration::from_secs(200));
    let p = start_proxy_on_link(inline_config(Duration::from_secs(60)), slow).await;
    let r = bounded(get_once(p.addr, &format!("http://{}/", o.addr), "")).await;
    assert_eq!(r.status, 200);
    assert!(inlined(&r, b'a', SMALL_JS), "{}", r.text());
    assert!(!inlined(&r, b'm', MID_JS));
    assert!(r.text().contains("src=\"/js/mid.js\""), "{}", r.text());
    assert!(
        o.in_flight() >= 1,
        "mid.js's body is still held at its origin: {:?}",
        o.events()
    );
    release.notify_one();
    o.wait_for("mid.js answered", |o| o.in_flight() == 0).await;

    // A client whose rate is not measured yet (a new connection: only its RTT is known)
    // gets the configured sizes: 3,000 bytes are within the default 4,096. (Its RTT sets
    // the wait, half of 2 s here. Over loopback's own RTT the wait is 5 ms, and on a loaded
    // machine the origin can take longer than that to answer.)
    let release = Arc::new(Notify::new());
    release.notify_one();
    let o = Origin::start(site(release)).await;
    let new_connection = ClientLink {
        delivery_rate: None,
        min_rtt: None,
        srtt: Some(Duration::from_secs(2)),
    };
    let p = start_proxy_on_link(inline_config(Duration::from_secs(60)), new_connection).await;
    let r = bounded(get_once(p.addr, &format!("http://{}/", o.addr), "")).await;
    assert!(inlined(&r, b'a', SMALL_JS), "{}", r.text());
    assert!(inlined(&r, b'm', MID_JS), "{}", r.text());

    // A fast link (1 MB/s, 50 ms: 25 KB in half a round trip) takes the mid-sized script too.
    let release = Arc::new(Notify::new());
    release.notify_one();
    let o = Origin::start(site(release)).await;
    let fast = link(
        1_000_000,
        Duration::from_millis(50),
        Duration::from_millis(60),
    );
    let p = start_proxy_on_link(inline_config(Duration::from_secs(60)), fast).await;
    let r = bounded(get_once(p.addr, &format!("http://{}/", o.addr), "")).await;
    assert!(inlined(&r, b'm', MID_JS), "{}", r.text());
}

#[tokio::test]
async fn an_origin_lying_about_content_length_does_not_stall_the_page() {
    let release = Arc::new(Notify::new());
    let o = Origin::start(site(release.clone())).await;
    let url = format!("http://{}/liar", o.addr);
    // The liar declares 500 bytes (small enough to inline), sends 100 and stops: the page
    // waits for it only the inline wait (here 300 ms, a link not measured), and goes out with
    // the honest script in and the liar left external, while the liar still holds.
    let p = start_proxy(inline_config(Duration::from_millis(300))).await;
    let r = bounded(get_once(p.addr, &url, "")).await;
    assert_eq!(r.status, 200);
    assert!(inlined(&r, b'a', SMALL_JS), "{}", r.text());
    assert!(r.text().contains("src=\"/js/liar.js\""), "{}", r.text());
    assert!(o.in_flight() >= 1, "the liar still holds: {:?}", o.events());
    // The proxy is not stuck: another page is served meanwhile.
    let r = bounded(get_once(p.addr, &format!("http://{}/", o.addr), "")).await;
    assert_eq!(r.status, 200);
    release.notify_one();
    release.notify_one();
}

fn image_config() -> webpep_server::ServerConfig {
    let mut cfg = test_config();
    cfg.cache.enabled = true;
    cfg.transcode.enabled = true;
    let mut timing = toml::Table::new();
    timing.insert("enabled".into(), toml::Value::Boolean(true));
    cfg.stages.insert("server-timing".into(), timing);
    cfg
}

fn images(jpeg: Vec<u8>) -> impl Fn(&OriginRequest) -> OriginReply + Send + Sync {
    move |_r: &OriginRequest| {
        OriginReply::ok("image/jpeg", jpeg.clone()).header("Cache-Control", "max-age=600")
    }
}

/// Waits until the metric `name` (labels included) reaches `n`: a background transform is
/// state the proxy reaches on its own.
async fn metric_reaches(p: &Proxy, name: &str, n: u64) {
    let waiting = async {
        while metric(p, name) < n {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    if tokio::time::timeout(Duration::from_secs(60), waiting)
        .await
        .is_err()
    {
        panic!("{name} did not reach {n}: {}", p.server.metrics_text());
    }
}

/// `path` at origin `o` through proxy `p`, on a new connection, within the guard.
async fn get_path(p: &Proxy, o: &Origin, path: &str) -> Resp {
    bounded(get_once(p.addr, &format!("http://{}{path}", o.addr), "")).await
}

const IMAGE_BYTES_IN: &str = "webpep_transform_bytes_in_total{kind=\"image\"}";

#[tokio::test]
async fn a_transform_not_worth_its_time_at_the_rate_is_made_for_the_next_client() {
    access_log();
    let jpeg = photo_jpeg();
    // /e.jpg comes in two halves, the second once `release` is notified.
    let release = Arc::new(Notify::new());
    let (j, r) = (jpeg.clone(), release.clone());
    let all = images(jpeg.clone());
    let o = Origin::start(move |req: &OriginRequest| {
        if req.path != "/e.jpg" {
            return all(req);
        }
        let half = j.len() / 2;
        let mut first = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: image/jpeg\r\nCache-Control: max-age=600\r\nContent-Length: {}\r\n\r\n",
            j.len()
        )
        .into_bytes();
        first.extend_from_slice(&j[..half]);
        OriginReply::raw(vec![
            Part::Send(first),
            Part::Wait(r.clone()),
            Part::Send(j[half..].to_vec()),
        ])
    })
    .await;
    // 1 Gbit/s and 1 ms: the bytes a transcode saves take microseconds, its work far more.
    let fast = link(
        125_000_000,
        Duration::from_millis(1),
        Duration::from_millis(1),
    );
    let p = start_proxy_on_link(image_config(), fast).await;
    // Not run yet: held for its transcode, but no longer than the whole image takes at the
    // rate (0.3 ms), since no transcode can save more; the transcode takes longer, so the
    // original goes out, and the transcode goes on for the next client.
    let a = get_path(&p, &o, "/a.jpg").await;
    assert_eq!(a.body, jpeg);
    let st = a.header("server-timing").unwrap_or_default().to_string();
    assert!(st.contains("hold;desc=deferred"), "{st}");
    metric_reaches(&p, IMAGE_BYTES_IN, jpeg.len() as u64).await;
    let a2 = get_path(&p, &o, "/a.jpg").await;
    assert!(
        a2.body.len() < jpeg.len(),
        "{} !< {}",
        a2.body.len(),
        jpeg.len()
    );
    // Its cost is known now: the next image is not held at all; it goes out as the origin
    // sent it...
    let b = get_path(&p, &o, "/b.jpg").await;
    assert_eq!(b.body, jpeg);
    let st = b.header("server-timing").unwrap_or_default().to_string();
    assert!(st.contains("hold;desc=deferred"), "{st}");
    assert!(!st.contains("transform;dur="), "{st}");
    // ... and its variant is made in the background for the next client, who gets it from
    // the cache.
    metric_reaches(&p, IMAGE_BYTES_IN, 2 * jpeg.len() as u64).await;
    let b2 = get_path(&p, &o, "/b.jpg").await;
    assert_eq!(b2.body, a2.body, "the same photo, transcoded");
    for path in ["/a.jpg", "/b.jpg"] {
        let asked = o.seen().iter().filter(|r| r.path == path).count();
        assert_eq!(asked, 1, "{path} from the cache the second time");
    }
    // Decided from the declared length at the head: the image streams through as it comes
    // (its first half is at the client while the origin holds the second), and its variant
    // is made from the cache's copy once whole.
    let got = bounded(async {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(p.addr).await.unwrap();
        let url = format!("http://{}/e.jpg", o.addr);
        s.write_all(
            format!("GET {url} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
        let mut got = read_until(&mut s, &jpeg[..jpeg.len() / 2]).await;
        assert_eq!(o.in_flight(), 1, "the second half is still at the origin");
        release.notify_one();
        s.read_to_end(&mut got).await.unwrap();
        got
    })
    .await;
    assert!(got.ends_with(&jpeg), "the original, whole");
    let head = String::from_utf8_lossy(&got[..got.len() - jpeg.len()]).into_owned();
    assert!(head.contains("hold;desc=deferred"), "{head}");
    metric_reaches(&p, IMAGE_BYTES_IN, 3 * jpeg.len() as u64).await;
    let e2 = get_path(&p, &o, "/e.jpg").await;
    assert_eq!(
        e2.body, a2.body,
        "the same photo, transcoded, from the cache"
    );
    let m = p.server.metrics_text();
    for line in [
        "webpep_transform_holds_total{kind=\"image\",decision=\"held\"} 0",
        "webpep_transform_holds_total{kind=\"image\",decision=\"deferred\"} 3",
    ] {
        assert!(m.contains(line), "{line} in {m}");
    }
    assert!(
        metric(
            &p,
            "webpep_transform_work_microseconds_total{kind=\"image\"}"
        ) > 0
    );

    // Over a slow link (4 kbit/s) the same saving is worth seconds: the image waits for it.
    let slow = link(500, Duration::from_millis(700), Duration::from_millis(900));
    let p = start_proxy_on_link(image_config(), slow).await;
    let c = get_path(&p, &o, "/c.jpg").await;
    assert!(c.body.len() < jpeg.len());
    let d = get_path(&p, &o, "/d.jpg").await;
    assert!(d.body.len() < jpeg.len());
    let st = d.header("server-timing").unwrap_or_default().to_string();
    assert!(st.contains("hold;desc=held"), "{st}");
    // The access line gives what the hold weighed: the rate (500 B/s is 4 kbit/s), the
    // transform's measured cost, and the seconds its saving is worth at that rate.
    let line = nth_line(&format!("http://{}/d.jpg", o.addr), 1).await;
    assert_eq!(line["hold"], "held", "{line}");
    assert_eq!(num(&line, "hold_kbps"), Some(4.0), "{line}");
    let cost = num(&line, "hold_cost_ms").unwrap_or_else(|| panic!("hold_cost_ms in {line}"));
    let saves = num(&line, "hold_saves_ms").unwrap_or_else(|| panic!("hold_saves_ms in {line}"));
    let saved = (jpeg.len() - d.body.len()) as f64;
    assert!(cost > 0.0 && cost <= saves, "{line}");
    assert!(
        saves > 1000.0 && saves <= saved / 500.0 * 1000.0 * 4.0,
        "{line}"
    );
    assert_eq!(
        num(&line, "hold_ahead_ms"),
        Some(0.0),
        "no budget, nothing ahead: {line}"
    );
}

fn num(v: &serde_json::Value, key: &str) -> Option<f64> {
    v[key].as_f64()
}

#[tokio::test]
async fn the_access_log_gives_the_edges_added_latency_per_response() {
    access_log();
    let jpeg = photo_jpeg();
    let j = jpeg.clone();
    let o = Origin::start(move |r: &OriginRequest| {
        if r.path.ends_with(".jpg") {
            OriginReply::ok("image/jpeg", j.clone()).header("Cache-Control", "max-age=600")
        } else {
            OriginReply::ok("text/plain", "a text").header("Cache-Control", "max-age=600")
        }
    })
    .await;
    let p = start_proxy(image_config()).await;
    let text = format!("http://{}/t.txt", o.addr);
    let photo = format!("http://{}/p.jpg", o.addr);
    let _ = bounded(get_once(p.addr, &text, "")).await;
    let _ = bounded(get_once(p.addr, &text, "")).await;
    let r = bounded(get_once(p.addr, &photo, "")).await;
    assert!(r.body.len() < jpeg.len());

    let miss = nth_line(&text, 1).await;
    let hit = nth_line(&text, 2).await;
    let image = nth_line(&photo, 1).await;
    // The lines, for the record (cargo test -- --nocapture).
    eprintln!("access lines:\n{miss}\n{hit}\n{image}");
    assert_eq!(miss["cache"], "MISS");
    assert_eq!(hit["cache"], "HIT");
    assert_eq!(image["cache"], "MISS");
    for l in [&miss, &hit, &image] {
        let added = num(l, "added_ms").unwrap_or_else(|| panic!("added_ms in {l}"));
        let total = num(l, "ms").expect("ms");
        // From the first byte at the proxy to the first byte out: within the request's time.
        assert!(added >= 0.0 && added <= total + 1.0, "{l}");
    }
    // The miss waited for the origin; the hit did not ask it.
    assert!(num(&miss, "origin_ms").is_some(), "{miss}");
    assert!(num(&hit, "origin_ms").is_none(), "{hit}");
    // The transformed image's added latency holds its transform's wait and work.
    let work = num(&image, "transform_ms").expect("transform_ms");
    let queue = num(&image, "queue_ms").expect("queue_ms");
    let added = num(&image, "added_ms").unwrap();
    assert!(work > 0.0, "{image}");
    assert!(added + 0.2 >= work + queue, "{image}");
    assert!(
        num(&miss, "transform_ms").is_none(),
        "text/plain is not transformed: {miss}"
    );
}

#[tokio::test]
async fn a_response_no_stage_works_on_streams_through_and_is_cached() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let release = Arc::new(Notify::new());
    let r2 = release.clone();
    let o = Origin::start(move |_r: &OriginRequest| {
        halves("HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nCache-Control: max-age=600\r\nContent-Length: 20\r\n\r\n", &r2)
    })
    .await;
    // Every transform on, and all the time in the world to buffer: a body none of them works
    // on still goes out as it comes.
    let mut cfg = image_config();
    cfg.compress.enabled = true;
    cfg.limits.buffer_timeout = webpep_server::config::Secs(Duration::from_secs(60));
    let p = start_proxy(cfg).await;
    let url = format!("http://{}/file.bin", o.addr);
    let got = bounded(async {
        let mut s = tokio::net::TcpStream::connect(p.addr).await.unwrap();
        s.write_all(
            format!("GET {url} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
        let mut got = read_until(&mut s, b"first half").await;
        // The first half is here while the origin still holds the second.
        assert_eq!(o.in_flight(), 1);
        release.notify_one();
        s.read_to_end(&mut got).await.unwrap();
        got
    })
    .await;
    assert!(
        got.ends_with(b"first halfother half"),
        "{}",
        String::from_utf8_lossy(&got)
    );
    // The cache kept the copy: the next client gets it without the origin.
    let again = bounded(get_once(p.addr, &url, "")).await;
    assert_eq!(again.body, b"first halfother half");
    assert_eq!(o.requests(), 1);
}

/// The page of two photos, and the photos.
fn photo_page(jpeg: Vec<u8>) -> impl Fn(&OriginRequest) -> OriginReply + Send + Sync {
    move |r: &OriginRequest| match r.path.as_str() {
        "/" => OriginReply::ok(
            "text/html",
            b"<html><body><img src=\"/p1.jpg\"><img src=\"/p2.jpg\"></body></html>".to_vec(),
        )
        .header("Cache-Control", "max-age=600"),
        _ => OriginReply::ok("image/jpeg", jpeg.clone()).header("Cache-Control", "max-age=600"),
    }
}

const IMAGE_HELD: &str = "webpep_transform_holds_total{kind=\"image\",decision=\"held\"}";
const IMAGE_DEFERRED: &str = "webpep_transform_holds_total{kind=\"image\",decision=\"deferred\"}";

/// A prefetch holds nothing for a transform: nothing waits for its answer, only for its
/// bytes in the cache (a browser's request that joins a prefetch waits for it to end, and
/// over LTE a prefetch held for background transcoding made those requests wait seconds).
/// It stores the original and its variant is made in the background; the browser's own
/// request then decides on its link, at its priority: over a slow link it gets the photo
/// transcoded, over a fast one nothing is held for it.
#[tokio::test]
async fn a_prefetch_stores_the_original_and_makes_its_variant_in_the_background() {
    let jpeg = photo_jpeg();
    let mut cfg = image_config();
    cfg.prefetch.enabled = true;
    let photos_fetched = |o: &Origin| {
        o.seen().iter().filter(|r| r.path.ends_with(".jpg")).count() == 2 && o.in_flight() == 0
    };

    let slow = link(500, Duration::from_millis(700), Duration::from_millis(900));
    let o = Origin::start(photo_page(jpeg.clone())).await;
    let p = start_proxy_on_link(cfg.clone(), slow).await;
    assert_eq!(get_path(&p, &o, "/").await.status, 200);
    o.wait_for("both photos prefetched", photos_fetched).await;
    // Both variants are made, in the background: the prefetches count as deferred.
    metric_reaches(&p, IMAGE_BYTES_IN, 2 * jpeg.len() as u64).await;
    assert_eq!(metric(&p, IMAGE_HELD), 0, "{}", p.server.metrics_text());
    assert_eq!(metric(&p, IMAGE_DEFERRED), 2, "{}", p.server.metrics_text());
    for path in ["/p1.jpg", "/p2.jpg"] {
        let got = get_path(&p, &o, path).await;
        assert!(
            got.body.len() < jpeg.len(),
            "{path}: transcoded, from the cache"
        );
        let asked = o.seen().iter().filter(|r| r.path == path).count();
        assert_eq!(asked, 1, "{path}: the prefetch's copy");
    }

    let fast = link(
        125_000_000,
        Duration::from_millis(1),
        Duration::from_millis(1),
    );
    let o = Origin::start(photo_page(jpeg.clone())).await;
    let p = start_proxy_on_link(cfg, fast).await;
    assert_eq!(get_path(&p, &o, "/").await.status, 200);
    o.wait_for("both photos prefetched", photos_fetched).await;
    for path in ["/p1.jpg", "/p2.jpg"] {
        assert_eq!(get_path(&p, &o, path).await.status, 200);
        let asked = o.seen().iter().filter(|r| r.path == path).count();
        assert_eq!(asked, 1, "{path}: the prefetch's copy");
    }
    assert_eq!(metric(&p, IMAGE_HELD), 0, "{}", p.server.metrics_text());
}
