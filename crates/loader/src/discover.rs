//! Finding a page's embedded objects, as a browser's preload scanner does: HTML fed in chunks
//! as it arrives (`<img src/srcset>`, `<script src>`, `<link rel=stylesheet|preload|icon>`,
//! `<iframe src>`, `<input type=image>`, `background` attributes, `<base href>`, inline
//! `<style>` and `style` attributes) and CSS (`url()`, `@import`). Pure: no I/O.

use std::borrow::Cow;
use std::sync::{Arc, Mutex, MutexGuard};

use lol_html::html_content::{Element, TextChunk};
use lol_html::send::{ElementContentHandlers, HtmlRewriter, Settings};
use lol_html::{MemorySettings, Selector};
use url::Url;

use webpep_discover::entities::decode as decode_entities;
use webpep_discover::html::{element_refs, RefKind};

use crate::media::{media_applies, Viewport};
use crate::reference::url_kind;
pub use crate::reference::{resolve, Discovered, Hint, Need, ResourceKind};
use crate::selectors::ElementInfo;
use crate::stylesheet::{inline_font_use, scan_stylesheet, FontUse};

/// Whether `<img width height>` declares an image of at most 10,000 px² (Chromium's
/// "small" image, which its first-five boost skips).
fn declared_small(width: Option<&str>, height: Option<&str>) -> bool {
    let px = |v: Option<&str>| v.and_then(|v| v.trim().parse::<u64>().ok());
    matches!((px(width), px(height)), (Some(w), Some(h)) if w.saturating_mul(h) <= 10_000)
}

// ---------------------------------------------------------------------------------------------
// HTML

struct ScanState {
    base: Url,
    base_set: bool,
    found: Vec<Discovered>,
    style_text: String,
    /// `<link rel=preload|modulepreload>` is a reference (today's browsers; 2003's knew
    /// neither).
    link_preload: bool,
    /// References found so far in the whole document (handed out or not).
    count: usize,
    /// How many references came before the document's body began: its `<body>` tag, or the
    /// first element that cannot be in a head.
    body_at: Option<usize>,
    /// Images and fonts of `<style>` elements before the body: like an external sheet's, a
    /// browser requests them at layout, so they are handed out right after the body starts.
    head_style_refs: Vec<Discovered>,
    /// The screen media queries are evaluated for.
    viewport: Viewport,
    /// The media of the `<style>` element being read apply.
    style_applies: bool,
    /// Elements found since the last [`HtmlScanner::take_elements`].
    elements: Vec<ElementInfo>,
    /// How `<style>` elements and `style` attributes set text, since the last
    /// [`HtmlScanner::take_font_uses`].
    font_uses: Vec<FontUse>,
}

/// Elements a document's head holds; any other element starts the body.
const HEAD_ELEMENTS: [&str; 10] = [
    "html", "head", "title", "meta", "link", "style", "script", "base", "noscript", "template",
];

impl ScanState {
    fn push(&mut self, raw: &str, kind: ResourceKind) {
        self.push_hinted(raw, kind, Hint::None);
    }

    fn push_hinted(&mut self, raw: &str, kind: ResourceKind, hint: Hint) {
        self.push_decoded(&decode_entities(raw), kind, hint);
    }

    /// A reference whose character references are already decoded.
    fn push_decoded(&mut self, decoded: &str, kind: ResourceKind, hint: Hint) {
        if let Some(url) = resolve(&self.base, decoded) {
            self.found.push(Discovered {
                url,
                kind,
                need: Need::Always,
                hint,
            });
            self.count += 1;
        }
    }

    fn push_css(&mut self, css: &str) {
        let base = self.base.clone();
        let refs = scan_css(css, &base);
        self.count += refs.len();
        self.found.extend(refs);
    }

