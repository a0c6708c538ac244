//! What a page embeds: the one answer the corpus generator, the lab's browser model and the
//! edge proxy (URL rewriting, inlining, prefetch) share. Sans-IO and allocation-light; each
//! caller drives its own tokenizer over HTML (the loader and the proxy stream through
//! lol_html, the corpus importers need attribute spans) and asks this crate what an element,
//! a stylesheet or a `srcset` refers to.
//!
//! - [`html`]: which attribute of which element refers to what ([`html::element_refs`]), and
//!   the URL of a `<meta http-equiv=refresh>`.
//! - [`css`]: the lexical pieces of CSS (strings, `url()`, comments, comma lists) and every
//!   `url()` and `@import` of a stylesheet with its byte span and whether it sits in an
//!   `@font-face` rule ([`css::references`]), and in-place replacement ([`css::replace`]).
//! - [`srcset`]: candidates with spans, the one a browser picks, rewriting.
//! - [`entities`]: the character references that matter in URLs.
//! - [`resolve`]: a reference against its base, keeping what a browser fetches.
//!
//! CSS is scanned on bytes, not with `cssparser`: stylesheets of older pages are often not
//! UTF-8 (Latin-1), and the rewriters must copy every byte they do not change, which a
//! `&str` tokenizer cannot do without a lossy conversion.

pub mod css;
pub mod entities;
pub mod html;
pub mod srcset;

use url::Url;

/// Resolves `raw` (as written, character references already decoded) against `base`:
/// an http(s) URL without fragment, or `None` (empty, fragment-only, other schemes,
/// `data:`, unparsable).
pub fn resolve(base: &Url, raw: &str) -> Option<Url> {
    let raw = raw.trim_matches(|c: char| c.is_ascii_whitespace());
    if raw.is_empty() || raw.starts_with('#') {
        return None;
    }
    let mut url = base.join(raw).ok()?;
    if url.scheme() != "http" && url.scheme() != "https" {
        return None;
    }
    url.set_fragment(None);
    Some(url)
}

/// Whether a reference is a `data:` URL (nothing to fetch).
pub fn is_data_url(raw: &str) -> bool {
    raw.trim_start()
        .get(..5)
        .is_some_and(|p| p.eq_ignore_ascii_case("data:"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_what_a_browser_fetches() {
        let base = Url::parse("http://a.com/x/y.html").unwrap();
        let r = |s: &str| resolve(&base, s).map(String::from);
        assert_eq!(
            r("../img/z.gif#f").as_deref(),
            Some("http://a.com/img/z.gif")
        );
        assert_eq!(r("//b.com/q").as_deref(), Some("http://b.com/q"));
        assert_eq!(r(" https://c.com/ ").as_deref(), Some("https://c.com/"));
        for none in [
            "",
            "#top",
            "data:image/gif;base64,AA",
            "javascript:void(0)",
            "mailto:x@y",
        ] {
            assert_eq!(r(none), None, "{none}");
        }
        assert!(is_data_url(" DATA:x"));
        assert!(!is_data_url("dat"));
    }
}
