//! The bounds of one import ([`Limits`]): decompression bombs and inputs declaring huge
//! objects end in a clear error or a capped body, never in unbounded memory or disk. Run
//! with small limits so the inputs stay small.

use std::fs;
use std::io::Write;
use std::path::PathBuf;

use flate2::write::GzEncoder;
use flate2::Compression;

use super::*;

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("webpep-limits-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&d);
    fs::create_dir_all(&d).unwrap();
    d
}

fn gzip(b: &[u8]) -> Vec<u8> {
    let mut e = GzEncoder::new(Vec::new(), Compression::best());
    e.write_all(b).unwrap();
    e.finish().unwrap()
}

/// One WARC response record for `uri` carrying `body` with the given Content-Encoding.
fn response(uri: &str, content_type: &str, encoding: Option<&str>, body: &[u8]) -> Vec<u8> {
    let mut block = format!("HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\n").into_bytes();
    if let Some(e) = encoding {
        block.extend_from_slice(format!("Content-Encoding: {e}\r\n").as_bytes());
    }
    block.extend_from_slice(b"\r\n");
    block.extend_from_slice(body);
    let mut v = format!(
        "WARC/1.0\r\nWARC-Type: response\r\nWARC-Record-ID: <urn:uuid:{uri}>\r\n\
         WARC-Date: 2014-01-26T20:06:24Z\r\nWARC-Target-URI: {uri}\r\n\
         Content-Type: application/http; msgtype=response\r\nContent-Length: {}\r\n\r\n",
        block.len()
    )
    .into_bytes();
    v.extend_from_slice(&block);
    v.extend_from_slice(b"\r\n\r\n");
    v
}

fn import_error(r: Result<Corpus, CorpusError>) -> String {
    match r {
        Err(e @ CorpusError::Import { .. }) => e.to_string(),
        Err(e) => panic!("not an import error: {e}"),
        Ok(_) => panic!("the import succeeded"),
    }
}

const SMALL: Limits = Limits {
    object: 100_000,
    total: 1_000_000,
};

#[test]
fn whole_file_gzip_bomb_is_refused() {
    let dir = tmp("warc-bomb");
    // 4 MB of zeros compress to a few KB: four times the import limit once decompressed.
    let warc = dir.join("bomb.warc.gz");
    fs::write(&warc, gzip(&vec![0u8; 4_000_000])).unwrap();
    let e = import_error(warc::import_warc_limited(
        &warc,
        &dir.join("out"),
        "bomb",
        SMALL,
    ));
    assert!(
        e.contains("bomb.warc.gz") && e.contains("decompresses to more than 1000000 bytes"),
        "{e}"
    );
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn gzip_body_bomb_is_cut_at_the_object_limit() {
    let dir = tmp("body-bomb");
    let html = b"<html><body><img src=\"/a.png\"></body></html>";
    // 500 KB of text behind about 500 bytes of gzip, five times the object limit.
    let bomb = gzip(&vec![b'a'; 500_000]);
    let mut warc = response("http://www.bomb.test/", "text/html", None, html);
    // Kept, cut to the object limit, with a warning.
    warc.extend(response(
        "http://www.bomb.test/a.png",
        "text/plain",
        Some("gzip"),
        &bomb,
    ));
    let path = dir.join("one.warc");
    fs::write(&path, &warc).unwrap();
    let c = warc::import_warc_limited(&path, &dir.join("out"), "one", SMALL).unwrap();
    let o = c.manifest.pages[0]
        .objects
        .iter()
        .find(|o| o.url.ends_with("a.png"))
        .expect("the bomb's object is kept");
    assert_eq!(o.versions[0].size, SMALL.object);
    let d = &c.manifest.description;
    assert!(
        d.contains("a.png: 100001 bytes or more, capped at 100000"),
        "{d}"
    );

    // Twelve such bodies decode past the import limit together: an error, not 6 MB held.
    let mut many = response("http://www.bomb.test/", "text/html", None, html);
    for i in 0..12 {
        many.extend(response(
            &format!("http://www.bomb.test/{i}.txt"),
            "text/plain",
            Some("gzip"),
            &bomb,
        ));
    }
    let path = dir.join("many.warc");
    fs::write(&path, &many).unwrap();
    let e = import_error(warc::import_warc_limited(
        &path,
        &dir.join("out2"),
        "many",
        SMALL,
    ));
    assert!(e.contains("the response bodies decode to more than"), "{e}");
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn har_declaring_more_than_the_limit_is_refused_before_writing_it() {
    let dir = tmp("har-total");
    // Thirty 90 KB objects (scripts synthesized: the HAR has no bodies) come to 2.7 MB.
    let entries: Vec<serde_json::Value> = (0..30)
        .map(|i| {
            let (url, mime) = if i == 0 {
                ("http://www.big.test/".to_string(), "text/html")
            } else {
                (
                    format!("http://www.big.test/{i}.js"),
                    "application/javascript",
                )
            };
            serde_json::json!({
                "pageref": "p", "startedDateTime": "2015-08-20T14:50:21.123Z", "time": 1,
                "request": {"method": "GET", "url": url, "httpVersion": "HTTP/1.1", "headers": []},
                "response": {"status": 200, "statusText": "", "httpVersion": "HTTP/1.1",
                    "headers": [], "content": {"size": 90_000, "mimeType": mime},
                    "redirectURL": "", "headersSize": -1, "bodySize": 90_000},
                "timings": {"send": 0, "wait": 1, "receive": 1}
            })
        })
        .collect();
    let har = serde_json::json!({"log": {"version": "1.2", "creator": {"name": "t", "version": "1"},
        "pages": [{"id": "p", "title": "big", "startedDateTime": "2015-08-20T14:50:21.123Z",
                   "pageTimings": {}}],
        "entries": entries}});
    let path = dir.join("big.har");
    fs::write(&path, serde_json::to_vec(&har).unwrap()).unwrap();
    let out = dir.join("out");
    let e = import_error(har::import_har_limited(&path, &out, "big", SMALL));
    assert!(
        e.contains("big.har") && e.contains("the bodies come to more than 1000000 bytes"),
        "{e}"
    );
    // The writer stops before the body that would pass the limit.
    let stored: u64 = fs::read_dir(out.join("bodies"))
        .unwrap()
        .map(|f| f.unwrap().metadata().unwrap().len())
        .sum();
    assert!(stored <= SMALL.total, "{stored} bytes stored");
    // With room for them, the same HAR imports.
    let roomy = Limits {
        total: 3_000_000,
        ..SMALL
    };
    let c = har::import_har_limited(&path, &dir.join("out2"), "big", roomy).unwrap();
    assert_eq!(c.manifest.pages[0].objects.len(), 30);
    let _ = fs::remove_dir_all(&dir);
}