    /// A `<style>` element's references, each with when it is needed: `@import`s at once;
    /// before the body, images and fonts wait for it.
    fn push_style(&mut self, css: &str) {
        let sheet = scan_stylesheet(css, &self.base, self.style_applies, &self.viewport);
        self.font_uses.extend(sheet.font_uses);
        if self.body_at.is_some() {
            self.count += sheet.refs.len();
            self.found.extend(sheet.refs);
            return;
        }
        for d in sheet.refs {
            if matches!(d.kind, ResourceKind::Image | ResourceKind::Font) {
                self.head_style_refs.push(d);
            } else {
                self.found.push(d);
                self.count += 1;
            }
        }
    }

    /// The body starts here: note where, then hand out what the head's styles use.
    fn start_body(&mut self) {
        self.body_at = Some(self.count);
        let refs = std::mem::take(&mut self.head_style_refs);
        self.count += refs.len();
        self.found.extend(refs);
    }
}

fn lock(state: &Mutex<ScanState>) -> MutexGuard<'_, ScanState> {
    state
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

type Sink = fn(&[u8]);

fn discard(_: &[u8]) {}

/// A streaming HTML scanner: feed it the document's bytes as they arrive and collect the
/// embedded objects found so far, in document order.
pub struct HtmlScanner {
    rewriter: Option<HtmlRewriter<'static, Sink>>,
    state: Arc<Mutex<ScanState>>,
    error: Option<String>,
}

impl std::fmt::Debug for HtmlScanner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HtmlScanner")
            .field("error", &self.error)
            .finish_non_exhaustive()
    }
}

fn selector(s: &str) -> Result<Selector, String> {
    s.parse::<Selector>().map_err(|e| e.to_string())
}

fn on_element(
    state: &Mutex<ScanState>,
    el: &mut Element<'_, '_, lol_html::send::SendHandlerTypes>,
) {
    let tag = el.tag_name();
    let mut st = lock(state);
    if st.body_at.is_none() && !HEAD_ELEMENTS.contains(&tag.as_str()) {
        st.start_body();
    }
    let mut info = ElementInfo {
        tag: tag.as_str().into(),
        ..ElementInfo::default()
    };
    for a in el.attributes() {
        let name = a.name();
        match name.as_str() {
            "id" => info.id = Some(decode_entities(&a.value()).into()),
            "class" => {
                info.classes = decode_entities(&a.value())
                    .split_ascii_whitespace()
                    .map(Into::into)
                    .collect();
            }
            _ => {}
        }
        info.attrs.push(name.into());
    }
    st.elements.push(info);
    let refs = element_refs(tag.as_str(), |name| el.get_attribute(name));
    for r in &refs {
        let Some(raw) = el.get_attribute(r.attr) else {
            continue;
        };
        match r.kind {
            RefKind::Image | RefKind::ImageSet if tag == "img" => {
                // Once per image: the candidate a large screen picks, `src` among them.
                if r.kind == RefKind::ImageSet && el.has_attribute("src") {
                    continue;
                }
                let set = el.get_attribute("srcset").unwrap_or_default();
                let set = decode_entities(&set);
                let src = el.get_attribute("src").unwrap_or_default();
                let src = decode_entities(&src);
                let Some(chosen) = webpep_discover::srcset::largest(&set, Some(&src)) else {
                    continue;
                };
                let small = declared_small(
                    el.get_attribute("width").as_deref(),
                    el.get_attribute("height").as_deref(),
                );
                let hint = if small { Hint::None } else { Hint::LargeImage };
                st.push_decoded(chosen, ResourceKind::Image, hint);
            }
            // A `<picture>`'s sources and a preload's `imagesrcset`: the model fetches the
            // `<img>`'s choice only.
            RefKind::ImageSet => {}
            RefKind::Image | RefKind::Icon => st.push(&raw, ResourceKind::Image),
            RefKind::Script => {
                let module = el
                    .get_attribute("type")
                    .is_some_and(|t| t.trim().eq_ignore_ascii_case("module"));
                let hint = if module || el.has_attribute("async") || el.has_attribute("defer") {
                    Hint::AsyncScript
                } else {
                    Hint::None
                };
                st.push_hinted(&raw, ResourceKind::Script, hint);
            }
            RefKind::Stylesheet => {
                let media = el.get_attribute("media").unwrap_or_default();
                let applies = media_applies(&decode_entities(&media), &st.viewport);
                let before = st.found.len();
                st.push(&raw, ResourceKind::Stylesheet);
                if !applies && st.found.len() > before {
                    // Fetched all the same (as browsers do), but nothing in it is used.
                    if let Some(d) = st.found.last_mut() {
                        d.need = Need::Unused;
                    }
                }
            }
            RefKind::Preload if st.link_preload => {
                let kind = match el
                    .get_attribute("as")
                    .unwrap_or_default()
                    .to_ascii_lowercase()
                    .as_str()
                {
                    "style" => ResourceKind::Stylesheet,
                    "script" => ResourceKind::Script,
                    "image" => ResourceKind::Image,
                    "font" => ResourceKind::Font,
                    "document" => ResourceKind::Iframe,
                    _ => ResourceKind::Other,
                };
                st.push(&raw, kind);
            }
            RefKind::ModulePreload if st.link_preload => st.push(&raw, ResourceKind::Script),
            RefKind::Frame => st.push(&raw, ResourceKind::Iframe),
            RefKind::Object => st.push(&raw, ResourceKind::Other),
            RefKind::Base if !st.base_set => {
                if let Ok(b) = st.base.join(decode_entities(&raw).trim()) {
                    st.base = b;
                    st.base_set = true;
                }
            }
            // Media is streamed when played (range requests), not loaded with the page; a
            // preload is not followed by a browser older than it; the rest are not fetched.
            RefKind::Media
            | RefKind::Preload
            | RefKind::ModulePreload
            | RefKind::Base
            | RefKind::AlternateStylesheet
            | RefKind::Navigation
            | RefKind::Other => {}
        }
    }
    if let Some(style) = el.get_attribute("style") {
        let style = decode_entities(&style);
        st.push_css(&style);
        if let Some(u) = inline_font_use(&style) {
            st.font_uses.push(u);
        }
    }
    if tag == "style" {
        let media = el.get_attribute("media").unwrap_or_default();
        st.style_applies = media_applies(&decode_entities(&media), &st.viewport);
    }
}

