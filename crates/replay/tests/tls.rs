//! HTTPS: the lab CA, one certificate for every domain, ALPN h2 and http/1.1.

mod common;

use std::net::{SocketAddr, TcpListener};

use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::ServerName;
use tokio_rustls::TlsConnector;
use webpep_replay::{LabCa, Listener, Protocol, ReplayConfig, ReplayServer};

struct Site {
    server: ReplayServer,
    ca: LabCa,
    addr: SocketAddr,
    _bg: Bg,
    dir: tempfile::TempDir,
}

fn start() -> Site {
    let dir = tempfile::tempdir().expect("tempdir");
    let corpus = tiny_corpus(&dir.path().join("corpus"));
    let server = ReplayServer::new(&corpus, ReplayConfig::default());
    let ca = LabCa::generate().expect("ca");
    let tls = ca.server_config(server.domains()).expect("server config");
    let socket = TcpListener::bind("127.0.0.2:0").expect("bind");
    let addr = socket.local_addr().expect("addr");
    let s = server.clone();
    let bg = spawn(move |cancel| async move {
        s.serve(
            vec![Listener {
                socket,
                domain: Some(ALPHA.into()),
                tls: Some(tls),
            }],
            cancel,
        )
        .await
        .expect("serve");
    });
    Site {
        server,
        ca,
        addr,
        _bg: bg,
        dir,
    }
}

async fn connect(
    site: &Site,
    name: &str,
    alpn: &[&[u8]],
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    let connector = TlsConnector::from(site.ca.client_config(alpn).expect("client config"));
    let tcp = tokio::net::TcpStream::connect(site.addr)
        .await
        .expect("tcp");
    let name = ServerName::try_from(name.to_string()).expect("name");
    connector.connect(name, tcp).await.expect("tls handshake")
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt")
}

#[test]
fn h2_with_a_client_that_trusts_the_lab_ca() {
    let site = start();
    let ca_path = site.ca.write_ca_pem(site.dir.path()).expect("ca.pem");
    let pem = std::fs::read_to_string(&ca_path).expect("read ca.pem");
    assert!(pem.starts_with("-----BEGIN CERTIFICATE-----"));

    rt().block_on(async {
        let tls = connect(&site, BETA, &[b"h2"]).await;
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
        let (mut send, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
                .await
                .expect("h2 handshake");
        tokio::spawn(conn);

        let get = |uri: &str| {
            hyper::Request::get(uri)
                .body(Empty::<Bytes>::new())
                .expect("request")
        };
        // Two domains over one connection: the certificate covers both.
        let resp = send
            .send_request(get("https://img.beta.test/a.gif"))
            .await
            .expect("send");
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.headers()["content-type"], "image/gif");
        assert_eq!(
            resp.headers()["content-length"],
            GIF.len().to_string().as_str()
        );
        let body = resp.into_body().collect().await.expect("body").to_bytes();
        assert_eq!(&body[..], GIF);

        let resp = send
            .send_request(get("https://www.alpha.test/"))
            .await
            .expect("send");
        assert_eq!(resp.status(), 200);
        let etag = resp.headers()["etag"].clone();
        assert_eq!(resp.headers()["cache-control"], "max-age=60");
        assert_eq!(resp.headers()["last-modified"], LM0);
        let body = resp.into_body().collect().await.expect("body").to_bytes();
        assert_eq!(&body[..], HTML0);

        // Concurrent streams, a 304 and a 404 among them.
        let mut cond = get("https://www.alpha.test/");
        cond.headers_mut().insert("if-none-match", etag);
        let (a, b, c) = tokio::join!(
            send.send_request(cond),
            send.send_request(get("https://www.alpha.test/style.css")),
            send.send_request(get("https://www.alpha.test/nope")),
        );
        assert_eq!(a.expect("a").status(), 304);
        let b = b.expect("b");
        assert_eq!(b.status(), 200);
        assert_eq!(
            &b.into_body().collect().await.expect("b").to_bytes()[..],
            CSS
        );
        assert_eq!(c.expect("c").status(), 404);

        let head = hyper::Request::head("https://www.alpha.test/")
            .body(Empty::<Bytes>::new())
            .expect("request");
        let resp = send.send_request(head).await.expect("head");
        assert_eq!(resp.status(), 200);
        assert_eq!(
            resp.headers()["content-length"],
            HTML0.len().to_string().as_str()
        );
        assert!(resp
            .into_body()
            .collect()
            .await
            .expect("b")
            .to_bytes()
            .is_empty());

        let resp = send
            .send_request(get("https://www.alpha.test/missing.js"))
            .await
            .expect("send");
        assert_eq!(resp.status(), 500);
    });
    let stats = site.server.stats();
    assert_eq!(stats.per_connection.len(), 1);
    assert_eq!(stats.per_connection[0].protocol, Protocol::H2);
    assert_eq!(stats.per_connection[0].requests, 7);
    assert_eq!(stats.not_modified, 1);
}

