//! A stylesheet as a browser's layout uses it: which of its `url()`s are requested, and when.
//! A rule's images once some element matches the rule ([`crate::selectors`]); an
//! `@font-face` source once a matched rule sets text in that family, and then only the face
//! (weight, style) the text needs, in the first format the browser reads, if it covers Latin
//! text; nothing under media that do not apply ([`crate::media`]); `@import`s always (a
//! browser fetches every stylesheet, even one for print). Pure: no I/O.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use url::Url;

use crate::media::{media_applies, Viewport};
use crate::reference::{resolve, url_kind, Discovered, Hint, ResourceKind};
pub use crate::reference::{Face, Need};
use crate::selectors::{parse_selector_list, Complex, ElementIndex};
use webpep_discover::css::{
    read_string as read_css_string, read_url_arg, split_top_level_commas, starts_with_ci,
    strip_comments,
};

/// A rule that sets how text looks: its family names (lower case), weight and style.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FontUse {
    /// [`Need::Always`] (a `style` attribute) or [`Need::Rule`].
    pub need: Need,
    pub families: Vec<Arc<str>>,
    pub weight: Option<u16>,
    pub italic: bool,
}

/// What a stylesheet refers to: references (with when each is needed) and how it sets text.
#[derive(Debug, Default)]
pub struct SheetRefs {
    pub refs: Vec<Discovered>,
    pub font_uses: Vec<FontUse>,
    /// What the sheet refers to that a page can never use: `url()`s of rules no element can
    /// match or under media that do not apply, font faces that do not apply or leave out
    /// Latin letters (reported, never requested).
    pub unused: Vec<(Url, ResourceKind)>,
}

enum Ctx {
    /// The top level or a group (`@media`, `@supports`, `@layer`, …).
    Group {
        applies: bool,
    },
    /// A style rule: `None` when nothing inside can be used (no selector can match, or the
    /// media do not apply).
    Rule {
        need: Option<Need>,
    },
    FontFace(FaceBuilder),
    Keyframes {
        applies: bool,
    },
    /// A block whose `url()`s are never requested at load (`@page`, unknown at-rules).
    Skip,
}

#[derive(Default)]
struct FaceBuilder {
    applies: bool,
    family: Option<Arc<str>>,
    weight: Option<(u16, u16)>,
    italic: bool,
    latin: Option<bool>,
    src: Option<String>,
}

/// The `url()` arguments in a declaration's value, in order.
fn urls_in(value: &str) -> Vec<String> {
    webpep_discover::css::references(value.as_bytes())
        .into_iter()
        .filter(|r| r.kind == webpep_discover::css::RefKind::Url)
        .map(|r| r.value)
        .collect()
}

/// A family name as matched: unquoted, lower case, inner spaces collapsed.
fn family_name(s: &str) -> Option<Arc<str>> {
    let t = s.trim();
    let t = t
        .strip_prefix('"')
        .and_then(|x| x.strip_suffix('"'))
        .or_else(|| t.strip_prefix('\'').and_then(|x| x.strip_suffix('\'')))
        .unwrap_or(t);
    let name = t
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_ascii_lowercase();
    (!name.is_empty() && !name.starts_with("var(")).then(|| name.into())
}

fn families_of(value: &str) -> Vec<Arc<str>> {
    value.split(',').filter_map(family_name).collect()
}

fn without_important(v: &str) -> &str {
    let t = v.trim();
    match t.to_ascii_lowercase().rfind("!important") {
        Some(p) => t[..p].trim_end(),
        None => t,
    }
}

/// How a declaration sets text: its family names, weight and style, when it is a
/// `font-family`, `font`, `font-weight` or `font-style` that says anything.
fn font_declaration(prop: &str, value: &str) -> Option<(Vec<Arc<str>>, Option<u16>, bool)> {
    let value = without_important(value);
    let (families, weight, italic) = match prop.trim().to_ascii_lowercase().as_str() {
        "font-family" => (families_of(value), None, false),
        "font" => font_shorthand(value),
        "font-weight" => (Vec::new(), weight_of(value), false),
        "font-style" => (Vec::new(), None, is_italic(value)),
        _ => return None,
    };
    (!families.is_empty() || weight.is_some() || italic).then_some((families, weight, italic))
}

