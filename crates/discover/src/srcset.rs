//! `srcset` values (HTML "parse a srcset attribute", simplified): a comma-separated list of
//! image candidates, each a URL and optional descriptors (`2x`, `640w`).

use std::ops::Range;

/// One candidate: its URL, its descriptor text (trimmed, possibly empty), and where the URL
/// sits in the value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate<'a> {
    pub url: &'a str,
    pub descriptors: &'a str,
    pub span: Range<usize>,
}

fn is_ws(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\x0c' | '\r')
}

/// Splits a `srcset` into candidates. URLs may contain commas (`a,b.jpg 1x`) but not
/// whitespace; trailing commas end a URL (and its candidate); descriptors run to the next
/// comma outside parentheses.
pub fn parse(value: &str) -> Vec<Candidate<'_>> {
    let mut out = Vec::new();
    let mut pos = 0;
    let len = value.len();
    while pos < len {
        let rest = &value[pos..];
        pos += rest
            .find(|c: char| !is_ws(c) && c != ',')
            .unwrap_or(rest.len());
        if pos >= len {
            break;
        }
        let start = pos;
        let rest = &value[pos..];
        let raw_len = rest.find(is_ws).unwrap_or(rest.len());
        let url = rest[..raw_len].trim_end_matches(',');
        pos += raw_len;
        let span = start..start + url.len();
        if url.len() < raw_len {
            out.push(Candidate {
                url,
                descriptors: "",
                span,
            });
            continue;
        }
        let rest = &value[pos..];
        let mut depth = 0usize;
        let mut end = rest.len();
        for (i, c) in rest.char_indices() {
            match c {
                '(' => depth += 1,
                ')' => depth = depth.saturating_sub(1),
                ',' if depth == 0 => {
                    end = i;
                    break;
                }
                _ => {}
            }
        }
        let descriptors = rest[..end].trim_matches(is_ws);
        pos += end;
        if !url.is_empty() {
            out.push(Candidate {
                url,
                descriptors,
                span,
            });
        }
    }
    out
}

/// The candidate a browser with a large screen fetches: the greatest width descriptor, or
/// else the greatest density (`src` counts as `1x`; on a tie the first listed wins).
pub fn largest<'a>(srcset: &'a str, src: Option<&'a str>) -> Option<&'a str> {
    // (value, is a width, url)
    let mut best: Option<(f64, bool, &'a str)> = None;
    let mut consider = |value: f64, is_width: bool, url: &'a str| {
        let better = match best {
            None => true,
            Some((bv, bw, _)) => match (is_width, bw) {
                (true, false) => true,
                (false, true) => false,
                _ => value > bv,
            },
        };
        if better {
            best = Some((value, is_width, url));
        }
    };
    for c in parse(srcset) {
        let mut value = 1.0;
        let mut is_width = false;
        for d in c.descriptors.split_ascii_whitespace() {
            let Some((at, unit)) = d.char_indices().last() else {
                continue;
            };
            match (unit, d[..at].parse::<f64>()) {
                ('w', Ok(n)) if n.is_finite() => {
                    value = n;
                    is_width = true;
                }
                ('x', Ok(n)) if n.is_finite() => value = n,
                _ => {}
            }
        }
        consider(value, is_width, c.url);
    }
    if let Some(s) = src.filter(|s| !s.trim().is_empty()) {
        consider(1.0, false, s);
    }
    best.map(|(_, _, u)| u)
}

/// Rewrites each candidate URL with `map` (`None` keeps one as is). Returns `None` when
/// nothing changed, so the caller can leave the attribute byte-identical.
pub fn rewrite(value: &str, mut map: impl FnMut(&str) -> Option<String>) -> Option<String> {
    let mut changed = false;
    let parts: Vec<String> = parse(value)
        .iter()
        .map(|c| {
            let url = match map(c.url) {
                // A rewritten URL must still be one srcset token.
                Some(new)
                    if !new.is_empty()
                        && !new.contains(is_ws)
                        && !new.ends_with(',')
                        && !new.starts_with(',') =>
                {
                    changed = true;
                    new
                }
                _ => c.url.to_string(),
            };
            if c.descriptors.is_empty() {
                url
            } else {
                format!("{url} {}", c.descriptors)
            }
        })
        .collect();
    changed.then(|| parts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn urls(v: &str) -> Vec<(&str, &str)> {
        parse(v).iter().map(|c| (c.url, c.descriptors)).collect()
    }

    #[test]
    fn parses_candidates_with_spans() {
        let v = " a.jpg 1x,b.jpg  2x , c,d.jpg 640w, e.jpg, (f) , g.jpg (max-width: 3px, x) 3x";
        assert_eq!(
            urls(v),
            vec![
                ("a.jpg", "1x"),
                ("b.jpg", "2x"),
                ("c,d.jpg", "640w"),
                ("e.jpg", ""),
                ("(f)", ""),
                ("g.jpg", "(max-width: 3px, x) 3x"),
            ]
        );
        for c in parse(v) {
            assert_eq!(&v[c.span.clone()], c.url);
        }
        assert!(parse("").is_empty() && parse(" , ,").is_empty());
    }

    #[test]
    fn picks_what_a_large_screen_fetches() {
        assert_eq!(largest("a.jpg 1x, b.jpg 2x", None), Some("b.jpg"));
        assert_eq!(largest("a.jpg 2x", Some("s.jpg")), Some("a.jpg"));
        assert_eq!(
            largest("a.jpg 320w, b.jpg 640w, c.jpg 3x", None),
            Some("b.jpg")
        );
        assert_eq!(largest("a.jpg, b.jpg", Some("s.jpg")), Some("a.jpg"));
        assert_eq!(largest("", Some("s.jpg")), Some("s.jpg"));
        assert_eq!(largest("", Some(" ")), None);
        assert_eq!(
            largest("a.png 100w, b.png 50w", Some("c.png")),
            Some("a.png")
        );
        assert_eq!(largest("a,b.png 2x, c.png", None), Some("a,b.png"));
        assert_eq!(largest("a.png 2é, b.png 1x", None), Some("a.png"));
        assert_eq!(largest("  ,  ", None), None);
    }

    #[test]
    fn rewrites_only_when_something_changes() {
        assert_eq!(rewrite("a.jpg 1x, b.jpg 2x", |_| None), None);
        assert_eq!(
            rewrite("a.jpg 1x,b.jpg", |u| (u == "b.jpg")
                .then(|| "/p/b.jpg".into())),
            Some("a.jpg 1x, /p/b.jpg".into())
        );
        assert_eq!(rewrite("a.jpg", |_| Some("x y".into())), None);
    }

    proptest::proptest! {
        #[test]
        fn spans_hold_for_any_value(v in "[ a-z.,()0-9wx\t]{0,40}") {
            for c in parse(&v) {
                proptest::prop_assert_eq!(&v[c.span.clone()], c.url);
                proptest::prop_assert!(!c.url.is_empty());
            }
            let _ = largest(&v, None);
        }
    }
}
