//! CSS text: the lexical pieces (strings, `url()`, comments, comma lists) and the references a
//! stylesheet makes (`url()` and `@import`) with their byte spans. A scanner, not a parser: it
//! skips comments, strings and escapes so that text inside them is not taken for a URL, tracks
//! blocks only to know which `url()`s sit in an `@font-face` rule, and works on bytes so that
//! a sheet in any ASCII-compatible charset can be rewritten without touching other bytes.

use std::borrow::Cow;
use std::ops::Range;

/// A byte that may continue a CSS identifier (non-ASCII counts).
pub fn is_ident_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b >= 0x80
}

/// CSS whitespace.
pub fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0c)
}

/// Whether `hay[at..]` starts with `needle`, ASCII case-insensitively.
pub fn starts_with_ci(hay: &[u8], at: usize, needle: &[u8]) -> bool {
    hay.len() >= at + needle.len() && hay[at..at + needle.len()].eq_ignore_ascii_case(needle)
}

fn skip_ws(s: &[u8], mut i: usize) -> usize {
    while i < s.len() && is_ws(s[i]) {
        i += 1;
    }
    i
}

/// The end of the comment starting at `i` (`/*`): after its `*/`, or the end of the text.
fn comment_end(s: &[u8], i: usize) -> usize {
    s[i + 2..]
        .windows(2)
        .position(|w| w == b"*/")
        .map_or(s.len(), |p| i + 2 + p + 2)
}

/// A string token: the content between the quotes, the index after it, and whether the raw
/// content is the value itself (no escapes, terminated).
struct StringToken {
    content: Range<usize>,
    end: usize,
    plain: bool,
}

/// The string starting at the quote at `start`. An unescaped newline ends it unterminated
/// (CSS's bad string), as does the end of the text.
fn string_token(s: &[u8], start: usize) -> StringToken {
    let quote = s[start];
    let mut plain = true;
    let mut j = start + 1;
    while j < s.len() {
        match s[j] {
            b'\\' => {
                plain = false;
                j += 2;
            }
            b'\n' | b'\r' | 0x0c => {
                return StringToken {
                    content: start + 1..j,
                    end: j,
                    plain: false,
                }
            }
            b if b == quote => {
                return StringToken {
                    content: start + 1..j,
                    end: j + 1,
                    plain,
                }
            }
            _ => j += 1,
        }
    }
    let end = s.len();
    StringToken {
        content: start + 1..j.min(end),
        end,
        plain: false,
    }
}

