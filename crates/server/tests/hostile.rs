//! The edge proxy under hostile origins and clients (issue 30): slow, resetting, lying and
//! oversized peers scripted on loopback (`common/hostile.rs`, reusable by other front ends),
//! each test ending with a well-behaved client served ([`assert_still_serves`]). Small limits
//! and timeouts keep every test within seconds; deadlines are failure guards only, the
//! assertions are about behaviour (statuses, bytes, closes, what the origin saw).
//!
//! The tests of the `[limits]` budgets and deadlines (buffered-body budget, header and body
//! deadlines, buffer-timeout) are in `hostile_limits.rs`.

mod common;
#[path = "common/hostile.rs"]
mod hostile;

use std::time::Duration;

use common::{start_proxy, test_config, Proxy};
use hostile::*;
use webpep_server::config::Secs;

/// An unlabelled metric of the in-process proxy.
fn metric(p: &Proxy, name: &str) -> Option<f64> {
    metric_value(&p.server.metrics_text(), name)
}

// --- 1. Origins that reset an upload -----------------------------------------------------

/// An origin that reads the head and resets while the proxy sends an 8 MB body: 502 (or the
/// connection closes), never a crash or a stuck proxy. (The CLI test covers the binary,
/// where the reset used to raise SIGPIPE.)
#[tokio::test]
async fn an_origin_resetting_an_upload_mid_body_gets_502_and_the_proxy_keeps_serving() {
    bounded(async {
        let good = good_origin().await;
        let bad = upload_resetting_origin().await;
        let p = start_proxy(test_config()).await;
        for i in 0..3 {
            let out = upload(p.addr, &bad.url(&format!("/up{i}")), 8 << 20, DEADLINE).await;
            assert!(
                out.status() == Some(502) || (out.response.is_none() && out.end.closed()),
                "upload {i}: {:?} {:?}: {}",
                out.status(),
                out.end,
                out.text()
            );
        }
        assert!(bad.seen.heads() >= 1, "the origin saw the uploads");
        assert_still_serves(p.addr, good.addr).await;
    })
    .await
}

// --- 4. Fair admission at max-connections --------------------------------------------------

/// At `max-connections`, a new client is admitted by closing the connection idle longest
/// (waiting for its next request, or trickling a head), not refused.
#[tokio::test]
async fn at_max_connections_an_idle_connection_is_evicted_for_a_new_client() {
    bounded(async {
        let good = good_origin().await;
        let mut cfg = test_config();
        cfg.limits.max_connections = 20;
        cfg.limits.max_client_connections = 100;
        let p = start_proxy(cfg).await;
        let mut held = Vec::new();
        for _ in 0..10 {
            held.push(
                idle_after_request(p.addr, good.addr)
                    .await
                    .expect("idle connection"),
            );
        }
        for _ in 0..10 {
            held.push(
                partial_head(p.addr, &good.url("/slow"))
                    .await
                    .expect("slowloris"),
            );
        }
        wait_until("the proxy to count 20 connections", DEADLINE, || {
            metric(&p, "webpep_active_connections") == Some(20.0)
        })
        .await;
        // Watch the 20 for a close.
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        for (i, mut c) in held.into_iter().enumerate() {
            let tx = tx.clone();
            tokio::spawn(async move {
                let end = c.wait_closed(3 * DEADLINE).await;
                if end.closed() {
                    let _ = tx.send(i);
                }
            });
        }
        assert_still_serves(p.addr, good.addr).await;
        let evicted = within("an old connection to be closed", DEADLINE, rx.recv()).await;
        assert!(evicted.is_some());
        assert!(
            metric(&p, "webpep_connections_evicted_total").is_some_and(|v| v >= 1.0),
            "webpep_connections_evicted_total: {:?}",
            metric(&p, "webpep_connections_evicted_total")
        );
    })
    .await
}