/// A `font-weight` keyword or number.
fn weight_of(token: &str) -> Option<u16> {
    match token.trim().to_ascii_lowercase().as_str() {
        "normal" => Some(400),
        "bold" | "bolder" => Some(700),
        "lighter" => Some(300),
        n => n
            .parse::<f32>()
            .ok()
            .filter(|w| (1.0..=1000.0).contains(w))
            .map(|w| w as u16),
    }
}

fn is_italic(token: &str) -> bool {
    let t = token.trim().to_ascii_lowercase();
    t.starts_with("italic") || t.starts_with("oblique")
}

/// The `font` shorthand: `[style] [variant] [weight] size[/line-height] family, …`.
fn font_shorthand(value: &str) -> (Vec<Arc<str>>, Option<u16>, bool) {
    let (first, rest) = match value.split_once(',') {
        Some((a, b)) => (a, Some(b)),
        None => (value, None),
    };
    let tokens: Vec<&str> = first.split_whitespace().collect();
    const SIZES: [&str; 9] = [
        "xx-small", "x-small", "small", "medium", "large", "x-large", "xx-large", "smaller",
        "larger",
    ];
    let is_size = |t: &str| {
        let t = t.split('/').next().unwrap_or("").to_ascii_lowercase();
        SIZES.contains(&t.as_str())
            || t.starts_with(|c: char| c.is_ascii_digit() || c == '.')
                && t.ends_with(|c: char| c.is_ascii_alphabetic() || c == '%')
    };
    let Some(at) = tokens.iter().position(|t| is_size(t)) else {
        return (Vec::new(), None, false);
    };
    let (mut weight, mut italic) = (None, false);
    for t in &tokens[..at] {
        if is_italic(t) {
            italic = true;
        } else if let Some(w) = weight_of(t) {
            weight = Some(w);
        }
    }
    let mut after = at + 1;
    if tokens.get(after).is_some_and(|t| t.starts_with('/')) {
        after += 1;
    }
    let mut fam = tokens[after.min(tokens.len())..].join(" ");
    if let Some(r) = rest {
        fam.push(',');
        fam.push_str(r);
    }
    (families_of(&fam), weight, italic)
}

/// Whether a `unicode-range` list covers the letter `a`.
fn covers_latin(ranges: &str) -> bool {
    const A: u32 = 0x61;
    ranges.split(',').any(|r| {
        let r = r.trim().to_ascii_lowercase();
        let Some(r) = r.strip_prefix("u+") else {
            return false;
        };
        let (lo, hi) = match r.split_once('-') {
            Some((a, b)) => (a.to_string(), b.to_string()),
            None if r.contains('?') => (r.replace('?', "0"), r.replace('?', "f")),
            None => (r.to_string(), r.to_string()),
        };
        match (u32::from_str_radix(&lo, 16), u32::from_str_radix(&hi, 16)) {
            (Ok(lo), Ok(hi)) => lo <= A && A <= hi,
            _ => false,
        }
    })
}

/// The `src` entry a browser of today loads: the first that is a `url()` in a format it reads
/// (WOFF2, WOFF, TrueType, OpenType; not EOT or SVG fonts); `local()` fonts are not installed.
fn chosen_src(value: &str) -> Option<String> {
    for entry in split_top_level_commas(value) {
        let e = entry.trim();
        if starts_with_ci(e.as_bytes(), 0, b"local(") {
            continue;
        }
        let Some(raw) = urls_in(e).into_iter().next() else {
            continue;
        };
        let lower = e.to_ascii_lowercase();
        let readable = match lower.find("format(") {
            Some(p) => {
                // `format("woff2")`, `format(woff2)`, `format("woff2-variations")`.
                let arg = lower[p + 7..]
                    .trim_start()
                    .trim_start_matches(['"', '\''])
                    .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                    .next()
                    .unwrap_or("")
                    .trim_end_matches("-variations");
                ["woff2", "woff", "truetype", "opentype", "collection"].contains(&arg)
            }
            None => {
                let path = raw
                    .split(['?', '#'])
                    .next()
                    .unwrap_or("")
                    .to_ascii_lowercase();
                !path.ends_with(".eot") && !path.ends_with(".svg")
            }
        };
        if readable {
            return Some(raw);
        }
    }
    None
}

