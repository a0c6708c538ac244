//! The client-facing HTTP/1.x wire format as pure functions over bytes: request heads,
//! body framing, a chunked decoder, hop-by-hop headers and response heads. No I/O here, so
//! all of it is unit-tested and fuzzed (`fuzz/fuzz_targets/http_request.rs`).

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, StatusCode, Version};

/// Most header fields one request may carry (more → 431).
pub const MAX_HEADERS: usize = 128;

/// A parsed request line and header block.
#[derive(Debug, Clone)]
pub struct RequestHead {
    /// The method.
    pub method: Method,
    /// The request target exactly as sent (origin-, absolute- or authority-form).
    pub target: String,
    /// HTTP/1.0 or HTTP/1.1.
    pub version: Version,
    /// The header fields, in order.
    pub headers: HeaderMap,
    /// Bytes of the head, including the blank line.
    pub head_len: usize,
}

/// Why a request head cannot be served.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeadError {
    /// Syntax error in the request line or a header field → 400.
    #[error("malformed request: {0}")]
    Malformed(String),
    /// The head is over the configured limit → 431.
    #[error("request header fields too large")]
    TooLarge,
}

impl HeadError {
    /// The status this error is answered with.
    pub fn status(&self) -> StatusCode {
        match self {
            HeadError::Malformed(_) => StatusCode::BAD_REQUEST,
            HeadError::TooLarge => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        }
    }
}

/// Parses a request head from the start of `buf`. `Ok(None)`: need more bytes (and `buf` is
/// still within `max_header_bytes`). Leading blank lines are skipped (RFC 9112 §2.2).
pub fn parse_request_head(
    buf: &[u8],
    max_header_bytes: usize,
) -> Result<Option<RequestHead>, HeadError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let status = match req.parse(buf) {
        Ok(s) => s,
        Err(httparse::Error::TooManyHeaders) => return Err(HeadError::TooLarge),
        Err(e) => return Err(HeadError::Malformed(e.to_string())),
    };
    let head_len = match status {
        httparse::Status::Complete(n) => n,
        httparse::Status::Partial => {
            if buf.len() > max_header_bytes {
                return Err(HeadError::TooLarge);
            }
            return Ok(None);
        }
    };
    if head_len > max_header_bytes {
        return Err(HeadError::TooLarge);
    }
    let method = req
        .method
        .and_then(|m| Method::from_bytes(m.as_bytes()).ok())
        .ok_or_else(|| HeadError::Malformed("bad method".into()))?;
    let target = req
        .path
        .filter(|p| !p.is_empty())
        .ok_or_else(|| HeadError::Malformed("empty request target".into()))?
        .to_string();
    let version = match req.version {
        Some(0) => Version::HTTP_10,
        Some(1) => Version::HTTP_11,
        _ => return Err(HeadError::Malformed("bad version".into())),
    };
    let mut map = HeaderMap::with_capacity(req.headers.len());
    for h in req.headers.iter() {
        let name = HeaderName::from_bytes(h.name.as_bytes())
            .map_err(|_| HeadError::Malformed(format!("bad header name {:?}", h.name)))?;
        let value = HeaderValue::from_bytes(h.value)
            .map_err(|_| HeadError::Malformed(format!("bad value of header {}", h.name)))?;
        map.append(name, value);
    }
    Ok(Some(RequestHead {
        method,
        target,
        version,
        headers: map,
        head_len,
    }))
}

/// How a message body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFraming {
    /// No body.
    None,
    /// Exactly this many bytes.
    Length(u64),
    /// Chunked transfer coding.
    Chunked,
}

