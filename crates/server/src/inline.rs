//! The `inline` switch's decisions (`[inline]`): which pages get small stylesheets and
//! scripts copied into them, and which fetched ones may go in. The fetching is a phase of
//! [`crate::proxy`]; the HTML work is `webpep_optimize::rewrite::inline`.
//!
//! An inlined copy must not outlive what the browser would have cached of the original, nor
//! leak what a shared cache may not share: a stylesheet or script goes in only when a shared
//! cache could store it (no `no-store`, `private`, `no-cache`, `Set-Cookie` or `Vary: *` /
//! `Cookie`) and it stays fresh at least as long as the page. The page loses its validators
//! (its bytes now depend on other responses), and is not stored as a variant in the proxy's
//! cache: it is put together again from the cached parts on every request.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use http::header::{self, HeaderMap};
use http::StatusCode;
use url::Url;
use webpep_cache::directives::ResponseDirectives;
use webpep_cache::policy::{age_value, freshness_lifetime, HeuristicConfig};
use webpep_optimize::rewrite::{inlinable_text, InlineKind};

use crate::optimize::mime_is;
use crate::proxy::content_coding;

/// What the decisions need to know of the page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Page {
    /// The page's text is UTF-8 (its Content-Type says so); else only ASCII is inlined.
    pub utf8: bool,
    /// How much longer the page stays fresh in a cache.
    pub fresh_for: Duration,
}

/// The Content-Type's charset parameter, lower case (empty when there is none).
fn charset(headers: &HeaderMap) -> String {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|ct| {
            ct.split(';')
                .skip(1)
                .filter_map(|p| p.split_once('='))
                .find(|(k, _)| k.trim().eq_ignore_ascii_case("charset"))
                .map(|(_, v)| v.trim().trim_matches('"').to_ascii_lowercase())
        })
        .unwrap_or_default()
}

/// How much longer a response stays fresh: its freshness lifetime less its `Age`.
fn fresh_for(status: StatusCode, headers: &HeaderMap) -> Duration {
    let life = freshness_lifetime(
        status,
        headers,
        SystemTime::now(),
        &HeuristicConfig::default(),
    );
    life.saturating_sub(age_value(headers))
}

/// The page, when it may get inlined resources: an HTML document (`text/html`; XHTML parses
/// scripts differently), `200`, transformable (no `no-transform`), without a
/// Content-Security-Policy (inline code may be blocked where files were allowed).
pub fn page(status: StatusCode, headers: &HeaderMap) -> Option<Page> {
    let csp = headers.contains_key("content-security-policy")
        || headers.contains_key("content-security-policy-report-only");
    if status != StatusCode::OK
        || !mime_is(headers, &["text/html"])
        || csp
        || webpep_optimize::no_transform(headers)
    {
        return None;
    }
    let charset = charset(headers);
    Some(Page {
        utf8: charset == "utf-8" || charset == "utf8",
        fresh_for: fresh_for(status, headers),
    })
}

/// A shared cache may store it and hand it to anyone.
fn shareable(headers: &HeaderMap) -> bool {
    let d = ResponseDirectives::parse(headers);
    let vary_ok = headers
        .get_all(header::VARY)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .all(|t| {
            let t = t.trim();
            t != "*" && !t.eq_ignore_ascii_case("cookie")
        });
    !d.no_store && !d.private && !d.no_cache && !headers.contains_key(header::SET_COOKIE) && vary_ok
}

fn kind_matches(kind: InlineKind, headers: &HeaderMap) -> bool {
    match kind {
        InlineKind::Stylesheet => mime_is(headers, &["text/css"]),
        InlineKind::Script => mime_is(
            headers,
            &[
                "application/javascript",
                "text/javascript",
                "application/x-javascript",
                "application/ecmascript",
                "text/ecmascript",
            ],
        ),
    }
}

/// The text of a fetched stylesheet or script (identity coding) as it may go into `page`, or
/// `None`: not a `200` of the right type, coded, not shareable, fresh for less time than the
/// page, larger than `max_bytes`, or text the page cannot hold
/// (`webpep_optimize::rewrite::inlinable_text`).
pub fn resource_text(
    page: &Page,
    kind: InlineKind,
    url: &Url,
    status: StatusCode,
    headers: &HeaderMap,
    body: &[u8],
    max_bytes: usize,
) -> Option<String> {
    if status != StatusCode::OK
        || content_coding(headers).is_some()
        || !kind_matches(kind, headers)
        || !shareable(headers)
        || fresh_for(status, headers) < page.fresh_for
    {
        return None;
    }
    inlinable_text(kind, body, url, page.utf8, max_bytes)
}

