//! The protocol on a connection: a peer speaking another protocol version is closed with an
//! error that names both sides' versions. Loopback UDP; waits are for events.

use std::sync::Arc;

use webpep_proto::{Frame, Role};
use webpep_transport::session::Session;
use webpep_transport::{client_config, connect, server_config, EdgeIdentity, TransportSettings};

#[tokio::test]
async fn a_peer_of_another_version_is_closed_with_both_versions_named() {
    let dir = tempfile::tempdir().unwrap();
    let identity = Arc::new(EdgeIdentity::load_or_create(dir.path()).unwrap());
    let cred = identity.enroll("future-phone").unwrap();
    let cfg = server_config(
        &identity,
        identity.revocations(),
        &TransportSettings::default(),
    )
    .unwrap();
    let edge = quinn::Endpoint::server(cfg, "127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = edge.local_addr().unwrap();
    tokio::spawn(async move {
        if let Some(incoming) = edge.accept().await {
            let conn = incoming.await.unwrap();
            let _session = Session::open(conn.clone(), Role::Server).await.unwrap();
            conn.closed().await;
        }
    });
    let endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
    let conn = connect(
        &endpoint,
        addr,
        client_config(&cred, &TransportSettings::default()).unwrap(),
    )
    .await
    .unwrap();
    // A client of a later protocol: its Hello offers only version 2.
    let mut control = conn.open_uni().await.unwrap();
    let hello = Frame::Hello {
        versions: vec![2],
        role: Role::Client,
        name: "webpep 9.0".into(),
    };
    control.write_all(&hello.to_bytes()).await.unwrap();
    match conn.closed().await {
        quinn::ConnectionError::ApplicationClosed(close) => {
            assert_eq!(
                u64::from(close.error_code),
                u64::from(webpep_proto::code::VERSION_MISMATCH)
            );
            let reason = String::from_utf8_lossy(&close.reason).into_owned();
            assert!(reason.contains('1') && reason.contains('2'), "{reason}");
        }
        other => panic!("{other:?}"),
    }
}