/// With every connection busy (a request in flight), a new one is refused with 503.
#[tokio::test]
async fn at_max_connections_with_every_connection_busy_a_new_one_gets_503() {
    bounded(async {
        let hang = hanging_origin().await;
        let mut cfg = test_config();
        cfg.limits.max_connections = 5;
        cfg.limits.max_client_connections = 100;
        let p = start_proxy(cfg).await;
        let mut busy = Vec::new();
        for i in 0..5 {
            let mut c = RawClient::connect(p.addr).await.unwrap();
            c.send(get_head(&hang.url(&format!("/busy{i}"))).as_bytes())
                .await
                .unwrap();
            busy.push(c);
        }
        hang.seen.wait_heads(5).await;
        let out = raw_request(p.addr, get_head(&hang.url("/new")).as_bytes(), DEADLINE).await;
        assert_eq!(out.status(), Some(503), "{:?}: {}", out.end, out.text());
        assert!(out.end.closed(), "{:?}", out.end);
        assert_eq!(
            hang.seen.heads(),
            5,
            "the refused request never reached the origin"
        );
        drop(busy);
    })
    .await
}

// --- 5. Streamed responses (over max-body-transform) ----------------------------------------

fn streaming_config() -> webpep_server::ServerConfig {
    let mut cfg = test_config();
    cfg.limits.max_body_transform = 64 * 1024;
    cfg
}

/// The origin declares 2 MB and closes after 1 MB: the client gets the declared
/// Content-Length and a connection that closes short of it, never a clean complete body.
#[tokio::test]
async fn a_streamed_response_cut_short_keeps_its_length_and_the_client_sees_it_short() {
    bounded(async {
        let good = good_origin().await;
        let o = short_body_origin(2_000_000, 1_000_000, Then::Close).await;
        let p = start_proxy(streaming_config()).await;
        let mut c = RawClient::connect(p.addr).await.unwrap();
        c.send(get_head(&o.url("/short")).as_bytes()).await.unwrap();
        let head = c.read_head(DEADLINE).await.expect("a response head");
        assert_eq!(head.status, 200);
        let (body, end) = c.read_body(&head, false, usize::MAX, DEADLINE).await;
        assert_eq!(
            head.header("content-length"),
            Some("2000000"),
            "the origin's length: {:?}",
            head.headers
        );
        assert!(end.closed(), "{end:?}");
        assert!(body.len() < 2_000_000, "{} bytes", body.len());
        assert_still_serves(p.addr, good.addr).await;
    })
    .await
}

/// An HTTP/1.0 client gets a close-delimited body; when the (chunked) origin breaks off, the
/// proxy resets the connection so that the truncation is not a clean end.
#[tokio::test]
async fn a_close_delimited_stream_broken_off_by_the_origin_resets_the_client() {
    bounded(async {
        let good = good_origin().await;
        // The origin breaks off once the client has read everything: the proxy has nothing
        // left to send when it learns of the break, so a FIN would go out at once (the case
        // where a close that is not a reset shows).
        let (release, released) = tokio::sync::watch::channel(false);
        let o = chunked_breakoff_origin(256 * 1024, released).await;
        let p = start_proxy(streaming_config()).await;
        let mut c = RawClient::connect(p.addr).await.unwrap();
        c.send(format!("GET {} HTTP/1.0\r\n\r\n", o.url("/broken")).as_bytes())
            .await
            .unwrap();
        let head = c.read_head(DEADLINE).await.expect("a response head");
        assert_eq!(head.status, 200);
        assert_eq!(head.header("content-length"), None);
        let (body, end) = c.read_body(&head, false, 256 * 1024, DEADLINE).await;
        assert_eq!(
            (body.len(), end),
            (256 * 1024, End::More),
            "all the origin sent"
        );
        release.send_replace(true);
        let (rest, end) = c.read_body(&head, false, usize::MAX, DEADLINE).await;
        assert!(rest.is_empty(), "{} bytes more", rest.len());
        assert_eq!(end, End::Reset);
        assert_still_serves(p.addr, good.addr).await;
    })
    .await
}

/// The origin sends part of a streamed body and stalls: the client's connection is closed
/// after `origin.response-timeout` without progress.
#[tokio::test]
async fn a_streamed_response_that_stalls_is_closed_after_the_response_timeout() {
    bounded(async {
        let good = good_origin().await;
        let o = short_body_origin(2_000_000, 200_000, Then::Hold).await;
        let mut cfg = streaming_config();
        cfg.origin.response_timeout = Secs(Duration::from_secs(1));
        let p = start_proxy(cfg).await;
        let mut c = RawClient::connect(p.addr).await.unwrap();
        c.send(get_head(&o.url("/stall")).as_bytes()).await.unwrap();
        let head = c.read_head(DEADLINE).await.expect("a response head");
        assert_eq!(head.status, 200);
        let (body, end) = c.read_body(&head, false, usize::MAX, DEADLINE).await;
        assert!(end.closed(), "{} bytes, then {end:?}", body.len());
        assert!(body.len() < 2_000_000);
        assert_still_serves(p.addr, good.addr).await;
    })
    .await
}

