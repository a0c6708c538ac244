//! Character references in attribute values, as far as URLs need them: `&amp;` `&lt;` `&gt;`
//! `&quot;` `&apos;` `&nbsp;` and numeric ones (`&#38;`, `&#x26;`). As in an HTML attribute
//! (HTML §13.2.5.73), a named reference without `;` followed by `=` or an alphanumeric stays
//! as written, so `?a=1&amp=2` is not touched; numeric ones may omit the `;`.

use std::borrow::Cow;

/// The value with its character references decoded (borrowed when there are none).
pub fn decode(s: &str) -> Cow<'_, str> {
    if !s.contains('&') {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(pos) = rest.find('&') {
        out.push_str(&rest[..pos]);
        rest = &rest[pos..];
        match reference(rest) {
            Some((c, len)) => {
                out.push(c);
                rest = &rest[len..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    Cow::Owned(out)
}

/// The character a reference at the start of `s` (which starts with `&`) stands for, and
/// how many bytes it takes.
fn reference(s: &str) -> Option<(char, usize)> {
    let b = s.as_bytes();
    if b.get(1) == Some(&b'#') {
        let hex = matches!(b.get(2), Some(b'x' | b'X'));
        let start = if hex { 3 } else { 2 };
        let end = start
            + b[start..]
                .iter()
                .take_while(|c| {
                    if hex {
                        c.is_ascii_hexdigit()
                    } else {
                        c.is_ascii_digit()
                    }
                })
                .count();
        if end == start || end - start > 8 {
            return None;
        }
        let code = u32::from_str_radix(&s[start..end], if hex { 16 } else { 10 }).ok()?;
        let c = char::from_u32(code).filter(|&c| c != '\0')?;
        let len = if b.get(end) == Some(&b';') {
            end + 1
        } else {
            end
        };
        return Some((c, len));
    }
    let end = 1 + b[1..]
        .iter()
        .take_while(|c| c.is_ascii_alphanumeric())
        .count();
    let c = match &s[1..end] {
        "amp" => '&',
        "lt" => '<',
        "gt" => '>',
        "quot" => '"',
        "apos" => '\'',
        "nbsp" => '\u{a0}',
        _ => return None,
    };
    match b.get(end) {
        Some(b';') => Some((c, end + 1)),
        Some(b'=') => None,
        _ => Some((c, end)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_what_urls_carry() {
        assert_eq!(decode("a.gif"), "a.gif");
        assert!(matches!(decode("a.gif"), Cow::Borrowed(_)));
        assert_eq!(decode("p?x=1&amp;y=2"), "p?x=1&y=2");
        assert_eq!(decode("&#38;&#x26;&#X26;&#38"), "&&&&");
        assert_eq!(decode("&quot;&apos;&lt;&gt;"), "\"'<>");
        assert_eq!(decode("a&amp b"), "a& b");
        // As in attributes: not a reference before `=`, nor a longer name.
        assert_eq!(decode("?a=1&amp=2"), "?a=1&amp=2");
        assert_eq!(decode("?a=1&copy=2&ampx"), "?a=1&copy=2&ampx");
        assert_eq!(decode("&#0;&#xFFFFFFFFF;&;&#;&"), "&#0;&#xFFFFFFFFF;&;&#;&");
    }

    proptest::proptest! {
        #[test]
        fn never_panics_and_keeps_plain_text(s in "\\PC*") {
            let d = decode(&s);
            if !s.contains('&') {
                proptest::prop_assert_eq!(d.as_ref(), s.as_str());
            }
        }
    }
}
