//! The edge verifies `https://` origins: an absolute `https://` request (what a client proxy
//! sends after intercepting a browser's TLS) is fetched over TLS, h2 or HTTP/1.1 as ALPN
//! says, trusting only `[origin] tls-roots`; a certificate that does not verify gives an
//! error page naming the host and the reason, and nothing of the origin; an origin that asks
//! for a client certificate is marked for a tunnel. The origins are real rustls servers on
//! 127.0.0.1 with certificates made here.

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use common::{get_once, start_proxy, step, test_config, Proxy, Resp};
use http_body_util::Full;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use webpep_server::config::TlsRoots;
use webpep_server::{Server, ServerConfig, ServerError};

/// What every origin's body starts with: no error page may carry it.
const SECRET: &str = "ORIGIN-BODY";

/// A test CA: its certificate, key, and its PEM file (for `tls-roots`).
struct Ca {
    cert: rcgen::Certificate,
    key: KeyPair,
    pem: PathBuf,
    _dir: tempfile::TempDir,
}

impl Ca {
    fn new() -> Ca {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name
            .push(DnType::CommonName, "webpep https-origin test CA");
        p.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = p.self_signed(&key).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let pem = dir.path().join("ca.pem");
        std::fs::write(&pem, cert.pem()).unwrap();
        Ca {
            cert,
            key,
            pem,
            _dir: dir,
        }
    }

    /// A leaf for `names` signed by this CA, valid from `from` to `to` (years).
    fn leaf(&self, names: &[&str], years: (i32, i32)) -> Identity {
        let key = KeyPair::generate().unwrap();
        let mut p = leaf_params(names, years);
        p.use_authority_key_identifier_extension = true;
        let cert = p.signed_by(&key, &self.cert, &self.key).unwrap();
        Identity::of(cert.der().clone(), &key)
    }
}

fn leaf_params(names: &[&str], (from, to): (i32, i32)) -> CertificateParams {
    let mut p =
        CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
    p.not_before = rcgen::date_time_ymd(from, 1, 1);
    p.not_after = rcgen::date_time_ymd(to, 1, 1);
    p
}

/// A self-signed leaf for `names`: trusted by nobody.
fn self_signed(names: &[&str]) -> Identity {
    let key = KeyPair::generate().unwrap();
    let cert = leaf_params(names, VALID).self_signed(&key).unwrap();
    Identity::of(cert.der().clone(), &key)
}

/// Years a valid certificate spans.
const VALID: (i32, i32) = (2020, 2090);

/// An origin's certificate and key.
struct Identity {
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
}

impl Identity {
    fn of(cert: CertificateDer<'static>, key: &KeyPair) -> Identity {
        Identity {
            chain: vec![cert],
            key: PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        }
    }
}

/// How an origin's TLS is set up.
struct OriginTls {
    identity: Identity,
    /// What it accepts by ALPN (empty: it ignores ALPN).
    alpn: Vec<&'static [u8]>,
    /// Asks the client for a certificate issued by this CA, required or optional.
    client_auth: Option<(CertificateDer<'static>, bool)>,
}

impl OriginTls {
    fn new(identity: Identity, alpn: &[&'static [u8]]) -> OriginTls {
        OriginTls {
            identity,
            alpn: alpn.to_vec(),
            client_auth: None,
        }
    }
}

/// A TLS origin on 127.0.0.1 answering every request with `ORIGIN-BODY <version> <path>`,
/// over h2 when ALPN chose it, else HTTP/1.1. Returns its port and how many requests it
/// answered.
async fn tls_origin(o: OriginTls) -> (u16, Arc<AtomicUsize>) {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = match o.client_auth {
        None => builder.with_no_client_auth(),
        Some((ca, required)) => {
            let mut roots = rustls::RootCertStore::empty();
            roots.add(ca).unwrap();
            let v = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            );
            let v = if required {
                v
            } else {
                v.allow_unauthenticated()
            };
            builder.with_client_cert_verifier(v.build().unwrap())
        }
    };
    let mut cfg = builder
        .with_single_cert(o.identity.chain, o.identity.key)
        .unwrap();
    cfg.alpn_protocols = o.alpn.iter().map(|p| p.to_vec()).collect();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let answered = Arc::new(AtomicUsize::new(0));
    let count = answered.clone();
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            let (acceptor, count) = (acceptor.clone(), count.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(s).await else {
                    return;
                };
                let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
                let svc = hyper::service::service_fn(move |req: http::Request<_>| {
                    count.fetch_add(1, Ordering::SeqCst);
                    let body = format!("{SECRET} {:?} {}", req.version(), req.uri().path());
                    async move {
                        Ok::<_, Infallible>(
                            http::Response::builder()
                                .header("content-type", "text/plain")
                                .body(Full::new(Bytes::from(body)))
                                .unwrap(),
                        )
                    }
                });
                let io = hyper_util::rt::TokioIo::new(tls);
                if h2 {
                    let _ = hyper::server::conn::http2::Builder::new(
                        hyper_util::rt::TokioExecutor::new(),
                    )
                    .serve_connection(io, svc)
                    .await;
                } else {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, svc)
                        .await;
                }
            });
        }
    });
    (port, answered)
}