/// Every selector of `inner` (a rule nested in one with `outer`) must also meet `outer`.
fn nested(outer: &[Complex], inner: &str) -> Vec<Complex> {
    let inner = parse_selector_list(&inner.replace('&', " "));
    let mut out = Vec::new();
    for o in outer.iter().take(8) {
        for i in inner.iter().take(8) {
            let mut c = o.clone();
            c.extend(i.iter().cloned());
            out.push(c);
        }
    }
    out
}

struct Scan<'a> {
    base: &'a Url,
    viewport: &'a Viewport,
    out: SheetRefs,
}

impl Scan<'_> {
    /// A reference the page can never use: kept only to be reported.
    fn push_unused(&mut self, raw: &str, kind: ResourceKind) {
        if webpep_discover::is_data_url(raw) {
            return;
        }
        if let Some(url) = resolve(self.base, raw) {
            self.out.unused.push((url, kind));
        }
    }

    fn push(&mut self, raw: &str, kind: ResourceKind, need: Need) {
        if webpep_discover::is_data_url(raw) {
            return;
        }
        if let Some(url) = resolve(self.base, raw) {
            self.out.refs.push(Discovered {
                url,
                kind,
                need,
                hint: Hint::None,
            });
        }
    }

    /// A block opens after `prelude` inside `parent`.
    fn open(&self, prelude: &str, parent: Option<&Ctx>) -> Ctx {
        let p = prelude.trim();
        let at = p.strip_prefix('@').map(|r| {
            let end = r
                .find(|c: char| c.is_whitespace() || c == '(')
                .unwrap_or(r.len());
            (r[..end].to_ascii_lowercase(), &r[end..])
        });
        match parent {
            None | Some(Ctx::Skip) | Some(Ctx::FontFace(_)) => Ctx::Skip,
            Some(Ctx::Keyframes { applies }) => Ctx::Rule {
                need: applies.then_some(Need::Always),
            },
            Some(Ctx::Rule { need }) => match at {
                Some((name, rest)) if name == "media" => Ctx::Rule {
                    need: need.clone().filter(|_| media_applies(rest, self.viewport)),
                },
                Some(_) => Ctx::Rule { need: need.clone() },
                None => Ctx::Rule {
                    need: match need {
                        Some(Need::Rule(outer)) => {
                            let list = nested(outer, p);
                            (!list.is_empty()).then(|| Need::Rule(list.into()))
                        }
                        other => other.clone(),
                    },
                },
            },
            Some(Ctx::Group { applies }) => {
                let applies = *applies;
                match at {
                    Some((name, rest)) => match name.as_str() {
                        "media" => Ctx::Group {
                            applies: applies && media_applies(rest, self.viewport),
                        },
                        "supports" | "layer" | "container" | "document" | "-moz-document"
                        | "scope" | "starting-style" => Ctx::Group { applies },
                        "font-face" => Ctx::FontFace(FaceBuilder {
                            applies,
                            ..FaceBuilder::default()
                        }),
                        n if n.ends_with("keyframes") => Ctx::Keyframes { applies },
                        _ => Ctx::Skip,
                    },
                    None => {
                        let list = parse_selector_list(p);
                        Ctx::Rule {
                            need: (applies && !list.is_empty()).then(|| Need::Rule(list.into())),
                        }
                    }
                }
            }
        }
    }

    /// A declaration or statement ends inside `ctx`.
    fn statement(&mut self, ctx: Option<&mut Ctx>, text: &str) {
        let text = strip_comments(text);
        let t = text.trim();
        if t.is_empty() {
            return;
        }
        match ctx {
            Some(Ctx::Group { applies }) if starts_with_ci(t.as_bytes(), 0, b"@import") => {
                let applies = *applies;
                self.import(&t[7..], applies);
            }
            Some(Ctx::Rule { need: Some(need) }) => {
                let need = need.clone();
                self.declaration(t, need);
            }
            Some(Ctx::Rule { need: None }) => {
                if let Some((_, value)) = t.split_once(':') {
                    for raw in urls_in(value) {
                        let kind = url_kind(&raw, false);
                        self.push_unused(&raw, kind);
                    }
                }
            }
            Some(Ctx::FontFace(f)) => {
                let Some((prop, value)) = t.split_once(':') else {
                    return;
                };
                let value = without_important(value);
                match prop.trim().to_ascii_lowercase().as_str() {
                    "font-family" => f.family = family_name(value),
                    "font-weight" => {
                        let ws: Vec<u16> = value.split_whitespace().filter_map(weight_of).collect();
                        f.weight = match ws.as_slice() {
                            [w] => Some((*w, *w)),
                            [a, b] => Some(((*a).min(*b), (*a).max(*b))),
                            _ => f.weight,
                        };
                    }
                    "font-style" => f.italic = is_italic(value),
                    "unicode-range" => f.latin = Some(covers_latin(value)),
                    "src" => f.src = chosen_src(value),
                    _ => {}
                }
            }
            _ => {}
        }
    }

    fn import(&mut self, rest: &str, applies: bool) {
        let r = rest.trim_start();
        let (raw, after) = if r.starts_with(['"', '\'']) {
            let (v, j) = read_css_string(r, 0);
            (v, &r[j.min(r.len())..])
        } else if starts_with_ci(r.as_bytes(), 0, b"url(") {
            let (v, j) = read_url_arg(r, 4);
            (v, &r[j.min(r.len())..])
        } else {
            return;
        };
        // `layer`, `layer(…)` and `supports(…)` come before the media.
        let mut media = after.trim();
        loop {
            let lower = media.to_ascii_lowercase();
            if lower.starts_with("layer(") || lower.starts_with("supports(") {
                let close = media.find(')').map_or(media.len(), |p| p + 1);
                media = media[close..].trim_start();
            } else if lower == "layer" || lower.starts_with("layer ") {
                media = media[5..].trim_start();
            } else {
                break;
            }
        }
        let need = if applies && media_applies(media, self.viewport) {
            Need::Always
        } else {
            Need::Unused
        };
        self.push(&raw, ResourceKind::Stylesheet, need);
    }

    fn declaration(&mut self, decl: &str, need: Need) {
        let Some((prop, value)) = decl.split_once(':') else {
            return;
        };
        for raw in urls_in(value) {
            let kind = url_kind(&raw, false);
            self.push(&raw, kind, need.clone());
        }
        if let Some((families, weight, italic)) = font_declaration(prop, value) {
            self.out.font_uses.push(FontUse {
                need,
                families,
                weight,
                italic,
            });
        }
    }

    fn close(&mut self, ctx: Ctx) {
        if let Ctx::FontFace(f) = ctx {
            let Some(src) = f.src else {
                return;
            };
            match f.family {
                Some(family) if f.applies && f.latin != Some(false) => {
                    let face = Face {
                        family,
                        weight: f.weight.unwrap_or((400, 400)),
                        italic: f.italic,
                        latin: true,
                    };
                    self.push(&src, ResourceKind::Font, Need::FontFace(Arc::new(face)));
                }
                _ => self.push_unused(&src, ResourceKind::Font),
            }
        }
    }
}

