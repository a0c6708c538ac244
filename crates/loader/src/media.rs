//! Media queries (`@media`, `<link media>`, `@import ... media`) evaluated against the
//! browser model's screen, so that a print stylesheet's fonts or a high-density display's
//! images are not requested, as no browser on that screen would. Pure: no I/O.
//!
//! What is not understood does not apply: an unknown media type or feature makes its query
//! false, as in browsers.

use webpep_discover::css::split_top_level_commas;

/// The screen the browser model lays pages out on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Viewport {
    /// CSS pixels.
    pub width: u32,
    pub height: u32,
    /// Device pixels per CSS pixel.
    pub dppx: f32,
}

impl Default for Viewport {
    /// A laptop screen of today: 1366 × 768 at one device pixel per CSS pixel.
    fn default() -> Viewport {
        Viewport {
            width: 1366,
            height: 768,
            dppx: 1.0,
        }
    }
}

/// Whether a media query list applies on `v` (empty: it does).
pub fn media_applies(list: &str, v: &Viewport) -> bool {
    let list = list.trim();
    if list.is_empty() {
        return true;
    }
    split_top_level_commas(list).iter().any(|q| query(q, v))
}

/// Tokens of a query: words and parenthesized groups (kept whole, without the parentheses).
enum Tok<'a> {
    Word(String),
    Group(&'a str),
}

fn tokens(s: &str) -> Option<Vec<Tok<'_>>> {
    let mut out = Vec::new();
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c == b'(' {
            let mut depth = 0usize;
            let start = i + 1;
            loop {
                match b.get(i)? {
                    b'(' => depth += 1,
                    b')' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
            out.push(Tok::Group(&s[start..i]));
            i += 1;
        } else {
            let start = i;
            while i < b.len() && !b[i].is_ascii_whitespace() && b[i] != b'(' {
                i += 1;
            }
            out.push(Tok::Word(s[start..i].to_ascii_lowercase()));
        }
    }
    Some(out)
}

/// One query: `[not|only] type [and condition]` or a condition.
fn query(q: &str, v: &Viewport) -> bool {
    let Some(toks) = tokens(q) else {
        return false;
    };
    let mut it = toks.into_iter().peekable();
    let mut negate = false;
    if let Some(Tok::Word(w)) = it.peek() {
        if w == "not" || w == "only" {
            negate = w == "not";
            it.next();
        }
    }
    let rest: Vec<Tok<'_>> = match it.peek() {
        Some(Tok::Word(w)) if w != "not" => {
            let ty = w.clone();
            it.next();
            let known = media_type(&ty);
            let rest: Vec<Tok<'_>> = it.collect();
            // `type and condition`: the condition without its leading `and`.
            let cond: Vec<Tok<'_>> = match rest.split_first() {
                None => Vec::new(),
                Some((Tok::Word(a), more)) if a == "and" && !more.is_empty() => {
                    more.iter().map(copy_tok).collect()
                }
                Some(_) => return false,
            };
            let ok = known && (cond.is_empty() || condition(&cond, v).unwrap_or(false));
            return ok != negate;
        }
        _ => it.collect(),
    };
    if rest.is_empty() {
        return false;
    }
    condition(&rest, v).unwrap_or(false) != negate
}

fn copy_tok<'a>(t: &Tok<'a>) -> Tok<'a> {
    match t {
        Tok::Word(w) => Tok::Word(w.clone()),
        Tok::Group(g) => Tok::Group(g),
    }
}

fn media_type(t: &str) -> bool {
    matches!(t, "all" | "screen")
}