/// The framing of a request body (RFC 9112 §6.3): Transfer-Encoding ending in chunked wins;
/// any other Transfer-Encoding, or conflicting/invalid Content-Length, is malformed.
pub fn request_body_framing(headers: &HeaderMap) -> Result<BodyFraming, HeadError> {
    let te: Vec<&HeaderValue> = headers.get_all(header::TRANSFER_ENCODING).iter().collect();
    if !te.is_empty() {
        let mut last = String::new();
        for v in te {
            let s = v
                .to_str()
                .map_err(|_| HeadError::Malformed("bad Transfer-Encoding".into()))?;
            for coding in s.split(',') {
                let c = coding.trim();
                if !c.is_empty() {
                    last = c.to_ascii_lowercase();
                }
            }
        }
        return if last == "chunked" {
            Ok(BodyFraming::Chunked)
        } else {
            Err(HeadError::Malformed("unsupported Transfer-Encoding".into()))
        };
    }
    let mut len: Option<u64> = None;
    for v in headers.get_all(header::CONTENT_LENGTH) {
        let s = v
            .to_str()
            .map_err(|_| HeadError::Malformed("bad Content-Length".into()))?;
        for part in s.split(',') {
            let p = part.trim();
            if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
                return Err(HeadError::Malformed("bad Content-Length".into()));
            }
            let n: u64 = p
                .parse()
                .map_err(|_| HeadError::Malformed("bad Content-Length".into()))?;
            if len.is_some_and(|l| l != n) {
                return Err(HeadError::Malformed("conflicting Content-Length".into()));
            }
            len = Some(n);
        }
    }
    Ok(match len {
        Some(0) | None => BodyFraming::None,
        Some(n) => BodyFraming::Length(n),
    })
}

/// Whether the client waits for `100 Continue` before sending the body (`Expect:
/// 100-continue`, RFC 9110 §10.1.1); `Err` for an expectation the proxy cannot meet (417).
pub fn expects_continue(headers: &HeaderMap) -> Result<bool, String> {
    let mut wants = false;
    for v in headers.get_all(header::EXPECT) {
        for e in v.to_str().unwrap_or("?").split(',') {
            let e = e.trim();
            if e.eq_ignore_ascii_case("100-continue") {
                wants = true;
            } else if !e.is_empty() {
                return Err(format!("unsupported expectation {e:?}"));
            }
        }
    }
    Ok(wants)
}

/// The `Max-Forwards` of a request (RFC 9110 §7.6.2), when it has a valid one.
pub fn max_forwards(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::MAX_FORWARDS)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

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
#[derive(Debug, Clone)]
pub struct ChunkedDecoder {
    state: ChunkState,
    limit: usize,
    decoded: usize,
}

/// Longest chunk-size or trailer line accepted (extensions included).
const MAX_CHUNK_LINE: usize = 4096;

impl ChunkedDecoder {
    /// A decoder that fails once more than `limit` body bytes were decoded.
    pub fn new(limit: usize) -> Self {
        ChunkedDecoder {
            state: ChunkState::Size,
            limit,
            decoded: 0,
        }
    }

    /// True once the last chunk and trailers were read.
    pub fn is_done(&self) -> bool {
        self.state == ChunkState::Done
    }

    /// Decodes as much of `input` as possible into `out`; returns the bytes consumed. Stops at
    /// the end of the body (bytes after it belong to the next request).
    pub fn decode(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<usize, ChunkError> {
        let mut pos = 0;
        loop {
            let rest = &input[pos..];
            match self.state {
                ChunkState::Done => return Ok(pos),
                ChunkState::Size => {
                    let Some(line_end) = chunk_line(rest)? else {
                        return Ok(pos);
                    };
                    let line = &rest[..line_end];
                    let size_part = line.split(|&b| b == b';').next().unwrap_or(line);
                    let size_str = std::str::from_utf8(size_part)
                        .map_err(|_| ChunkError::Malformed)?
                        .trim();
                    if size_str.is_empty() || size_str.len() > 15 {
                        return Err(ChunkError::Malformed);
                    }
                    let size =
                        u64::from_str_radix(size_str, 16).map_err(|_| ChunkError::Malformed)?;
                    pos += line_end + 2;
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
                    if self.decoded + take > self.limit {
                        return Err(ChunkError::TooLarge);
                    }
                    out.extend_from_slice(&rest[..take]);
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
                    if rest.len() < 2 {
                        return Ok(pos);
                    }
                    if &rest[..2] != b"\r\n" {
                        return Err(ChunkError::Malformed);
                    }
                    pos += 2;
                    self.state = ChunkState::Size;
                }
                ChunkState::Trailers => {
                    let Some(line_end) = chunk_line(rest)? else {
                        return Ok(pos);
                    };
                    pos += line_end + 2;
                    if line_end == 0 {
                        self.state = ChunkState::Done;
                    }
                }
            }
        }
    }
}

fn find_crlf(b: &[u8]) -> Option<usize> {
    b.windows(2).position(|w| w == b"\r\n")
}

/// The length of the CRLF-ended line at the start of `rest` (`None`: its end has not arrived).
/// A line over [`MAX_CHUNK_LINE`] is malformed as soon as that is certain, whether or not its
/// end has arrived, so the answer never depends on how the bytes were split into reads (a
/// trailing `\r` may be the start of the CRLF, so it does not count yet).
fn chunk_line(rest: &[u8]) -> Result<Option<usize>, ChunkError> {
    let end = find_crlf(rest);
    let known = end.unwrap_or(rest.len() - usize::from(rest.ends_with(b"\r")));
    if known > MAX_CHUNK_LINE {
        return Err(ChunkError::Malformed);
    }
    Ok(end)
}

/// True when the connection stays open after this exchange, judged from the request
/// (HTTP/1.1 unless `Connection: close`; HTTP/1.0 only with `Connection: keep-alive`).
pub fn request_keeps_alive(version: Version, headers: &HeaderMap) -> bool {
    let has = |tok: &str| connection_has(headers, tok);
    if version == Version::HTTP_11 {
        !has("close")
    } else {
        has("keep-alive") && !has("close")
    }
}

/// True when a `Connection` (or `Proxy-Connection`) field lists `token`.
pub fn connection_has(headers: &HeaderMap, token: &str) -> bool {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .chain(headers.get_all("proxy-connection").iter())
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case(token))
}

