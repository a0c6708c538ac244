//! URL references in CSS (`url(...)`, quoted or not, and `@import`), as the proxy rewrites and
//! inlines them. Finding them is webpep-discover's ([`webpep_discover::css`]): comments,
//! strings and escapes are skipped, and anything the scanner does not understand, including
//! invalid UTF-8, is copied as it was.

use url::Url;
use webpep_discover::css::{self as references, RefKind};

/// Rewrites the `url(...)` and `@import "..."` references of a stylesheet, resolved against
/// `sheet_url`, to proxy URLs ([`super::to_proxy_url`]). Everything else, including invalid
/// UTF-8 and references that cannot be replaced in place (escapes, bad strings), is copied
/// as is. Never panics.
pub fn rewrite_css(css: &[u8], sheet_url: &Url, proxy_authority: &str) -> Vec<u8> {
    references::replace(css, |r| {
        super::proxied(&r.value, sheet_url, proxy_authority)
    })
}

/// Makes the relative `url(...)` and `@import "..."` references of a stylesheet absolute,
/// resolved against `sheet_url`, so the sheet means the same when its text moves into a page
/// at another URL (inlining). Absolute references (any scheme) and fragment-only ones are
/// left alone, as is everything the scanner does not understand. Never panics.
pub fn absolutize_css(css: &[u8], sheet_url: &Url) -> Vec<u8> {
    references::replace(css, |r| {
        let v = r.value.as_str();
        if v.starts_with('#') || Url::parse(v).is_ok() {
            return None;
        }
        sheet_url.join(v).ok().map(String::from)
    })
}

/// The unresolved URL references of a stylesheet, in order.
pub fn css_urls(css: &[u8]) -> Vec<String> {
    references::references(css)
        .into_iter()
        .map(|r| r.value)
        .collect()
}

/// The unresolved `url(...)` references of a stylesheet that are not `@import`s, in order.
pub(super) fn css_non_import_urls(css: &[u8]) -> Vec<String> {
    references::references(css)
        .into_iter()
        .filter(|r| r.kind == RefKind::Url)
        .map(|r| r.value)
        .collect()
}

/// The stylesheet with each non-import `url(...)` that `map` answers replaced by the answer.
pub(super) fn replace_non_import_urls(
    css: &[u8],
    map: &mut dyn FnMut(&str) -> Option<String>,
) -> Vec<u8> {
    references::replace(css, |r| match r.kind {
        RefKind::Url => map(&r.value),
        RefKind::Import => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_references_but_not_in_comments_or_strings() {
        let css = br#"/* url(no.gif) */ a { background: url(a.gif) } b { content: "url(no2.gif)"; }
            @import "i.css"; @import url('j.css') screen; c{background:URL( "k.png" )} myurl(no3)"#;
        assert_eq!(css_urls(css), ["a.gif", "i.css", "j.css", "k.png"]);
        assert_eq!(css_non_import_urls(css), ["a.gif", "k.png"]);
        let out = replace_non_import_urls(css, &mut |raw| Some(format!("{raw}.x")));
        assert_eq!(
            css_urls(&out),
            ["a.gif.x", "i.css", "j.css", "k.png.x"],
            "imports are kept"
        );
        // `@import` without a URL after it does not make the next url() an import.
        assert_eq!(css_non_import_urls(b"@import; a{b:url(c.gif)}"), ["c.gif"]);
    }

    #[test]
    fn absolutize_resolves_against_the_sheet() {
        let sheet = Url::parse("http://s.a.com/css/main.css").unwrap();
        let css = br#"a{background:url(../img/a.gif)} @import "sub.css"; b{background:url('http://x.com/b.png')} c{background:url(#f)} d{background:url(data:image/gif;base64,R0)}"#;
        let out = String::from_utf8(absolutize_css(css, &sheet)).unwrap();
        assert_eq!(
            out,
            r#"a{background:url(http://s.a.com/img/a.gif)} @import "http://s.a.com/css/sub.css"; b{background:url('http://x.com/b.png')} c{background:url(#f)} d{background:url(data:image/gif;base64,R0)}"#
        );
    }

    #[test]
    fn odd_syntax_is_copied() {
        for css in [
            &b"a{background:url(a b.gif)}"[..],
            b"a{background:url(\"unterminated)}",
            b"url(",
            b"@import",
            b"@import \"x",
            b"/* open",
            b"a{b:url(x\\).gif)}",
            b"\xff\xfeurl(\xff.gif)",
        ] {
            let out = references::replace(css, |_| Some("REPLACED".to_string()));
            assert_eq!(out, css, "{}", String::from_utf8_lossy(css));
        }
    }
}
