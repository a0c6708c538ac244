//! A simple tag/attribute scanner for HTML and CSS: finds the URLs a document references (with
//! their byte spans, so a document can be rewritten in place), resolves them, and computes
//! relative references. Works on bytes, so documents in any ASCII-compatible charset are fine.

use std::ops::Range;

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
    /// `<embed src>`, `<object data>`, `<audio|video|source src>`
    Embed,
    /// `<a href>`, `<area href>`: a link, not an embedded object
    Anchor,
    /// `<base href>`
    Base,
    /// any other `<link href>` (canonical, alternate, ...)
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

/// Decodes the few character references that appear in URLs.
pub fn decode_entities(s: &str) -> String {
    if !s.contains('&') {
        return s.to_string();
    }
    s.replace("&amp;", "&")
        .replace("&#38;", "&")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
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
                        value: decode_entities(&String::from_utf8_lossy(&html[vs..ve])),
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
                        value: decode_entities(&String::from_utf8_lossy(&html[vs..j])),
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
        if tag == "script" || tag == "style" || tag == "textarea" || tag == "title" {
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
    let mut push = |kind: RefKind, a: &Attr| {
        if let Some(r) = attr_ref(kind, a) {
            out.push(r);
        }
    };
    match tag {
        "img" | "source" => {
            if let Some(a) = get("src") {
                push(
                    if tag == "img" {
                        RefKind::Image
                    } else {
                        RefKind::Embed
                    },
                    a,
                );
            }
            if let Some(a) = get("srcset") {
                let exact = a.span.end - a.span.start == a.value.len();
                for (url, span) in srcset_candidates(&a.value, a.span.start, exact) {
                    push(
                        RefKind::Srcset,
                        &Attr {
                            name: String::new(),
                            value: url,
                            span,
                        },
                    );
                }
            }
        }
        "script" => {
            if let Some(a) = get("src") {
                push(RefKind::Script, a);
            }
        }
        "link" => {
            let rel = get("rel")
                .map(|a| a.value.to_ascii_lowercase())
                .unwrap_or_default();
            let rels: Vec<&str> = rel.split_whitespace().collect();
            let kind = if rels.contains(&"stylesheet") {
                RefKind::Stylesheet
            } else if rels.contains(&"preload") || rels.contains(&"modulepreload") {
                RefKind::Preload
            } else if rels.iter().any(|r| r.contains("icon")) {
                RefKind::Icon
            } else {
                RefKind::Other
            };
            if let Some(a) = get("href") {
                push(kind, a);
            }
        }
        "iframe" | "frame" => {
            if let Some(a) = get("src") {
                push(RefKind::Frame, a);
            }
        }
        "embed" | "audio" | "video" | "track" => {
            if let Some(a) = get("src") {
                push(RefKind::Embed, a);
            }
            if let Some(a) = get("poster") {
                push(RefKind::Image, a);
            }
        }
        "object" => {
            if let Some(a) = get("data") {
                push(RefKind::Embed, a);
            }
        }
        "input"
            if get("type")
                .map(|a| a.value.eq_ignore_ascii_case("image"))
                .unwrap_or(false) =>
        {
            if let Some(a) = get("src") {
                push(RefKind::Image, a);
            }
        }
        "a" | "area" => {
            if let Some(a) = get("href") {
                push(RefKind::Anchor, a);
            }
        }
        "base" => {
            if let Some(a) = get("href") {
                push(RefKind::Base, a);
            }
        }
        _ => {}
    }
    if matches!(tag, "body" | "table" | "td" | "th" | "tr") {
        if let Some(a) = get("background") {
            push(RefKind::Image, a);
        }
    }
}

fn attr_ref(kind: RefKind, a: &Attr) -> Option<Ref> {
    let v = a.value.trim();
    if v.is_empty() {
        return None;
    }
    // Keep the span on the trimmed value when the raw text is the value itself.
    let raw_len = a.span.end - a.span.start;
    let span = if a.value.len() == raw_len {
        let start = a.span.start + (a.value.len() - a.value.trim_start().len());
        start..start + v.len()
    } else {
        a.span.clone()
    };
    Some(Ref {
        kind,
        url: v.to_string(),
        span,
    })
}

/// The URLs of a `srcset` value with their spans (exact spans only when the raw attribute
/// text equals the decoded value; otherwise the whole attribute's span).
fn srcset_candidates(v: &str, base: usize, exact: bool) -> Vec<(String, Range<usize>)> {
    let b = v.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        while i < b.len() && (b[i].is_ascii_whitespace() || b[i] == b',') {
            i += 1;
        }
        let s = i;
        while i < b.len() && !b[i].is_ascii_whitespace() {
            i += 1;
        }
        let mut e = i;
        while e > s && b[e - 1] == b',' {
            e -= 1;
        }
        if e > s {
            let span = if exact {
                base + s..base + e
            } else {
                base..base + b.len()
            };
            out.push((v[s..e].to_string(), span));
        }
        if e < i {
            continue; // the URL ended with a comma: no descriptors
        }
        // Skip descriptors up to the next comma.
        while i < b.len() && b[i] != b',' {
            if b[i] == b'(' {
                while i < b.len() && b[i] != b')' {
                    i += 1;
                }
            }
            i += 1;
        }
    }
    out
}