// --- 6. Content-Length with Transfer-Encoding ------------------------------------------------

/// `Content-Length: 4` and `Transfer-Encoding: chunked` together: chunked wins, the origin
/// gets the whole 47-byte body with a correct length, and the client's connection is closed
/// after the response (a request smuggling attempt is not kept around).
#[tokio::test]
async fn content_length_with_chunked_forwards_the_whole_body_and_closes() {
    bounded(async {
    let good = good_origin().await;
    let p = start_proxy(test_config()).await;
    let body = b"a body of forty-seven bytes, sent in two chunks";
    assert_eq!(body.len(), 47);
    let (a, b) = body.split_at(20);
    let raw = format!(
        "POST {} HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{}\r\n{:x}\r\n{}\r\n0\r\n\r\n",
        good.url("/smuggle"),
        a.len(),
        std::str::from_utf8(a).unwrap(),
        b.len(),
        std::str::from_utf8(b).unwrap(),
    );
    let out = raw_request(p.addr, raw.as_bytes(), DEADLINE).await;
    assert_eq!(out.status(), Some(200), "{:?}: {}", out.end, out.text());
    let seen = good.seen.requests();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].body, body);
    assert!(
        seen[0]
            .all("content-length")
            .iter()
            .all(|v| v.trim() == "47"),
        "{:?}",
        seen[0].headers
    );
    assert!(out.end.closed(), "the connection stays open: {:?}", out.end);
    assert_still_serves(p.addr, good.addr).await;
    })
    .await
}

// --- 8. Cache hits do not transcode again ----------------------------------------------------

/// A 1x1 grey PNG that the transcoder (at the proxy's default settings) leaves unchanged:
/// its own output, fed back until it finds nothing smaller.
fn unshrinkable_png() -> Vec<u8> {
    use webpep_optimize::transcode::{transcode, Outcome, TranscodeConfig};
    let img = image::GrayImage::from_pixel(1, 1, image::Luma([128]));
    let mut png = Vec::new();
    img.write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
        .unwrap();
    let cfg = TranscodeConfig::default();
    for _ in 0..4 {
        match transcode(&png, Some("image/png"), None, &cfg) {
            Outcome::Unchanged(_) => return png,
            Outcome::Transcoded {
                body,
                content_type: "image/png",
                ..
            } => png = body,
            Outcome::Transcoded { content_type, .. } => panic!("became {content_type}"),
        }
    }
    panic!("the transcoder keeps shrinking a 1x1 PNG");
}

/// An image the transcoder leaves unchanged is not transcoded again on a cache hit.
#[tokio::test]
async fn a_cache_hit_does_not_transcode_an_unshrinkable_image_again() {
    bounded(async {
        let good = good_origin().await;
        let png = unshrinkable_png();
        let o = body_origin(
            &[
                ("Content-Type", "image/png"),
                ("Cache-Control", "max-age=600"),
            ],
            &png,
        )
        .await;
        let mut cfg = test_config();
        cfg.cache.enabled = true;
        cfg.transcode.enabled = true;
        cfg.compress.enabled = true;
        let p = start_proxy(cfg).await;
        let get = |path: &str| {
            let raw = format!(
                "GET {} HTTP/1.1\r\nHost: x\r\nAccept: image/png,image/*;q=0.8,*/*;q=0.5\r\n\r\n",
                o.url(path)
            );
            let addr = p.addr;
            async move { raw_request(addr, raw.as_bytes(), DEADLINE).await }
        };
        let first = get("/noise.png").await;
        assert_eq!(first.status(), Some(200));
        assert_eq!(
            first.response.as_ref().unwrap().body,
            png,
            "precondition: the transcoder left the image unchanged"
        );
        let runs = metric(&p, "webpep_transforms_run_total");
        assert!(
            runs.is_some_and(|v| v >= 1.0),
            "webpep_transforms_run_total after the miss: {runs:?}"
        );
        let second = get("/noise.png").await;
        assert_eq!(second.status(), Some(200));
        assert_eq!(second.response.as_ref().unwrap().body, png);
        assert_eq!(o.seen.count(), 1, "the second one is a cache hit");
        assert_eq!(
            metric(&p, "webpep_transforms_run_total"),
            runs,
            "the hit ran the transforms again"
        );
        assert_still_serves(p.addr, good.addr).await;
    })
    .await
}

