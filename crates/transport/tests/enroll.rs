//! Only enrolled clients reach the edge over QUIC: the handshake refuses a client without a
//! credential, one whose credential was revoked (while the edge runs), and one enrolled at
//! another edge; an enrolled client gets its streams and the edge knows its name. Loopback
//! UDP only; every wait is for an event (a handshake's outcome, a stream's end).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use tokio::sync::mpsc;
use webpep_transport::credential::fingerprint;
use webpep_transport::{
    client_config, connect, peer_certificate, server_config, Credential, CredentialError,
    EdgeIdentity, TransportSettings,
};

/// What the edge saw of one incoming connection.
#[derive(Debug)]
enum Seen {
    /// The handshake completed with this enrolled name.
    Client(Option<String>),
    /// The handshake failed, with the reason.
    Refused(String),
}

/// An edge on loopback that echoes each stream and reports each handshake's outcome.
fn start_edge(dir: &Path) -> (SocketAddr, mpsc::UnboundedReceiver<Seen>, quinn::Endpoint) {
    let identity = Arc::new(EdgeIdentity::load_or_create(dir).unwrap());
    let config = server_config(
        &identity,
        identity.revocations(),
        &TransportSettings::default(),
    )
    .unwrap();
    let endpoint = quinn::Endpoint::server(config, "127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = endpoint.local_addr().unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    let server = endpoint.clone();
    tokio::spawn(async move {
        while let Some(incoming) = server.accept().await {
            let tx = tx.clone();
            let identity = identity.clone();
            tokio::spawn(async move {
                match incoming.await {
                    Ok(conn) => {
                        let name = peer_certificate(&conn).and_then(|c| identity.name_of(&c));
                        let _ = tx.send(Seen::Client(name));
                        while let Ok((mut send, mut recv)) = conn.accept_bi().await {
                            let data = recv.read_to_end(1 << 16).await.unwrap_or_default();
                            let _ = send.write_all(&data).await;
                            let _ = send.finish();
                        }
                    }
                    Err(e) => {
                        let _ = tx.send(Seen::Refused(e.to_string()));
                    }
                }
            });
        }
    });
    (addr, rx, endpoint)
}

/// Connects with `config` and echoes one message; Err with the reason if anything fails.
async fn echo(addr: SocketAddr, config: quinn::ClientConfig) -> Result<Vec<u8>, String> {
    let endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
    let conn = connect(&endpoint, addr, config)
        .await
        .map_err(|e| e.to_string())?;
    let (mut send, mut recv) = conn.open_bi().await.map_err(|e| e.to_string())?;
    send.write_all(b"ping").await.map_err(|e| e.to_string())?;
    send.finish().map_err(|e| e.to_string())?;
    let data = recv.read_to_end(1 << 16).await.map_err(|e| e.to_string())?;
    conn.close(0u32.into(), b"done");
    endpoint.wait_idle().await;
    Ok(data)
}

#[tokio::test]
async fn an_enrolled_client_gets_streams_and_the_edge_knows_its_name() {
    let dir = tempfile::tempdir().unwrap();
    let (addr, mut seen, _edge) = start_edge(dir.path());
    let identity = EdgeIdentity::load_or_create(dir.path()).unwrap();
    let cred = identity.enroll("alice").unwrap();
    let config = client_config(&cred, &TransportSettings::default()).unwrap();
    assert_eq!(echo(addr, config).await.unwrap(), b"ping");
    match seen.recv().await.unwrap() {
        Seen::Client(name) => assert_eq!(name.as_deref(), Some("alice")),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_client_without_a_credential_is_refused_in_the_handshake() {
    let dir = tempfile::tempdir().unwrap();
    let (addr, mut seen, _edge) = start_edge(dir.path());
    let identity = EdgeIdentity::load_or_create(dir.path()).unwrap();
    // It trusts the edge, but presents no certificate.
    let mut roots = rustls::RootCertStore::empty();
    roots.add(identity.ca_der().clone()).unwrap();
    let mut tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_protocol_versions(&[&rustls::version::TLS13])
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    tls.alpn_protocols = vec![webpep_transport::ALPN.to_vec()];
    let config = quinn::ClientConfig::new(Arc::new(
        quinn::crypto::rustls::QuicClientConfig::try_from(tls).unwrap(),
    ));
    let err = echo(addr, config).await.unwrap_err();
    match seen.recv().await.unwrap() {
        Seen::Refused(why) => assert!(why.contains("certificate"), "{why}"),
        other => panic!("{other:?}"),
    }
    assert!(!err.is_empty());
}

#[tokio::test]
async fn revoking_takes_effect_at_the_next_handshake_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (addr, mut seen, _edge) = start_edge(dir.path());
    let identity = EdgeIdentity::load_or_create(dir.path()).unwrap();
    let bob = identity.enroll("bob").unwrap();
    let carol = identity.enroll("carol").unwrap();
    let settings = TransportSettings::default();
    assert_eq!(
        echo(addr, client_config(&bob, &settings).unwrap())
            .await
            .unwrap(),
        b"ping"
    );
    assert!(matches!(seen.recv().await.unwrap(), Seen::Client(Some(n)) if n == "bob"));

    // The operator revokes bob while the edge runs.
    assert_eq!(identity.revoke("bob").unwrap(), 1);
    assert!(echo(addr, client_config(&bob, &settings).unwrap())
        .await
        .is_err());
    match seen.recv().await.unwrap() {
        Seen::Refused(why) => assert!(why.to_lowercase().contains("revoked"), "{why}"),
        other => panic!("{other:?}"),
    }
    // carol is untouched.
    assert_eq!(
        echo(addr, client_config(&carol, &settings).unwrap())
            .await
            .unwrap(),
        b"ping"
    );
    assert!(matches!(seen.recv().await.unwrap(), Seen::Client(Some(n)) if n == "carol"));
    assert!(matches!(
        identity.revoke("nobody"),
        Err(CredentialError::NotEnrolled(_))
    ));
}

#[tokio::test]
async fn a_credential_from_another_edge_is_refused_both_ways() {
    let ours = tempfile::tempdir().unwrap();
    let theirs = tempfile::tempdir().unwrap();
    let (addr, mut seen, _edge) = start_edge(ours.path());
    let other = EdgeIdentity::load_or_create(theirs.path()).unwrap();
    let foreign = other.enroll("mallory").unwrap();
    // mallory's client trusts the other edge's CA: it refuses ours before sending anything.
    let err = echo(
        addr,
        client_config(&foreign, &TransportSettings::default()).unwrap(),
    )
    .await
    .unwrap_err();
    assert!(
        err.contains("certificate") || err.contains("UnknownIssuer"),
        "{err}"
    );
    // And a client that trusts our CA but holds the other edge's certificate is refused by us.
    let identity = EdgeIdentity::load_or_create(ours.path()).unwrap();
    let mixed = Credential {
        edge_ca: std::fs::read_to_string(identity.dir().join("edge-ca.pem")).unwrap(),
        ..foreign
    };
    assert!(echo(
        addr,
        client_config(&mixed, &TransportSettings::default()).unwrap()
    )
    .await
    .is_err());
    // The edge saw mallory's first attempt fail too (the client closed it) or only the second;
    // the one it judged is refused.
    loop {
        match seen.recv().await.unwrap() {
            Seen::Refused(why) if why.contains("certificate") || why.contains("Unknown") => break,
            Seen::Refused(_) => continue,
            Seen::Client(name) => panic!("admitted {name:?}"),
        }
    }
}

#[test]
fn keys_and_credentials_are_private_and_a_readable_one_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let identity = EdgeIdentity::load_or_create(&dir.path().join("edge")).unwrap();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&identity.dir().join("edge-ca-key.pem")), 0o600);
    assert_eq!(mode(&identity.dir().join("edge-key.pem")), 0o600);
    assert_eq!(mode(identity.dir()), 0o700);
    let cred = identity.enroll("dave").unwrap();
    let path = dir.path().join("dave.credential");
    cred.write(&path).unwrap();
    assert_eq!(mode(&path), 0o600);
    assert_eq!(Credential::load(&path).unwrap(), cred);
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert!(matches!(
        Credential::load(&path),
        Err(CredentialError::File(
            webpep_files::FileError::TooOpen { .. }
        ))
    ));
    // The enrolled list names the credential by its certificate's fingerprint.
    let enrolled = identity.enrolled().unwrap();
    assert_eq!(enrolled.len(), 1);
    assert_eq!(
        enrolled[0].fingerprint,
        fingerprint(&cred.cert_der().unwrap())
    );
    assert!(matches!(
        identity.enroll("no spaces"),
        Err(CredentialError::BadName(_))
    ));
    // The same directory loads the same CA.
    let again = EdgeIdentity::load_or_create(identity.dir()).unwrap();
    assert_eq!(again.ca_der(), identity.ca_der());
}
