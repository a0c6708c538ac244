//! HTML rewriting with lol_html: a streaming rewriter that re-serializes only what a handler
//! changed, so the rest of the document stays byte-identical.

use std::borrow::Cow;
use std::cell::RefCell;

use lol_html::html_content::{ContentType, Element, TextChunk};
use lol_html::{element, text, HtmlRewriter, Settings};
use url::Url;

use super::{css, proxied, srcset, to_proxy_url, RewriteError};

/// Elements and the attribute of each that holds one URL to fetch or navigate to.
/// `input[src]` is only rewritten for `type=image` (checked in the handler).
const URL_ATTRIBUTES: &[(&str, &str)] = &[
    ("a[href]", "href"),
    ("area[href]", "href"),
    ("link[href]", "href"),
    ("img[src]", "src"),
    ("img[lowsrc]", "lowsrc"),
    ("script[src]", "src"),
    ("iframe[src]", "src"),
    ("frame[src]", "src"),
    ("embed[src]", "src"),
    ("source[src]", "src"),
    ("video[src]", "src"),
    ("video[poster]", "poster"),
    ("audio[src]", "src"),
    ("track[src]", "src"),
    ("object[data]", "data"),
    ("input[src]", "src"),
    ("form[action]", "action"),
    ("button[formaction]", "formaction"),
    ("input[formaction]", "formaction"),
    ("body[background]", "background"),
    ("table[background]", "background"),
    ("tr[background]", "background"),
    ("td[background]", "background"),
    ("th[background]", "background"),
];

/// Elements whose attribute holds a `srcset` list.
const SRCSET_ATTRIBUTES: &[(&str, &str)] = &[
    ("img[srcset]", "srcset"),
    ("source[srcset]", "srcset"),
    ("link[imagesrcset]", "imagesrcset"),
];

/// Decodes the character references that matter in URLs (`&amp;`, `&lt;`, `&gt;`,
/// `&quot;`, `&apos;`, `&#NN;`, `&#xHH;`): lol_html hands out attribute values raw.
pub(super) fn decode_entities(raw: &str) -> Cow<'_, str> {
    if !raw.contains('&') {
        return Cow::Borrowed(raw);
    }
    let mut out = String::with_capacity(raw.len());
    let mut rest = raw;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        rest = &rest[amp..];
        let decoded = rest.find(';').filter(|&semi| semi <= 10).and_then(|semi| {
            let name = &rest[1..semi];
            let ch = match name {
                "amp" => Some('&'),
                "lt" => Some('<'),
                "gt" => Some('>'),
                "quot" => Some('"'),
                "apos" => Some('\''),
                _ => {
                    let num = name.strip_prefix('#')?;
                    let code = match num.strip_prefix(['x', 'X']) {
                        Some(hex) => u32::from_str_radix(hex, 16).ok()?,
                        None => num.parse::<u32>().ok()?,
                    };
                    char::from_u32(code).filter(|c| *c != '\0')
                }
            }?;
            Some((ch, semi + 1))
        });
        match decoded {
            Some((ch, len)) => {
                out.push(ch);
                rest = &rest[len..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    Cow::Owned(out)
}

/// Escapes a new attribute value: lol_html escapes `"` itself; `&` must be ours, or a
/// query like `?a=1&copy=2` would be read back as `©=2`.
fn escape_attr(value: &str) -> Cow<'_, str> {
    if value.contains('&') {
        Cow::Owned(value.replace('&', "&amp;"))
    } else {
        Cow::Borrowed(value)
    }
}

/// The byte range of the URL in a `<meta http-equiv=refresh content="5; url=...">` value.
fn refresh_url_range(content: &str) -> Option<(usize, usize)> {
    let b = content.as_bytes();
    let ws = |c: u8| c.is_ascii_whitespace();
    let mut i = 0;
    while i < b.len() && ws(b[i]) {
        i += 1;
    }
    while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'.') {
        i += 1;
    }
    while i < b.len() && ws(b[i]) {
        i += 1;
    }
    if i < b.len() && (b[i] == b';' || b[i] == b',') {
        i += 1;
    }
    while i < b.len() && ws(b[i]) {
        i += 1;
    }
    if b.len() >= i + 3 && b[i..i + 3].eq_ignore_ascii_case(b"url") {
        let mut j = i + 3;
        while j < b.len() && ws(b[j]) {
            j += 1;
        }
        if j < b.len() && b[j] == b'=' {
            i = j + 1;
            while i < b.len() && ws(b[i]) {
                i += 1;
            }
        }
    }
    if i >= b.len() {
        return None;
    }
    let (start, end) = if b[i] == b'"' || b[i] == b'\'' {
        let q = b[i];
        let end = b[i + 1..]
            .iter()
            .position(|&c| c == q)
            .map_or(b.len(), |p| i + 1 + p);
        (i + 1, end)
    } else {
        let mut end = b.len();
        while end > i && ws(b[end - 1]) {
            end -= 1;
        }
        (i, end)
    };
    (start < end).then_some((start, end))
}