// --- 9. Protocol corners ---------------------------------------------------------------------

/// `Expect: 100-continue`: `100 Continue` before the body is sent, then the final response.
#[tokio::test]
async fn expect_100_continue_gets_100_before_the_body() {
    bounded(async {
        let good = good_origin().await;
        let p = start_proxy(test_config()).await;
        let mut c = RawClient::connect(p.addr).await.unwrap();
        c.send(
            format!(
                "POST {} HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n",
                good.url("/continue")
            )
            .as_bytes(),
        )
        .await
        .unwrap();
        let interim = c
            .read_head(DEADLINE)
            .await
            .expect("100 Continue before the body");
        assert_eq!(interim.status, 100);
        c.send(b"hello").await.unwrap();
        let r = c.read_response(DEADLINE).await.expect("the final response");
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.text(), good_body("/continue"));
        assert_eq!(good.seen.last().unwrap().body, b"hello");
        assert_still_serves(p.addr, good.addr).await;
    })
    .await
}

/// `Content-Length: 5, 5` (a repeated equal value) reaches the origin as `5`.
#[tokio::test]
async fn a_repeated_equal_content_length_reaches_the_origin_as_one_value() {
    bounded(async {
        let good = good_origin().await;
        let p = start_proxy(test_config()).await;
        let raw = format!(
            "POST {} HTTP/1.1\r\nHost: x\r\nContent-Length: 5, 5\r\n\r\nhello",
            good.url("/cl")
        );
        let out = raw_request(p.addr, raw.as_bytes(), DEADLINE).await;
        assert_eq!(out.status(), Some(200), "{}", out.text());
        let seen = good.seen.last().unwrap();
        assert_eq!(seen.all("content-length"), vec!["5"], "{:?}", seen.headers);
        assert_eq!(seen.body, b"hello");
        assert_still_serves(p.addr, good.addr).await;
    })
    .await
}

/// Two Host fields: 400, and nothing reaches the origin (absolute-form and origin-form).
#[tokio::test]
async fn two_host_headers_get_400() {
    bounded(async {
        let good = good_origin().await;
        let p = start_proxy(test_config()).await;
        for raw in [
            format!(
                "GET {} HTTP/1.1\r\nHost: {}\r\nHost: other.test\r\n\r\n",
                good.url("/two"),
                good.addr
            ),
            format!(
                "GET /two HTTP/1.1\r\nHost: {}\r\nHost: other.test\r\n\r\n",
                good.addr
            ),
        ] {
            let out = raw_request(p.addr, raw.as_bytes(), DEADLINE).await;
            assert_eq!(out.status(), Some(400), "{raw:?}: {}", out.text());
        }
        assert_eq!(good.seen.count(), 0);
        assert_still_serves(p.addr, good.addr).await;
    })
    .await
}

/// TRACE and OPTIONS with `Max-Forwards: 0` are answered by the proxy itself; with
/// `Max-Forwards: 3` they are forwarded with `Max-Forwards: 2`.
#[tokio::test]
async fn max_forwards_zero_is_answered_by_the_proxy_and_otherwise_decremented() {
    bounded(async {
        let good = good_origin().await;
        let p = start_proxy(test_config()).await;
        for method in ["TRACE", "OPTIONS"] {
            let raw = format!(
                "{method} {} HTTP/1.1\r\nHost: x\r\nMax-Forwards: 0\r\n\r\n",
                good.url("/mf0")
            );
            let out = raw_request(p.addr, raw.as_bytes(), DEADLINE).await;
            let status = out.status().expect("an answer");
            // The proxy is the final recipient (RFC 9110 §7.6.2): its own answer, not an error
            // about a missing origin.
            assert!(status < 500, "{method}: {status}: {}", out.text());
            if method == "OPTIONS" {
                assert_eq!(status, 200, "{}", out.text());
            }
            assert_eq!(
                good.seen.count(),
                0,
                "{method} with Max-Forwards: 0 went on"
            );
        }
        for method in ["TRACE", "OPTIONS"] {
            let raw = format!(
                "{method} {} HTTP/1.1\r\nHost: x\r\nMax-Forwards: 3\r\n\r\n",
                good.url("/mf3")
            );
            let out = raw_request(p.addr, raw.as_bytes(), DEADLINE).await;
            assert_eq!(out.status(), Some(200), "{method}: {}", out.text());
            let seen = good.seen.last().expect("forwarded");
            assert_eq!(seen.method, method);
            assert_eq!(seen.all("max-forwards"), vec!["2"], "{:?}", seen.headers);
        }
        assert_still_serves(p.addr, good.addr).await;
    })
    .await
}