fn on_style_text(state: &Mutex<ScanState>, t: &mut TextChunk<'_>) {
    let mut st = lock(state);
    st.style_text.push_str(t.as_str());
    if t.last_in_text_node() {
        let css = std::mem::take(&mut st.style_text);
        st.push_style(&css);
    }
}

impl HtmlScanner {
    /// A scanner for a document fetched from `base`, as today's browsers read one.
    pub fn new(base: Url) -> HtmlScanner {
        HtmlScanner::with_link_preload(base, true)
    }

    /// A scanner that follows `<link rel=preload|modulepreload>` or, with `false`, ignores it
    /// as a browser from before those existed (Mozilla 1.x) does.
    pub fn with_link_preload(base: Url, link_preload: bool) -> HtmlScanner {
        HtmlScanner::for_browser(base, link_preload, Viewport::default())
    }

    /// A scanner for a browser that follows `<link rel=preload>` or not, with its screen (for
    /// media queries).
    pub fn for_browser(base: Url, link_preload: bool, viewport: Viewport) -> HtmlScanner {
        let state = Arc::new(Mutex::new(ScanState {
            base,
            base_set: false,
            found: Vec::new(),
            style_text: String::new(),
            link_preload,
            count: 0,
            body_at: None,
            head_style_refs: Vec::new(),
            viewport,
            style_applies: true,
            elements: Vec::new(),
            font_uses: Vec::new(),
        }));
        match Self::build(&state) {
            Ok(rewriter) => HtmlScanner {
                rewriter: Some(rewriter),
                state,
                error: None,
            },
            Err(e) => HtmlScanner {
                rewriter: None,
                state,
                error: Some(e),
            },
        }
    }

