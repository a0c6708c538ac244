//! The client side and the origin side: modes, pipelining, errors, ACLs, CONNECT, metrics,
//! graceful shutdown. Loopback only.

mod common;

use std::time::Duration;

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test]
async fn explicit_get_strips_hop_by_hop_and_adds_via() {
    let o = Origin::start(hello()).await;
    let p = start_proxy(test_config()).await;
    let r = get_once(
        p.addr,
        &format!("http://{}/a?b=1", o.addr),
        "Proxy-Connection: keep-alive\r\nConnection: x-drop\r\nX-Drop: 1\r\nProxy-Authorization: Basic eA==\r\n",
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "hello /a?b=1");
    assert!(r.header("via").is_some_and(|v| v.contains("webpep")));
    let seen = o.last().unwrap();
    assert_eq!(seen.path, "/a?b=1");
    assert_eq!(seen.header("host"), Some(o.addr.to_string().as_str()));
    assert!(seen.header("x-drop").is_none());
    assert!(seen.header("proxy-authorization").is_none());
    assert!(seen.header("proxy-connection").is_none());
    assert!(seen.header("via").is_some());
}

#[tokio::test]
async fn keep_alive_serves_several_requests_on_one_connection() {
    let o = Origin::start(hello()).await;
    let p = start_proxy(test_config()).await;
    let mut c = Client::connect(p.addr).await;
    for i in 0..3 {
        let r = c.get(&format!("http://{}/{i}", o.addr), "").await;
        assert_eq!(r.text(), format!("hello /{i}"));
    }
    // HTTP/1.0 without keep-alive: answered, then closed.
    c.send(&format!("GET http://{}/ten HTTP/1.0\r\n\r\n", o.addr))
        .await;
    let r = c.read(false).await.unwrap();
    assert_eq!(r.text(), "hello /ten");
    assert!(c.closed().await);
}

#[tokio::test]
async fn pipelined_requests_answered_in_order_when_origin_answers_out_of_order() {
    // Each answer waits at its own gate, which the test opens last to first: the proxy
    // fetches concurrently but writes in order.
    let gates: Vec<Gate> = (0..3).map(|_| Gate::new()).collect();
    let g = gates.clone();
    let o = Origin::start(move |r: &OriginRequest| {
        let i: usize = r.path.trim_start_matches('/').parse().unwrap_or(0);
        OriginReply::ok("text/plain", format!("body {i}")).gate(&g[i])
    })
    .await;
    let p = start_proxy(test_config()).await;
    let mut c = Client::connect(p.addr).await;
    let mut all = String::new();
    for i in 0..3 {
        all.push_str(&format!(
            "GET http://{}/{i} HTTP/1.1\r\nHost: x\r\n\r\n",
            o.addr
        ));
    }
    c.send(&all).await;
    // Concurrent: all three are at the origin before any is answered (one after the other,
    // the second would never arrive while the first waits at its gate).
    o.wait_for("all three requests at the origin at once", |o| {
        o.in_flight() == 3
    })
    .await;
    assert_eq!(o.peak(), 3);
    assert!(
        !o.events().iter().any(|e| matches!(e, Event::Answered(_))),
        "{:?}",
        o.events()
    );
    // The origin answers /2, then /1, then /0.
    for i in (0..3).rev() {
        gates[i].open();
        o.wait_for(&format!("/{i} answered"), |o| {
            o.events().contains(&Event::Answered(format!("/{i}")))
        })
        .await;
    }
    for i in 0..3 {
        let r = step(c.read(false)).await.unwrap();
        assert_eq!(r.text(), format!("body {i}"));
    }
    let answered: Vec<Event> = o
        .events()
        .into_iter()
        .filter(|e| matches!(e, Event::Answered(_)))
        .collect();
    assert_eq!(
        answered,
        ["/2", "/1", "/0"].map(|p| Event::Answered(p.into()))
    );
}

