//! The coding between the proxies (docs/protocol.md "Bodies"): a response body in one zstd
//! frame, flushed at every piece the edge sends so the client can hand each piece on as it
//! comes. Sans-IO: bytes in, bytes out.
//!
//! The decoder takes untrusted input (a broken or hostile edge, garbage on the wire): its
//! window is capped, its output comes in pieces of a size the caller chooses (a small frame
//! that expands a millionfold is handed on piece by piece, never held whole), and it never
//! decodes past the length the response declared.

use std::io;

use zstd::stream::raw::{Decoder, Encoder, InBuffer, Operation, OutBuffer};

/// zstd's level for bodies between the proxies: fast (the edge codes every text response
/// that has no coding of its own), most of the gain of the slow levels on text.
pub const ZSTD_LEVEL: i32 = 3;

/// The largest window the client accepts (2^23 = 8 MiB): bounds a stream's decoder memory.
/// Level 3 uses at most 2^21.
pub const WINDOW_LOG_MAX: u32 = 23;

/// What was wrong with a coded body.
#[derive(Debug, thiserror::Error)]
pub enum CodingError {
    #[error("the body's zstd frame does not decode: {0}")]
    Corrupt(io::Error),
    #[error("the body decodes to more than the {0} bytes it declared")]
    OverLength(u64),
    #[error("the body ended inside its zstd frame")]
    Truncated,
    #[error("bytes after the body's zstd frame")]
    Trailing,
}

/// The edge's side: compresses a body piece by piece.
pub struct BodyEncoder {
    enc: Encoder<'static>,
    buf: Vec<u8>,
}

impl BodyEncoder {
    pub fn new() -> io::Result<Self> {
        Ok(BodyEncoder {
            enc: Encoder::new(ZSTD_LEVEL)?,
            buf: vec![0; 32 * 1024],
        })
    }

    /// Compresses `input` and flushes: what it returns, after what it returned before,
    /// decodes to every byte given so far.
    pub fn encode(&mut self, input: &[u8]) -> io::Result<Vec<u8>> {
        let mut out = Vec::with_capacity(input.len() / 2 + 64);
        let mut src = InBuffer::around(input);
        while src.pos() < input.len() {
            let mut dst = OutBuffer::around(&mut self.buf[..]);
            self.enc.run(&mut src, &mut dst)?;
            let n = dst.pos();
            out.extend_from_slice(&self.buf[..n]);
        }
        loop {
            let mut dst = OutBuffer::around(&mut self.buf[..]);
            let left = self.enc.flush(&mut dst)?;
            let n = dst.pos();
            out.extend_from_slice(&self.buf[..n]);
            if left == 0 {
                return Ok(out);
            }
        }
    }

    /// Ends the frame: the last bytes to send.
    pub fn finish(&mut self) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        loop {
            let mut dst = OutBuffer::around(&mut self.buf[..]);
            let left = self.enc.finish(&mut dst, true)?;
            let n = dst.pos();
            out.extend_from_slice(&self.buf[..n]);
            if left == 0 {
                return Ok(out);
            }
        }
    }
}

/// The client's side: decodes a body as its pieces come.
pub struct BodyDecoder {
    dec: Decoder<'static>,
    /// Input pushed and not yet decoded.
    input: Vec<u8>,
    used: usize,
    decoded: u64,
    /// The decoded length the response declared (its Content-Length), if it did.
    limit: Option<u64>,
    /// The frame has ended (zstd said so, with nothing left to flush).
    frame_done: bool,
    /// Where output is decoded, kept between calls: most calls find nothing to decode.
    scratch: Vec<u8>,
}

impl BodyDecoder {
    /// A decoder for a body declared to decode to `limit` bytes (if declared).
    pub fn new(limit: Option<u64>) -> io::Result<Self> {
        let mut dec = Decoder::new()?;
        dec.set_parameter(zstd::zstd_safe::DParameter::WindowLogMax(WINDOW_LOG_MAX))?;
        Ok(BodyDecoder {
            dec,
            input: Vec::new(),
            used: 0,
            decoded: 0,
            limit,
            frame_done: false,
            scratch: Vec::new(),
        })
    }

    /// Another piece of the coded body.
    pub fn push(&mut self, piece: &[u8]) {
        self.input.drain(..self.used);
        self.used = 0;
        self.input.extend_from_slice(piece);
    }

    /// Up to `max` bytes of decoded body from what was pushed; empty when it needs more.
    pub fn output(&mut self, max: usize) -> Result<Vec<u8>, CodingError> {
        if self.scratch.len() < max {
            self.scratch.resize(max, 0);
        }
        let out = &mut self.scratch[..max];
        let mut written = 0;
        while written < max && !self.frame_done {
            let mut src = InBuffer::around(&self.input[self.used..]);
            let mut dst = OutBuffer::around(&mut out[written..]);
            let hint = self
                .dec
                .run(&mut src, &mut dst)
                .map_err(CodingError::Corrupt)?;
            let (took, made) = (src.pos(), dst.pos());
            self.used += took;
            written += made;
            // 0: the frame is whole and all of it flushed.
            if hint == 0 {
                self.frame_done = true;
            }
            if took == 0 && made == 0 {
                break;
            }
        }
        let out = out[..written].to_vec();
        self.decoded += written as u64;
        if let Some(limit) = self.limit.filter(|l| self.decoded > *l) {
            return Err(CodingError::OverLength(limit));
        }
        if self.frame_done && self.used < self.input.len() {
            return Err(CodingError::Trailing);
        }
        Ok(out)
    }

