//! Shared test helpers: a tiny two-domain corpus, servers on their own current-thread runtime
//! (as the lab runs them), and a raw HTTP/1.1 client.
#![allow(dead_code)]

use std::future::Future;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::thread::JoinHandle;
use std::time::Duration;

use webpep_corpus::{Corpus, CorpusWriter, Manifest, Object, Page, Version, FORMAT_VERSION};
use webpep_replay::CancellationToken;

pub const ALPHA: &str = "www.alpha.test";
pub const BETA: &str = "img.beta.test";
pub const LM0: &str = "Mon, 01 Jan 2024 00:00:00 GMT";
pub const LM1: &str = "Tue, 02 Jan 2024 00:00:00 GMT";
pub const HTML0: &[u8] =
    b"<html><body>version zero <img src=\"http://img.beta.test/a.gif\"></body></html>";
pub const HTML1: &[u8] = b"<html><body>version one, a new headline <img src=\"http://img.beta.test/a.gif\"></body></html>";
pub const CSS: &[u8] = b"body { color: #333; background: url(http://img.beta.test/a.gif) }";
pub const GIF: &[u8] = b"GIF89a\x01\x00\x01\x00\x80\x00\x00\xff\xff\xff\x00\x00\x00!\xf9\x04\x01\x00\x00\x00\x00,\x00\x00\x00\x00\x01\x00\x01\x00\x00\x02\x02D\x01\x00;";

fn object(url: &str, ct: &str, headers: Vec<(&str, &str)>, versions: Vec<Version>) -> Object {
    Object {
        url: url.into(),
        content_type: ct.into(),
        status: 200,
        headers: headers
            .into_iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect(),
        versions,
    }
}

/// Two domains; the root page has two versions; one object's body is missing; one redirect.
pub fn tiny_corpus(dir: &Path) -> Corpus {
    let mut w = CorpusWriter::create(dir).expect("writer");
    let html0 = w.version(HTML0, LM0).expect("v");
    let html1 = w.version(HTML1, LM1).expect("v");
    let css = w.version(CSS, LM0).expect("v");
    let css_again = w.version(CSS, LM0).expect("v");
    let gif = w.version(GIF, LM0).expect("v");
    let missing = Version {
        body: "ab".repeat(32),
        size: 10,
        etag: "\"missing\"".into(),
        last_modified: LM0.into(),
        encoded: None,
        capture: None,
        then: vec![],
    };
    let mut redirect = object(
        "http://www.alpha.test/old",
        "text/html",
        vec![("Location", "http://www.alpha.test/")],
        vec![Version {
            body: String::new(),
            size: 0,
            etag: String::new(),
            last_modified: String::new(),
            encoded: None,
            capture: None,
            then: vec![],
        }],
    );
    redirect.status = 301;
    let manifest = Manifest {
        format_version: FORMAT_VERSION,
        name: "tiny".into(),
        description: "replay tests".into(),
        domains: vec![ALPHA.into(), BETA.into()],
        pages: vec![Page {
            id: "alpha".into(),
            url: "http://www.alpha.test/".into(),
            source: "test".into(),
            captured_schemes: false,
            objects: vec![
                object(
                    "http://www.alpha.test/",
                    "text/html; charset=utf-8",
                    vec![("Cache-Control", "max-age=60"), ("Content-Length", "999")],
                    vec![html0, html1],
                ),
                object(
                    "http://www.alpha.test/style.css",
                    "text/css",
                    vec![],
                    vec![css],
                ),
                object("http://img.beta.test/a.gif", "image/gif", vec![], vec![gif]),
                object(
                    "http://www.alpha.test/missing.js",
                    "application/javascript",
                    vec![],
                    vec![missing],
                ),
                redirect,
                // The same host and path over https is another object (a capture's http://
                // URL often redirects to its https:// twin).
                object(
                    "https://www.alpha.test/old",
                    "text/css",
                    vec![],
                    vec![css_again],
                ),
            ],
        }],
    };
    w.finish(&manifest).expect("finish")
}

/// A server future running on its own thread with a current-thread runtime, as the lab runs
/// it; cancelled and joined on drop.
pub struct Bg {
    pub cancel: CancellationToken,
    thread: Option<JoinHandle<()>>,
}

pub fn spawn<F, Fut>(make: F) -> Bg
where
    F: FnOnce(CancellationToken) -> Fut + Send + 'static,
    Fut: Future<Output = ()>,
{
    let cancel = CancellationToken::new();
    let c = cancel.clone();
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(make(c));
    });
    Bg {
        cancel,
        thread: Some(thread),
    }
}

impl Bg {
    /// Cancels and waits; panics if the server thread panicked.
    pub fn stop(mut self) {
        self.cancel.cancel();
        if let Some(t) = self.thread.take() {
            t.join().expect("server thread panicked");
        }
    }
}

impl Drop for Bg {
    fn drop(&mut self) {
        self.cancel.cancel();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    pub fn count(&self, name: &str) -> usize {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .count()
    }
}

/// A raw HTTP/1.1 client over any byte stream.
pub struct Client<S> {
    pub stream: S,
    buf: Vec<u8>,
}

impl Client<TcpStream> {
    pub fn connect(addr: SocketAddr) -> Client<TcpStream> {
        let stream = TcpStream::connect(addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        Client::new(stream)
    }
}

impl<S: Read + Write> Client<S> {
    pub fn new(stream: S) -> Client<S> {
        Client {
            stream,
            buf: Vec::new(),
        }
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("send");
        self.stream.flush().expect("flush");
    }

    pub fn get(&mut self, host: &str, path: &str) -> Resp {
        self.send(format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes());
        self.read(false).expect("response")
    }

    fn fill(&mut self) -> usize {
        let mut chunk = [0u8; 16 * 1024];
        match self.stream.read(&mut chunk) {
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                n
            }
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => 0,
            Err(e) => panic!("read: {e}"),
        }
    }

    /// The next response; `None` at end of stream with nothing buffered.
    pub fn read(&mut self, head_only: bool) -> Option<Resp> {
        loop {
            let mut headers = [httparse::EMPTY_HEADER; 64];
            let mut r = httparse::Response::new(&mut headers);
            if let httparse::Status::Complete(n) = r.parse(&self.buf).expect("parse response") {
                let status = r.code.expect("code");
                let headers: Vec<(String, String)> = r
                    .headers
                    .iter()
                    .map(|h| {
                        (
                            h.name.to_string(),
                            String::from_utf8_lossy(h.value).to_string(),
                        )
                    })
                    .collect();
                let len = if head_only || status == 304 || status == 204 {
                    0
                } else {
                    headers
                        .iter()
                        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
                        .map(|(_, v)| v.parse::<usize>().expect("length"))
                        .unwrap_or(0)
                };
                while self.buf.len() < n + len {
                    assert!(self.fill() > 0, "eof inside a body");
                }
                let body = self.buf[n..n + len].to_vec();
                self.buf.drain(..n + len);
                return Some(Resp {
                    status,
                    headers,
                    body,
                });
            }
            if self.fill() == 0 {
                assert!(self.buf.is_empty(), "eof inside a response head");
                return None;
            }
        }
    }

    /// True when the server has closed the connection (and nothing more is buffered).
    pub fn closed(&mut self) -> bool {
        self.buf.is_empty() && self.fill() == 0
    }
}
