//! The `inline` switch's decisions (`[inline]`): which pages get small stylesheets, scripts
//! and images copied into them, and which fetched ones may go in. The fetching is a phase of
//! [`crate::proxy`]; the HTML work is `webpep_optimize::rewrite::inline`.
//!
//! An inlined copy must not outlive what the browser would have cached of the original, nor
//! leak what a shared cache may not share: a stylesheet, script or image goes in only when a shared
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
use webpep_optimize::rewrite::{inlinable_image, inlinable_text, stylesheet_images, InlineKind};

use crate::config::InlineConfig;
use crate::optimize::{content_coding, mime_is};

/// What the decisions need to know of the page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Page {
    /// The page's text is UTF-8 (its Content-Type says so); else only ASCII is inlined.
    pub utf8: bool,
    /// How much longer the page stays fresh in a cache.
    pub fresh_for: Duration,
    /// The client shows `data:` URIs in `<img src>` ([`data_uri_images`]), and `[inline]
    /// images` is on.
    pub images: bool,
    /// When the page was served (the server's clock): what freshness is judged at.
    pub at: SystemTime,
}

/// Whether the browser that sent `request` shows `<img src="data:...">`: every browser
/// since Netscape 2 except Internet Explorer before 8 (`MSIE 7.0` and older in its
/// User-Agent). A request without a User-Agent gets none: nothing is known of it.
pub fn data_uri_images(request: &HeaderMap) -> bool {
    let Some(ua) = request
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    !ua.match_indices("MSIE ").any(|(i, m)| {
        let major: String = ua[i + m.len()..]
            .chars()
            .take_while(|c| c.is_ascii_digit())
            .collect();
        major.parse::<u32>().is_ok_and(|v| v < 8)
    })
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
fn fresh_for(status: StatusCode, headers: &HeaderMap, now: SystemTime) -> Duration {
    let life = freshness_lifetime(status, headers, now, &HeuristicConfig::default());
    life.saturating_sub(age_value(headers))
}

/// The page, when it may get inlined resources: an HTML document (`text/html`; XHTML parses
/// scripts differently), `200`, transformable (no `no-transform`), without a
/// Content-Security-Policy (inline code may be blocked where files were allowed).
pub fn page(status: StatusCode, headers: &HeaderMap, now: SystemTime) -> Option<Page> {
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
        fresh_for: fresh_for(status, headers, now),
        images: false,
        at: now,
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
        InlineKind::Image => mime_is(
            headers,
            &["image/gif", "image/png", "image/jpeg", "image/webp"],
        ),
    }
}

/// What a fetched stylesheet, script or image (identity coding) puts into `page` (its text, or
/// its `data:` URI), or `None`: not a `200` of the right type, coded, not shareable, fresh for
/// less time than the page, larger than `max-bytes` (`image-max-bytes`), an image for a page
/// without [`Page::images`], or what the page cannot hold
/// (`webpep_optimize::rewrite::{inlinable_text, inlinable_image}`).
pub fn resource_text(
    page: &Page,
    kind: InlineKind,
    url: &Url,
    status: StatusCode,
    headers: &HeaderMap,
    body: &[u8],
    cfg: &InlineConfig,
) -> Option<String> {
    if status != StatusCode::OK
        || content_coding(headers).is_some()
        || !kind_matches(kind, headers)
        || !shareable(headers)
        || fresh_for(status, headers, page.at) < page.fresh_for
    {
        return None;
    }
    match kind {
        InlineKind::Image if page.images => inlinable_image(body, cfg.image_max_bytes),
        InlineKind::Image => None,
        _ => inlinable_text(kind, body, url, page.utf8, cfg.max_bytes),
    }
}