/// Removes the hop-by-hop fields (RFC 9110 §7.6.1): Connection and every field it lists,
/// Keep-Alive, Proxy-Connection, TE, Trailer, Transfer-Encoding, Upgrade, Proxy-Authorization,
/// Proxy-Authenticate.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let listed: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|t| HeaderName::from_bytes(t.trim().as_bytes()).ok())
        .collect();
    for name in listed {
        headers.remove(name);
    }
    for name in [
        header::CONNECTION,
        HeaderName::from_static("keep-alive"),
        HeaderName::from_static("proxy-connection"),
        header::TE,
        header::TRAILER,
        header::TRANSFER_ENCODING,
        header::UPGRADE,
        header::PROXY_AUTHORIZATION,
        header::PROXY_AUTHENTICATE,
    ] {
        headers.remove(name);
    }
}

/// Appends this proxy to `Via` (RFC 9110 §7.6.3) as `1.1 webpep-<instance>`, so that a
/// request that comes back to the same proxy can be recognised ([`via_has`]).
pub fn add_via(headers: &mut HeaderMap, version: Version, instance: &str) {
    let v = if version == Version::HTTP_10 {
        "1.0"
    } else {
        "1.1"
    };
    if let Ok(value) = HeaderValue::from_str(&format!("{v} webpep-{instance}")) {
        headers.append(header::VIA, value);
    }
}

/// True when a `Via` entry names this proxy instance (a forwarding loop).
pub fn via_has(headers: &HeaderMap, instance: &str) -> bool {
    let me = format!("webpep-{instance}");
    headers
        .get_all(header::VIA)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|entry| entry.split_whitespace().nth(1) == Some(me.as_str()))
}

/// How the response body goes on the wire to the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseFraming {
    /// No body bytes (HEAD, 1xx, 204, 304).
    NoBody,
    /// `Content-Length: n`.
    Length(u64),
    /// Chunked (HTTP/1.1 clients, length unknown).
    Chunked,
    /// Until the connection closes (HTTP/1.0 clients, length unknown).
    Close,
}

/// Chooses the framing of a response to a client speaking `version`.
pub fn response_framing(
    method: &Method,
    status: StatusCode,
    known_len: Option<u64>,
    version: Version,
) -> ResponseFraming {
    if method == Method::HEAD
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
    {
        return ResponseFraming::NoBody;
    }
    match known_len {
        Some(n) => ResponseFraming::Length(n),
        None if version == Version::HTTP_11 => ResponseFraming::Chunked,
        None => ResponseFraming::Close,
    }
}