/// Text with its CSS escapes resolved: `\` and up to six hex digits (and one whitespace after
/// them) is that code point; `\` and a newline is nothing; `\` and any other character is
/// that character.
pub fn unescape(raw: &[u8]) -> String {
    if !raw.contains(&b'\\') {
        return String::from_utf8_lossy(raw).into_owned();
    }
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        if raw[i] != b'\\' {
            out.push(raw[i]);
            i += 1;
            continue;
        }
        i += 1;
        let hex = raw[i..]
            .iter()
            .take(6)
            .take_while(|b| b.is_ascii_hexdigit())
            .count();
        if hex > 0 {
            let digits = std::str::from_utf8(&raw[i..i + hex]).unwrap_or("0");
            let code = u32::from_str_radix(digits, 16).unwrap_or(0xfffd);
            let c = char::from_u32(code)
                .filter(|&c| c != '\0')
                .unwrap_or('\u{fffd}');
            out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
            i += hex;
            if i < raw.len() && is_ws(raw[i]) {
                i += 1;
            }
        } else if i < raw.len() && raw[i] == b'\n' {
            i += 1;
        } else if i < raw.len() {
            out.push(raw[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A `url(…)` argument: its content (between the quotes, or the unquoted text trimmed), the
/// quote, the index after the closing `)`, and whether the raw content can be replaced in
/// place (no escapes, nothing a URL token cannot hold, closed).
struct UrlToken {
    content: Range<usize>,
    quote: Option<u8>,
    end: usize,
    plain: bool,
}

/// The `url(` argument whose text starts at `open` (just after the parenthesis).
fn url_token(s: &[u8], open: usize) -> UrlToken {
    let n = s.len();
    let i = skip_ws(s, open);
    if i < n && (s[i] == b'"' || s[i] == b'\'') {
        let t = string_token(s, i);
        let j = skip_ws(s, t.end);
        if j < n && s[j] == b')' {
            return UrlToken {
                content: t.content,
                quote: Some(s[i]),
                end: j + 1,
                plain: t.plain,
            };
        }
        // Something after the string: skip to the parenthesis, and touch nothing.
        let end = s[j.min(n)..]
            .iter()
            .position(|&b| b == b')')
            .map_or(n, |p| j + p + 1);
        return UrlToken {
            content: t.content,
            quote: Some(s[i]),
            end,
            plain: false,
        };
    }
    // The closing parenthesis, past escaped ones (`url(a\).png)`).
    let mut j = i;
    let mut close = None;
    while j < n {
        match s[j] {
            b'\\' => j += 2,
            b')' => {
                close = Some(j);
                break;
            }
            _ => j += 1,
        }
    }
    let mut e = close.unwrap_or(n);
    while e > i && is_ws(s[e - 1]) {
        e -= 1;
    }
    let plain = close.is_some()
        && !s[i..e].iter().any(|&b| {
            matches!(b, b'"' | b'\'' | b'(' | b'\\') || b < 0x20 || b == 0x7f || is_ws(b)
        });
    UrlToken {
        content: i..e,
        quote: None,
        end: close.map_or(n, |c| c + 1),
        plain,
    }
}

/// Reads a CSS string starting at the quote at `i`: its value (escapes resolved) and the
/// index after it.
pub fn read_string(s: &str, i: usize) -> (String, usize) {
    let t = string_token(s.as_bytes(), i);
    (unescape(&s.as_bytes()[t.content]), t.end)
}

/// Reads the argument of `url(` whose text starts at `i`: its value (escapes resolved,
/// trimmed) and the index after the closing `)`.
pub fn read_url_arg(s: &str, i: usize) -> (String, usize) {
    let t = url_token(s.as_bytes(), i);
    (unescape(&s.as_bytes()[t.content]).trim().to_string(), t.end)
}

/// The text with `/* … */` comments replaced by a space (strings kept as they are).
pub fn strip_comments(s: &str) -> Cow<'_, str> {
    if !s.contains("/*") {
        return s.into();
    }
    let b = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    let (mut i, mut seg) = (0, 0);
    while i < b.len() {
        match b[i] {
            b'"' | b'\'' => i = string_token(b, i).end,
            b'\\' => i += 2,
            b'/' if b.get(i + 1) == Some(&b'*') => {
                out.push_str(&s[seg..i]);
                i = comment_end(b, i);
                seg = i;
                out.push(' ');
            }
            _ => i += 1,
        }
    }
    out.push_str(&s[seg.min(b.len())..]);
    out.into()
}

/// Splits a CSS list (selectors, media queries, font sources) at commas outside
/// parentheses, brackets and strings.
pub fn split_top_level_commas(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start, mut quote) = (0usize, 0usize, None::<char>);
    let mut chars = s.char_indices();
    while let Some((i, c)) = chars.next() {
        match (quote, c) {
            (Some(_), '\\') => {
                chars.next();
            }
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(c),
            (None, '(' | '[') => depth += 1,
            (None, ')' | ']') => depth = depth.saturating_sub(1),
            (None, ',') if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

/// What a reference in a stylesheet is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RefKind {
    /// `@import "…"` or `@import url(…)`: another stylesheet, fetched at once.
    Import,
    /// Any other `url(…)`: an image, a font, a cursor.
    Url,
}

/// A reference in a stylesheet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    pub kind: RefKind,
    /// The URL as written, escapes resolved, trimmed; never empty (`data:` URLs included).
    pub value: String,
    /// Where its raw text sits (between the quotes, or the unquoted text trimmed).
    pub span: Range<usize>,
    /// The quote around it, if any.
    pub quote: Option<u8>,
    /// The raw text is the value (no escapes, valid UTF-8, nothing trimmed, the token
    /// closed), so it can be replaced in place ([`replace`]).
    pub plain: bool,
    /// It is a source of an `@font-face` rule: a font.
    pub in_font_face: bool,
}

impl Reference {
    /// Whether it is a `data:` URL (nothing to fetch).
    pub fn is_data(&self) -> bool {
        crate::is_data_url(&self.value)
    }
}

/// Every `url(…)` and `@import` of a stylesheet (or of a `style` attribute), in order.
pub fn references(css: &[u8]) -> Vec<Reference> {
    let mut out = Vec::new();
    let n = css.len();
    let (mut i, mut depth) = (0usize, 0usize);
    let mut font_face_pending = false;
    let mut font_face_depth: Option<usize> = None;
    let mut push = |kind, content: Range<usize>, quote, plain, in_font_face| {
        let value = unescape(&css[content.clone()]).trim().to_string();
        if !value.is_empty() {
            // Plain only when the raw bytes are the value (valid UTF-8, nothing trimmed).
            let plain = plain && css[content.clone()] == *value.as_bytes();
            out.push(Reference {
                kind,
                value,
                span: content,
                quote,
                plain,
                in_font_face,
            });
        }
    };
    while i < n {
        let b = css[i];
        match b {
            b'/' if css.get(i + 1) == Some(&b'*') => i = comment_end(css, i),
            b'"' | b'\'' => i = string_token(css, i).end,
            b'\\' => i += 2,
            b'{' => {
                depth += 1;
                if std::mem::take(&mut font_face_pending) {
                    font_face_depth = Some(depth);
                }
                i += 1;
            }
            b'}' => {
                if font_face_depth == Some(depth) {
                    font_face_depth = None;
                }
                depth = depth.saturating_sub(1);
                i += 1;
            }
            b';' => {
                font_face_pending = false;
                i += 1;
            }
            b'@' if starts_with_ci(css, i, b"@import")
                && !css.get(i + 7).is_some_and(|&c| is_ident_byte(c)) =>
            {
                let j = skip_ws(css, i + 7);
                if j < n && (css[j] == b'"' || css[j] == b'\'') {
                    let t = string_token(css, j);
                    push(RefKind::Import, t.content, Some(css[j]), t.plain, false);
                    i = t.end;
                } else if starts_with_ci(css, j, b"url(") {
                    let t = url_token(css, j + 4);
                    push(RefKind::Import, t.content, t.quote, t.plain, false);
                    i = t.end;
                } else {
                    i = j.max(i + 1);
                }
            }
            b'@' if starts_with_ci(css, i, b"@font-face")
                && !css.get(i + 10).is_some_and(|&c| is_ident_byte(c)) =>
            {
                font_face_pending = true;
                i += 10;
            }
            b'u' | b'U'
                if starts_with_ci(css, i, b"url(") && (i == 0 || !is_ident_byte(css[i - 1])) =>
            {
                let t = url_token(css, i + 4);
                let in_font_face = font_face_depth.is_some();
                push(RefKind::Url, t.content, t.quote, t.plain, in_font_face);
                i = t.end;
            }
            _ => i += 1,
        }
    }
    out
}

/// True when `new` can replace a URL quoted with `quote` (or unquoted) without changing the
/// tokens around it.
fn fits(new: &str, quote: Option<u8>) -> bool {
    let bad_everywhere = |c: char| c == '\\' || c == '\n' || c == '\r' || c == '\x0c';
    match quote {
        Some(q) => !new.contains(|c: char| bad_everywhere(c) || c as u32 == u32::from(q)),
        None => !new.contains(|c: char| {
            bad_everywhere(c) || c.is_ascii_whitespace() || matches!(c, '"' | '\'' | '(' | ')')
        }),
    }
}

/// The stylesheet with each reference that `map` answers replaced by the answer. A reference
/// whose raw text is not its value (escapes, an unterminated token), or an answer that would
/// not fit its quoting, is left as it was; every other byte is copied.
pub fn replace(css: &[u8], mut map: impl FnMut(&Reference) -> Option<String>) -> Vec<u8> {
    let mut out = Vec::with_capacity(css.len() + css.len() / 8);
    let mut at = 0;
    for r in references(css) {
        if !r.plain {
            continue;
        }
        let Some(new) = map(&r).filter(|new| fits(new, r.quote)) else {
            continue;
        };
        out.extend_from_slice(&css[at..r.span.start]);
        out.extend_from_slice(new.as_bytes());
        at = r.span.end;
    }
    out.extend_from_slice(&css[at..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(css: &str) -> Vec<(RefKind, String, bool)> {
        references(css.as_bytes())
            .into_iter()
            .map(|r| (r.kind, r.value, r.in_font_face))
            .collect()
    }

    #[test]
    fn finds_urls_and_imports_with_spans() {
        let css = "/* url(no.gif) */ @import url(\"a.css\"); @import 'b.css' screen;\n\
                   .x { background: url( img/x.gif ) } .y{background:URL(data:image/gif;base64,AA)}\n\
                   .s::after{content:\"url(no2.gif)\"} .z{background-image:xurl(no3.gif)}\n\
                   @font-face{font-family:F;src:url(f.woff2) format('woff2')} .w{b:url('w.png')}";
        let refs = references(css.as_bytes());
        let got: Vec<(RefKind, &str, bool)> = refs
            .iter()
            .map(|r| (r.kind, r.value.as_str(), r.in_font_face))
            .collect();
        assert_eq!(
            got,
            vec![
                (RefKind::Import, "a.css", false),
                (RefKind::Import, "b.css", false),
                (RefKind::Url, "img/x.gif", false),
                (RefKind::Url, "data:image/gif;base64,AA", false),
                (RefKind::Url, "f.woff2", true),
                (RefKind::Url, "w.png", false),
            ]
        );
        for r in &refs {
            assert_eq!(&css.as_bytes()[r.span.clone()], r.value.as_bytes());
            assert!(r.plain);
        }
        assert!(refs[3].is_data());
    }

    #[test]
    fn escapes_are_values_not_rewritable_text() {
        let v = values(r#"a{b:url("x\"y.gif")} c{d:url(p\(1\).png)} e{f:url(\66 .gif)}"#);
        assert_eq!(v[0].1, "x\"y.gif");
        assert_eq!(v[1].1, "p(1).png");
        assert_eq!(v[2].1, "f.gif");
        let r = references(br#"a{b:url("x\"y.gif")}"#);
        assert!(!r[0].plain);
        // An escaped quote outside a string does not open one.
        assert_eq!(values(r#"a{content:\"} b{c:url(k.gif)}"#)[0].1, "k.gif");
    }

    #[test]
    fn font_face_ends_with_its_block() {
        let v = values(
            "@font-face{src:url(a.woff)}@media x{.a{b:url(i.png)}}@font-face;x{c:url(j.png)}",
        );
        assert_eq!(
            v.iter().map(|x| x.2).collect::<Vec<_>>(),
            vec![true, false, false]
        );
    }

    #[test]
    fn replaces_in_place_and_copies_the_rest() {
        let css = b"@import 'a.css'; p{b:url(x.gif)} q{b:url(\"y z.gif\")} \xe9 r{b:url(k\\).gif)}";
        let out = replace(css, |r| Some(format!("/p/{}", r.value)));
        assert_eq!(
            out,
            b"@import '/p/a.css'; p{b:url(/p/x.gif)} q{b:url(\"/p/y z.gif\")} \xe9 r{b:url(k\\).gif)}"
                .to_vec()
        );
        // An answer that does not fit an unquoted url() is not spliced in.
        assert_eq!(
            replace(b"p{b:url(x.gif)}", |_| Some("a b".into())),
            b"p{b:url(x.gif)}"
        );
    }

    #[test]
    fn lexical_helpers() {
        assert_eq!(read_string("'a\\'b' x", 0), ("a'b".to_string(), 6));
        assert_eq!(
            read_url_arg("url( 'q.png' ) y", 4),
            ("q.png".to_string(), 14)
        );
        assert_eq!(read_url_arg("url( q.png )", 4), ("q.png".to_string(), 12));
        assert_eq!(strip_comments("a/* x */b '/*'"), "a b '/*'");
        assert_eq!(
            split_top_level_commas("a, b(c, d), 'e,f', [g,h]"),
            vec!["a", " b(c, d)", " 'e,f'", " [g,h]"]
        );
    }

    proptest::proptest! {
        #[test]
        fn never_panics_and_spans_are_in_bounds(css in proptest::collection::vec(
            proptest::prop_oneof![
                proptest::strategy::Just(b"url(".to_vec()),
                proptest::strategy::Just(b"@import ".to_vec()),
                proptest::strategy::Just(b"@font-face{".to_vec()),
                proptest::strategy::Just(b"/*".to_vec()),
                proptest::collection::vec(proptest::num::u8::ANY, 0..4),
            ],
            0..16,
        )) {
            let css: Vec<u8> = css.concat();
            for r in references(&css) {
                proptest::prop_assert!(r.span.start <= r.span.end && r.span.end <= css.len());
            }
            let same = replace(&css, |_| None);
            proptest::prop_assert_eq!(same, css);
        }
    }
}
