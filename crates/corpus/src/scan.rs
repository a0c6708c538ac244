//! The references of HTML and CSS documents with their byte spans, so a document can be
//! rewritten in place; resolving them; relative references. What an element or a stylesheet
//! refers to is webpep-discover's answer (the one the lab's browser model and the proxy use);
//! this module adds the tokenizer that keeps attribute spans (lol_html does not give them).
//! Works on bytes, so documents in any ASCII-compatible charset are fine.

use std::ops::Range;

use webpep_discover::css::{self, RefKind as CssKind};
use webpep_discover::entities::decode as decode_entities;
use webpep_discover::html::{element_refs, refresh_url, RefKind as HtmlKind, RAW_TEXT_ELEMENTS};

use crate::model::{host_of, path_of};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RefKind {
    /// `<img src>`, `<input type=image src>`, `background=`, `<video poster>`
    Image,
    /// one candidate of a `srcset`
    Srcset,
    /// `<script src>`
    Script,
    /// `<link rel=stylesheet href>`
    Stylesheet,
    /// `<link rel=preload|modulepreload href>`
    Preload,
    /// `<link rel=icon href>`
    Icon,
    /// `<iframe src>`, `<frame src>`
    Frame,
    /// `<embed src>`, `<object data>`, `<audio|video|source|track src>`
    Embed,
    /// a navigation, not an embedded object: `<a href>`, `<area href>`, `<form action>`,
    /// `formaction`, a `<meta http-equiv=refresh>` URL
    Anchor,
    /// `<base href>`
    Base,
    /// any other `<link href>` (canonical, alternate, an alternate stylesheet, ...),
    /// `<img lowsrc>`
    Other,
    /// `url(...)` in CSS (a stylesheet, a `<style>` block or a `style` attribute)
    CssUrl,
    /// `@import` in CSS
    CssImport,
}

impl RefKind {
    /// Whether a browser fetches the target as part of the page.
    pub fn is_embedded(self) -> bool {
        !matches!(self, RefKind::Anchor | RefKind::Base | RefKind::Other)
    }
}

/// A reference found in a document: the URL as written (entities decoded) and where its raw
/// text sits in the document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ref {
    pub kind: RefKind,
    pub url: String,
    pub span: Range<usize>,
}

fn lower(b: &[u8]) -> String {
    String::from_utf8_lossy(b).to_ascii_lowercase()
}

fn find(h: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    if needle.is_empty() || from >= h.len() {
        return None;
    }
    h[from..]
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|p| p + from)
}

fn find_ci(h: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    if needle.is_empty() || from >= h.len() {
        return None;
    }
    h[from..]
        .windows(needle.len())
        .position(|w| w.eq_ignore_ascii_case(needle))
        .map(|p| p + from)
}

struct Attr {
    name: String,
    value: String,
    span: Range<usize>,
}

