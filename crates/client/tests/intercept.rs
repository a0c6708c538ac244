//! Interception on the device proxy against a stand-in for the edge: a CONNECT the policy
//! names is answered by the client itself, the browser's TLS (HTTP/1.1 or HTTP/2) ends with a
//! leaf of the device's CA, and the requests inside reach the edge as ordinary `https://`
//! requests; an excluded host is tunnelled untouched; an origin that wants a client
//! certificate turns its host into a tunnel; a garbled or mismatched ClientHello fails only
//! that connection; the CA page hands out the certificate. The proxy's HTTPS port carries
//! all of that over TLS, and with HTTP/2 as streams of one connection.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode};
use http_body_util::{BodyExt, Empty};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use webpep_client::proxy::Tunnel;
use webpep_client::{
    proxy_tls_config, ClientConfig, ClientProxy, InterceptConfig, Interception, ProxyRequest,
    Upstream, UpstreamError, UpstreamResponse,
};
use webpep_intercept::CaStore;

struct FakeEdge {
    seen: Mutex<Vec<ProxyRequest>>,
    tunnels: Mutex<Vec<String>>,
}

impl Upstream for FakeEdge {
    async fn request(&self, req: ProxyRequest) -> Result<UpstreamResponse, UpstreamError> {
        self.seen.lock().unwrap().push(req.clone());
        let mut headers = HeaderMap::new();
        if req.target.contains("wants-a-client-cert") {
            headers.insert(
                "webpep-passthrough",
                HeaderValue::from_static("client-certificate"),
            );
            let body = b"origin asks for a client certificate".to_vec();
            return Ok(UpstreamResponse {
                status: StatusCode::BAD_GATEWAY,
                headers,
                length: Some(body.len() as u64),
                body: Box::new(std::io::Cursor::new(body)),
            });
        }
        let body = format!("{} {}", req.method, req.target);
        headers.insert("content-type", HeaderValue::from_static("text/plain"));
        Ok(UpstreamResponse {
            status: StatusCode::OK,
            headers,
            length: Some(body.len() as u64),
            body: Box::new(std::io::Cursor::new(body.into_bytes())),
        })
    }

    async fn tunnel(&self, authority: String, _: HeaderMap) -> Result<Tunnel, UpstreamError> {
        self.tunnels.lock().unwrap().push(authority);
        // The origin answers "TUNNEL" and closes.
        let (ours, mut theirs) = tokio::io::duplex(4096);
        tokio::spawn(async move {
            let _ = theirs.write_all(b"TUNNEL").await;
            let _ = theirs.shutdown().await;
        });
        let (r, w) = tokio::io::split(ours);
        Ok((Box::new(r), Box::new(w)))
    }
}

struct Setup {
    proxy: std::net::SocketAddr,
    /// The proxy's HTTPS port.
    https_proxy: std::net::SocketAddr,
    edge: Arc<FakeEdge>,
    ca: Arc<CaStore>,
    intercept: Arc<Interception>,
    client: ClientProxy<FakeEdge>,
    _dir: tempfile::TempDir,
}

async fn start() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let ca = Arc::new(CaStore::init(&dir.path().join("ca"), false).unwrap());
    let icfg = InterceptConfig {
        enabled: true,
        exclude: vec!["=bank.a.test".into()],
        ports: vec![443, 8443],
        ..InterceptConfig::default()
    };
    let intercept = Arc::new(Interception::new(ca.clone(), &icfg, dir.path().join("ca")).unwrap());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy = listener.local_addr().unwrap();
    let edge = Arc::new(FakeEdge {
        seen: Mutex::new(Vec::new()),
        tunnels: Mutex::new(Vec::new()),
    });
    let tls_listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let https_proxy = tls_listener.local_addr().unwrap();
    let cfg = Arc::new(ClientConfig {
        intercept: icfg,
        tls_listen: Some(https_proxy),
        ..ClientConfig::default()
    });
    let client = ClientProxy::new(cfg, edge.clone(), Some(intercept.clone()));
    tokio::spawn(client.clone().serve(listener, CancellationToken::new()));
    tokio::spawn(client.clone().serve_tls(
        tls_listener,
        proxy_tls_config(&ca, https_proxy).unwrap(),
        CancellationToken::new(),
    ));
    Setup {
        proxy,
        https_proxy,
        edge,
        ca,
        intercept,
        client,
        _dir: dir,
    }
}