    fn build(state: &Arc<Mutex<ScanState>>) -> Result<HtmlRewriter<'static, Sink>, String> {
        let s_el = state.clone();
        let s_text = state.clone();
        let mut settings = Settings::new_send();
        settings.element_content_handlers = vec![
            (
                Cow::Owned(selector("*")?),
                ElementContentHandlers::default().element(
                    move |el: &mut Element<'_, '_, lol_html::send::SendHandlerTypes>| {
                        on_element(&s_el, el);
                        Ok(())
                    },
                ),
            ),
            (
                Cow::Owned(selector("style")?),
                ElementContentHandlers::default().text(move |t: &mut TextChunk<'_>| {
                    on_style_text(&s_text, t);
                    Ok(())
                }),
            ),
        ];
        settings.strict = false;
        settings.memory_settings = MemorySettings {
            max_allowed_memory_usage: 16 << 20,
            ..MemorySettings::default()
        };
        Ok(HtmlRewriter::new(settings, discard as Sink))
    }

    /// Feed the next bytes of the document; returns the objects found in them.
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<Discovered> {
        if let Some(rw) = self.rewriter.as_mut() {
            if let Err(e) = rw.write(chunk) {
                self.error = Some(e.to_string());
                self.rewriter = None;
            }
        }
        std::mem::take(&mut lock(&self.state).found)
    }

    /// The document is complete; returns the objects found in its last bytes.
    pub fn finish(&mut self) -> Vec<Discovered> {
        if let Some(rw) = self.rewriter.take() {
            if let Err(e) = rw.end() {
                self.error = Some(e.to_string());
            }
        }
        let mut st = lock(&self.state);
        // A document without body content is laid out when it ends.
        if st.body_at.is_none() {
            st.start_body();
        }
        std::mem::take(&mut st.found)
    }

    /// Where the document's body began, once the scanner has seen it: the number of
    /// references (over everything `feed` and `finish` returned) that came before it. A
    /// browser lays out, and so requests stylesheets' images, only from there on.
    pub fn body_start(&self) -> Option<usize> {
        lock(&self.state).body_at
    }

    /// The elements the scanner has come to since the last call, in document order.
    pub fn take_elements(&mut self) -> Vec<ElementInfo> {
        std::mem::take(&mut lock(&self.state).elements)
    }

    /// How the document's `<style>` elements and `style` attributes set text, since the last
    /// call.
    pub fn take_font_uses(&mut self) -> Vec<FontUse> {
        std::mem::take(&mut lock(&self.state).font_uses)
    }

    /// Why scanning stopped early, if it did (the objects found before are kept).
    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }
}

/// Scan a whole HTML document.
pub fn scan_html(base: &Url, html: &[u8]) -> Vec<Discovered> {
    scan_html_document(HtmlScanner::new(base.clone()), html).0
}

/// Scan a whole HTML document with `scanner`; also returns where its body began (see
/// [`HtmlScanner::body_start`]).
pub fn scan_html_document(mut scanner: HtmlScanner, html: &[u8]) -> (Vec<Discovered>, usize) {
    let mut out = scanner.feed(html);
    out.extend(scanner.finish());
    let body = scanner.body_start().unwrap_or(out.len());
    (out, body)
}

// ---------------------------------------------------------------------------------------------
// CSS

