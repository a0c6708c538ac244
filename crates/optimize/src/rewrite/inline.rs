//! Inlining: the text of small external stylesheets and scripts copied into the page that
//! references them (`<link rel=stylesheet>` becomes `<style>`, `<script src>` gets its text),
//! and tiny images put into their `<img src>` as `data:` URIs.
//!
//! Why: a browser finds a page's images only as it parses, and a 2003 browser (no preload
//! scanner) stops parsing at every `<script src>` until the script has arrived. Over a link
//! whose round trip is 2–3 s, each small sheet or script on that chain costs a round trip
//! that carries a few hundred bytes; in the page, the same bytes cost their transfer time
//! only. Optimizing proxies of the 2010s did the same for small resources (PageSpeed's
//! `inline_css`, `inline_javascript` and `inline_images`). Images are the same trade at a
//! smaller size: most of a 2003 page's images fit in one TCP segment (000 §4.1.1: 60 % of
//! cnn's are under 1 KB), so each costs a request and a round trip for a few hundred bytes,
//! which compression cannot shorten; in the page they cost their bytes and a third more.
//!
//! What may be inlined is chosen so the page means the same afterwards:
//! - only references of the page's own scheme (`http`, or `https` in a page the proxy reads
//!   through interception) in the HTML namespace, resolved against the first `<base href>`;
//! - stylesheets: `rel` has `stylesheet` and not `alternate`; no `disabled`, `title`,
//!   `integrity`, `nonce`, `crossorigin`, `onload` or `onerror`; `type`, if any, `text/css`;
//!   `media` is kept on the `<style>`; relative `url()` and `@import` references become
//!   absolute (they were relative to the sheet);
//! - scripts: classic scripts only (no `async`, `defer`, `type=module`, `nomodule`,
//!   `integrity`, `nonce`, `crossorigin`, `onload`, `onerror`, `for`/`event`); `type` or
//!   `language`, if any, JavaScript;
//! - the text must be UTF-8 (ASCII unless the page is UTF-8) and must not contain what would
//!   end or change the element early (`</style`, `</script`, `<!--`);
//! - images: `<img src>` without `srcset`, `loading=lazy`, `crossorigin`, `onload` or
//!   `onerror`, outside `<picture>` (whose sources may be chosen instead) and `<template>`
//!   (not loaded), referenced once in the page (a second reference would carry the bytes
//!   again); GIF, PNG, JPEG or WebP by their signature, which gives the `data:` URI its type;
//! - nothing when the page has a Content-Security-Policy (`<meta http-equiv>` here; the proxy
//!   checks the header): inline code could be blocked where the external file was allowed.
//!
//! The module is pure: the proxy fetches the candidates and decides sizes and freshness.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;

use base64::Engine as _;

use lol_html::html_content::{ContentType, Element};
use lol_html::{element, end_tag, HtmlRewriter};
use url::Url;
use webpep_discover::html::{element_refs, RefKind};

use super::html::{decode_entities, run_rewriter, settings_for, Handler};
use super::{css, RewriteError};

const HTML_NS: &str = "http://www.w3.org/1999/xhtml";

/// What a candidate is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum InlineKind {
    /// `<link rel=stylesheet href>` → `<style>`.
    Stylesheet,
    /// `<script src>` → `<script>` with the text.
    Script,
    /// `<img src>` → `<img src="data:...">`.
    Image,
}

/// What [`inline_candidates`] found in a page.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InlineScan {
    /// References that may be inlined, absolute, in document order, each once.
    pub candidates: Vec<(Url, InlineKind)>,
    /// The page declares a Content-Security-Policy in a `<meta http-equiv>`: inline nothing.
    pub csp: bool,
}

const STYLESHEET_BLOCKERS: &[&str] = &[
    "disabled",
    "title",
    "integrity",
    "nonce",
    "crossorigin",
    "onload",
    "onerror",
];

const SCRIPT_BLOCKERS: &[&str] = &[
    "async",
    "defer",
    "nomodule",
    "integrity",
    "nonce",
    "crossorigin",
    "onload",
    "onerror",
    "for",
    "event",
];

const IMAGE_BLOCKERS: &[&str] = &["srcset", "crossorigin", "onload", "onerror"];