/// Every reference in an HTML document, in document order.
pub fn html_refs(html: &[u8]) -> Vec<Ref> {
    let mut out = Vec::new();
    let n = html.len();
    let mut i = 0;
    while let Some(lt) = html[i.min(n)..]
        .iter()
        .position(|&b| b == b'<')
        .map(|p| p + i)
    {
        i = lt + 1;
        if html[lt..].starts_with(b"<!--") {
            i = find(html, b"-->", lt + 4).map(|p| p + 3).unwrap_or(n);
            continue;
        }
        match html.get(i) {
            Some(b'!') | Some(b'?') | Some(b'/') => {
                i = html[i..]
                    .iter()
                    .position(|&b| b == b'>')
                    .map(|p| p + i + 1)
                    .unwrap_or(n);
                continue;
            }
            Some(c) if c.is_ascii_alphabetic() => {}
            _ => continue,
        }
        let name_start = i;
        while i < n && (html[i].is_ascii_alphanumeric() || html[i] == b'-' || html[i] == b':') {
            i += 1;
        }
        let tag = lower(&html[name_start..i]);
        let mut attrs: Vec<Attr> = Vec::new();
        // Attributes.
        loop {
            while i < n && (html[i].is_ascii_whitespace() || html[i] == b'/') {
                i += 1;
            }
            if i >= n {
                break;
            }
            if html[i] == b'>' {
                i += 1;
                break;
            }
            let an = i;
            while i < n && !html[i].is_ascii_whitespace() && !matches!(html[i], b'=' | b'>' | b'/')
            {
                i += 1;
            }
            if i == an {
                i += 1;
                continue;
            }
            let aname = lower(&html[an..i]);
            let mut j = i;
            while j < n && html[j].is_ascii_whitespace() {
                j += 1;
            }
            if j < n && html[j] == b'=' {
                j += 1;
                while j < n && html[j].is_ascii_whitespace() {
                    j += 1;
                }
                if j < n && (html[j] == b'"' || html[j] == b'\'') {
                    let q = html[j];
                    let vs = j + 1;
                    let ve = html[vs..]
                        .iter()
                        .position(|&b| b == q)
                        .map(|p| p + vs)
                        .unwrap_or(n);
                    attrs.push(Attr {
                        name: aname,
                        value: decode_entities(&String::from_utf8_lossy(&html[vs..ve]))
                            .into_owned(),
                        span: vs..ve,
                    });
                    i = (ve + 1).min(n);
                } else {
                    let vs = j;
                    while j < n && !html[j].is_ascii_whitespace() && html[j] != b'>' {
                        j += 1;
                    }
                    attrs.push(Attr {
                        name: aname,
                        value: decode_entities(&String::from_utf8_lossy(&html[vs..j])).into_owned(),
                        span: vs..j,
                    });
                    i = j;
                }
            } else {
                attrs.push(Attr {
                    name: aname,
                    value: String::new(),
                    span: i..i,
                });
            }
        }
        tag_refs(&tag, &attrs, &mut out);
        for a in &attrs {
            if a.name == "style" && a.value.contains("url(") {
                let raw = &html[a.span.clone()];
                for mut r in css_refs(raw) {
                    r.span = r.span.start + a.span.start..r.span.end + a.span.start;
                    out.push(r);
                }
            }
        }
        // Raw text elements.
        if RAW_TEXT_ELEMENTS.contains(&tag.as_str()) {
            let close = format!("</{tag}");
            let end = find_ci(html, close.as_bytes(), i).unwrap_or(n);
            if tag == "style" {
                for mut r in css_refs(&html[i..end]) {
                    r.span = r.span.start + i..r.span.end + i;
                    out.push(r);
                }
            }
            i = end;
        }
    }
    out
}

fn tag_refs(tag: &str, attrs: &[Attr], out: &mut Vec<Ref>) {
    let get = |name: &str| attrs.iter().find(|a| a.name == name);
    for r in element_refs(tag, |name| get(name).map(|a| a.value.clone())) {
        let Some(a) = get(r.attr) else {
            continue;
        };
        // Spans are exact where the raw text is the decoded value; otherwise the whole value.
        let exact = a.span.len() == a.value.len();
        let kind = match r.kind {
            HtmlKind::ImageSet => {
                for c in webpep_discover::srcset::parse(&a.value) {
                    let span = if exact {
                        a.span.start + c.span.start..a.span.start + c.span.end
                    } else {
                        a.span.clone()
                    };
                    out.push(Ref {
                        kind: RefKind::Srcset,
                        url: c.url.to_string(),
                        span,
                    });
                }
                continue;
            }
            HtmlKind::Navigation if r.attr == "content" => {
                if let Some(at) = refresh_url(&a.value) {
                    let span = if exact {
                        a.span.start + at.start..a.span.start + at.end
                    } else {
                        a.span.clone()
                    };
                    out.push(Ref {
                        kind: RefKind::Anchor,
                        url: a.value[at].to_string(),
                        span,
                    });
                }
                continue;
            }
            HtmlKind::Image => RefKind::Image,
            HtmlKind::Script => RefKind::Script,
            HtmlKind::Stylesheet => RefKind::Stylesheet,
            HtmlKind::Preload | HtmlKind::ModulePreload => RefKind::Preload,
            HtmlKind::Icon => RefKind::Icon,
            HtmlKind::Frame => RefKind::Frame,
            HtmlKind::Media | HtmlKind::Object => RefKind::Embed,
            HtmlKind::Base => RefKind::Base,
            HtmlKind::Navigation => RefKind::Anchor,
            HtmlKind::AlternateStylesheet | HtmlKind::Other => RefKind::Other,
        };
        let v = a.value.trim();
        if v.is_empty() {
            continue;
        }
        let span = if exact {
            let start = a.span.start + (a.value.len() - a.value.trim_start().len());
            start..start + v.len()
        } else {
            a.span.clone()
        };
        out.push(Ref {
            kind,
            url: v.to_string(),
            span,
        });
    }
}

