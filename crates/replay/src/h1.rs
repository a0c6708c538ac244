//! What the replay server reads of an HTTP/1.x request and how it writes its responses, on
//! the project's one HTTP/1 codec (`webpep_http1`, shared with the edge proxy and the loader:
//! head parsing, body framing, keep-alive and field rules). The connection loop (pipelined
//! requests answered in order, `close_after`) lives in `server.rs`.

use http::header::{HOST, IF_MODIFIED_SINCE, IF_NONE_MATCH};
use http::{HeaderMap, Version};
use webpep_http1::{self as codec, BodyFraming, HeadError};

use crate::content::{reason, status_has_no_body, Reply};

/// Most header fields accepted in one request (more → 431).
pub(crate) use webpep_http1::MAX_HEADERS;

/// What the replay server reads of one request head.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Head {
    pub method: String,
    pub target: String,
    pub version: Version,
    pub host: Option<String>,
    pub if_none_match: Option<String>,
    pub if_modified_since: Option<String>,
    pub content_length: u64,
    pub chunked: bool,
    keep_alive: bool,
}

#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Parse {
    /// A whole head, `usize` bytes long.
    Complete(Head, usize),
    /// More bytes are needed.
    Partial,
    /// Not HTTP/1.x: 400 and close.
    Invalid(String),
    /// The head is over the limit (bytes or header count): 431 and close.
    TooLarge,
}

/// Parses the request head at the start of `buf`, allowing at most `max_head` bytes.
pub(crate) fn parse(buf: &[u8], max_head: usize) -> Parse {
    let head = match codec::parse_request_head(buf, max_head) {
        Ok(Some(head)) => head,
        Ok(None) => return Parse::Partial,
        Err(HeadError::TooLarge) => return Parse::TooLarge,
        Err(e) => return Parse::Invalid(e.to_string()),
    };
    let host = match host(&head.headers) {
        Ok(host) => host,
        Err(why) => return Parse::Invalid(why),
    };
    let (content_length, chunked) = match codec::request_body_framing(&head.headers) {
        Ok(BodyFraming::None) => (0, false),
        Ok(BodyFraming::Length(n)) => (n, false),
        Ok(BodyFraming::Chunked) => (0, true),
        Err(e) => return Parse::Invalid(e.to_string()),
    };
    let texts = |name| {
        head.headers
            .get_all(name)
            .iter()
            .filter_map(|v| std::str::from_utf8(v.as_bytes()).ok())
            .map(str::trim)
            .collect::<Vec<_>>()
    };
    let if_none_match = texts(IF_NONE_MATCH);
    let if_modified_since = texts(IF_MODIFIED_SINCE);
    Parse::Complete(
        Head {
            method: head.method.as_str().to_string(),
            keep_alive: codec::request_keeps_alive(head.version, &head.headers),
            target: head.target,
            version: head.version,
            host,
            if_none_match: (!if_none_match.is_empty()).then(|| if_none_match.join(", ")),
            if_modified_since: if_modified_since.last().map(|v| v.to_string()),
            content_length,
            chunked,
        },
        head.head_len,
    )
}

/// The one Host of a request, if any: a name (and port) without spaces or slashes.
fn host(headers: &HeaderMap) -> Result<Option<String>, String> {
    let mut all = headers.get_all(HOST).iter();
    let Some(value) = all.next() else {
        return Ok(None);
    };
    if all.next().is_some() {
        return Err("more than one Host".into());
    }
    let value = std::str::from_utf8(value.as_bytes())
        .map_err(|_| "Host is not text".to_string())?
        .trim();
    if value.is_empty() || value.contains(|c: char| c.is_whitespace() || c == '/') {
        return Err(format!("bad Host {value:?}"));
    }
    Ok(Some(value.to_string()))
}

impl Head {
    /// Whether the connection stays open after this request (before any server policy).
    pub(crate) fn keep_alive(&self) -> bool {
        self.keep_alive
    }
}

