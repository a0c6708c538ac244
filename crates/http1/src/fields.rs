//! The header rules, once: field lists and their tokens, keep-alive, hop-by-hop fields,
//! Via, Max-Forwards, Expect, Content-Length and Transfer-Encoding, field syntax. They read
//! any [`Fields`]: an [`http::HeaderMap`] (the proxy, the replay server) or the name/value
//! pairs a client keeps as they came (the loader).

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::Version;

/// Header fields, read by name.
pub trait Fields {
    /// Every value of the field `name` (matched case-insensitively), in order.
    fn values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a;
}

impl Fields for HeaderMap {
    fn values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.get_all(name).iter().map(HeaderValue::as_bytes)
    }
}

impl Fields for [(String, String)] {
    fn values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_bytes())
    }
}

impl Fields for Vec<(String, String)> {
    fn values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.as_slice().values(name)
    }
}

/// A value as text when it is visible ASCII (and tabs), as [`HeaderValue::to_str`] has it.
pub(crate) fn text(value: &[u8]) -> Option<&str> {
    value
        .iter()
        .all(|&b| b == b'\t' || (0x20..0x7f).contains(&b))
        .then(|| std::str::from_utf8(value).ok())
        .flatten()
}

/// The elements of the comma-separated list field `name` (RFC 9110 §5.6.1), trimmed, empty
/// ones skipped; a value that is not text is skipped whole.
pub fn tokens<'a, F: Fields + ?Sized>(
    fields: &'a F,
    name: &'a str,
) -> impl Iterator<Item = &'a str> + 'a {
    fields
        .values(name)
        .filter_map(text)
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|t| !t.is_empty())
}

/// True when the list field `name` has `token` (case-insensitively).
pub fn has_token<F: Fields + ?Sized>(fields: &F, name: &str, token: &str) -> bool {
    tokens(fields, name).any(|t| t.eq_ignore_ascii_case(token))
}

/// True when a `Connection` (or `Proxy-Connection`) field lists `token`.
pub fn connection_has<F: Fields + ?Sized>(fields: &F, token: &str) -> bool {
    has_token(fields, "connection", token) || has_token(fields, "proxy-connection", token)
}

/// Whether a connection stays open after a message of `version` whose Connection options
/// include `close` or `keep-alive` (RFC 9112 §9.3): HTTP/1.1 unless `close`; HTTP/1.0 only
/// with `keep-alive` and without `close`.
pub(crate) fn persists(version: Version, close: bool, keep_alive: bool) -> bool {
    !close && (version != Version::HTTP_10 || keep_alive)
}

/// True when the connection stays open after this exchange, judged from the request
/// (`Connection` or, from a client to a proxy, `Proxy-Connection`).
pub fn request_keeps_alive<F: Fields + ?Sized>(version: Version, headers: &F) -> bool {
    persists(
        version,
        connection_has(headers, "close"),
        connection_has(headers, "keep-alive"),
    )
}

/// The `Connection` value a response to a client speaking `version` carries: `close` when the
/// connection closes after it, `keep-alive` for an HTTP/1.0 client whose connection stays
/// open, nothing otherwise (HTTP/1.1 persists by default).
pub fn connection_value(keep_alive: bool, version: Version) -> Option<&'static str> {
    if !keep_alive {
        Some("close")
    } else if version == Version::HTTP_10 {
        Some("keep-alive")
    } else {
        None
    }
}

/// The hop-by-hop fields (RFC 9110 §7.6.1) every message drops, besides those its
/// Connection field names.
const HOP_BY_HOP: [HeaderName; 9] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    header::PROXY_AUTHORIZATION,
    header::PROXY_AUTHENTICATE,
];

/// True for a field that is hop-by-hop whatever the message says: Connection, Keep-Alive,
/// Proxy-Connection, TE, Trailer, Transfer-Encoding, Upgrade, Proxy-Authorization,
/// Proxy-Authenticate.
pub fn is_hop_by_hop(name: &HeaderName) -> bool {
    HOP_BY_HOP.contains(name)
}

/// The fields the Connection field of `headers` names.
fn connection_options(headers: &HeaderMap) -> Vec<HeaderName> {
    tokens(headers, "connection")
        .filter_map(|t| HeaderName::from_bytes(t.as_bytes()).ok())
        .collect()
}

/// Removes the hop-by-hop fields (RFC 9110 §7.6.1): every field the Connection field names
/// and those of [`is_hop_by_hop`].
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    for name in connection_options(headers) {
        headers.remove(name);
    }
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
}

