//! Image transcoding and the URL-rewriting mode, end to end through the proxy.

mod common;

use common::*;

fn transcode_config() -> webpep_server::ServerConfig {
    let mut cfg = test_config();
    cfg.transcode.enabled = true;
    cfg.compress.enabled = true;
    cfg
}

#[tokio::test]
async fn jpeg_smaller_as_jpeg_and_webp_only_when_accepted() {
    let jpeg = photo_jpeg();
    let j2 = jpeg.clone();
    let o = Origin::start(move |r: &OriginRequest| {
        let rep = OriginReply::ok("image/jpeg", j2.clone())
            .header("ETag", "\"img1\"")
            .header("Cache-Control", "max-age=600");
        if r.path.contains("nt") {
            OriginReply::ok("image/jpeg", j2.clone()).header("Cache-Control", "no-transform")
        } else {
            rep
        }
    })
    .await;
    let mut cfg = transcode_config();
    cfg.cache.enabled = true;
    let p = start_proxy(cfg).await;
    let url = format!("http://{}/photo.jpg", o.addr);
    let r = get_once(p.addr, &url, "Accept: */*\r\n").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("image/jpeg"));
    assert!(
        r.body.len() < jpeg.len(),
        "{} !< {}",
        r.body.len(),
        jpeg.len()
    );
    assert!(image::load_from_memory(&r.body).is_ok());
    assert_eq!(r.header("etag"), Some("W/\"img1\""));
    let w = get_once(p.addr, &url, "Accept: image/webp,*/*\r\n").await;
    assert_eq!(w.header("content-type"), Some("image/webp"));
    assert!(w.body.starts_with(b"RIFF"));
    // The JPEG-only client still gets JPEG (variants kept apart), from cache.
    let r2 = get_once(p.addr, &url, "Accept: */*\r\n").await;
    assert_eq!(r2.header("content-type"), Some("image/jpeg"));
    assert_eq!(r2.body, r.body);
    assert_eq!(o.requests(), 1);
    // no-transform honoured.
    let nt = get_once(
        p.addr,
        &format!("http://{}/nt.jpg", o.addr),
        "Accept: image/webp\r\n",
    )
    .await;
    assert_eq!(nt.body, jpeg);
    assert!(p
        .server
        .metrics_text()
        .lines()
        .any(|l| l.starts_with("webpep_transcode_saved_bytes_total ") && !l.ends_with(" 0")));
}

/// The value of an unlabelled metric.
fn metric(p: &Proxy, name: &str) -> i64 {
    p.server
        .metrics_text()
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no metric {name}"))
}

