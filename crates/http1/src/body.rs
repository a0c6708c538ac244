//! Bodies: the chunked decoder (RFC 9112 §7.1), strict as a server reads requests, tolerant of
//! bare LF line ends as a client reads responses; and [`BodyDecoder`], a response body under
//! any framing, read incrementally from a connection's buffer.

use bytes::{Buf, BytesMut};

use crate::response::{CodecError, ResponseFraming};

/// Longest chunk-size or trailer line accepted (extensions included, the line end not).
pub const MAX_CHUNK_LINE: usize = 4096;

/// Longest chunk size in hex digits (15 keep it within `u64`).
const MAX_SIZE_DIGITS: usize = 15;

/// Why a chunked body cannot be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChunkError {
    /// Bad chunk size line or missing CRLF.
    #[error("malformed chunked body")]
    Malformed,
    /// The decoded body is over the limit.
    #[error("body too large")]
    TooLarge,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChunkState {
    Size,
    Data(u64),
    DataCrlf,
    Trailers,
    Done,
}

/// An incremental decoder of the chunked transfer coding (trailers are read and dropped).
/// Whatever way the bytes are split into reads, it gives the same body, stops at the same
/// byte and fails or not alike.
#[derive(Debug, Clone)]
pub struct ChunkedDecoder {
    state: ChunkState,
    limit: usize,
    decoded: usize,
    bare_lf: bool,
}

impl ChunkedDecoder {
    /// A strict decoder (lines end in CRLF) that fails once more than `limit` body bytes
    /// were decoded: a server reading a request body.
    pub fn new(limit: usize) -> Self {
        ChunkedDecoder {
            state: ChunkState::Size,
            limit,
            decoded: 0,
            bare_lf: false,
        }
    }

    /// A decoder without a limit that also takes a bare LF as a line end (RFC 9112 §2.2
    /// allows a recipient to): a client reading a response body.
    pub fn tolerant() -> Self {
        ChunkedDecoder {
            bare_lf: true,
            ..ChunkedDecoder::new(usize::MAX)
        }
    }

    /// True once the last chunk and trailers were read.
    pub fn is_done(&self) -> bool {
        self.state == ChunkState::Done
    }