/// Scan a stylesheet (or a `<style>` element's text) as a layout uses it; `applies`: whether
/// the media it was linked with apply.
pub fn scan_stylesheet(css: &str, base: &Url, applies: bool, viewport: &Viewport) -> SheetRefs {
    let mut scan = Scan {
        base,
        viewport,
        out: SheetRefs::default(),
    };
    let b = css.as_bytes();
    // Blocks nest this deep at most; what is deeper is skipped (memory stays bounded).
    const MAX_DEPTH: usize = 64;
    let mut stack = vec![Ctx::Group { applies }];
    let mut too_deep = 0usize;
    let (mut i, mut start) = (0usize, 0usize);
    while i < b.len() {
        match b[i] {
            b'"' | b'\'' => i = read_css_string(css, i).1,
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i = css[i + 2..].find("*/").map_or(b.len(), |p| i + 2 + p + 2);
            }
            b'u' | b'U' if starts_with_ci(b, i, b"url(") => i = read_url_arg(css, i + 4).1,
            b'{' => {
                if too_deep > 0 || stack.len() >= MAX_DEPTH {
                    too_deep += 1;
                } else {
                    let ctx = scan.open(&strip_comments(&css[start..i]), stack.last());
                    stack.push(ctx);
                }
                i += 1;
                start = i;
            }
            b';' => {
                if too_deep == 0 {
                    scan.statement(stack.last_mut(), &css[start..i]);
                }
                i += 1;
                start = i;
            }
            b'}' if too_deep > 0 => {
                too_deep -= 1;
                i += 1;
                start = i;
            }
            b'}' => {
                scan.statement(stack.last_mut(), &css[start..i]);
                if stack.len() > 1 {
                    if let Some(ctx) = stack.pop() {
                        scan.close(ctx);
                    }
                }
                i += 1;
                start = i;
            }
            _ => i += 1,
        }
    }
    scan.statement(stack.last_mut(), &css[start.min(b.len())..]);
    while stack.len() > 1 {
        if let Some(ctx) = stack.pop() {
            scan.close(ctx);
        }
    }
    scan.out
}

