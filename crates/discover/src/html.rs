//! Which attribute of which HTML element refers to what. One table for everyone who asks
//! "what does this page embed": the corpus importers (which rewrite every reference), the
//! lab's browser model (which fetches what a browser fetches), the proxy's URL rewriter,
//! inliner and prefetcher. Tokenizing stays with the caller (lol_html when streaming, a span
//! scanner when rewriting in place); elements and attributes are named in lower case.

/// What an attribute refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RefKind {
    /// An image: `<img src>`, `<input type=image src>`, `<video poster>`, and the
    /// `background` attribute of `body`, `table`, `thead`, `tbody`, `tfoot`, `tr`, `td`, `th`.
    Image,
    /// A list of image candidates (`srcset`, `imagesrcset`); a browser fetches one of them
    /// ([`crate::srcset::largest`]).
    ImageSet,
    /// `<script src>`.
    Script,
    /// `<link rel=stylesheet href>`.
    Stylesheet,
    /// `<link rel="alternate stylesheet" href>`: not applied, not fetched.
    AlternateStylesheet,
    /// `<link rel=preload href>` (what it is, its `as` attribute says).
    Preload,
    /// `<link rel=modulepreload href>`: a script.
    ModulePreload,
    /// `<link rel=icon href>` (and `apple-touch-icon`, `shortcut icon`).
    Icon,
    /// `<iframe src>`, `<frame src>`: a document, scanned in turn.
    Frame,
    /// `<audio src>`, `<video src>`, `<source src>`, `<track src>`: media, streamed.
    Media,
    /// `<embed src>`, `<object data>`: a plug-in's content.
    Object,
    /// `<base href>`: the base of the references after it (the first one counts).
    Base,
    /// A navigation, not fetched with the page: `<a href>`, `<area href>`, `<form action>`,
    /// `formaction`, and a `<meta http-equiv=refresh>` URL ([`refresh_url`]).
    Navigation,
    /// A reference nothing fetches: any other `<link href>` (canonical, alternate, …),
    /// `<img lowsrc>`.
    Other,
}

impl RefKind {
    /// Whether the lab's browser model (and the proxy's prefetch, which fetches ahead of it)
    /// requests it with the page: every embedded kind but media, which is streamed when
    /// played. Of an [`RefKind::ImageSet`], one candidate of an `<img>` (the `<img>`'s choice
    /// stands for a `<picture>`'s `<source>`s and a preload's `imagesrcset`).
    pub fn loads_with_page(self) -> bool {
        self.is_embedded() && self != RefKind::Media
    }

    /// Whether a browser fetches it as part of the page (media included: it is requested,
    /// even if only in part).
    pub fn is_embedded(self) -> bool {
        !matches!(
            self,
            RefKind::AlternateStylesheet | RefKind::Base | RefKind::Navigation | RefKind::Other
        )
    }
}

/// One reference of an element: what it is and which attribute holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ElementRef {
    pub kind: RefKind,
    pub attr: &'static str,
}

const BACKGROUND_ELEMENTS: [&str; 8] =
    ["body", "table", "thead", "tbody", "tfoot", "tr", "td", "th"];

/// Elements whose text is not markup (a `<` inside does not open a tag).
pub const RAW_TEXT_ELEMENTS: [&str; 6] = ["script", "style", "textarea", "title", "xmp", "noembed"];

/// The references of an element with tag `tag` (lower case), in attribute order of this
/// table; `attr(name)` gives an attribute's value as written (`None` when absent). Only
/// attributes that are present are listed; a `style` attribute is CSS ([`crate::css`]).
pub fn element_refs(tag: &str, attr: impl Fn(&str) -> Option<String>) -> Vec<ElementRef> {
    let mut out = Vec::new();
    let mut add = |kind: RefKind, name: &'static str| {
        if attr(name).is_some() {
            out.push(ElementRef { kind, attr: name });
        }
    };
    match tag {
        "img" => {
            add(RefKind::Image, "src");
            add(RefKind::ImageSet, "srcset");
            add(RefKind::Other, "lowsrc");
        }
        "source" => {
            add(RefKind::Media, "src");
            add(RefKind::ImageSet, "srcset");
        }
        "script" => add(RefKind::Script, "src"),
        "link" => {
            let rel = attr("rel").unwrap_or_default().to_ascii_lowercase();
            add(link_kind(&rel), "href");
            add(RefKind::ImageSet, "imagesrcset");
        }
        "iframe" | "frame" => add(RefKind::Frame, "src"),
        "audio" | "track" => add(RefKind::Media, "src"),
        "video" => {
            add(RefKind::Media, "src");
            add(RefKind::Image, "poster");
        }
        "embed" => add(RefKind::Object, "src"),
        "object" => add(RefKind::Object, "data"),
        "input" => {
            let image = attr("type").is_some_and(|t| t.trim().eq_ignore_ascii_case("image"));
            if image {
                add(RefKind::Image, "src");
            }
            add(RefKind::Navigation, "formaction");
        }
        "button" => add(RefKind::Navigation, "formaction"),
        "form" => add(RefKind::Navigation, "action"),
        "a" | "area" => add(RefKind::Navigation, "href"),
        "base" => add(RefKind::Base, "href"),
        "meta" => {
            let refresh =
                attr("http-equiv").is_some_and(|v| v.trim().eq_ignore_ascii_case("refresh"));
            if refresh {
                add(RefKind::Navigation, "content");
            }
        }
        _ => {}
    }
    if BACKGROUND_ELEMENTS.contains(&tag) {
        add(RefKind::Image, "background");
    }
    out
}