/// The texts to inline, keyed by URL: in document order while the total stays within
/// `max_total` (a text that would pass it is skipped, later smaller ones may still go in).
pub fn select(
    texts: Vec<(Url, InlineKind, Option<String>)>,
    max_total: usize,
) -> HashMap<String, (InlineKind, String)> {
    let mut total = 0usize;
    let mut ready = HashMap::new();
    for (url, kind, text) in texts {
        let Some(text) = text else { continue };
        if total + text.len() > max_total {
            continue;
        }
        total += text.len();
        ready.insert(url.to_string(), (kind, text));
    }
    ready
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn pages_that_qualify() {
        let ok = headers(&[
            ("content-type", "text/html; charset=UTF-8"),
            ("cache-control", "max-age=60"),
            ("age", "10"),
        ]);
        assert_eq!(
            page(StatusCode::OK, &ok),
            Some(Page {
                utf8: true,
                fresh_for: Duration::from_secs(50)
            })
        );
        let latin = headers(&[("content-type", "text/html; charset=iso-8859-1")]);
        assert_eq!(
            page(StatusCode::OK, &latin),
            Some(Page {
                utf8: false,
                fresh_for: Duration::ZERO
            })
        );
        for bad in [
            headers(&[("content-type", "application/xhtml+xml")]),
            headers(&[("content-type", "text/css")]),
            headers(&[
                ("content-type", "text/html"),
                ("cache-control", "no-transform"),
            ]),
            headers(&[
                ("content-type", "text/html"),
                ("content-security-policy", "script-src 'self'"),
            ]),
            headers(&[
                ("content-type", "text/html"),
                ("content-security-policy-report-only", "default-src 'self'"),
            ]),
            HeaderMap::new(),
        ] {
            assert_eq!(page(StatusCode::OK, &bad), None, "{bad:?}");
        }
        assert_eq!(page(StatusCode::NOT_FOUND, &ok), None);
    }

    #[test]
    fn resources_that_may_go_in() {
        let p = Page {
            utf8: true,
            fresh_for: Duration::from_secs(60),
        };
        let u = Url::parse("http://s.a.com/c/m.css").unwrap();
        let css = |extra: &[(&'static str, &str)]| {
            let mut pairs = vec![("content-type", "text/css")];
            pairs.extend_from_slice(extra);
            headers(&pairs)
        };
        let text = |h: &HeaderMap, kind, body: &[u8]| {
            resource_text(&p, kind, &u, StatusCode::OK, h, body, 100)
        };
        let long = css(&[("cache-control", "max-age=86400")]);
        assert_eq!(
            text(&long, InlineKind::Stylesheet, b"a{background:url(i.gif)}").as_deref(),
            Some("a{background:url(http://s.a.com/c/i.gif)}")
        );
        // Wrong kind, coded, short-lived, private, cookies, too big.
        assert_eq!(text(&long, InlineKind::Script, b"x()"), None);
        for h in [
            css(&[
                ("cache-control", "max-age=86400"),
                ("content-encoding", "gzip"),
            ]),
            css(&[("cache-control", "max-age=30")]),
            css(&[("cache-control", "max-age=86400"), ("age", "86370")]),
            css(&[("cache-control", "private, max-age=86400")]),
            css(&[("cache-control", "no-store")]),
            css(&[("cache-control", "no-cache, max-age=86400")]),
            css(&[("cache-control", "max-age=86400"), ("set-cookie", "a=b")]),
            css(&[
                ("cache-control", "max-age=86400"),
                ("vary", "Accept-Encoding, Cookie"),
            ]),
            css(&[("cache-control", "max-age=86400"), ("vary", "*")]),
        ] {
            assert_eq!(text(&h, InlineKind::Stylesheet, b"a{}"), None, "{h:?}");
        }
        assert_eq!(text(&long, InlineKind::Stylesheet, &[b' '; 101]), None);
        assert_eq!(
            resource_text(
                &p,
                InlineKind::Stylesheet,
                &u,
                StatusCode::NOT_FOUND,
                &long,
                b"a{}",
                100
            ),
            None
        );
        let js = headers(&[
            ("content-type", "application/javascript; charset=utf-8"),
            ("cache-control", "max-age=3600"),
            ("vary", "Accept-Encoding"),
        ]);
        assert_eq!(
            text(&js, InlineKind::Script, b"go()").as_deref(),
            Some("go()")
        );
        // A heuristic lifetime from Last-Modified counts like an explicit one.
        let lm = headers(&[
            ("content-type", "text/javascript"),
            ("last-modified", "Tue, 14 Oct 2003 09:55:40 GMT"),
        ]);
        assert_eq!(
            text(&lm, InlineKind::Script, b"go()").as_deref(),
            Some("go()")
        );
    }

    #[test]
    fn selection_keeps_document_order_within_the_total() {
        let u = |s: &str| Url::parse(&format!("http://a.com/{s}")).unwrap();
        let texts = vec![
            (u("a.css"), InlineKind::Stylesheet, Some("x".repeat(40))),
            (u("b.js"), InlineKind::Script, None),
            (u("c.js"), InlineKind::Script, Some("y".repeat(70))),
            (u("d.css"), InlineKind::Stylesheet, Some("z".repeat(60))),
        ];
        let ready = select(texts, 100);
        let mut keys: Vec<_> = ready.keys().cloned().collect();
        keys.sort();
        assert_eq!(keys, ["http://a.com/a.css", "http://a.com/d.css"]);
    }
}
