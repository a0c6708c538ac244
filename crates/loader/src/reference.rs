//! What a scan finds: a reference to an embedded object, its kind, when a browser requests
//! it, and the hints it weighs. Shared by the HTML and CSS scanners. Pure.

use std::sync::Arc;

use url::Url;

use crate::selectors::Complex;

/// What kind of resource a URL was discovered as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ResourceKind {
    /// The page itself (and the targets of its redirects).
    Document,
    /// An iframe's document (its HTML is scanned too).
    Iframe,
    Stylesheet,
    Script,
    Image,
    Font,
    Other,
}

impl ResourceKind {
    /// The HAR `_resourceType` (Chrome's names).
    pub fn har_type(self) -> &'static str {
        match self {
            ResourceKind::Document | ResourceKind::Iframe => "document",
            ResourceKind::Stylesheet => "stylesheet",
            ResourceKind::Script => "script",
            ResourceKind::Image => "image",
            ResourceKind::Font => "font",
            ResourceKind::Other => "other",
        }
    }

    /// Whether the response is scanned as HTML.
    pub fn is_html(self) -> bool {
        matches!(self, ResourceKind::Document | ResourceKind::Iframe)
    }
}

/// One embedded object found in a document or stylesheet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Discovered {
    pub url: Url,
    pub kind: ResourceKind,
    /// When a browser requests it ([`Need::Always`] for everything but what stylesheets
    /// and `<style>` elements refer to).
    pub need: Need,
    /// What the markup says beyond the kind that today's browser weighs in its priority.
    pub hint: Hint,
}

/// What a reference's markup says that Chromium weighs in its priority.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Hint {
    #[default]
    None,
    /// An `<img>` not declared small: without both `width` and `height`, or with an area
    /// over 10,000 px². Chromium gives the first five of a document medium priority.
    LargeImage,
    /// A `<script src>` that does not stop the parser (`async`, `defer`, `type=module`).
    AsyncScript,
}

/// When a reference found in a page or stylesheet is requested.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Need {
    /// As soon as the browser comes to it.
    Always,
    /// A style rule's `url()`: once an element matches one of the rule's selectors.
    Rule(Arc<[Complex]>),
    /// An `@font-face` source: once text is set in that face.
    FontFace(Arc<Face>),
    /// A stylesheet whose media do not apply: fetched (browsers fetch every stylesheet), but
    /// nothing its rules use is requested.
    Unused,
}

/// An `@font-face` rule's descriptors.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Face {
    /// Lower case, without quotes.
    pub family: Arc<str>,
    /// Its weight range (one weight: both ends equal).
    pub weight: (u16, u16),
    pub italic: bool,
    /// Its `unicode-range` covers Latin letters (or it has none).
    pub latin: bool,
}

pub use webpep_discover::resolve;

pub(crate) fn url_kind(url: &str, in_font_face: bool) -> ResourceKind {
    if in_font_face {
        return ResourceKind::Font;
    }
    let path = url
        .split(['?', '#'])
        .next()
        .unwrap_or("")
        .to_ascii_lowercase();
    if path.ends_with(".css") {
        ResourceKind::Stylesheet
    } else if [".woff", ".woff2", ".ttf", ".otf", ".eot"]
        .iter()
        .any(|e| path.ends_with(e))
    {
        ResourceKind::Font
    } else {
        ResourceKind::Image
    }
}