    /// Decodes as much of `input` as possible into `out`; returns the bytes consumed. Stops at
    /// the end of the body (bytes after it belong to the next message).
    pub fn decode(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<usize, ChunkError> {
        self.decode_with(input, &mut |b| out.extend_from_slice(b))
    }

    /// As [`ChunkedDecoder::decode`], handing each piece of body to `out`.
    pub fn decode_with(
        &mut self,
        input: &[u8],
        out: &mut dyn FnMut(&[u8]),
    ) -> Result<usize, ChunkError> {
        let mut pos = 0;
        loop {
            let rest = &input[pos..];
            match self.state {
                ChunkState::Done => return Ok(pos),
                ChunkState::Size => {
                    let Some((line, next)) = self.line(rest)? else {
                        return Ok(pos);
                    };
                    let size = chunk_size(&rest[..line])?;
                    pos += next;
                    self.state = if size == 0 {
                        ChunkState::Trailers
                    } else {
                        ChunkState::Data(size)
                    };
                }
                ChunkState::Data(left) => {
                    if rest.is_empty() {
                        return Ok(pos);
                    }
                    let take = (left.min(rest.len() as u64)) as usize;
                    if take > self.limit - self.decoded {
                        return Err(ChunkError::TooLarge);
                    }
                    out(&rest[..take]);
                    self.decoded += take;
                    pos += take;
                    let left = left - take as u64;
                    self.state = if left == 0 {
                        ChunkState::DataCrlf
                    } else {
                        ChunkState::Data(left)
                    };
                }
                ChunkState::DataCrlf => {
                    let n = if rest.starts_with(b"\r\n") {
                        2
                    } else if self.bare_lf && rest.starts_with(b"\n") {
                        1
                    } else if b"\r\n".starts_with(rest) {
                        return Ok(pos); // the line end is still coming
                    } else {
                        return Err(ChunkError::Malformed);
                    };
                    pos += n;
                    self.state = ChunkState::Size;
                }
                ChunkState::Trailers => {
                    let Some((line, next)) = self.line(rest)? else {
                        return Ok(pos);
                    };
                    pos += next;
                    if line == 0 {
                        self.state = ChunkState::Done;
                    }
                }
            }
        }
    }

    /// The line at the start of `rest`: its length without the line end, and with it (`None`:
    /// its end has not arrived). A line over [`MAX_CHUNK_LINE`] is malformed as soon as that
    /// is certain, whether or not its end has arrived, so the answer never depends on how
    /// the bytes were split into reads (a trailing `\r` may be the start of the line end, so
    /// it does not count yet).
    fn line(&self, rest: &[u8]) -> Result<Option<(usize, usize)>, ChunkError> {
        let end = if self.bare_lf {
            rest.iter().position(|&b| b == b'\n').map(|nl| {
                let cr = nl > 0 && rest[nl - 1] == b'\r';
                (nl - usize::from(cr), nl + 1)
            })
        } else {
            rest.windows(2)
                .position(|w| w == b"\r\n")
                .map(|at| (at, at + 2))
        };
        let known = end.map_or(rest.len() - usize::from(rest.ends_with(b"\r")), |e| e.0);
        if known > MAX_CHUNK_LINE {
            return Err(ChunkError::Malformed);
        }
        Ok(end)
    }
}

/// The size of a chunk-size line (`1*HEXDIG [ BWS ; extensions ]`).
fn chunk_size(line: &[u8]) -> Result<u64, ChunkError> {
    let digits = line
        .split(|&b| b == b';')
        .next()
        .unwrap_or(line)
        .trim_ascii();
    if digits.is_empty()
        || digits.len() > MAX_SIZE_DIGITS
        || !digits.iter().all(u8::is_ascii_hexdigit)
    {
        return Err(ChunkError::Malformed);
    }
    let digits = std::str::from_utf8(digits).map_err(|_| ChunkError::Malformed)?;
    u64::from_str_radix(digits, 16).map_err(|_| ChunkError::Malformed)
}

/// Progress of a body decode step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decoded {
    /// Wire bytes consumed from the buffer (framing included).
    pub wire: usize,
    /// The body is complete.
    pub done: bool,
}

/// A response body read incrementally under its framing, as a client reads it.
#[derive(Debug, Clone)]
pub struct BodyDecoder {
    framing: ResponseFraming,
    remaining: u64,
    chunked: ChunkedDecoder,
    done: bool,
}

impl BodyDecoder {
    pub fn new(framing: ResponseFraming) -> BodyDecoder {
        BodyDecoder {
            framing,
            remaining: match framing {
                ResponseFraming::Length(l) => l,
                _ => 0,
            },
            chunked: ChunkedDecoder::tolerant(),
            done: framing == ResponseFraming::NoBody,
        }
    }

    pub fn framing(&self) -> ResponseFraming {
        self.framing
    }

    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Consumes what can be consumed from `buf`, passing decoded body bytes to `out`. Bytes
    /// after the body (the next pipelined response) stay in `buf`.
    pub fn decode(
        &mut self,
        buf: &mut BytesMut,
        out: &mut dyn FnMut(&[u8]),
    ) -> Result<Decoded, CodecError> {
        let mut wire = 0usize;
        if !self.done {
            match self.framing {
                ResponseFraming::NoBody => self.done = true,
                ResponseFraming::Length(_) => {
                    let n = (buf.len() as u64).min(self.remaining) as usize;
                    out(&buf[..n]);
                    wire = n;
                    self.remaining -= n as u64;
                    self.done = self.remaining == 0;
                }
                ResponseFraming::Close => {
                    out(&buf[..]);
                    wire = buf.len();
                }
                ResponseFraming::Chunked => {
                    wire = self
                        .chunked
                        .decode_with(&buf[..], out)
                        .map_err(|e| CodecError(e.to_string()))?;
                    self.done = self.chunked.is_done();
                }
            }
            buf.advance(wire);
        }
        Ok(Decoded {
            wire,
            done: self.done,
        })
    }

