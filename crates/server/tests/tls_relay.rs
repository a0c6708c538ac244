//! The TLS relay end to end: a real TLS client (rustls) sends its ClientHello to the proxy's
//! address, as a browser does under DNS rewriting, and talks to the origin its server name
//! names, through the proxy, without the proxy decrypting anything. The same rules as for
//! CONNECT keep it from being an open door.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use common::test_config;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use webpep_server::{CancellationToken, Server, ServerConfig};

/// A TLS origin for `origin.test` on 127.0.0.1 that answers each connection's first
/// message `m` with `pong:m`. Returns its port, its certificate and a count of handshakes.
async fn tls_origin() -> (
    u16,
    rustls::pki_types::CertificateDer<'static>,
    Arc<std::sync::atomic::AtomicUsize>,
) {
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["origin.test".to_string()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let der = cert.der().clone();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![der.clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let handshakes = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = handshakes.clone();
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            let (acceptor, count) = (acceptor.clone(), count.clone());
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(s).await else {
                    return;
                };
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let mut buf = [0u8; 64];
                if let Ok(n) = tls.read(&mut buf).await {
                    let mut reply = b"pong:".to_vec();
                    reply.extend_from_slice(&buf[..n]);
                    let _ = tls.write_all(&reply).await;
                    let _ = tls.shutdown().await;
                }
            });
        }
    });
    (port, der, handshakes)
}

/// A proxy on `ip` (another loopback address) at `port`, the port the origin listens on at
/// 127.0.0.1: like a proxy on port 443 relaying to origins on port 443.
async fn proxy_on(ip: &str, port: u16, cfg: ServerConfig) -> (SocketAddr, CancellationToken) {
    let l = std::net::TcpListener::bind((ip, port)).unwrap();
    let addr = l.local_addr().unwrap();
    let server = Server::new(cfg).unwrap();
    let cancel = CancellationToken::new();
    tokio::spawn(server.serve(vec![l], None, cancel.clone()));
    (addr, cancel)
}

/// Connects to `addr` with TLS for `origin.test`, trusting `cert`; sends `ping` and returns
/// what came back, or the handshake's error.
async fn talk(
    addr: SocketAddr,
    cert: &rustls::pki_types::CertificateDer<'static>,
) -> Result<String, String> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert.clone()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(cfg));
    let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let name = rustls::pki_types::ServerName::try_from("origin.test").unwrap();
    let work = async {
        let mut tls = connector
            .connect(name, tcp)
            .await
            .map_err(|e| e.to_string())?;
        tls.write_all(b"ping").await.map_err(|e| e.to_string())?;
        let mut out = String::new();
        let _ = tls.read_to_string(&mut out).await;
        Ok(out)
    };
    tokio::time::timeout(Duration::from_secs(10), work)
        .await
        .map_err(|_| "timed out".to_string())?
}

fn relay_config(origin_port: u16) -> ServerConfig {
    let mut cfg = test_config();
    cfg.origin
        .hosts
        .insert("origin.test".into(), "127.0.0.1".parse().unwrap());
    cfg.acl.connect_ports = vec![origin_port];
    cfg
}

#[tokio::test]
async fn tls_is_relayed_by_its_server_name_without_being_decrypted() {
    let (port, cert, handshakes) = tls_origin().await;
    let (addr, cancel) = proxy_on("127.0.0.2", port, relay_config(port)).await;
    // The certificate is the origin's own, checked by the client: nothing in between.
    assert_eq!(talk(addr, &cert).await, Ok("pong:ping".to_string()));
    assert_eq!(talk(addr, &cert).await, Ok("pong:ping".to_string()));
    assert_eq!(handshakes.load(std::sync::atomic::Ordering::SeqCst), 2);
    cancel.cancel();
}

#[tokio::test]
async fn the_relay_is_no_open_door() {
    let (port, cert, handshakes) = tls_origin().await;
    // Private destinations are refused by default, also when a name resolves to one.
    let mut cfg = relay_config(port);
    cfg.acl.allow_destinations.clear();
    let (addr, cancel) = proxy_on("127.0.0.3", port, cfg).await;
    let err = talk(addr, &cert).await.unwrap_err();
    assert!(err.contains("AccessDenied"), "{err}");
    cancel.cancel();
    // Only the CONNECT ports are relayed.
    let mut cfg = relay_config(port);
    cfg.acl.connect_ports = vec![443];
    let (addr, cancel) = proxy_on("127.0.0.4", port, cfg).await;
    let err = talk(addr, &cert).await.unwrap_err();
    assert!(err.contains("AccessDenied"), "{err}");
    cancel.cancel();
    // Clients outside the allowed networks get nothing at all.
    let mut cfg = relay_config(port);
    cfg.acl.allow_clients = vec!["192.0.2.0/24".parse().unwrap()];
    let (addr, cancel) = proxy_on("127.0.0.5", port, cfg).await;
    assert!(talk(addr, &cert).await.is_err());
    cancel.cancel();
    // With authentication on and `transparent = "refuse"` (the default), relayed TLS (which
    // cannot carry credentials) is refused; with "network" it is admitted on the client
    // networks.
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users");
    let hash = webpep_server::auth::hash_password_with("pw", b"a-salt-of-16byte", 1000);
    std::fs::write(&users, format!("alice:{hash}\n")).unwrap();
    let mut cfg = relay_config(port);
    cfg.auth.users_file = Some(users.clone());
    cfg.auth.transparent = webpep_server::config::TransparentAuth::Refuse;
    let (addr, cancel) = proxy_on("127.0.0.7", port, cfg).await;
    let err = talk(addr, &cert).await.unwrap_err();
    assert!(err.contains("AccessDenied"), "{err}");
    cancel.cancel();
    assert_eq!(handshakes.load(std::sync::atomic::Ordering::SeqCst), 0);
    let mut cfg = relay_config(port);
    cfg.auth.users_file = Some(users);
    cfg.auth.transparent = webpep_server::config::TransparentAuth::Network;
    let (addr, cancel) = proxy_on("127.0.0.8", port, cfg).await;
    assert_eq!(talk(addr, &cert).await, Ok("pong:ping".to_string()));
    cancel.cancel();
}

