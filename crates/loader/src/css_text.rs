//! Lexical helpers for CSS text shared by the stylesheet scanner, selectors and media
//! queries. Pure.

/// Split a CSS list (selectors, media queries, font sources) at commas outside
/// parentheses, brackets and strings.
pub(crate) fn split_top_level_commas(s: &str) -> Vec<&str> {
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

pub(crate) fn starts_with_ci(hay: &[u8], at: usize, needle: &[u8]) -> bool {
    hay.len() >= at + needle.len() && hay[at..at + needle.len()].eq_ignore_ascii_case(needle)
}

pub(crate) fn is_ident_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b >= 0x80
}

/// Read a CSS string starting at the quote at `i`; returns (content, index after the string).
pub(crate) fn read_css_string(s: &str, i: usize) -> (String, usize) {
    let bytes = s.as_bytes();
    let quote = bytes[i];
    let mut out = String::new();
    let mut j = i + 1;
    let mut seg = j;
    while j < bytes.len() {
        match bytes[j] {
            b'\\' => {
                out.push_str(&s[seg..j]);
                if j + 1 < bytes.len() && bytes[j + 1] != b'\n' {
                    // Take the escaped character as is (hex escapes are rare in URLs).
                    let ch_len = s[j + 1..].chars().next().map(char::len_utf8).unwrap_or(1);
                    out.push_str(&s[j + 1..j + 1 + ch_len]);
                    j += 1 + ch_len;
                } else {
                    j += 2;
                }
                seg = j.min(bytes.len());
                continue;
            }
            b if b == quote => {
                out.push_str(&s[seg..j]);
                return (out, j + 1);
            }
            b'\n' => {
                out.push_str(&s[seg..j]);
                return (out, j);
            }
            _ => j += 1,
        }
    }
    out.push_str(&s[seg.min(bytes.len())..]);
    (out, bytes.len())
}

/// Read the argument of `url(` whose content starts at `i`; returns (url, index after `)`).
pub(crate) fn read_url_arg(s: &str, mut i: usize) -> (String, usize) {
    let bytes = s.as_bytes();
    while i < bytes.len() && bytes[i].is_ascii_whitespace() {
        i += 1;
    }
    if i < bytes.len() && (bytes[i] == b'"' || bytes[i] == b'\'') {
        let (v, mut j) = read_css_string(s, i);
        while j < bytes.len() && bytes[j] != b')' {
            j += 1;
        }
        return (v, (j + 1).min(bytes.len()));
    }
    let start = i;
    while i < bytes.len() && bytes[i] != b')' {
        i += 1;
    }
    let v = s[start..i].trim().replace('\\', "");
    (v, (i + 1).min(bytes.len()))
}