/// How a `style` attribute sets its element's text (its declarations apply at once).
pub fn inline_font_use(declarations: &str) -> Option<FontUse> {
    let mut all: Option<FontUse> = None;
    for decl in strip_comments(declarations).split(';') {
        let Some((families, weight, italic)) = decl
            .split_once(':')
            .and_then(|(prop, value)| font_declaration(prop, value))
        else {
            continue;
        };
        let u = all.get_or_insert(FontUse {
            need: Need::Always,
            families: Vec::new(),
            weight: None,
            italic: false,
        });
        u.families.extend(families);
        u.weight = weight.or(u.weight);
        u.italic |= italic;
    }
    all
}

/// What one document's layout knows: its elements so far and how its rules set text; from
/// these it decides which waiting references are needed.
#[derive(Debug)]
pub struct DocumentStyle {
    pub elements: ElementIndex,
    /// Rules that set text and have not matched yet.
    font_uses: Vec<FontUse>,
    families: HashSet<Arc<str>>,
    weights: BTreeSet<u16>,
    italic: bool,
    /// The faces its stylesheets have declared, by family, in order (at most
    /// [`DocumentStyle::MAX_FACES`]).
    faces: HashMap<Arc<str>, Vec<Arc<Face>>>,
    /// Those faces, by address.
    known_faces: HashSet<usize>,
    /// The faces text is set in (by address), and for which (families, weights, italic,
    /// faces) counts: all four only grow, so equal counts mean the same faces.
    used_faces: HashSet<usize>,
    used_for: (usize, usize, bool, usize),
}

impl Default for DocumentStyle {
    fn default() -> DocumentStyle {
        DocumentStyle {
            elements: ElementIndex::for_html(),
            font_uses: Vec::new(),
            families: HashSet::new(),
            weights: BTreeSet::from([400]),
            italic: false,
            faces: HashMap::new(),
            known_faces: HashSet::new(),
            used_faces: HashSet::new(),
            used_for: (0, 0, false, 0),
        }
    }
}