/// The MIME types that make a classic script (HTML's "JavaScript MIME type essence match").
const JS_TYPES: &[&str] = &[
    "text/javascript",
    "application/javascript",
    "application/ecmascript",
    "application/x-ecmascript",
    "application/x-javascript",
    "text/ecmascript",
    "text/javascript1.0",
    "text/javascript1.1",
    "text/javascript1.2",
    "text/javascript1.3",
    "text/javascript1.4",
    "text/javascript1.5",
    "text/jscript",
    "text/livescript",
    "text/x-ecmascript",
    "text/x-javascript",
];

fn has_any(el: &Element<'_, '_>, names: &[&str]) -> bool {
    names.iter().any(|n| el.has_attribute(n))
}

/// The kind and raw reference of an element that may be inlined, if it is one.
fn inlinable_element(el: &Element<'_, '_>) -> Option<(InlineKind, String)> {
    if el.namespace_uri() != HTML_NS {
        return None;
    }
    let tag = el.tag_name().to_ascii_lowercase();
    let refers = |kind: RefKind, attr: &str| {
        element_refs(&tag, |n| el.get_attribute(n))
            .iter()
            .any(|r| r.kind == kind && r.attr == attr)
    };
    if tag == "link" {
        let sheet = refers(RefKind::Stylesheet, "href");
        let css_type = el
            .get_attribute("type")
            .is_none_or(|t| t.trim().is_empty() || t.trim().eq_ignore_ascii_case("text/css"));
        if !sheet || !css_type || has_any(el, STYLESHEET_BLOCKERS) {
            return None;
        }
        let href = el.get_attribute("href")?;
        return Some((InlineKind::Stylesheet, href));
    }
    if tag == "script" {
        if !refers(RefKind::Script, "src") || has_any(el, SCRIPT_BLOCKERS) {
            return None;
        }
        let classic = match el.get_attribute("type") {
            Some(t) if !t.trim().is_empty() => {
                let t = t.trim().to_ascii_lowercase();
                JS_TYPES.contains(&t.split(';').next().unwrap_or("").trim())
            }
            _ => el.get_attribute("language").is_none_or(|l| {
                let l = l.trim().to_ascii_lowercase();
                l.is_empty() || l.starts_with("javascript") || l.starts_with("jscript")
            }),
        };
        if !classic {
            return None;
        }
        let src = el.get_attribute("src")?;
        return Some((InlineKind::Script, src));
    }
    if tag == "img" && refers(RefKind::Image, "src") {
        let lazy = el
            .get_attribute("loading")
            .is_some_and(|l| l.trim().eq_ignore_ascii_case("lazy"));
        if lazy || has_any(el, IMAGE_BLOCKERS) {
            return None;
        }
        return Some((InlineKind::Image, el.get_attribute("src")?));
    }
    None
}

/// The handler that counts open `<picture>` and `<template>` elements: an `<img>` inside a
/// picture is the fallback of its `<source>`s, which the browser may choose instead, and one
/// inside a template is not loaded at all. (An unclosed one keeps the count up: no image after
/// it is inlined.)
fn track_picture<'h>(open: &Rc<Cell<u32>>) -> Handler<'h> {
    let open = open.clone();
    element!("picture, template", move |el| {
        if el.namespace_uri() != HTML_NS {
            return Ok(());
        }
        open.set(open.get() + 1);
        let on_end = open.clone();
        el.on_end_tag(end_tag!(move |_| {
            on_end.set(on_end.get().saturating_sub(1));
            Ok(())
        }))
    })
}

/// Resolves a raw reference; only URLs of the document's own scheme (`http`, or `https` for
/// a page the proxy reads because the device's client intercepted its TLS) are inlined: an
/// https object in an http page would lose its protection, an http one in an https page is
/// mixed content the browser may have blocked.
fn resolve(raw: &str, base: &Url, scheme: &str) -> Option<Url> {
    if !matches!(scheme, "http" | "https") {
        return None;
    }
    webpep_discover::resolve(base, &decode_entities(raw)).filter(|u| u.scheme() == scheme)
}

