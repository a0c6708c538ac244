//! CSS selectors against the elements a document has so far, so that a stylesheet rule's
//! images are requested only when some element shows them, as browsers do. Pure: no I/O.
//!
//! The match is an over-approximation that never misses what a browser would request: each
//! compound of a selector (`div.nav`, `a[href]`) must be matched by some element of the
//! document, but how the elements are related (descendant, child, sibling) is not checked,
//! nor structural pseudo-classes (`:nth-child`, `:not()`), nor the cascade. Pseudo-classes
//! that depend on the user (`:hover`, `:focus`, `:visited`, `::selection`) never match at load,
//! and another engine's prefixed ones (`:-moz-…`, `:-ms-…`) make a selector invalid.

use std::collections::{HashMap, HashSet};

use webpep_discover::css::split_top_level_commas;

/// One compound selector: what a single element must have. `None` tag: any.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Compound {
    tag: Option<Box<str>>,
    id: Option<Box<str>>,
    classes: Vec<Box<str>>,
    attrs: Vec<Box<str>>,
}

/// A complex selector: its compounds (combinators are not kept).
pub type Complex = Vec<Compound>;

/// An element as the matcher sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ElementInfo {
    /// Lower case.
    pub tag: Box<str>,
    pub id: Option<Box<str>>,
    pub classes: Vec<Box<str>>,
    /// Attribute names, lower case.
    pub attrs: Vec<Box<str>>,
}

/// Parse a selector list; selectors that are malformed or can never match at load are left
/// out (an empty list matches nothing).
pub fn parse_selector_list(s: &str) -> Vec<Complex> {
    split_top_level_commas(s)
        .into_iter()
        .filter_map(parse_complex)
        .collect()
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-' || c == '_' || !c.is_ascii()
}

/// An identifier at `i` (with escapes undone); returns it and the index after it.
fn ident(cs: &[char], mut i: usize) -> (String, usize) {
    let mut out = String::new();
    while i < cs.len() {
        let c = cs[i];
        if c == '\\' {
            let mut j = i + 1;
            let mut hex = String::new();
            while j < cs.len() && hex.len() < 6 && cs[j].is_ascii_hexdigit() {
                hex.push(cs[j]);
                j += 1;
            }
            if !hex.is_empty() {
                let code = u32::from_str_radix(&hex, 16).unwrap_or(0xFFFD);
                out.push(char::from_u32(code).unwrap_or('\u{FFFD}'));
                if j < cs.len() && cs[j].is_whitespace() {
                    j += 1;
                }
                i = j;
            } else if let Some(&next) = cs.get(i + 1) {
                out.push(next);
                i += 2;
            } else {
                i += 1;
            }
        } else if is_name_char(c) {
            out.push(c);
            i += 1;
        } else {
            break;
        }
    }
    (out, i)
}