/// How far a face's weights are from `w`, in the order CSS Fonts §5.2 tries them.
fn weight_rank(w: u16, (lo, hi): (u16, u16)) -> (u8, u16) {
    if lo <= w && w <= hi {
        return (0, 0);
    }
    if (400..=500).contains(&w) {
        if lo > w && lo <= 500 {
            (1, lo - w)
        } else if hi < w {
            (2, w - hi)
        } else {
            (3, lo - w)
        }
    } else if w < 400 {
        if hi < w {
            (1, w - hi)
        } else {
            (2, lo - w)
        }
    } else if lo > w {
        (1, lo - w)
    } else {
        (2, w - hi)
    }
}

impl DocumentStyle {
    /// Faces a document may declare; a face beyond is never requested (real pages declare
    /// tens).
    pub const MAX_FACES: usize = 4096;

    pub fn add_font_use(&mut self, u: FontUse) {
        self.font_uses.push(u);
    }

    /// The face text in `family` at weight `w` (italic or not) is set in: the closest weight
    /// among faces of the wanted style (the other style when there are none); a later rule
    /// wins a tie.
    fn face_for(&self, family: &str, w: u16, italic: bool) -> Option<&Arc<Face>> {
        let of_family: Vec<&Arc<Face>> = self.faces.get(family)?.iter().collect();
        let styled: Vec<&Arc<Face>> = of_family
            .iter()
            .copied()
            .filter(|f| f.italic == italic)
            .collect();
        let pool = if styled.is_empty() { of_family } else { styled };
        pool.into_iter()
            .enumerate()
            .min_by_key(|(i, f)| (weight_rank(w, f.weight), usize::MAX - i))
            .map(|(_, f)| f)
    }

