//! The replay server over plain HTTP/1.x on loopback: one address per virtual domain
//! (127.0.0.2 = www.alpha.test, 127.0.0.3 = img.beta.test), as the lab gives each domain its own.

mod common;

use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

use common::*;
use webpep_replay::{Listener, Protocol, ReplayConfig, ReplayServer};

struct Site {
    server: ReplayServer,
    alpha: SocketAddr,
    beta: SocketAddr,
    bg: Bg,
    _dir: tempfile::TempDir,
}

fn start(config: ReplayConfig) -> Site {
    let dir = tempfile::tempdir().expect("tempdir");
    let corpus = tiny_corpus(dir.path());
    let server = ReplayServer::new(&corpus, config);
    assert_eq!(server.domains(), &[BETA.to_string(), ALPHA.to_string()]);
    let a = TcpListener::bind("127.0.0.2:0").expect("bind 127.0.0.2");
    let b = TcpListener::bind("127.0.0.3:0").expect("bind 127.0.0.3");
    let (alpha, beta) = (a.local_addr().expect("addr"), b.local_addr().expect("addr"));
    let s = server.clone();
    let bg = spawn(move |cancel| async move {
        s.serve(
            vec![
                Listener {
                    socket: a,
                    domain: Some(ALPHA.into()),
                    tls: None,
                },
                Listener {
                    socket: b,
                    domain: Some(BETA.into()),
                    tls: None,
                },
            ],
            cancel,
        )
        .await
        .expect("serve");
    });
    Site {
        server,
        alpha,
        beta,
        bg,
        _dir: dir,
    }
}

#[test]
fn keep_alive_with_validators_and_cache_headers() {
    let site = start(ReplayConfig::default());
    let mut c = Client::connect(site.alpha);
    let r = c.get(ALPHA, "/");
    assert_eq!(r.status, 200);
    assert_eq!(r.body, HTML0);
    assert_eq!(r.header("Content-Type"), Some("text/html; charset=utf-8"));
    assert_eq!(
        r.count("Content-Length"),
        1,
        "the corpus' own Content-Length is dropped"
    );
    assert_eq!(
        r.header("Content-Length"),
        Some(HTML0.len().to_string().as_str())
    );
    assert!(r.header("ETag").is_some_and(|e| e.starts_with('"')));
    assert_eq!(r.header("Last-Modified"), Some(LM0));
    assert_eq!(r.header("Cache-Control"), Some("max-age=60"));
    assert!(r.header("Date").is_some_and(|d| d.ends_with("GMT")));
    assert_eq!(r.header("Connection"), None);
    // Same connection, another domain's object by Host.
    let r = c.get(BETA, "/a.gif");
    assert_eq!((r.status, r.body.as_slice()), (200, GIF));
    assert_eq!(r.header("Content-Type"), Some("image/gif"));
    let r = c.get(ALPHA, "/style.css");
    assert_eq!((r.status, r.body.as_slice()), (200, CSS));

    let stats = site.server.stats();
    assert_eq!(stats.connections, 1);
    assert_eq!(stats.requests, 3);
    assert_eq!(stats.status_2xx, 3);
    assert_eq!(stats.per_connection.len(), 1);
    let conn = &stats.per_connection[0];
    assert_eq!(conn.requests, 3);
    assert_eq!(conn.protocol, Protocol::Http1);
    assert_eq!(conn.domain.as_deref(), Some(ALPHA));
    assert!(conn.open);
    assert!(conn.bytes_out > (HTML0.len() + GIF.len() + CSS.len()) as u64);
    assert_eq!(stats.bytes_out, conn.bytes_out);
    drop(c);
    site.bg.stop();
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let site = start(ReplayConfig::default());
    let mut c = Client::connect(site.alpha);
    c.send(
        b"GET /style.css HTTP/1.1\r\nHost: www.alpha.test\r\n\r\n\
          GET /a.gif HTTP/1.1\r\nHost: img.beta.test\r\n\r\n\
          GET / HTTP/1.1\r\nHost: www.alpha.test\r\n\r\n",
    );
    let bodies: Vec<Vec<u8>> = (0..3).map(|_| c.read(false).expect("resp").body).collect();
    assert_eq!(bodies, vec![CSS.to_vec(), GIF.to_vec(), HTML0.to_vec()]);
    // A pipeline with a 404 and a HEAD in the middle keeps its order and framing.
    c.send(
        b"GET /nope HTTP/1.1\r\nHost: www.alpha.test\r\n\r\n\
          HEAD / HTTP/1.1\r\nHost: www.alpha.test\r\n\r\n\
          GET /style.css HTTP/1.1\r\nHost: www.alpha.test\r\n\r\n",
    );
    assert_eq!(c.read(false).expect("r").status, 404);
    let head = c.read(true).expect("r");
    assert_eq!(head.status, 200);
    assert_eq!(
        head.header("Content-Length"),
        Some(HTML0.len().to_string().as_str())
    );
    assert_eq!(c.read(false).expect("r").body, CSS);
    assert_eq!(site.server.stats().per_connection[0].requests, 6);
}

