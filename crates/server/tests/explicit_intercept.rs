//! HTTPS interception on the explicit port (`[intercept]`): a browser that trusts the edge's
//! CA CONNECTs through the edge to a TLS origin; the edge answers 200 itself, ends the
//! browser's TLS with a leaf its CA minted, and serves the requests inside (HTTP/2 and
//! HTTP/1.1) through the pipeline, fetching the origin over its own verified TLS. Excluded
//! hosts, and every host with interception off, are tunnelled untouched: the browser sees
//! the origin's own certificate. The same origins through the dual proxy intercepting on the
//! device (`webpep client` over QUIC to the edge): an origin with a bad certificate gives the
//! browser the edge's error page and nothing else.

mod common;
#[path = "common/tls_origin.rs"]
mod tls_origin;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use base64::Engine as _;
use bytes::Bytes;
use common::{metric, start_proxy, step, test_config, Proxy};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::{CertificateDer, ServerName};
use tls_origin::{tls_origin, Ca, Identity, OriginTls, SECRET, VALID};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use webpep_server::config::TlsRoots;
use webpep_server::ServerConfig;

/// The edge's interception CA, in a directory of its own.
struct EdgeCa {
    dir: PathBuf,
    cert: CertificateDer<'static>,
    _tmp: tempfile::TempDir,
}

impl EdgeCa {
    fn new() -> EdgeCa {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("ca");
        let store = webpep_intercept::CaStore::init(&dir, false).unwrap();
        EdgeCa {
            dir,
            cert: store.cert_der(),
            _tmp: tmp,
        }
    }
}

/// A TLS origin at `origin.test` showing `identity`, offering h2 and HTTP/1.1.
async fn origin(identity: Identity) -> u16 {
    tls_origin(OriginTls::new(identity, &[b"h2", b"http/1.1"]))
        .await
        .0
}

/// An edge trusting `origin_ca` for origins, with CONNECT allowed to `port`, and (when
/// `edge` is given) intercepting CONNECTs to that port with its CA.
fn config(origin_ca: &Ca, port: u16, edge: Option<&EdgeCa>) -> ServerConfig {
    let mut cfg = test_config();
    cfg.origin
        .hosts
        .insert("origin.test".into(), "127.0.0.1".parse().unwrap());
    cfg.origin.tls_roots = TlsRoots::Files(vec![origin_ca.pem.clone()]);
    cfg.acl.connect_ports = vec![port];
    if let Some(edge) = edge {
        cfg.intercept.enabled = true;
        cfg.intercept.ca_dir = Some(edge.dir.clone());
        cfg.intercept.ports = vec![port];
    }
    cfg
}