/// CONNECT through the proxy; the stream after its 200.
async fn connect(proxy: std::net::SocketAddr, authority: &str) -> TcpStream {
    let mut s = TcpStream::connect(proxy).await.unwrap();
    s.write_all(format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut b = [0u8; 1];
        assert_eq!(
            s.read(&mut b).await.unwrap(),
            1,
            "the proxy closed: {head:?}"
        );
        head.push(b[0]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    s
}

fn tls_client(ca: &CaStore, alpn: &[&[u8]]) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.cert_der()).unwrap();
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

async fn http1_get<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S, host: &str, path: &str) -> String {
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out).await;
    String::from_utf8_lossy(&out).into_owned()
}

/// An HTTP/2 client connection over `io` (its connection task spawned).
async fn h2_client<S>(io: S) -> hyper::client::conn::http2::SendRequest<Empty<Bytes>>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (send, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(io),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    send
}

#[tokio::test]
async fn http11_inside_an_intercepted_tunnel_reaches_the_edge_as_https_requests() {
    let t = start().await;
    let tcp = connect(t.proxy, "www.a.test:443").await;
    let mut tls = tls_client(&t.ca, &[b"http/1.1"])
        .connect(ServerName::try_from("www.a.test").unwrap(), tcp)
        .await
        .expect("the browser trusts the leaf the device's CA minted");
    let text = http1_get(&mut tls, "www.a.test", "/news?id=1").await;
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.ends_with("GET https://www.a.test/news?id=1"), "{text}");
    let seen = t.edge.seen.lock().unwrap();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].target, "https://www.a.test/news?id=1");
    assert!(
        t.edge.tunnels.lock().unwrap().is_empty(),
        "no tunnel was opened"
    );
    assert_eq!(t.intercept.minted(), 1);
}

#[tokio::test]
async fn http2_inside_an_intercepted_tunnel_and_a_port_other_than_443() {
    let t = start().await;
    let tcp = connect(t.proxy, "img.a.test:8443").await;
    let tls = tls_client(&t.ca, &[b"h2", b"http/1.1"])
        .connect(ServerName::try_from("img.a.test").unwrap(), tcp)
        .await
        .unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let mut send = h2_client(tls).await;
    for path in ["/a.png", "/b.png"] {
        let req = http::Request::get(format!("https://img.a.test:8443{path}"))
            .body(Empty::<Bytes>::new())
            .unwrap();
        let resp = send.send_request(req).await.unwrap();
        assert_eq!(resp.status(), 200);
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(body, format!("GET https://img.a.test:8443{path}"));
    }
    let seen = t.edge.seen.lock().unwrap();
    assert_eq!(seen.len(), 2);
    assert_eq!(
        seen[0].headers.get("host").map(|v| v.to_str().unwrap()),
        Some("img.a.test:8443"),
        "HTTP/2's :authority becomes the Host the edge sees"
    );
}

#[tokio::test]
async fn an_excluded_host_is_tunnelled_untouched() {
    let t = start().await;
    let mut tcp = connect(t.proxy, "bank.a.test:443").await;
    let mut got = Vec::new();
    tcp.read_to_end(&mut got).await.unwrap();
    assert_eq!(got, b"TUNNEL");
    assert_eq!(*t.edge.tunnels.lock().unwrap(), ["bank.a.test:443"]);
    assert!(t.edge.seen.lock().unwrap().is_empty());
    assert_eq!(t.intercept.minted(), 0);
    // So is a port the policy does not name.
    let mut tcp = connect(t.proxy, "www.a.test:993").await;
    let mut got = Vec::new();
    tcp.read_to_end(&mut got).await.unwrap();
    assert_eq!(got, b"TUNNEL");
}

#[tokio::test]
async fn an_origin_that_wants_a_client_certificate_becomes_a_tunnel() {
    let t = start().await;
    let tcp = connect(t.proxy, "wants-a-client-cert.a.test:443").await;
    let mut tls = tls_client(&t.ca, &[b"http/1.1"])
        .connect(
            ServerName::try_from("wants-a-client-cert.a.test").unwrap(),
            tcp,
        )
        .await
        .unwrap();
    let text = http1_get(&mut tls, "wants-a-client-cert.a.test", "/").await;
    assert!(text.starts_with("HTTP/1.1 502"), "{text}");
    assert!(
        text.contains("client certificate") && text.contains("reload"),
        "{text}"
    );
    // The browser's retry goes through untouched, its TLS to the origin itself.
    let mut tcp = connect(t.proxy, "wants-a-client-cert.a.test:443").await;
    let mut got = Vec::new();
    tcp.read_to_end(&mut got).await.unwrap();
    assert_eq!(got, b"TUNNEL");
}

