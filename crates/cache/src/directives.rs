//! Parsing of `Cache-Control` (RFC 9111 §5.2) and `Pragma` (§5.4) into plain structs.
//!
//! Parsing is lenient the way deployed caches are: unknown directives are ignored, directive
//! names are case-insensitive, and the first occurrence of a repeated directive wins (§4.2.1
//! allows either the first value or treating the response as stale). A delta-seconds value that
//! does not parse is kept as `Invalid` so the freshness code can treat it conservatively.

use http::header::{CACHE_CONTROL, PRAGMA};
use http::HeaderMap;

/// A `delta-seconds` argument (RFC 9111 §1.2.2) as found in a directive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seconds {
    /// A valid value; values beyond `u32` saturate at 2^31 as §1.2.2 recommends.
    Value(u64),
    /// Present but not a non-negative integer (e.g. `max-age=abc`).
    Invalid,
}

impl Seconds {
    /// The value, with an invalid argument read as 0 (the conservative choice: "stale").
    pub fn or_zero(self) -> u64 {
        match self {
            Seconds::Value(v) => v,
            Seconds::Invalid => 0,
        }
    }
}

/// The `Cache-Control` directives of a response that a shared cache acts on (§5.2.2).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResponseDirectives {
    /// `no-store` (§5.2.2.5).
    pub no_store: bool,
    /// `no-cache`, qualified or not (§5.2.2.4); a qualified form is treated as unqualified.
    pub no_cache: bool,
    /// `private`, qualified or not (§5.2.2.7); a shared cache stores neither.
    pub private: bool,
    /// `public` (§5.2.2.9).
    pub public: bool,
    /// `must-revalidate` (§5.2.2.2).
    pub must_revalidate: bool,
    /// `proxy-revalidate` (§5.2.2.8).
    pub proxy_revalidate: bool,
    /// `max-age` (§5.2.2.1).
    pub max_age: Option<Seconds>,
    /// `s-maxage` (§5.2.2.10).
    pub s_maxage: Option<Seconds>,
    /// `no-transform` (§5.2.2.6), reported for the proxy's optimizers.
    pub no_transform: bool,
    /// `stale-if-error` (RFC 5861 §4): how long past its lifetime the response may be served
    /// when the origin fails.
    pub stale_if_error: Option<Seconds>,
}

/// The `Cache-Control` directives of a request (§5.2.1), with `Pragma: no-cache` folded in.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestDirectives {
    /// `no-cache` (§5.2.1.4), or `Pragma: no-cache` without any Cache-Control (§5.4).
    pub no_cache: bool,
    /// `no-store` (§5.2.1.5).
    pub no_store: bool,
    /// `max-age` (§5.2.1.1).
    pub max_age: Option<Seconds>,
    /// `max-stale`: `Some(None)` for the bare form (any staleness), `Some(Some(n))` for a bound.
    pub max_stale: Option<Option<Seconds>>,
    /// `min-fresh` (§5.2.1.3).
    pub min_fresh: Option<Seconds>,
    /// `only-if-cached` (§5.2.1.7): the caller answers 504 when there is nothing usable.
    pub only_if_cached: bool,
}

/// One `name[=value]` item of a Cache-Control list, name lower-cased, quotes removed.
fn items(headers: &HeaderMap) -> Vec<(String, Option<String>)> {
    let mut out = Vec::new();
    for value in headers.get_all(CACHE_CONTROL) {
        // Non-UTF-8 bytes cannot form a directive we know; skip that field line.
        let Ok(text) = value.to_str() else { continue };
        for part in split_list(text) {
            let (name, arg) = match part.split_once('=') {
                Some((n, v)) => (n.trim(), Some(unquote(v.trim()))),
                None => (part.trim(), None),
            };
            if !name.is_empty() {
                out.push((name.to_ascii_lowercase(), arg));
            }
        }
    }
    out
}

