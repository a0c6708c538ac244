//! URL references in CSS: `url(...)` (quoted or not) and `@import "..."`. A small byte-level
//! scanner, not a CSS parser: it skips comments and strings so that text inside them is not
//! taken for a URL, and leaves anything it does not understand exactly as it was.

use url::Url;

/// Rewrites the `url(...)` and `@import "..."` references of a stylesheet, resolved against
/// `sheet_url`, to proxy URLs ([`super::to_proxy_url`]). Everything else, including invalid
/// UTF-8 and references the scanner cannot parse (escapes, bad strings), is copied as is.
/// Never panics.
pub fn rewrite_css(css: &[u8], sheet_url: &Url, proxy_authority: &str) -> Vec<u8> {
    scan(css, &mut |raw, _| {
        super::proxied(raw, sheet_url, proxy_authority)
    })
}

/// Makes the relative `url(...)` and `@import "..."` references of a stylesheet absolute,
/// resolved against `sheet_url`, so the sheet means the same when its text moves into a page
/// at another URL (inlining). Absolute references (any scheme) and fragment-only ones are
/// left alone, as is everything the scanner does not understand. Never panics.
pub fn absolutize_css(css: &[u8], sheet_url: &Url) -> Vec<u8> {
    scan(css, &mut |raw, _| {
        let v = raw.trim_matches(|c: char| c.is_ascii_whitespace() || c.is_ascii_control());
        if v.is_empty() || v.starts_with('#') || Url::parse(v).is_ok() {
            return None;
        }
        sheet_url.join(v).ok().map(String::from)
    })
}

/// The unresolved URL references of a stylesheet, in order.
pub fn css_urls(css: &[u8]) -> Vec<String> {
    let mut found = Vec::new();
    scan(css, &mut |raw, _| {
        found.push(raw.to_string());
        None
    });
    found
}

/// What a reference in a stylesheet is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum CssRef {
    /// `@import "..."` or `@import url(...)`: another stylesheet.
    Import,
    /// Any other `url(...)`: an image, a font, a cursor.
    Url,
}

/// The unresolved `url(...)` references of a stylesheet that are not `@import`s, in order.
pub(super) fn css_non_import_urls(css: &[u8]) -> Vec<String> {
    let mut found = Vec::new();
    scan(css, &mut |raw, kind| {
        if kind == CssRef::Url {
            found.push(raw.to_string());
        }
        None
    });
    found
}

/// The stylesheet with each non-import `url(...)` that `map` answers replaced by the answer.
pub(super) fn replace_non_import_urls(
    css: &[u8],
    map: &mut dyn FnMut(&str) -> Option<String>,
) -> Vec<u8> {
    scan(css, &mut |raw, kind| match kind {
        CssRef::Url => map(raw),
        CssRef::Import => None,
    })
}

fn is_ident_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b >= 0x80
}

fn is_css_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0c)
}

fn starts_with_ci(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.len() >= needle.len() && haystack[..needle.len()].eq_ignore_ascii_case(needle)
}

fn skip_ws(s: &[u8], mut i: usize) -> usize {
    while i < s.len() && is_css_ws(s[i]) {
        i += 1;
    }
    i
}

/// The end (exclusive, after the closing quote) of the string starting at `start`, or of the
/// unterminated string (at a newline or the end).
fn string_end(s: &[u8], start: usize) -> usize {
    let quote = s[start];
    let mut j = start + 1;
    while j < s.len() {
        match s[j] {
            b'\\' => j += 2,
            b'\n' => return j,
            b if b == quote => return j + 1,
            _ => j += 1,
        }
    }
    s.len()
}

/// A simple string at `start` (no escapes, no newline, terminated): its content range.
fn simple_string(s: &[u8], start: usize) -> Option<(usize, usize)> {
    let quote = s[start];
    let mut j = start + 1;
    while j < s.len() {
        match s[j] {
            b'\\' | b'\n' | b'\r' | 0x0c => return None,
            b if b == quote => return Some((start + 1, j)),
            _ => j += 1,
        }
    }
    None
}

/// A parsed `url(...)` token starting at `start` (which points at `u`).
struct UrlToken {
    /// Content range (between quotes, or the unquoted text trimmed).
    value: (usize, usize),
    /// The quote character, if quoted.
    quote: Option<u8>,
    /// Index just after the closing `)`.
    end: usize,
}