#[tokio::test]
async fn malformed_requests_get_400_and_431() {
    let p = start_proxy(test_config()).await;
    for raw in [
        "GARBAGE\r\n\r\n",
        "GET / HTTP/1.1\r\nBad Header\r\n\r\n",
        "GET http://a.test/ HTTP/3.7\r\n\r\n",
    ] {
        let mut c = Client::connect(p.addr).await;
        c.send(raw).await;
        let r = c.read(false).await.unwrap();
        assert_eq!(r.status, 400, "{raw:?}");
        assert!(c.closed().await);
    }
    let mut c = Client::connect(p.addr).await;
    c.send(&format!(
        "GET http://a.test/ HTTP/1.1\r\nX-Big: {}\r\n\r\n",
        "a".repeat(70 * 1024)
    ))
    .await;
    assert_eq!(c.read(false).await.unwrap().status, 431);
    // Still serving.
    let mut c = Client::connect(p.addr).await;
    c.send("GET /nothing HTTP/1.1\r\n\r\n").await;
    assert_eq!(c.read(false).await.unwrap().status, 400);
}

#[tokio::test]
async fn chunked_request_body_reaches_origin() {
    let o = Origin::start(|r: &OriginRequest| {
        OriginReply::ok(
            "text/plain",
            format!(
                "{} len={}",
                r.method,
                r.header("content-length").unwrap_or("-")
            ),
        )
    })
    .await;
    let p = start_proxy(test_config()).await;
    let mut c = Client::connect(p.addr).await;
    c.send(&format!(
        "POST http://{}/f HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        o.addr
    ))
    .await;
    assert_eq!(c.read(false).await.unwrap().text(), "POST len=5");
}

#[tokio::test]
async fn origin_refused_is_502_and_timeout_is_504_with_reason() {
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let mut cfg = test_config();
    cfg.origin.response_timeout = webpep_server::config::Secs(Duration::from_millis(500));
    // The proxy's own account of its time on the request (no wall clock in the test).
    let mut timing = toml::Table::new();
    timing.insert("enabled".into(), toml::Value::Boolean(true));
    cfg.stages.insert("server-timing".into(), timing);
    let p = start_proxy(cfg).await;
    let r = get_once(p.addr, &format!("http://{closed}/"), "").await;
    assert_eq!(r.status, 502);
    assert!(r.text().to_lowercase().contains("refused"), "{}", r.text());

    let o = Origin::start(|_r: &OriginRequest| OriginReply {
        hang: true,
        ..OriginReply::ok("text/plain", "")
    })
    .await;
    // A guard far above the 500 ms timeout, for a hang only.
    let r = tokio::time::timeout(
        Duration::from_secs(30),
        get_once(p.addr, &format!("http://{}/", o.addr), ""),
    )
    .await
    .expect("an answer, not a hang");
    assert_eq!(r.status, 504);
    // Ended by the response timeout: the proxy says so, it waited at least that long (by its
    // own Server-Timing), and asked the origin once.
    assert!(
        r.text()
            .contains("did not answer within 500ms (origin.response-timeout)"),
        "{}",
        r.text()
    );
    let st = r.header("server-timing").expect("Server-Timing");
    let proxy_ms: f64 = st
        .split(',')
        .find_map(|m| m.trim().strip_prefix("proxy;dur="))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{st}"));
    assert!(proxy_ms >= 500.0, "{st}");
    assert_eq!(o.requests(), 1);
}

