//! Per-client limits (DESIGN §9): concurrent connections per client and in total (503 and
//! close), and a request rate per client (429 with Retry-After, connection kept). Loopback
//! only; every step under a timeout of a few seconds.

mod common;

use std::time::Duration;

use common::*;

/// `webpep_client_limit_refusals_total{reason="…"}` from /metrics' text.
fn refusals(p: &Proxy, reason: &str) -> u64 {
    let prefix = format!("webpep_client_limit_refusals_total{{reason=\"{reason}\"}} ");
    p.server
        .metrics_text()
        .lines()
        .find_map(|l| l.strip_prefix(&prefix).map(|v| v.parse().unwrap()))
        .expect("metric present")
}

/// A GET on `c`, answered.
async fn get(c: &mut Client, url: &str) -> Resp {
    step(c.get(url, "")).await
}

/// A new connection and the answer to its first request.
async fn connect_and_get(p: &Proxy, url: &str) -> (Client, Resp) {
    let mut c = step(Client::connect(p.addr)).await;
    let r = get(&mut c, url).await;
    (c, r)
}

#[tokio::test]
async fn connections_over_the_per_client_limit_get_503_and_others_keep_working() {
    let o = step(Origin::start(hello())).await;
    let mut cfg = test_config();
    cfg.limits.max_client_connections = 2;
    let p = step(start_proxy(cfg)).await;
    let url = format!("http://{}/x", o.addr);
    // A request on each makes sure the proxy has counted both connections.
    let (mut c1, r) = connect_and_get(&p, &url).await;
    assert_eq!(r.status, 200);
    let (mut c2, r) = connect_and_get(&p, &url).await;
    assert_eq!(r.status, 200);

    let (mut c3, r) = connect_and_get(&p, &url).await;
    assert_eq!(r.status, 503);
    assert!(
        r.text().contains("too many connections from this client"),
        "{}",
        r.text()
    );
    assert!(r.text().contains("max-client-connections"), "{}", r.text());
    assert_eq!(r.header("connection"), Some("close"));
    assert!(step(c3.closed()).await);
    assert_eq!(
        o.requests(),
        2,
        "the refused request never reached the origin"
    );

    // The first two are unaffected.
    assert_eq!(get(&mut c1, &url).await.status, 200);
    assert_eq!(get(&mut c2, &url).await.status, 200);

    // Closing one frees its place (the proxy notices the close asynchronously: retry briefly).
    drop(c1);
    let accepted = step(async {
        loop {
            let (_c, r) = connect_and_get(&p, &url).await;
            if r.status == 200 {
                return true;
            }
            assert_eq!(r.status, 503);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(accepted);
    assert!(refusals(&p, "connections") >= 1);
    assert_eq!(refusals(&p, "total"), 0);
}

#[tokio::test]
async fn at_the_total_limit_an_idle_connection_gives_way_and_busy_ones_refuse() {
    // The origin answers /slow only once the test opens its gate, so a connection asking for
    // it stays busy until then.
    let gate = Gate::new();
    let g = gate.clone();
    let o = step(Origin::start(move |r| {
        let reply = OriginReply::ok("text/plain", format!("hello {}", r.path));
        if r.path == "/slow" {
            reply.gate(&g)
        } else {
            reply
        }
    }))
    .await;
    let mut cfg = test_config();
    cfg.limits.max_connections = 1;
    let p = step(start_proxy(cfg)).await;
    let url = format!("http://{}/x", o.addr);
    let (mut c1, r) = connect_and_get(&p, &url).await;
    assert_eq!(r.status, 200);

    // c1 waits for its next request: it is closed to admit c2.
    let (mut c2, r) = connect_and_get(&p, &url).await;
    assert_eq!(r.status, 200);
    assert!(step(c1.closed()).await, "the idle connection was closed");
    assert_eq!(evictions(&p), 1);

    // c2 busy with a slow request: a third client is refused, and c2 still gets its answer.
    step(c2.send(&format!(
        "GET http://{}/slow HTTP/1.1\r\nHost: x\r\n\r\n",
        o.addr
    )))
    .await;
    // The proxy has read the request once the origin has seen it.
    o.wait_requests(3).await;
    let (mut c3, r) = connect_and_get(&p, &url).await;
    assert_eq!(r.status, 503);
    assert!(r.text().contains("max-connections"), "{}", r.text());
    assert_eq!(r.header("connection"), Some("close"));
    assert!(step(c3.closed()).await);
    gate.open();
    let slow = step(c2.read(false)).await.unwrap();
    assert_eq!((slow.status, slow.text().as_str()), (200, "hello /slow"));
    assert_eq!(refusals(&p, "total"), 1);
    assert_eq!(refusals(&p, "connections"), 0);
}

fn evictions(p: &Proxy) -> u64 {
    p.server
        .metrics_text()
        .lines()
        .find_map(|l| l.strip_prefix("webpep_connections_evicted_total "))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn requests_over_the_client_rate_get_429_and_the_connection_stays_usable() {
    let o = step(Origin::start(hello())).await;
    let mut cfg = test_config();
    cfg.limits.client_rate = 1.0;
    cfg.limits.client_burst = 2;
    let p = step(start_proxy(cfg)).await;
    let mut c = step(Client::connect(p.addr)).await;
    // Pipelined, so all three arrive well within the refill time of one token (1 s).
    let mut all = String::new();
    for i in 0..3 {
        all.push_str(&format!(
            "GET http://{}/{i} HTTP/1.1\r\nHost: x\r\n\r\n",
            o.addr
        ));
    }
    step(c.send(&all)).await;
    let r0 = step(c.read(false)).await.unwrap();
    let r1 = step(c.read(false)).await.unwrap();
    let r2 = step(c.read(false)).await.unwrap();
    assert_eq!((r0.status, r0.text().as_str()), (200, "hello /0"));
    assert_eq!((r1.status, r1.text().as_str()), (200, "hello /1"));
    assert_eq!(r2.status, 429, "{}", r2.text());
    assert!(r2.text().contains("client-rate"), "{}", r2.text());
    let retry: u64 = r2
        .header("retry-after")
        .expect("Retry-After")
        .parse()
        .unwrap();
    assert!((1..=2).contains(&retry), "{retry}");
    assert_ne!(r2.header("connection"), Some("close"));
    assert_eq!(
        o.requests(),
        2,
        "the refused request never reached the origin"
    );

    // The bucket is the client's, not the connection's.
    let (_c2, r) = connect_and_get(&p, &format!("http://{}/other", o.addr)).await;
    assert_eq!(r.status, 429);

    // After waiting as told, the same connection is served again.
    tokio::time::sleep(Duration::from_secs(retry)).await;
    let r = get(&mut c, &format!("http://{}/later", o.addr)).await;
    assert_eq!((r.status, r.text().as_str()), (200, "hello /later"));
    assert_eq!(refusals(&p, "rate"), 2);
}

#[tokio::test]
async fn no_rate_limit_by_default() {
    let o = step(Origin::start(hello())).await;
    let p = step(start_proxy(test_config())).await;
    let mut c = step(Client::connect(p.addr)).await;
    for i in 0..20 {
        let r = get(&mut c, &format!("http://{}/{i}", o.addr)).await;
        assert_eq!(r.status, 200);
    }
    assert_eq!(refusals(&p, "rate"), 0);
}