/// What the handlers share: the base URL in force (the page's, until a `<base href>`).
struct State {
    base: Url,
    base_seen: bool,
}

type HandlerResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

/// Rewrites one single-URL attribute if it resolves to a proxyable URL.
fn rewrite_attr(el: &mut Element<'_, '_>, attr: &str, base: &Url, proxy: &str) -> HandlerResult {
    let Some(raw) = el.get_attribute(attr) else {
        return Ok(());
    };
    if let Some(new) = proxied(&decode_entities(&raw), base, proxy) {
        el.set_attribute(attr, &escape_attr(&new))?;
    }
    Ok(())
}

/// Whether `attr` of `el` names a resource: an `<input>`'s `src` does only on
/// `type=image` (on any other input it is not fetched, so it is neither rewritten nor found).
fn names_a_resource(el: &Element<'_, '_>, attr: &str) -> bool {
    attr != "src"
        || !el.tag_name().eq_ignore_ascii_case("input")
        || el
            .get_attribute("type")
            .is_some_and(|t| t.trim().eq_ignore_ascii_case("image"))
}

/// Rewrites the embedded `http://` URLs of an HTML document so the browser fetches them
/// through the proxy at `proxy_authority` (paper 002 §3.1).
///
/// `page_url` is the page's origin URL (`http://www.a.com/dir/page.html`); references
/// resolve against it, or against the first `<base href>`. Rewritten: the attributes of
/// `URL_ATTRIBUTES` (a/area/link href; img/script/iframe/frame/embed/source/video/audio/track
/// src; video poster; object data; input[type=image] src; form action, formaction;
/// body/table/tr/td/th background), each `srcset`/`imagesrcset` candidate, meta refresh URLs,
/// and CSS in `style` attributes and `<style>` elements ([`super::rewrite_css`]). Relative and
/// root-relative references become absolute proxy URLs. `<base href>` is rewritten to its
/// proxy form, so it cannot send the browser around the proxy. Fragment-only, empty, https,
/// data:, javascript: and other non-http references are left alone, as is every byte the
/// rewriter did not change. Character encoding follows `<meta charset>` (UTF-8 by default).
pub fn rewrite_html(
    html: &[u8],
    page_url: &Url,
    proxy_authority: &str,
) -> Result<Vec<u8>, RewriteError> {
    let state = RefCell::new(State {
        base: page_url.clone(),
        base_seen: false,
    });
    let style_buffer = RefCell::new(String::new());
    let proxy = proxy_authority;
    let state_ref = &state;

    let mut handlers = vec![element!("base[href]", move |el| {
        let Some(raw) = el.get_attribute("href") else {
            return Ok(());
        };
        let mut st = state_ref.borrow_mut();
        let Ok(resolved) = page_url.join(decode_entities(&raw).trim()) else {
            return Ok(());
        };
        // Only the first base element counts (HTML §4.2.3), and a data: or javascript: base
        // is ignored by browsers (the document URL stays the base).
        let usable = matches!(resolved.scheme(), "http" | "https");
        if !st.base_seen {
            st.base_seen = true;
            if usable {
                st.base = resolved.clone();
            }
        }
        if let Some(new) = to_proxy_url(&resolved, proxy) {
            el.set_attribute("href", &escape_attr(&new))?;
        }
        Ok(())
    })];
    for &(selector, attr) in URL_ATTRIBUTES {
        handlers.push(element!(selector, move |el| {
            if !names_a_resource(el, attr) {
                return Ok(());
            }
            let base = state_ref.borrow().base.clone();
            rewrite_attr(el, attr, &base, proxy)
        }));
    }
    for &(selector, attr) in SRCSET_ATTRIBUTES {
        handlers.push(element!(selector, move |el| {
            let Some(raw) = el.get_attribute(attr) else {
                return Ok(());
            };
            let base = state_ref.borrow().base.clone();
            let value = decode_entities(&raw);
            if let Some(new) = srcset::rewrite(&value, |u| proxied(u, &base, proxy)) {
                el.set_attribute(attr, &escape_attr(&new))?;
            }
            Ok(())
        }));
    }
    handlers.push(element!("meta[http-equiv][content]", move |el| {
        let refresh = el
            .get_attribute("http-equiv")
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("refresh"));
        let Some(raw) = el.get_attribute("content").filter(|_| refresh) else {
            return Ok(());
        };
        let content = decode_entities(&raw);
        let Some((a, z)) = refresh_url_range(&content) else {
            return Ok(());
        };
        let base = state_ref.borrow().base.clone();
        if let Some(new) = proxied(&content[a..z], &base, proxy) {
            let value = format!("{}{}{}", &content[..a], new, &content[z..]);
            el.set_attribute("content", &escape_attr(&value))?;
        }
        Ok(())
    }));
    handlers.push(element!("*[style]", move |el| {
        let Some(raw) = el.get_attribute("style") else {
            return Ok(());
        };
        let value = decode_entities(&raw);
        let base = state_ref.borrow().base.clone();
        let new = css::rewrite_css(value.as_bytes(), &base, proxy);
        if new != value.as_bytes() {
            // The input was a &str, and the scanner only splices in UTF-8, so this holds.
            if let Ok(new) = String::from_utf8(new) {
                el.set_attribute("style", &escape_attr(&new))?;
            }
        }
        Ok(())
    }));
    let buffer = &style_buffer;
    let text_handlers = vec![text!("style", move |chunk: &mut TextChunk<'_>| {
        let last = chunk.last_in_text_node();
        let mut buf = buffer.borrow_mut();
        if buf.is_empty() && last {
            // The whole text in one chunk (the common case): touch it only if it changes.
            let base = state_ref.borrow().base.clone();
            let new = css::rewrite_css(chunk.as_str().as_bytes(), &base, proxy);
            if new != chunk.as_str().as_bytes() {
                chunk.replace(&String::from_utf8_lossy(&new), ContentType::Html);
            }
            return Ok(());
        }
        // Split text: gather it (a url() may straddle chunks) and emit it at the end.
        buf.push_str(chunk.as_str());
        if last {
            let base = state_ref.borrow().base.clone();
            let new = css::rewrite_css(buf.as_bytes(), &base, proxy);
            chunk.replace(&String::from_utf8_lossy(&new), ContentType::Html);
            buf.clear();
        } else {
            chunk.remove();
        }
        Ok(())
    })];

    let handlers = handlers.into_iter().chain(text_handlers).collect();
    run_rewriter(handlers, html, html.len() + html.len() / 4)
}