/// What a `<link href>` refers to, by its `rel` tokens (lower case).
fn link_kind(rel: &str) -> RefKind {
    let has = |t: &str| rel.split_ascii_whitespace().any(|r| r == t);
    if has("stylesheet") {
        if has("alternate") {
            RefKind::AlternateStylesheet
        } else {
            RefKind::Stylesheet
        }
    } else if has("preload") {
        RefKind::Preload
    } else if has("modulepreload") {
        RefKind::ModulePreload
    } else if rel.split_ascii_whitespace().any(|r| r.contains("icon")) {
        RefKind::Icon
    } else {
        RefKind::Other
    }
}

/// The byte range of the URL in a `<meta http-equiv=refresh>` `content` value
/// (`5; url=…`, `0;URL='…'`, `3, …`).
pub fn refresh_url(content: &str) -> Option<std::ops::Range<usize>> {
    let b = content.as_bytes();
    let ws = |c: u8| c.is_ascii_whitespace();
    let skip = |mut i: usize, f: &dyn Fn(u8) -> bool| {
        while i < b.len() && f(b[i]) {
            i += 1;
        }
        i
    };
    let mut i = skip(0, &ws);
    i = skip(i, &|c| c.is_ascii_digit() || c == b'.');
    i = skip(i, &ws);
    if i < b.len() && (b[i] == b';' || b[i] == b',') {
        i += 1;
    }
    i = skip(i, &ws);
    if b.len() >= i + 3 && b[i..i + 3].eq_ignore_ascii_case(b"url") {
        let j = skip(i + 3, &ws);
        if j < b.len() && b[j] == b'=' {
            i = skip(j + 1, &ws);
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
    (start < end).then_some(start..end)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refs(tag: &str, attrs: &[(&str, &str)]) -> Vec<(RefKind, &'static str)> {
        element_refs(tag, |n| {
            attrs
                .iter()
                .find(|(k, _)| *k == n)
                .map(|(_, v)| v.to_string())
        })
        .into_iter()
        .map(|r| (r.kind, r.attr))
        .collect()
    }

    #[test]
    fn the_table() {
        use RefKind::*;
        assert_eq!(
            refs("img", &[("srcset", "a 2x"), ("src", "a"), ("width", "3")]),
            vec![(Image, "src"), (ImageSet, "srcset")]
        );
        assert_eq!(
            refs("link", &[("rel", "Stylesheet"), ("href", "a.css")]),
            vec![(Stylesheet, "href")]
        );
        assert_eq!(
            refs(
                "link",
                &[("rel", "alternate stylesheet"), ("href", "a.css")]
            ),
            vec![(AlternateStylesheet, "href")]
        );
        assert_eq!(
            refs(
                "link",
                &[
                    ("rel", "preload"),
                    ("href", "a.jpg"),
                    ("imagesrcset", "a.jpg 1x")
                ]
            ),
            vec![(Preload, "href"), (ImageSet, "imagesrcset")]
        );
        assert_eq!(
            refs("link", &[("rel", "shortcut icon"), ("href", "f")]),
            vec![(Icon, "href")]
        );
        assert_eq!(
            refs("link", &[("rel", "canonical"), ("href", "f")]),
            vec![(Other, "href")]
        );
        assert_eq!(refs("input", &[("src", "a")]), vec![]);
        assert_eq!(
            refs("input", &[("type", " IMAGE"), ("src", "a")]),
            vec![(Image, "src")]
        );
        assert_eq!(
            refs("td", &[("background", "b.gif")]),
            vec![(Image, "background")]
        );
        assert_eq!(refs("div", &[("background", "b.gif")]), vec![]);
        assert_eq!(
            refs("video", &[("src", "v"), ("poster", "p")]),
            vec![(Media, "src"), (Image, "poster")]
        );
        assert_eq!(
            refs("meta", &[("http-equiv", "Refresh"), ("content", "0")]),
            vec![(Navigation, "content")]
        );
        assert!(Image.is_embedded() && Media.is_embedded() && !Navigation.is_embedded());
    }

    #[test]
    fn refresh_urls() {
        let u = |c: &str| refresh_url(c).map(|r| c[r].to_string());
        assert_eq!(u("5; url=/next.html").as_deref(), Some("/next.html"));
        assert_eq!(u("0;URL='a b.html'").as_deref(), Some("a b.html"));
        assert_eq!(u("3, http://x/ ").as_deref(), Some("http://x/"));
        assert_eq!(u("5"), None);
    }
}
