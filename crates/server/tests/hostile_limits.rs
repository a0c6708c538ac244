//! The edge proxy under hostile peers (issue 30), the `[limits]` budgets and deadlines: the buffered-body budget (`max-buffered-bytes`,
//! `max-client-buffered-bytes`), request deadlines (`header-timeout`, `body-min-rate`) and
//! the response buffering deadline (`buffer-timeout`). Same harness and style as
//! `hostile.rs`.

mod common;
#[path = "common/hostile.rs"]
mod hostile;

use std::net::IpAddr;
use std::time::Duration;

use common::{start_proxy, test_config, Proxy};
use hostile::*;
use webpep_server::config::Secs;

/// `webpep_buffered_bytes` at the proxy's admin `/metrics`.
async fn buffered_bytes(p: &Proxy) -> f64 {
    let text = fetch_metrics(p.admin).await.expect("/metrics");
    metric_value(&text, "webpep_buffered_bytes").expect("webpep_buffered_bytes on /metrics")
}

/// Waits (under a failure guard) until the gauge satisfies `ok`.
async fn wait_buffered(p: &Proxy, what: &str, ok: impl Fn(f64) -> bool) {
    within(what, DEADLINE, async {
        while !ok(buffered_bytes(p).await) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
}

// --- 2. The buffered-body budget --------------------------------------------------------------

/// A client holding 2 MiB of upload in the proxy (its origin reads slowly) has 1 MiB left of
/// its 3 MiB budget: a second 2 MiB upload gets 503 naming the budget and is closed; once the
/// first finishes the memory is back and a new upload goes through.
#[tokio::test]
async fn an_upload_over_the_clients_buffer_budget_gets_503_until_memory_is_returned() {
    bounded(async {
        let good = good_origin().await;
        let (slow, gate) = gated_origin().await;
        let mut cfg = test_config();
        cfg.limits.max_request_body = 3 << 20;
        cfg.limits.max_client_buffered_bytes = 3 << 20;
        let p = start_proxy(cfg).await;
        let (addr, url) = (p.addr, slow.url("/first"));
        let first = tokio::spawn(async move { upload(addr, &url, 2 << 20, 3 * DEADLINE).await });
        slow.seen.wait_heads(1).await;
        wait_buffered(&p, "the first upload to be held", |b| b >= (2 << 20) as f64).await;

        let second = upload(p.addr, &slow.url("/second"), 2 << 20, DEADLINE).await;
        assert_eq!(
            second.status(),
            Some(503),
            "{:?}: {}",
            second.end,
            second.text()
        );
        assert!(second.text().contains("buffered"), "{}", second.text());
        assert!(second.end.closed(), "{:?}", second.end);
        assert_eq!(
            slow.seen.heads(),
            1,
            "the refused upload reached the origin"
        );

        gate.open();
        let first = within("the first upload", 3 * DEADLINE, first)
            .await
            .unwrap();
        assert_eq!(
            first.status(),
            Some(200),
            "{:?}: {}",
            first.end,
            first.text()
        );
        assert_eq!(slow.seen.requests()[0].body.len(), 2 << 20);

        let third = upload(p.addr, &slow.url("/third"), 2 << 20, DEADLINE).await;
        assert_eq!(
            third.status(),
            Some(200),
            "{:?}: {}",
            third.end,
            third.text()
        );
        wait_buffered(&p, "the buffered bytes to return to 0", |b| b == 0.0).await;
        assert_still_serves(p.addr, good.addr).await;
    })
    .await
}

/// The global budget holds over client addresses: with 2 MiB of 127.0.0.1's upload held and
/// 3 MiB in all, 127.0.0.2's 2 MiB upload (within its own budget) gets 503.
#[tokio::test]
async fn the_global_buffer_budget_covers_every_client() {
    bounded(async {
        let good = good_origin().await;
        let (slow, gate) = gated_origin().await;
        let mut cfg = test_config();
        cfg.limits.max_request_body = 3 << 20;
        cfg.limits.max_client_buffered_bytes = 3 << 20;
        cfg.limits.max_buffered_bytes = 3 << 20;
        let p = start_proxy(cfg).await;
        let (addr, url) = (p.addr, slow.url("/first"));
        let first = tokio::spawn(async move { upload(addr, &url, 2 << 20, 3 * DEADLINE).await });
        slow.seen.wait_heads(1).await;
        wait_buffered(&p, "the first upload to be held", |b| b >= (2 << 20) as f64).await;

        let other: IpAddr = "127.0.0.2".parse().unwrap();
        let c = RawClient::connect_from(other, p.addr).await.unwrap();
        let second = upload_on(c, &slow.url("/second"), 2 << 20, DEADLINE).await;
        assert_eq!(
            second.status(),
            Some(503),
            "{:?}: {}",
            second.end,
            second.text()
        );
        assert!(second.text().contains("buffered"), "{}", second.text());
        assert!(second.end.closed(), "{:?}", second.end);

        gate.open();
        let first = within("the first upload", 3 * DEADLINE, first)
            .await
            .unwrap();
        assert_eq!(
            first.status(),
            Some(200),
            "{:?}: {}",
            first.end,
            first.text()
        );
        let c = RawClient::connect_from(other, p.addr).await.unwrap();
        let third = upload_on(c, &slow.url("/third"), 2 << 20, DEADLINE).await;
        assert_eq!(
            third.status(),
            Some(200),
            "{:?}: {}",
            third.end,
            third.text()
        );
        wait_buffered(&p, "the buffered bytes to return to 0", |b| b == 0.0).await;
        assert_still_serves(p.addr, good.addr).await;
    })
    .await
}

// --- 3. Request deadlines -----------------------------------------------------------------------

fn deadline_config() -> webpep_server::ServerConfig {
    let mut cfg = test_config();
    cfg.limits.header_timeout = Secs(Duration::from_secs(1));
    cfg.limits.body_min_rate = 256;
    cfg
}

/// A head trickled a byte every 300 ms: 408 and closed once `header-timeout` (1 s) has
/// passed since its first byte (the idle timeout, 120 s, never comes into it); a
/// well-behaved client is served meanwhile.
#[tokio::test]
async fn a_head_trickled_slowly_gets_408_after_the_header_timeout() {
    bounded(async {
        let good = good_origin().await;
        let p = start_proxy(deadline_config()).await;
        let url = good.url("/slowloris");
        let (slow, ()) = tokio::join!(
            slowloris_head(p.addr, &url, Duration::from_millis(300), DEADLINE),
            async {
                // Once the slow client's connection is in.
                wait_until("the slow connection accepted", DEADLINE, || {
                    common::metric(&p, "webpep_connections_total") >= 1
                })
                .await;
                assert_still_serves(p.addr, good.addr).await;
            }
        );
        assert_eq!(slow.status(), Some(408), "{:?}: {}", slow.end, slow.text());
        assert!(slow.end.closed(), "{:?}", slow.end);
        assert!(good
            .seen
            .requests()
            .iter()
            .all(|r| r.path() != "/slowloris"));
        assert_still_serves(p.addr, good.addr).await;
    })
    .await
}

/// A body of 100000 bytes at 10 bytes/s: cut off with 408 once the grace (`header-timeout`)
/// is over and its average is below `body-min-rate`; a well-behaved client is served
/// meanwhile, and the origin never sees the upload.
#[tokio::test]
async fn a_body_below_the_minimum_rate_gets_408() {
    bounded(async {
        let good = good_origin().await;
        let p = start_proxy(deadline_config()).await;
        let url = good.url("/trickled-upload");
        let (slow, ()) = tokio::join!(
            slow_body(
                p.addr,
                &url,
                100_000,
                1,
                Duration::from_millis(100),
                DEADLINE,
            ),
            async {
                // Once the slow client's connection is in.
                wait_until("the slow connection accepted", DEADLINE, || {
                    common::metric(&p, "webpep_connections_total") >= 1
                })
                .await;
                assert_still_serves(p.addr, good.addr).await;
            }
        );
        assert_eq!(slow.status(), Some(408), "{:?}: {}", slow.end, slow.text());
        assert!(slow.end.closed(), "{:?}", slow.end);
        assert!(good
            .seen
            .requests()
            .iter()
            .all(|r| r.path() != "/trickled-upload"));
        assert_still_serves(p.addr, good.addr).await;
    })
    .await
}

// --- 7. Slow responses are not buffered whole ----------------------------------------------------

/// A text response trickling at 6 bytes/s (180 bytes: 30 s whole) is not held back until it
/// ends: after `buffer-timeout` (500 ms) the proxy sends what it has and streams the rest, so
/// the client has its first bytes long before the end (guard: 10 s). With a length, chunked,
/// and delimited by the close.
#[tokio::test]
async fn a_trickling_response_is_streamed_after_the_buffer_timeout() {
    bounded(async {
        let good = good_origin().await;
        let mut cfg = test_config();
        cfg.compress.enabled = true;
        cfg.limits.buffer_timeout = Secs(Duration::from_millis(500));
        let p = start_proxy(cfg).await;
        for framing in [Framing::Length, Framing::Chunked, Framing::Close] {
            let o = trickle_origin("text/plain", 180, 1, Duration::from_millis(167), framing).await;
            let mut c = RawClient::connect(p.addr).await.unwrap();
            c.send(get_head(&o.url("/trickle")).as_bytes())
                .await
                .unwrap();
            let head = c.read_head(DEADLINE).await.expect("a response head");
            assert_eq!(head.status, 200, "{framing:?}");
            let (body, end) = c.read_body(&head, false, 1, DEADLINE).await;
            assert!(
                !body.is_empty() && end == End::More,
                "{framing:?}: {} bytes, {end:?}",
                body.len()
            );
            assert_eq!(body, pattern(body.len()), "{framing:?}");
            if framing == Framing::Length {
                assert_eq!(head.header("content-length"), Some("180"));
            }
        }
        assert_still_serves(p.addr, good.addr).await;
    })
    .await
}

/// `text/event-stream` is streamed at once, however long `buffer-timeout` is (30 s here).
#[tokio::test]
async fn an_event_stream_is_streamed_at_once() {
    bounded(async {
        let good = good_origin().await;
        let o = event_stream_origin(60, Duration::from_secs(1)).await;
        let mut cfg = test_config();
        cfg.compress.enabled = true;
        cfg.limits.buffer_timeout = Secs(Duration::from_secs(30));
        let p = start_proxy(cfg).await;
        let mut c = RawClient::connect(p.addr).await.unwrap();
        c.send(get_head(&o.url("/events")).as_bytes())
            .await
            .unwrap();
        let head = c.read_head(DEADLINE).await.expect("a response head");
        assert_eq!(head.status, 200);
        assert_eq!(head.header("content-type"), Some("text/event-stream"));
        let first = b"data: 1\n\n";
        let (body, end) = c.read_body(&head, false, first.len(), DEADLINE).await;
        assert!(
            body.starts_with(first),
            "{:?}, {end:?}",
            String::from_utf8_lossy(&body)
        );
        assert_still_serves(p.addr, good.addr).await;
    })
    .await
}