/// The handler that tracks the first `<base href>` (HTML §4.2.3); a non-http(s) base is
/// ignored, as browsers do.
fn track_base<'h>(page_url: &'h Url, base: &'h RefCell<(Url, bool)>) -> Handler<'h> {
    element!("base[href]", move |el| {
        let mut b = base.borrow_mut();
        if !b.1 {
            b.1 = true;
            if let Some(u) = el
                .get_attribute("href")
                .and_then(|h| page_url.join(decode_entities(&h).trim()).ok())
                .filter(|u| matches!(u.scheme(), "http" | "https"))
            {
                b.0 = u;
            }
        }
        Ok(())
    })
}

/// The stylesheets and scripts of `html` that [`inline_resources`] could replace, resolved
/// against `page_url` (or the first `<base href>`). Lenient: malformed markup gives what could
/// be found. Never panics.
pub fn inline_candidates(html: &[u8], page_url: &Url) -> InlineScan {
    let base = RefCell::new((page_url.clone(), false));
    let scan = RefCell::new(InlineScan::default());
    // How often each image URL is referenced (any `<img src>`, inlinable or not).
    let image_refs: RefCell<HashMap<Url, usize>> = RefCell::new(HashMap::new());
    let picture = Rc::new(Cell::new(0u32));
    let (b, s, refs, pic) = (&base, &scan, &image_refs, &picture);
    let handlers = vec![
        track_base(page_url, b),
        track_picture(&picture),
        element!("meta[http-equiv]", move |el| {
            if el
                .get_attribute("http-equiv")
                .is_some_and(|v| v.trim().eq_ignore_ascii_case("content-security-policy"))
            {
                s.borrow_mut().csp = true;
            }
            Ok(())
        }),
        element!("link[href], script[src], img[src]", move |el| {
            let base = b.borrow().0.clone();
            if el.tag_name().eq_ignore_ascii_case("img") {
                if let Some(u) = el
                    .get_attribute("src")
                    .and_then(|r| resolve(&r, &base, page_url.scheme()))
                {
                    *refs.borrow_mut().entry(u).or_default() += 1;
                }
                if pic.get() > 0 {
                    return Ok(());
                }
            }
            if let Some((kind, raw)) = inlinable_element(el) {
                if let Some(u) = resolve(&raw, &base, page_url.scheme()) {
                    let mut s = s.borrow_mut();
                    if !s.candidates.iter().any(|(c, _)| *c == u) {
                        s.candidates.push((u, kind));
                    }
                }
            }
            Ok(())
        }),
    ];
    let mut rewriter = HtmlRewriter::new(settings_for(handlers), |_: &[u8]| {});
    if let Err(e) = rewriter.write(html).and_then(|()| rewriter.end()) {
        tracing::debug!(error = %e, "inline_candidates: stopped early");
    }
    let refs = image_refs.into_inner();
    let mut scan = scan.into_inner();
    scan.candidates
        .retain(|(u, k)| *k != InlineKind::Image || refs.get(u) == Some(&1));
    scan
}

/// The text of a fetched candidate as it may go into the page, or `None` when it may not:
/// more than `max_bytes`, not UTF-8 (or not ASCII when the page is not UTF-8), or containing
/// what would end the element early. A stylesheet's relative references are made absolute
/// against `url`, where it was fetched from.
pub fn inlinable_text(
    kind: InlineKind,
    body: &[u8],
    url: &Url,
    page_utf8: bool,
    max_bytes: usize,
) -> Option<String> {
    let body = body.strip_prefix(b"\xef\xbb\xbf").unwrap_or(body);
    if body.len() > max_bytes || body.contains(&0) {
        return None;
    }
    let text = std::str::from_utf8(body).ok()?;
    if !page_utf8 && !text.is_ascii() {
        return None;
    }
    let lower = text.to_ascii_lowercase();
    match kind {
        InlineKind::Stylesheet => {
            if lower.contains("</style") {
                return None;
            }
            String::from_utf8(css::absolutize_css(text.as_bytes(), url)).ok()
        }
        InlineKind::Script => {
            // `<!--` in script text switches the parser into its escaped states, where
            // `<script>` and `</script>` inside strings change where the element ends.
            if lower.contains("</script") || lower.contains("<!--") {
                return None;
            }
            Some(text.to_string())
        }
        InlineKind::Image => None,
    }
}