/// `CONNECT origin.test:PORT` with `extra` header lines: the status and the connection, read
/// up to the end of the answer's head and no further.
async fn connect(proxy: SocketAddr, port: u16, extra: &str) -> (u16, TcpStream) {
    let mut s = TcpStream::connect(proxy).await.unwrap();
    let head =
        format!("CONNECT origin.test:{port} HTTP/1.1\r\nHost: origin.test:{port}\r\n{extra}\r\n");
    s.write_all(head.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let mut byte = [0u8; 1];
    while !got.ends_with(b"\r\n\r\n") {
        if s.read(&mut byte).await.unwrap() == 0 {
            break;
        }
        got.push(byte[0]);
    }
    let text = String::from_utf8_lossy(&got);
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an answer: {text:?}"));
    (status, s)
}

/// The browser's TLS inside the CONNECT, trusting only `root`, offering `alpn`.
async fn browser_tls(
    s: TcpStream,
    root: &CertificateDer<'static>,
    alpn: &[&[u8]],
) -> std::io::Result<TlsStream<TcpStream>> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(root.clone()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let name = ServerName::try_from("origin.test").unwrap();
    tokio_rustls::TlsConnector::from(Arc::new(cfg))
        .connect(name, s)
        .await
}

/// An answer as the browser got it.
struct Got {
    status: u16,
    headers: http::HeaderMap,
    body: Bytes,
}

impl Got {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// GETs each of `paths` in turn on `tls` (by HTTP/2 when ALPN chose it, else HTTP/1.1),
/// with `extra` header fields, and no proxy credentials.
async fn get(
    tls: TlsStream<TcpStream>,
    port: u16,
    paths: &[&str],
    extra: &[(&str, &str)],
) -> Vec<Got> {
    let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
    let io = TokioIo::new(tls);
    let request = |path: &str| {
        let uri = if h2 {
            format!("https://origin.test:{port}{path}")
        } else {
            path.to_string()
        };
        let mut b = http::Request::get(uri);
        if !h2 {
            b = b.header("host", format!("origin.test:{port}"));
        }
        for (k, v) in extra {
            b = b.header(*k, *v);
        }
        b.body(Empty::<Bytes>::new()).unwrap()
    };
    let mut out = Vec::new();
    if h2 {
        let (mut send, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
            .await
            .unwrap();
        tokio::spawn(conn);
        for p in paths {
            let r = send.send_request(request(p)).await.unwrap();
            out.push(collect(r).await);
        }
    } else {
        let (mut send, conn) = hyper::client::conn::http1::handshake(io).await.unwrap();
        tokio::spawn(conn);
        for p in paths {
            let r = send.send_request(request(p)).await.unwrap();
            out.push(collect(r).await);
        }
    }
    out
}

async fn collect(r: http::Response<hyper::body::Incoming>) -> Got {
    let (parts, body) = r.into_parts();
    Got {
        status: parts.status.as_u16(),
        headers: parts.headers,
        body: body.collect().await.unwrap().to_bytes(),
    }
}

/// Through an intercepting edge with compression on, over `alpn`: the page as the origin
/// sent it, and compressed when the browser accepts it (the pipeline applied inside).
async fn intercepted_page_over(alpn: &[u8], version: &str) {
    let (ca, edge) = (Ca::new(), EdgeCa::new());
    let port = origin(ca.leaf(&["origin.test"], VALID)).await;
    let mut cfg = config(&ca, port, Some(&edge));
    cfg.compress.enabled = true;
    let p = start_proxy(cfg).await;
    let (status, s) = step(connect(p.addr, port, "")).await;
    assert_eq!(status, 200);
    // The browser trusts only the edge's CA: the handshake proves the edge ended it.
    let tls = step(browser_tls(s, &edge.cert, &[alpn])).await.unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(alpn));
    let plain = step(get(tls, port, &["/page", "/big"], &[])).await;
    assert_eq!(plain[0].status, 200, "{}", plain[0].text());
    // The edge fetched the origin over its own TLS, by h2 (the origin offers it).
    assert_eq!(plain[0].text(), format!("{SECRET} HTTP/2.0 /page"));
    assert!(plain[1].header("content-encoding").is_none());
    let big = plain[1].body.len();
    assert!(big > 4000, "{big}");

    let (_, s) = step(connect(p.addr, port, "")).await;
    let tls = step(browser_tls(s, &edge.cert, &[alpn])).await.unwrap();
    let accept = [("accept-encoding", "gzip")];
    let zipped = step(get(tls, port, &["/big"], &accept)).await;
    assert_eq!(zipped[0].status, 200);
    assert_eq!(
        zipped[0].header("content-encoding"),
        Some("gzip"),
        "{version}"
    );
    assert!(
        zipped[0].body.len() < big / 4,
        "{} of {big}",
        zipped[0].body.len()
    );

    assert_eq!(metric(&p, "webpep_intercepted_connections_total"), 2);
    let counted = r#"webpep_requests_total{mode="intercept-tls",class="2xx"}"#;
    assert_eq!(metric(&p, counted), 3);
}

#[tokio::test]
async fn an_intercepted_connect_serves_http2_through_the_pipeline() {
    intercepted_page_over(b"h2", "h2").await;
}

#[tokio::test]
async fn an_intercepted_connect_serves_http11_through_the_pipeline() {
    intercepted_page_over(b"http/1.1", "http/1.1").await;
}

/// A CONNECT through `p` reaches the origin untouched: the browser, trusting only the
/// origin's CA, sees the origin's own certificate and gets its page.
async fn assert_tunnelled(p: &Proxy, ca: &Ca, leaf: &CertificateDer<'static>, port: u16) {
    let (status, s) = step(connect(p.addr, port, "")).await;
    assert_eq!(status, 200);
    let tls = step(browser_tls(s, ca.cert.der(), &[b"h2"])).await.unwrap();
    let seen = tls.get_ref().1.peer_certificates().unwrap()[0].clone();
    assert_eq!(&seen, leaf, "the origin's own certificate");
    let got = step(get(tls, port, &["/page"], &[])).await;
    assert_eq!(got[0].text(), format!("{SECRET} HTTP/2.0 /page"));
    assert_eq!(metric(p, "webpep_intercepted_connections_total"), 0);
}

#[tokio::test]
async fn an_excluded_host_is_tunnelled_untouched() {
    let (ca, edge) = (Ca::new(), EdgeCa::new());
    let identity = ca.leaf(&["origin.test"], VALID);
    let leaf = identity.chain[0].clone();
    let port = origin(identity).await;
    let mut cfg = config(&ca, port, Some(&edge));
    cfg.intercept.exclude = vec!["=origin.test".into()];
    let p = start_proxy(cfg).await;
    assert_tunnelled(&p, &ca, &leaf, port).await;
}

#[tokio::test]
async fn with_interception_off_a_connect_is_a_tunnel() {
    let ca = Ca::new();
    let identity = ca.leaf(&["origin.test"], VALID);
    let leaf = identity.chain[0].clone();
    let port = origin(identity).await;
    let cfg = config(&ca, port, None);
    assert!(!cfg.intercept.enabled, "off by default");
    let p = start_proxy(cfg).await;
    assert_tunnelled(&p, &ca, &leaf, port).await;
}

#[tokio::test]
async fn a_garbled_client_hello_fails_only_that_connection() {
    let (ca, edge) = (Ca::new(), EdgeCa::new());
    let port = origin(ca.leaf(&["origin.test"], VALID)).await;
    let p = start_proxy(config(&ca, port, Some(&edge))).await;
    let (status, mut s) = step(connect(p.addr, port, "")).await;
    assert_eq!(status, 200);
    s.write_all(b"\x16\x03\x01\x00\x08garbage!GET / HTTP/1.1\r\n\r\n")
        .await
        .unwrap();
    let mut rest = Vec::new();
    // Closed without an answer (an alert at most, never HTTP).
    let _ = step(s.read_to_end(&mut rest)).await;
    assert!(!rest.windows(4).any(|w| w == b"HTTP"), "{rest:?}");
    // The proxy goes on.
    let (_, s) = step(connect(p.addr, port, "")).await;
    let tls = step(browser_tls(s, &edge.cert, &[b"h2"])).await.unwrap();
    let got = step(get(tls, port, &["/page"], &[])).await;
    assert_eq!(got[0].status, 200);
    assert_eq!(metric(&p, "webpep_intercepted_connections_total"), 1);
}

#[tokio::test]
async fn an_expired_origin_certificate_gives_the_browser_a_502_naming_the_host() {
    let (ca, edge) = (Ca::new(), EdgeCa::new());
    let port = origin(ca.leaf(&["origin.test"], (2000, 2001))).await;
    let p = start_proxy(config(&ca, port, Some(&edge))).await;
    for alpn in [b"h2" as &[u8], b"http/1.1"] {
        let (_, s) = step(connect(p.addr, port, "")).await;
        let tls = step(browser_tls(s, &edge.cert, &[alpn])).await.unwrap();
        let got = step(get(tls, port, &["/page"], &[])).await;
        let text = got[0].text();
        assert_eq!(got[0].status, 502, "{text}");
        assert_eq!(got[0].header("webpep-error"), Some("origin-certificate"));
        assert!(text.contains("origin.test"), "names the host: {text}");
        assert!(text.contains("expired"), "says why: {text}");
        assert!(!text.contains(SECRET), "nothing of the origin: {text}");
    }
}

#[tokio::test]
async fn an_origin_asking_for_a_client_certificate_is_tunnelled_from_then_on() {
    let (ca, edge) = (Ca::new(), EdgeCa::new());
    let identity = ca.leaf(&["origin.test"], VALID);
    let leaf = identity.chain[0].clone();
    let mut tls = OriginTls::new(identity, &[b"h2", b"http/1.1"]);
    // Optional: the browser, without one, still gets through its own handshake.
    tls.client_auth = Some((ca.cert.der().clone(), false));
    let (port, _) = tls_origin(tls).await;
    let p = start_proxy(config(&ca, port, Some(&edge))).await;
    let (_, s) = step(connect(p.addr, port, "")).await;
    let tls = step(browser_tls(s, &edge.cert, &[b"h2"])).await.unwrap();
    let got = step(get(tls, port, &["/page"], &[])).await;
    assert_eq!(got[0].status, 502);
    assert_eq!(
        got[0].header("webpep-passthrough"),
        Some("client-certificate")
    );
    // The reload: a tunnel, the origin's own certificate.
    let (status, s) = step(connect(p.addr, port, "")).await;
    assert_eq!(status, 200);
    let tls = step(browser_tls(s, ca.cert.der(), &[b"h2"])).await.unwrap();
    assert_eq!(tls.get_ref().1.peer_certificates().unwrap()[0], leaf);
    let got = step(get(tls, port, &["/page"], &[])).await;
    assert_eq!(got[0].text(), format!("{SECRET} HTTP/2.0 /page"));
}

#[tokio::test]
async fn with_auth_the_requests_inside_ride_the_authenticated_connect() {
    let (ca, edge) = (Ca::new(), EdgeCa::new());
    let port = origin(ca.leaf(&["origin.test"], VALID)).await;
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users");
    let hash = webpep_server::auth::hash_password_with("pw", b"alice-salt-16byt", 1000);
    std::fs::write(&users, format!("alice:{hash}\n")).unwrap();
    let mut cfg = config(&ca, port, Some(&edge));
    cfg.auth.users_file = Some(users);
    let p = start_proxy(cfg).await;
    let (status, _) = step(connect(p.addr, port, "")).await;
    assert_eq!(status, 407, "a CONNECT without credentials");
    let creds = format!(
        "Proxy-Authorization: Basic {}\r\n",
        base64::engine::general_purpose::STANDARD.encode("alice:pw")
    );
    for alpn in [b"h2" as &[u8], b"http/1.1"] {
        let (status, s) = step(connect(p.addr, port, &creds)).await;
        assert_eq!(status, 200);
        let tls = step(browser_tls(s, &edge.cert, &[alpn])).await.unwrap();
        // No Proxy-Authorization inside: the browser sends none to the origin it thinks it
        // reaches.
        let got = step(get(tls, port, &["/a", "/b"], &[])).await;
        for g in got {
            assert_eq!(g.status, 200, "{}", g.text());
            assert!(g.text().starts_with(SECRET));
        }
    }
}

/// A request body that sends its first part and then never ends.
struct Stalled(Option<Bytes>);

impl hyper::body::Body for Stalled {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        match self.get_mut().0.take() {
            Some(b) => std::task::Poll::Ready(Some(Ok(hyper::body::Frame::data(b)))),
            None => std::task::Poll::Pending,
        }
    }
}

#[tokio::test]
async fn http2_request_bodies_inside_are_held_in_the_buffered_body_budget() {
    let (ca, edge) = (Ca::new(), EdgeCa::new());
    let port = origin(ca.leaf(&["origin.test"], VALID)).await;
    let mut cfg = config(&ca, port, Some(&edge));
    cfg.limits.max_request_body = 10_000;
    cfg.limits.max_client_buffered_bytes = 10_000;
    let p = start_proxy(cfg).await;
    let (_, s) = step(connect(p.addr, port, "")).await;
    let tls = step(browser_tls(s, &edge.cert, &[b"h2"])).await.unwrap();
    let (send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
            .await
            .unwrap();
    tokio::spawn(conn);
    let post = |len: usize| {
        http::Request::post(format!("https://origin.test:{port}/form"))
            .header("content-length", len.to_string())
    };
    // One stream declares 8,000 bytes and sends a part: the budget holds them for it.
    let stalled = post(8000)
        .body(http_body_util::Either::Left(Stalled(Some(Bytes::from(
            vec![b'a'; 1000],
        )))))
        .unwrap();
    let mut first = send.clone();
    tokio::spawn(async move { first.send_request(stalled).await });
    step(async {
        while metric(&p, "webpep_buffered_bytes") < 8000 {
            tokio::task::yield_now().await;
        }
    })
    .await;
    // A second stream's 8,000 bytes would pass the client's 10,000: refused, not read.
    let full = post(8000)
        .body(http_body_util::Either::Right(http_body_util::Full::new(
            Bytes::from(vec![b'b'; 8000]),
        )))
        .unwrap();
    let r = step(send.clone().send_request(full)).await.unwrap();
    let got = collect(r).await;
    assert_eq!(got.status, 503, "{}", got.text());
    assert!(
        got.text().contains("max-client-buffered-bytes"),
        "{}",
        got.text()
    );
    // A body over max-request-body is refused as such.
    let big = post(20_000)
        .body(http_body_util::Either::Right(http_body_util::Full::new(
            Bytes::from(vec![b'c'; 20_000]),
        )))
        .unwrap();
    let r = step(send.clone().send_request(big)).await.unwrap();
    assert_eq!(collect(r).await.status, 413);
}

/// The dual proxy intercepting on the device: `webpep client` (its own CA) in front of an
/// edge over QUIC, the edge trusting `origin_ca` for origins. The client proxy's address and
/// the certificate browsers trust for it.
async fn dual_proxy(
    origin_ca: &Ca,
    port: u16,
) -> (SocketAddr, CertificateDer<'static>, tempfile::TempDir) {
    let mut cfg = config(origin_ca, port, None);
    cfg.compress.enabled = true;
    let server = webpep_server::Server::new(cfg).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let identity =
        Arc::new(webpep_transport::EdgeIdentity::load_or_create(&dir.path().join("edge")).unwrap());
    let settings = webpep_transport::TransportSettings::default();
    let edge = Arc::new(webpep_transport::EdgeTransport::new(identity.clone(), &settings).unwrap());
    let endpoint =
        quinn::Endpoint::server(edge.server_config(), "127.0.0.1:0".parse().unwrap()).unwrap();
    let edge_addr = endpoint.local_addr().unwrap();
    let cancel = webpep_server::CancellationToken::new();
    tokio::spawn(webpep_server::quic::serve_quic(
        server,
        endpoint,
        edge,
        cancel.clone(),
    ));
    let cred = identity.enroll("phone").unwrap();
    let upstream = Arc::new(webpep_client::QuicUpstream::new(edge_addr, &cred, &settings).unwrap());
    let ca_dir = dir.path().join("ca");
    let ca = Arc::new(webpep_intercept::CaStore::init(&ca_dir, false).unwrap());
    let icfg = webpep_intercept::InterceptConfig {
        enabled: true,
        ports: vec![port],
        ..Default::default()
    };
    let intercept = Arc::new(webpep_client::Interception::new(ca.clone(), &icfg, ca_dir).unwrap());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy = listener.local_addr().unwrap();
    let client_cfg = webpep_client::ClientConfig {
        intercept: icfg,
        ..Default::default()
    };
    tokio::spawn(
        webpep_client::ClientProxy::new(Arc::new(client_cfg), upstream, Some(intercept))
            .serve(listener, cancel),
    );
    (proxy, ca.cert_der(), dir)
}

/// Through the dual proxy, intercepted on the device: an origin showing `identity` gives the
/// browser the edge's error page (502, marked, naming the host and `reason`) and nothing of
/// the origin; a valid origin is served.
async fn dual_refuses(identity: Identity, origin_ca: &Ca, reason: &str) {
    let (port, answered) = tls_origin(OriginTls::new(identity, &[b"h2", b"http/1.1"])).await;
    let (proxy, root, _dir) = dual_proxy(origin_ca, port).await;
    let (status, s) = step(connect(proxy, port, "")).await;
    assert_eq!(
        status, 200,
        "the client answers an intercepted CONNECT itself"
    );
    let tls = step(browser_tls(s, &root, &[b"http/1.1"])).await.unwrap();
    let got = step(get(tls, port, &["/page"], &[])).await;
    let text = got[0].text();
    assert_eq!(got[0].status, 502, "{text}");
    assert_eq!(got[0].header("webpep-error"), Some("origin-certificate"));
    assert!(text.contains("origin.test"), "names the host: {text}");
    assert!(text.contains(reason), "says why ({reason}): {text}");
    assert!(!text.contains(SECRET), "nothing of the origin: {text}");
    assert_eq!(answered.load(std::sync::atomic::Ordering::SeqCst), 0);
}

#[tokio::test]
async fn through_the_dual_proxy_a_bad_origin_certificate_gives_an_error_page_and_nothing_else() {
    let ca = Ca::new();
    let expired = ca.leaf(&["origin.test"], (2000, 2001));
    dual_refuses(expired, &ca, "the certificate has expired").await;
    let untrusted = "the certificate is not trusted (self-signed or unknown issuer)";
    dual_refuses(tls_origin::self_signed(&["origin.test"]), &ca, untrusted).await;
    let wrong = "the certificate is not valid for origin.test";
    dual_refuses(ca.leaf(&["other.test"], VALID), &ca, wrong).await;
    // And the same path serves a valid origin.
    let port = origin(ca.leaf(&["origin.test"], VALID)).await;
    let (proxy, root, _dir) = dual_proxy(&ca, port).await;
    let (_, s) = step(connect(proxy, port, "")).await;
    let tls = step(browser_tls(s, &root, &[b"h2"])).await.unwrap();
    let got = step(get(tls, port, &["/page"], &[])).await;
    assert_eq!(got[0].status, 200, "{}", got[0].text());
    assert!(got[0].text().starts_with(SECRET), "{}", got[0].text());
}
