#![no_main]
//! Requests as a server reads them, with the one HTTP/1 codec (`webpep_http1`, the edge
//! proxy's and the replay server's): arbitrary bytes → head parse, body framing, the proxy's
//! mode classification, chunked decoding, keep-alive, hop-by-hop stripping (in place and as
//! the cache's copy). Nothing may panic, and the parser's answers must be consistent with its
//! limits.

use libfuzzer_sys::fuzz_target;
use webpep_http1::{self as http1, BodyFraming, ChunkedDecoder};
use webpep_server::mode::{classify, ModeContext};

fuzz_target!(|data: &[u8]| {
    let max = 64 + (data.first().copied().unwrap_or(0) as usize) * 16;
    match http1::parse_request_head(data, max) {
        Ok(Some(head)) => {
            assert!(head.head_len <= data.len());
            assert!(head.head_len <= max);
            let ctx = ModeContext {
                local: "127.0.0.1:3128".parse().unwrap(),
                proxy_authority: Some("proxy.test:3128"),
            };
            let _ = classify(&head.method, &head.target, &head.headers, &ctx);
            let _ = http1::request_keeps_alive(head.version, &head.headers);
            let rest = &data[head.head_len..];
            if let Ok(BodyFraming::Chunked) = http1::request_body_framing(&head.headers) {
                let mut dec = ChunkedDecoder::new(4096);
                let mut out = Vec::new();
                if let Ok(n) = dec.decode(rest, &mut out) {
                    assert!(n <= rest.len());
                    assert!(out.len() <= 4096);
                }
            }
            let mut h = head.headers.clone();
            http1::strip_hop_by_hop(&mut h);
            assert!(!h.contains_key("connection") && !h.contains_key("transfer-encoding"));
            let copy = http1::without_hop_by_hop(&head.headers);
            assert_eq!(copy.len(), h.len(), "both strips remove the same fields");
            assert!(copy.keys().all(|k| h.contains_key(k)));
        }
        Ok(None) => assert!(data.len() <= max),
        Err(_) => {}
    }
    // The chunked decoder on raw bytes, fed in two pieces.
    let mid = data.len() / 2;
    let mut dec = ChunkedDecoder::new(1 << 16);
    let mut out = Vec::new();
    if let Ok(n) = dec.decode(&data[..mid], &mut out) {
        let mut buf = data[n..].to_vec();
        if let Ok(m) = dec.decode(&buf, &mut out) {
            buf.drain(..m);
        }
    }
});