#[test]
fn close_after_n_requests_is_a_pre_emptive_fin() {
    let site = start(ReplayConfig {
        close_after: Some(2),
        ..ReplayConfig::default()
    });
    let mut c = Client::connect(site.alpha);
    c.send(
        b"GET / HTTP/1.1\r\nHost: www.alpha.test\r\n\r\n\
          GET /style.css HTTP/1.1\r\nHost: www.alpha.test\r\n\r\n\
          GET /a.gif HTTP/1.1\r\nHost: img.beta.test\r\n\r\n",
    );
    let first = c.read(false).expect("first");
    assert_eq!(first.header("Connection"), None);
    let second = c.read(false).expect("second");
    assert_eq!(second.body, CSS);
    assert_eq!(second.header("Connection"), Some("close"));
    assert!(c.read(false).is_none(), "the third request is not answered");
    // The client opens a new connection for the rest.
    let mut c2 = Client::connect(site.alpha);
    assert_eq!(c2.get(BETA, "/a.gif").body, GIF);
    let stats = site.server.stats();
    assert_eq!(stats.closed_after_limit, 1);
    assert_eq!(stats.connections, 2);
    assert_eq!(stats.per_connection[0].requests, 2);
    // The limit can change between runs.
    site.server.set_close_after(None);
    for _ in 0..3 {
        assert_eq!(c2.get(ALPHA, "/").status, 200);
    }
}

#[test]
fn conditional_requests_get_304() {
    let site = start(ReplayConfig::default());
    let mut c = Client::connect(site.alpha);
    let full = c.get(ALPHA, "/");
    let etag = full.header("ETag").expect("etag").to_string();

    c.send(format!("GET / HTTP/1.1\r\nHost: {ALPHA}\r\nIf-None-Match: {etag}\r\n\r\n").as_bytes());
    let r = c.read(false).expect("304");
    assert_eq!(r.status, 304);
    assert!(r.body.is_empty());
    assert_eq!(r.header("ETag"), Some(etag.as_str()));
    assert_eq!(r.header("Cache-Control"), Some("max-age=60"));
    assert_eq!(r.header("Content-Length"), None);

    c.send(
        format!("GET / HTTP/1.1\r\nHost: {ALPHA}\r\nIf-Modified-Since: {LM0}\r\n\r\n").as_bytes(),
    );
    assert_eq!(c.read(false).expect("r").status, 304);

    c.send(
        format!("GET / HTTP/1.1\r\nHost: {ALPHA}\r\nIf-None-Match: \"other\"\r\n\r\n").as_bytes(),
    );
    let r = c.read(false).expect("r");
    assert_eq!((r.status, r.body.as_slice()), (200, HTML0));

    c.send(
        format!(
            "GET / HTTP/1.1\r\nHost: {ALPHA}\r\nIf-Modified-Since: Sun, 31 Dec 2023 00:00:00 GMT\r\n\r\n"
        )
        .as_bytes(),
    );
    assert_eq!(c.read(false).expect("r").status, 200);

    // The next visit has a new version: the old validator no longer matches.
    site.server.set_visit(1);
    c.send(format!("GET / HTTP/1.1\r\nHost: {ALPHA}\r\nIf-None-Match: {etag}\r\n\r\n").as_bytes());
    let r = c.read(false).expect("r");
    assert_eq!((r.status, r.body.as_slice()), (200, HTML1));
    assert_eq!(site.server.stats().not_modified, 2);
}

