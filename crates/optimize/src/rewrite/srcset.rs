//! `srcset` values (HTML "parse a srcset attribute", simplified): a comma-separated list of
//! image candidates, each a URL and optional descriptors (`2x`, `640w`).

/// One candidate: the URL and its descriptor text (trimmed, possibly empty).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Candidate<'a> {
    pub url: &'a str,
    pub descriptors: &'a str,
}

fn is_ws(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\x0c' | '\r')
}

/// Splits a `srcset` into candidates. URLs may contain commas (`a,b.jpg 1x`) but not
/// whitespace; trailing commas end a URL; descriptors run to the next comma outside parens.
pub(crate) fn parse(value: &str) -> Vec<Candidate<'_>> {
    let mut out = Vec::new();
    let mut pos = 0;
    let len = value.len();
    while pos < len {
        // Skip whitespace and separating commas.
        let rest = &value[pos..];
        let skip = rest
            .find(|c: char| !is_ws(c) && c != ',')
            .unwrap_or(rest.len());
        pos += skip;
        if pos >= len {
            break;
        }
        let rest = &value[pos..];
        let url_len = rest.find(is_ws).unwrap_or(rest.len());
        let raw_url = &rest[..url_len];
        let url = raw_url.trim_end_matches(',');
        pos += url_len;
        if url.len() < raw_url.len() {
            // "a.jpg," — the commas end the candidate; no descriptors.
            out.push(Candidate {
                url,
                descriptors: "",
            });
            continue;
        }
        let rest = &value[pos..];
        let mut depth = 0usize;
        let mut desc_end = rest.len();
        for (i, c) in rest.char_indices() {
            match c {
                '(' => depth += 1,
                ')' => depth = depth.saturating_sub(1),
                ',' if depth == 0 => {
                    desc_end = i;
                    break;
                }
                _ => {}
            }
        }
        let descriptors = rest[..desc_end].trim_matches(is_ws);
        pos += desc_end;
        if !url.is_empty() {
            out.push(Candidate { url, descriptors });
        }
    }
    out
}

/// Rewrites each candidate URL with `map` (which returns `None` to keep one as is). Returns
/// `None` when nothing changed, so the caller leaves the attribute byte-identical.
pub(crate) fn rewrite(value: &str, mut map: impl FnMut(&str) -> Option<String>) -> Option<String> {
    let candidates = parse(value);
    let mut changed = false;
    let parts: Vec<String> = candidates
        .iter()
        .map(|c| {
            let url = match map(c.url) {
                // A rewritten URL must still be one srcset token.
                Some(new)
                    if !new.contains(is_ws) && !new.ends_with(',') && !new.starts_with(',') =>
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
        parse(v)
            .into_iter()
            .map(|c| (c.url, c.descriptors))
            .collect()
    }

    #[test]
    fn parses_candidates() {
        assert_eq!(urls("a.jpg"), [("a.jpg", "")]);
        assert_eq!(
            urls("a.jpg 1x, b.jpg 2x"),
            [("a.jpg", "1x"), ("b.jpg", "2x")]
        );
        assert_eq!(
            urls("  a.jpg   640w ,b.jpg 1280w  "),
            [("a.jpg", "640w"), ("b.jpg", "1280w")]
        );
        // A comma inside a URL belongs to it; only trailing commas end it.
        assert_eq!(urls("a.jpg,b.jpg 2x"), [("a.jpg,b.jpg", "2x")]);
        assert_eq!(urls("a.jpg, b.jpg"), [("a.jpg", ""), ("b.jpg", "")]);
        assert_eq!(
            urls("a.jpg f(1,2) 2x, b.jpg"),
            [("a.jpg", "f(1,2) 2x"), ("b.jpg", "")]
        );
        assert_eq!(urls(" , ,"), []);
        assert_eq!(urls(""), []);
    }

    #[test]
    fn rewrite_keeps_descriptors_and_reports_no_change() {
        let up = |u: &str| Some(u.to_uppercase());
        assert_eq!(
            rewrite("a.jpg 1x, b.jpg 2x", up).as_deref(),
            Some("A.JPG 1x, B.JPG 2x")
        );
        assert_eq!(rewrite("a.jpg 1x", |_| None), None);
    }
}