/// Scan a stylesheet (or a `style` attribute) for `@import` and `url()` references.
pub fn scan_css(css: &str, base: &Url) -> Vec<Discovered> {
    webpep_discover::css::references(css.as_bytes())
        .into_iter()
        .filter(|r| !r.is_data())
        .filter_map(|r| {
            let kind = match r.kind {
                webpep_discover::css::RefKind::Import => ResourceKind::Stylesheet,
                webpep_discover::css::RefKind::Url => url_kind(&r.value, r.in_font_face),
            };
            Some(Discovered {
                url: resolve(base, &r.value)?,
                kind,
                need: Need::Always,
                hint: Hint::None,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> Url {
        Url::parse("http://www.example.test/dir/page.html").expect("static URL")
    }

    fn urls(d: &[Discovered]) -> Vec<(String, ResourceKind)> {
        d.iter().map(|d| (d.url.to_string(), d.kind)).collect()
    }

    #[test]
    fn the_body_starts_after_the_heads_references() {
        let html = br#"<!doctype html><html><head><title>t</title>
            <link rel="stylesheet" href="/a.css"><script src="/h.js"></script>
            <link rel="preload" href="/p.js" as="script"></head>
            <body><img src="/i.gif"></body></html>"#;
        let mut s = HtmlScanner::new(base());
        let found = s.feed(&html[..60]);
        assert!(s.body_start().is_none(), "{found:?}");
        let rest = s.feed(&html[60..]);
        assert_eq!(found.len() + rest.len(), 4);
        assert_eq!(s.body_start(), Some(3));
        let mut s = HtmlScanner::with_link_preload(base(), false);
        let mut all = s.feed(html);
        all.extend(s.finish());
        assert_eq!(all.len(), 3, "preload ignored: {all:?}");
        assert_eq!(s.body_start(), Some(2));
        // No <body> tag: the first element a head cannot hold starts it.
        let (found, body) = scan_html_document(
            HtmlScanner::new(base()),
            b"<link rel=stylesheet href=/a.css><div><img src=/i.gif></div>",
        );
        assert_eq!((found.len(), body), (2, 1));
        // A head <style>'s images come right after the body starts; its @import at once.
        let (found, body) = scan_html_document(
            HtmlScanner::new(base()),
            b"<style>@import url(/i.css); p { background: url(/bg.gif) }</style><p><img src=/x.gif>",
        );
        let order: Vec<&str> = found.iter().map(|d| d.url.path()).collect();
        assert_eq!(order, ["/i.css", "/bg.gif", "/x.gif"]);
        assert_eq!(body, 1);
        // No body content at all: the end of the document.
        let (found, body) = scan_html_document(
            HtmlScanner::new(base()),
            b"<head><script src=/a.js></script></head>",
        );
        assert_eq!((found.len(), body), (1, 1));
    }

    /// What the markup says of priority: images not declared small (for Chromium's first-five
    /// boost) and scripts that do not stop the parser.
    #[test]
    fn priority_hints_from_the_markup() {
        let (found, _) = scan_html_document(
            HtmlScanner::new(base()),
            b"<img src=a.gif><img src=b.gif width=100 height=100><img src=c.gif width=101               height=100><img src=d.gif width=50%><img srcset=\"e.gif 1x\" width=5 height=5>              <script src=f.js></script><script async src=g.js></script><script defer               src=h.js></script><script type=module src=i.js></script>",
        );
        let hints: Vec<(&str, Hint)> = found.iter().map(|d| (d.url.path(), d.hint)).collect();
        assert_eq!(
            hints,
            [
                ("/dir/a.gif", Hint::LargeImage),
                ("/dir/b.gif", Hint::None),
                ("/dir/c.gif", Hint::LargeImage),
                ("/dir/d.gif", Hint::LargeImage),
                ("/dir/e.gif", Hint::None),
                ("/dir/f.js", Hint::None),
                ("/dir/g.js", Hint::AsyncScript),
                ("/dir/h.js", Hint::AsyncScript),
                ("/dir/i.js", Hint::AsyncScript),
            ]
        );
    }

    /// What a layout needs of the page: its elements (tag, id, classes, attribute names) in
    /// order, how its `<style>`s and `style` attributes set text, which stylesheets are for
    /// other media, and when each `<style>` reference is needed.
    #[test]
    fn elements_styles_and_media_for_the_layout() {
        let html = br#"<html><head>
            <link rel=stylesheet href=/all.css><link rel=stylesheet media=print href="javascript:x">
            <link rel=stylesheet media="print" href=/p.css>
            <link rel=stylesheet media="screen and (min-width: 800px)" href=/wide.css>
            <style media=print>.x { background: url(/printed.gif) }</style>
            <style>.nav { background: url(/nav.gif) } body { font-family: Sans }</style>
            </head><body><DIV ID=main CLASS="nav  wide" data-x=1><em style="font-weight: 300">e</em>
            </div></body></html>"#;
        let mut s = HtmlScanner::new(base());
        let mut found = s.feed(html);
        found.extend(s.finish());
        let needs: Vec<(&str, &str)> = found
            .iter()
            .map(|d| {
                let need = match &d.need {
                    Need::Always => "always",
                    Need::Unused => "unused",
                    Need::Rule(_) => "rule",
                    Need::FontFace(_) => "font",
                };
                (d.url.path(), need)
            })
            .collect();
        assert_eq!(
            needs,
            [
                ("/all.css", "always"),
                ("/p.css", "unused"),
                ("/wide.css", "always"),
                ("/nav.gif", "rule"),
            ]
        );
        let tags: Vec<String> = s
            .take_elements()
            .iter()
            .map(|e| e.tag.to_string())
            .collect();
        assert_eq!(
            tags,
            [
                "html", "head", "link", "link", "link", "link", "style", "style", "body", "div",
                "em"
            ]
        );
        let mut s = HtmlScanner::new(base());
        s.feed(html);
        let div = s
            .take_elements()
            .into_iter()
            .find(|e| &*e.tag == "div")
            .unwrap();
        assert_eq!(div.id.as_deref(), Some("main"));
        assert_eq!(div.classes, vec![Box::from("nav"), Box::from("wide")]);
        assert_eq!(
            div.attrs,
            vec![Box::from("id"), Box::from("class"), Box::from("data-x")]
        );
        let uses = s.take_font_uses();
        assert_eq!(uses.len(), 2, "{uses:?}");
        assert_eq!(uses[1].weight, Some(300));
        assert!(s.take_font_uses().is_empty(), "taken once");
    }

    #[test]
    fn html_elements_in_document_order() {
        let html = br##"<!doctype html><html><head>
            <link rel="stylesheet" href="/s/main.css">
            <link rel="alternate stylesheet" href="alt.css">
            <link rel="preload" as="font" href="f.woff2">
            <link rel="shortcut icon" href="/favicon.ico">
            <script src="js/app.js?a=1&amp;b=2"></script>
            <style>body { background: url('bg.png') } @import "imp.css";</style>
            </head><body background="bodybg.gif">
            <img src="a.jpg"><img srcset="s.jpg 320w, l.jpg 1024w, m.jpg 640w" src="fallback.jpg">
            <img src="x1.png" srcset="x2.png 2x, x3.png 3x">
            <div style="background-image:url(&quot;div.png&quot;)"></div>
            <input type="IMAGE" src="btn.gif"><input type="text" src="no.gif">
            <iframe src="//other.test/frame.html#top"></iframe>
            <a href="not-fetched.html">x</a><img src="data:image/gif;base64,AAAA"><img src="#frag">
            </body></html>"##;
        let found = scan_html(&base(), html);
        assert_eq!(
            urls(&found),
            vec![
                (
                    "http://www.example.test/s/main.css".into(),
                    ResourceKind::Stylesheet
                ),
                (
                    "http://www.example.test/dir/f.woff2".into(),
                    ResourceKind::Font
                ),
                (
                    "http://www.example.test/favicon.ico".into(),
                    ResourceKind::Image
                ),
                (
                    "http://www.example.test/dir/js/app.js?a=1&b=2".into(),
                    ResourceKind::Script
                ),
                // A head <style>'s image comes when the body starts (layout), after its
                // @import.
                (
                    "http://www.example.test/dir/imp.css".into(),
                    ResourceKind::Stylesheet
                ),
                (
                    "http://www.example.test/dir/bg.png".into(),
                    ResourceKind::Image
                ),
                (
                    "http://www.example.test/dir/bodybg.gif".into(),
                    ResourceKind::Image
                ),
                (
                    "http://www.example.test/dir/a.jpg".into(),
                    ResourceKind::Image
                ),
                (
                    "http://www.example.test/dir/l.jpg".into(),
                    ResourceKind::Image
                ),
                (
                    "http://www.example.test/dir/x3.png".into(),
                    ResourceKind::Image
                ),
                (
                    "http://www.example.test/dir/div.png".into(),
                    ResourceKind::Image
                ),
                (
                    "http://www.example.test/dir/btn.gif".into(),
                    ResourceKind::Image
                ),
                ("http://other.test/frame.html".into(), ResourceKind::Iframe),
            ]
        );
    }

    #[test]
    fn html_streamed_byte_by_byte_and_base_href() {
        let html = br#"<html><head><base href="http://cdn.test/assets/"></head>
            <body><img src="one.gif"><script src="/two.js"></script></body></html>"#;
        let mut s = HtmlScanner::new(base());
        let mut found = Vec::new();
        for b in html.iter() {
            found.extend(s.feed(std::slice::from_ref(b)));
        }
        found.extend(s.finish());
        assert_eq!(
            urls(&found),
            vec![
                ("http://cdn.test/assets/one.gif".into(), ResourceKind::Image),
                ("http://cdn.test/two.js".into(), ResourceKind::Script),
            ]
        );
        assert!(s.error().is_none());
    }

    #[test]
    fn html_garbage_does_not_panic() {
        let mut s = HtmlScanner::new(base());
        let junk: Vec<u8> = (0..5000u32).map(|i| (i * 7919 % 251) as u8).collect();
        let _ = s.feed(&junk);
        let _ = s.feed(b"<img src=\"ok.png\"><<<>>><img src=");
        let _ = s.finish();
    }

    #[test]
    fn css_imports_urls_and_comments() {
        let css = r#"
            @import url("a.css");
            @import 'b.css' screen;
            /* url(commented.png) */
            .x { background: url( img/x.png ) no-repeat; }
            .y { background-image: URL("y.gif"), url('z.jpg'); }
            .q { content: "url(in-string.png)"; }
            .svg { fill: url(#grad); mask: url(data:image/png;base64,AAA); }
            @font-face { font-family: F; src: url(font.bin) format("woff"); }
            .after { background: url(after.png) }
            .escaped { background: url("we\"ird.png") }
            .notfn { background: myurl(no.png) }
        "#;
        let found = scan_css(css, &base());
        assert_eq!(
            urls(&found),
            vec![
                (
                    "http://www.example.test/dir/a.css".into(),
                    ResourceKind::Stylesheet
                ),
                (
                    "http://www.example.test/dir/b.css".into(),
                    ResourceKind::Stylesheet
                ),
                (
                    "http://www.example.test/dir/img/x.png".into(),
                    ResourceKind::Image
                ),
                (
                    "http://www.example.test/dir/y.gif".into(),
                    ResourceKind::Image
                ),
                (
                    "http://www.example.test/dir/z.jpg".into(),
                    ResourceKind::Image
                ),
                (
                    "http://www.example.test/dir/font.bin".into(),
                    ResourceKind::Font
                ),
                (
                    "http://www.example.test/dir/after.png".into(),
                    ResourceKind::Image
                ),
                (
                    "http://www.example.test/dir/we%22ird.png".into(),
                    ResourceKind::Image
                ),
            ]
        );
    }

    #[test]
    fn css_unterminated_input_is_safe() {
        for css in [
            "url(",
            "@import",
            "@import \"x",
            "url('abc",
            "/* never ends",
            "\"\\",
            "url(\\",
        ] {
            let _ = scan_css(css, &base());
        }
    }
}
