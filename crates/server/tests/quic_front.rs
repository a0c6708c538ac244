//! The dual proxy end to end on loopback: a browser's request to `webpep client`'s proxy
//! crosses one QUIC connection (an enrolled client, the link-aware controller, the messages of
//! docs/protocol.md) to the edge's QUIC front end, goes through the edge's pipeline to the
//! origin, and comes back. A revoked client gets the link-down page; a malformed request
//! stream is answered with an Error frame and the connection serves the next request.

#[path = "common/access_log.rs"]
mod access_log;
mod common;
#[path = "common/hostile.rs"]
mod hostile;

use std::net::SocketAddr;
use std::sync::Arc;

use hostile::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use webpep_client::{ClientConfig, ClientProxy, ProxyRequest, QuicUpstream, Upstream};
use webpep_server::{CancellationToken, Server};
use webpep_transport::{Credential, EdgeIdentity, EdgeTransport, TransportSettings};

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
    start_edge_on(cfg, &TransportSettings::default()).await
}

async fn start_edge_on(cfg: webpep_server::ServerConfig, settings: &TransportSettings) -> Edge {
    let dir = tempfile::tempdir().unwrap();
    let identity = Arc::new(EdgeIdentity::load_or_create(dir.path()).unwrap());
    let server = Server::new(cfg).unwrap();
    let edge = Arc::new(EdgeTransport::new(identity.clone(), settings).unwrap());
    let endpoint =
        quinn::Endpoint::server(edge.server_config(), "127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = endpoint.local_addr().unwrap();
    let cancel = CancellationToken::new();
    tokio::spawn(webpep_server::quic::serve_quic(
        server.clone(),
        endpoint,
        edge,
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
    start_client_on(edge, cred, &TransportSettings::default()).await
}

async fn start_client_on(
    edge: SocketAddr,
    cred: &Credential,
    settings: &TransportSettings,
) -> (SocketAddr, Arc<QuicUpstream>) {
    let upstream = QuicUpstream::new(edge, cred, settings).unwrap();
    serve_client(upstream).await
}

/// The client proxy on loopback over `upstream`.
async fn serve_client(upstream: QuicUpstream) -> (SocketAddr, Arc<QuicUpstream>) {
    serve_client_with(upstream, ClientConfig::default()).await
}

async fn serve_client_with(
    upstream: QuicUpstream,
    cfg: ClientConfig,
) -> (SocketAddr, Arc<QuicUpstream>) {
    let upstream = Arc::new(upstream);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        ClientProxy::new(Arc::new(cfg), upstream.clone(), None)
            .serve(listener, CancellationToken::new()),
    );
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
async fn the_edge_measures_a_client_proxys_link_from_its_quic_connection() {
    access_log::access_log();
    // Bodies large enough to fill the window: an application-limited connection says
    // nothing of the link's rate.
    let big = vec![7u8; 1 << 20];
    let origin = common::Origin::start(move |_| {
        common::OriginReply::ok("application/octet-stream", big.clone())
    })
    .await;
    let mut cfg = common::test_config();
    // The stages that scale with the link (compression here) make the edge measure it.
    cfg.air.adapt = true;
    cfg.compress.enabled = true;
    let edge = start_edge_with(cfg).await;
    let cred = edge.identity.enroll("measured").unwrap();
    let (proxy, _upstream) = start_client(edge.addr, &cred).await;
    let url = format!("http://{}/measured", origin.addr);
    for _ in 0..4 {
        let (status, _) = browser_get(proxy, &url).await;
        assert_eq!(status, 200);
    }
    let line = access_log::nth_line(&url, 4).await;
    eprintln!("{line}");
    assert_eq!(line["mode"], "quic", "{line}");
    assert_eq!(line["user"], "measured", "{line}");
    assert_eq!(line["status"], 200, "{line}");
    // The connection's controller measured a delivery rate and its RTT estimator a minimum
    // RTT, as TCP_INFO gives them for a browser's connection.
    assert!(line["link_kbps"].as_u64().is_some_and(|k| k > 0), "{line}");
    assert!(line["min_rtt_ms"].as_u64().is_some(), "{line}");
    assert!(line["added_ms"].as_f64().is_some(), "{line}");
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
    let session = session_with(&edge, "fuzzer").await;
    // Garbage where a Request frame belongs.
    let (mut send, mut recv) = session.connection().open_bi().await.unwrap();
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
    let (status, got) = session_request(&session, "GET", &origin.url("/after"), b"").await;
    assert_eq!(status, 200);
    assert_eq!(got, good_body("/after"));
}

/// The session of a client enrolled as `name` with `edge`, spoken to directly.
async fn session_with(edge: &Edge, name: &str) -> Arc<webpep_transport::session::Session> {
    let cred = edge.identity.enroll(name).unwrap();
    let config = webpep_transport::client_config(&cred, &TransportSettings::default()).unwrap();
    let endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
    let conn = webpep_transport::connect(&endpoint, edge.addr, config)
        .await
        .unwrap();
    webpep_transport::session::Session::open(conn, webpep_proto::Role::Client)
        .await
        .unwrap()
}

/// A `method` request with `body` on `session`: the status and the answer's body.
async fn session_request(
    session: &webpep_transport::session::Session,
    method: &str,
    url: &str,
    body: &[u8],
) -> (u16, String) {
    let (status, _, _, mut answer) = webpep_transport::session::send_request(
        session,
        method,
        url,
        &http::HeaderMap::new(),
        body,
        false,
    )
    .await
    .unwrap();
    let mut got = Vec::new();
    while let Some(d) = answer.chunk().await.unwrap() {
        got.extend_from_slice(&d);
    }
    (status, String::from_utf8_lossy(&got).into_owned())
}

#[tokio::test]
async fn a_client_proxys_request_bodies_are_held_within_the_limits_of_every_front_end() {
    access_log::access_log();
    let origin = good_origin().await;
    let mut cfg = common::test_config();
    cfg.limits.max_request_body = 64 << 10;
    cfg.limits.max_client_buffered_bytes = 64 << 10;
    let edge = start_edge_with(cfg).await;
    let session = session_with(&edge, "uploader").await;
    // Over max-request-body: refused as too large, before the origin sees anything.
    let (status, why) = session_request(
        &session,
        "POST",
        &origin.url("/big"),
        &vec![b'x'; 100 << 10],
    )
    .await;
    assert_eq!(status, 413, "{why}");
    // The refusal is in the access log as any answer is.
    let line = access_log::nth_line(&origin.url("/big"), 1).await;
    assert_eq!(line["status"], 413, "{line}");
    assert_eq!(line["method"], "POST", "{line}");
    assert_eq!(line["user"], "uploader", "{line}");
    // One stream declares 48 KiB and sends none of it yet: the edge holds its place.
    let mut declared = http::HeaderMap::new();
    declared.insert(
        http::header::CONTENT_LENGTH,
        http::HeaderValue::from(48 << 10),
    );
    let head = webpep_proto::Frame::Request {
        method: "POST".into(),
        target: origin.url("/slow"),
        headers: session
            .encode_headers(&webpep_transport::session::fields_of(&declared))
            .await
            .unwrap(),
        background: false,
        table_ack: session.table_ack(),
    };
    let (mut slow, _slow_answer) = session.connection().open_bi().await.unwrap();
    slow.write_all(&head.to_bytes()).await.unwrap();
    // Another body within max-request-body, but not within what this client may hold
    // beside the first: refused for the budget, and the connection lives on.
    let mut refused = false;
    for _ in 0..100 {
        let (status, why) = session_request(
            &session,
            "POST",
            &origin.url("/held"),
            &vec![b'x'; 32 << 10],
        )
        .await;
        if status == 503 {
            assert!(why.contains("max-client-buffered-bytes"), "{why}");
            refused = true;
            break;
        }
        // The first stream's head had not been read yet: let the edge get to it.
        assert_eq!(status, 200, "{why}");
        tokio::task::yield_now().await;
    }
    assert!(refused, "a second body beside a held one was never refused");
    // Once the first stream is gone, its place is given back.
    drop(slow);
    drop(_slow_answer);
    let mut ok = false;
    for _ in 0..100 {
        let (status, _) = session_request(
            &session,
            "POST",
            &origin.url("/after"),
            &vec![b'x'; 32 << 10],
        )
        .await;
        if status == 200 {
            ok = true;
            break;
        }
        tokio::task::yield_now().await;
    }
    assert!(ok, "the held place was never given back");
}

#[tokio::test]
async fn a_background_response_waits_while_a_foreground_one_has_data_to_send() {
    const SIZE: usize = 8 << 20;
    // Incompressible bytes of no type any stage works on: both stream through as they come.
    let origin = common::Origin::start(|_| {
        let body: Vec<u8> = (0..SIZE as u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
            .collect();
        common::OriginReply::ok("application/octet-stream", body)
    })
    .await;
    let edge = start_edge().await;
    let session = session_with(&edge, "pusher").await;
    let get = |path: &str, background: bool| {
        let (session, url) = (session.clone(), format!("http://{}{path}", origin.addr));
        async move {
            let (status, _, _, body) = webpep_transport::session::send_request(
                &session,
                "GET",
                &url,
                &http::HeaderMap::new(),
                b"",
                background,
            )
            .await
            .unwrap();
            assert_eq!(status, 200);
            body
        }
    };
    // The background response begins first; unread, it stops at its stream's window with
    // the rest waiting at the edge.
    let mut bg = get("/bg", true).await;
    let first = bg.chunk().await.unwrap().unwrap();
    let mut fg = get("/fg", false).await;
    let bg_bytes = std::sync::atomic::AtomicUsize::new(first.len());
    let bg_when_fg_done = std::sync::atomic::AtomicUsize::new(0);
    let read_bg = async {
        while let Some(d) = bg.chunk().await.unwrap() {
            bg_bytes.fetch_add(d.len(), std::sync::atomic::Ordering::SeqCst);
        }
    };
    let read_fg = async {
        let mut n = 0;
        while let Some(d) = fg.chunk().await.unwrap() {
            n += d.len();
        }
        assert_eq!(n, SIZE);
        let at = bg_bytes.load(std::sync::atomic::Ordering::SeqCst);
        bg_when_fg_done.store(at, std::sync::atomic::Ordering::SeqCst);
    };
    // Both read as fast as they come. While the foreground response had data to send, the
    // background one got only what had already left the edge (at most its stream's window,
    // 1.25 MB); shared in turn, it would have had as much as the foreground one.
    tokio::join!(read_bg, read_fg);
    assert_eq!(bg_bytes.into_inner(), SIZE);
    let during = bg_when_fg_done.into_inner();
    assert!(
        during < SIZE / 3,
        "the background response got {during} bytes meanwhile"
    );
}

#[tokio::test]
async fn text_without_a_coding_of_its_own_crosses_zstd_coded_and_reaches_the_browser_as_it_was() {
    let page: String = (0..2000)
        .map(|i| format!("<li>item {} of the list</li>\n", i % 37))
        .collect();
    let body = page.clone();
    let origin =
        common::Origin::start(move |_| common::OriginReply::ok("text/html", body.clone())).await;
    // As held whole, as streamed through (over max-body-transform), and with the coding off.
    for (name, stream, zstd) in [
        ("held", false, true),
        ("streamed", true, true),
        ("plain", false, false),
    ] {
        let mut cfg = common::test_config();
        cfg.quic.zstd = zstd;
        if stream {
            cfg.limits.max_body_transform = 1024;
        }
        let edge = start_edge_with(cfg).await;
        let cred = edge.identity.enroll(name).unwrap();
        let (proxy, _) = start_client(edge.addr, &cred).await;
        // No Accept-Encoding: the browser gets the page as the origin sent it.
        let (status, got) = browser_get(proxy, &format!("http://{}/page", origin.addr)).await;
        assert_eq!(status, 200, "{name}");
        assert_eq!(got, page, "{name}");
        let out = client_metric(&edge, "bytes_out", name).unwrap();
        if zstd {
            assert!(out * 10 < page.len() as u64, "{name}: {out} bytes crossed");
        } else {
            assert_eq!(out, page.len() as u64, "{name}");
        }
    }
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

    // The browser's first bytes right behind its CONNECT (as a TLS ClientHello follows the
    // 200 of a proxy that answers at once), then more after the echo.
    let mut s = TcpStream::connect(proxy).await.unwrap();
    s.write_all(format!("CONNECT {echo} HTTP/1.1\r\nHost: {echo}\r\n\r\nclient hello").as_bytes())
        .await
        .unwrap();
    let mut head = [0u8; 39];
    s.read_exact(&mut head).await.unwrap();
    assert_eq!(&head, b"HTTP/1.1 200 Connection Established\r\n\r\n");
    let mut back = [0u8; 12];
    s.read_exact(&mut back).await.unwrap();
    assert_eq!(&back, b"CLIENT HELLO");
    s.write_all(b"more bytes").await.unwrap();
    let mut back = [0u8; 10];
    s.read_exact(&mut back).await.unwrap();
    assert_eq!(&back, b"MORE BYTES");
    drop(s);

    // A port the edge does not allow. The tunnel was the browser's at once (fast connect:
    // its first bytes went with the CONNECT), so the edge's refusal closes it: nothing of
    // the origin's comes, only the 200 that went before the edge answered.
    let refused = b"CONNECT 127.0.0.1:25 HTTP/1.1\r\nHost: 127.0.0.1:25\r\n\r\nclient hello";
    let mut s = TcpStream::connect(proxy).await.unwrap();
    s.write_all(refused).await.unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    assert_eq!(out, b"HTTP/1.1 200 Connection Established\r\n\r\n");

    // Without fast connect the browser waits for the edge: its 403 and its reason.
    let (proxy, _) = serve_client(
        QuicUpstream::new(edge.addr, &cred, &TransportSettings::default())
            .unwrap()
            .fast_connect(false),
    )
    .await;
    let mut s = TcpStream::connect(proxy).await.unwrap();
    s.write_all(refused).await.unwrap();
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

// ---------------------------------------------------------------------------------------
// Outages and a moving client: a UDP relay between the client and the edge stands in for
// the air link. It can drop everything (an outage) or carry on from a new address towards
// the edge (the client's address changed: a NAT rebinding, a new network).
// ---------------------------------------------------------------------------------------

/// Keep-alives and an idle timeout short enough that a second's outage ends the connection.
fn short_idle() -> TransportSettings {
    TransportSettings {
        keep_alive: std::time::Duration::from_millis(200),
        idle_timeout: std::time::Duration::from_millis(800),
        ..TransportSettings::default()
    }
}

/// The edge's per-client counter `webpep_quic_client_<name>_total` for `client`.
fn client_metric(edge: &Edge, name: &str, client: &str) -> Option<u64> {
    let key = format!("webpep_quic_client_{name}_total{{client=\"{client}\"}} ");
    let text = edge.server.metrics_text();
    let line = text.lines().find(|l| l.starts_with(&key))?;
    line[key.len()..].trim().parse().ok()
}

#[derive(Default)]
struct RelayControl {
    down: std::sync::atomic::AtomicBool,
    dropped: std::sync::atomic::AtomicU64,
    rebind: tokio::sync::Notify,
}

struct Relay {
    addr: SocketAddr,
    control: Arc<RelayControl>,
}

impl Relay {
    fn set_down(&self, down: bool) {
        self.control
            .down
            .store(down, std::sync::atomic::Ordering::SeqCst);
    }

    fn dropped(&self) -> u64 {
        self.control
            .dropped
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// From now on the edge sees the client's packets from another address.
    fn move_client(&self) {
        self.control.rebind.notify_one();
    }
}

async fn relay_to(edge: SocketAddr) -> Relay {
    use std::sync::atomic::Ordering;
    use tokio::net::UdpSocket;
    let front = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = front.local_addr().unwrap();
    let control = Arc::new(RelayControl::default());
    let c = control.clone();
    tokio::spawn(async move {
        let mut back = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let mut client: Option<SocketAddr> = None;
        let mut from_client = vec![0u8; 65536];
        let mut from_edge = vec![0u8; 65536];
        let passes = |c: &RelayControl| {
            let down = c.down.load(Ordering::SeqCst);
            if down {
                c.dropped.fetch_add(1, Ordering::SeqCst);
            }
            !down
        };
        loop {
            tokio::select! {
                r = front.recv_from(&mut from_client) => {
                    let Ok((n, peer)) = r else { return };
                    client = Some(peer);
                    if passes(&c) {
                        let _ = back.send_to(&from_client[..n], edge).await;
                    }
                }
                r = back.recv_from(&mut from_edge) => {
                    let Ok((n, _)) = r else { return };
                    if let (true, Some(to)) = (passes(&c), client) {
                        let _ = front.send_to(&from_edge[..n], to).await;
                    }
                }
                _ = c.rebind.notified() => {
                    back = UdpSocket::bind("127.0.0.1:0").await.unwrap();
                }
            }
        }
    });
    Relay { addr, control }
}

/// An origin that holds each answer until the test releases it, so the answer is in flight
/// when the link goes down.
async fn held_origin(release: Arc<tokio::sync::Notify>) -> HostileOrigin {
    scripted_origin(move |mut c| {
        let release = release.clone();
        async move {
            while let Some(r) = c.read_request().await {
                release.notified().await;
                let body = good_body(r.path());
                if !c
                    .write(&response(
                        200,
                        &[("Content-Type", "text/plain")],
                        body.as_bytes(),
                    ))
                    .await
                {
                    return;
                }
            }
        }
    })
    .await
}

/// A browser's POST through the client proxy: status and body.
async fn browser_post(proxy: SocketAddr, url: &str, body: &str) -> (u16, String) {
    let mut s = TcpStream::connect(proxy).await.unwrap();
    let req = format!(
        "POST {url} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: text/plain\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
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

fn posts(origin: &HostileOrigin) -> usize {
    origin
        .seen
        .requests()
        .iter()
        .filter(|r| r.method == "POST")
        .count()
}

/// The link goes down while a POST's answer and a GET are in flight, and comes back before
/// the connection's idle timeout: both complete, nothing is lost, and the origin saw the POST
/// once. (The outage lasts 2 s: a 20 s outage of the lab's links at its time scale of 10.)
#[tokio::test]
async fn what_was_in_flight_completes_after_an_outage_and_a_post_reaches_the_origin_once() {
    bounded(async {
        let release = Arc::new(tokio::sync::Notify::new());
        let origin = held_origin(release.clone()).await;
        let edge = start_edge().await;
        let cred = edge.identity.enroll("commuter").unwrap();
        let relay = relay_to(edge.addr).await;
        let (proxy, _) = start_client(relay.addr, &cred).await;

        let post = tokio::spawn({
            let url = origin.url("/order");
            async move { browser_post(proxy, &url, "one coffee").await }
        });
        origin.seen.wait_heads(1).await;
        relay.set_down(true);
        // The GET is sent into the outage; the POST's answer leaves the origin into it.
        let get = tokio::spawn({
            let url = origin.url("/news");
            async move { browser_get(proxy, &url).await }
        });
        release.notify_one();
        wait_until("packets lost to the outage", DEADLINE, || {
            relay.dropped() >= 2
        })
        .await;
        tokio::time::sleep(std::time::Duration::from_secs(2)).await;
        relay.set_down(false);
        // The GET reaches the origin once the link is back; it is held like the POST was.
        origin.seen.wait_heads(2).await;
        release.notify_one();

        let (status, body) = within("the POST", DEADLINE, post).await.unwrap();
        assert_eq!((status, body.as_str()), (200, "ok /order"));
        let (status, body) = within("the GET", DEADLINE, get).await.unwrap();
        assert_eq!((status, body.as_str()), (200, "ok /news"));
        assert_eq!(posts(&origin), 1, "{:?}", origin.seen.requests());
        let post = origin
            .seen
            .requests()
            .into_iter()
            .find(|r| r.method == "POST");
        assert_eq!(post.unwrap().body, b"one coffee");
        // One connection carried it all: the outage did not cost a reconnect.
        assert_eq!(client_metric(&edge, "connections", "commuter"), Some(1));
    })
    .await
}

/// An outage longer than the connection's idle timeout kills the connection under a POST
/// whose answer was in flight: the browser gets an error, the POST is not sent again on the
/// new connection (the origin saw it once), and the next request reconnects.
#[tokio::test]
async fn a_post_whose_connection_died_in_an_outage_is_not_replayed() {
    bounded(async {
        let settings = short_idle();
        let release = Arc::new(tokio::sync::Notify::new());
        let origin = held_origin(release.clone()).await;
        let edge = start_edge_on(common::test_config(), &settings).await;
        let cred = edge.identity.enroll("tunnel-rider").unwrap();
        let relay = relay_to(edge.addr).await;
        let (proxy, upstream) = start_client_on(relay.addr, &cred, &settings).await;

        let post = tokio::spawn({
            let url = origin.url("/pay");
            async move { browser_post(proxy, &url, "10 EUR").await }
        });
        origin.seen.wait_heads(1).await;
        relay.set_down(true);
        release.notify_one();
        // The browser hears that the connection died before the link comes back.
        let (status, body) = within("the POST's failure", DEADLINE, post).await.unwrap();
        assert_ne!(status, 200, "{body}");
        relay.set_down(false);

        // The next request reconnects; the POST is not among what the origin then sees.
        let get = tokio::spawn({
            let url = origin.url("/receipt");
            async move { browser_get(proxy, &url).await }
        });
        origin.seen.wait_heads(2).await;
        release.notify_one();
        let (status, body) = within("the GET", DEADLINE, get).await.unwrap();
        assert_eq!((status, body.as_str()), (200, "ok /receipt"));
        assert_eq!(posts(&origin), 1, "{:?}", origin.seen.requests());
        assert_eq!(client_metric(&edge, "connections", "tunnel-rider"), Some(2));
        // The reconnection resumed the session: the GET went in its first flight (0-RTT).
        use std::sync::atomic::Ordering::Relaxed;
        assert_eq!(upstream.stats().connections.load(Relaxed), 2);
        assert_eq!(upstream.stats().early_accepted.load(Relaxed), 1);
        assert_eq!(upstream.stats().early_refused.load(Relaxed), 0);
    })
    .await
}

/// QUIC path migration: the client's address changes between two requests (the relay
/// carries on from a new port) and the same connection serves the second one.
#[tokio::test]
async fn the_connection_survives_a_change_of_the_client_address() {
    bounded(async {
        let origin = good_origin().await;
        let edge = start_edge().await;
        let cred = edge.identity.enroll("roamer").unwrap();
        let relay = relay_to(edge.addr).await;
        let (proxy, _) = start_client(relay.addr, &cred).await;
        let (status, _) = browser_get(proxy, &origin.url("/home")).await;
        assert_eq!(status, 200);
        relay.move_client();
        let (status, body) = browser_get(proxy, &origin.url("/away")).await;
        assert_eq!((status, body.as_str()), (200, "ok /away"));
        assert_eq!(client_metric(&edge, "connections", "roamer"), Some(1));
        assert_eq!(client_metric(&edge, "requests", "roamer"), Some(2));
    })
    .await
}

/// A live link is not down: an answer that takes longer than `link-down-after` (the origin
/// is slow) reaches the browser, since the edge's acknowledgements of the client's
/// keep-alives keep coming; with the link cut, the same wait gives the link-down page.
#[tokio::test]
async fn a_slow_answer_on_a_live_link_is_not_the_link_down_page() {
    bounded(async {
        let settings = short_idle();
        let slow = scripted_origin(|mut c| async move {
            while let Some(r) = c.read_request().await {
                tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
                let body = good_body(r.path());
                let out = response(200, &[("Content-Type", "text/plain")], body.as_bytes());
                if !c.write(&out).await {
                    return;
                }
            }
        })
        .await;
        let edge = start_edge_on(common::test_config(), &settings).await;
        let cred = edge.identity.enroll("patient").unwrap();
        let relay = relay_to(edge.addr).await;
        let cfg = ClientConfig {
            link_down_after: std::time::Duration::from_millis(500),
            ..ClientConfig::default()
        };
        let upstream = QuicUpstream::new(relay.addr, &cred, &settings).unwrap();
        let (proxy, _) = serve_client_with(upstream, cfg).await;
        let (status, body) = browser_get(proxy, &slow.url("/slow")).await;
        assert_eq!((status, body.as_str()), (200, "ok /slow"), "{body}");
        // The link goes down under the next request: nothing comes, and after
        // link-down-after the browser has the page saying so.
        let waiting = tokio::spawn(async move { browser_get(proxy, &slow.url("/cut")).await });
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        relay.set_down(true);
        let (status, body) = waiting.await.unwrap();
        assert_eq!(status, 504, "{body}");
        assert!(body.contains("link to the webpep edge is down"), "{body}");
    })
    .await
}

/// Resuming a session skips the handshake's certificate check; a client revoked since its
/// last connection is still refused when it comes back with its ticket.
#[tokio::test]
async fn a_client_revoked_between_connections_cannot_resume() {
    bounded(async {
        let settings = short_idle();
        let origin = good_origin().await;
        let edge = start_edge_on(common::test_config(), &settings).await;
        let cred = edge.identity.enroll("stolen").unwrap();
        let relay = relay_to(edge.addr).await;
        let (proxy, upstream) = start_client_on(relay.addr, &cred, &settings).await;
        let (status, _) = browser_get(proxy, &origin.url("/before")).await;
        assert_eq!(status, 200);
        edge.identity.revoke("stolen").unwrap();
        // The connection dies in an outage; the client comes back with its session ticket.
        // (Longer than both ends' idle timeout.)
        relay.set_down(true);
        tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
        relay.set_down(false);
        let (status, body) = browser_get(proxy, &origin.url("/after")).await;
        assert_eq!(status, 504, "{body}");
        assert_eq!(origin.seen.count(), 1, "{:?}", origin.seen.requests());
        // It came back with its ticket (0-RTT), and the edge closed that connection.
        use std::sync::atomic::Ordering::Relaxed;
        let stats = upstream.stats();
        eprintln!("{stats:?}");
        assert!(stats.connections.load(Relaxed) >= 2);
        assert!(
            stats.early_accepted.load(Relaxed) + stats.early_refused.load(Relaxed) >= 1,
            "{stats:?}"
        );
    })
    .await
}