/// Every `url(...)` and `@import` in a stylesheet, in order (`data:` URLs left out).
pub fn css_refs(css: &[u8]) -> Vec<Ref> {
    css::references(css)
        .into_iter()
        .filter(|r| !r.is_data())
        .map(|r| Ref {
            kind: match r.kind {
                CssKind::Import => RefKind::CssImport,
                CssKind::Url => RefKind::CssUrl,
            },
            url: r.value,
            span: r.span,
        })
        .collect()
}

/// Resolves `reference` against `base` (both URLs): an absolute http(s) URL without fragment,
/// or `None` (other schemes, `data:`, unparsable).
pub fn resolve(base: &str, reference: &str) -> Option<String> {
    let base = url::Url::parse(base).ok()?;
    webpep_discover::resolve(&base, reference).map(String::from)
}

/// The reference a document at `from` uses for `to`: a relative path on the same host and
/// scheme, the absolute URL otherwise.
pub fn relative_ref(from: &str, to: &str) -> String {
    let scheme = |u: &str| u.split("://").next().unwrap_or("").to_ascii_lowercase();
    if host_of(from) != host_of(to) || host_of(to).is_none() || scheme(from) != scheme(to) {
        return to.to_string();
    }
    let fp = path_of(from);
    let fp = fp.split('?').next().unwrap_or(fp);
    let tp = path_of(to);
    let from_dirs: Vec<&str> = {
        let d = &fp[..fp.rfind('/').map(|i| i + 1).unwrap_or(0)];
        d.split('/').filter(|s| !s.is_empty()).collect()
    };
    let (tpath, query) = match tp.find('?') {
        Some(q) => (&tp[..q], &tp[q..]),
        None => (tp, ""),
    };
    let to_segs: Vec<&str> = tpath.split('/').filter(|s| !s.is_empty()).collect();
    if to_segs.is_empty() {
        return tp.to_string();
    }
    let (to_dirs, file) = to_segs.split_at(to_segs.len() - 1);
    let common = from_dirs
        .iter()
        .zip(to_dirs.iter())
        .take_while(|(a, b)| a == b)
        .count();
    let mut s = String::new();
    for _ in common..from_dirs.len() {
        s.push_str("../");
    }
    for d in &to_dirs[common..] {
        s.push_str(d);
        s.push('/');
    }
    s.push_str(file[0]);
    if tpath.ends_with('/') {
        s.push('/');
    }
    s.push_str(query);
    s
}

/// Applies non-overlapping replacements (sorted or not) to `body`.
pub fn rewrite(body: &[u8], edits: &[(Range<usize>, String)]) -> Vec<u8> {
    let mut edits: Vec<&(Range<usize>, String)> = edits.iter().collect();
    edits.sort_by_key(|e| e.0.start);
    let mut out = Vec::with_capacity(body.len() + edits.len() * 32);
    let mut at = 0;
    for (r, s) in edits {
        if r.start < at || r.end > body.len() {
            continue;
        }
        out.extend_from_slice(&body[at..r.start]);
        out.extend_from_slice(s.as_bytes());
        at = r.end;
    }
    out.extend_from_slice(&body[at..]);
    out
}

/// An object found by [`discover`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Discovered {
    pub url: String,
    /// 0 for the root, 1 for what the root references, 2 for what those reference, ...
    pub depth: usize,
    /// How it was referenced (the first time).
    pub kind: RefKind,
    /// The document that referenced it (empty for the root).
    pub from: String,
}