/// The image types a `data:` URI is made for, by their signature.
fn image_type(body: &[u8]) -> Option<&'static str> {
    if body.starts_with(b"GIF87a") || body.starts_with(b"GIF89a") {
        Some("image/gif")
    } else if body.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if body.starts_with(&[0xff, 0xd8, 0xff]) {
        Some("image/jpeg")
    } else if body.len() >= 12 && &body[..4] == b"RIFF" && &body[8..12] == b"WEBP" {
        Some("image/webp")
    } else {
        None
    }
}

/// A fetched image as the `data:` URI that may replace its `<img src>`, or `None`: empty,
/// more than `max_bytes`, or not GIF, PNG, JPEG or WebP by its signature (the URI's type comes
/// from the bytes, not from what the server said).
pub fn inlinable_image(body: &[u8], max_bytes: usize) -> Option<String> {
    if body.is_empty() || body.len() > max_bytes {
        return None;
    }
    let mime = image_type(body)?;
    let b64 = base64::engine::general_purpose::STANDARD.encode(body);
    Some(format!("data:{mime};base64,{b64}"))
}

/// The images a stylesheet's text references (`url(...)` outside `@import`), resolved against
/// `sheet_url`, of the sheet's own scheme only, in order, with repeats: the candidates for
/// [`inline_stylesheet_images`] once the sheet is going into a page.
pub fn stylesheet_images(css: &str, sheet_url: &Url) -> Vec<Url> {
    css::css_non_import_urls(css.as_bytes())
        .iter()
        .filter_map(|raw| resolve(raw, sheet_url, sheet_url.scheme()))
        .collect()
}

/// A stylesheet's text with each `url(...)` (outside `@import`) whose URL, resolved against
/// `sheet_url`, is in `images` (absolute URL → `data:` URI from [`inlinable_image`]) replaced
/// by the URI, and how many were (a `data:` URI fits in any `url()`). Everything else is
/// left as it was.
pub fn inline_stylesheet_images(
    css: &str,
    sheet_url: &Url,
    images: &HashMap<String, String>,
) -> (String, usize) {
    let mut n = 0;
    let out = css::replace_non_import_urls(css.as_bytes(), &mut |raw| {
        let u = resolve(raw, sheet_url, sheet_url.scheme())?;
        let uri = images.get(u.as_str()).cloned();
        n += usize::from(uri.is_some());
        uri
    });
    // Only ASCII went in, in place of whole references: still UTF-8.
    match String::from_utf8(out) {
        Ok(text) => (text, n),
        Err(_) => (css.to_string(), 0),
    }
}