/// Every `url(...)` and `@import` in a stylesheet, in order.
pub fn css_refs(css: &[u8]) -> Vec<Ref> {
    let mut out = Vec::new();
    let n = css.len();
    let mut i = 0;
    while i < n {
        if css[i..].starts_with(b"/*") {
            i = find(css, b"*/", i + 2).map(|p| p + 2).unwrap_or(n);
            continue;
        }
        if css[i] == b'@' && css.len() >= i + 7 && css[i + 1..i + 7].eq_ignore_ascii_case(b"import")
        {
            let mut j = i + 7;
            while j < n && css[j].is_ascii_whitespace() {
                j += 1;
            }
            if j < n && (css[j] == b'"' || css[j] == b'\'') {
                let q = css[j];
                let s = j + 1;
                let e = css[s..]
                    .iter()
                    .position(|&b| b == q)
                    .map(|p| p + s)
                    .unwrap_or(n);
                push_css(&mut out, RefKind::CssImport, css, s, e);
                i = e + 1;
                continue;
            }
            if j + 4 <= n && css[j..j + 4].eq_ignore_ascii_case(b"url(") {
                if let Some((s, e, next)) = url_arg(css, j + 4) {
                    push_css(&mut out, RefKind::CssImport, css, s, e);
                    i = next;
                    continue;
                }
            }
            i = j;
            continue;
        }
        if i + 4 <= n && css[i..i + 4].eq_ignore_ascii_case(b"url(") {
            if let Some((s, e, next)) = url_arg(css, i + 4) {
                push_css(&mut out, RefKind::CssUrl, css, s, e);
                i = next;
                continue;
            }
        }
        i += 1;
    }
    out
}

fn push_css(out: &mut Vec<Ref>, kind: RefKind, css: &[u8], s: usize, e: usize) {
    let v = String::from_utf8_lossy(&css[s..e]).trim().to_string();
    if !v.is_empty() && !v.starts_with("data:") {
        out.push(Ref {
            kind,
            url: v,
            span: s..e,
        });
    }
}

/// The argument of `url(` starting at `i`: (start, end, index after the closing paren).
fn url_arg(css: &[u8], mut i: usize) -> Option<(usize, usize, usize)> {
    let n = css.len();
    while i < n && css[i].is_ascii_whitespace() {
        i += 1;
    }
    if i < n && (css[i] == b'"' || css[i] == b'\'') {
        let q = css[i];
        let s = i + 1;
        let e = css[s..].iter().position(|&b| b == q).map(|p| p + s)?;
        let close = css[e..].iter().position(|&b| b == b')').map(|p| p + e)?;
        Some((s, e, close + 1))
    } else {
        let s = i;
        let e = css[s..].iter().position(|&b| b == b')').map(|p| p + s)?;
        let mut te = e;
        while te > s && css[te - 1].is_ascii_whitespace() {
            te -= 1;
        }
        Some((s, te, e + 1))
    }
}

/// Resolves `reference` against `base` (both URLs): an absolute http(s) URL without fragment,
/// or `None` (other schemes, `data:`, unparsable).
pub fn resolve(base: &str, reference: &str) -> Option<String> {
    let r = reference.trim();
    if r.is_empty() || r.starts_with('#') {
        return None;
    }
    let lower = r.to_ascii_lowercase();
    if lower.starts_with("data:")
        || lower.starts_with("javascript:")
        || lower.starts_with("mailto:")
        || lower.starts_with("about:")
        || lower.starts_with("blob:")
    {
        return None;
    }
    let base = url::Url::parse(base).ok()?;
    let mut u = base.join(r).ok()?;
    if u.scheme() != "http" && u.scheme() != "https" {
        return None;
    }
    u.set_fragment(None);
    Some(u.to_string())
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
