//! A small HTTP/1.x client codec on `httparse`: request heads, response heads, and body framing
//! (Content-Length, chunked, until close). Pure: the connection driver does the I/O.

use bytes::{Buf, BytesMut};

/// A request head to serialize.
#[derive(Debug, Clone)]
pub struct RequestHead {
    pub method: String,
    /// Origin form (`/path?q`) or absolute form (`http://host/path`, through a proxy).
    pub target: String,
    /// `true` for HTTP/1.1, `false` for HTTP/1.0.
    pub http11: bool,
    pub headers: Vec<(String, String)>,
}

impl RequestHead {
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(128 + self.target.len());
        out.extend_from_slice(self.method.as_bytes());
        out.push(b' ');
        out.extend_from_slice(self.target.as_bytes());
        out.extend_from_slice(if self.http11 {
            b" HTTP/1.1\r\n"
        } else {
            b" HTTP/1.0\r\n"
        });
        for (n, v) in &self.headers {
            out.extend_from_slice(n.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(v.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"\r\n");
        out
    }
}

/// A parsed response head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseHead {
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub minor: u8,
    pub status: u16,
    pub reason: String,
    pub headers: Vec<(String, String)>,
    /// Bytes of the head on the wire, status line to the blank line.
    pub len: usize,
}

impl ResponseHead {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn header_tokens(&self, name: &str) -> impl Iterator<Item = String> + '_ {
        let name = name.to_string();
        self.headers
            .iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(&name))
            .flat_map(|(_, v)| v.split(',').map(|t| t.trim().to_ascii_lowercase()))
    }

    /// Whether the connection may carry another request after this response (given that we
    /// asked for a persistent connection).
    pub fn keep_alive(&self) -> bool {
        let tokens: Vec<String> = self.header_tokens("connection").collect();
        if tokens.iter().any(|t| t == "close") {
            return false;
        }
        if self.minor >= 1 {
            true
        } else {
            tokens.iter().any(|t| t == "keep-alive")
        }
    }

    pub fn version_str(&self) -> &'static str {
        if self.minor >= 1 {
            "HTTP/1.1"
        } else {
            "HTTP/1.0"
        }
    }
}

/// Errors of the codec; the driver turns them into `FetchError::BadResponse`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodecError(pub String);

impl std::fmt::Display for CodecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

const MAX_HEADERS: usize = 128;

/// Try to parse a response head at the start of `buf`. `Ok(None)`: more bytes are needed.
pub fn parse_head(buf: &[u8], max_len: usize) -> Result<Option<ResponseHead>, CodecError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut headers);
    match resp.parse(buf) {
        Ok(httparse::Status::Complete(len)) => {
            if len > max_len {
                return Err(CodecError(format!(
                    "response head of {len} bytes exceeds {max_len}"
                )));
            }
            let status = resp
                .code
                .ok_or_else(|| CodecError("no status code".into()))?;
            let minor = resp.version.unwrap_or(1);
            let reason = resp.reason.unwrap_or("").to_string();
            let headers = resp
                .headers
                .iter()
                .map(|h| {
                    (
                        h.name.to_string(),
                        String::from_utf8_lossy(h.value).into_owned(),
                    )
                })
                .collect();
            Ok(Some(ResponseHead {
                minor,
                status,
                reason,
                headers,
                len,
            }))
        }
        Ok(httparse::Status::Partial) => {
            if buf.len() > max_len {
                Err(CodecError(format!("response head exceeds {max_len} bytes")))
            } else {
                Ok(None)
            }
        }
        Err(e) => Err(CodecError(format!("unparseable response head: {e}"))),
    }
}

/// How the body of a response is delimited (RFC 9112 §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    None,
    Length(u64),
    Chunked,
    UntilClose,
}