/// A `101 Switching Protocols` nobody asked for is the origin's error: 502.
#[tokio::test]
async fn an_unsolicited_101_from_the_origin_gets_502() {
    bounded(async {
        let good = good_origin().await;
        let o = switching_protocols_origin().await;
        let p = start_proxy(test_config()).await;
        let out = raw_request(p.addr, get_head(&o.url("/plain")).as_bytes(), DEADLINE).await;
        assert_eq!(out.status(), Some(502), "{:?}: {}", out.end, out.text());
        assert_still_serves(p.addr, good.addr).await;
    })
    .await
}

/// An origin that never answers: 504 naming the configured response timeout.
#[tokio::test]
async fn a_hanging_origin_gets_504_naming_the_response_timeout() {
    bounded(async {
        let good = good_origin().await;
        let hang = hanging_origin().await;
        let mut cfg = test_config();
        cfg.origin.response_timeout = Secs(Duration::from_secs(1));
        let p = start_proxy(cfg).await;
        let out = raw_request(p.addr, get_head(&hang.url("/never")).as_bytes(), DEADLINE).await;
        assert_eq!(out.status(), Some(504), "{:?}: {}", out.end, out.text());
        let text = out.text();
        assert!(
            text.contains("1s") || text.contains("1 s"),
            "does not name the 1 s response timeout: {text}"
        );
        assert_still_serves(p.addr, good.addr).await;
    })
    .await
}

// --- Regression guards: what already holds ---------------------------------------------------

/// Malformed request lines and noise: 400 and the connection closed.
#[tokio::test]
async fn malformed_requests_and_garbage_get_400_and_close() {
    bounded(async {
        let good = good_origin().await;
        let p = start_proxy(test_config()).await;
        let mut inputs: Vec<Vec<u8>> = vec![
            b"GARBAGE\r\n\r\n".to_vec(),
            b"GET\r\n\r\n".to_vec(),
            b"GET http://a.test/ HTTP/9.9\r\n\r\n".to_vec(),
            b"G\x00T / HTTP/1.1\r\n\r\n".to_vec(),
        ];
        let mut noise = garbage(2048, 7);
        noise.extend_from_slice(b"\r\n\r\n");
        inputs.push(noise);
        for raw in &inputs {
            let out = raw_request(p.addr, raw, DEADLINE).await;
            assert_eq!(
                out.status(),
                Some(400),
                "{:?}: {:?}",
                String::from_utf8_lossy(&raw[..raw.len().min(40)]),
                out.end
            );
            assert!(out.end.closed(), "{:?}", out.end);
        }
        assert_eq!(good.seen.count(), 0);
        assert_still_serves(p.addr, good.addr).await;
    })
    .await
}

/// A header block over `max-header-bytes`: 431.
#[tokio::test]
async fn a_header_block_over_the_limit_gets_431() {
    bounded(async {
        let good = good_origin().await;
        let mut cfg = test_config();
        cfg.limits.max_header_bytes = 4096;
        let p = start_proxy(cfg).await;
        let raw = format!(
            "GET {} HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
            good.url("/big"),
            "a".repeat(8192)
        );
        let out = raw_request(p.addr, raw.as_bytes(), DEADLINE).await;
        assert_eq!(out.status(), Some(431), "{}", out.text());
        assert!(out.end.closed(), "{:?}", out.end);
        assert_eq!(good.seen.count(), 0);
        assert_still_serves(p.addr, good.addr).await;
    })
    .await
}