    /// The body has ended: its frame must be whole, and decoded to the last byte (call
    /// [`BodyDecoder::output`] until it gives nothing first).
    pub fn finish(&mut self) -> Result<(), CodingError> {
        if !self.frame_done {
            return Err(CodingError::Truncated);
        }
        if self.used < self.input.len() {
            return Err(CodingError::Trailing);
        }
        Ok(())
    }
}

/// Decodes a whole coded body at once, within `limit` (tests and the fuzz target).
pub fn decode_all(
    coded: &[&[u8]],
    limit: Option<u64>,
    piece: usize,
) -> Result<Vec<u8>, CodingError> {
    let mut dec = BodyDecoder::new(limit).map_err(CodingError::Corrupt)?;
    let mut out = Vec::new();
    for part in coded {
        dec.push(part);
        loop {
            let got = dec.output(piece)?;
            if got.is_empty() {
                break;
            }
            out.extend_from_slice(&got);
        }
    }
    dec.finish()?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(n: usize) -> Vec<u8> {
        (0..n)
            .map(|i| b"<p>the quick brown fox jumps over the lazy dog</p>\n"[i % 51])
            .collect()
    }

    fn encode(pieces: &[&[u8]]) -> Vec<Vec<u8>> {
        let mut enc = BodyEncoder::new().unwrap();
        let mut out: Vec<Vec<u8>> = pieces.iter().map(|p| enc.encode(p).unwrap()).collect();
        out.push(enc.finish().unwrap());
        out
    }

    #[test]
    fn a_body_coded_piece_by_piece_decodes_to_itself_and_each_piece_as_it_comes() {
        let body = text(100_000);
        let pieces: Vec<&[u8]> = body.chunks(16 * 1024).collect();
        let coded = encode(&pieces);
        let total: usize = coded.iter().map(Vec::len).sum();
        assert!(total < body.len() / 10, "{total} bytes coded");
        // Each piece decodes before the next is sent (the encoder flushes).
        let mut dec = BodyDecoder::new(Some(body.len() as u64)).unwrap();
        let mut got = Vec::new();
        for (i, c) in coded.iter().enumerate() {
            dec.push(c);
            loop {
                let out = dec.output(4096).unwrap();
                if out.is_empty() {
                    break;
                }
                got.extend_from_slice(&out);
            }
            let expected: usize = pieces.iter().take(i + 1).map(|p| p.len()).sum();
            assert_eq!(got.len(), expected.min(body.len()));
        }
        dec.finish().unwrap();
        assert_eq!(got, body);
        // However the coded bytes are cut.
        let flat: Vec<u8> = coded.concat();
        let cut: Vec<&[u8]> = flat.chunks(7).collect();
        assert_eq!(decode_all(&cut, None, 1000).unwrap(), body);
    }

    #[test]
    fn a_body_decoding_past_its_declared_length_is_an_error() {
        let body = text(10_000);
        let coded = encode(&[&body]);
        let refs: Vec<&[u8]> = coded.iter().map(Vec::as_slice).collect();
        assert!(matches!(
            decode_all(&refs, Some(9_999), 1 << 16),
            Err(CodingError::OverLength(9_999))
        ));
        assert_eq!(decode_all(&refs, Some(10_000), 1 << 16).unwrap(), body);
    }

    #[test]
    fn a_bomb_comes_out_in_pieces_of_the_size_asked() {
        // 64 MB of zeros in a few kilobytes.
        let zeros = vec![0u8; 1 << 20];
        let mut enc = BodyEncoder::new().unwrap();
        let mut coded = Vec::new();
        for _ in 0..64 {
            coded.extend(enc.encode(&zeros).unwrap());
        }
        coded.extend(enc.finish().unwrap());
        assert!(coded.len() < 64 * 1024, "{}", coded.len());
        let mut dec = BodyDecoder::new(None).unwrap();
        dec.push(&coded);
        let mut total = 0u64;
        loop {
            let out = dec.output(64 * 1024).unwrap();
            assert!(out.len() <= 64 * 1024);
            if out.is_empty() {
                break;
            }
            total += out.len() as u64;
        }
        dec.finish().unwrap();
        assert_eq!(total, 64 << 20);
    }

    #[test]
    fn truncated_corrupt_and_trailing_bodies_are_errors() {
        let body = text(50_000);
        let flat = encode(&[&body]).concat();
        assert!(matches!(
            decode_all(&[&flat[..flat.len() - 3]], None, 1 << 16),
            Err(CodingError::Truncated)
        ));
        let mut trailing = flat.clone();
        trailing.extend_from_slice(b"more");
        assert!(matches!(
            decode_all(&[&trailing], None, 1 << 16),
            Err(CodingError::Trailing)
        ));
        assert!(matches!(
            decode_all(&[b"this is not zstd at all"], None, 1 << 16),
            Err(CodingError::Corrupt(_))
        ));
        assert!(matches!(
            decode_all(&[], None, 1 << 16),
            Err(CodingError::Truncated)
        ));
    }
}