/// Serializes a response head. `headers` must already be free of hop-by-hop fields; this
/// adds the framing field and `Connection`.
pub fn write_response_head(
    status: StatusCode,
    headers: &HeaderMap,
    framing: ResponseFraming,
    head_len_for_head: Option<u64>,
    keep_alive: bool,
    version: Version,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    let v = if version == Version::HTTP_10 {
        "HTTP/1.0"
    } else {
        "HTTP/1.1"
    };
    out.extend_from_slice(v.as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("Unknown").as_bytes());
    out.extend_from_slice(b"\r\n");
    for (name, value) in headers {
        if name == header::CONTENT_LENGTH {
            continue;
        }
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    match framing {
        ResponseFraming::Length(n) => {
            out.extend_from_slice(format!("content-length: {n}\r\n").as_bytes());
        }
        ResponseFraming::Chunked => out.extend_from_slice(b"transfer-encoding: chunked\r\n"),
        ResponseFraming::NoBody => {
            // HEAD and 304 keep the length of the full representation when known.
            if let Some(n) = head_len_for_head {
                out.extend_from_slice(format!("content-length: {n}\r\n").as_bytes());
            }
        }
        ResponseFraming::Close => {}
    }
    let close = !keep_alive || framing == ResponseFraming::Close;
    if close {
        out.extend_from_slice(b"connection: close\r\n");
    } else if version == Version::HTTP_10 {
        out.extend_from_slice(b"connection: keep-alive\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Option<RequestHead>, HeadError> {
        parse_request_head(s.as_bytes(), 64 * 1024)
    }

    #[test]
    fn absolute_form_get() {
        let h =
            parse("GET http://a.test/x?y=1 HTTP/1.1\r\nHost: a.test\r\nAccept: */*\r\n\r\nrest")
                .unwrap()
                .unwrap();
        assert_eq!(h.method, Method::GET);
        assert_eq!(h.target, "http://a.test/x?y=1");
        assert_eq!(h.version, Version::HTTP_11);
        assert_eq!(h.headers.get("accept").unwrap(), "*/*");
        assert_eq!(
            h.head_len,
            "GET http://a.test/x?y=1 HTTP/1.1\r\nHost: a.test\r\nAccept: */*\r\n\r\n".len()
        );
    }

    #[test]
    fn partial_then_too_large() {
        assert!(parse("GET / HTTP/1.1\r\nHost: a").unwrap().is_none());
        let big = format!("GET / HTTP/1.1\r\nX: {}", "a".repeat(300));
        assert_eq!(
            parse_request_head(big.as_bytes(), 256).unwrap_err(),
            HeadError::TooLarge
        );
        let complete = format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(300));
        assert_eq!(
            parse_request_head(complete.as_bytes(), 256).unwrap_err(),
            HeadError::TooLarge
        );
    }

    #[test]
    fn malformed_lines() {
        for bad in [
            "GET\r\n\r\n",
            "GET / HTTP/2.0\r\n\r\n",
            "G(T / HTTP/1.1\r\n\r\n",
            "GET / HTTP/1.1\r\nBad Header: x\r\n\r\n",
            "GET / HTTP/1.1\r\n: x\r\n\r\n",
            "GET / FOO/1.1\r\n\r\n",
        ] {
            let e = parse(bad).unwrap_err();
            assert_eq!(e.status(), StatusCode::BAD_REQUEST, "{bad:?}");
        }
    }

    #[test]
    fn too_many_headers_is_431() {
        let mut s = String::from("GET / HTTP/1.1\r\n");
        for i in 0..(MAX_HEADERS + 1) {
            s.push_str(&format!("X-{i}: v\r\n"));
        }
        s.push_str("\r\n");
        assert_eq!(parse(&s).unwrap_err(), HeadError::TooLarge);
    }

    #[test]
    fn framing_rules() {
        let mut h = HeaderMap::new();
        assert_eq!(request_body_framing(&h).unwrap(), BodyFraming::None);
        h.insert("content-length", HeaderValue::from_static("12"));
        assert_eq!(request_body_framing(&h).unwrap(), BodyFraming::Length(12));
        h.append("content-length", HeaderValue::from_static("13"));
        assert!(request_body_framing(&h).is_err());
        let mut h = HeaderMap::new();
        h.insert("content-length", HeaderValue::from_static("-1"));
        assert!(request_body_framing(&h).is_err());
        let mut h = HeaderMap::new();
        h.insert(
            "transfer-encoding",
            HeaderValue::from_static("gzip, chunked"),
        );
        h.insert("content-length", HeaderValue::from_static("5"));
        assert_eq!(request_body_framing(&h).unwrap(), BodyFraming::Chunked);
        h.insert("transfer-encoding", HeaderValue::from_static("gzip"));
        assert!(request_body_framing(&h).is_err());
    }

    #[test]
    fn expectations() {
        let mut h = HeaderMap::new();
        assert_eq!(expects_continue(&h), Ok(false));
        h.insert(header::EXPECT, HeaderValue::from_static("100-Continue"));
        assert_eq!(expects_continue(&h), Ok(true));
        h.insert(header::EXPECT, HeaderValue::from_static("something-else"));
        assert!(expects_continue(&h).is_err());
    }

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
        // in the same read or not; one at the limit passes either way.
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
                let mut d = ChunkedDecoder::new(100);
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

    #[test]
    fn chunked_errors() {
        let mut out = Vec::new();
        assert_eq!(
            ChunkedDecoder::new(100).decode(b"zz\r\n", &mut out),
            Err(ChunkError::Malformed)
        );
        assert_eq!(
            ChunkedDecoder::new(100).decode(b"2\r\nabX\r\n", &mut out),
            Err(ChunkError::Malformed)
        );
        assert_eq!(
            ChunkedDecoder::new(3).decode(b"5\r\nhello\r\n", &mut out),
            Err(ChunkError::TooLarge)
        );
        assert_eq!(
            ChunkedDecoder::new(3).decode(b"ffffffffffffffffff\r\n", &mut out),
            Err(ChunkError::Malformed)
        );
    }

    #[test]
    fn keep_alive_rules() {
        let mut h = HeaderMap::new();
        assert!(request_keeps_alive(Version::HTTP_11, &h));
        assert!(!request_keeps_alive(Version::HTTP_10, &h));
        h.insert("connection", HeaderValue::from_static("Keep-Alive"));
        assert!(request_keeps_alive(Version::HTTP_10, &h));
        h.insert("connection", HeaderValue::from_static("foo, close"));
        assert!(!request_keeps_alive(Version::HTTP_11, &h));
    }

    #[test]
    fn hop_by_hop_removed_with_listed_fields() {
        let mut h = HeaderMap::new();
        h.insert(
            "connection",
            HeaderValue::from_static("x-secret, keep-alive"),
        );
        h.insert("x-secret", HeaderValue::from_static("1"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert("proxy-authorization", HeaderValue::from_static("Basic x"));
        h.insert("te", HeaderValue::from_static("trailers"));
        h.insert("upgrade", HeaderValue::from_static("h2c"));
        h.insert("accept", HeaderValue::from_static("*/*"));
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1);
        assert!(h.contains_key("accept"));
    }

    #[test]
    fn via_names_the_instance() {
        let mut h = HeaderMap::new();
        h.insert(header::VIA, HeaderValue::from_static("1.0 other"));
        assert!(!via_has(&h, "ab12"));
        add_via(&mut h, Version::HTTP_11, "ab12");
        assert!(via_has(&h, "ab12"));
        assert!(!via_has(&h, "ab1"));
    }

    #[test]
    fn response_head_framing() {
        let mut h = HeaderMap::new();
        h.insert("content-type", HeaderValue::from_static("text/plain"));
        h.insert("content-length", HeaderValue::from_static("999"));
        let f = response_framing(&Method::GET, StatusCode::OK, Some(3), Version::HTTP_11);
        let s = String::from_utf8(write_response_head(
            StatusCode::OK,
            &h,
            f,
            None,
            true,
            Version::HTTP_11,
        ))
        .unwrap();
        assert_eq!(
            s,
            "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 3\r\n\r\n"
        );
        let f = response_framing(&Method::GET, StatusCode::OK, None, Version::HTTP_10);
        assert_eq!(f, ResponseFraming::Close);
        let s = String::from_utf8(write_response_head(
            StatusCode::OK,
            &h,
            f,
            None,
            true,
            Version::HTTP_10,
        ))
        .unwrap();
        assert!(s.ends_with("connection: close\r\n\r\n"));
        assert_eq!(
            response_framing(&Method::HEAD, StatusCode::OK, Some(3), Version::HTTP_11),
            ResponseFraming::NoBody
        );
    }
}