/// Split a comma-separated list, ignoring commas inside quoted strings
/// (`no-cache="a, b"` is one item).
pub(crate) fn split_list(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut start = 0;
    let mut quoted = false;
    let mut escaped = false;
    for (i, c) in text.char_indices() {
        if escaped {
            escaped = false;
            continue;
        }
        match c {
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            ',' if !quoted => {
                parts.push(text[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(text[start..].trim());
    parts.retain(|p| !p.is_empty());
    parts
}

fn unquote(v: &str) -> String {
    v.strip_prefix('"')
        .and_then(|s| s.strip_suffix('"'))
        .unwrap_or(v)
        .to_string()
}

/// Parse a delta-seconds argument (§1.2.2).
fn seconds(arg: Option<&str>) -> Seconds {
    match arg {
        Some(s) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => {
            // Saturate: §1.2.2 says an overflowing value is 2^31.
            Seconds::Value(s.parse::<u64>().map_or(1 << 31, |v| v.min(1 << 31)))
        }
        _ => Seconds::Invalid,
    }
}

/// Record the first occurrence only (§4.2.1).
fn first(slot: &mut Option<Seconds>, arg: Option<&str>) {
    if slot.is_none() {
        *slot = Some(seconds(arg));
    }
}

impl ResponseDirectives {
    /// Parse the directives of a response's header block.
    pub fn parse(headers: &HeaderMap) -> Self {
        let mut d = ResponseDirectives::default();
        for (name, arg) in items(headers) {
            match name.as_str() {
                "no-store" => d.no_store = true,
                "no-cache" => d.no_cache = true,
                "private" => d.private = true,
                "public" => d.public = true,
                "must-revalidate" => d.must_revalidate = true,
                "proxy-revalidate" => d.proxy_revalidate = true,
                "no-transform" => d.no_transform = true,
                "max-age" => first(&mut d.max_age, arg.as_deref()),
                "s-maxage" => first(&mut d.s_maxage, arg.as_deref()),
                "stale-if-error" => first(&mut d.stale_if_error, arg.as_deref()),
                _ => {}
            }
        }
        d
    }

    /// Whether a stale response must never be served without validation by a shared cache:
    /// must-revalidate, proxy-revalidate, or s-maxage (which implies proxy-revalidate, §5.2.2.10).
    pub fn forbids_stale(&self) -> bool {
        self.must_revalidate || self.proxy_revalidate || self.s_maxage.is_some()
    }
}

impl RequestDirectives {
    /// Parse the directives of a request's header block.
    pub fn parse(headers: &HeaderMap) -> Self {
        let mut d = RequestDirectives::default();
        let list = items(headers);
        for (name, arg) in &list {
            match name.as_str() {
                "no-cache" => d.no_cache = true,
                "no-store" => d.no_store = true,
                "only-if-cached" => d.only_if_cached = true,
                "max-age" => first(&mut d.max_age, arg.as_deref()),
                "min-fresh" => first(&mut d.min_fresh, arg.as_deref()),
                "max-stale" if d.max_stale.is_none() => {
                    d.max_stale = Some(arg.as_deref().map(|a| seconds(Some(a))));
                }
                _ => {}
            }
        }
        // §5.4: Pragma: no-cache counts only when the request has no Cache-Control at all.
        if !headers.contains_key(CACHE_CONTROL) {
            d.no_cache = headers.get_all(PRAGMA).iter().any(|v| {
                v.to_str().is_ok_and(|s| {
                    split_list(s)
                        .iter()
                        .any(|p| p.eq_ignore_ascii_case("no-cache"))
                })
            });
        }
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (n, v) in pairs {
            h.append(*n, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn rfc9111_5_2_response_directives_case_insensitive_and_quoted() {
        let d = ResponseDirectives::parse(&headers(&[
            (
                "cache-control",
                "Public, MAX-AGE=\"60\", no-cache=\"set-cookie, x\"",
            ),
            ("cache-control", "s-maxage=10"),
        ]));
        assert!(d.public);
        assert!(d.no_cache);
        assert_eq!(d.max_age, Some(Seconds::Value(60)));
        assert_eq!(d.s_maxage, Some(Seconds::Value(10)));
        assert!(
            d.forbids_stale(),
            "s-maxage implies proxy-revalidate (§5.2.2.10)"
        );
    }

    #[test]
    fn rfc9111_4_2_1_first_max_age_wins_and_invalid_is_kept() {
        let d = ResponseDirectives::parse(&headers(&[("cache-control", "max-age=5, max-age=500")]));
        assert_eq!(d.max_age, Some(Seconds::Value(5)));
        let d = ResponseDirectives::parse(&headers(&[("cache-control", "max-age=-1")]));
        assert_eq!(d.max_age, Some(Seconds::Invalid));
        assert_eq!(Seconds::Invalid.or_zero(), 0);
    }

    #[test]
    fn rfc9111_1_2_2_delta_seconds_saturate() {
        let d = ResponseDirectives::parse(&headers(&[(
            "cache-control",
            "max-age=99999999999999999999999",
        )]));
        assert_eq!(d.max_age, Some(Seconds::Value(1 << 31)));
    }

    #[test]
    fn rfc9111_5_2_1_request_directives() {
        let d = RequestDirectives::parse(&headers(&[(
            "cache-control",
            "max-stale, min-fresh=3, only-if-cached, max-age=0",
        )]));
        assert_eq!(d.max_stale, Some(None));
        assert_eq!(d.min_fresh, Some(Seconds::Value(3)));
        assert_eq!(d.max_age, Some(Seconds::Value(0)));
        assert!(d.only_if_cached);
        let d = RequestDirectives::parse(&headers(&[("cache-control", "max-stale=7")]));
        assert_eq!(d.max_stale, Some(Some(Seconds::Value(7))));
    }

    #[test]
    fn rfc9111_5_4_pragma_no_cache_only_without_cache_control() {
        let d = RequestDirectives::parse(&headers(&[("pragma", "No-Cache")]));
        assert!(d.no_cache);
        let d = RequestDirectives::parse(&headers(&[
            ("pragma", "no-cache"),
            ("cache-control", "max-age=10"),
        ]));
        assert!(!d.no_cache, "Cache-Control present: Pragma is ignored");
    }

    #[test]
    fn split_list_respects_quotes() {
        assert_eq!(
            split_list(r#"a, b="x, \"y\"", ,c"#),
            vec!["a", r#"b="x, \"y\"""#, "c"]
        );
    }
}