    /// Takes out of `pending` what the document needs now: references needed always, rule
    /// images whose rule an element matches, and the font faces its text is set in.
    pub fn take_needed<T>(&mut self, pending: &mut Vec<T>, need: impl Fn(&T) -> &Need) -> Vec<T> {
        let ix = &mut self.elements;
        let (matched, rest): (Vec<FontUse>, Vec<FontUse>) = std::mem::take(&mut self.font_uses)
            .into_iter()
            .partition(|u| match &u.need {
                Need::Rule(list) => ix.matches(list),
                Need::Always => true,
                _ => false,
            });
        self.font_uses = rest;
        for u in matched {
            self.families.extend(u.families);
            if let Some(w) = u.weight {
                self.weights.insert(w);
            }
            self.italic |= u.italic;
        }
        // The browser's own style sheet: headings, b, strong and th are bold; i, em, cite,
        // var, dfn and address italic.
        if ["b", "strong", "th", "h1", "h2", "h3", "h4", "h5", "h6"]
            .iter()
            .any(|t| self.elements.has_tag(t))
        {
            self.weights.insert(700);
        }
        if ["i", "em", "cite", "var", "dfn", "address"]
            .iter()
            .any(|t| self.elements.has_tag(t))
        {
            self.italic = true;
        }
        for p in pending.iter() {
            if let Need::FontFace(f) = need(p) {
                if self.known_faces.len() < Self::MAX_FACES
                    && self.known_faces.insert(Arc::as_ptr(f) as usize)
                {
                    self.faces
                        .entry(f.family.clone())
                        .or_default()
                        .push(f.clone());
                }
            }
        }
        let state = (
            self.families.len(),
            self.weights.len(),
            self.italic,
            self.known_faces.len(),
        );
        if state != self.used_for {
            let mut used = HashSet::new();
            for fam in &self.families {
                for &w in &self.weights {
                    for it in [false, true] {
                        if it && !self.italic {
                            continue;
                        }
                        if let Some(f) = self.face_for(fam, w, it) {
                            used.insert(Arc::as_ptr(f) as usize);
                        }
                    }
                }
            }
            self.used_faces = used;
            self.used_for = state;
        }
        let used = &self.used_faces;
        let (mut take, mut keep) = (Vec::new(), Vec::new());
        for p in std::mem::take(pending) {
            let needed = match need(&p) {
                Need::Always => true,
                Need::Rule(list) => self.elements.matches(list),
                Need::FontFace(f) => used.contains(&(Arc::as_ptr(f) as usize)),
                Need::Unused => false,
            };
            if needed {
                take.push(p);
            } else {
                keep.push(p);
            }
        }
        *pending = keep;
        take
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::selectors::ElementInfo;

    fn base() -> Url {
        Url::parse("http://www.test/css/site.css").unwrap()
    }

    fn scan(css: &str) -> SheetRefs {
        scan_stylesheet(css, &base(), true, &Viewport::default())
    }

    fn paths(r: &SheetRefs) -> Vec<String> {
        r.refs.iter().map(|d| d.url.path().to_string()).collect()
    }

    fn el(tag: &str, classes: &[&str]) -> ElementInfo {
        ElementInfo {
            tag: tag.into(),
            classes: classes.iter().map(|c| (*c).into()).collect(),
            ..ElementInfo::default()
        }
    }

    /// What a document with `elements` requests of `css`.
    fn requested(css: &str, elements: &[ElementInfo]) -> Vec<String> {
        let refs = scan(css);
        let mut doc = DocumentStyle::default();
        for e in elements {
            doc.elements.add(e.clone());
        }
        for u in refs.font_uses {
            doc.add_font_use(u);
        }
        let mut pending = refs.refs;
        let mut got: Vec<String> = doc
            .take_needed(&mut pending, |d| &d.need)
            .iter()
            .map(|d| d.url.path().to_string())
            .collect();
        got.sort();
        got
    }

    #[test]
    fn rules_media_and_imports() {
        let css = r#"
            @charset "utf-8";
            @import url("a.css");
            @import "p.css" print;
            @import url(l.css) layer(base) screen and (min-width: 800px);
            /* .x { background: url(comment.png) } */
            .nav { background: url(nav.png) no-repeat; color: red }
            a:hover { background-image: url('hover.png') }
            @media print { .nav { background: url(print.png) } }
            @media screen and (max-width: 600px) { .nav { background: url(small.png) } }
            @media (min-width: 800px) { .nav { background: url(wide.png) } }
            @page { background: url(page.png) }
            .logo { background: url("data:image/png;base64,AAAA") }
            .a, .b { list-style: url(/img/dot.gif) }
        "#;
        let r = scan(css);
        assert_eq!(
            paths(&r),
            [
                "/css/a.css",
                "/css/p.css",
                "/css/l.css",
                "/css/nav.png",
                "/css/wide.png",
                "/img/dot.gif"
            ]
        );
        assert_eq!(r.refs[0].need, Need::Always);
        assert_eq!(r.refs[1].need, Need::Unused);
        assert_eq!(r.refs[2].need, Need::Always);
        assert!(matches!(r.refs[3].need, Need::Rule(_)));
        assert_eq!(
            requested(css, &[el("div", &["b"])]),
            ["/css/a.css", "/css/l.css", "/img/dot.gif"]
        );
        assert_eq!(
            requested(css, &[el("div", &["nav"])]),
            ["/css/a.css", "/css/l.css", "/css/nav.png", "/css/wide.png"]
        );
        // A sheet linked for print: only its imports, as unused sheets.
        let print = scan_stylesheet(css, &base(), false, &Viewport::default());
        assert!(print
            .refs
            .iter()
            .all(|d| d.kind == ResourceKind::Stylesheet && d.need == Need::Unused));
    }

    #[test]
    fn font_faces_by_family_weight_format_and_range() {
        let css = r#"
            @font-face { font-family: "Open Sans"; font-weight: 300;
                         src: local('Open Sans Light'), url("/f/light.ttf"); }
            @font-face { font-family: "Open Sans"; src: local('Open Sans'), url("/f/regular.ttf"); font-weight: 400; }
            @font-face { font-family: "Open Sans"; font-weight: 600; src: url("/f/semibold.ttf"); }
            @font-face { font-family: "Open Sans"; font-weight: 700; src: url("/f/bold.ttf"); }
            @font-face { font-family: 'Open Sans'; font-style: italic; src: url("/f/italic.ttf"); }
            @font-face { font-family: Mono; src: url(/f/mono.eot?#iefix) format("embedded-opentype"),
                         url(/f/mono.woff2) format("woff2"), url(/f/mono.woff) format("woff"); }
            @font-face { font-family: Mono; font-weight: bold; src: url(/f/mono-cyr.woff2);
                         unicode-range: U+0400-045F, U+0490-0491; }
            @font-face { font-family: Unused; src: url(/f/unused.woff2); }
            body { font: 14px/1.4 "Open Sans", Arial, sans-serif }
            pre, code { font-family: MONO, monospace; font-weight: bold }
            .big { font-weight: 600 }
        "#;
        // Text in Open Sans 400 and bold (an h1); nothing matches `.big` or `pre`.
        assert_eq!(
            requested(css, &[el("h1", &[])]),
            ["/f/bold.ttf", "/f/regular.ttf"]
        );
        // `pre` adds Mono (its Cyrillic face is not needed for Latin text); `.big` semibold;
        // `em` italic.
        assert_eq!(
            requested(css, &[el("pre", &[]), el("p", &["big"]), el("em", &[])]),
            [
                "/f/bold.ttf",
                "/f/italic.ttf",
                "/f/mono.woff2",
                "/f/regular.ttf",
                "/f/semibold.ttf"
            ]
        );
    }

    #[test]
    fn nested_rules_and_keyframes() {
        let css = ".card { & .icon { background: url(icon.png) } @media print { background: url(p.png) } }
                   @keyframes spin { from { background: url(k.png) } }";
        assert_eq!(requested(css, &[el("div", &["card"])]), ["/css/k.png"]);
        assert_eq!(
            requested(css, &[el("div", &["card"]), el("i", &["icon"])]),
            ["/css/icon.png", "/css/k.png"]
        );
    }

    #[test]
    fn weights_are_chosen_as_css_fonts_says() {
        assert_eq!(weight_rank(400, (400, 400)), (0, 0));
        assert!(weight_rank(400, (500, 500)) < weight_rank(400, (300, 300)));
        assert!(weight_rank(400, (300, 300)) < weight_rank(400, (600, 600)));
        assert!(weight_rank(700, (800, 800)) < weight_rank(700, (600, 600)));
        assert!(weight_rank(300, (200, 200)) < weight_rank(300, (400, 400)));
        assert_eq!(weight_rank(550, (100, 900)), (0, 0));
    }

    #[test]
    fn font_shorthand_and_inline_styles() {
        let (f, w, i) = font_shorthand("italic bold 12px/30px Georgia, serif");
        assert_eq!(f, vec![Arc::from("georgia"), Arc::from("serif")]);
        assert_eq!((w, i), (Some(700), true));
        let (f, w, _) = font_shorthand("600 1.2em \"Open  Sans\"");
        assert_eq!((f, w), (vec![Arc::from("open sans")], Some(600)));
        assert_eq!(font_shorthand("menu").0, Vec::<Arc<str>>::new());
        let u =
            inline_font_use("color: red; font-family: 'X Y' !important; font-weight: 300").unwrap();
        assert_eq!((u.families, u.weight), (vec![Arc::from("x y")], Some(300)));
        assert!(inline_font_use("color: red").is_none());
    }

    #[test]
    fn broken_sheets_do_not_panic() {
        // Deep nesting is skipped past its limit; the rest of the sheet still counts.
        let deep = format!(
            "{}{} .x {{ background: url(x.png) }}",
            "a{".repeat(100_000),
            "}".repeat(100_000)
        );
        assert_eq!(paths(&scan(&deep)), ["/css/x.png"]);
        for css in [
            "",
            "{",
            "}",
            "}}}{{{",
            "@import",
            "@import url(",
            "@media (",
            "@font-face {",
            ".a { background: url(",
            ".a { font: }",
            "@font-face { src: url(x.woff2)",
            "a { b { c { d: url(e.png) } } }",
            "\"unterminated",
            "/* unterminated",
        ] {
            let r = scan(css);
            let mut doc = DocumentStyle::default();
            let mut p = r.refs;
            let _ = doc.take_needed(&mut p, |d| &d.need);
        }
    }
}