#[tokio::test]
async fn private_destinations_refused_by_default() {
    let mut cfg = test_config();
    cfg.acl.allow_destinations.clear();
    let p = start_proxy(cfg).await;
    for url in [
        "http://127.0.0.1/",
        "http://10.1.2.3/",
        "http://[::1]/",
        "http://169.254.1.1/",
    ] {
        let r = get_once(p.addr, url, "").await;
        assert_eq!(r.status, 403, "{url}");
        assert!(r.text().contains("destination not allowed"), "{}", r.text());
    }
    // A name that resolves to loopback is refused too (checked after resolution).
    let mut cfg = test_config();
    cfg.acl.allow_destinations.clear();
    cfg.origin
        .hosts
        .insert("sneaky.test".into(), "127.0.0.1".parse().unwrap());
    let p = start_proxy(cfg).await;
    assert_eq!(
        get_once(p.addr, "http://sneaky.test/", "").await.status,
        403
    );
}

#[tokio::test]
async fn clients_outside_allow_list_refused() {
    let o = Origin::start(hello()).await;
    let mut cfg = test_config();
    cfg.acl.allow_clients = vec!["192.0.2.0/24".parse().unwrap()];
    let p = start_proxy(cfg).await;
    let mut c = Client::connect(p.addr).await;
    c.send(&format!(
        "GET http://{}/ HTTP/1.1\r\nHost: x\r\n\r\n",
        o.addr
    ))
    .await;
    let r = c.read(false).await.unwrap();
    assert_eq!(r.status, 403);
    assert!(c.closed().await);
    assert_eq!(o.requests(), 0, "not an open proxy");
}

#[tokio::test]
async fn connect_tunnels_only_to_allowed_ports() {
    let eaddr = echo_server().await;
    let p = start_proxy(test_config()).await;
    let mut c = Client::connect(p.addr).await;
    c.send(&format!(
        "CONNECT {eaddr} HTTP/1.1\r\nHost: {eaddr}\r\n\r\n"
    ))
    .await;
    assert_eq!(c.read(false).await.unwrap().status, 403);

    let mut cfg = test_config();
    cfg.acl.connect_ports = vec![eaddr.port()];
    let p = start_proxy(cfg).await;
    let mut c = Client::connect(p.addr).await;
    // Bytes sent right after the CONNECT head go through too.
    c.send(&format!(
        "CONNECT {eaddr} HTTP/1.1\r\nHost: {eaddr}\r\n\r\nearly "
    ))
    .await;
    let r = c.read(true).await.unwrap();
    assert_eq!(r.status, 200);
    c.s.write_all(b"ping").await.unwrap();
    let mut got = Vec::new();
    while got.len() < 10 {
        let mut b = [0u8; 64];
        let n = tokio::time::timeout(Duration::from_secs(5), c.s.read(&mut b))
            .await
            .unwrap()
            .unwrap();
        assert!(n > 0);
        got.extend_from_slice(&b[..n]);
    }
    assert_eq!(got, b"early ping");
}

#[tokio::test]
async fn transparent_origin_form_uses_host() {
    let o = Origin::start(hello()).await;
    let p = start_proxy(test_config()).await;
    let mut c = Client::connect(p.addr).await;
    c.send(&format!("GET /t HTTP/1.1\r\nHost: {}\r\n\r\n", o.addr))
        .await;
    let r = c.read(false).await.unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "hello /t");
    // Origin-form to the proxy itself without URL mode → 404.
    c.send(&format!(
        "GET /favicon.ico HTTP/1.1\r\nHost: {}\r\n\r\n",
        p.addr
    ))
    .await;
    assert_eq!(c.read(false).await.unwrap().status, 404);
}