#[tokio::test]
async fn a_garbled_or_mismatched_client_hello_fails_only_that_connection() {
    let t = start().await;
    let mut tcp = connect(t.proxy, "www.a.test:443").await;
    tcp.write_all(b"\x16\x03\x01\x00\x05hello, not TLS at all")
        .await
        .unwrap();
    let mut got = Vec::new();
    let _ = tcp.read_to_end(&mut got).await;
    assert!(
        !got.starts_with(b"HTTP/1.1 200"),
        "nothing is served: {got:?}"
    );

    // SNI naming another host than the CONNECT: no certificate, no handshake.
    let tcp = connect(t.proxy, "www.a.test:443").await;
    let r = tls_client(&t.ca, &[b"http/1.1"])
        .connect(ServerName::try_from("www.other.test").unwrap(), tcp)
        .await;
    assert!(r.is_err(), "the handshake must fail");
    // A server name that is not a host name (rustls sends underscores; RFC 1123 has none).
    let tcp = connect(t.proxy, "www.a.test:443").await;
    let r = tls_client(&t.ca, &[b"http/1.1"])
        .connect(ServerName::try_from("www_a.test").unwrap(), tcp)
        .await;
    assert!(r.is_err(), "no certificate for an invalid name");
    assert!(t.edge.seen.lock().unwrap().is_empty());

    // The proxy serves on.
    let tcp = connect(t.proxy, "www.a.test:443").await;
    let mut tls = tls_client(&t.ca, &[b"http/1.1"])
        .connect(ServerName::try_from("www.a.test").unwrap(), tcp)
        .await
        .unwrap();
    assert!(http1_get(&mut tls, "www.a.test", "/")
        .await
        .starts_with("HTTP/1.1 200"));
}

#[tokio::test]
async fn the_ca_page_and_certificate() {
    let t = start().await;
    let mut s = TcpStream::connect(t.proxy).await.unwrap();
    let text = http1_get(&mut s, "x", "/ca.pem").await;
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.ends_with(t.ca.cert_pem()), "{text}");
    let mut s = TcpStream::connect(t.proxy).await.unwrap();
    let text = http1_get(&mut s, "webpep.invalid", "http://webpep.invalid/").await;
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(
        text.contains(&t.ca.fingerprint()),
        "the page shows the fingerprint: {text}"
    );
    assert!(
        t.edge.seen.lock().unwrap().is_empty(),
        "nothing went to the edge"
    );
}

/// A TLS connection to the proxy's HTTPS port, verified against the device's CA under
/// `name` (as a browser given `https://localhost:PORT` or `https://127.0.0.1:PORT` would).
async fn https_proxy(
    t: &Setup,
    name: &str,
    alpn: &[&[u8]],
) -> tokio_rustls::client::TlsStream<TcpStream> {
    let tcp = TcpStream::connect(t.https_proxy).await.unwrap();
    tls_client(&t.ca, alpn)
        .connect(ServerName::try_from(name.to_string()).unwrap(), tcp)
        .await
        .expect("the proxy's certificate is the device CA's, for loopback")
}

async fn h2_body(
    send: &mut hyper::client::conn::http2::SendRequest<Empty<Bytes>>,
    uri: &str,
) -> (StatusCode, Bytes) {
    let req = http::Request::get(uri).body(Empty::<Bytes>::new()).unwrap();
    let resp = send.send_request(req).await.unwrap();
    let status = resp.status();
    (status, resp.into_body().collect().await.unwrap().to_bytes())
}

/// A CONNECT on an HTTP/2 connection to the proxy: the stream, as bytes both ways.
async fn h2_connect(
    send: &mut hyper::client::conn::http2::SendRequest<Empty<Bytes>>,
    authority: &str,
) -> hyper_util::rt::TokioIo<hyper::upgrade::Upgraded> {
    let req = http::Request::connect(authority)
        .body(Empty::<Bytes>::new())
        .unwrap();
    let resp = send.send_request(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK, "CONNECT {authority}");
    hyper_util::rt::TokioIo::new(hyper::upgrade::on(resp).await.unwrap())
}