#[test]
fn visits_select_versions() {
    let site = start(ReplayConfig::default());
    let visit = site.server.visit_handle();
    let mut c = Client::connect(site.alpha);
    let v0 = c.get(ALPHA, "/");
    visit.store(1, std::sync::atomic::Ordering::SeqCst);
    let v1 = c.get(ALPHA, "/");
    assert_eq!(v0.body, HTML0);
    assert_eq!(v1.body, HTML1);
    assert_ne!(v0.header("ETag"), v1.header("ETag"));
    assert_eq!(v1.header("Last-Modified"), Some(LM1));
    // Past the last version: the last one; single-version objects never change.
    site.server.set_visit(7);
    assert_eq!(c.get(ALPHA, "/").body, HTML1);
    assert_eq!(c.get(ALPHA, "/style.css").body, CSS);
}

#[test]
fn head_404_redirect_and_host_selection() {
    let site = start(ReplayConfig::default());
    let mut c = Client::connect(site.beta);
    c.send(b"HEAD /a.gif HTTP/1.1\r\nHost: img.beta.test\r\n\r\n");
    let r = c.read(true).expect("head");
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("Content-Length"),
        Some(GIF.len().to_string().as_str())
    );
    // No body followed the HEAD: the next response parses cleanly.
    let r = c.get(BETA, "/nope.png");
    assert_eq!(r.status, 404);
    assert!(String::from_utf8_lossy(&r.body).contains("img.beta.test/nope.png"));
    // Unknown host → 404; the Host header wins over the listener's domain.
    assert_eq!(c.get("unknown.test", "/").status, 404);
    assert_eq!(c.get(ALPHA, "/style.css").body, CSS);
    // Absolute-form request target.
    c.send(b"GET http://www.alpha.test/style.css HTTP/1.1\r\nHost: www.alpha.test\r\n\r\n");
    assert_eq!(c.read(false).expect("r").body, CSS);
    // A Host that is an address: the listener's domain names the site.
    assert_eq!(c.get(&site.beta.ip().to_string(), "/a.gif").body, GIF);
    // Host with a port and in upper case.
    assert_eq!(c.get("IMG.Beta.Test:80", "/a.gif").body, GIF);
    let r = c.get(ALPHA, "/old");
    assert_eq!(r.status, 301);
    assert_eq!(r.header("Location"), Some("http://www.alpha.test/"));
    assert_eq!(r.header("Content-Type"), Some("text/html"));
    let r = {
        c.send(b"POST / HTTP/1.1\r\nHost: www.alpha.test\r\nContent-Length: 3\r\n\r\nabc");
        c.read(false).expect("r")
    };
    assert_eq!(r.status, 405);
    assert_eq!(
        c.get(ALPHA, "/").status,
        200,
        "the request body was consumed"
    );
}