/// A condition: `[not] (…)` terms joined by `and` or `or`. `None`: malformed.
fn condition(toks: &[Tok<'_>], v: &Viewport) -> Option<bool> {
    let mut result: Option<bool> = None;
    let mut op: Option<String> = None;
    let mut i = 0;
    while i < toks.len() {
        let mut negate = false;
        if let Tok::Word(w) = &toks[i] {
            if w == "not" {
                negate = true;
                i += 1;
            } else {
                return None;
            }
        }
        let Some(Tok::Group(g)) = toks.get(i) else {
            return None;
        };
        let term = in_parens(g, v) != negate;
        result = Some(match (result, op.as_deref()) {
            (None, _) => term,
            (Some(r), Some("and")) => r && term,
            (Some(r), Some("or")) => r || term,
            _ => return None,
        });
        i += 1;
        match toks.get(i) {
            None => break,
            Some(Tok::Word(w)) if w == "and" || w == "or" => {
                op = Some(w.clone());
                i += 1;
                if i == toks.len() {
                    return None;
                }
            }
            _ => return None,
        }
    }
    result
}

/// The inside of one parenthesized group: a nested condition or a feature.
fn in_parens(g: &str, v: &Viewport) -> bool {
    let t = g.trim();
    if t.starts_with('(') || t.to_ascii_lowercase().starts_with("not ") {
        return tokens(t)
            .and_then(|toks| condition(&toks, v))
            .unwrap_or(false);
    }
    feature(t, v).unwrap_or(false)
}

/// A value of a feature: a number in the feature's own unit (px, dppx, or plain).
fn value(s: &str) -> Option<f64> {
    let s = s.trim().to_ascii_lowercase();
    if let Some((a, b)) = s.split_once('/') {
        // A ratio.
        let (a, b): (f64, f64) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
        return (b != 0.0).then(|| a / b);
    }
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+'))
        .unwrap_or(s.len());
    let n: f64 = s[..end].parse().ok()?;
    let factor = match &s[end..] {
        "" | "px" | "dppx" | "x" => 1.0,
        "em" | "rem" => 16.0,
        "pt" => 4.0 / 3.0,
        "pc" => 16.0,
        "in" => 96.0,
        "cm" => 96.0 / 2.54,
        "mm" => 96.0 / 25.4,
        "q" => 96.0 / 101.6,
        "dpi" => 1.0 / 96.0,
        "dpcm" => 2.54 / 96.0,
        _ => return None,
    };
    Some(n * factor)
}

/// The screen's value of a range feature (by its name without `min-`/`max-`).
fn range_feature(name: &str, v: &Viewport) -> Option<f64> {
    let (w, h) = (f64::from(v.width), f64::from(v.height));
    Some(match name {
        "width" | "device-width" => w,
        "height" | "device-height" => h,
        "aspect-ratio" | "device-aspect-ratio" => w / h,
        "resolution" | "-webkit-device-pixel-ratio" | "-moz-device-pixel-ratio" => {
            f64::from(v.dppx)
        }
        "color" => 8.0,
        "color-index" | "monochrome" | "grid" => 0.0,
        _ => return None,
    })
}

/// A discrete feature's value on the model's screen.
fn discrete_feature(name: &str, v: &Viewport) -> Option<&'static str> {
    Some(match name {
        "orientation" if v.width >= v.height => "landscape",
        "orientation" => "portrait",
        "hover" | "any-hover" => "hover",
        "pointer" | "any-pointer" => "fine",
        "prefers-color-scheme" => "light",
        "prefers-reduced-motion"
        | "prefers-reduced-transparency"
        | "prefers-contrast"
        | "prefers-reduced-data" => "no-preference",
        "scripting" => "enabled",
        "update" => "fast",
        "display-mode" => "browser",
        "forced-colors" | "inverted-colors" => "none",
        "dynamic-range" | "video-dynamic-range" => "standard",
        "color-gamut" => "srgb",
        "overflow-block" => "scroll",
        "overflow-inline" => "scroll",
        _ => return None,
    })
}

fn compare(a: f64, op: &str, b: f64) -> Option<bool> {
    const E: f64 = 1e-9;
    Some(match op {
        "<" => a < b - E,
        "<=" => a <= b + E,
        ">" => a > b + E,
        ">=" => a >= b - E,
        "=" => (a - b).abs() <= E,
        _ => return None,
    })
}

