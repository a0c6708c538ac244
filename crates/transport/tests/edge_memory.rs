//! The edge remembers each client address's link apart: a connection's controller starts from
//! what the last connection from the same address learned, never from another client's link.
//! Loopback UDP; every wait is for an event (a stream's end).

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Mutex};

use webpep_transport::{client_config, connect, EdgeIdentity, EdgeTransport, TransportSettings};

/// Collects what the log writes (the test's runtime is on one thread, so a thread-local
/// subscriber sees both endpoints' controllers).
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn each_client_address_has_its_own_link_memory() {
    let log = Captured::default();
    let writer = log.clone();
    let _logging = tracing::subscriber::set_default(
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish(),
    );
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

    // Both controllers logged, each naming its sender: the client's uplink and the edge's
    // downlink to this client's address (the two share one log in the lab).
    let log = String::from_utf8(log.0.lock().unwrap().clone()).unwrap();
    let controller_lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("link-aware controller"))
        .collect();
    let edge_to_client = "sender=edge to 127.0.0.1 ";
    assert!(
        controller_lines.iter().any(|l| l.contains(edge_to_client)),
        "no line with {edge_to_client:?} in {controller_lines:#?}"
    );
    assert!(
        controller_lines.iter().any(|l| l.contains("sender=client")),
        "no line of the client's controller in {controller_lines:#?}"
    );
    assert!(
        controller_lines
            .iter()
            .all(|l| l.contains("sender=client") || l.contains(edge_to_client)),
        "a controller line names no sender: {controller_lines:#?}"
    );
}