/// Skip a bracketed part starting at `open` (`(` or `[`), strings inside included; returns
/// the index after its closing bracket, or `None` when it is not closed.
fn skip_bracketed(cs: &[char], open: usize) -> Option<usize> {
    let (o, c) = (cs[open], if cs[open] == '(' { ')' } else { ']' });
    let mut depth = 0usize;
    let mut quote = None::<char>;
    let mut i = open;
    while i < cs.len() {
        let ch = cs[i];
        match quote {
            Some(_) if ch == '\\' => i += 1,
            Some(q) if ch == q => quote = None,
            Some(_) => {}
            None if ch == '"' || ch == '\'' => quote = Some(ch),
            None if ch == o => depth += 1,
            None if ch == c => {
                depth -= 1;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            None => {}
        }
        i += 1;
    }
    None
}

/// Whether a pseudo-class or pseudo-element can be true while a page loads untouched.
fn pseudo_possible(name: &str) -> bool {
    const USER: [&str; 27] = [
        "hover",
        "active",
        "focus",
        "focus-within",
        "focus-visible",
        "visited",
        "target",
        "target-within",
        "target-text",
        "drop",
        "current",
        "past",
        "future",
        "playing",
        "paused",
        "fullscreen",
        "-webkit-full-screen",
        "modal",
        "popover-open",
        "picture-in-picture",
        "user-invalid",
        "user-valid",
        "-webkit-autofill",
        "autofill",
        "selection",
        "backdrop",
        "spelling-error",
    ];
    let another_engine = ["-moz-", "-ms-", "-o-"].iter().any(|p| name.starts_with(p));
    !USER.contains(&name) && !another_engine && name != "grammar-error" && name != "highlight"
}

fn parse_complex(s: &str) -> Option<Complex> {
    let cs: Vec<char> = s.trim().chars().collect();
    let mut out = Vec::new();
    let mut cur = Compound::default();
    let mut has = false;
    let mut i = 0;
    while i < cs.len() {
        let c = cs[i];
        match c {
            c if c.is_whitespace() || c == '>' || c == '+' || c == '~' => {
                if has {
                    out.push(std::mem::take(&mut cur));
                    has = false;
                }
                i += 1;
            }
            '|' => {
                // A namespace prefix (`svg|rect`, `*|a`) or the column combinator `||`.
                if cs.get(i + 1) == Some(&'|') {
                    if has {
                        out.push(std::mem::take(&mut cur));
                        has = false;
                    }
                    i += 2;
                } else {
                    cur.tag = None;
                    i += 1;
                }
            }
            '*' | '&' => {
                has = true;
                i += 1;
            }
            '#' | '.' => {
                let (name, j) = ident(&cs, i + 1);
                if name.is_empty() {
                    return None;
                }
                if c == '#' {
                    cur.id = Some(name.into());
                } else {
                    cur.classes.push(name.into());
                }
                has = true;
                i = j;
            }
            '[' => {
                let end = skip_bracketed(&cs, i)?;
                let mut j = i + 1;
                while j < end && cs[j].is_whitespace() {
                    j += 1;
                }
                let (mut name, mut k) = ident(&cs, j);
                if cs.get(k) == Some(&'|') && cs.get(k + 1) != Some(&'=') {
                    (name, k) = ident(&cs, k + 1);
                } else if name.is_empty() && cs.get(j) == Some(&'*') && cs.get(j + 1) == Some(&'|')
                {
                    (name, _) = ident(&cs, j + 2);
                }
                let _ = k;
                if name.is_empty() {
                    return None;
                }
                cur.attrs.push(name.to_ascii_lowercase().into());
                has = true;
                i = end;
            }
            ':' => {
                let start = if cs.get(i + 1) == Some(&':') {
                    i + 2
                } else {
                    i + 1
                };
                let (name, mut j) = ident(&cs, start);
                if name.is_empty() {
                    return None;
                }
                if cs.get(j) == Some(&'(') {
                    j = skip_bracketed(&cs, j)?;
                }
                if !pseudo_possible(&name.to_ascii_lowercase()) {
                    return None;
                }
                has = true;
                i = j;
            }
            c if is_name_char(c) || c == '\\' => {
                let (name, j) = ident(&cs, i);
                if name.is_empty() {
                    return None;
                }
                cur.tag = Some(name.to_ascii_lowercase().into());
                has = true;
                i = j;
            }
            _ => return None,
        }
    }
    if has {
        out.push(cur);
    }
    (!out.is_empty()).then_some(out)
}

/// The elements of one document seen so far, indexed for matching. Each compound is
/// checked against an element once at most: a match is remembered, and a compound that has
/// not matched yet is checked again only against the elements that came since.
#[derive(Debug, Default)]
pub struct ElementIndex {
    elements: Vec<ElementInfo>,
    by_tag: HashMap<Box<str>, Vec<usize>>,
    by_id: HashMap<Box<str>, Vec<usize>>,
    by_class: HashMap<Box<str>, Vec<usize>>,
    by_attr: HashMap<Box<str>, Vec<usize>>,
    /// Compounds some element has matched.
    matched: HashSet<Compound>,
    /// Compounds no element has matched, with how many elements they were checked against.
    unmatched: HashMap<Compound, usize>,
    /// More elements than [`ElementIndex::MAX`] arrived: everything matches from then on.
    saturated: bool,
}

impl ElementIndex {
    /// Elements kept per document; beyond, every selector counts as matched (no reference is
    /// lost, and memory stays bounded).
    pub const MAX: usize = 100_000;

    /// An index with the elements every HTML document has, written or not.
    pub fn for_html() -> ElementIndex {
        let mut ix = ElementIndex::default();
        for tag in ["html", "head", "body"] {
            ix.add(ElementInfo {
                tag: tag.into(),
                ..ElementInfo::default()
            });
        }
        ix
    }

    pub fn add(&mut self, e: ElementInfo) {
        if self.saturated {
            return;
        }
        if self.elements.len() >= Self::MAX {
            *self = ElementIndex {
                saturated: true,
                ..ElementIndex::default()
            };
            return;
        }
        let n = self.elements.len();
        self.by_tag.entry(e.tag.clone()).or_default().push(n);
        if let Some(id) = &e.id {
            self.by_id.entry(id.clone()).or_default().push(n);
        }
        for c in &e.classes {
            let list = self.by_class.entry(c.clone()).or_default();
            if list.last() != Some(&n) {
                list.push(n);
            }
        }
        for a in &e.attrs {
            let list = self.by_attr.entry(a.clone()).or_default();
            if list.last() != Some(&n) {
                list.push(n);
            }
        }
        self.elements.push(e);
    }

    /// How many elements it holds.
    pub fn len(&self) -> usize {
        self.elements.len()
    }

    pub fn is_empty(&self) -> bool {
        self.elements.is_empty() && !self.saturated
    }

    fn element_matches(e: &ElementInfo, c: &Compound) -> bool {
        c.tag.as_ref().is_none_or(|t| *t == e.tag)
            && c.id.as_ref().is_none_or(|id| e.id.as_ref() == Some(id))
            && c.classes.iter().all(|k| e.classes.contains(k))
            && c.attrs.iter().all(|a| e.attrs.contains(a))
    }

    /// The elements from `from` on that could match `c`: the shortest of the lists its id,
    /// classes, tag and attributes index; every element when it names none of those.
    fn candidates(&self, c: &Compound, from: usize) -> Vec<usize> {
        let lists =
            c.id.iter()
                .map(|k| self.by_id.get(k))
                .chain(c.classes.iter().map(|k| self.by_class.get(k)))
                .chain(c.tag.iter().map(|k| self.by_tag.get(k)))
                .chain(c.attrs.iter().map(|k| self.by_attr.get(k)));
        let mut best: Option<&[usize]> = None;
        for l in lists {
            let l: &[usize] = l.map_or(&[], Vec::as_slice);
            if best.is_none_or(|b| l.len() < b.len()) {
                best = Some(l);
            }
        }
        match best {
            Some(l) => l[l.partition_point(|&n| n < from)..].to_vec(),
            None => (from..self.elements.len()).collect(),
        }
    }

    /// Some element has everything `c` asks for.
    pub fn matches_compound(&mut self, c: &Compound) -> bool {
        if self.saturated || self.matched.contains(c) {
            return true;
        }
        let from = self.unmatched.get(c).copied().unwrap_or(0);
        let hit = self
            .candidates(c, from)
            .into_iter()
            .any(|n| Self::element_matches(&self.elements[n], c));
        if hit {
            self.unmatched.remove(c);
            self.matched.insert(c.clone());
        } else {
            self.unmatched.insert(c.clone(), self.elements.len());
        }
        hit
    }

    /// Some selector of `list` is matched (each of its compounds by some element).
    pub fn matches(&mut self, list: &[Complex]) -> bool {
        list.iter()
            .any(|cx| cx.iter().all(|c| self.matches_compound(c)))
    }

    /// Some element has tag `tag`.
    pub fn has_tag(&self, tag: &str) -> bool {
        self.saturated || self.by_tag.contains_key(tag)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn el(tag: &str, id: Option<&str>, classes: &[&str], attrs: &[&str]) -> ElementInfo {
        ElementInfo {
            tag: tag.into(),
            id: id.map(Into::into),
            classes: classes.iter().map(|c| (*c).into()).collect(),
            attrs: attrs.iter().map(|a| (*a).into()).collect(),
        }
    }

    fn doc() -> ElementIndex {
        let mut ix = ElementIndex::for_html();
        ix.add(el(
            "div",
            Some("main"),
            &["homepage", "wide"],
            &["id", "class"],
        ));
        ix.add(el("a", None, &["nav"], &["href", "class"]));
        ix.add(el("h1", None, &[], &[]));
        ix.add(el("span", None, &["md:flex", "w-1/2"], &["class"]));
        ix
    }

    fn m(sel: &str) -> bool {
        doc().matches(&parse_selector_list(sel))
    }

    /// A compound that has not matched is checked again against the elements that came
    /// since, and one that has stays matched.
    #[test]
    fn later_elements_are_matched_and_matches_remembered() {
        let mut ix = doc();
        let late = parse_selector_list("p.late[title]");
        assert!(!ix.matches(&late));
        ix.add(el("p", None, &["late"], &[]));
        assert!(!ix.matches(&late));
        ix.add(el("p", None, &["late"], &["title"]));
        assert!(ix.matches(&late));
        assert!(ix.matches(&late));
        assert!(ix.matches(&parse_selector_list("[title]")));
    }

    #[test]
    fn compounds_must_be_on_one_element_and_all_present() {
        assert!(m("div"));
        assert!(m("DIV.homepage"));
        assert!(m("#main.wide"));
        assert!(m(".homepage h1"));
        assert!(m(".homepage > h1 + a.nav"));
        assert!(m("body"));
        assert!(m("*"));
        assert!(!m("div.nav"));
        assert!(!m("#other"));
        assert!(!m(".homepage .absent"));
        assert!(!m("table"));
        assert!(m("table, h1"));
        assert!(m("a[href]"));
        assert!(m("a[href^='http://x']"));
        assert!(m("a[ HREF $= \".pdf\" i]"));
        assert!(!m("a[title]"));
        assert!(m(".md\\:flex"));
        assert!(m(".w-1\\/2"));
        assert!(m(".\\6d d\\:flex"));
    }

    #[test]
    fn pseudo_classes() {
        assert!(m("h1::before"));
        assert!(m("h1:before"));
        assert!(m("*:nth-child(3)"));
        assert!(m("a:not(.x):first-child"));
        assert!(m("a:link"));
        assert!(!m("a:hover"));
        assert!(!m("a.nav:focus-visible"));
        assert!(!m("a:visited"));
        assert!(!m("::selection"));
        assert!(!m("h1::-moz-selection"));
        assert!(!m("input:-ms-input-placeholder"));
        assert!(m("a:hover, h1"));
        assert!(m("h1::-webkit-scrollbar"));
        assert!(m(":is(a, b)"));
        assert!(!m("a:hover:not(.x)"));
    }

    #[test]
    fn garbage_matches_nothing_and_does_not_panic() {
        for s in [
            "", ",", "#", ".", "[", "[]", "a[", ":", "a:(", "}", "a{", "\\", "a)", "::", "##x",
            "x|",
        ] {
            let list = parse_selector_list(s);
            let _ = doc().matches(&list);
        }
        assert!(parse_selector_list("[").is_empty());
        assert!(parse_selector_list("a{").is_empty());
    }

    #[test]
    fn a_full_index_matches_everything() {
        let mut ix = ElementIndex::default();
        for _ in 0..=ElementIndex::MAX {
            ix.add(el("p", None, &[], &[]));
        }
        assert!(ix.matches(&parse_selector_list("#nowhere")));
        assert!(ix.has_tag("table"));
    }
}