/// Walks a page as a browser model would: the root, then every embedded reference of every HTML
/// (frames included) and CSS document reached, breadth first. `get(url)` returns the content
/// type and body of a URL, or `None` when it is not available (it is still listed, not
/// followed).
pub fn discover<F>(root: &str, mut get: F) -> Vec<Discovered>
where
    F: FnMut(&str) -> Option<(String, Vec<u8>)>,
{
    let mut out = vec![Discovered {
        url: root.to_string(),
        depth: 0,
        kind: RefKind::Frame,
        from: String::new(),
    }];
    let mut seen = std::collections::HashSet::new();
    seen.insert(root.to_string());
    let mut i = 0;
    while i < out.len() && out.len() < 100_000 {
        let (url, depth) = (out[i].url.clone(), out[i].depth);
        i += 1;
        if depth >= 8 {
            continue;
        }
        let Some((ctype, body)) = get(&url) else {
            continue;
        };
        let ct = ctype.to_ascii_lowercase();
        let (refs, mut base) = if ct.contains("html") {
            (html_refs(&body), url.clone())
        } else if ct.contains("css") {
            (css_refs(&body), url.clone())
        } else {
            continue;
        };
        for r in refs {
            if r.kind == RefKind::Base {
                if let Some(b) = resolve(&url, &r.url) {
                    base = b;
                }
                continue;
            }
            if !r.kind.is_embedded() {
                continue;
            }
            if let Some(u) = resolve(&base, &r.url) {
                if seen.insert(u.clone()) {
                    out.push(Discovered {
                        url: u,
                        depth: depth + 1,
                        kind: r.kind,
                        from: url.clone(),
                    });
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_html_refs() {
        let h = br#"<html><head><link rel="stylesheet" href="/a.css"><link rel=preload href='p.js' as=script>
<script src="x.js"></script><style>body{background:url(bg.gif)} @import "i.css";</style>
<!-- <img src="commented.gif"> --></head><body background="b.gif">
<img src="one.jpg" srcset="one.jpg 1x, two.jpg 2x"><img srcset="three.png">
<a href="page.html?x=1&amp;y=2">x</a><iframe src="http://ads.example.com/f.html"></iframe>
<div style="background-image: url('s.png')"></div><script>var s = "<img src=no.gif>";</script></body>"#;
        let refs = html_refs(h);
        let urls: Vec<(&str, RefKind)> = refs.iter().map(|r| (r.url.as_str(), r.kind)).collect();
        assert_eq!(
            urls,
            vec![
                ("/a.css", RefKind::Stylesheet),
                ("p.js", RefKind::Preload),
                ("x.js", RefKind::Script),
                ("bg.gif", RefKind::CssUrl),
                ("i.css", RefKind::CssImport),
                ("b.gif", RefKind::Image),
                ("one.jpg", RefKind::Image),
                ("one.jpg", RefKind::Srcset),
                ("two.jpg", RefKind::Srcset),
                ("three.png", RefKind::Srcset),
                ("page.html?x=1&y=2", RefKind::Anchor),
                ("http://ads.example.com/f.html", RefKind::Frame),
                ("s.png", RefKind::CssUrl),
            ]
        );
        for r in &refs {
            if !r.url.contains('&') {
                assert_eq!(&h[r.span.clone()], r.url.as_bytes(), "{r:?}");
            }
        }
    }

    #[test]
    fn css_and_urls() {
        let c = b"/* url(no.gif) */ @import url(\"a.css\"); @import 'b.css'; .x { background: url( img/x.gif ) } .y{background:url(data:image/gif;base64,AAA)}";
        let r: Vec<String> = css_refs(c).into_iter().map(|r| r.url).collect();
        assert_eq!(r, vec!["a.css", "b.css", "img/x.gif"]);
        assert_eq!(
            resolve("http://a.com/x/y.html", "../img/z.gif#f").as_deref(),
            Some("http://a.com/img/z.gif")
        );
        assert_eq!(resolve("http://a.com/", "data:foo"), None);
        assert_eq!(
            resolve("http://a.com/", "//b.com/q").as_deref(),
            Some("http://b.com/q")
        );
        assert_eq!(
            relative_ref("http://a.com/css/main.css", "http://a.com/images/x.gif"),
            "../images/x.gif"
        );
        assert_eq!(relative_ref("http://a.com/", "http://a.com/x.gif"), "x.gif");
        assert_eq!(
            relative_ref("http://a.com/", "http://b.com/x.gif"),
            "http://b.com/x.gif"
        );
        let body = b"<img src=\"a.gif\">";
        let refs = html_refs(body);
        let out = rewrite(body, &[(refs[0].span.clone(), "http://b.com/a.gif".into())]);
        assert_eq!(out, b"<img src=\"http://b.com/a.gif\">");
    }
}