/// A proxy trusting only `ca`, with `origin.test` at 127.0.0.1.
async fn proxy_trusting(ca: &Ca) -> Proxy {
    start_proxy(config_trusting(ca)).await
}

fn config_trusting(ca: &Ca) -> ServerConfig {
    let mut cfg = test_config();
    cfg.origin
        .hosts
        .insert("origin.test".into(), "127.0.0.1".parse().unwrap());
    cfg.origin.tls_roots = TlsRoots::Files(vec![ca.pem.clone()]);
    cfg
}

/// `GET https://origin.test:PORT/page` through the proxy's explicit port.
async fn fetch(proxy: SocketAddr, port: u16) -> Resp {
    step(get_once(
        proxy,
        &format!("https://origin.test:{port}/page"),
        "",
    ))
    .await
}

/// An origin showing `identity` to a proxy trusting only `ca`: 502, marked, naming the host
/// and `reason`, and nothing of the origin (no request even reached it).
async fn assert_certificate_refused(ca: &Ca, identity: Identity, reason: &str) {
    let (port, answered) = tls_origin(OriginTls::new(identity, &[b"h2", b"http/1.1"])).await;
    let p = proxy_trusting(ca).await;
    let r = fetch(p.addr, port).await;
    let text = r.text();
    assert_eq!(r.status, 502, "{text}");
    assert_eq!(r.header("webpep-error"), Some("origin-certificate"));
    assert!(text.contains("origin.test"), "names the host: {text}");
    assert!(text.contains(reason), "says why ({reason}): {text}");
    assert!(!text.contains(SECRET), "nothing of the origin: {text}");
    assert_eq!(answered.load(Ordering::SeqCst), 0, "no request reached it");
    assert!(r.header("webpep-passthrough").is_none());
}

#[tokio::test]
async fn a_valid_origin_is_served_over_h2_when_it_offers_only_h2() {
    let ca = Ca::new();
    let (port, answered) =
        tls_origin(OriginTls::new(ca.leaf(&["origin.test"], VALID), &[b"h2"])).await;
    let p = proxy_trusting(&ca).await;
    let r = fetch(p.addr, port).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.text(), format!("{SECRET} HTTP/2.0 /page"));
    assert!(r.header("webpep-error").is_none());
    // The pooled h2 connection serves the next request too.
    let r = fetch(p.addr, port).await;
    assert_eq!(r.text(), format!("{SECRET} HTTP/2.0 /page"));
    assert_eq!(answered.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_valid_origin_is_served_over_http1_when_it_offers_only_http1_or_no_alpn() {
    let ca = Ca::new();
    let p = proxy_trusting(&ca).await;
    for alpn in [&[b"http/1.1" as &[u8]][..], &[]] {
        let (port, _) = tls_origin(OriginTls::new(ca.leaf(&["origin.test"], VALID), alpn)).await;
        let r = fetch(p.addr, port).await;
        assert_eq!(r.status, 200, "ALPN {alpn:?}: {}", r.text());
        assert_eq!(
            r.text(),
            format!("{SECRET} HTTP/1.1 /page"),
            "ALPN {alpn:?}"
        );
    }
}

#[tokio::test]
async fn an_ip_literal_origin_is_verified_by_its_address() {
    let ca = Ca::new();
    let (port, _) = tls_origin(OriginTls::new(ca.leaf(&["127.0.0.1"], VALID), &[b"h2"])).await;
    let p = proxy_trusting(&ca).await;
    let r = step(get_once(
        p.addr,
        &format!("https://127.0.0.1:{port}/ip"),
        "",
    ))
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.text(), format!("{SECRET} HTTP/2.0 /ip"));
}