/// One element handler of lol_html.
pub(super) type Handler<'h> = (
    Cow<'h, lol_html::Selector>,
    lol_html::ElementContentHandlers<'h>,
);

/// Settings for what a proxy sees: all kinds of markup, so work on what can be parsed
/// rather than bail out; the charset follows `<meta charset>`.
pub(super) fn settings_for(handlers: Vec<Handler<'_>>) -> Settings<'_, '_> {
    let mut settings = Settings::new();
    settings.element_content_handlers = handlers;
    settings.strict = false;
    settings.adjust_charset_on_meta_tag = true;
    settings
}

/// Runs `handlers` over `html`; the rewritten document.
pub(super) fn run_rewriter(
    handlers: Vec<Handler<'_>>,
    html: &[u8],
    capacity: usize,
) -> Result<Vec<u8>, RewriteError> {
    let mut out = Vec::with_capacity(capacity);
    let mut rewriter =
        HtmlRewriter::new(settings_for(handlers), |c: &[u8]| out.extend_from_slice(c));
    rewriter
        .write(html)
        .map_err(|e| RewriteError::Html(e.to_string()))?;
    rewriter
        .end()
        .map_err(|e| RewriteError::Html(e.to_string()))?;
    Ok(out)
}

/// Every URL reference [`rewrite_html`] considers, unresolved and with character
/// references decoded, in document order: URL attributes, each srcset candidate, `<base
/// href>`, meta refresh targets, and `url()`/`@import` in `style` attributes and elements.
/// Malformed input gives what could be found; never panics.
pub fn embedded_urls(html: &[u8]) -> Vec<String> {
    let found = RefCell::new(Vec::new());
    let style_text = RefCell::new(String::new());
    let f = &found;
    let mut handlers = vec![element!("base[href]", move |el| {
        if let Some(v) = el.get_attribute("href") {
            f.borrow_mut().push(decode_entities(&v).into_owned());
        }
        Ok(())
    })];
    for &(selector, attr) in URL_ATTRIBUTES {
        handlers.push(element!(selector, move |el| {
            if !names_a_resource(el, attr) {
                return Ok(());
            }
            if let Some(v) = el.get_attribute(attr) {
                f.borrow_mut().push(decode_entities(&v).into_owned());
            }
            Ok(())
        }));
    }
    for &(selector, attr) in SRCSET_ATTRIBUTES {
        handlers.push(element!(selector, move |el| {
            if let Some(v) = el.get_attribute(attr) {
                let v = decode_entities(&v);
                f.borrow_mut()
                    .extend(srcset::parse(&v).into_iter().map(|c| c.url.to_string()));
            }
            Ok(())
        }));
    }
    handlers.push(element!("meta[http-equiv][content]", move |el| {
        let refresh = el
            .get_attribute("http-equiv")
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("refresh"));
        if let Some(v) = el.get_attribute("content").filter(|_| refresh) {
            let v = decode_entities(&v);
            if let Some((a, z)) = refresh_url_range(&v) {
                f.borrow_mut().push(v[a..z].to_string());
            }
        }
        Ok(())
    }));
    scan_with_styles(html, handlers, f, &style_text, "embedded_urls");
    found.into_inner()
}