#[tokio::test]
async fn metrics_count_requests_and_bytes() {
    let o = Origin::start(hello()).await;
    let p = start_proxy(test_config()).await;
    for _ in 0..2 {
        get_once(p.addr, &format!("http://{}/m", o.addr), "").await;
    }
    get_once(p.addr, "http://10.9.9.9/", "").await;
    let mut c = Client::connect(p.admin).await;
    c.send("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
    let r = c.read(false).await.unwrap();
    assert_eq!(r.status, 200);
    let t = r.text();
    assert!(
        t.contains("webpep_requests_total{mode=\"explicit\",class=\"2xx\"} 2"),
        "{t}"
    );
    assert!(
        t.contains("webpep_requests_total{mode=\"explicit\",class=\"4xx\"} 1"),
        "{t}"
    );
    let bytes_out: u64 = t
        .lines()
        .find_map(|l| l.strip_prefix("webpep_client_bytes_out_total "))
        .unwrap()
        .parse()
        .unwrap();
    assert!(bytes_out > 20);
    assert_eq!(p.server.metrics_text().lines().count(), t.lines().count());
}

#[tokio::test]
async fn graceful_shutdown_finishes_in_flight_request() {
    let gate = Gate::new();
    let g = gate.clone();
    let o = Origin::start(move |_r: &OriginRequest| OriginReply::ok("text/plain", "slow").gate(&g))
        .await;
    let p = start_proxy(test_config()).await;
    let mut c = Client::connect(p.addr).await;
    c.send(&format!(
        "GET http://{}/ HTTP/1.1\r\nHost: x\r\n\r\n",
        o.addr
    ))
    .await;
    // In flight: at the origin, which answers only after the shutdown has begun.
    o.wait_requests(1).await;
    p.cancel.cancel();
    gate.open();
    let r = c.read(false).await.unwrap();
    assert_eq!(r.text(), "slow");
    tokio::time::timeout(Duration::from_secs(5), p.done)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    // No new connections afterwards.
    assert!(tokio::net::TcpStream::connect(p.addr).await.is_err());
}

#[tokio::test]
async fn request_to_itself_on_another_port_is_a_loop() {
    // Two listeners, as the lab's edge (3128 and 80): a Host naming the other one would make
    // the proxy call itself forever without Via loop detection.
    let a = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let b = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let (aa, ba) = (a.local_addr().unwrap(), b.local_addr().unwrap());
    let mut cfg = test_config();
    // The proxy's own address under a name: only Via can tell.
    cfg.origin
        .hosts
        .insert("me.test".into(), "127.0.0.1".parse().unwrap());
    let server = webpep_server::Server::new(cfg).unwrap();
    let cancel = webpep_server::CancellationToken::new();
    tokio::spawn(server.clone().serve(vec![a, b], None, cancel.clone()));
    let mut c = Client::connect(aa).await;
    c.send(&format!(
        "GET /x HTTP/1.1\r\nHost: me.test:{}\r\n\r\n",
        ba.port()
    ))
    .await;
    let r = c.read(false).await.unwrap();
    assert_eq!(r.status, 508, "{}", r.text());
    cancel.cancel();
}

#[tokio::test]
async fn a_head_trickled_a_byte_at_a_time_gets_408_at_the_header_timeout() {
    let mut cfg = test_config();
    cfg.limits.header_timeout = webpep_server::config::Secs(Duration::from_secs(1));
    let p = start_proxy(cfg).await;
    let mut c = Client::connect(p.addr).await;
    c.send("GET http://127.0.0.1:9/ HTTP/1.1\r\nX: ").await;
    // One more header byte every 200 ms, for up to 30 s (30 header timeouts): each read comes
    // well within the header timeout, the head as a whole does not. Cut off by the header
    // timeout counted from the head's start, the answer comes while the client still
    // trickles; counted from the last byte, it would never come before the trickle ends.
    const BYTES: usize = 150;
    let mut sent = 0;
    let mut answered = false;
    while sent < BYTES {
        tokio::select! {
            r = c.s.readable() => {
                r.unwrap();
                answered = true;
                break;
            }
            () = tokio::time::sleep(Duration::from_millis(200)) => {
                // The proxy may already have answered and closed.
                if c.s.write_all(b"a").await.is_err() {
                    answered = true;
                    break;
                }
                sent += 1;
            }
        }
    }
    assert!(answered, "no answer while {BYTES} header bytes trickled in");
    let r = c.read(false).await.expect("an answer");
    assert_eq!(r.status, 408, "{}", r.text());
    assert!(c.closed().await);
}