#[tokio::test]
async fn an_expired_certificate_gives_an_error_page_and_nothing_else() {
    let ca = Ca::new();
    let expired = ca.leaf(&["origin.test"], (2000, 2001));
    assert_certificate_refused(&ca, expired, "the certificate has expired").await;
}

#[tokio::test]
async fn a_self_signed_certificate_gives_an_error_page_and_nothing_else() {
    let ca = Ca::new();
    let reason = "the certificate is not trusted (self-signed or unknown issuer)";
    assert_certificate_refused(&ca, self_signed(&["origin.test"]), reason).await;
}

#[tokio::test]
async fn a_wrong_name_certificate_gives_an_error_page_and_nothing_else() {
    let ca = Ca::new();
    let reason = "the certificate is not valid for origin.test";
    assert_certificate_refused(&ca, ca.leaf(&["other.test"], VALID), reason).await;
}

#[tokio::test]
async fn an_origin_asking_for_a_client_certificate_is_marked_for_a_tunnel() {
    let ca = Ca::new();
    let p = proxy_trusting(&ca).await;
    // Required (the handshake would fail) and optional (it would go on without one): either
    // way the browser may have a certificate to give, which only a tunnel lets it.
    for required in [true, false] {
        let mut tls = OriginTls::new(ca.leaf(&["origin.test"], VALID), &[b"h2", b"http/1.1"]);
        tls.client_auth = Some((ca.cert.der().clone(), required));
        let (port, answered) = tls_origin(tls).await;
        let r = fetch(p.addr, port).await;
        let text = r.text();
        assert_eq!(r.status, 502, "required {required}: {text}");
        assert_eq!(r.header("webpep-passthrough"), Some("client-certificate"));
        assert!(r.header("webpep-error").is_none());
        assert!(
            text.contains("origin.test")
                && text.contains("the origin asks for a client certificate"),
            "{text}"
        );
        assert!(!text.contains(SECRET), "{text}");
        assert_eq!(answered.load(Ordering::SeqCst), 0);
    }
}

#[tokio::test]
async fn an_origin_with_no_common_alpn_fails_cleanly_and_the_proxy_goes_on() {
    let ca = Ca::new();
    let (bad, answered) = tls_origin(OriginTls::new(
        ca.leaf(&["origin.test"], VALID),
        &[b"spdy/3.1"],
    ))
    .await;
    let (good, _) = tls_origin(OriginTls::new(
        ca.leaf(&["origin.test"], VALID),
        &[b"h2", b"http/1.1"],
    ))
    .await;
    let p = proxy_trusting(&ca).await;
    let r = fetch(p.addr, bad).await;
    let text = r.text();
    assert_eq!(r.status, 502, "{text}");
    assert!(
        text.contains("origin.test") && text.contains("ALPN"),
        "{text}"
    );
    assert!(r.header("webpep-error").is_none() && r.header("webpep-passthrough").is_none());
    assert_eq!(answered.load(Ordering::SeqCst), 0);
    let r = fetch(p.addr, good).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.text(), format!("{SECRET} HTTP/2.0 /page"));
}

#[tokio::test]
async fn a_roots_file_without_a_certificate_stops_the_start_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, "not a certificate\n").unwrap();
    let mut cfg = test_config();
    cfg.origin.tls_roots = TlsRoots::Files(vec![empty.clone()]);
    let e = refused(cfg);
    assert!(matches!(e, ServerError::TlsRoots(_)), "{e}");
    let m = e.to_string();
    assert!(
        m.contains("tls-roots") && m.contains(&empty.display().to_string()),
        "{m}"
    );
    let mut cfg = test_config();
    let missing = dir.path().join("missing.pem");
    cfg.origin.tls_roots = TlsRoots::Files(vec![missing.clone()]);
    let m = refused(cfg).to_string();
    assert!(m.contains(&missing.display().to_string()), "{m}");
}

fn refused(cfg: ServerConfig) -> ServerError {
    match Server::new(cfg) {
        Err(e) => e,
        Ok(_) => panic!("the server started"),
    }
}