fn parse_url_token(s: &[u8], start: usize) -> Option<UrlToken> {
    let mut j = skip_ws(s, start + 4);
    let (value, quote) = if j < s.len() && (s[j] == b'"' || s[j] == b'\'') {
        let (a, b) = simple_string(s, j)?;
        j = b + 1;
        ((a, b), Some(s[a - 1]))
    } else {
        let a = j;
        while j < s.len() && s[j] != b')' {
            let b = s[j];
            if is_css_ws(b) {
                break;
            }
            if matches!(b, b'"' | b'\'' | b'(' | b'\\') || b < 0x20 || b == 0x7f {
                return None;
            }
            j += 1;
        }
        ((a, j), None)
    };
    j = skip_ws(s, j);
    if j < s.len() && s[j] == b')' {
        Some(UrlToken {
            value,
            quote,
            end: j + 1,
        })
    } else {
        None
    }
}

/// True when `new` can replace a URL in its context without changing the token structure.
fn fits(new: &str, quote: Option<u8>) -> bool {
    let bad_everywhere = |c: char| c == '\\' || c == '\n' || c == '\r' || c == '\x0c';
    match quote {
        Some(q) => !new.contains(|c: char| bad_everywhere(c) || c as u32 == u32::from(q)),
        None => !new.contains(|c: char| {
            bad_everywhere(c) || c.is_ascii_whitespace() || matches!(c, '"' | '\'' | '(' | ')')
        }),
    }
}

/// Walks the sheet, calling `map` on each URL reference; a `Some` answer replaces it.
fn scan(css: &[u8], map: &mut dyn FnMut(&str, CssRef) -> Option<String>) -> Vec<u8> {
    let mut out = Vec::with_capacity(css.len() + css.len() / 8);
    // Set when an `@import` is followed by `url(`, which the next step reads.
    let mut import_url = false;
    let mut i = 0;
    let n = css.len();
    while i < n {
        let b = css[i];
        if b == b'/' && css.get(i + 1) == Some(&b'*') {
            let end = css[i + 2..]
                .windows(2)
                .position(|w| w == b"*/")
                .map_or(n, |p| i + 2 + p + 2);
            out.extend_from_slice(&css[i..end]);
            i = end;
        } else if b == b'"' || b == b'\'' {
            let end = string_end(css, i).min(n);
            out.extend_from_slice(&css[i..end]);
            i = end;
        } else if b == b'\\' {
            // An escape: copy it and the escaped byte so `\"` does not open a string.
            let end = (i + 2).min(n);
            out.extend_from_slice(&css[i..end]);
            i = end;
        } else if (b == b'u' || b == b'U')
            && starts_with_ci(&css[i..], b"url(")
            && (i == 0 || !is_ident_byte(css[i - 1]))
        {
            let kind = if std::mem::take(&mut import_url) {
                CssRef::Import
            } else {
                CssRef::Url
            };
            match parse_url_token(css, i) {
                Some(tok) => {
                    let replaced = std::str::from_utf8(&css[tok.value.0..tok.value.1])
                        .ok()
                        .and_then(|raw| map(raw, kind))
                        .filter(|new| fits(new, tok.quote));
                    match replaced {
                        Some(new) => {
                            out.extend_from_slice(&css[i..tok.value.0]);
                            out.extend_from_slice(new.as_bytes());
                            out.extend_from_slice(&css[tok.value.1..tok.end]);
                        }
                        None => out.extend_from_slice(&css[i..tok.end]),
                    }
                    i = tok.end;
                }
                None => {
                    out.extend_from_slice(&css[i..i + 4]);
                    i += 4;
                }
            }
        } else if b == b'@'
            && starts_with_ci(&css[i..], b"@import")
            && !css.get(i + 7).is_some_and(|&c| is_ident_byte(c))
        {
            let j = skip_ws(css, i + 7);
            out.extend_from_slice(&css[i..j]);
            i = j;
            import_url = starts_with_ci(&css[j..], b"url(");
            if j < n && (css[j] == b'"' || css[j] == b'\'') {
                let end = string_end(css, j).min(n);
                let replaced = simple_string(css, j).and_then(|(a, z)| {
                    let raw = std::str::from_utf8(&css[a..z]).ok()?;
                    map(raw, CssRef::Import)
                        .filter(|new| fits(new, Some(css[j])))
                        .map(|new| (a, z, new))
                });
                match replaced {
                    Some((a, z, new)) => {
                        out.extend_from_slice(&css[j..a]);
                        out.extend_from_slice(new.as_bytes());
                        out.extend_from_slice(&css[z..end]);
                    }
                    None => out.extend_from_slice(&css[j..end]),
                }
                i = end;
            }
        } else {
            out.push(b);
            i += 1;
        }
    }
    out
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
            let out = scan(css, &mut |_, _| Some("REPLACED".to_string()));
            assert_eq!(out, css, "{}", String::from_utf8_lossy(css));
        }
    }
}
