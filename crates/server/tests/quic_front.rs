//! The dual proxy end to end on loopback: a browser's request to `webpep client`'s proxy
//! crosses one QUIC connection (an enrolled client, the link-aware controller, the messages of
//! docs/protocol.md) to the edge's QUIC front end, goes through the edge's pipeline to the
//! origin, and comes back. A revoked client gets the link-down page; a malformed request
//! stream is answered with an Error frame and the connection serves the next request.

mod common;
#[path = "common/hostile.rs"]
mod hostile;

use std::net::SocketAddr;
use std::sync::Arc;

use hostile::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use webpep_client::{serve, ClientConfig, ProxyRequest, QuicUpstream, Upstream};
use webpep_server::{CancellationToken, Server};
use webpep_transport::{server_config, Credential, EdgeIdentity, TransportSettings};

struct Edge {
    addr: SocketAddr,
    identity: Arc<EdgeIdentity>,
    server: Arc<Server>,
    _dir: tempfile::TempDir,
    _cancel: CancellationToken,
}

async fn start_edge() -> Edge {
    start_edge_with(common::test_config()).await
}

async fn start_edge_with(cfg: webpep_server::ServerConfig) -> Edge {
    let dir = tempfile::tempdir().unwrap();
    let identity = Arc::new(EdgeIdentity::load_or_create(dir.path()).unwrap());
    let server = Server::new(cfg).unwrap();
    let cfg = server_config(
        &identity,
        identity.revocations(),
        &TransportSettings::default(),
    )
    .unwrap();
    let endpoint = quinn::Endpoint::server(cfg, "127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = endpoint.local_addr().unwrap();
    let cancel = CancellationToken::new();
    tokio::spawn(webpep_server::quic::serve_quic(
        server.clone(),
        endpoint,
        identity.clone(),
        cancel.clone(),
    ));
    Edge {
        addr,
        identity,
        server,
        _dir: dir,
        _cancel: cancel,
    }
}

/// `webpep client`'s proxy on loopback, carrying to `edge` with `cred`.
async fn start_client(edge: SocketAddr, cred: &Credential) -> (SocketAddr, Arc<QuicUpstream>) {
    let upstream = Arc::new(QuicUpstream::new(edge, cred, &TransportSettings::default()).unwrap());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve(
        listener,
        Arc::new(ClientConfig::default()),
        upstream.clone(),
        CancellationToken::new(),
    ));
    (addr, upstream)
}

