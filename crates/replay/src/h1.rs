//! HTTP/1.x request parsing (on `httparse`, with strict limits) and response serialization.
//! Pure functions: the connection loop lives in `server.rs`.

use crate::content::{reason, status_has_no_body, Reply};

/// Most header fields accepted in one request (more → 431).
pub(crate) const MAX_HEADERS: usize = 128;

/// One parsed request head.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Head {
    pub method: String,
    pub target: String,
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub minor: u8,
    pub host: Option<String>,
    pub conn_close: bool,
    pub conn_keep_alive: bool,
    pub if_none_match: Option<String>,
    pub if_modified_since: Option<String>,
    pub content_length: u64,
    pub chunked: bool,
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
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let n = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => {
            return if buf.len() > max_head {
                Parse::TooLarge
            } else {
                Parse::Partial
            };
        }
        Err(httparse::Error::TooManyHeaders) => return Parse::TooLarge,
        Err(e) => return Parse::Invalid(format!("malformed request: {e}")),
    };
    if n > max_head {
        return Parse::TooLarge;
    }
    let (Some(method), Some(target), Some(minor)) = (req.method, req.path, req.version) else {
        return Parse::Invalid("incomplete request line".into());
    };
    let mut head = Head {
        method: method.to_string(),
        target: target.to_string(),
        minor,
        host: None,
        conn_close: false,
        conn_keep_alive: false,
        if_none_match: None,
        if_modified_since: None,
        content_length: 0,
        chunked: false,
    };
    let mut seen_length: Option<u64> = None;
    for h in req.headers.iter() {
        let name = h.name;
        let value = match std::str::from_utf8(h.value) {
            Ok(v) => v.trim(),
            Err(_) => {
                // Opaque bytes are allowed in fields we do not read.
                if name.eq_ignore_ascii_case("host") || name.eq_ignore_ascii_case("content-length")
                {
                    return Parse::Invalid(format!("{name} is not text"));
                }
                continue;
            }
        };
        if name.eq_ignore_ascii_case("host") {
            if head.host.is_some() {
                return Parse::Invalid("more than one Host".into());
            }
            if value.is_empty() || value.contains(|c: char| c.is_whitespace() || c == '/') {
                return Parse::Invalid(format!("bad Host {value:?}"));
            }
            head.host = Some(value.to_string());
        } else if name.eq_ignore_ascii_case("connection") {
            for token in value.split(',') {
                let t = token.trim();
                if t.eq_ignore_ascii_case("close") {
                    head.conn_close = true;
                } else if t.eq_ignore_ascii_case("keep-alive") {
                    head.conn_keep_alive = true;
                }
            }
        } else if name.eq_ignore_ascii_case("if-none-match") {
            head.if_none_match = Some(match head.if_none_match.take() {
                Some(prev) => format!("{prev}, {value}"),
                None => value.to_string(),
            });
        } else if name.eq_ignore_ascii_case("if-modified-since") {
            head.if_modified_since = Some(value.to_string());
        } else if name.eq_ignore_ascii_case("content-length") {
            let Ok(len) = value.parse::<u64>() else {
                return Parse::Invalid(format!("bad Content-Length {value:?}"));
            };
            if seen_length.is_some_and(|l| l != len) {
                return Parse::Invalid("conflicting Content-Length".into());
            }
            seen_length = Some(len);
            head.content_length = len;
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            head.chunked = true;
        }
    }
    if head.chunked && seen_length.is_some() {
        return Parse::Invalid("both Transfer-Encoding and Content-Length".into());
    }
    Parse::Complete(head, n)
}

impl Head {
    /// Whether the connection stays open after this request (before any server policy).
    pub(crate) fn keep_alive(&self) -> bool {
        if self.minor == 0 {
            self.conn_keep_alive && !self.conn_close
        } else {
            !self.conn_close
        }
    }
}

/// Appends `reply` as an HTTP/1.1 response to `out`. `head_only` for HEAD; `close` adds
/// `Connection: close`; `keep_alive_10` adds `Connection: keep-alive` (an HTTP/1.0 client that
/// asked for it).
pub(crate) fn write_reply(
    out: &mut Vec<u8>,
    reply: &Reply,
    head_only: bool,
    close: bool,
    keep_alive_10: bool,
) {
    out.extend_from_slice(
        format!("HTTP/1.1 {} {}\r\n", reply.status, reason(reply.status)).as_bytes(),
    );
    for (name, value) in &reply.headers {
        if !valid_name(name) || !valid_value(value) {
            tracing::warn!(%name, "replay: dropping a header that cannot be sent");
            continue;
        }
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if let Some(len) = reply.content_length {
        out.extend_from_slice(format!("Content-Length: {len}\r\n").as_bytes());
    }
    if close {
        out.extend_from_slice(b"Connection: close\r\n");
    } else if keep_alive_10 {
        out.extend_from_slice(b"Connection: keep-alive\r\n");
    }
    out.extend_from_slice(b"\r\n");
    if !head_only && !status_has_no_body(reply.status) {
        out.extend_from_slice(&reply.body);
    }
}

pub(crate) fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

pub(crate) fn valid_value(value: &str) -> bool {
    value
        .bytes()
        .all(|b| b == b'\t' || (b >= 0x20 && b != 0x7f))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(buf: &[u8]) -> (Head, usize) {
        match parse(buf, 64 * 1024) {
            Parse::Complete(h, n) => (h, n),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn parses_a_get() {
        let req = b"GET /a?b HTTP/1.1\r\nHost: X.test\r\nIf-None-Match: \"1\"\r\nIf-None-Match: \"2\"\r\n\r\nGET";
        let (h, n) = head(req);
        assert_eq!(n, req.len() - 3);
        assert_eq!(h.method, "GET");
        assert_eq!(h.target, "/a?b");
        assert_eq!(h.host.as_deref(), Some("X.test"));
        assert_eq!(h.if_none_match.as_deref(), Some("\"1\", \"2\""));
        assert!(h.keep_alive());
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

    /// Mutated and random inputs never panic, and a complete parse never claims more bytes
    /// than it was given.
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
            if let Parse::Complete(_, n) = parse(&buf, 1024) {
                assert!(n <= buf.len());
            }
        }
    }

    #[test]
    fn limits_and_errors() {
        assert_eq!(parse(b"GET / HTTP/1.1\r\nHost: a", 1024), Parse::Partial);
        assert!(matches!(
            parse(b"\x00\x01garbage\r\n\r\n", 1024),
            Parse::Invalid(_)
        ));
        assert!(matches!(
            parse(b"GET / HTTP/2.0\r\n\r\n", 1024),
            Parse::Invalid(_)
        ));
        assert!(matches!(
            parse(b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 1024),
            Parse::Invalid(_)
        ));
        assert!(matches!(
            parse(b"GET / HTTP/1.1\r\nContent-Length: x\r\n\r\n", 1024),
            Parse::Invalid(_)
        ));
        let mut big = b"GET / HTTP/1.1\r\nX: ".to_vec();
        big.extend(std::iter::repeat_n(b'a', 2000));
        assert_eq!(parse(&big, 1024), Parse::TooLarge);
        big.extend_from_slice(b"\r\n\r\n");
        assert_eq!(parse(&big, 1024), Parse::TooLarge);
        let mut many = b"GET / HTTP/1.1\r\n".to_vec();
        for i in 0..200 {
            many.extend_from_slice(format!("X{i}: y\r\n").as_bytes());
        }
        many.extend_from_slice(b"\r\n");
        assert_eq!(parse(&many, 64 * 1024), Parse::TooLarge);
    }
}
