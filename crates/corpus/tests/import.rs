//! Importers on small hand-made inputs, odd entries included.

use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use flate2::write::GzEncoder;
use flate2::Compression;
use serde_json::json;
use webpep_corpus::images::{self, ImageKind};
use webpep_corpus::import::{self, MAX_OBJECT_BYTES};
use webpep_corpus::scan;
use webpep_corpus::*;

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("webpep-import-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn obj<'a>(p: &'a Page, url: &str) -> &'a Object {
    p.objects
        .iter()
        .find(|o| o.url == url)
        .unwrap_or_else(|| panic!("{url} not in {}", p.id))
}

fn body(c: &Corpus, o: &Object) -> Vec<u8> {
    c.body(&o.version(0).body).unwrap()
}

/// What a browser model finds from the page's root over the corpus's bodies.
fn discovered(c: &Corpus, p: &Page) -> HashSet<String> {
    scan::discover(&p.url, |u| {
        p.objects
            .iter()
            .find(|o| o.url == u)
            .map(|o| (o.content_type.clone(), body(c, o)))
    })
    .into_iter()
    .map(|d| d.url)
    .collect()
}

// ---------------------------------------------------------------------------------------------
// HAR

fn entry(url: &str, status: i64, mime: &str, size: i64) -> serde_json::Value {
    json!({
        "pageref": "page_1",
        "startedDateTime": "2015-08-20T14:50:21.123Z",
        "time": 50,
        "request": {"method": "GET", "url": url, "httpVersion": "HTTP/1.1", "headers": []},
        "response": {
            "status": status, "statusText": "", "httpVersion": "HTTP/1.1",
            "headers": [{"name": "Cache-Control", "value": "max-age=300"}, {"name": "Server", "value": "x"}],
            "content": {"size": size, "mimeType": mime},
            "redirectURL": "", "headersSize": -1, "bodySize": size
        },
        "timings": {"send": 0, "wait": 10, "receive": 10}
    })
}