/// A gzip of 1 GiB of zeros with compression on: the proxy's memory stays bounded (this
/// process's peak RSS grows by far less than the bomb's size) and clients are served.
#[tokio::test]
async fn a_gzip_bomb_from_the_origin_is_bounded_and_the_client_served() {
    bounded(async {
        let good = good_origin().await;
        let bomb = gzip_zero_bomb();
        let o = body_origin(
            &[("Content-Type", "text/html"), ("Content-Encoding", "gzip")],
            &bomb,
        )
        .await;
        let mut cfg = test_config();
        cfg.compress.enabled = true;
        let p = start_proxy(cfg).await;
        let hwm0 = proc_status_kb(0, "VmHWM").expect("VmHWM");
        for ae in ["gzip, br", "gzip"] {
            let raw = format!(
                "GET {} HTTP/1.1\r\nHost: x\r\nAccept-Encoding: {ae}\r\n\r\n",
                o.url("/bomb.html")
            );
            let out = raw_request(p.addr, raw.as_bytes(), 2 * DEADLINE).await;
            let r = out.response.expect("a response");
            assert_eq!(r.status, 200, "{ae}");
            assert_eq!(r.end, End::Complete, "{ae}");
            assert_eq!(r.header("content-encoding"), Some("gzip"), "{ae}");
            assert!(r.body == bomb, "{ae}: the body changed");
        }
        let grew_mb = proc_status_kb(0, "VmHWM").unwrap().saturating_sub(hwm0) / 1024;
        assert!(grew_mb < 512, "peak RSS grew by {grew_mb} MB");
        assert_still_serves(p.addr, good.addr).await;
    })
    .await
}

/// An origin response with two different Content-Lengths: 502.
#[tokio::test]
async fn an_origin_with_two_content_lengths_gets_502() {
    bounded(async {
        let good = good_origin().await;
        let o = two_lengths_origin().await;
        let p = start_proxy(test_config()).await;
        let out = raw_request(p.addr, get_head(&o.url("/lying")).as_bytes(), DEADLINE).await;
        assert_eq!(out.status(), Some(502), "{:?}: {}", out.end, out.text());
        assert_still_serves(p.addr, good.addr).await;
    })
    .await
}

/// An origin response head of 1 MB: 502.
#[tokio::test]
async fn an_origin_with_an_oversized_head_gets_502() {
    bounded(async {
        let good = good_origin().await;
        let o = oversized_head_origin(1 << 20).await;
        let p = start_proxy(test_config()).await;
        let out = raw_request(p.addr, get_head(&o.url("/fat")).as_bytes(), DEADLINE).await;
        assert_eq!(out.status(), Some(502), "{:?}: {}", out.end, out.text());
        assert_still_serves(p.addr, good.addr).await;
    })
    .await
}

/// Clients that reset mid-upload, announce or send more than `max-request-body`: the former
/// never reach the origin, the latter get 413 and are closed; others are served.
#[tokio::test]
async fn resetting_and_oversized_uploads_leave_the_proxy_serving() {
    bounded(async {
        let good = good_origin().await;
        let mut cfg = test_config();
        cfg.limits.max_request_body = 1 << 20;
        let p = start_proxy(cfg).await;
        for i in 0..5 {
            reset_mid_upload(p.addr, &good.url(&format!("/reset{i}")), 900_000, 300_000).await;
        }
        let out = upload(p.addr, &good.url("/huge"), 1 << 30, DEADLINE).await;
        assert_eq!(out.status(), Some(413), "{:?}: {}", out.end, out.text());
        assert!(out.end.closed(), "{:?}", out.end);
        let out = chunked_upload(p.addr, &good.url("/huge-chunked"), 4 << 20, DEADLINE).await;
        assert_eq!(out.status(), Some(413), "{:?}: {}", out.end, out.text());
        assert!(out.end.closed(), "{:?}", out.end);
        assert_still_serves(p.addr, good.addr).await;
        let paths: Vec<String> = good
            .seen
            .requests()
            .iter()
            .map(|r| r.target.clone())
            .collect();
        assert_eq!(
            paths.len(),
            1,
            "only the well-behaved request got through: {paths:?}"
        );
    })
    .await
}

/// Requests stuck on an origin that never answers do not hold up others.
#[tokio::test]
async fn requests_stuck_on_a_hanging_origin_do_not_block_others() {
    bounded(async {
        let good = good_origin().await;
        let hang = hanging_origin().await;
        let p = start_proxy(test_config()).await;
        let mut stuck = Vec::new();
        for i in 0..30 {
            let mut c = RawClient::connect(p.addr).await.unwrap();
            c.send(get_head(&hang.url(&format!("/stuck{i}"))).as_bytes())
                .await
                .unwrap();
            stuck.push(c);
        }
        hang.seen.wait_heads(30).await;
        for _ in 0..3 {
            assert_still_serves(p.addr, good.addr).await;
        }
        drop(stuck);
    })
    .await
}
