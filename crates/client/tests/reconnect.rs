//! When the connection to the edge dies under a request, `webpep client` opens a new one: an
//! idempotent request is sent once more on it, any other request is never replayed (the
//! browser gets the link-down page). The edge here counts what it received and drops the
//! whole connection at the first request for each path (as an outage that ends the
//! connection would), answering normally after that. Loopback UDP; no sleeps.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use http::{HeaderMap, Method, StatusCode};
use tokio::io::AsyncReadExt;
use webpep_client::{ProxyRequest, QuicUpstream, Upstream, UpstreamError};
use webpep_proto::BodyCoding;
use webpep_proto::{Frame, Role};
use webpep_transport::session::{read_request, send_response_head, write_frame, Session};
use webpep_transport::{server_config, EdgeIdentity, TransportSettings};

type Seen = Arc<Mutex<HashMap<String, usize>>>;

async fn flaky_edge(identity: Arc<EdgeIdentity>) -> (SocketAddr, Seen) {
    let cfg = server_config(
        &identity,
        identity.revocations(),
        &TransportSettings::default(),
    )
    .unwrap();
    let endpoint = quinn::Endpoint::server(cfg, "127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = endpoint.local_addr().unwrap();
    let seen: Seen = Arc::default();
    let counts = seen.clone();
    tokio::spawn(async move {
        while let Some(incoming) = endpoint.accept().await {
            let counts = counts.clone();
            tokio::spawn(async move {
                let Ok(conn) = incoming.await else { return };
                let Ok(session) = Session::open(conn.clone(), Role::Server).await else {
                    return;
                };
                while let Ok((mut send, recv)) = conn.accept_bi().await {
                    let Ok(req) = read_request(&session, recv, 1 << 20).await else {
                        continue;
                    };
                    let n = {
                        let mut c = counts.lock().unwrap();
                        let n = c.entry(req.target.clone()).or_insert(0);
                        *n += 1;
                        *n
                    };
                    if n == 1 {
                        // The first time: the connection dies with the request unanswered.
                        conn.close(0u32.into(), b"outage");
                        return;
                    }
                    let body = format!("{} {} #{n}", req.method, req.target);
                    let _ = send_response_head(
                        &session,
                        &mut send,
                        200,
                        &HeaderMap::new(),
                        BodyCoding::Identity,
                    )
                    .await;
                    let _ = write_frame(&session, &mut send, &Frame::Data(body.into_bytes())).await;
                    let _ = write_frame(&session, &mut send, &Frame::End).await;
                    let _ = send.finish();
                    let _ = send.stopped().await;
                }
            });
        }
    });
    (addr, seen)
}

fn request(method: Method, target: &str) -> ProxyRequest {
    ProxyRequest {
        method,
        target: target.to_string(),
        headers: HeaderMap::new(),
        body: bytes::Bytes::from_static(b"form=1"),
    }
}

#[tokio::test]
async fn an_idempotent_request_is_retried_once_and_a_post_is_never_replayed() {
    let dir = tempfile::tempdir().unwrap();
    let identity = Arc::new(EdgeIdentity::load_or_create(dir.path()).unwrap());
    let cred = identity.enroll("phone").unwrap();
    let (edge, seen) = flaky_edge(identity).await;
    let upstream = QuicUpstream::new(edge, &cred, &TransportSettings::default()).unwrap();

    // GET: its connection dies, it is sent again on a new one and answered.
    let resp = upstream
        .request(request(Method::GET, "http://example.test/get"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(resp.status, StatusCode::OK);
    let mut body = String::new();
    let mut r = resp.body;
    r.read_to_string(&mut body).await.unwrap();
    assert_eq!(body, "GET http://example.test/get #2");

    // POST: its connection dies; it is not sent again, the browser is told the link is down.
    match upstream
        .request(request(Method::POST, "http://example.test/post"))
        .await
    {
        Err(UpstreamError::LinkDown(why)) => assert!(why.contains("not sent twice"), "{why}"),
        Err(e) => panic!("{e}"),
        Ok(r) => panic!("answered {}", r.status),
    }
    let counts = seen.lock().unwrap().clone();
    assert_eq!(counts.get("http://example.test/get"), Some(&2));
    assert_eq!(
        counts.get("http://example.test/post"),
        Some(&1),
        "the POST reached the edge once"
    );
}