/// One feature: `name`, `name: value`, or a range (`width >= 600px`, `400px < width < 900px`).
fn feature(t: &str, v: &Viewport) -> Option<bool> {
    let t = t.trim();
    if let Some((name, val)) = t.split_once(':') {
        let name = name.trim().to_ascii_lowercase();
        let val = val.trim();
        let (bound, base) = if let Some(b) = name.strip_prefix("min-") {
            (Some(">="), b.to_string())
        } else if let Some(b) = name.strip_prefix("max-") {
            (Some("<="), b.to_string())
        } else if let Some(b) = name.strip_prefix("-webkit-min-") {
            (Some(">="), format!("-webkit-{b}"))
        } else if let Some(b) = name.strip_prefix("-webkit-max-") {
            (Some("<="), format!("-webkit-{b}"))
        } else if let Some(b) = name.strip_prefix("min--moz-") {
            (Some(">="), format!("-moz-{b}"))
        } else if let Some(b) = name.strip_prefix("max--moz-") {
            (Some("<="), format!("-moz-{b}"))
        } else {
            (None, name.clone())
        };
        if let Some(have) = range_feature(&base, v) {
            let want = value(val)?;
            return compare(have, bound.unwrap_or("="), want);
        }
        if bound.is_some() {
            return None;
        }
        let have = discrete_feature(&base, v)?;
        return Some(val.eq_ignore_ascii_case(have));
    }
    // Range syntax: split at the comparison operators.
    let mut parts: Vec<String> = Vec::new();
    let mut ops: Vec<String> = Vec::new();
    let mut cur = String::new();
    let mut chars = t.chars().peekable();
    while let Some(c) = chars.next() {
        if matches!(c, '<' | '>' | '=') {
            let mut op = c.to_string();
            if c != '=' && chars.peek() == Some(&'=') {
                op.push('=');
                chars.next();
            }
            parts.push(std::mem::take(&mut cur));
            ops.push(op);
        } else {
            cur.push(c);
        }
    }
    parts.push(cur);
    let parts: Vec<String> = parts
        .iter()
        .map(|p| p.trim().to_ascii_lowercase())
        .collect();
    match (parts.len(), ops.len()) {
        (1, 0) => {
            let n = &parts[0];
            if let Some(have) = range_feature(n, v) {
                return Some(have != 0.0);
            }
            let have = discrete_feature(n, v)?;
            Some(have != "none" && have != "no-preference")
        }
        (2, 1) => {
            if let Some(have) = range_feature(&parts[0], v) {
                compare(have, &ops[0], value(&parts[1])?)
            } else {
                let have = range_feature(&parts[1], v)?;
                compare(value(&parts[0])?, &ops[0], have)
            }
        }
        (3, 2) => {
            let have = range_feature(&parts[1], v)?;
            Some(
                compare(value(&parts[0])?, &ops[0], have)?
                    && compare(have, &ops[1], value(&parts[2])?)?,
            )
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn on(list: &str) -> bool {
        media_applies(list, &Viewport::default())
    }

    #[test]
    fn media_types() {
        assert!(on(""));
        assert!(on("all"));
        assert!(on("screen"));
        assert!(on("Screen, print"));
        assert!(!on("print"));
        assert!(!on("handheld"));
        assert!(on("not print"));
        assert!(!on("not screen"));
        assert!(on("only screen"));
        assert!(!on("nonsense"));
        assert!(!on("screen junk"));
    }

    #[test]
    fn widths_and_densities() {
        assert!(on("screen and (min-width: 1024px)"));
        assert!(!on("screen and (min-width: 1400px)"));
        assert!(on("(max-width: 90em)"));
        assert!(!on("(max-width: 600px)"));
        assert!(!on(
            "only screen and (-webkit-min-device-pixel-ratio: 1.5), (min-resolution: 144dpi)"
        ));
        assert!(on("(min-resolution: 96dpi)"));
        assert!(!on("(min-resolution: 2dppx)"));
        assert!(on("(orientation: landscape)"));
        assert!(!on("(orientation: portrait)"));
        assert!(on("(min-aspect-ratio: 16/10)"));
        assert!(on("(prefers-color-scheme: light)"));
        assert!(!on("(prefers-color-scheme: dark)"));
        assert!(on("(hover)"));
        assert!(!on("(frobnicate: 3)"));
        assert!(!on("(min-width: 12parsecs)"));
    }

    #[test]
    fn range_syntax_and_logic() {
        assert!(on("(width >= 600px)"));
        assert!(!on("(width < 600px)"));
        assert!(on("(400px <= width <= 1400px)"));
        assert!(!on("(1400px < width)"));
        assert!(on("(min-width: 800px) and (max-width: 1400px)"));
        assert!(!on("(min-width: 800px) and (max-width: 1000px)"));
        assert!(on("(max-width: 600px) or (min-width: 1000px)"));
        assert!(on("not (max-width: 600px)"));
        assert!(on("screen and ((max-width: 600px) or (min-width: 1000px))"));
        assert!(!on("(min-width: 800px) and"));
        assert!(!on("(min-width: 800px"));
    }

    #[test]
    fn another_screen() {
        let v = Viewport {
            width: 1024,
            height: 768,
            dppx: 2.0,
        };
        assert!(media_applies("(min-resolution: 2dppx)", &v));
        assert!(media_applies("(-webkit-min-device-pixel-ratio: 1.5)", &v));
        assert!(!media_applies("(min-width: 1200px)", &v));
    }
}
