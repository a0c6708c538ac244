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

/// With the link-aware controller a connection holds no more stream data than its window
/// can send (so its acknowledgements never wait behind it); quinn's stock controllers keep
/// quinn's send window. Either way everything written arrives.
#[tokio::test]
async fn stream_data_is_held_to_the_link_aware_windows_budget() {
    for link_aware in [true, false] {
        let settings = if link_aware {
            TransportSettings::default()
        } else {
            TransportSettings {
                congestion: webpep_transport::Congestion::Quinn(Arc::new(
                    quinn::congestion::CubicConfig::default(),
                )),
                ..TransportSettings::default()
            }
        };
        let dir = tempfile::tempdir().unwrap();
        let identity = Arc::new(EdgeIdentity::load_or_create(dir.path()).unwrap());
        let cred = identity.enroll("phone").unwrap();
        let cfg = server_config(&identity, identity.revocations(), &settings).unwrap();
        let edge = quinn::Endpoint::server(cfg, "127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = edge.local_addr().unwrap();
        const TOTAL: usize = 300_000;
        let received = tokio::spawn(async move {
            let conn = edge.accept().await.unwrap().await.unwrap();
            let _session = Session::open(conn.clone(), Role::Server).await.unwrap();
            let (_send, mut recv) = conn.accept_bi().await.unwrap();
            recv.read_to_end(TOTAL).await.unwrap().len()
        });
        let endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
        let conn = connect(&endpoint, addr, client_config(&cred, &settings).unwrap())
            .await
            .unwrap();
        let _session = Session::open(conn.clone(), Role::Client).await.unwrap();
        let (mut send, _recv) = conn.open_bi().await.unwrap();
        let body = vec![7u8; TOTAL];
        let first = send.write(&body).await.unwrap();
        let budget = conn
            .congestion_state()
            .into_any()
            .downcast::<webpep_transport::congestion::Controller>()
            .ok()
            .and_then(|c| c.send_budget())
            .map(|b| b.bytes());
        match budget {
            Some(budget) => {
                assert!(link_aware);
                assert!(first as u64 <= budget, "{first} > {budget}");
                assert!(first > 0);
            }
            None => {
                assert!(!link_aware);
                assert_eq!(first, TOTAL);
            }
        }
        send.write_all(&body[first..]).await.unwrap();
        send.finish().unwrap();
        assert_eq!(received.await.unwrap(), TOTAL);
    }
}

/// A connected client and edge (loopback, default settings); the edge's end is returned with
/// its endpoint, which must outlive the test.
async fn connected() -> (quinn::Connection, quinn::Connection, quinn::Endpoint) {
    let dir = tempfile::tempdir().unwrap();
    let identity = Arc::new(EdgeIdentity::load_or_create(dir.path()).unwrap());
    let cred = identity.enroll("phone").unwrap();
    let settings = TransportSettings::default();
    let cfg = server_config(&identity, identity.revocations(), &settings).unwrap();
    let edge = quinn::Endpoint::server(cfg, "127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = edge.local_addr().unwrap();
    let endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
    let accepting = edge.accept();
    let (client, server) = tokio::join!(
        connect(&endpoint, addr, client_config(&cred, &settings).unwrap()),
        async { accepting.await.unwrap().await.unwrap() }
    );
    (client.unwrap(), server, edge)
}

/// A browser that closes its end of a TLS tunnel before the server spoke gave up on the
/// handshake: the stream is reset (nothing more of it crosses the link). Any other close (a
/// tunnel that is not TLS, or one whose server has spoken) is the tunnel's end: `End` and
/// the stream's finish.
#[tokio::test]
async fn a_tls_tunnel_abandoned_before_the_server_spoke_is_reset() {
    use webpep_transport::session::{pump_into_frames, FrameReader, TunnelEnd, TunnelFlights};
    let (client, server, _edge) = connected().await;
    let session = Session::open(client.clone(), Role::Client).await.unwrap();
    let hello = [0x16u8, 0x03, 0x01, 0x07, 0xd0, 1, 2, 3];
    for (first, server_spoke, reset) in [
        (&hello[..], false, true),
        (&b"GET / HTTP/1.1\r\n\r\n"[..], false, false),
        (&hello[..], true, false),
    ] {
        let flights = TunnelFlights::new();
        if server_spoke {
            flights.spoke(TunnelEnd::Client);
            flights.spoke(TunnelEnd::Server);
        }
        let (mut send, _recv) = client.open_bi().await.unwrap();
        // The browser's bytes, then its close.
        pump_into_frames(&session, first, &mut send, &flights, TunnelEnd::Client)
            .await
            .unwrap();
        let (_send, recv) = server.accept_bi().await.unwrap();
        let mut frames = FrameReader::new(recv);
        let mut got = Vec::new();
        let end = loop {
            match frames.next().await {
                Ok(Some(Frame::Data(d))) => got.extend(d),
                Ok(Some(Frame::End)) => break frames.next().await.map(|f| f.is_none()),
                Ok(other) => panic!("{other:?}"),
                Err(e) => break Err(e),
            }
        };
        if reset {
            let e = end.expect_err("a reset stream");
            assert!(e.to_string().contains("reset"), "{e}");
        } else {
            assert!(end.unwrap(), "End, then the stream's finish");
            assert_eq!(got, first);
        }
    }
}