/// Which images of the stylesheets going into a page (`sheets`: URL and text) may go in too,
/// as `data:` URIs in the sheet's `url()`s: those referenced once in all of them, not also a
/// `<img>` of the page (`page_images`), in order, at most `max`, each as written in the sheet
/// and as the origin's URL (`origin` maps one to the other: the URL mode's sheets point at
/// the proxy). And which of `page_images` a sheet references as well, which stay external
/// (inlined, the image would be carried twice or fetched anyway).
pub fn stylesheet_image_plan(
    sheets: &[(Url, String)],
    page_images: &[Url],
    max: usize,
    origin: &dyn Fn(&Url) -> Url,
) -> (Vec<(Url, Url)>, Vec<Url>) {
    let mut refs: Vec<(Url, Url, usize)> = Vec::new();
    for (sheet, text) in sheets {
        for written in stylesheet_images(text, sheet) {
            let at = origin(&written);
            match refs.iter_mut().find(|(_, r, _)| *r == at) {
                Some((_, _, n)) => *n += 1,
                None => refs.push((written, at, 1)),
            }
        }
    }
    let shared: Vec<Url> = page_images
        .iter()
        .filter(|u| refs.iter().any(|(_, r, _)| r == *u))
        .cloned()
        .collect();
    let fetch = refs
        .into_iter()
        .filter(|(_, u, n)| *n == 1 && !page_images.contains(u))
        .map(|(w, u, _)| (w, u))
        .take(max)
        .collect();
    (fetch, shared)
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

    /// The time the tests judge freshness at (November 2025; after their Last-Modified).
    fn now() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_764_000_000)
    }
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
            page(StatusCode::OK, &ok, now()),
            Some(Page {
                utf8: true,
                fresh_for: Duration::from_secs(50),
                images: false,
                at: now(),
            })
        );
        let latin = headers(&[("content-type", "text/html; charset=iso-8859-1")]);
        assert_eq!(
            page(StatusCode::OK, &latin, now()),
            Some(Page {
                utf8: false,
                fresh_for: Duration::ZERO,
                images: false,
                at: now(),
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
            assert_eq!(page(StatusCode::OK, &bad, now()), None, "{bad:?}");
        }
        assert_eq!(page(StatusCode::NOT_FOUND, &ok, now()), None);
    }

    #[test]
    fn resources_that_may_go_in() {
        let p = Page {
            utf8: true,
            fresh_for: Duration::from_secs(60),
            images: true,
            at: now(),
        };
        let cfg = limits(100);
        let u = Url::parse("http://s.a.com/c/m.css").unwrap();
        let css = |extra: &[(&'static str, &str)]| {
            let mut pairs = vec![("content-type", "text/css")];
            pairs.extend_from_slice(extra);
            headers(&pairs)
        };
        let text = |h: &HeaderMap, kind, body: &[u8]| {
            resource_text(&p, kind, &u, StatusCode::OK, h, body, &cfg)
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
                &cfg
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

    fn limits(max_bytes: usize) -> InlineConfig {
        InlineConfig {
            max_bytes,
            image_max_bytes: 16,
            ..InlineConfig::default()
        }
    }

    #[test]
    fn images_that_may_go_in() {
        let mut p = Page {
            utf8: false,
            fresh_for: Duration::from_secs(60),
            images: true,
            at: now(),
        };
        let cfg = limits(100);
        let u = Url::parse("http://i.a.com/a.gif").unwrap();
        let gif = b"GIF89a\x01\x00\x01\x00;";
        let img = |p: &Page, ct: &str, body: &[u8]| {
            let h = headers(&[("content-type", ct), ("cache-control", "max-age=600")]);
            resource_text(p, InlineKind::Image, &u, StatusCode::OK, &h, body, &cfg)
        };
        assert_eq!(
            img(&p, "image/gif", gif).as_deref(),
            Some("data:image/gif;base64,R0lGODlhAQABADs=")
        );
        // The URI's type is the bytes' (a GIF served as PNG is still a GIF).
        assert!(img(&p, "image/png", gif)
            .unwrap()
            .starts_with("data:image/gif;"));
        // Too big, not an image type, not an image, SVG, or a browser without data: images.
        assert_eq!(
            img(&p, "image/gif", &[gif.as_slice(), &[0; 8]].concat()),
            None
        );
        assert_eq!(img(&p, "text/plain", gif), None);
        assert_eq!(img(&p, "image/gif", b"<html>"), None);
        assert_eq!(img(&p, "image/svg+xml", b"<svg/>"), None);
        p.images = false;
        assert_eq!(img(&p, "image/gif", gif), None);
    }

    #[test]
    fn browsers_that_show_data_uri_images() {
        let ua = |v: &str| headers(&[("user-agent", v)]);
        for yes in [
            "Mozilla/5.0 (X11; U; Linux i686; en-US; rv:1.4) Gecko/20030624",
            "Mozilla/4.0 (compatible; MSIE 8.0; Windows NT 6.1)",
            "Mozilla/5.0 (compatible; MSIE 10.0; Windows NT 6.2)",
            "Opera/9.80 (Windows NT 6.1) Presto/2.12",
            "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 Chrome/120.0 Safari/537.36",
        ] {
            assert!(data_uri_images(&ua(yes)), "{yes}");
        }
        for no in [
            "Mozilla/4.0 (compatible; MSIE 6.0; Windows NT 5.1)",
            "Mozilla/4.0 (compatible; MSIE 7.0; Windows NT 6.0)",
        ] {
            assert!(!data_uri_images(&ua(no)), "{no}");
        }
        assert!(!data_uri_images(&HeaderMap::new()));
    }

    #[test]
    fn stylesheet_images_referenced_once_only() {
        let u = |s: &str| Url::parse(&format!("http://a.com/{s}")).unwrap();
        let sheets = vec![
            (
                u("css/one.css"),
                "a{background:url(../i/a.gif)} b{background:url(/i/b.gif)} c{background:url(/i/img.gif)}".to_string(),
            ),
            (
                u("css/two.css"),
                "@import url(/css/three.css); d{background:url(/i/b.gif)} e{background:url(/i/e.gif)} f{background:url(/i/f.gif)}".to_string(),
            ),
        ];
        let page_images = [u("i/img.gif"), u("i/other.gif")];
        let same = |u: &Url| u.clone();
        let written = |v: Vec<(Url, Url)>| v.into_iter().map(|(w, _)| w).collect::<Vec<_>>();
        let (fetch, shared) = stylesheet_image_plan(&sheets, &page_images, 8, &same);
        assert_eq!(written(fetch), [u("i/a.gif"), u("i/e.gif"), u("i/f.gif")]);
        assert_eq!(shared, [u("i/img.gif")]);
        let (fetch, _) = stylesheet_image_plan(&sheets, &page_images, 2, &same);
        assert_eq!(written(fetch), [u("i/a.gif"), u("i/e.gif")]);
        // URL mode: the sheet's references point at the proxy; they are compared and fetched
        // as the origin's.
        let proxied = vec![(
            u("css/p.css"),
            "a{background:url(http://proxy.test/a.com/i/img.gif)} b{background:url(http://proxy.test/a.com/i/z.gif)}".to_string(),
        )];
        let origin =
            |w: &Url| Url::parse(&w.as_str().replace("http://proxy.test/", "http://")).unwrap();
        let (fetch, shared) = stylesheet_image_plan(&proxied, &page_images, 8, &origin);
        assert_eq!(
            fetch,
            [(
                Url::parse("http://proxy.test/a.com/i/z.gif").unwrap(),
                u("i/z.gif")
            )]
        );
        assert_eq!(shared, [u("i/img.gif")]);
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