#[tokio::test]
async fn the_relay_can_be_switched_off_and_http_still_served() {
    let (port, cert, handshakes) = tls_origin().await;
    let mut cfg = relay_config(port);
    cfg.acl.tls_relay = false;
    let (addr, cancel) = proxy_on("127.0.0.10", port, cfg).await;
    let err = talk(addr, &cert).await.unwrap_err();
    assert!(err.contains("AccessDenied"), "{err}");
    assert_eq!(handshakes.load(std::sync::atomic::Ordering::SeqCst), 0);
    // The listener still answers plain HTTP (here: a request for the proxy itself).
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    tcp.write_all(b"GET /nowhere HTTP/1.1\r\nHost: 127.0.0.10\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut got = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), tcp.read_to_end(&mut got))
        .await
        .unwrap()
        .unwrap();
    assert!(
        got.starts_with(b"HTTP/1.1 "),
        "{}",
        String::from_utf8_lossy(&got)
    );
    cancel.cancel();
}

#[tokio::test]
async fn a_broken_hello_gets_an_alert_and_the_proxy_goes_on() {
    let (port, cert, _) = tls_origin().await;
    let (addr, cancel) = proxy_on("127.0.0.6", port, relay_config(port)).await;
    // A handshake record that is not a ClientHello, then one without any server name.
    let no_name = {
        let mut body = vec![3, 3];
        body.extend_from_slice(&[7; 32]);
        body.extend_from_slice(&[0, 0, 2, 0x13, 0x01, 1, 0]);
        let mut rec = vec![
            22,
            3,
            1,
            0,
            (body.len() + 4) as u8,
            1,
            0,
            0,
            body.len() as u8,
        ];
        rec.extend_from_slice(&body);
        rec
    };
    for bytes in [vec![22, 3, 3, 0, 4, 2, 0, 0, 0], no_name] {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(&bytes).await.unwrap();
        let mut got = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut got))
            .await
            .expect("closed promptly")
            .unwrap();
        assert_eq!(&got[..5], &[21, 3, 3, 0, 2], "a TLS alert: {got:?}");
        assert_eq!(got[5], 2, "fatal");
    }
    // HTTP on the same listener is still served, and TLS still relayed.
    let r = common::get_once(addr, "http://127.0.0.1:9/", "").await;
    assert_eq!(r.status, 502);
    assert_eq!(talk(addr, &cert).await, Ok("pong:ping".to_string()));
    cancel.cancel();
}

#[tokio::test]
async fn a_hello_trickled_a_byte_at_a_time_is_cut_off_at_the_idle_timeout() {
    let (port, _cert, handshakes) = tls_origin().await;
    let mut cfg = relay_config(port);
    cfg.limits.client_idle_timeout = webpep_server::config::Secs(Duration::from_secs(1));
    let (addr, cancel) = proxy_on("127.0.0.9", port, cfg).await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    // A record header announcing 200 bytes, then one byte every 200 ms, up to 150 of them (30
    // s, 30 idle timeouts; the record never completes). The hello as a whole is bounded by
    // the idle timeout, so the connection closes while the client still trickles; a bound
    // per read (each byte comes well within it) would never close it before the trickle ends.
    s.write_all(&[22, 3, 1, 0, 200, 1]).await.unwrap();
    let mut sent = 0;
    let mut closed = false;
    while sent < 150 {
        let mut b = [0u8; 16];
        tokio::select! {
            r = s.read(&mut b) => {
                // Nothing is sent back before the hello is whole: EOF or a reset.
                assert!(matches!(r, Ok(0) | Err(_)), "{r:?}");
                closed = true;
                break;
            }
            () = tokio::time::sleep(Duration::from_millis(200)) => {
                if s.write_all(&[0]).await.is_err() {
                    closed = true;
                    break;
                }
                sent += 1;
            }
        }
    }
    assert!(closed, "still open after {sent} bytes trickled in");
    assert_eq!(handshakes.load(std::sync::atomic::Ordering::SeqCst), 0);
    cancel.cancel();
}