#[tokio::test]
async fn over_the_https_port_with_http2_a_pages_requests_and_tunnels_share_one_connection() {
    let t = start().await;
    let tls = https_proxy(&t, "localhost", &[b"h2", b"http/1.1"]).await;
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let send = h2_client(tls).await;

    // Three at once on the one connection: a plain request, an intercepted CONNECT with
    // HTTP/1.1 inside, and an excluded host's tunnel.
    let plain = {
        let mut send = send.clone();
        async move { h2_body(&mut send, "http://plain.a.test/page?x=1").await }
    };
    let intercepted = {
        let mut send = send.clone();
        let ca = t.ca.clone();
        async move {
            let io = h2_connect(&mut send, "www.a.test:443").await;
            let mut tls = tls_client(&ca, &[b"http/1.1"])
                .connect(ServerName::try_from("www.a.test").unwrap(), io)
                .await
                .expect("the leaf for www.a.test, inside the HTTP/2 stream");
            http1_get(&mut tls, "www.a.test", "/inside").await
        }
    };
    let tunnelled = {
        let mut send = send.clone();
        async move {
            let mut io = h2_connect(&mut send, "bank.a.test:443").await;
            let mut got = Vec::new();
            io.read_to_end(&mut got).await.unwrap();
            got
        }
    };
    let ((status, body), inside, tunnel) = tokio::join!(plain, intercepted, tunnelled);
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, "GET http://plain.a.test/page?x=1");
    assert!(inside.starts_with("HTTP/1.1 200"), "{inside}");
    assert!(
        inside.ends_with("GET https://www.a.test/inside"),
        "{inside}"
    );
    assert_eq!(tunnel, b"TUNNEL");

    let seen = t.edge.seen.lock().unwrap();
    let plain = seen
        .iter()
        .find(|r| r.target == "http://plain.a.test/page?x=1")
        .expect("the plain request reached the edge");
    assert_eq!(
        plain.headers.get("host").map(|v| v.to_str().unwrap()),
        Some("plain.a.test"),
        ":authority becomes the Host the edge sees"
    );
    assert!(seen.iter().any(|r| r.target == "https://www.a.test/inside"));
    assert_eq!(*t.edge.tunnels.lock().unwrap(), ["bank.a.test:443"]);
    let counters = t.client.counters();
    assert_eq!(
        (counters.connections(), counters.h2_connections()),
        (1, 1),
        "all of it on one HTTP/2 connection"
    );
    assert!(counters.peak_in_flight() >= 1);
}

#[tokio::test]
async fn over_the_https_port_with_http11_the_proxy_is_the_same_proxy() {
    let t = start().await;
    // By address, as `--proxy-server=https://127.0.0.1:PORT` names it.
    let mut tls = https_proxy(&t, "127.0.0.1", &[b"http/1.1"]).await;
    let text = http1_get(&mut tls, "plain.a.test", "http://plain.a.test/one").await;
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.ends_with("GET http://plain.a.test/one"), "{text}");

    let mut tls = https_proxy(&t, "localhost", &[b"http/1.1"]).await;
    tls.write_all(b"CONNECT bank.a.test:443 HTTP/1.1\r\nHost: bank.a.test:443\r\n\r\n")
        .await
        .unwrap();
    let mut got = Vec::new();
    tls.read_to_end(&mut got).await.unwrap();
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.ends_with("\r\n\r\nTUNNEL"), "{text}");
}

#[tokio::test]
async fn the_https_port_refuses_plain_text_and_serves_on() {
    let t = start().await;
    let mut tcp = TcpStream::connect(t.https_proxy).await.unwrap();
    tcp.write_all(b"GET http://plain.a.test/ HTTP/1.1\r\nHost: plain.a.test\r\n\r\n")
        .await
        .unwrap();
    let mut got = Vec::new();
    let _ = tcp.read_to_end(&mut got).await;
    assert!(!got.starts_with(b"HTTP/1.1 200"), "nothing served: {got:?}");
    // The proxy's own pages answer over HTTP/2 too, and nothing has gone to the edge.
    let tls = https_proxy(&t, "localhost", &[b"h2"]).await;
    let mut send = h2_client(tls).await;
    let (status, body) = h2_body(&mut send, "http://webpep.invalid/ca.pem").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, t.ca.cert_pem());
    assert!(t.edge.seen.lock().unwrap().is_empty());
}