/// `headers` without their hop-by-hop fields (as [`strip_hop_by_hop`]), the others in their
/// order.
pub fn without_hop_by_hop(headers: &HeaderMap) -> HeaderMap {
    let named = connection_options(headers);
    let mut out = HeaderMap::with_capacity(headers.len());
    for (name, value) in headers {
        if !is_hop_by_hop(name) && !named.contains(name) {
            out.append(name.clone(), value.clone());
        }
    }
    out
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
pub fn via_has<F: Fields + ?Sized>(headers: &F, instance: &str) -> bool {
    let me = format!("webpep-{instance}");
    tokens(headers, "via").any(|entry| entry.split_whitespace().nth(1) == Some(me.as_str()))
}

/// The `Max-Forwards` of a request (RFC 9110 §7.6.2), when it has a valid one.
pub fn max_forwards<F: Fields + ?Sized>(headers: &F) -> Option<u64> {
    text(headers.values("max-forwards").next()?)?
        .trim()
        .parse()
        .ok()
}

/// Whether the client waits for `100 Continue` before sending the body (`Expect:
/// 100-continue`, RFC 9110 §10.1.1); `Err` for an expectation that cannot be met (417).
pub fn expects_continue<F: Fields + ?Sized>(headers: &F) -> Result<bool, String> {
    let mut wants = false;
    for v in headers.values("expect") {
        for e in text(v).unwrap_or("?").split(',') {
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

/// A field name that may be sent: a token (RFC 9110 §5.1).
pub fn valid_field_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// A field value that may be sent: no control characters but tabs (RFC 9110 §5.5).
pub fn valid_field_value(value: &str) -> bool {
    value
        .bytes()
        .all(|b| b == b'\t' || (b >= 0x20 && b != 0x7f))
}

/// The body length Content-Length declares, when it declares one validly (every value
/// agreeing, digits only) and no Transfer-Encoding overrides it; else `None`.
pub fn content_length<F: Fields + ?Sized>(fields: &F) -> Option<u64> {
    match declared(fields) {
        Ok(Declared::Length(n)) => n,
        _ => None,
    }
}

/// What the framing fields declare (RFC 9112 §6): a transfer coding (then Content-Length does
/// not count), a length, or neither.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Declared {
    /// Transfer-Encoding is present; `Some(true)` when its final coding is chunked, `None`
    /// when a value is not text.
    Coded(Option<bool>),
    /// Content-Length (every value and list element agreeing), or none.
    Length(Option<u64>),
}

/// Why Content-Length cannot be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LengthError {
    /// Not 1*DIGIT, or over `u64`.
    Bad,
    /// Values that differ.
    Conflicting,
}

/// The framing fields of a message.
pub(crate) fn declared<F: Fields + ?Sized>(fields: &F) -> Result<Declared, LengthError> {
    let mut te = fields.values("transfer-encoding").peekable();
    if te.peek().is_some() {
        let mut last = "";
        for v in te {
            let Some(v) = text(v) else {
                return Ok(Declared::Coded(None));
            };
            last = v
                .split(',')
                .map(str::trim)
                .rfind(|c| !c.is_empty())
                .unwrap_or(last);
        }
        return Ok(Declared::Coded(Some(last.eq_ignore_ascii_case("chunked"))));
    }
    let mut len: Option<u64> = None;
    for v in fields.values("content-length") {
        for part in text(v).ok_or(LengthError::Bad)?.split(',') {
            let p = part.trim();
            if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
                return Err(LengthError::Bad);
            }
            let n: u64 = p.parse().map_err(|_| LengthError::Bad)?;
            if len.is_some_and(|l| l != n) {
                return Err(LengthError::Conflicting);
            }
            len = Some(n);
        }
    }
    Ok(Declared::Length(len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_declared_content_length() {
        let mut h = HeaderMap::new();
        assert_eq!(content_length(&h), None);
        h.insert("content-length", HeaderValue::from_static(" 12 "));
        assert_eq!(content_length(&h), Some(12));
        h.append("content-length", HeaderValue::from_static("12"));
        assert_eq!(content_length(&h), Some(12));
        h.append("content-length", HeaderValue::from_static("13"));
        assert_eq!(content_length(&h), None, "conflicting");
        h.insert("content-length", HeaderValue::from_static("+5"));
        assert_eq!(content_length(&h), None, "not digits");
        h.insert("content-length", HeaderValue::from_static("5"));
        h.insert("transfer-encoding", HeaderValue::from_static("chunked"));
        assert_eq!(content_length(&h), None, "a transfer coding overrides it");
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
        let mut h = HeaderMap::new();
        h.insert("proxy-connection", HeaderValue::from_static("keep-alive"));
        assert!(request_keeps_alive(Version::HTTP_10, &h));
    }

    #[test]
    fn connection_values() {
        assert_eq!(connection_value(false, Version::HTTP_11), Some("close"));
        assert_eq!(connection_value(false, Version::HTTP_10), Some("close"));
        assert_eq!(connection_value(true, Version::HTTP_10), Some("keep-alive"));
        assert_eq!(connection_value(true, Version::HTTP_11), None);
    }

    #[test]
    fn tokens_of_pairs_and_maps_agree() {
        let pairs: Vec<(String, String)> = vec![
            ("Connection".into(), "Keep-Alive, , x-a".into()),
            ("connection".into(), "close".into()),
            ("Other".into(), "y".into()),
        ];
        let mut map = HeaderMap::new();
        for (n, v) in &pairs {
            map.append(
                HeaderName::from_bytes(n.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        let a: Vec<&str> = tokens(&pairs, "connection").collect();
        let b: Vec<&str> = tokens(&map, "Connection").collect();
        assert_eq!(a, ["Keep-Alive", "x-a", "close"]);
        assert_eq!(a, b);
        assert!(has_token(&pairs, "CONNECTION", "keep-alive"));
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
        h.insert("x-other", HeaderValue::from_static("2"));
        let copy = without_hop_by_hop(&h);
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 2);
        assert!(h.contains_key("accept") && h.contains_key("x-other"));
        let names: Vec<&str> = copy.keys().map(HeaderName::as_str).collect();
        assert_eq!(names, ["accept", "x-other"], "the copy keeps the order");
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
    fn expectations_and_max_forwards() {
        let mut h = HeaderMap::new();
        assert_eq!(expects_continue(&h), Ok(false));
        assert_eq!(max_forwards(&h), None);
        h.insert(header::EXPECT, HeaderValue::from_static("100-Continue"));
        assert_eq!(expects_continue(&h), Ok(true));
        h.insert(header::EXPECT, HeaderValue::from_static("something-else"));
        assert!(expects_continue(&h).is_err());
        h.insert(header::MAX_FORWARDS, HeaderValue::from_static(" 3 "));
        assert_eq!(max_forwards(&h), Some(3));
        h.insert(header::MAX_FORWARDS, HeaderValue::from_static("x"));
        assert_eq!(max_forwards(&h), None);
    }

    #[test]
    fn field_syntax() {
        assert!(valid_field_name("X-Foo_1"));
        assert!(!valid_field_name("") && !valid_field_name("a b") && !valid_field_name("a:"));
        assert!(valid_field_value("a\tb ü"));
        assert!(!valid_field_value("a\r\nb") && !valid_field_value("\x7f"));
    }

    #[test]
    fn framing_fields() {
        let d = |pairs: &[(&str, &str)]| {
            let v: Vec<(String, String)> = pairs
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect();
            declared(&v)
        };
        assert_eq!(d(&[]), Ok(Declared::Length(None)));
        assert_eq!(
            d(&[("Content-Length", "5, 5"), ("content-length", "5")]),
            Ok(Declared::Length(Some(5)))
        );
        assert_eq!(d(&[("Content-Length", "+5")]), Err(LengthError::Bad));
        assert_eq!(d(&[("Content-Length", "")]), Err(LengthError::Bad));
        assert_eq!(
            d(&[("Content-Length", "99999999999999999999")]),
            Err(LengthError::Bad)
        );
        assert_eq!(
            d(&[("Content-Length", "1"), ("Content-Length", "2")]),
            Err(LengthError::Conflicting)
        );
        assert_eq!(
            d(&[
                ("Transfer-Encoding", "gzip"),
                ("Transfer-Encoding", "Chunked, ")
            ]),
            Ok(Declared::Coded(Some(true)))
        );
        assert_eq!(
            d(&[
                ("Transfer-Encoding", "chunked, gzip"),
                ("Content-Length", "x")
            ]),
            Ok(Declared::Coded(Some(false)))
        );
        assert_eq!(
            d(&[("Transfer-Encoding", "chunked\u{e9}")]),
            Ok(Declared::Coded(None))
        );
    }
}