#[test]
fn har_with_odd_entries() {
    let gif = images::fit(ImageKind::Gif, 1, 400).unwrap().bytes;
    let mut entries = Vec::new();
    entries.push(entry(
        "http://www.example.test/",
        200,
        "text/html; charset=utf-8",
        3000,
    ));
    let mut css = entry("http://www.example.test/style.css", 200, "text/css", 1234);
    css["response"]["content"]["text"] = json!("body{color:red}"); // truncated by the tool
    entries.push(css);
    let mut g = entry(
        "http://img.example.test/a.gif",
        200,
        "image/gif",
        gif.len() as i64,
    );
    g["response"]["content"]["text"] =
        json!(base64::engine::general_purpose::STANDARD.encode(&gif));
    g["response"]["content"]["encoding"] = json!("base64");
    entries.push(g);
    entries.push(entry(
        "http://img.example.test/b.jpg#frag",
        200,
        "image/jpeg",
        5000,
    ));
    entries.push(entry(
        "data:image/png;base64,iVBORw0KGgo=",
        200,
        "image/png",
        10,
    ));
    let mut redirect = entry("http://www.example.test/old", 301, "text/html", 0);
    redirect["response"]["headers"] =
        json!([{"name": "Location", "value": "http://www.example.test/new"}]);
    entries.push(redirect);
    entries.push(entry("http://stats.example.test/beacon", 204, "", 0));
    entries.push(entry(
        "http://video.example.test/huge.mp4",
        200,
        "video/mp4",
        60_000_000_000,
    ));
    let mut broken = entry("http://img.example.test/c.png", 200, "image/png", 800);
    broken["response"]["content"]["text"] = json!("!!!not base64!!!");
    broken["response"]["content"]["encoding"] = json!("base64");
    entries.push(broken);
    entries.push(entry("http://www.example.test/failed.js", 0, "", 0));
    let mut post = entry("http://www.example.test/api", 200, "application/json", 20);
    post["request"]["method"] = json!("POST");
    entries.push(post);
    entries.push(json!({"pageref": "page_1", "response": {"status": 200}})); // no request
    entries.push(entry(
        "http://www.example.test/style.css",
        200,
        "text/css",
        99,
    )); // repeated: kept as the URL's second response
    entries.push(entry(
        "http://img.example.test/cached-unknown.gif",
        304,
        "image/gif",
        0,
    ));
    entries.push(entry(
        "http://img.example.test/cached.gif",
        304,
        "image/gif",
        700,
    ));
    // Page 2: a real document body and an object shared with page 1.
    let mut root2 = entry("http://www.example.test/two.html", 200, "text/html", 0);
    root2["pageref"] = json!("page_2");
    root2["response"]["content"]["text"] =
        json!("<html><body><img src=\"http://img.example.test/a.gif\"></body></html>");
    entries.push(root2);
    let mut a2 = entry("http://img.example.test/a.gif", 200, "image/gif", 999);
    a2["pageref"] = json!("page_2");
    entries.push(a2);
    let har = json!({"log": {
        "version": "1.2",
        "creator": {"name": "hand", "version": "1"},
        "pages": [
            {"id": "page_1", "title": "One", "startedDateTime": "2015-08-20T14:50:21.000Z", "pageTimings": {}},
            {"id": "page_2", "title": "Two", "startedDateTime": "2015-08-20T14:51:21.000Z", "pageTimings": {}}
        ],
        "entries": entries
    }});
    let dir = tmp("har");
    let file = dir.join("odd.har");
    std::fs::write(&file, serde_json::to_vec_pretty(&har).unwrap()).unwrap();
    let c = import::import_har(&file, &dir.join("corpus"), "t").unwrap();
    assert_eq!(c.manifest.pages.len(), 2);
    let p = c.manifest.page("t-1").unwrap();
    // A capture's schemes are the ones its browser used; the lab's h2 model keeps them.
    assert!(p.captured_schemes);
    let urls: Vec<&str> = p.objects.iter().map(|o| o.url.as_str()).collect();
    assert_eq!(
        urls,
        vec![
            "http://www.example.test/",
            "http://www.example.test/style.css",
            "http://img.example.test/a.gif",
            "http://img.example.test/b.jpg",
            "http://www.example.test/old",
            "http://stats.example.test/beacon",
            "http://video.example.test/huge.mp4",
            "http://img.example.test/c.png",
            "http://img.example.test/cached.gif",
        ]
    );
    // The synthesized document references every object, so a loader finds them all.
    let root = obj(p, "http://www.example.test/");
    assert_eq!(root.version(0).size, 3000);
    let found = discovered(&c, p);
    for u in &urls {
        assert!(found.contains(*u), "{u} not discoverable");
    }
    // Implausible text: synthesized of the declared size and type.
    let css = obj(p, "http://www.example.test/style.css");
    assert_eq!(css.version(0).size, 1234);
    assert!(std::str::from_utf8(&body(&c, css)).unwrap().contains('{'));
    assert_eq!(
        css.headers,
        vec![("Cache-Control".to_string(), "max-age=300".to_string())]
    );
    // A real body is kept byte for byte.
    assert_eq!(body(&c, obj(p, "http://img.example.test/a.gif")), gif);
    // Missing body: a JPEG of about the declared size.
    let jpg = body(&c, obj(p, "http://img.example.test/b.jpg"));
    assert_eq!(&jpg[..2], b"\xFF\xD8");
    assert!(jpg.len().abs_diff(5000) <= 500, "{}", jpg.len());
    // Redirect: Location, no body.
    let old = obj(p, "http://www.example.test/old");
    assert_eq!(old.status, 301);
    assert_eq!(old.version(0).size, 0);
    assert!(old.version(0).body.is_empty());
    assert!(old
        .headers
        .iter()
        .any(|(k, v)| k == "Location" && v == "http://www.example.test/new"));
    let beacon = obj(p, "http://stats.example.test/beacon");
    assert_eq!((beacon.status, beacon.version(0).size), (204, 0));
    // Enormous: capped.
    let huge = obj(p, "http://video.example.test/huge.mp4");
    assert_eq!(huge.version(0).size, MAX_OBJECT_BYTES);
    // Broken base64: synthesized.
    let png = body(&c, obj(p, "http://img.example.test/c.png"));
    assert_eq!(&png[..4], b"\x89PNG");
    let cached = obj(p, "http://img.example.test/cached.gif");
    assert_eq!(cached.status, 200);
    // The repeated URL is one object whose second response is the later entry.
    let css = obj(p, "http://www.example.test/style.css");
    assert_eq!(css.responses(0), 2);
    assert_eq!(css.version(0).then[0].version.size, 99);
    assert!(c
        .manifest
        .description
        .contains("1 later responses for a URL"));
    // Every oddity is noted.
    for w in [
        "1 data: URLs skipped",
        "1 non-GET requests skipped",
        "1 failed entries",
        "entry 11 skipped",
        "capped",
        "broken base64",
        "implausible size",
        "304 entries without a size skipped",
        "304 entries replayed as 200",
    ] {
        assert!(p.source.contains(w), "{w:?} not in {}", p.source);
    }
    assert_eq!(
        p.objects[0].version(0).last_modified,
        "Thu, 20 Aug 2015 14:50:21 GMT"
    );
    // Page 2 keeps its real document and shares a.gif with page 1.
    let p2 = c.manifest.page("t-2").unwrap();
    assert!(body(&c, &p2.objects[0]).starts_with(b"<html><body><img"));
    assert_eq!(
        obj(p2, "http://img.example.test/a.gif"),
        obj(p, "http://img.example.test/a.gif")
    );
    let l = list(&c);
    assert_eq!(l[0].objects, 9);
    assert_eq!(l[0].domains, 4);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn har_without_pages_and_bad_files() {
    let dir = tmp("har2");
    let mut e1 = entry("https://a.example.test/", 200, "text/html", 2000);
    e1.as_object_mut().unwrap().remove("pageref");
    let e2 = entry(
        "https://a.example.test/x.js",
        200,
        "application/javascript",
        700,
    );
    let file = dir.join("nopages.har");
    std::fs::write(
        &file,
        serde_json::to_vec(&json!({"log": {"version": "1.2", "entries": [e1, e2]}})).unwrap(),
    )
    .unwrap();
    let c = import::import_har(&file, &dir.join("c"), "solo").unwrap();
    assert_eq!(c.manifest.pages.len(), 1);
    let p = c.manifest.page("solo").unwrap();
    assert_eq!(p.objects.len(), 2);
    assert_eq!(p.url, "https://a.example.test/");
    assert_eq!(discovered(&c, p).len(), 2);

    let bad = dir.join("bad.har");
    std::fs::write(&bad, b"{ this is not json").unwrap();
    let e = import::import_har(&bad, &dir.join("c2"), "x")
        .unwrap_err()
        .to_string();
    assert!(e.contains("bad.har") && e.contains("not a HAR"), "{e}");
    let nolog = dir.join("nolog.har");
    std::fs::write(&nolog, b"{\"log\": {\"pages\": []}}").unwrap();
    let e = import::import_har(&nolog, &dir.join("c3"), "x")
        .unwrap_err()
        .to_string();
    assert!(e.contains("nolog.har") && e.contains("entries"), "{e}");
    let empty = dir.join("empty.har");
    std::fs::write(
        &empty,
        b"{\"log\": {\"entries\": [{\"request\": {\"url\": \"data:,x\"}}]}}",
    )
    .unwrap();
    let e = import::import_har(&empty, &dir.join("c4"), "x")
        .unwrap_err()
        .to_string();
    assert!(e.contains("empty.har") && e.contains("no page"), "{e}");
    let missing = dir.join("missing.har");
    let e = import::import_har(&missing, &dir.join("c5"), "x")
        .unwrap_err()
        .to_string();
    assert!(e.contains("missing.har"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// An entry of page `pageref` with a text body.
fn text_entry(pageref: &str, url: &str, mime: &str, text: &str) -> serde_json::Value {
    let mut e = entry(url, 200, mime, text.len() as i64);
    e["pageref"] = json!(pageref);
    e["response"]["content"]["text"] = json!(text);
    e
}

#[test]
fn har_runs_of_one_url_are_visits_and_repeat_views_are_skipped() {
    let dir = tmp("har-runs");
    let root = "http://www.example.test/";
    let css = "http://www.example.test/s.css";
    let img = "http://img.example.test/a.jpg";
    let new_img = "http://img.example.test/new.jpg";
    let html1 = "<html><head><link rel=stylesheet href=s.css></head><body>\
                 <img src=http://img.example.test/a.jpg>morning</body></html>";
    let html2 = "<html><head><link rel=stylesheet href=s.css></head><body>\
                 <img src=http://img.example.test/a.jpg><img src=http://img.example.test/new.jpg>\
                 noon</body></html>";
    let page = |id: &str, title: &str, cached: i64| {
        json!({"id": id, "title": title, "_cached": cached,
        "startedDateTime": "2015-08-20T14:50:21.123Z", "pageTimings": {}})
    };
    let mut entries = vec![
        // Run 1, first view.
        text_entry("page_1_0", root, "text/html", html1),
        text_entry("page_1_0", css, "text/css", "body{color:red}"),
        entry(img, 200, "image/jpeg", 3000),
        // Run 1, repeat view: the document again, the rest 304.
        text_entry("page_1_1", root, "text/html", html1),
        entry(css, 304, "text/css", 0),
        // Run 2, first view: a new headline, a changed stylesheet, one more image.
        text_entry("page_2_0", root, "text/html", html2),
        text_entry("page_2_0", css, "text/css", "body{color:blue}"),
        entry(img, 200, "image/jpeg", 3000),
        entry(new_img, 200, "image/jpeg", 2000),
        // Run 3, first view: only the document changed.
        text_entry("page_3_0", root, "text/html", html1),
        text_entry("page_3_0", css, "text/css", "body{color:blue}"),
        entry(img, 200, "image/jpeg", 3000),
        // Another page altogether.
        text_entry(
            "page_4_0",
            "http://other.example.test/",
            "text/html",
            "<p>other</p>",
        ),
    ];
    entries[2]["pageref"] = json!("page_1_0");
    entries[4]["pageref"] = json!("page_1_1");
    for i in [7, 8] {
        entries[i]["pageref"] = json!("page_2_0");
    }
    entries[11]["pageref"] = json!("page_3_0");
    let file = dir.join("wpt.har");
    let har = json!({"log": {"version": "1.2", "creator": {"name": "WebPagetest", "version": "x"},
        "pages": [page("page_1_0", "Run 1, First View for http://www.example.test/", 0),
                  page("page_1_1", "Run 1, Repeat View for http://www.example.test/", 1),
                  page("page_2_0", "Run 2, First View for http://www.example.test/", 0),
                  page("page_3_0", "Run 3, First View for http://www.example.test/", 0),
                  page("page_4_0", "Other", 0)],
        "entries": entries}});
    std::fs::write(&file, serde_json::to_vec(&har).unwrap()).unwrap();
    let c = import::import_har(&file, &dir.join("c"), "wpt").unwrap();
    let ids: Vec<&str> = c.manifest.pages.iter().map(|p| p.id.as_str()).collect();
    assert_eq!(ids, ["wpt-1", "wpt-5"], "{}", c.manifest.description);
    let d = &c.manifest.description;
    assert!(
        d.contains("2 further loads") && d.contains("1 repeat views"),
        "{d}"
    );
    let p = c.manifest.page("wpt-1").unwrap();
    assert_eq!(p.url, root);
    let urls: Vec<&str> = p.objects.iter().map(|o| o.url.as_str()).collect();
    assert_eq!(urls, [root, css, img, new_img]);
    let body_at = |url: &str, visit: usize| {
        let o = obj(p, url);
        String::from_utf8(c.body(&o.version(visit).body).unwrap()).unwrap()
    };
    // Visit k gets run k's bodies; the last run's stay for later visits.
    assert_eq!(body_at(root, 0), html1);
    assert_eq!(body_at(root, 1), html2);
    assert_eq!(body_at(root, 2), html1);
    assert_eq!(body_at(root, 7), html1);
    assert_eq!(body_at(css, 0), "body{color:red}");
    assert_eq!(body_at(css, 1), "body{color:blue}");
    assert_eq!(body_at(css, 2), "body{color:blue}");
    // Unchanged objects keep one version; the versions' validators follow their bodies.
    assert_eq!(obj(p, img).versions.len(), 1);
    assert_eq!(obj(p, root).versions.len(), 3);
    assert_ne!(obj(p, css).version(0).etag, obj(p, css).version(1).etag);
    // Visit 1's document references the new image, visit 0's does not.
    let found = |visit: usize| -> HashSet<String> {
        scan::discover(&p.url, |u| {
            p.objects.iter().find(|o| o.url == u).map(|o| {
                (
                    o.content_type.clone(),
                    c.body(&o.version(visit).body).unwrap(),
                )
            })
        })
        .into_iter()
        .map(|x| x.url)
        .collect()
    };
    assert!(!found(0).contains(new_img) && found(1).contains(new_img));
    assert!(
        p.source.contains("page_2_0 imported as visit 2"),
        "{}",
        p.source
    );
    let listed = list(&c);
    assert_eq!((listed[0].objects, listed[0].versions), (4, 3));

    // A file of repeat views alone is imported as it is.
    let only = dir.join("repeat.har");
    let har = json!({"log": {"version": "1.2",
        "pages": [page("page_1_1", "Run 1, Repeat View for http://www.example.test/", 1)],
        "entries": [text_entry("page_1_1", root, "text/html", html1)]}});
    std::fs::write(&only, serde_json::to_vec(&har).unwrap()).unwrap();
    let c = import::import_har(&only, &dir.join("c2"), "rv").unwrap();
    assert_eq!(c.manifest.pages.len(), 1);
    let _ = std::fs::remove_dir_all(&dir);
}

// ---------------------------------------------------------------------------------------------
// WARC

fn http(status: &str, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut v = format!("HTTP/1.1 {status}\r\n").into_bytes();
    for (k, val) in headers {
        v.extend_from_slice(format!("{k}: {val}\r\n").as_bytes());
    }
    v.extend_from_slice(b"\r\n");
    v.extend_from_slice(body);
    v
}

fn record(typ: &str, uri: &str, extra: &[(&str, &str)], block: &[u8]) -> Vec<u8> {
    let mut h = format!(
        "WARC/1.0\r\nWARC-Type: {typ}\r\nWARC-Record-ID: <urn:uuid:{:x}>\r\nWARC-Date: 2014-01-26T20:06:24Z\r\n",
        block.len() * 7919 + uri.len()
    );
    if !uri.is_empty() {
        h.push_str(&format!("WARC-Target-URI: {uri}\r\n"));
    }
    for (k, v) in extra {
        h.push_str(&format!("{k}: {v}\r\n"));
    }
    h.push_str(&format!(
        "Content-Type: application/http; msgtype=response\r\nContent-Length: {}\r\n\r\n",
        block.len()
    ));
    let mut v = h.into_bytes();
    v.extend_from_slice(block);
    v.extend_from_slice(b"\r\n\r\n");
    v
}

fn gzip(b: &[u8]) -> Vec<u8> {
    let mut e = GzEncoder::new(Vec::new(), Compression::default());
    e.write_all(b).unwrap();
    e.finish().unwrap()
}

fn chunked(b: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    for c in b.chunks(100) {
        v.extend_from_slice(format!("{:x}\r\n", c.len()).as_bytes());
        v.extend_from_slice(c);
        v.extend_from_slice(b"\r\n");
    }
    v.extend_from_slice(b"0\r\n\r\n");
    v
}

fn warc_records() -> (Vec<Vec<u8>>, Vec<u8>, Vec<u8>) {
    let html = b"<html><head><link rel=stylesheet href=\"/s.css\"><script src=\"http://cdn.example.test/app.js\"></script></head>\n<body><img src=\"logo.png\"><img src=\"/moved.gif\"><img src=\"/missing.jpg\"><a href=\"/other.html\">x</a></body></html>".to_vec();
    let png = images::fit(ImageKind::Png, 2, 900).unwrap().bytes;
    let gif = images::fit(ImageKind::Gif, 3, 300).unwrap().bytes;
    let recs = vec![
        record("warcinfo", "", &[], b"software: hand\r\n"),
        record(
            "request",
            "http://www.example.test/",
            &[],
            b"GET / HTTP/1.1\r\nHost: www.example.test\r\n\r\n",
        ),
        record(
            "response",
            "http://www.example.test/",
            &[],
            &http(
                "200 OK",
                &[
                    ("Content-Type", "text/html; charset=utf-8"),
                    ("Transfer-Encoding", "chunked"),
                    ("Content-Encoding", "gzip"),
                    ("Cache-Control", "max-age=30"),
                ],
                &chunked(&gzip(&html)),
            ),
        ),
        record(
            "response",
            "http://www.example.test/s.css",
            &[],
            &http(
                "200 OK",
                &[("Content-Type", "text/css")],
                b"@import \"more.css\";\nbody { background: url(bg.png) }\n",
            ),
        ),
        record(
            "response",
            "http://www.example.test/logo.png",
            &[("WARC-Payload-Digest", "sha1:LOGO")],
            &http(
                "200 OK",
                &[
                    ("Content-Type", "image/png"),
                    ("Last-Modified", "Sun, 06 Nov 1994 08:49:37 GMT"),
                ],
                &png,
            ),
        ),
        record(
            "revisit",
            "http://www.example.test/bg.png",
            &[
                (
                    "WARC-Profile",
                    "http://netpreserve.org/warc/1.0/revisit/identical-payload-digest",
                ),
                ("WARC-Payload-Digest", "sha1:LOGO"),
            ],
            &http("200 OK", &[("Content-Type", "image/png")], b""),
        ),
        record(
            "response",
            "http://www.example.test/moved.gif",
            &[],
            &http(
                "302 Found",
                &[("Location", "/real.gif"), ("Content-Type", "text/html")],
                b"moved",
            ),
        ),
        record(
            "response",
            "http://www.example.test/real.gif",
            &[],
            &http("200 OK", &[("Content-Type", "image/gif")], &gif),
        ),
        record(
            "response",
            "http://cdn.example.test/app.js",
            &[],
            &http(
                "200 OK",
                &[("Content-Type", "application/javascript")],
                b"var x = 1;\n",
            ),
        ),
        record(
            "response",
            "http://www.example.test/other.html",
            &[],
            &http(
                "200 OK",
                &[("Content-Type", "text/html")],
                b"<html><body>plain</body></html>",
            ),
        ),
        record(
            "response",
            "http://www.example.test/garbage",
            &[],
            b"not http at all",
        ),
    ];
    (recs, html, png)
}

fn check_warc_corpus(c: &Corpus, html: &[u8], png: &[u8]) {
    assert_eq!(c.manifest.pages.len(), 1, "{:?}", list(c));
    let p = c.manifest.page("w").unwrap();
    assert!(p.captured_schemes);
    let urls: Vec<&str> = p.objects.iter().map(|o| o.url.as_str()).collect();
    assert_eq!(
        urls,
        vec![
            "http://www.example.test/",
            "http://www.example.test/s.css",
            "http://cdn.example.test/app.js",
            "http://www.example.test/logo.png",
            "http://www.example.test/moved.gif",
            "http://www.example.test/real.gif",
            "http://www.example.test/bg.png",
        ]
    );
    // Chunking and gzip undone; the header that no longer applies is gone.
    let root = &p.objects[0];
    assert_eq!(body(c, root), html);
    assert_eq!(
        root.headers,
        vec![("Cache-Control".into(), "max-age=30".into())]
    );
    assert_eq!(body(c, obj(p, "http://www.example.test/bg.png")), png);
    assert_eq!(
        obj(p, "http://www.example.test/logo.png")
            .version(0)
            .last_modified,
        "Sun, 06 Nov 1994 08:49:37 GMT"
    );
    let moved = obj(p, "http://www.example.test/moved.gif");
    assert_eq!(moved.status, 302);
    assert!(moved
        .headers
        .iter()
        .any(|(k, v)| k == "Location" && v == "/real.gif"));
    assert!(
        p.source
            .contains("2 embedded references not in the archive"),
        "{}",
        p.source
    );
    assert!(
        c.manifest.description.contains("no parsable HTTP response"),
        "{}",
        c.manifest.description
    );
    assert_eq!(
        c.manifest.domains,
        vec!["cdn.example.test", "www.example.test"]
    );
}

#[test]
fn warc_plain_and_gzip_per_record_and_whole() {
    let dir = tmp("warc");
    let (recs, html, png) = warc_records();
    let plain: Vec<u8> = recs.concat();
    let per_record: Vec<u8> = recs.iter().flat_map(|r| gzip(r)).collect();
    let whole = gzip(&plain);
    for (name, bytes) in [
        ("plain.warc", &plain),
        ("rec.warc.gz", &per_record),
        ("whole.warc.gz", &whole),
    ] {
        let f = dir.join(name);
        std::fs::write(&f, bytes).unwrap();
        let c = import::import_warc(&f, &dir.join(format!("c-{name}")), "w")
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        check_warc_corpus(&c, &html, &png);
    }
    // Truncated gzip: a clear error naming the file.
    let t = dir.join("truncated.warc.gz");
    std::fs::write(&t, &per_record[..per_record.len() * 2 / 3]).unwrap();
    let e = import::import_warc(&t, &dir.join("ct"), "w")
        .unwrap_err()
        .to_string();
    assert!(e.contains("truncated.warc.gz") && e.contains("gzip"), "{e}");
    // A record longer than the file.
    let t2 = dir.join("short.warc");
    std::fs::write(&t2, &plain[..plain.len() - 40]).unwrap();
    let e = import::import_warc(&t2, &dir.join("ct2"), "w")
        .unwrap_err()
        .to_string();
    assert!(e.contains("short.warc") && e.contains("truncated"), "{e}");
    let t3 = dir.join("nonsense.warc");
    std::fs::write(&t3, b"hello world").unwrap();
    let e = import::import_warc(&t3, &dir.join("ct3"), "w")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("nonsense.warc") && e.contains("no WARC record"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn warc_without_embedded_objects_gives_every_html_page() {
    let dir = tmp("warc2");
    let recs = [
        record(
            "response",
            "http://a.example.test/",
            &[],
            &http("200 OK", &[("Content-Type", "text/html")], b"<p>one</p>"),
        ),
        record(
            "response",
            "http://a.example.test/two/page",
            &[],
            &http("200 OK", &[("Content-Type", "text/html")], b"<p>two</p>"),
        ),
    ];
    let f = dir.join("two.warc");
    std::fs::write(&f, recs.concat()).unwrap();
    let c = import::import_warc(&f, &dir.join("c"), "w").unwrap();
    let ids: Vec<&str> = c.manifest.pages.iter().map(|p| p.id.as_str()).collect();
    assert_eq!(ids, vec!["w-index", "w-two-page"]);
    let _ = std::fs::remove_dir_all(&dir);
}

// ---------------------------------------------------------------------------------------------
// Directory

fn write(root: &Path, rel: &str, bytes: &[u8]) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, bytes).unwrap();
}

#[test]
fn directory_over_virtual_domains() {
    let dir = tmp("dir");
    let site = dir.join("site");
    write(
        &site,
        "index.html",
        b"<html><head><link rel=\"stylesheet\" href=\"css/site.css\"><script src=\"js/app.js\"></script><link rel=\"icon\" href=\"/favicon.ico\"></head>\n<body><img src=\"img/a.png\"><img src=\"img/b%20c.gif\"><a href=\"sub/page.html#top\">sub</a><img src=\"img/missing.png\"><img src=\"http://elsewhere.example/x.gif\"></body></html>",
    );
    write(
        &site,
        "css/site.css",
        b"body { background: url(../img/bg.gif) }\n",
    );
    write(&site, "js/app.js", b"var a = 1;\n");
    write(
        &site,
        "img/a.png",
        &images::fit(ImageKind::Png, 4, 600).unwrap().bytes,
    );
    write(
        &site,
        "img/b c.gif",
        &images::fit(ImageKind::Gif, 5, 300).unwrap().bytes,
    );
    write(
        &site,
        "img/bg.gif",
        &images::fit(ImageKind::Gif, 6, 200).unwrap().bytes,
    );
    write(&site, "favicon.ico", b"\x00\x00\x01\x00icon");
    write(&site, "notes.txt", b"not referenced");
    write(
        &site,
        "sub/page.html",
        b"<html><head><link rel=stylesheet href=\"../css/site.css\"></head><body><img src=\"../img/a.png\"><a href=\"../index.html\">home</a></body></html>",
    );
    #[cfg(unix)]
    std::os::unix::fs::symlink(site.join("index.html"), site.join("link.html")).unwrap();

    let c =
        import::import_dir(std::slice::from_ref(&site), &dir.join("c"), "Test Site", 3).unwrap();
    let ids: Vec<&str> = c.manifest.pages.iter().map(|p| p.id.as_str()).collect();
    assert_eq!(ids, vec!["index.html", "sub/page.html"]);
    let p = c.manifest.page("index.html").unwrap();
    assert_eq!(p.url, "http://www.test-site.test/index.html");
    // The tree's http:// is the importer's choice, not a browser's.
    assert!(!p.captured_schemes);
    assert_eq!(
        p.objects.len(),
        7,
        "{:#?}",
        p.objects.iter().map(|o| &o.url).collect::<Vec<_>>()
    );
    assert!(
        p.source.contains("1 references to files not in the tree"),
        "{}",
        p.source
    );
    for h in p.domains() {
        assert!(
            [
                "www.test-site.test",
                "static1.test-site.test",
                "static2.test-site.test"
            ]
            .contains(&h.as_str()),
            "{h}"
        );
    }
    // After rewriting, a browser model finds the page's objects, wherever they went (and asks
    // for the missing file and the external image, which are not in the corpus).
    let want: HashSet<String> = p.objects.iter().map(|o| o.url.clone()).collect();
    let mut found = discovered(&c, p);
    assert!(found.remove("http://www.test-site.test/img/missing.png"));
    assert!(found.remove("http://elsewhere.example/x.gif"));
    assert_eq!(found, want);
    let p2 = c.manifest.page("sub/page.html").unwrap();
    let want2: HashSet<String> = p2.objects.iter().map(|o| o.url.clone()).collect();
    assert_eq!(discovered(&c, p2), want2);
    assert_eq!(p2.objects.len(), 4); // page, css, bg.gif, a.png
                                     // Cross-domain references are absolute, same-domain ones untouched.
    let root = String::from_utf8(body(&c, &p.objects[0])).unwrap();
    for r in scan::html_refs(root.as_bytes()) {
        let Some(u) = scan::resolve(&p.url, &r.url) else {
            continue;
        };
        if want.contains(&u) && host_of(&u) != Some("www.test-site.test") {
            assert!(r.url.starts_with("http://"), "{} should be absolute", r.url);
        }
    }
    assert!(root.contains("href=\"sub/page.html#top\""));
    assert!(
        c.manifest.description.contains("symbolic links"),
        "{}",
        c.manifest.description
    );
    // Deterministic spread.
    let again =
        import::import_dir(std::slice::from_ref(&site), &dir.join("c2"), "Test Site", 3).unwrap();
    assert_eq!(again.manifest, c.manifest);
    // One domain: nothing rewritten.
    let one =
        import::import_dir(std::slice::from_ref(&site), &dir.join("c3"), "Test Site", 1).unwrap();
    let p1 = one.manifest.page("index.html").unwrap();
    assert_eq!(p1.domains(), vec!["www.test-site.test"]);
    assert_eq!(
        body(&one, &p1.objects[0]),
        std::fs::read(site.join("index.html")).unwrap()
    );
    // A missing directory is an error naming it.
    let e = import::import_dir(&[dir.join("nope")], &dir.join("c4"), "x", 2)
        .unwrap_err()
        .to_string();
    assert!(e.contains("nope"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

// ---------------------------------------------------------------------------------------------
// Faithful import: captured codings and transfer sizes, every entry per URL, the summary

/// A small capture: a redirect of the page to itself (a cookie check), then its 200 (gzipped
/// on the wire, body included), a gzipped script without a body, a plain image, a POST.
fn faithful_har() -> serde_json::Value {
    let page = "http://www.example.test/";
    let html = "<html><head><script src=\"/app.js\"></script></head><body>\
                <img src=\"/logo.png\">"
        .to_string()
        + &"<p>Hello, hello, hello world.</p>".repeat(200)
        + "</body></html>";
    let mut redirect = entry(page, 302, "text/html", 0);
    redirect["response"]["headers"] = json!([{"name": "Location", "value": page}]);
    let mut ok = text_entry("page_1", page, "text/html", &html);
    ok["response"]["headers"] = json!([{"name": "Content-Encoding", "value": "gzip"}]);
    ok["response"]["bodySize"] = json!(gzip(html.as_bytes()).len());
    let mut js = entry(
        "http://www.example.test/app.js",
        200,
        "application/javascript",
        60_000,
    );
    js["response"]["headers"] = json!([{"name": "Content-Encoding", "value": "gzip"}]);
    js["response"]["bodySize"] = json!(15_000);
    let png = entry("http://www.example.test/logo.png", 200, "image/png", 3_000);
    let mut post = entry("http://www.example.test/beacon", 200, "text/plain", 10);
    post["request"]["method"] = json!("POST");
    json!({"log": {"version": "1.2", "creator": {"name": "t", "version": "1"},
        "pages": [{"id": "page_1", "title": "T", "startedDateTime": "2015-08-20T14:50:21.123Z",
                   "pageTimings": {}}],
        "entries": [redirect, ok, js, png, post]}})
}

#[test]
fn har_keeps_codings_transfer_sizes_and_every_entry_per_url() {
    let dir = tmp("faithful");
    let har = dir.join("f.har");
    std::fs::write(&har, faithful_har().to_string()).unwrap();
    let (c, summary) =
        import::import_har_with(&har, &dir.join("out"), "f", Default::default()).unwrap();
    let p = &c.manifest.pages[0];
    // The page's URL: first the redirect, then the 200, in capture order.
    let root = obj(p, "http://www.example.test/");
    assert_eq!(root.status, 302);
    assert_eq!(root.responses(0), 2);
    let ok = &root.version(0).then[0];
    assert_eq!(ok.status, 200);
    // Its captured coding is kept: an encoded copy in gzip that decodes to the captured text.
    let enc = ok.version.encoded.as_ref().expect("gzip copy");
    assert_eq!(enc.coding, "gzip");
    assert_ne!(enc.etag, ok.version.etag);
    let text = c.body(&ok.version.body).unwrap();
    assert!(text.starts_with(b"<html><head><script"));
    let decoded = store::decode_body("gzip", &c.body(&enc.body).unwrap()).unwrap();
    assert_eq!(decoded, text);
    let cap = ok.version.capture.as_ref().unwrap();
    assert_eq!(cap.content_encoding.as_deref(), Some("gzip"));
    assert_eq!(cap.transfer_size, Some(gzip(&text).len() as u64));
    // A synthesized gzipped script compresses to about its captured transfer size.
    let js = obj(p, "http://www.example.test/app.js").version(0);
    assert_eq!(js.size, 60_000);
    let js_enc = js.encoded.as_ref().unwrap();
    assert!(
        js_enc.size.abs_diff(15_000) < 1_500,
        "gzip of the synthesized script: {} (captured 15000)",
        js_enc.size
    );
    assert_eq!(js.capture.as_ref().unwrap().transfer_size, Some(15_000));
    // An identity response stays identity.
    let png = obj(p, "http://www.example.test/logo.png").version(0);
    assert!(png.encoded.is_none());
    assert_eq!(png.capture.as_ref().unwrap().content_encoding, None);
    assert_eq!(png.served_size(), png.size);
    // The summary counts what was skipped and synthesized, per reason.
    assert_eq!(summary.count("non-GET requests skipped"), 1, "{summary:?}");
    assert_eq!(summary.total(import::Action::Skipped), 1);
    assert_eq!(
        summary.count("bodies not in the HAR synthesized of the declared type and size"),
        2
    );
    assert_eq!(summary.total(import::Action::Merged), 0);
    let shown = summary.render();
    assert!(
        shown.contains("skipped: 1 non-GET requests skipped"),
        "{shown}"
    );
    assert!(shown.contains("synthesized: 2 bodies"), "{shown}");
    // --strict turns them into an error naming the file and the reasons, before any manifest.
    let out = dir.join("strict");
    let e = import::import_har_with(&har, &out, "f", import::ImportOptions { strict: true })
        .unwrap_err()
        .to_string();
    assert!(e.contains("f.har") && e.contains("--strict"), "{e}");
    assert!(
        e.contains("1 non-GET requests skipped") && e.contains("synthesized"),
        "{e}"
    );
    assert!(!out.join("manifest.json").exists());
    // A capture with nothing to skip or make up passes --strict.
    let mut clean = faithful_har();
    let entries = clean["log"]["entries"].as_array_mut().unwrap();
    entries.retain(|e| {
        e["request"]["method"] == "GET" && e["response"]["content"].get("text").is_some()
    });
    let clean_har = dir.join("clean.har");
    std::fs::write(&clean_har, clean.to_string()).unwrap();
    let (_, s) = import::import_har_with(
        &clean_har,
        &dir.join("clean"),
        "c",
        import::ImportOptions { strict: true },
    )
    .unwrap();
    assert!(s.is_clean(), "{s:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn har_not_1x_or_not_json_names_the_file() {
    let dir = tmp("not-har");
    let f = dir.join("two.har");
    std::fs::write(&f, r#"{"log": {"version": "2.0", "entries": []}}"#).unwrap();
    let e = import::import_har(&f, &dir.join("o"), "x")
        .unwrap_err()
        .to_string();
    assert!(e.contains("two.har") && e.contains("not HAR 1.x"), "{e}");
    let g = dir.join("junk.har");
    std::fs::write(&g, "<html>").unwrap();
    let e = import::import_har(&g, &dir.join("o2"), "x")
        .unwrap_err()
        .to_string();
    assert!(e.contains("junk.har") && e.contains("JSON"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}
