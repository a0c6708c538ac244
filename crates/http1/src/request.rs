//! Requests: parsing a head as a server ([`parse_request_head`], pipelined requests one after
//! the other from the same buffer), the framing of a request body ([`request_body_framing`]),
//! and writing a head as a client ([`OutgoingRequest`]).

use http::header::{HeaderMap, HeaderName, HeaderValue};
use http::{Method, StatusCode, Version};

use crate::fields::{declared, Declared, LengthError};
use crate::response::write_field;
use crate::MAX_HEADERS;

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
/// still within `max_header_bytes`). Leading blank lines are skipped (RFC 9112 §2.2). Bytes
/// after the head (a body, pipelined requests) are left alone: the next head starts at
/// `head_len` plus the body.
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

/// How a request body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFraming {
    /// No body.
    None,
    /// Exactly this many bytes.
    Length(u64),
    /// Chunked transfer coding.
    Chunked,
}

/// The framing of a request body (RFC 9112 §6.3): Transfer-Encoding ending in chunked wins
/// (Content-Length then does not count); any other Transfer-Encoding, or conflicting or
/// invalid Content-Length, is malformed.
pub fn request_body_framing(headers: &HeaderMap) -> Result<BodyFraming, HeadError> {
    let malformed = |why: &str| HeadError::Malformed(why.into());
    match declared(headers) {
        Ok(Declared::Coded(Some(true))) => Ok(BodyFraming::Chunked),
        Ok(Declared::Coded(Some(false))) => Err(malformed("unsupported Transfer-Encoding")),
        Ok(Declared::Coded(None)) => Err(malformed("bad Transfer-Encoding")),
        Ok(Declared::Length(Some(0) | None)) => Ok(BodyFraming::None),
        Ok(Declared::Length(Some(n))) => Ok(BodyFraming::Length(n)),
        Err(LengthError::Bad) => Err(malformed("bad Content-Length")),
        Err(LengthError::Conflicting) => Err(malformed("conflicting Content-Length")),
    }
}

/// Appends a request line: `METHOD target HTTP/1.x`.
pub fn write_request_line(out: &mut Vec<u8>, method: &str, target: &str, version: Version) {
    out.extend_from_slice(method.as_bytes());
    out.push(b' ');
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(if version == Version::HTTP_10 {
        b" HTTP/1.0\r\n"
    } else {
        b" HTTP/1.1\r\n"
    });
}

/// A request head a client sends, its fields as it writes them.
#[derive(Debug, Clone)]
pub struct OutgoingRequest {
    pub method: String,
    /// Origin form (`/path?q`), absolute form (`http://host/path`, through a proxy) or
    /// authority form (CONNECT).
    pub target: String,
    /// `true` for HTTP/1.1, `false` for HTTP/1.0.
    pub http11: bool,
    pub headers: Vec<(String, String)>,
}

impl OutgoingRequest {
    /// The head on the wire.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(128 + self.target.len());
        let version = if self.http11 {
            Version::HTTP_11
        } else {
            Version::HTTP_10
        };
        write_request_line(&mut out, &self.method, &self.target, version);
        for (n, v) in &self.headers {
            write_field(&mut out, n, v.as_bytes());
        }
        out.extend_from_slice(b"\r\n");
        out
    }
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
    fn pipelined_heads_one_after_the_other() {
        let wire = b"GET /a HTTP/1.1\r\nHost: x\r\n\r\nPOST /b HTTP/1.0\r\nContent-Length: 2\r\n\r\nhiGET /c HTTP/1.1\r\n\r\n";
        let mut at = 0;
        let mut seen = Vec::new();
        while let Some(h) = parse_request_head(&wire[at..], 1024).unwrap() {
            let body = match request_body_framing(&h.headers).unwrap() {
                BodyFraming::Length(n) => n as usize,
                _ => 0,
            };
            seen.push((h.method.to_string(), h.target.clone(), h.version, body));
            at += h.head_len + body;
        }
        assert_eq!(at, wire.len());
        assert_eq!(
            seen,
            [
                ("GET".into(), "/a".into(), Version::HTTP_11, 0),
                ("POST".into(), "/b".into(), Version::HTTP_10, 2),
                ("GET".into(), "/c".into(), Version::HTTP_11, 0),
            ]
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
            "\x00\x01garbage\r\n\r\n",
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

    /// Mutated and random inputs never panic, and a complete parse never claims more bytes
    /// than it was given nor more than the limit.
    #[test]
    fn arbitrary_bytes_do_not_panic() {
        let seed = b"GET /a?b HTTP/1.1\r\nHost: x.test\r\nContent-Length: 5\r\nIf-None-Match: \"1\"\r\n\r\nhello";
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for round in 0..20_000 {
            let mut buf = seed.to_vec();
            if round % 3 == 0 {
                buf = (0..(next() % 200)).map(|_| next() as u8).collect();
            } else {
                for _ in 0..(1 + next() % 4) {
                    let i = (next() as usize) % buf.len();
                    match next() % 3 {
                        0 => buf[i] = next() as u8,
                        1 => buf.truncate(i),
                        _ => buf.insert(i, next() as u8),
                    }
                    if buf.is_empty() {
                        break;
                    }
                }
            }
            if let Ok(Some(h)) = parse_request_head(&buf, 1024) {
                assert!(h.head_len <= buf.len() && h.head_len <= 1024);
                let _ = request_body_framing(&h.headers);
            }
        }
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
    fn request_serialization() {
        let r = OutgoingRequest {
            method: "GET".into(),
            target: "/x".into(),
            http11: false,
            headers: vec![("Host".into(), "a".into())],
        };
        assert_eq!(r.to_bytes(), b"GET /x HTTP/1.0\r\nHost: a\r\n\r\n");
        let r = OutgoingRequest {
            method: "CONNECT".into(),
            target: "a.test:443".into(),
            http11: true,
            headers: vec![],
        };
        let bytes = r.to_bytes();
        let back = parse_request_head(&bytes, 1024).unwrap().unwrap();
        assert_eq!(back.method, Method::CONNECT);
        assert_eq!(back.target, "a.test:443");
        assert_eq!(back.head_len, bytes.len());
    }
}