/// A browser's GET through the client proxy: status and body.
async fn browser_get(proxy: SocketAddr, url: &str) -> (u16, String) {
    let mut s = TcpStream::connect(proxy).await.unwrap();
    let req =
        format!("GET {url} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nUser-Agent: test\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    let text = String::from_utf8_lossy(&out).into_owned();
    let status: u16 = text[9..12].parse().unwrap();
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

#[tokio::test]
async fn a_browser_request_crosses_the_quic_link_through_the_edge_pipeline() {
    let origin = good_origin().await;
    let edge = start_edge().await;
    let cred = edge.identity.enroll("phone").unwrap();
    let (proxy, upstream) = start_client(edge.addr, &cred).await;
    for path in ["/a", "/b", "/c"] {
        let (status, body) = browser_get(proxy, &origin.url(path)).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body, good_body(path));
    }
    // The origin saw each request once, with the browser's fields, from the edge.
    let seen = origin.seen.requests();
    assert_eq!(seen.len(), 3);
    assert_eq!(seen[0].header("user-agent"), Some("test"));
    // Straight through the upstream too: a POST with a body.
    let mut headers = http::HeaderMap::new();
    headers.insert("content-type", "text/plain".parse().unwrap());
    let resp = upstream
        .request(ProxyRequest {
            method: http::Method::POST,
            target: origin.url("/form"),
            headers,
            body: bytes::Bytes::from_static(b"hello"),
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(resp.status, 200);
    let mut body = Vec::new();
    let mut r = resp.body;
    r.read_to_end(&mut body).await.unwrap();
    assert_eq!(body, good_body("/form").as_bytes());
    assert_eq!(origin.seen.last().unwrap().body, b"hello");
    // /metrics counts per enrolled client: one connection, four requests, their bodies.
    let text = edge.server.metrics_text();
    assert!(
        text.contains("webpep_quic_client_connections_total{client=\"phone\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("webpep_quic_client_requests_total{client=\"phone\"} 4"),
        "{text}"
    );
    assert!(
        text.contains("webpep_quic_client_bytes_in_total{client=\"phone\"} 5"),
        "{text}"
    );
    let out: u64 = ["/a", "/b", "/c", "/form"]
        .iter()
        .map(|p| good_body(p).len() as u64)
        .sum();
    assert!(
        text.contains(&format!(
            "webpep_quic_client_bytes_out_total{{client=\"phone\"}} {out}"
        )),
        "{text}"
    );
}

#[tokio::test]
async fn a_revoked_client_gets_the_link_down_page() {
    let origin = good_origin().await;
    let edge = start_edge().await;
    let cred = edge.identity.enroll("lost-phone").unwrap();
    edge.identity.revoke("lost-phone").unwrap();
    let (proxy, _) = start_client(edge.addr, &cred).await;
    let (status, body) = browser_get(proxy, &origin.url("/a")).await;
    assert_eq!(status, 504, "{body}");
    assert!(body.contains("link to the webpep edge is down"), "{body}");
    assert_eq!(origin.seen.count(), 0);
}

#[tokio::test]
async fn a_malformed_request_stream_is_refused_and_the_connection_lives() {
    let origin = good_origin().await;
    let edge = start_edge().await;
    let cred = edge.identity.enroll("fuzzer").unwrap();
    let config = webpep_transport::client_config(&cred, &TransportSettings::default()).unwrap();
    let endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
    let conn = webpep_transport::connect(&endpoint, edge.addr, config)
        .await
        .unwrap();
    let session =
        webpep_transport::session::Session::open(conn.clone(), webpep_proto::Role::Client)
            .await
            .unwrap();
    // Garbage where a Request frame belongs.
    let (mut send, mut recv) = conn.open_bi().await.unwrap();
    send.write_all(&[0x01, 0x05, 0xff, 0xff, 0xff, 0xff, 0xff])
        .await
        .unwrap();
    send.finish().unwrap();
    let answer = recv.read_to_end(1 << 16).await.unwrap();
    let mut dec = webpep_proto::FrameDecoder::new();
    dec.push(&answer);
    match dec.next_frame().unwrap() {
        Some(webpep_proto::Frame::Error { reason, .. }) => assert!(!reason.is_empty()),
        other => panic!("{other:?}"),
    }
    // The same connection still serves.
    let (status, _, _, mut body) = webpep_transport::session::send_request(
        &session,
        "GET",
        &origin.url("/after"),
        &http::HeaderMap::new(),
        b"",
        false,
    )
    .await
    .unwrap();
    assert_eq!(status, 200);
    let mut got = Vec::new();
    while let Some(d) = body.chunk().await.unwrap() {
        got.extend_from_slice(&d);
    }
    assert_eq!(got, good_body("/after").as_bytes());
}

/// An origin that echoes what it gets, upper-cased (a stand-in for a TLS server).
async fn echo_origin() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                loop {
                    let n = s.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    if s.write_all(&buf[..n].to_ascii_uppercase()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

#[tokio::test]
async fn connect_tunnels_ride_the_quic_link_and_the_edge_checks_the_port() {
    let echo = echo_origin().await;
    let mut cfg = common::test_config();
    cfg.acl.connect_ports = vec![echo.port()];
    let edge = start_edge_with(cfg).await;
    let cred = edge.identity.enroll("laptop").unwrap();
    let (proxy, _) = start_client(edge.addr, &cred).await;

    let mut s = TcpStream::connect(proxy).await.unwrap();
    s.write_all(format!("CONNECT {echo} HTTP/1.1\r\nHost: {echo}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut head = [0u8; 39];
    s.read_exact(&mut head).await.unwrap();
    assert_eq!(&head, b"HTTP/1.1 200 Connection Established\r\n\r\n");
    for msg in [&b"client hello"[..], b"more bytes"] {
        s.write_all(msg).await.unwrap();
        let mut back = vec![0u8; msg.len()];
        s.read_exact(&mut back).await.unwrap();
        assert_eq!(back, msg.to_ascii_uppercase());
    }
    drop(s);

    // A port the edge does not allow: the browser gets the edge's 403 and its reason.
    let mut s = TcpStream::connect(proxy).await.unwrap();
    s.write_all(b"CONNECT 127.0.0.1:25 HTTP/1.1\r\nHost: 127.0.0.1:25\r\n\r\n")
        .await
        .unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    let text = String::from_utf8_lossy(&out);
    assert!(text.starts_with("HTTP/1.1 403"), "{text}");
    assert!(text.contains("port 25"), "{text}");
}

/// The header-compression ablation: a client that inserts nothing into its table is served
/// as any other (its blocks are static-table references and literals).
#[tokio::test]
async fn a_client_without_header_compression_is_served_alike() {
    let origin = good_origin().await;
    let edge = start_edge().await;
    let cred = edge.identity.enroll("plain").unwrap();
    let settings = TransportSettings {
        header_table: false,
        ..TransportSettings::default()
    };
    let upstream = QuicUpstream::new(edge.addr, &cred, &settings).unwrap();
    for path in ["/x", "/y"] {
        let mut headers = http::HeaderMap::new();
        headers.insert(
            "user-agent",
            "a long user agent string that a table would keep"
                .parse()
                .unwrap(),
        );
        let resp = upstream
            .request(ProxyRequest {
                method: http::Method::GET,
                target: origin.url(path),
                headers,
                body: bytes::Bytes::new(),
            })
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(resp.status, 200);
        let mut body = Vec::new();
        let mut r = resp.body;
        r.read_to_end(&mut body).await.unwrap();
        assert_eq!(body, good_body(path).as_bytes());
    }
}
