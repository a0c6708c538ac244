//! Responses: choosing the framing of a response and writing its head as a server
//! ([`response_framing`], [`write_response_head`], or the pieces [`write_status_line`] and
//! [`write_field`]); parsing a head and finding how its body is delimited as a client
//! ([`parse_response_head`], [`response_body_framing`]).

use http::header::{self, HeaderMap};
use http::{Method, StatusCode, Version};

use crate::fields::{connection_value, declared, has_token, persists, Declared, LengthError};
use crate::MAX_HEADERS;

/// How a response body is delimited (RFC 9112 §6.3), read or written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseFraming {
    /// No body bytes (HEAD, 1xx, 204, 304, or a Content-Length of 0).
    NoBody,
    /// `Content-Length: n`.
    Length(u64),
    /// Chunked.
    Chunked,
    /// Until the connection closes.
    Close,
}

#[allow(non_upper_case_globals)]
impl ResponseFraming {
    /// [`ResponseFraming::NoBody`] under the name the loader's API gives it.
    pub const None: ResponseFraming = ResponseFraming::NoBody;
    /// [`ResponseFraming::Close`] under the name the loader's API gives it.
    pub const UntilClose: ResponseFraming = ResponseFraming::Close;
}

/// True when a response to a request with `method` and of `status` has no body whatever its
/// fields say: HEAD, 1xx, 204, 304 (RFC 9112 §6.3 items 1–2).
pub fn response_has_no_body(method: &str, status: u16) -> bool {
    method.eq_ignore_ascii_case("HEAD")
        || (100..200).contains(&status)
        || status == 204
        || status == 304
}

/// Chooses the framing of a response to a client speaking `version`: the known length, or
/// chunked for HTTP/1.1 and until close for HTTP/1.0.
pub fn response_framing(
    method: &Method,
    status: StatusCode,
    known_len: Option<u64>,
    version: Version,
) -> ResponseFraming {
    if response_has_no_body(method.as_str(), status.as_u16()) {
        return ResponseFraming::NoBody;
    }
    match known_len {
        Some(n) => ResponseFraming::Length(n),
        None if version == Version::HTTP_11 => ResponseFraming::Chunked,
        None => ResponseFraming::Close,
    }
}