#[test]
fn http_1_1_over_tls_and_a_reloaded_ca() {
    let site = start();
    rt().block_on(async {
        let tls = connect(&site, ALPHA, &[b"http/1.1"]).await;
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut tls = tls;
        tls.write_all(
            b"GET / HTTP/1.1\r\nHost: www.alpha.test\r\n\r\n\
              GET /a.gif HTTP/1.1\r\nHost: img.beta.test\r\nConnection: close\r\n\r\n",
        )
        .await
        .expect("write");
        let mut all = Vec::new();
        tls.read_to_end(&mut all).await.expect("read");
        let text = String::from_utf8_lossy(&all);
        assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
        assert_eq!(text.matches("HTTP/1.1 200 OK").count(), 2);
        assert!(all.windows(HTML0.len()).any(|w| w == HTML0));
        assert!(all.ends_with(GIF));

        // Over TLS an https:// object answers; its http:// twin is a redirect (tests/http.rs).
        let mut tls = connect(&site, ALPHA, &[b"http/1.1"]).await;
        tls.write_all(b"GET /old HTTP/1.1\r\nHost: www.alpha.test\r\nConnection: close\r\n\r\n")
            .await
            .expect("write");
        let mut all = Vec::new();
        tls.read_to_end(&mut all).await.expect("read");
        assert!(
            all.starts_with(b"HTTP/1.1 200 OK\r\n"),
            "{}",
            String::from_utf8_lossy(&all)
        );
        assert!(all.ends_with(CSS));

        // No ALPN at all: HTTP/1.1.
        let mut tls = connect(&site, ALPHA, &[]).await;
        tls.write_all(
            b"GET /style.css HTTP/1.1\r\nHost: www.alpha.test\r\nConnection: close\r\n\r\n",
        )
        .await
        .expect("write");
        let mut all = Vec::new();
        tls.read_to_end(&mut all).await.expect("read");
        assert!(all.ends_with(CSS));

        // A client that trusts another CA fails the handshake; the server goes on.
        let other = LabCa::generate().expect("other ca");
        let connector = TlsConnector::from(other.client_config(&[b"h2"]).expect("cfg"));
        let tcp = tokio::net::TcpStream::connect(site.addr)
            .await
            .expect("tcp");
        let name = ServerName::try_from(ALPHA.to_string()).expect("name");
        assert!(connector.connect(name, tcp).await.is_err());
    });
    let stats = site.server.stats();
    assert_eq!(stats.per_connection[0].protocol, Protocol::Http1Tls);
    assert_eq!(stats.per_connection[0].requests, 2);
    assert_eq!(stats.per_connection[1].requests, 1);
    // The server sees the failed handshake a moment after the client gives up: a bounded poll
    // of the server's thread, not a wait for time to pass.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while site.server.stats().tls_failures == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(
        site.server.stats().tls_failures,
        1,
        "the server did not record the failed handshake within 5 s"
    );

    // A CA saved and loaded again still issues certificates clients of the saved ca.pem trust.
    let dir = site.dir.path().join("lab");
    let saved = LabCa::load_or_generate(&dir).expect("save");
    let loaded = LabCa::load_or_generate(&dir).expect("load");
    assert_eq!(saved.ca_pem(), loaded.ca_pem());
    let tls = loaded.server_config(&[ALPHA.to_string()]).expect("cfg");
    let socket = TcpListener::bind("127.0.0.4:0").expect("bind");
    let addr = socket.local_addr().expect("addr");
    let s = site.server.clone();
    let _bg = spawn(move |cancel| async move {
        s.serve_https(socket, None, tls, cancel)
            .await
            .expect("serve");
    });
    rt().block_on(async {
        let connector = TlsConnector::from(saved.client_config(&[b"http/1.1"]).expect("cfg"));
        let tcp = tokio::net::TcpStream::connect(addr).await.expect("tcp");
        let name = ServerName::try_from(ALPHA.to_string()).expect("name");
        let tls = connector
            .connect(name, tcp)
            .await
            .expect("handshake with reloaded CA");
        drop(tls);
    });
}