/// Runs `handlers`, and collectors of the `url()`/`@import` references of `style` attributes
/// and elements into `found`, over `html` (output discarded; lenient: malformed input gives
/// what could be found).
fn scan_with_styles<'h>(
    html: &[u8],
    mut handlers: Vec<Handler<'h>>,
    found: &'h RefCell<Vec<String>>,
    style_text: &'h RefCell<String>,
    what: &str,
) {
    handlers.push(element!("*[style]", move |el| {
        if let Some(v) = el.get_attribute("style") {
            found
                .borrow_mut()
                .extend(css::css_urls(decode_entities(&v).as_bytes()));
        }
        Ok(())
    }));
    handlers.push(text!("style", move |chunk| {
        let mut buf = style_text.borrow_mut();
        buf.push_str(chunk.as_str());
        if chunk.last_in_text_node() {
            found.borrow_mut().extend(css::css_urls(buf.as_bytes()));
            buf.clear();
        }
        Ok(())
    }));
    let mut rewriter = HtmlRewriter::new(settings_for(handlers), |_: &[u8]| {});
    let ok = rewriter.write(html).and_then(|()| rewriter.end());
    if let Err(e) = ok {
        tracing::debug!(error = %e, "{what}: stopped early");
    }
}

/// The objects a browser fetches to render a document (for the proxy's prefetch): `img`
/// (`src`, else its first `srcset` candidate), `script`, stylesheets and preloads (`link`),
/// frames, `embed`, image inputs, `background` attributes, and `url()`/`@import` in `style`
/// attributes and elements; unresolved, character references decoded, in document order.
/// Navigations (`a`, forms, meta refresh) are not fetched and not listed. Also returns the
/// first `<base href>`, which the caller resolves the rest against. Malformed input gives
/// what could be found; never panics.
pub fn subresource_urls(html: &[u8]) -> (Option<String>, Vec<String>) {
    const FETCHED: &[(&str, &str)] = &[
        ("script[src]", "src"),
        ("iframe[src]", "src"),
        ("frame[src]", "src"),
        ("embed[src]", "src"),
        ("input[src]", "src"),
        ("body[background]", "background"),
        ("table[background]", "background"),
        ("tr[background]", "background"),
        ("td[background]", "background"),
        ("th[background]", "background"),
    ];
    let found = RefCell::new(Vec::new());
    let base = RefCell::new(None::<String>);
    let style_text = RefCell::new(String::new());
    let (f, b) = (&found, &base);
    let mut handlers = vec![
        element!("base[href]", move |el| {
            let mut b = b.borrow_mut();
            if b.is_none() {
                *b = el
                    .get_attribute("href")
                    .map(|v| decode_entities(&v).into_owned());
            }
            Ok(())
        }),
        element!("img", move |el| {
            let src = el
                .get_attribute("src")
                .filter(|v| !v.trim().is_empty())
                .map(|v| decode_entities(&v).into_owned());
            let pick = src.or_else(|| {
                let set = el.get_attribute("srcset")?;
                let set = decode_entities(&set);
                srcset::parse(&set).first().map(|c| c.url.to_string())
            });
            if let Some(v) = pick {
                f.borrow_mut().push(v);
            }
            Ok(())
        }),
        element!("link[href][rel]", move |el| {
            let fetched = el.get_attribute("rel").is_some_and(|rel| {
                rel.split_ascii_whitespace().any(|r| {
                    r.eq_ignore_ascii_case("stylesheet") || r.eq_ignore_ascii_case("preload")
                })
            });
            if let Some(v) = el.get_attribute("href").filter(|_| fetched) {
                f.borrow_mut().push(decode_entities(&v).into_owned());
            }
            Ok(())
        }),
    ];
    for &(selector, attr) in FETCHED {
        handlers.push(element!(selector, move |el| {
            if el.tag_name().eq_ignore_ascii_case("input")
                && !el
                    .get_attribute("type")
                    .is_some_and(|t| t.trim().eq_ignore_ascii_case("image"))
            {
                return Ok(());
            }
            if let Some(v) = el.get_attribute(attr) {
                f.borrow_mut().push(decode_entities(&v).into_owned());
            }
            Ok(())
        }));
    }
    scan_with_styles(html, handlers, f, &style_text, "subresource_urls");
    (base.into_inner(), found.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entities() {
        assert_eq!(decode_entities("a?x=1&amp;y=2"), "a?x=1&y=2");
        assert_eq!(decode_entities("http&#58;//a&#x2F;b"), "http://a/b");
        assert_eq!(decode_entities("&copy=1&"), "&copy=1&");
        assert_eq!(decode_entities("&#0;&#xZZ;"), "&#0;&#xZZ;");
        assert_eq!(decode_entities("&#1114112;"), "&#1114112;");
    }

    #[test]
    fn refresh_forms() {
        let url_of = |c: &str| refresh_url_range(c).map(|(a, z)| c[a..z].to_string());
        assert_eq!(
            url_of("5; url=http://a.com/x").as_deref(),
            Some("http://a.com/x")
        );
        assert_eq!(url_of("0;URL='/next.html'").as_deref(), Some("/next.html"));
        assert_eq!(
            url_of("0, http://b.com/ ").as_deref(),
            Some("http://b.com/")
        );
        assert_eq!(url_of("  3 ; url = \"x.html\" ").as_deref(), Some("x.html"));
        assert_eq!(url_of("30"), None);
        assert_eq!(url_of(""), None);
    }
}