#[test]
fn http_1_0_closes_unless_keep_alive() {
    let site = start(ReplayConfig::default());
    // No Host: the listener's domain (127.0.0.3 is img.beta.test) selects the site.
    let mut c = Client::connect(site.beta);
    c.send(b"GET /a.gif HTTP/1.0\r\n\r\n");
    let r = c.read(false).expect("r");
    assert_eq!((r.status, r.body.as_slice()), (200, GIF));
    assert_eq!(r.header("Connection"), Some("close"));
    assert!(c.closed());

    let mut c = Client::connect(site.alpha);
    c.send(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    let r = c.read(false).expect("r");
    assert_eq!((r.status, r.body.as_slice()), (200, HTML0));
    assert_eq!(r.header("Connection"), Some("keep-alive"));
    c.send(b"GET /style.css HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    assert_eq!(c.read(false).expect("r").body, CSS);

    // HTTP/1.1 with Connection: close.
    let mut c = Client::connect(site.alpha);
    c.send(b"GET / HTTP/1.1\r\nHost: www.alpha.test\r\nConnection: close\r\n\r\n");
    assert_eq!(
        c.read(false).expect("r").header("Connection"),
        Some("close")
    );
    assert!(c.closed());
}

#[test]
fn missing_body_is_a_500_and_the_server_goes_on() {
    let site = start(ReplayConfig::default());
    let mut c = Client::connect(site.alpha);
    let r = c.get(ALPHA, "/missing.js");
    assert_eq!(r.status, 500);
    let text = String::from_utf8_lossy(&r.body).to_string();
    assert!(
        text.contains("missing.js") && text.contains(&"ab".repeat(32)),
        "{text}"
    );
    // Same connection and new connections still work.
    assert_eq!(c.get(ALPHA, "/").status, 200);
    assert_eq!(Client::connect(site.beta).get(BETA, "/a.gif").status, 200);
    assert_eq!(site.server.stats().status_5xx, 1);
}

#[test]
fn malformed_request_is_400_and_close() {
    let site = start(ReplayConfig::default());
    let mut c = Client::connect(site.alpha);
    c.send(b"GET / HTTP/1.1\r\nHost: www.alpha.test\r\n\r\n\x16\x03\x01 not http at all\r\n\r\n");
    assert_eq!(
        c.read(false).expect("r").status,
        200,
        "the good request before it is answered"
    );
    let r = c.read(false).expect("r");
    assert_eq!(r.status, 400);
    assert_eq!(r.header("Connection"), Some("close"));
    assert!(c.closed());

    for bad in [
        &b"GET / HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n"[..],
        b"GET / HTTP/1.1\r\nContent-Length: nope\r\n\r\n",
        b"GET / HTTP/9.9\r\n\r\n",
        b"GET / HTTP/1.1\r\nBad Header\r\n\r\n",
    ] {
        let mut c = Client::connect(site.alpha);
        c.send(bad);
        let r = c.read(false).expect("r");
        assert_eq!(r.status, 400, "{}", String::from_utf8_lossy(bad));
        assert!(c.closed());
    }
    // Chunked request bodies are refused clearly.
    let mut c = Client::connect(site.alpha);
    c.send(
        b"POST / HTTP/1.1\r\nHost: www.alpha.test\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    );
    assert_eq!(c.read(false).expect("r").status, 501);
    // The server is still there.
    assert_eq!(Client::connect(site.alpha).get(ALPHA, "/").status, 200);
}

#[test]
fn huge_header_block_is_431() {
    let site = start(ReplayConfig::default());
    let mut c = Client::connect(site.alpha);
    let mut req = b"GET / HTTP/1.1\r\nHost: www.alpha.test\r\nX-Big: ".to_vec();
    req.extend(std::iter::repeat_n(b'a', 70 * 1024));
    req.extend_from_slice(b"\r\n\r\n");
    // The server may answer and close before reading everything: ignore write errors.
    let _ = std::io::Write::write_all(&mut c.stream, &req);
    let r = c.read(false).expect("r");
    assert_eq!(r.status, 431);
    assert!(c.closed());

    // Unterminated head growing past the limit.
    let mut c = Client::connect(site.alpha);
    let mut req = b"GET / HTTP/1.1\r\n".to_vec();
    for i in 0..3000 {
        req.extend_from_slice(format!("X-{i}: {}\r\n", "b".repeat(20)).as_bytes());
    }
    let _ = std::io::Write::write_all(&mut c.stream, &req);
    assert_eq!(c.read(false).expect("r").status, 431);
    assert_eq!(Client::connect(site.alpha).get(ALPHA, "/").status, 200);
}

#[test]
fn idle_timeout_and_cancel_close_connections() {
    let site = start(ReplayConfig {
        idle_timeout: Some(Duration::from_millis(300)),
        ..ReplayConfig::default()
    });
    let mut c = Client::connect(site.alpha);
    assert_eq!(c.get(ALPHA, "/").status, 200);
    // Reads until the server closes it (the client's read timeout, 5 s, bounds a hang).
    assert!(c.closed(), "idle connection closed");
    // A bounded poll (the server's thread records the close just after closing), not a wait
    // for time to pass.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while site.server.stats().per_connection[0].open && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        !site.server.stats().per_connection[0].open,
        "the server did not record the idle close within 5 s"
    );

    // An open keep-alive connection does not keep the server from stopping. With no idle
    // timeout only the stop can end it, so a stop that waited for it would never return: the
    // 60 s guard bounds that hang, it does not measure speed.
    site.server.set_idle_timeout(None);
    let mut c = Client::connect(site.alpha);
    assert_eq!(c.get(ALPHA, "/").status, 200);
    let server = site.server.clone();
    assert!(
        server.stats().per_connection[1].open,
        "the keep-alive connection is open before the stop"
    );
    let (done, stopped) = std::sync::mpsc::channel();
    let bg = site.bg;
    let stopper = std::thread::spawn(move || {
        bg.stop();
        let _ = done.send(());
    });
    match stopped.recv_timeout(Duration::from_secs(60)) {
        Ok(()) | Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            stopper.join().expect("the server thread panicked")
        }
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            panic!("the stop waited for the open keep-alive connection")
        }
    }
    assert!(c.closed());
    assert!(server.stats().per_connection.iter().all(|c| !c.open));
    server.reset_stats();
    assert_eq!(server.stats().requests, 0);
    assert!(server.stats().per_connection.is_empty());
}