/// Appends `reply` as an HTTP/1.1 response to `out`. `head_only` for HEAD; `close` adds
/// `Connection: close`; a connection to an HTTP/1.0 `client` that stays open gets
/// `Connection: keep-alive`.
pub(crate) fn write_reply(
    out: &mut Vec<u8>,
    reply: &Reply,
    head_only: bool,
    close: bool,
    client: Version,
) {
    codec::write_status_line(out, Version::HTTP_11, reply.status, reason(reply.status));
    for (name, value) in &reply.headers {
        if !codec::valid_field_name(name) || !codec::valid_field_value(value) {
            tracing::warn!(%name, "replay: dropping a header that cannot be sent");
            continue;
        }
        codec::write_field(out, name, value.as_bytes());
    }
    if let Some(len) = reply.content_length {
        codec::write_field(out, "Content-Length", len.to_string().as_bytes());
    }
    if let Some(v) = codec::connection_value(!close, client) {
        codec::write_field(out, "Connection", v.as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    if !head_only && !status_has_no_body(reply.status) {
        out.extend_from_slice(&reply.body);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn head(buf: &[u8]) -> (Head, usize) {
        match parse(buf, 64 * 1024) {
            Parse::Complete(h, n) => (h, n),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn parses_a_get() {
        let req = b"GET /a?b HTTP/1.1\r\nHost: X.test\r\nIf-None-Match: \"1\"\r\nIf-None-Match: \"2\"\r\nIf-Modified-Since: a\r\nIf-Modified-Since: b\r\n\r\nGET";
        let (h, n) = head(req);
        assert_eq!(n, req.len() - 3);
        assert_eq!(h.method, "GET");
        assert_eq!(h.target, "/a?b");
        assert_eq!(h.host.as_deref(), Some("X.test"));
        assert_eq!(h.if_none_match.as_deref(), Some("\"1\", \"2\""));
        assert_eq!(h.if_modified_since.as_deref(), Some("b"));
        assert_eq!((h.content_length, h.chunked), (0, false));
        assert!(h.keep_alive());
        let (h, _) = head(b"POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\n");
        assert_eq!((h.host, h.content_length, h.chunked), (None, 5, false));
        let (h, _) = head(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
        assert!(h.chunked);
    }

    #[test]
    fn keep_alive_rules() {
        assert!(!head(b"GET / HTTP/1.0\r\n\r\n").0.keep_alive());
        assert!(head(b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n")
            .0
            .keep_alive());
        assert!(!head(b"GET / HTTP/1.1\r\nConnection: foo, close\r\n\r\n")
            .0
            .keep_alive());
    }

    /// The codec's verdicts become 400 and 431; the Host and framing rules add 400s.
    #[test]
    fn errors_are_invalid_or_too_large() {
        assert_eq!(parse(b"GET / HTTP/1.1\r\nHost: a", 1024), Parse::Partial);
        let invalid = |req: &str| matches!(parse(req.as_bytes(), 1024), Parse::Invalid(_));
        assert!(invalid("GET / HTTP/2.0\r\n\r\n"));
        assert!(invalid("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"));
        assert!(invalid("GET / HTTP/1.1\r\nHost: a/b\r\n\r\n"));
        assert!(invalid("GET / HTTP/1.1\r\nHost: \r\n\r\n"));
        assert!(invalid("GET / HTTP/1.1\r\nContent-Length: x\r\n\r\n"));
        let big = format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(2000));
        assert_eq!(parse(big.as_bytes(), 1024), Parse::TooLarge);
        let fields: String = (0..200).map(|i| format!("X{i}: y\r\n")).collect();
        let many = format!("GET / HTTP/1.1\r\n{fields}\r\n");
        assert_eq!(parse(many.as_bytes(), 64 * 1024), Parse::TooLarge);
    }

    #[test]
    fn replies() {
        let reply = Reply {
            status: 200,
            headers: vec![
                ("Content-Type".into(), "text/plain".into()),
                ("Bad Name".into(), "x".into()),
                ("X-Bad".into(), "a\r\nb".into()),
            ],
            body: Bytes::from_static(b"hi"),
            content_length: Some(2),
        };
        let mut out = Vec::new();
        write_reply(&mut out, &reply, false, false, Version::HTTP_11);
        assert_eq!(
            out,
            b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nhi"
        );
        let mut out = Vec::new();
        write_reply(&mut out, &reply, true, false, Version::HTTP_10);
        assert!(out.ends_with(b"Content-Length: 2\r\nConnection: keep-alive\r\n\r\n"));
        let mut out = Vec::new();
        write_reply(&mut out, &reply, false, true, Version::HTTP_10);
        assert!(out.ends_with(b"Connection: close\r\n\r\nhi"));
    }
}
