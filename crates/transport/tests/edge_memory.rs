//! The edge remembers each client address's link apart: a connection's controller starts from
//! what the last connection from the same address learned, never from another client's link.
//! Loopback UDP; every wait is for an event (a stream's end).

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use webpep_transport::{client_config, connect, EdgeIdentity, EdgeTransport, TransportSettings};

#[tokio::test]
async fn each_client_address_has_its_own_link_memory() {
    let dir = tempfile::tempdir().unwrap();
    let identity = Arc::new(EdgeIdentity::load_or_create(dir.path()).unwrap());
    let cred = identity.enroll("phone").unwrap();
    let edge = Arc::new(EdgeTransport::new(identity, &TransportSettings::default()).unwrap());
    let endpoint =
        quinn::Endpoint::server(edge.server_config(), "127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = endpoint.local_addr().unwrap();
    let server = endpoint.clone();
    let accepting = edge.clone();
    // The edge sends 2 MB down each stream: enough round trips that fill the window for the
    // controller to measure the loopback link.
    tokio::spawn(async move {
        while let Some(incoming) = server.accept().await {
            let Ok(conn) = accepting.accept(incoming).unwrap().await else {
                continue;
            };
            tokio::spawn(async move {
                while let Ok((mut send, mut recv)) = conn.accept_bi().await {
                    let _ = recv.read_to_end(64).await;
                    let chunk = vec![7u8; 64 * 1024];
                    for _ in 0..32 {
                        if send.write_all(&chunk).await.is_err() {
                            break;
                        }
                    }
                    let _ = send.finish();
                    let _ = send.stopped().await;
                }
            });
        }
    });
    let loopback = IpAddr::V4(Ipv4Addr::LOCALHOST);
    assert_eq!(edge.memory_of(loopback).get(), None, "nothing learned yet");

    let client = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
    let settings = TransportSettings::default();
    let conn = connect(&client, addr, client_config(&cred, &settings).unwrap())
        .await
        .unwrap();
    let (mut send, mut recv) = conn.open_bi().await.unwrap();
    send.write_all(b"go").await.unwrap();
    send.finish().unwrap();
    let got = recv.read_to_end(4 << 20).await.unwrap();
    assert_eq!(got.len(), 2 << 20);
    conn.close(0u32.into(), b"done");

    // What the connection learned is this address's, and only this address's.
    let learned = edge
        .memory_of(loopback)
        .get()
        .expect("the loopback link measured");
    assert!(learned.rate > 0.0, "{learned:?}");
    let other = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
    assert_eq!(edge.memory_of(other).get(), None);
    // The memory is shared by the address's connections, not copied.
    assert_eq!(edge.memory_of(loopback).get(), Some(learned));
}