/// `html` with each candidate found in `ready` (absolute URL → kind and text from
/// [`inlinable_text`]) inlined, and how many elements were. Elements whose URL is not in
/// `ready` (or is there with the other kind) are left as they were; every other byte too.
pub fn inline_resources(
    html: &[u8],
    page_url: &Url,
    ready: &HashMap<String, (InlineKind, String)>,
) -> Result<(Vec<u8>, usize), RewriteError> {
    let base = RefCell::new((page_url.clone(), false));
    let count = RefCell::new(0usize);
    let picture = Rc::new(Cell::new(0u32));
    let (b, n, pic) = (&base, &count, &picture);
    let handlers = vec![
        track_base(page_url, b),
        track_picture(&picture),
        element!("link[href], script[src], img[src]", move |el| {
            let Some((kind, raw)) = inlinable_element(el) else {
                return Ok(());
            };
            if kind == InlineKind::Image && pic.get() > 0 {
                return Ok(());
            }
            let base = b.borrow().0.clone();
            let Some(url) = resolve(&raw, &base, page_url.scheme()) else {
                return Ok(());
            };
            let Some((k, text)) = ready.get(url.as_str()) else {
                return Ok(());
            };
            if *k != kind {
                return Ok(());
            }
            match kind {
                InlineKind::Stylesheet => {
                    let media = el
                        .get_attribute("media")
                        // Raw as written (references undecoded), so only a `"` of a
                        // single-quoted value needs escaping in the double quotes.
                        .map(|m| format!(" media=\"{}\"", m.replace('"', "&quot;")))
                        .unwrap_or_default();
                    el.replace(&format!("<style{media}>{text}</style>"), ContentType::Html);
                }
                InlineKind::Script => {
                    el.remove_attribute("src");
                    el.remove_attribute("charset");
                    el.set_inner_content(text, ContentType::Html);
                }
                // A data: URI is base64 and punctuation without quotes or `&`.
                InlineKind::Image => el.set_attribute("src", text)?,
            }
            *n.borrow_mut() += 1;
            Ok(())
        }),
    ];
    let capacity = html.len() + ready.values().map(|v| v.1.len()).sum::<usize>();
    let out = run_rewriter(handlers, html, capacity)?;
    Ok((out, count.into_inner()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page() -> Url {
        Url::parse("http://www.a.com/news/index.html").unwrap()
    }

    fn urls(scan: &InlineScan) -> Vec<(&str, InlineKind)> {
        scan.candidates
            .iter()
            .map(|(u, k)| (u.as_str(), *k))
            .collect()
    }

    #[test]
    fn candidates_follow_the_rules() {
        let html = br#"<html><head>
            <link rel="stylesheet" href="css/a.css">
            <link rel="alternate stylesheet" href="alt.css">
            <link rel="stylesheet" href="t.css" title="Big">
            <link rel="stylesheet" href="https://s.com/x.css">
            <link rel="icon" href="fav.ico">
            <link rel="Stylesheet" href="/b.css?x=1&amp;y=2" media="print">
            <script src="/js/one.js"></script>
            <script src="two.js" async></script>
            <script src="three.js" type="module"></script>
            <script src="four.js" type="text/x-template"></script>
            <script src="five.js" language="JavaScript1.2"></script>
            <script src="six.js" language="VBScript"></script>
            <script>inline()</script>
            <script src="/js/one.js"></script>
            <svg><script src="svg.js"></script></svg>
            </head></html>"#;
        let scan = inline_candidates(html, &page());
        assert!(!scan.csp);
        assert_eq!(
            urls(&scan),
            [
                ("http://www.a.com/news/css/a.css", InlineKind::Stylesheet),
                ("http://www.a.com/b.css?x=1&y=2", InlineKind::Stylesheet),
                ("http://www.a.com/js/one.js", InlineKind::Script),
                ("http://www.a.com/news/five.js", InlineKind::Script),
            ]
        );
    }

    #[test]
    fn an_https_page_inlines_its_own_scheme_only() {
        let html = br#"<link rel="stylesheet" href="a.css">
            <link rel="stylesheet" href="http://s.com/x.css">
            <script src="//cdn.a.com/one.js"></script>
            <img src="http://i.a.com/i.gif"><img src="/j.gif">"#;
        let page = Url::parse("https://www.a.com/index.html").unwrap();
        let scan = inline_candidates(html, &page);
        assert_eq!(
            urls(&scan),
            [
                ("https://www.a.com/a.css", InlineKind::Stylesheet),
                ("https://cdn.a.com/one.js", InlineKind::Script),
                ("https://www.a.com/j.gif", InlineKind::Image),
            ]
        );
        let sheet = Url::parse("https://www.a.com/a.css").unwrap();
        let imgs = stylesheet_images(
            "a{background:url(i.png)} b{background:url(http://x.com/h.png)}",
            &sheet,
        );
        assert_eq!(
            imgs.iter().map(Url::as_str).collect::<Vec<_>>(),
            ["https://www.a.com/i.png"]
        );
    }

    #[test]
    fn base_and_csp() {
        let html = br#"<base href="http://cdn.a.com/v2/"><base href="http://other.com/">
            <meta http-equiv="Content-Security-Policy" content="script-src 'self'">
            <script src="x.js"></script>"#;
        let scan = inline_candidates(html, &page());
        assert!(scan.csp);
        assert_eq!(
            urls(&scan),
            [("http://cdn.a.com/v2/x.js", InlineKind::Script)]
        );
    }

    #[test]
    fn text_checks() {
        let u = Url::parse("http://s.a.com/css/m.css").unwrap();
        let css = |b: &[u8], utf8| inlinable_text(InlineKind::Stylesheet, b, &u, utf8, 100);
        let js = |b: &[u8]| inlinable_text(InlineKind::Script, b, &u, true, 100);
        assert_eq!(
            css(b"\xef\xbb\xbfa{background:url(i.gif)}", false).as_deref(),
            Some("a{background:url(http://s.a.com/css/i.gif)}")
        );
        assert_eq!(css(b"a{content:'</STYLE>'}", true), None);
        assert_eq!(css("a{content:'é'}".as_bytes(), false), None);
        assert!(css("a{content:'é'}".as_bytes(), true).is_some());
        assert_eq!(css(b"\xff\xfe", true), None);
        assert_eq!(css(&[b'a'; 101], true), None);
        assert_eq!(js(b"var s='</script>';"), None);
        assert_eq!(js(b"if (a <!--b) {}"), None);
        assert_eq!(js(b"a\0b"), None);
        assert_eq!(
            js(b"go(1 < 2 && 3 > 2);").as_deref(),
            Some("go(1 < 2 && 3 > 2);")
        );
    }

    #[test]
    fn inlines_only_what_is_ready() {
        let html = br#"<html><head><title>t</title>
<link rel="stylesheet" href="a.css" media="screen and (min-width:&quot;1&quot;)">
<link rel="stylesheet" href="b.css">
<script type="text/javascript" src="one.js" charset="utf-8"></script>
<script src="two.js"></script>
</head><body><p>caf&eacute;</p></body></html>"#;
        let mut ready = HashMap::new();
        ready.insert(
            "http://www.a.com/news/a.css".to_string(),
            (InlineKind::Stylesheet, "p{color:red}".to_string()),
        );
        ready.insert(
            "http://www.a.com/news/one.js".to_string(),
            (InlineKind::Script, "go(1 < 2);".to_string()),
        );
        // Listed with the wrong kind: left alone.
        ready.insert(
            "http://www.a.com/news/two.js".to_string(),
            (InlineKind::Stylesheet, "p{}".to_string()),
        );
        let (out, n) = inline_resources(html, &page(), &ready).unwrap();
        let out = String::from_utf8(out).unwrap();
        assert_eq!(n, 2);
        assert_eq!(
            out,
            r#"<html><head><title>t</title>
<style media="screen and (min-width:&quot;1&quot;)">p{color:red}</style>
<link rel="stylesheet" href="b.css">
<script type="text/javascript">go(1 < 2);</script>
<script src="two.js"></script>
</head><body><p>caf&eacute;</p></body></html>"#
        );
        // The result's own candidates are the ones not inlined.
        let left = inline_candidates(out.as_bytes(), &page());
        assert_eq!(
            urls(&left),
            [
                ("http://www.a.com/news/b.css", InlineKind::Stylesheet),
                ("http://www.a.com/news/two.js", InlineKind::Script),
            ]
        );
    }

    #[test]
    fn image_candidates_follow_the_rules() {
        let html = br#"<body>
            <img src="a.gif"><img src="/b.png" alt="b">
            <img src="twice.gif"><p><img src="twice.gif"></p>
            <img src="s.gif" srcset="s2.gif 2x"><img src="l.gif" loading="LAZY">
            <img src="e.gif" loading="eager"><img src="c.gif" crossorigin>
            <img src="h.gif" onerror="x()"><img src="data:image/gif;base64,R0lG">
            <img src="https://s.com/x.gif"><img src="">
            <picture><source srcset="p.webp" type="image/webp"><img src="p.jpg"></picture>
            <img src="after.gif">
            </body>"#;
        let scan = inline_candidates(html, &page());
        assert_eq!(
            urls(&scan),
            [
                ("http://www.a.com/news/a.gif", InlineKind::Image),
                ("http://www.a.com/b.png", InlineKind::Image),
                ("http://www.a.com/news/e.gif", InlineKind::Image),
                ("http://www.a.com/news/after.gif", InlineKind::Image),
            ]
        );
        // Nor in a template; an unclosed <picture> holds back everything after it.
        let scan = inline_candidates(
            b"<template><img src=t.gif></template><img src=u.gif>",
            &page(),
        );
        assert_eq!(
            urls(&scan),
            [("http://www.a.com/news/u.gif", InlineKind::Image)]
        );
        let scan = inline_candidates(b"<picture><img src=a.gif><img src=b.gif>", &page());
        assert!(scan.candidates.is_empty());
    }

    #[test]
    fn image_checks() {
        let gif = b"GIF89a\x01\x00\x01\x00\x00\x00\x00;";
        assert_eq!(
            inlinable_image(gif, 100).as_deref(),
            Some("data:image/gif;base64,R0lGODlhAQABAAAAADs=")
        );
        assert_eq!(inlinable_image(gif, gif.len() - 1), None);
        assert!(inlinable_image(b"\x89PNG\r\n\x1a\n....", 100)
            .unwrap()
            .starts_with("data:image/png;base64,"));
        assert!(inlinable_image(&[0xff, 0xd8, 0xff, 0xe0], 100)
            .unwrap()
            .starts_with("data:image/jpeg;base64,"));
        assert!(inlinable_image(b"RIFF\x04\x00\x00\x00WEBPVP8 ", 100)
            .unwrap()
            .starts_with("data:image/webp;base64,"));
        for bad in [&b""[..], b"<svg/>", b"BM....", b"RIFF\x04\x00\x00\x00WAVE"] {
            assert_eq!(inlinable_image(bad, 100), None);
        }
    }

    #[test]
    fn inlines_images_in_place() {
        let html = br#"<p><img src="a.gif" alt="a" width=1><img src="b.gif"></p>"#;
        let mut ready = HashMap::new();
        ready.insert(
            "http://www.a.com/news/a.gif".to_string(),
            (InlineKind::Image, "data:image/gif;base64,R0lG".to_string()),
        );
        let (out, n) = inline_resources(html, &page(), &ready).unwrap();
        assert_eq!(n, 1);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"<p><img src="data:image/gif;base64,R0lG" alt="a" width=1><img src="b.gif"></p>"#
        );
        // Inside <picture> it stays, even when ready.
        let pic = br#"<picture><img src="a.gif"></picture>"#;
        let (out, n) = inline_resources(pic, &page(), &ready).unwrap();
        assert_eq!((out.as_slice(), n), (&pic[..], 0));
    }

    #[test]
    fn stylesheet_images_go_in_as_data_uris() {
        let sheet = Url::parse("http://s.a.com/css/m.css").unwrap();
        let css = "@import url(sub.css); a{background:url(../i/a.gif)} b{background:url('https://x.com/b.gif')} c{background:url( \"/i/a.gif\" )} d{background:url(data:image/gif;base64,R0)}";
        let found: Vec<String> = stylesheet_images(css, &sheet)
            .iter()
            .map(|u| u.to_string())
            .collect();
        assert_eq!(found, ["http://s.a.com/i/a.gif", "http://s.a.com/i/a.gif"]);
        let mut images = HashMap::new();
        images.insert(
            "http://s.a.com/i/a.gif".to_string(),
            "data:image/gif;base64,R0lG".to_string(),
        );
        images.insert(
            "http://s.a.com/css/sub.css".to_string(),
            "data:text/css,".to_string(),
        );
        assert_eq!(
            inline_stylesheet_images(css, &sheet, &images).0,
            "@import url(sub.css); a{background:url(data:image/gif;base64,R0lG)} b{background:url('https://x.com/b.gif')} c{background:url( \"data:image/gif;base64,R0lG\" )} d{background:url(data:image/gif;base64,R0)}"
        );
    }

    #[test]
    fn malformed_markup_does_not_panic() {
        for html in [
            &b"<script src=a.js"[..],
            b"<link rel=stylesheet href=",
            b"<script src=x.js></scr",
            b"\xff\xfe<\x00link rel=stylesheet href=a.css>",
        ] {
            let scan = inline_candidates(html, &page());
            let ready: HashMap<String, (InlineKind, String)> = scan
                .candidates
                .iter()
                .map(|(u, k)| (u.to_string(), (*k, "x".to_string())))
                .collect();
            let _ = inline_resources(html, &page(), &ready);
        }
    }
}
