#![no_main]
//! webpep-proto's frame decoder on a stream of arbitrary bytes. Byte 0 picks the limits
//! (`max_data` = 1 + 64 × byte, `max_head` a quarter of it, so that oversized frames are
//! common), byte 1 the piece size; the rest is the stream, fed whole, in pieces of that size
//! and byte by byte. Never panics; the frames, the error and what is left are the same
//! whatever the pieces; each frame is within its limit and re-encodes to bytes that decode
//! to the same frame.

use libfuzzer_sys::fuzz_target;
use webpep_proto::frame::ty;
use webpep_proto::{Error, Frame, FrameDecoder, FrameLimits};

fn decode<'a>(
    limits: FrameLimits,
    pieces: impl IntoIterator<Item = &'a [u8]>,
) -> (Vec<Frame>, Option<Error>, Result<(), Error>) {
    let mut d = FrameDecoder::with_limits(limits);
    let mut out = Vec::new();
    for piece in pieces {
        d.push(piece);
        loop {
            match d.next_frame() {
                Ok(Some(f)) => out.push(f),
                Ok(None) => break,
                Err(e) => return (out, Some(e), d.finish()),
            }
        }
    }
    let end = d.finish();
    (out, None, end)
}

fuzz_target!(|data: &[u8]| {
    let [b0, b1, stream @ ..] = data else {
        return;
    };
    let max_data = 1 + 64 * usize::from(*b0);
    let limits = FrameLimits {
        max_data,
        max_head: max_data / 4,
    };
    let step = 1 + usize::from(*b1);
    let whole = decode(limits, [stream]);
    assert_eq!(whole, decode(limits, stream.chunks(step)));
    assert_eq!(whole, decode(limits, stream.chunks(1)));
    let (frames, err, end) = whole;
    if let Some(e) = &err {
        assert_eq!(end.as_ref(), Err(e), "a spent decoder keeps its error");
    }
    for f in frames {
        let bytes = f.to_bytes();
        let payload = bytes.len() - 1 - webpep_proto::varint::len((bytes.len() - 1) as u64);
        let limit = if f.ty() == ty::DATA {
            limits.max_data
        } else {
            limits.max_head
        };
        assert!(payload <= limit, "{f:?} over its limit {limit}");
        let mut d = FrameDecoder::with_limits(limits);
        d.push(&bytes);
        assert_eq!(d.next_frame(), Ok(Some(f)));
        assert_eq!(d.finish(), Ok(()));
    }
});
