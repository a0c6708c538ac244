//! TLS origins for the tests: a test CA and its leaves (rcgen), and a rustls origin on
//! 127.0.0.1 answering over h2 or HTTP/1.1 as ALPN says.
#![allow(dead_code)]

use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;

/// What every origin's body starts with: no error page may carry it.
pub const SECRET: &str = "ORIGIN-BODY";

/// A test CA: its certificate, key, and its PEM file (for `tls-roots`).
pub struct Ca {
    pub cert: rcgen::Certificate,
    pub key: KeyPair,
    pub pem: PathBuf,
    _dir: tempfile::TempDir,
}

impl Ca {
    pub fn new() -> Ca {
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
    pub fn leaf(&self, names: &[&str], years: (i32, i32)) -> Identity {
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
pub fn self_signed(names: &[&str]) -> Identity {
    let key = KeyPair::generate().unwrap();
    let cert = leaf_params(names, VALID).self_signed(&key).unwrap();
    Identity::of(cert.der().clone(), &key)
}

/// Years a valid certificate spans.
pub const VALID: (i32, i32) = (2020, 2090);

/// An origin's certificate and key.
pub struct Identity {
    pub chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
}

impl Identity {
    pub fn of(cert: CertificateDer<'static>, key: &KeyPair) -> Identity {
        Identity {
            chain: vec![cert],
            key: PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        }
    }
}

/// How an origin's TLS is set up.
pub struct OriginTls {
    pub identity: Identity,
    /// What it accepts by ALPN (empty: it ignores ALPN).
    pub alpn: Vec<&'static [u8]>,
    /// Asks the client for a certificate issued by this CA, required or optional.
    pub client_auth: Option<(CertificateDer<'static>, bool)>,
}

impl OriginTls {
    pub fn new(identity: Identity, alpn: &[&'static [u8]]) -> OriginTls {
        OriginTls {
            identity,
            alpn: alpn.to_vec(),
            client_auth: None,
        }
    }
}

/// A TLS origin on 127.0.0.1 answering every request with `ORIGIN-BODY <version> <path>`
/// (`/big…` paths with 4 KB more; `/cached…` paths fresh for a century),
/// over h2 when ALPN chose it, else HTTP/1.1. Returns its port and how many requests it
/// answered.
pub async fn tls_origin(o: OriginTls) -> (u16, Arc<AtomicUsize>) {
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
                    let mut body = format!("{SECRET} {:?} {}", req.version(), req.uri().path());
                    if req.uri().path().starts_with("/big") {
                        // Room for compression to save.
                        body.push_str(&" and so on".repeat(400));
                    }
                    let mut resp = http::Response::builder().header("content-type", "text/plain");
                    if req.uri().path().starts_with("/cached") {
                        // May be reused for a century.
                        resp = resp.header("cache-control", "max-age=3153600000");
                    }
                    async move { Ok::<_, Infallible>(resp.body(Full::new(Bytes::from(body))).unwrap()) }
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
