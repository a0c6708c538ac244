//! HTML rewriting with lol_html: a streaming rewriter that re-serializes only what a handler
//! changed, so the rest of the document stays byte-identical.

use std::borrow::Cow;
use std::cell::RefCell;

use lol_html::html_content::{ContentType, TextChunk};
use lol_html::{element, text, HtmlRewriter, Settings};
use url::Url;

use webpep_discover::html::{element_refs, refresh_url, ElementRef, RefKind};
use webpep_discover::srcset;

use super::{css, proxied, to_proxy_url, RewriteError};

pub(super) use webpep_discover::entities::decode as decode_entities;

/// Escapes a new attribute value: lol_html escapes `"` itself; `&` must be ours, or a
/// query like `?a=1&copy=2` would be read back as `©=2`.
fn escape_attr(value: &str) -> Cow<'_, str> {
    if value.contains('&') {
        Cow::Owned(value.replace('&', "&amp;"))
    } else {
        Cow::Borrowed(value)
    }
}

/// The references of an element by webpep-discover's table, each with its attribute's value,
/// character references decoded.
fn decoded_refs(el: &lol_html::html_content::Element<'_, '_>) -> Vec<(ElementRef, String)> {
    let tag = el.tag_name();
    element_refs(&tag, |name| el.get_attribute(name))
        .into_iter()
        .filter_map(|r| Some((r, decode_entities(&el.get_attribute(r.attr)?).into_owned())))
        .collect()
}

/// What the handlers share: the base URL in force (the page's, until a `<base href>`).
struct State {
    base: Url,
    base_seen: bool,
}

/// Rewrites the embedded `http://` URLs of an HTML document so the browser fetches them
/// through the proxy at `proxy_authority` (paper 002 §3.1).
///
/// `page_url` is the page's origin URL (`http://www.a.com/dir/page.html`); references
/// resolve against it, or against the first `<base href>`. Rewritten: every reference of
/// webpep-discover's element table ([`webpep_discover::html::element_refs`]: a/area/link href;
/// img/script/iframe/frame/embed/source/video/audio/track src; img lowsrc; video poster;
/// object data; input[type=image] src; form action, formaction; the `background` of body,
/// table and its rows and cells), each `srcset`/`imagesrcset` candidate, meta refresh URLs,
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

    let mut handlers = vec![element!("*", move |el| {
        for (r, value) in decoded_refs(el) {
            let base = state_ref.borrow().base.clone();
            let new = match r.kind {
                RefKind::Base => {
                    let Ok(resolved) = page_url.join(value.trim()) else {
                        continue;
                    };
                    // Only the first base element counts (HTML §4.2.3), and a data: or
                    // javascript: base is ignored by browsers (the document URL stays).
                    let mut st = state_ref.borrow_mut();
                    if !std::mem::replace(&mut st.base_seen, true)
                        && matches!(resolved.scheme(), "http" | "https")
                    {
                        st.base = resolved.clone();
                    }
                    to_proxy_url(&resolved, proxy)
                }
                RefKind::ImageSet => srcset::rewrite(&value, |u| proxied(u, &base, proxy)),
                RefKind::Navigation if r.attr == "content" => refresh_url(&value).and_then(|at| {
                    let new = proxied(&value[at.clone()], &base, proxy)?;
                    Some(format!("{}{}{}", &value[..at.start], new, &value[at.end..]))
                }),
                _ => proxied(&value, &base, proxy),
            };
            if let Some(new) = new {
                el.set_attribute(r.attr, &escape_attr(&new))?;
            }
        }
        if let Some(raw) = el.get_attribute("style") {
            let value = decode_entities(&raw);
            let base = state_ref.borrow().base.clone();
            let new = css::rewrite_css(value.as_bytes(), &base, proxy);
            if new != value.as_bytes() {
                // The input was a &str, and the scanner only splices in UTF-8, so this holds.
                if let Ok(new) = String::from_utf8(new) {
                    el.set_attribute("style", &escape_attr(&new))?;
                }
            }
        }
        Ok(())
    })];
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

    handlers.extend(text_handlers);
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
    let handlers = vec![element!("*", move |el| {
        for (r, v) in decoded_refs(el) {
            let mut f = f.borrow_mut();
            match r.kind {
                RefKind::ImageSet => {
                    f.extend(srcset::parse(&v).into_iter().map(|c| c.url.to_string()))
                }
                RefKind::Navigation if r.attr == "content" => {
                    f.extend(refresh_url(&v).map(|at| v[at].to_string()))
                }
                _ => f.push(v),
            }
        }
        Ok(())
    })];
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

/// The objects a browser fetches to render a document (for the proxy's prefetch), by
/// webpep-discover's rule ([`RefKind::loads_with_page`]): for an `img` the candidate a large
/// screen picks (`src` among them), scripts, stylesheets, preloads, icons, frames, objects,
/// image inputs, `poster` and `background` attributes, and `url()`/`@import` in `style`
/// attributes and elements; unresolved, character references decoded, in document order.
/// Navigations (`a`, forms, meta refresh) and media are not listed. Also returns the first
/// `<base href>`, which the caller resolves the rest against. Malformed input gives what
/// could be found; never panics.
pub fn subresource_urls(html: &[u8]) -> (Option<String>, Vec<String>) {
    let found = RefCell::new(Vec::new());
    let base = RefCell::new(None::<String>);
    let style_text = RefCell::new(String::new());
    let (f, b) = (&found, &base);
    let handlers = vec![element!("*", move |el| {
        let tag = el.tag_name();
        for (r, v) in decoded_refs(el) {
            match r.kind {
                RefKind::Base => {
                    b.borrow_mut().get_or_insert(v);
                }
                // An image once: the candidate a large screen picks, `src` among them.
                RefKind::ImageSet if tag == "img" && el.has_attribute("src") => {}
                RefKind::Image | RefKind::ImageSet if tag == "img" => {
                    let set = el.get_attribute("srcset").unwrap_or_default();
                    let set = decode_entities(&set);
                    let src = el.get_attribute("src").unwrap_or_default();
                    let src = decode_entities(&src);
                    if let Some(c) = srcset::largest(&set, Some(&src)) {
                        f.borrow_mut().push(c.to_string());
                    }
                }
                RefKind::ImageSet => {}
                k if k.loads_with_page() => f.borrow_mut().push(v),
                _ => {}
            }
        }
        Ok(())
    })];
    scan_with_styles(html, handlers, f, &style_text, "subresource_urls");
    (base.into_inner(), found.into_inner())
}
