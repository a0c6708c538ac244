//! The pipeline through the in-memory front end (`Server::serve_request`): no client socket,
//! the same rules as the HTTP/1 listener. Origins are small loopback servers.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use webpep_server::reply::{Body, Reply};
use webpep_server::request::Arrival;
use webpep_server::{Server, ServerConfig};

fn arrival(peer: &str) -> Arrival {
    Arrival {
        peer: peer.parse().unwrap(),
        local: "127.0.0.1:3128".parse().unwrap(),
        original_dst: None,
    }
}

fn request(method: &str, target: &str, headers: &[(&str, &str)]) -> http::Request<Bytes> {
    let mut b = http::Request::builder().method(method).uri(target);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.body(Bytes::new()).unwrap()
}

fn body(r: &Reply) -> String {
    match &r.body {
        Body::Full(b) => String::from_utf8_lossy(b).into_owned(),
        Body::Empty => String::new(),
        Body::Stream { .. } => panic!("streamed"),
    }
}

async fn serve(server: &Arc<Server>, req: http::Request<Bytes>) -> Reply {
    server.serve_request(req, arrival("127.0.0.1:40000")).await
}

#[tokio::test]
async fn explicit_transparent_and_url_mode_requests_are_served() {
    let o = Origin::start(hello()).await;
    let server = Server::new(url_mode(test_config())).unwrap();

    let r = serve(
        &server,
        request("GET", &format!("http://{}/x", o.addr), &[]),
    )
    .await;
    assert_eq!((r.status.as_u16(), body(&r).as_str()), (200, "hello /x"));
    assert!(r.headers.get("via").is_some());

    // Origin-form with a foreign Host: transparent (DNS rewriting).
    let host = o.addr.to_string();
    let r = serve(&server, request("GET", "/y", &[("host", &host)])).await;
    assert_eq!((r.status.as_u16(), body(&r).as_str()), (200, "hello /y"));
    assert_eq!(o.last().unwrap().path, "/y");

    // URL mode: /<host>/<path> on the proxy's authority.
    let r = serve(
        &server,
        request(
            "GET",
            &format!("/{}/z", o.addr),
            &[("host", "proxy.test:3128")],
        ),
    )
    .await;
    assert_eq!((r.status.as_u16(), body(&r).as_str()), (200, "hello /z"));
    assert_eq!(o.last().unwrap().path, "/z");

    // The PAC file is the proxy's own.
    let r = serve(
        &server,
        request("GET", "/proxy.pac", &[("host", "127.0.0.1:3128")]),
    )
    .await;
    assert_eq!(r.status, 200);
    assert!(body(&r).contains("PROXY 127.0.0.1:3128"));
    let m = server.metrics_text();
    for mode in ["explicit", "transparent", "url", "local"] {
        let line = format!("webpep_requests_total{{mode=\"{mode}\",class=\"2xx\"}} 1\n");
        assert!(m.contains(&line), "{line} in {m}");
    }
}

#[tokio::test]
async fn bad_requests_get_400_and_connect_needs_a_stream() {
    let server = Server::new(test_config()).unwrap();
    // Origin-form without a Host: no mode fits.
    let r = serve(&server, request("GET", "/no-host", &[])).await;
    assert_eq!(r.status, 400);
    assert!(r.close);
    let r = serve(&server, request("CONNECT", "example.test:443", &[])).await;
    assert_eq!(r.status, 501);
    assert!(body(&r).contains("byte-stream"));
}

#[tokio::test]
async fn private_destinations_are_refused_with_the_setting_that_allows_them() {
    let o = Origin::start(hello()).await;
    let mut cfg = test_config();
    cfg.acl.allow_destinations.clear();
    let server = Server::new(cfg).unwrap();
    let r = serve(&server, request("GET", &format!("http://{}/", o.addr), &[])).await;
    assert_eq!(r.status, 403);
    assert!(body(&r).contains("allow-destination"), "{}", body(&r));
    assert_eq!(o.requests(), 0);
}

#[tokio::test]
async fn clients_outside_the_allowed_networks_are_refused() {
    let o = Origin::start(hello()).await;
    let server = Server::new(test_config()).unwrap();
    let r = server
        .serve_request(
            request("GET", &format!("http://{}/", o.addr), &[]),
            arrival("192.0.2.7:5000"),
        )
        .await;
    assert_eq!(r.status, 403);
    assert_eq!(o.requests(), 0);
}

#[tokio::test]
async fn a_dead_origin_gets_502_and_a_silent_one_504() {
    // A port nothing listens on: refused.
    let dead: SocketAddr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let server = Server::new(test_config()).unwrap();
    let r = serve(&server, request("GET", &format!("http://{dead}/"), &[])).await;
    assert_eq!(r.status, 502, "{}", body(&r));

    // Accepts and never answers: the response timeout.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap();
    let mut cfg: ServerConfig = test_config();
    cfg.origin.response_timeout = webpep_server::config::Secs(Duration::from_millis(300));
    let server = Server::new(cfg).unwrap();
    let r = serve(&server, request("GET", &format!("http://{addr}/"), &[])).await;
    assert_eq!(r.status, 504, "{}", body(&r));
    assert!(body(&r).contains("response-timeout"));
    drop(silent);
}

#[tokio::test]
async fn proxy_authentication_applies_as_on_the_listener() {
    let o = Origin::start(hello()).await;
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users");
    let line =
        webpep_server::auth::hash_password_cli(Some("alice"), &mut "s3cret\n".as_bytes()).unwrap();
    std::fs::write(&users, format!("{line}\n")).unwrap();
    let mut cfg = test_config();
    cfg.auth.users_file = Some(users);
    let server = Server::new(cfg).unwrap();
    let url = format!("http://{}/", o.addr);
    let r = serve(&server, request("GET", &url, &[])).await;
    assert_eq!(r.status, 407);
    // alice:s3cret
    let r = serve(
        &server,
        request(
            "GET",
            &url,
            &[("proxy-authorization", "Basic YWxpY2U6czNjcmV0")],
        ),
    )
    .await;
    assert_eq!(r.status, 200);
    assert!(o.last().unwrap().header("proxy-authorization").is_none());
}