/// Six clients ask for six different photos at once; each must come back transcoded.
async fn six_images_at_once(p: &Proxy, o: &Origin, jpeg: &[u8]) {
    let gets: Vec<_> = (0..6)
        .map(|i| {
            let (addr, url) = (p.addr, format!("http://{}/photo{i}.jpg", o.addr));
            tokio::spawn(async move { get_once(addr, &url, "Accept: */*\r\n").await })
        })
        .collect();
    for g in gets {
        let r = g.await.unwrap();
        assert_eq!(r.status, 200);
        assert!(r.body.len() < jpeg.len(), "transcoded");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_images_is_transcoded_one_worker_at_a_time_when_so_limited() {
    let jpeg = photo_jpeg();
    let j2 = jpeg.clone();
    let o = Origin::start(move |_: &OriginRequest| OriginReply::ok("image/jpeg", j2.clone())).await;
    let mut cfg = transcode_config();
    cfg.limits.transform_workers = 1;
    let p = start_proxy(cfg).await;
    assert_eq!(metric(&p, "webpep_transform_workers"), 1);
    // Six clients at once, six URLs (no cache to share): every one is transcoded, in turn.
    six_images_at_once(&p, &o, &jpeg).await;
    assert_eq!(metric(&p, "webpep_transforms_running_max"), 1);
    assert_eq!(metric(&p, "webpep_transforms_running"), 0);
    assert_eq!(metric(&p, "webpep_transforms_waiting"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_images_waits_for_transform_memory_whatever_the_workers() {
    let jpeg = photo_jpeg();
    let img = image::load_from_memory(&jpeg).unwrap();
    let peak = u64::from(img.width()) * u64::from(img.height()) * 40;
    let j2 = jpeg.clone();
    let o = Origin::start(move |_: &OriginRequest| OriginReply::ok("image/jpeg", j2.clone())).await;
    let mut cfg = transcode_config();
    cfg.limits.transform_workers = 6;
    // Room for one of these images at a time, not two.
    cfg.limits.transform_memory = peak * 3 / 2;
    let p = start_proxy(cfg).await;
    six_images_at_once(&p, &o, &jpeg).await;
    assert_eq!(metric(&p, "webpep_transforms_running_max"), 1);
    assert_eq!(metric(&p, "webpep_transform_memory_reserved_bytes"), 0);
    assert!(metric(&p, "webpep_transform_memory_limit_bytes") >= (peak * 3 / 2) as i64);
}

#[tokio::test]
async fn corrupt_jpeg_passed_through_and_proxy_still_serves() {
    let mut bad = photo_jpeg();
    bad.truncate(bad.len() / 3);
    bad.extend_from_slice(&[0xff; 100]);
    let b2 = bad.clone();
    let o = Origin::start(move |r: &OriginRequest| {
        if r.path == "/ok" {
            OriginReply::ok("text/plain", "fine")
        } else {
            OriginReply::ok("image/jpeg", b2.clone())
        }
    })
    .await;
    let p = start_proxy(transcode_config()).await;
    let r = get_once(
        p.addr,
        &format!("http://{}/bad.jpg", o.addr),
        "Accept: image/webp\r\n",
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body, bad);
    assert_eq!(
        get_once(p.addr, &format!("http://{}/ok", o.addr), "")
            .await
            .text(),
        "fine"
    );
}

#[tokio::test]
async fn url_mode_rewrites_html_and_serves_the_rewritten_urls() {
    let o = Origin::start(|r: &OriginRequest| {
        let host = r.header("host").unwrap_or("").to_string();
        match r.path.as_str() {
            "/index.html" => OriginReply::ok(
                "text/html",
                format!(
                    "<html><body><img src=\"http://{host}/img/logo.gif\"><a href=\"/next.html\">n</a>\
                     <a href=\"https://secure.test/\">s</a></body></html>"
                ),
            ),
            "/img/logo.gif" => OriginReply::ok("text/plain", "logo bytes"),
            "/moved" => OriginReply::ok("text/plain", "").status(302).header("Location", "/index.html"),
            _ => OriginReply::ok("text/plain", "404").status(404),
        }
    })
    .await;
    let port = o.addr.port();
    let p = start_proxy(url_mode(test_config())).await;
    let mut c = Client::connect(p.addr).await;
    c.send(&format!(
        "GET /www.a.test:{port}/index.html HTTP/1.1\r\nHost: proxy.test:3128\r\n\r\n"
    ))
    .await;
    let r = c.read(false).await.unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    let html = r.text();
    let img = format!("http://proxy.test:3128/www.a.test:{port}/img/logo.gif");
    assert!(html.contains(&img), "{html}");
    assert!(
        html.contains(&format!(
            "http://proxy.test:3128/www.a.test:{port}/next.html"
        )),
        "{html}"
    );
    assert!(html.contains("https://secure.test/"), "{html}");
    assert_eq!(
        o.last().unwrap().header("host"),
        Some(format!("www.a.test:{port}").as_str())
    );
    // Fetching the rewritten URL works.
    let path = img.trim_start_matches("http://proxy.test:3128");
    c.send(&format!(
        "GET {path} HTTP/1.1\r\nHost: proxy.test:3128\r\n\r\n"
    ))
    .await;
    assert_eq!(c.read(false).await.unwrap().text(), "logo bytes");
    // A redirect points back at the proxy.
    c.send(&format!(
        "GET /www.a.test:{port}/moved HTTP/1.1\r\nHost: proxy.test:3128\r\n\r\n"
    ))
    .await;
    let r = c.read(false).await.unwrap();
    assert_eq!(r.status, 302);
    assert_eq!(
        r.header("location"),
        Some(format!("http://proxy.test:3128/www.a.test:{port}/index.html").as_str())
    );
    // Other paths on the proxy itself → 404.
    c.send("GET /favicon.ico HTTP/1.1\r\nHost: proxy.test:3128\r\n\r\n")
        .await;
    assert_eq!(c.read(false).await.unwrap().status, 404);
}
