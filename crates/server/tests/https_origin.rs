//! The edge verifies `https://` origins: an absolute `https://` request (what a client proxy
//! sends after intercepting a browser's TLS) is fetched over TLS, h2 or HTTP/1.1 as ALPN
//! says, trusting only `[origin] tls-roots`; a certificate that does not verify gives an
//! error page naming the host and the reason, and nothing of the origin; an origin that asks
//! for a client certificate is marked for a tunnel. The origins are real rustls servers on
//! 127.0.0.1 with certificates made here.

mod common;
#[path = "common/tls_origin.rs"]
mod tls_origin;

use std::net::SocketAddr;
use std::sync::atomic::Ordering;

use common::{get_once, start_proxy, step, test_config, Proxy, Resp};
use tls_origin::{self_signed, tls_origin, Ca, Identity, OriginTls, SECRET, VALID};
use webpep_server::config::TlsRoots;
use webpep_server::{Server, ServerConfig, ServerError};

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
