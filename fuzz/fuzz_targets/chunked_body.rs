#![no_main]
//! The one HTTP/1 codec's chunked decoder (`webpep_http1::ChunkedDecoder`): byte 0 picks a
//! body limit and (bit 7) the tolerant decoder a client uses (bare LF line ends, no limit)
//! instead of the strict one of a server reading a request body; the rest is a chunked body
//! fed whole and then in pieces at every third byte boundary. Never panics; the decoder never
//! decodes more than its limit or more than it consumed; whole or in pieces, it gives the same
//! body, the same end and the same verdict.

use libfuzzer_sys::fuzz_target;
use webpep_http1::ChunkedDecoder;

/// Feeds `pieces` one after another as a connection's reads would come: unconsumed bytes stay
/// in the buffer. Returns the body, whether it ended, where (bytes consumed) and whether it
/// failed.
fn decode(pieces: &[&[u8]], limit: usize, tolerant: bool) -> (Vec<u8>, bool, usize, bool) {
    let mut dec = if tolerant {
        ChunkedDecoder::tolerant()
    } else {
        ChunkedDecoder::new(limit)
    };
    let mut out = Vec::new();
    let mut buf: Vec<u8> = Vec::new();
    let mut consumed = 0;
    for p in pieces {
        buf.extend_from_slice(p);
        match dec.decode(&buf, &mut out) {
            Ok(n) => {
                assert!(n <= buf.len());
                consumed += n;
                buf.drain(..n);
                assert!(out.len() <= limit);
                assert!(out.len() <= consumed);
                if dec.is_done() {
                    return (out, true, consumed, false);
                }
            }
            Err(_) => return (out, false, consumed, true),
        }
    }
    (out, false, consumed, false)
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, wire)) = data.split_first() else {
        return;
    };
    let tolerant = sel & 0x80 != 0;
    let limit = if tolerant {
        usize::MAX
    } else {
        1 + sel as usize * 64
    };
    let whole = decode(&[wire], limit, tolerant);
    let pieces: Vec<&[u8]> = wire.chunks(3).collect();
    let split = decode(&pieces, limit, tolerant);
    assert_eq!(whole.3, split.3, "the verdict depends on the reads");
    if !whole.3 {
        assert_eq!(whole.0, split.0);
        assert_eq!(whole.1, split.1);
        if whole.1 {
            assert_eq!(whole.2, split.2, "the body ends at the same byte");
        }
    }
});
