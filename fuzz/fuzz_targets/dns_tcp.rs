#![no_main]
//! The DNS TCP framing (RFC 1035 §4.2.2, RFC 7766 §8) of `webpep dns`: arbitrary bytes as a
//! client's stream → `webpep_dns::TcpFrames`. Nothing may panic; the messages and the error
//! are the same whether the bytes come whole, in two pieces or one by one; and they are what
//! the length prefixes declare, read off the bytes directly.

use libfuzzer_sys::fuzz_target;
use webpep_dns::{FrameError, TcpFrames};

/// The messages, the error and the bytes left over, the stream pushed in `pieces`.
fn decode<'a>(
    max: usize,
    pieces: impl IntoIterator<Item = &'a [u8]>,
) -> (Vec<Vec<u8>>, Option<FrameError>, usize) {
    let mut d = TcpFrames::new(max);
    let mut out = Vec::new();
    for piece in pieces {
        d.push(piece);
        loop {
            match d.next_frame() {
                Ok(Some(m)) => out.push(m),
                Ok(None) => break,
                Err(e) => return (out, Some(e), d.buffered()),
            }
        }
    }
    (out, None, d.buffered())
}

/// What the length prefixes say, walked one by one.
fn reference(max: usize, stream: &[u8]) -> (Vec<Vec<u8>>, Option<FrameError>, usize) {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(prefix) = stream.get(at..at + 2) {
        let len = usize::from(u16::from_be_bytes([prefix[0], prefix[1]]));
        if len == 0 {
            return (out, Some(FrameError::Empty), 0);
        }
        if len > max {
            return (out, Some(FrameError::TooLong { len, max }), 0);
        }
        match stream.get(at + 2..at + 2 + len) {
            Some(body) => out.push(body.to_vec()),
            None => break,
        }
        at += 2 + len;
    }
    (out, None, stream.len() - at)
}

fuzz_target!(|data: &[u8]| {
    // Byte 0 picks the limit (small ones make oversize lengths reachable), byte 1 the cut.
    let (head, stream) = data.split_at(data.len().min(2));
    let max = match head.first().copied().unwrap_or(0) % 4 {
        0 => 12,
        1 => 512,
        2 => 4096,
        _ => usize::from(u16::MAX),
    };
    let cut = stream.len() * usize::from(head.get(1).copied().unwrap_or(0)) / 255;

    let whole = decode(max, [stream]);
    assert_eq!(whole, reference(max, stream));
    let (first, second) = stream.split_at(cut);
    assert_eq!(decode(max, [first, second]), whole, "cut at {cut}");
    assert_eq!(decode(max, stream.chunks(1)), whole, "byte by byte");
    for m in &whole.0 {
        assert!(!m.is_empty() && m.len() <= max);
    }
});
