//! Replaying what a capture sent: its content codings (negotiated by Accept-Encoding) and
//! every response it holds for a URL, in order.

mod common;

use std::net::TcpListener;

use common::*;
use webpep_corpus::import;
use webpep_corpus::store::decode_body;
use webpep_replay::{ReplayConfig, ReplayServer};

const PAGE: &str = "http://www.cap.test/";

fn html() -> String {
    "<html><body><img src=\"/logo.gif\">".to_string()
        + &"<p>Captured text, gzipped on the real wire.</p>".repeat(100)
        + "</body></html>"
}

/// A JSON string literal (serde_json is not among this crate's dependencies).
fn js(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// A capture whose page first redirects to itself (a cookie check), then answers 200 gzipped;
/// its image is identity.
fn har() -> String {
    let entry = |status: u16, url: &str, mime: &str, headers: &[(&str, &str)], text: &str| {
        let headers: Vec<String> = headers
            .iter()
            .map(|(n, v)| format!("{{\"name\": {}, \"value\": {}}}", js(n), js(v)))
            .collect();
        format!(
            r#"{{"pageref": "page_1", "startedDateTime": "2015-08-20T14:50:21.123Z", "time": 5,
            "request": {{"method": "GET", "url": {url}, "httpVersion": "HTTP/1.1", "headers": []}},
            "response": {{"status": {status}, "statusText": "", "httpVersion": "HTTP/1.1",
                "headers": [{headers}],
                "content": {{"size": {size}, "mimeType": {mime}, "text": {text}}},
                "redirectURL": "", "headersSize": -1, "bodySize": -1}}}}"#,
            url = js(url),
            headers = headers.join(", "),
            size = text.len(),
            mime = js(mime),
            text = js(text),
        )
    };
    let entries = [
        entry(302, PAGE, "text/html", &[("Location", PAGE)], ""),
        entry(
            200,
            PAGE,
            "text/html; charset=utf-8",
            &[("Content-Encoding", "gzip"), ("Vary", "Cookie")],
            &html(),
        ),
        entry(
            200,
            "http://www.cap.test/logo.gif",
            "image/gif",
            &[],
            "GIF89a-not-really-a-gif",
        ),
    ];
    format!(
        r#"{{"log": {{"version": "1.2", "creator": {{"name": "t", "version": "1"}},
        "pages": [{{"id": "page_1", "title": "T", "startedDateTime": "2015-08-20T14:50:21.123Z",
                   "pageTimings": {{}}}}],
        "entries": [{}]}}}}"#,
        entries.join(",\n")
    )
}

fn request(c: &mut Client<std::net::TcpStream>, path: &str, extra: &str) -> Resp {
    c.send(format!("GET {path} HTTP/1.1\r\nHost: www.cap.test\r\n{extra}\r\n").as_bytes());
    c.read(false).expect("response")
}

#[test]
fn captured_gzip_is_served_gzip_and_a_redirect_then_200_replays_in_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let har_path = dir.path().join("cap.har");
    std::fs::write(&har_path, har()).unwrap();
    let (corpus, _) = import::import_har_with(
        &har_path,
        &dir.path().join("corpus"),
        "cap",
        Default::default(),
    )
    .expect("import");
    let server = ReplayServer::new(&corpus, ReplayConfig::default());
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let s = server.clone();
    let bg = spawn(move |cancel| async move {
        s.serve_http(l, Some("www.cap.test".into()), cancel)
            .await
            .expect("serve");
    });

    // A loader-like client: the first request for the page gets the captured redirect, the
    // second (on another connection: the order is the server's, not the connection's) its
    // 200, gzipped as captured, decoding to the captured text. No loop.
    let mut c = Client::connect(addr);
    let first = request(&mut c, "/", "Accept-Encoding: gzip, deflate\r\n");
    assert_eq!(first.status, 302);
    assert_eq!(first.header("Location"), Some(PAGE));
    let mut c2 = Client::connect(addr);
    let second = request(&mut c2, "/", "Accept-Encoding: gzip, deflate\r\n");
    assert_eq!(second.status, 200);
    assert_eq!(second.header("Content-Encoding"), Some("gzip"));
    assert_eq!(second.header("Vary"), Some("Cookie, Accept-Encoding"));
    let text = decode_body("gzip", &second.body).expect("gzip");
    assert_eq!(text, html().as_bytes());
    assert!(second.body.len() * 5 < text.len(), "served compressed");
    // After the last captured response, the last one repeats.
    let third = request(&mut c, "/", "Accept-Encoding: gzip\r\n");
    assert_eq!(third.status, 200);
    // Conditional requests: the gzip representation's own ETag validates it.
    let etag = second.header("ETag").unwrap().to_string();
    let cond = request(
        &mut c,
        "/",
        &format!("Accept-Encoding: gzip\r\nIf-None-Match: {etag}\r\n"),
    );
    assert_eq!(cond.status, 304);
    assert_eq!(cond.header("ETag"), Some(etag.as_str()));
    // A client that does not accept gzip gets identity: the captured text, another ETag.
    let plain = request(&mut c, "/", "Accept-Encoding: br\r\n");
    assert_eq!(plain.status, 200);
    assert_eq!(plain.header("Content-Encoding"), None);
    assert_eq!(plain.body, html().as_bytes());
    assert_ne!(plain.header("ETag"), Some(etag.as_str()));
    let none = request(&mut c, "/", "");
    assert_eq!(none.header("Content-Encoding"), None);
    assert_eq!(none.body, html().as_bytes());
    // ...and the gzip ETag does not validate the identity representation.
    let cond = request(&mut c, "/", &format!("If-None-Match: {etag}\r\n"));
    assert_eq!(cond.status, 200);
    // An identity capture stays identity even for a client that accepts gzip.
    let gif = request(&mut c, "/logo.gif", "Accept-Encoding: gzip\r\n");
    assert_eq!(gif.status, 200);
    assert_eq!(gif.header("Content-Encoding"), None);
    assert_eq!(gif.body, b"GIF89a-not-really-a-gif");

    // The next page load (a visit selected) replays the sequence from its start.
    server.set_visit(0);
    let again = request(&mut c, "/", "Accept-Encoding: gzip\r\n");
    assert_eq!(again.status, 302);
    let again = request(&mut c, "/", "Accept-Encoding: gzip\r\n");
    assert_eq!(again.status, 200);
    bg.stop();
}