    /// The connection reached EOF: is the body complete?
    pub fn complete_at_eof(&mut self) -> bool {
        if self.framing == ResponseFraming::Close {
            self.done = true;
        }
        self.done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunked_in_pieces_stops_at_end() {
        let wire = b"5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-T: 1\r\n\r\nGET /next";
        for split in 0..wire.len() {
            let mut d = ChunkedDecoder::new(100);
            let mut out = Vec::new();
            let mut buf = wire[..split].to_vec();
            let n = d.decode(&buf, &mut out).unwrap();
            buf.drain(..n);
            buf.extend_from_slice(&wire[split..]);
            let n2 = d.decode(&buf, &mut out).unwrap();
            assert!(d.is_done());
            assert_eq!(out, b"hello world");
            assert_eq!(&buf[n2..], b"GET /next");
        }
    }

    #[test]
    fn long_chunk_lines_are_malformed_however_split() {
        // A chunk extension or a trailer one byte over the limit fails whether its CRLF came
        // in the same read or not; one at the limit passes either way, strict or tolerant.
        for tolerant in [false, true] {
            for (len, ok) in [(MAX_CHUNK_LINE, true), (MAX_CHUNK_LINE + 1, false)] {
                let mut size_line = b"1;".to_vec();
                size_line.resize(len, b'x');
                let mut trailer = b"X-T: ".to_vec();
                trailer.resize(len, b'y');
                let mut wire = size_line;
                wire.extend_from_slice(b"\r\nz\r\n0\r\n");
                wire.extend_from_slice(&trailer);
                wire.extend_from_slice(b"\r\n\r\n");
                for split in [1, len - 1, len, len + 1, len + 5, wire.len() - 3] {
                    let mut d = if tolerant {
                        ChunkedDecoder::tolerant()
                    } else {
                        ChunkedDecoder::new(100)
                    };
                    let mut out = Vec::new();
                    let mut buf = wire[..split].to_vec();
                    let result = d.decode(&buf, &mut out).and_then(|n| {
                        buf.drain(..n);
                        buf.extend_from_slice(&wire[split..]);
                        d.decode(&buf, &mut out)
                    });
                    assert_eq!(result.is_ok(), ok, "line {len}, split at {split}");
                    assert_eq!(d.is_done(), ok);
                }
            }
        }
    }

    #[test]
    fn chunked_errors() {
        let mut out = Vec::new();
        for bad in [
            &b"zz\r\n"[..],
            b"2\r\nabX\r\n",
            b"2\r\nabX",
            b"+2\r\nab\r\n",
            b"\r\n",
            b"ffffffffffffffffff\r\n",
            b"0000000000000001\r\n",
        ] {
            assert_eq!(
                ChunkedDecoder::new(100).decode(bad, &mut out),
                Err(ChunkError::Malformed),
                "{bad:?}"
            );
        }
        assert_eq!(
            ChunkedDecoder::new(3).decode(b"5\r\nhello\r\n", &mut out),
            Err(ChunkError::TooLarge)
        );
        // Strict: a bare LF ends no line; tolerant: it does.
        let bare = b"3\nabc\n0\n\n";
        let mut strict = ChunkedDecoder::new(100);
        assert_eq!(strict.decode(bare, &mut out), Ok(0), "no line has ended");
        assert_eq!(
            strict.decode(b"3\nabc\n0\n\n\r\n", &mut out),
            Err(ChunkError::Malformed)
        );
        let mut out = Vec::new();
        let mut d = ChunkedDecoder::tolerant();
        assert_eq!(d.decode(bare, &mut out), Ok(bare.len()));
        assert!(d.is_done());
        assert_eq!(out, b"abc");
    }

    fn decode_all(framing: ResponseFraming, input: &[u8], step: usize) -> (Vec<u8>, usize, bool) {
        let mut dec = BodyDecoder::new(framing);
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        let mut wire = 0;
        for piece in input.chunks(step.max(1)) {
            buf.extend_from_slice(piece);
            let d = dec
                .decode(&mut buf, &mut |b| out.extend_from_slice(b))
                .expect("valid body");
            wire += d.wire;
            if d.done {
                break;
            }
        }
        (out, wire, dec.is_done())
    }

    #[test]
    fn chunked_response_any_split() {
        let body =
            b"4\r\nWiki\r\n5;ext=1\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\nX-T: 1\r\n\r\n";
        for step in 1..body.len() {
            let (out, wire, done) = decode_all(ResponseFraming::Chunked, body, step);
            assert!(done, "step {step}");
            assert_eq!(out, b"Wikipedia in\r\n\r\nchunks.");
            assert_eq!(wire, body.len());
        }
    }

    #[test]
    fn response_chunked_errors() {
        let mut dec = BodyDecoder::new(ResponseFraming::Chunked);
        let mut buf = BytesMut::from(&b"zz\r\n"[..]);
        assert!(dec.decode(&mut buf, &mut |_| {}).is_err());
        let mut dec = BodyDecoder::new(ResponseFraming::Chunked);
        let mut buf = BytesMut::from(&b"2\r\nabXY"[..]);
        assert!(dec.decode(&mut buf, &mut |_| {}).is_err());
        // A size line of zeros is valid hex, but longer than any sender needs.
        let mut body = vec![b'0'; MAX_CHUNK_LINE + 10];
        body.extend_from_slice(b"1\r\nx\r\n0\r\n\r\n");
        for step in [1, 100, MAX_CHUNK_LINE, body.len()] {
            let mut dec = BodyDecoder::new(ResponseFraming::Chunked);
            let mut buf = BytesMut::new();
            let failed = body.chunks(step).any(|piece| {
                buf.extend_from_slice(piece);
                dec.decode(&mut buf, &mut |_| {}).is_err()
            });
            assert!(failed, "step {step}");
        }
    }

    #[test]
    fn length_and_close() {
        let (out, wire, done) = decode_all(ResponseFraming::Length(3), b"abcdef", 2);
        assert_eq!((out.as_slice(), wire, done), (&b"abc"[..], 3, true));
        let mut dec = BodyDecoder::new(ResponseFraming::Close);
        let mut buf = BytesMut::from(&b"xyz"[..]);
        let d = dec.decode(&mut buf, &mut |_| {}).expect("ok");
        assert_eq!((d.wire, d.done), (3, false));
        assert!(dec.complete_at_eof());
        let mut dec = BodyDecoder::new(ResponseFraming::Length(10));
        assert!(!dec.complete_at_eof());
        let mut dec = BodyDecoder::new(ResponseFraming::NoBody);
        let mut buf = BytesMut::from(&b"HTTP/1.1"[..]);
        let d = dec.decode(&mut buf, &mut |_| {}).expect("ok");
        assert_eq!((d.wire, d.done, buf.len()), (0, true, 8));
    }

    /// Pipelined responses: each body stops where the next head starts.
    #[test]
    fn pipelined_responses_split_anywhere() {
        let wire = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabcHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nde\r\n0\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n";
        for step in 1..wire.len() {
            let mut buf = BytesMut::new();
            let mut bodies: Vec<(u16, Vec<u8>)> = Vec::new();
            let mut current: Option<(u16, BodyDecoder, Vec<u8>)> = None;
            for piece in wire.chunks(step) {
                buf.extend_from_slice(piece);
                loop {
                    if let Some((status, dec, body)) = current.as_mut() {
                        let d = dec
                            .decode(&mut buf, &mut |b| body.extend_from_slice(b))
                            .unwrap();
                        if !d.done {
                            break;
                        }
                        bodies.push((*status, std::mem::take(body)));
                        current = None;
                    }
                    let Some(h) = crate::parse_response_head(&buf, 1024).unwrap() else {
                        break;
                    };
                    buf.advance(h.len);
                    let f = crate::response_body_framing(&h, "GET").unwrap();
                    current = Some((h.status, BodyDecoder::new(f), Vec::new()));
                }
            }
            assert_eq!(
                bodies,
                [(200, b"abc".to_vec()), (200, b"de".to_vec()), (204, vec![])],
                "step {step}"
            );
            assert!(buf.is_empty());
        }
    }
}