/// Decide the framing of the body of `head`, a response to a request with `method`.
pub fn framing(head: &ResponseHead, method: &str) -> Result<Framing, CodecError> {
    if method.eq_ignore_ascii_case("HEAD")
        || (100..200).contains(&head.status)
        || head.status == 204
        || head.status == 304
    {
        return Ok(Framing::None);
    }
    let te: Vec<String> = head.header_tokens("transfer-encoding").collect();
    if let Some(last) = te.last() {
        return if last == "chunked" {
            Ok(Framing::Chunked)
        } else {
            Ok(Framing::UntilClose)
        };
    }
    let mut length: Option<u64> = None;
    for (n, v) in &head.headers {
        if !n.eq_ignore_ascii_case("content-length") {
            continue;
        }
        for part in v.split(',') {
            let l: u64 = part
                .trim()
                .parse()
                .map_err(|_| CodecError(format!("bad Content-Length {v:?}")))?;
            if length.is_some_and(|prev| prev != l) {
                return Err(CodecError("conflicting Content-Length values".into()));
            }
            length = Some(l);
        }
    }
    Ok(match length {
        Some(0) => Framing::None,
        Some(l) => Framing::Length(l),
        None => Framing::UntilClose,
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChunkState {
    Size,
    Data(u64),
    DataEnd,
    Trailers,
}

/// Progress of a body decode step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decoded {
    /// Wire bytes consumed from the buffer (framing included).
    pub wire: usize,
    /// The body is complete.
    pub done: bool,
}

/// Incremental body decoder.
#[derive(Debug, Clone)]
pub struct BodyDecoder {
    framing: Framing,
    remaining: u64,
    chunk: ChunkState,
    done: bool,
}

const MAX_CHUNK_LINE: usize = 4096;

/// The position of the `\n` ending the line at the start of `buf` (`None`: not yet read). A
/// line longer than [`MAX_CHUNK_LINE`] is an error whether or not its end has arrived, so the
/// answer never depends on how the network split the bytes.
fn line_end(buf: &[u8], what: &str) -> Result<Option<usize>, CodecError> {
    let nl = buf.iter().position(|&b| b == b'\n');
    if nl.unwrap_or(buf.len()) > MAX_CHUNK_LINE {
        return Err(CodecError(format!("{what} line too long")));
    }
    Ok(nl)
}

impl BodyDecoder {
    pub fn new(framing: Framing) -> BodyDecoder {
        BodyDecoder {
            framing,
            remaining: match framing {
                Framing::Length(l) => l,
                _ => 0,
            },
            chunk: ChunkState::Size,
            done: matches!(framing, Framing::None),
        }
    }

    pub fn framing(&self) -> Framing {
        self.framing
    }

    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Consume what can be consumed from `buf`, passing decoded body bytes to `out`.
    pub fn decode(
        &mut self,
        buf: &mut BytesMut,
        out: &mut dyn FnMut(&[u8]),
    ) -> Result<Decoded, CodecError> {
        let mut wire = 0usize;
        if self.done {
            return Ok(Decoded { wire, done: true });
        }
        match self.framing {
            Framing::None => self.done = true,
            Framing::Length(_) => {
                let n = (buf.len() as u64).min(self.remaining) as usize;
                out(&buf[..n]);
                buf.advance(n);
                wire += n;
                self.remaining -= n as u64;
                self.done = self.remaining == 0;
            }
            Framing::UntilClose => {
                let n = buf.len();
                out(&buf[..n]);
                buf.advance(n);
                wire += n;
            }
            Framing::Chunked => loop {
                match self.chunk {
                    ChunkState::Size => {
                        let Some(nl) = line_end(buf, "chunk size")? else {
                            break;
                        };
                        let line = std::str::from_utf8(&buf[..nl])
                            .map_err(|_| CodecError("chunk size line is not text".into()))?;
                        let hex = line.split(';').next().unwrap_or("").trim();
                        let size = u64::from_str_radix(hex, 16)
                            .map_err(|_| CodecError(format!("bad chunk size {hex:?}")))?;
                        buf.advance(nl + 1);
                        wire += nl + 1;
                        self.chunk = if size == 0 {
                            ChunkState::Trailers
                        } else {
                            ChunkState::Data(size)
                        };
                    }
                    ChunkState::Data(left) => {
                        if buf.is_empty() {
                            break;
                        }
                        let n = (buf.len() as u64).min(left) as usize;
                        out(&buf[..n]);
                        buf.advance(n);
                        wire += n;
                        self.chunk = if left == n as u64 {
                            ChunkState::DataEnd
                        } else {
                            ChunkState::Data(left - n as u64)
                        };
                    }
                    ChunkState::DataEnd => {
                        if buf.starts_with(b"\r\n") {
                            buf.advance(2);
                            wire += 2;
                        } else if buf.starts_with(b"\n") {
                            buf.advance(1);
                            wire += 1;
                        } else if buf.len() < 2 && buf.first().is_none_or(|&b| b == b'\r') {
                            break;
                        } else {
                            return Err(CodecError("missing CRLF after chunk data".into()));
                        }
                        self.chunk = ChunkState::Size;
                    }
                    ChunkState::Trailers => {
                        let Some(nl) = line_end(buf, "trailer")? else {
                            break;
                        };
                        let empty = buf[..nl].iter().all(|&b| b == b'\r');
                        buf.advance(nl + 1);
                        wire += nl + 1;
                        if empty {
                            self.done = true;
                            break;
                        }
                    }
                }
            },
        }
        Ok(Decoded {
            wire,
            done: self.done,
        })
    }

    /// The connection reached EOF: is the body complete?
    pub fn complete_at_eof(&mut self) -> bool {
        if matches!(self.framing, Framing::UntilClose) {
            self.done = true;
        }
        self.done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(framing: Framing, input: &[u8], step: usize) -> (Vec<u8>, usize, bool) {
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
    fn head_and_framing() {
        let raw = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: keep-alive\r\n\r\nhello";
        let head = parse_head(raw, 1024).expect("ok").expect("complete");
        assert_eq!(head.status, 200);
        assert_eq!(head.len, raw.len() - 5);
        assert!(head.keep_alive());
        assert_eq!(framing(&head, "GET"), Ok(Framing::Length(5)));
        assert_eq!(framing(&head, "HEAD"), Ok(Framing::None));
        assert_eq!(parse_head(b"HTTP/1.1 200 OK\r\nA: b\r\n", 1024), Ok(None));
        assert!(parse_head(b"garbage\r\n\r\n", 1024).is_err());
        assert!(parse_head(&[b'x'; 100], 10).is_err());
        let h10 = parse_head(b"HTTP/1.0 200 OK\r\n\r\n", 100)
            .expect("ok")
            .expect("complete");
        assert!(!h10.keep_alive());
        assert_eq!(framing(&h10, "GET"), Ok(Framing::UntilClose));
        let close = parse_head(
            b"HTTP/1.1 304 Not Modified\r\nConnection: close\r\nContent-Length: 9\r\n\r\n",
            100,
        )
        .expect("ok")
        .expect("complete");
        assert!(!close.keep_alive());
        assert_eq!(framing(&close, "GET"), Ok(Framing::None));
        let conflict = parse_head(
            b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
            100,
        )
        .expect("ok")
        .expect("complete");
        assert!(framing(&conflict, "GET").is_err());
        let te = parse_head(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\nContent-Length: 3\r\n\r\n",
            100,
        )
        .expect("ok")
        .expect("complete");
        assert_eq!(framing(&te, "GET"), Ok(Framing::Chunked));
    }

    #[test]
    fn chunked_any_split() {
        let body =
            b"4\r\nWiki\r\n5;ext=1\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\nX-T: 1\r\n\r\n";
        for step in 1..body.len() {
            let (out, wire, done) = decode_all(Framing::Chunked, body, step);
            assert!(done, "step {step}");
            assert_eq!(out, b"Wikipedia in\r\n\r\nchunks.");
            assert_eq!(wire, body.len());
        }
    }

    #[test]
    fn chunked_errors() {
        let mut dec = BodyDecoder::new(Framing::Chunked);
        let mut buf = BytesMut::from(&b"zz\r\n"[..]);
        assert!(dec.decode(&mut buf, &mut |_| {}).is_err());
        let mut dec = BodyDecoder::new(Framing::Chunked);
        let mut buf = BytesMut::from(&b"2\r\nabXY"[..]);
        assert!(dec.decode(&mut buf, &mut |_| {}).is_err());
    }

    #[test]
    fn long_chunk_lines_fail_however_split() {
        // A size line of zeros is valid hex, but longer than any sender needs.
        let mut body = vec![b'0'; MAX_CHUNK_LINE + 10];
        body.extend_from_slice(b"1\r\nx\r\n0\r\n\r\n");
        for step in [1, 100, MAX_CHUNK_LINE, body.len()] {
            let mut dec = BodyDecoder::new(Framing::Chunked);
            let mut buf = BytesMut::new();
            let failed = body.chunks(step).any(|piece| {
                buf.extend_from_slice(piece);
                dec.decode(&mut buf, &mut |_| {}).is_err()
            });
            assert!(failed, "step {step}");
        }
        let mut trailer = b"0\r\nX: ".to_vec();
        trailer.extend(vec![b'a'; MAX_CHUNK_LINE]);
        trailer.extend_from_slice(b"\r\n\r\n");
        let mut dec = BodyDecoder::new(Framing::Chunked);
        let mut buf = BytesMut::from(&trailer[..]);
        assert!(dec.decode(&mut buf, &mut |_| {}).is_err());
    }

    #[test]
    fn length_and_close() {
        let (out, wire, done) = decode_all(Framing::Length(3), b"abcdef", 2);
        assert_eq!((out.as_slice(), wire, done), (&b"abc"[..], 3, true));
        let mut dec = BodyDecoder::new(Framing::UntilClose);
        let mut buf = BytesMut::from(&b"xyz"[..]);
        let d = dec.decode(&mut buf, &mut |_| {}).expect("ok");
        assert_eq!((d.wire, d.done), (3, false));
        assert!(dec.complete_at_eof());
        let mut dec = BodyDecoder::new(Framing::Length(10));
        assert!(!dec.complete_at_eof());
    }

    #[test]
    fn request_serialization() {
        let r = RequestHead {
            method: "GET".into(),
            target: "/x".into(),
            http11: false,
            headers: vec![("Host".into(), "a".into())],
        };
        assert_eq!(r.to_bytes(), b"GET /x HTTP/1.0\r\nHost: a\r\n\r\n");
    }
}