/// Appends a status line: `HTTP/1.x code reason`.
pub fn write_status_line(out: &mut Vec<u8>, version: Version, status: u16, reason: &str) {
    out.extend_from_slice(if version == Version::HTTP_10 {
        b"HTTP/1.0 "
    } else {
        b"HTTP/1.1 "
    });
    out.extend_from_slice(format!("{status:03} ").as_bytes());
    out.extend_from_slice(reason.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// Appends one header field line, `name: value`. The caller checks the syntax of what it did
/// not get from a parser ([`crate::valid_field_name`], [`crate::valid_field_value`]).
pub fn write_field(out: &mut Vec<u8>, name: &str, value: &[u8]) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Serializes a response head. `headers` must already be free of hop-by-hop fields; this
/// adds the framing field (replacing any Content-Length) and `Connection`.
pub fn write_response_head(
    status: StatusCode,
    headers: &HeaderMap,
    framing: ResponseFraming,
    head_len_for_head: Option<u64>,
    keep_alive: bool,
    version: Version,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    write_status_line(
        &mut out,
        version,
        status.as_u16(),
        status.canonical_reason().unwrap_or("Unknown"),
    );
    for (name, value) in headers {
        if name != header::CONTENT_LENGTH {
            write_field(&mut out, name.as_str(), value.as_bytes());
        }
    }
    // HEAD and 304 keep the length of the full representation when known.
    let length = match framing {
        ResponseFraming::Length(n) => Some(n),
        ResponseFraming::NoBody => head_len_for_head,
        ResponseFraming::Chunked | ResponseFraming::Close => None,
    };
    if let Some(n) = length {
        write_field(&mut out, "content-length", n.to_string().as_bytes());
    }
    if framing == ResponseFraming::Chunked {
        write_field(&mut out, "transfer-encoding", b"chunked");
    }
    let keep_alive = keep_alive && framing != ResponseFraming::Close;
    if let Some(v) = connection_value(keep_alive, version) {
        write_field(&mut out, "connection", v.as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// A parsed response head, its fields as they came (names in their case, values as text).
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
    /// The first value of the field `name`.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The version.
    pub fn version(&self) -> Version {
        if self.minor >= 1 {
            Version::HTTP_11
        } else {
            Version::HTTP_10
        }
    }

    /// Whether the connection may carry another request after this response (given that we
    /// asked for a persistent connection).
    pub fn keep_alive(&self) -> bool {
        persists(
            self.version(),
            has_token(&self.headers, "connection", "close"),
            has_token(&self.headers, "connection", "keep-alive"),
        )
    }

    pub fn version_str(&self) -> &'static str {
        if self.minor >= 1 {
            "HTTP/1.1"
        } else {
            "HTTP/1.0"
        }
    }
}

/// What a client cannot read; the loader turns it into its `BadResponse`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodecError(pub String);

impl std::fmt::Display for CodecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CodecError {}

/// Parses a response head at the start of `buf`. `Ok(None)`: more bytes are needed (and
/// `buf` is still within `max_len`).
pub fn parse_response_head(buf: &[u8], max_len: usize) -> Result<Option<ResponseHead>, CodecError> {
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
                minor: resp.version.unwrap_or(1),
                status,
                reason: resp.reason.unwrap_or("").to_string(),
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

/// How the body of `head`, a response to a request with `method`, is delimited (RFC 9112
/// §6.3): none for HEAD, 1xx, 204 and 304; chunked when Transfer-Encoding ends in chunked,
/// until close for any other Transfer-Encoding; else Content-Length (conflicting or invalid:
/// an error), else until close.
pub fn response_body_framing(
    head: &ResponseHead,
    method: &str,
) -> Result<ResponseFraming, CodecError> {
    if response_has_no_body(method, head.status) {
        return Ok(ResponseFraming::NoBody);
    }
    match declared(&head.headers) {
        Ok(Declared::Coded(Some(true))) => Ok(ResponseFraming::Chunked),
        Ok(Declared::Coded(_)) => Ok(ResponseFraming::Close),
        Ok(Declared::Length(Some(0))) => Ok(ResponseFraming::NoBody),
        Ok(Declared::Length(Some(n))) => Ok(ResponseFraming::Length(n)),
        Ok(Declared::Length(None)) => Ok(ResponseFraming::Close),
        Err(LengthError::Bad) => Err(CodecError(format!(
            "bad Content-Length {:?}",
            head.header("content-length").unwrap_or("")
        ))),
        Err(LengthError::Conflicting) => {
            Err(CodecError("conflicting Content-Length values".into()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn head(raw: &[u8]) -> ResponseHead {
        parse_response_head(raw, 1024)
            .expect("parses")
            .expect("complete")
    }

    #[test]
    fn head_and_framing() {
        let raw = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: keep-alive\r\n\r\nhello";
        let h = head(raw);
        assert_eq!(h.status, 200);
        assert_eq!(h.reason, "OK");
        assert_eq!(h.len, raw.len() - 5);
        assert_eq!(h.header("content-length"), Some("5"));
        assert!(h.keep_alive());
        assert_eq!(
            response_body_framing(&h, "GET"),
            Ok(ResponseFraming::Length(5))
        );
        assert_eq!(
            response_body_framing(&h, "HEAD"),
            Ok(ResponseFraming::NoBody)
        );
        assert_eq!(
            parse_response_head(b"HTTP/1.1 200 OK\r\nA: b\r\n", 1024),
            Ok(None)
        );
        assert!(parse_response_head(b"garbage\r\n\r\n", 1024).is_err());
        assert!(parse_response_head(&[b'x'; 100], 10).is_err());
        assert!(parse_response_head(raw, 20).is_err());
        let h10 = head(b"HTTP/1.0 200 OK\r\n\r\n");
        assert!(!h10.keep_alive());
        assert_eq!(h10.version_str(), "HTTP/1.0");
        assert_eq!(
            response_body_framing(&h10, "GET"),
            Ok(ResponseFraming::Close)
        );
        let h10ka = head(b"HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\n\r\n");
        assert!(h10ka.keep_alive());
        let close =
            head(b"HTTP/1.1 304 Not Modified\r\nConnection: close\r\nContent-Length: 9\r\n\r\n");
        assert!(!close.keep_alive());
        assert_eq!(
            response_body_framing(&close, "GET"),
            Ok(ResponseFraming::NoBody)
        );
        let conflict = head(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n");
        assert!(response_body_framing(&conflict, "GET").is_err());
        let bad = head(b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n");
        assert!(response_body_framing(&bad, "GET").is_err());
        let te = head(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\nContent-Length: 3\r\n\r\n",
        );
        assert_eq!(
            response_body_framing(&te, "GET"),
            Ok(ResponseFraming::Chunked)
        );
        let gzip = head(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n");
        assert_eq!(
            response_body_framing(&gzip, "GET"),
            Ok(ResponseFraming::Close)
        );
        let empty = head(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
        assert_eq!(
            response_body_framing(&empty, "GET"),
            Ok(ResponseFraming::NoBody)
        );
        let info = head(b"HTTP/1.1 100 Continue\r\n\r\n");
        assert_eq!(
            response_body_framing(&info, "GET"),
            Ok(ResponseFraming::NoBody)
        );
    }

    #[test]
    fn loader_names_of_the_framings() {
        assert_eq!(ResponseFraming::None, ResponseFraming::NoBody);
        assert_eq!(ResponseFraming::UntilClose, ResponseFraming::Close);
        assert!(matches!(ResponseFraming::NoBody, ResponseFraming::None));
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
        assert!(s.starts_with("HTTP/1.0 200 OK\r\n"));
        assert!(s.ends_with("connection: close\r\n\r\n"));
        assert_eq!(
            response_framing(&Method::HEAD, StatusCode::OK, Some(3), Version::HTTP_11),
            ResponseFraming::NoBody
        );
        let s = String::from_utf8(write_response_head(
            StatusCode::NOT_MODIFIED,
            &HeaderMap::new(),
            ResponseFraming::NoBody,
            Some(7),
            true,
            Version::HTTP_10,
        ))
        .unwrap();
        assert_eq!(
            s,
            "HTTP/1.0 304 Not Modified\r\ncontent-length: 7\r\nconnection: keep-alive\r\n\r\n"
        );
        let s = String::from_utf8(write_response_head(
            StatusCode::OK,
            &HeaderMap::new(),
            ResponseFraming::Chunked,
            None,
            false,
            Version::HTTP_11,
        ))
        .unwrap();
        assert_eq!(
            s,
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n"
        );
    }

    #[test]
    fn written_heads_parse_back() {
        let mut h = HeaderMap::new();
        h.insert("x-a", HeaderValue::from_static("1"));
        for (framing, keep) in [
            (ResponseFraming::Length(4), true),
            (ResponseFraming::Chunked, true),
            (ResponseFraming::Close, true),
            (ResponseFraming::Length(0), false),
        ] {
            let bytes =
                write_response_head(StatusCode::OK, &h, framing, None, keep, Version::HTTP_11);
            let back = head(&bytes);
            assert_eq!(back.len, bytes.len());
            assert_eq!(back.header("x-a"), Some("1"));
            let read = response_body_framing(&back, "GET").unwrap();
            let expect = match framing {
                ResponseFraming::Length(0) => ResponseFraming::NoBody,
                f => f,
            };
            assert_eq!(read, expect);
            assert_eq!(back.keep_alive(), keep && framing != ResponseFraming::Close);
        }
        let mut out = Vec::new();
        write_status_line(&mut out, Version::HTTP_11, 599, "Odd");
        write_field(&mut out, "Content-Length", b"0");
        out.extend_from_slice(b"\r\n");
        let back = head(&out);
        assert_eq!((back.status, back.reason.as_str()), (599, "Odd"));
    }
}
