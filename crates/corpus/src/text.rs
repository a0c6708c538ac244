//! Generators of text content that compresses like the real thing: English-like prose from a
//! word list with Zipf-like frequencies, inside HTML with real structure (head, navigation,
//! stories, tables, link lists, forms, footer), CSS with varied selectors and properties, and
//! JavaScript with varied functions. Every generator can hit an exact byte size.
//!
//! How well the text compresses is a parameter, `redundancy` (0–1): the share of blocks cut
//! from the page's own templates (2003 table layouts with `<font>` tags, `document.write`
//! menus, rule sets repeated per section) rather than free prose, tracking links or minified
//! code. Real pages differ here by a factor of two (000 Table 3: gzip shrinks the text of
//! cnn.com ×2.45 and of yahoo.com ×5.2), so the paper-sites generator calibrates it per page.

use std::fmt::Write as _;

use crate::rng::Rng;
use crate::words;

pub fn word(r: &mut Rng) -> &'static str {
    let w = words::common();
    w[r.zipf(w.len(), 1.5)]
}

pub fn name(r: &mut Rng) -> &'static str {
    let w = words::names();
    w[r.below(w.len())]
}

pub fn web_word(r: &mut Rng) -> &'static str {
    let w = words::web();
    w[r.below(w.len())]
}

pub fn capitalize(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().collect::<String>() + c.as_str(),
        None => String::new(),
    }
}

fn alnum(s: &str) -> String {
    s.chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .collect::<String>()
        .to_ascii_lowercase()
}

/// A sentence of `min..=max` words.
pub fn sentence(r: &mut Rng, min: usize, max: usize) -> String {
    let n = r.range(min, max);
    let mut s = String::with_capacity(n * 7);
    for i in 0..n {
        if i > 0 {
            if i + 1 < n && i > 2 && r.chance(0.08) {
                s.push(',');
            }
            s.push(' ');
        }
        let w: String = if r.chance(0.04) {
            name(r).to_string()
        } else if r.chance(0.025) {
            match r.below(3) {
                0 => r.range(2, 99).to_string(),
                1 => format!("{}.{}", r.range(1, 99), r.range(0, 9)),
                _ => format!("${} million", r.range(2, 950)),
            }
        } else {
            word(r).to_string()
        };
        if i == 0 {
            s.push_str(&capitalize(&w));
        } else {
            s.push_str(&w);
        }
    }
    s.push(match r.below(20) {
        0 => '?',
        1 => '!',
        _ => '.',
    });
    s
}

pub fn paragraph(r: &mut Rng, min: usize, max: usize) -> String {
    let n = r.range(min, max);
    let mut p = String::new();
    for i in 0..n {
        if i > 0 {
            p.push(' ');
        }
        if r.chance(0.12) {
            let _ = write!(
                p,
                "\"{}\" said {} {}.",
                sentence(r, 5, 14).trim_end_matches(['.', '?', '!']),
                name(r),
                name(r)
            );
        } else {
            p.push_str(&sentence(r, 6, 24));
        }
    }
    p
}

/// A headline in title case.
pub fn headline(r: &mut Rng) -> String {
    let n = r.range(4, 9);
    let small = [
        "of", "and", "to", "a", "in", "for", "on", "at", "by", "the", "an", "or",
    ];
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let w = if r.chance(0.15) {
            name(r).to_string()
        } else {
            word(r).to_string()
        };
        if i == 0 || !small.contains(&w.as_str()) {
            out.push(capitalize(&w));
        } else {
            out.push(w);
        }
    }
    out.join(" ")
}

/// `k` lowercase words joined by `sep` (for paths, class names).
pub fn slug(r: &mut Rng, k: usize, sep: &str) -> String {
    let mut parts = Vec::with_capacity(k);
    while parts.len() < k {
        let w = if r.chance(0.5) { web_word(r) } else { word(r) };
        let w = alnum(w);
        if !w.is_empty() {
            parts.push(w);
        }
    }
    parts.join(sep)
}

/// A camelCase identifier.
pub fn ident(r: &mut Rng) -> String {
    let k = r.range(1, 3);
    let mut s = alnum(web_word(r));
    for _ in 0..k {
        let w = alnum(if r.chance(0.5) { word(r) } else { web_word(r) });
        s.push_str(&capitalize(&w));
    }
    s
}

/// Exactly `n` bytes of words (ASCII).
pub fn fill_words(r: &mut Rng, n: usize) -> String {
    let mut s = String::with_capacity(n + 16);
    while s.len() < n {
        if !s.is_empty() {
            s.push(' ');
        }
        let sent = sentence(r, 6, 20);
        s.push_str(&sent);
    }
    s.truncate(n);
    s
}

fn escape_text(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;")
}

fn escape_attr(s: &str) -> String {
    s.replace('&', "&amp;").replace('"', "&quot;")
}

// ---------------------------------------------------------------------------------------------
// HTML

/// How an image is referenced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Srcset {
    /// `<img src=U>`
    No,
    /// `<img src=U srcset="U 1x">`
    WithSrc,
    /// `<img srcset="U 1x">` (no src: only a srcset-aware browser finds it)
    Only,
}

#[derive(Clone, Debug)]
pub struct ImgRef {
    pub url: String,
    pub width: u32,
    pub height: u32,
    pub srcset: Srcset,
}

#[derive(Clone, Debug)]
pub struct IframeRef {
    pub url: String,
    pub width: u32,
    pub height: u32,
}

/// Everything a generated HTML document references (URLs as they appear in the document:
/// relative for the same host, absolute otherwise).
#[derive(Clone, Debug, Default)]
pub struct HtmlRefs {
    pub stylesheets: Vec<String>,
    /// `<link rel="preload" href=.. as=..>`
    pub preloads: Vec<(String, String)>,
    pub head_scripts: Vec<String>,
    pub body_scripts: Vec<String>,
    /// `images[hero]` is the top story's photo; the rest go into the body in order.
    pub images: Vec<ImgRef>,
    pub hero: Option<usize>,
    pub logo: Option<usize>,
    pub iframes: Vec<IframeRef>,
    /// Fonts, declared with `@font-face` in a `<style>` of the head, each the font of a
    /// `<span>` at the end of the body (a browser fetches a font only for text set in it).
    pub fonts: Vec<String>,
    /// Anything else a browser of any age fetches: `<object data=..>` at the end of the body.
    pub embeds: Vec<String>,
}

/// A `<style>` declaring `fonts`, each the font of class `webfont<i>` (empty without fonts).
fn font_faces(fonts: &[String]) -> String {
    if fonts.is_empty() {
        return String::new();
    }
    let mut s = String::from("<style type=\"text/css\">\n");
    for (i, u) in fonts.iter().enumerate() {
        let _ = writeln!(
            s,
            "@font-face {{ font-family: \"webfont{i}\"; src: url(\"{}\"); }}\n\
             .webfont{i} {{ font-family: \"webfont{i}\", serif; }}",
            escape_attr(u)
        );
    }
    s.push_str("</style>\n");
    s
}

/// The end of a body: text in each of the page's fonts ([`font_faces`]) and an `<object>`
/// for each of its embeds, one per line.
fn late_body_refs(refs: &HtmlRefs) -> String {
    let mut s = String::new();
    for i in 0..refs.fonts.len() {
        let _ = writeln!(s, "<span class=\"webfont{i}\">Aa</span>");
    }
    for u in &refs.embeds {
        let _ = writeln!(
            s,
            "<object data=\"{}\" width=\"1\" height=\"1\"></object>",
            escape_attr(u)
        );
    }
    s
}

/// What changes between versions of a document.
#[derive(Clone, Debug)]
pub struct HtmlMeta {
    pub site: String,
    pub title: String,
    pub headline: String,
    /// Time of day, e.g. `10:42 a.m. EDT`.
    pub time: String,
}

const MIN_FILL: usize = 40;

/// Bytes of `b` after gzip at level 6 (what `gzip` does by default, and what 000 Table 3's
/// lossless column measured).
pub fn gzip_len(b: &[u8]) -> usize {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(6));
    // Writing into a Vec cannot fail.
    let _ = e.write_all(b);
    e.finish().map_or(b.len(), |v| v.len())
}

/// The redundancy of HTML and CSS generated without a calibration target (imported pages with
/// no bodies): gzip shrinks such HTML about ×4.4, the median of 000 Table 3's four sites
/// (×2.45–5.2) and near the real front pages in ../shared/data/pages (×4.1–6.5).
pub const DEFAULT_REDUNDANCY: f64 = 0.2;
/// The same for scripts (about ×4.2: minified code is the entropy end of the scale).
pub const DEFAULT_JS_REDUNDANCY: f64 = 0.45;

/// One HTML document per entry of `metas`, each exactly `target` bytes when the references fit
/// (otherwise as small as the references allow). Only the headline and the time differ
/// between versions (and the filler paragraph's cut, by as many bytes as the headlines differ).
pub fn html_versions(
    seed: u64,
    refs: &HtmlRefs,
    metas: &[HtmlMeta],
    target: usize,
    redundancy: f64,
) -> Vec<Vec<u8>> {
    let mut content = Rng::derive(seed, "html-content");
    let mut kinds = Rng::derive(seed, "html-kinds");
    let mut imgr = Rng::derive(seed, "html-images");
    let style = Style::new(&mut Rng::derive(seed, "html-style"));
    let mut hero_r = Rng::derive(seed, "html-hero");
    let hero_par = paragraph(&mut hero_r, 2, 4);
    let hero_link = format!(
        "/{}/{}/{:02}/{:02}/{}/index.html",
        2003,
        slug(&mut hero_r, 1, ""),
        hero_r.range(1, 12),
        hero_r.range(1, 28),
        slug(&mut hero_r, 3, ".")
    );
    let nav: Vec<String> = (0..hero_r.range(6, 12))
        .map(|_| web_word(&mut hero_r).to_string())
        .collect();
    let description = sentence(&mut hero_r, 10, 20);
    let keywords: Vec<&str> = (0..6).map(|_| word(&mut hero_r)).collect();

    // Image blocks (mandatory), not the logo or the hero.
    let mut image_blocks = Vec::new();
    for (i, img) in refs.images.iter().enumerate() {
        if Some(i) == refs.hero || Some(i) == refs.logo {
            continue;
        }
        let mut b = String::new();
        let cls = style.class(&mut imgr).to_string();
        let link = style.story_url(&mut imgr);
        let _ = write!(
            b,
            "<div class=\"{cls}\"><a href=\"{link}\">{}</a>",
            img_tag(img, &headline(&mut imgr))
        );
        if imgr.chance(0.6) {
            let _ = write!(b, "<p class=\"caption\">{}</p>", sentence(&mut imgr, 5, 14));
        }
        b.push_str("</div>\n");
        image_blocks.push(b);
    }

    let suffix = {
        let mut s = String::new();
        if !refs.iframes.is_empty() {
            s.push_str("<div id=\"sidebar\">\n");
            for f in &refs.iframes {
                let _ = writeln!(
                    s,
                    "<iframe src=\"{}\" width=\"{}\" height=\"{}\" frameborder=\"0\" scrolling=\"no\" marginwidth=\"0\" marginheight=\"0\"></iframe>",
                    escape_attr(&f.url),
                    f.width,
                    f.height
                );
            }
            s.push_str("</div>\n");
        }
        s.push_str("<div id=\"footer\"><p>");
        let footer = [
            "Home",
            "Contact Us",
            "Site Map",
            "Help",
            "Privacy",
            "Advertise",
            "Jobs",
            "About",
        ];
        for (i, f) in footer.iter().enumerate() {
            if i > 0 {
                s.push_str(" | ");
            }
            let _ = write!(s, "<a href=\"/{}/\">{f}</a>", alnum(f));
        }
        let site = escape_text(metas.first().map(|m| m.site.as_str()).unwrap_or(""));
        let _ = write!(
            s,
            "</p>\n<p class=\"copyright\">&copy; 2003 {site}. All Rights Reserved. Terms under which this service is provided to you.</p></div>\n"
        );
        s.push_str(&late_body_refs(refs));
        for u in &refs.body_scripts {
            let _ = writeln!(
                s,
                "<script type=\"text/javascript\" src=\"{}\"></script>",
                escape_attr(u)
            );
        }
        s.push_str("</body>\n</html>\n");
        s
    };

    let prefixes: Vec<String> = metas
        .iter()
        .map(|m| {
            let mut h = String::new();
            h.push_str("<!DOCTYPE HTML PUBLIC \"-//W3C//DTD HTML 4.01 Transitional//EN\" \"http://www.w3.org/TR/html4/loose.dtd\">\n<html lang=\"en\">\n<head>\n");
            h.push_str("<meta http-equiv=\"Content-Type\" content=\"text/html; charset=utf-8\">\n");
            let _ = writeln!(h, "<title>{}</title>", escape_text(&m.title));
            let _ = writeln!(h, "<meta name=\"description\" content=\"{}\">", escape_attr(&description));
            let _ = writeln!(h, "<meta name=\"keywords\" content=\"{}\">", keywords.join(", "));
            for u in &refs.stylesheets {
                let _ = writeln!(
                    h,
                    "<link rel=\"stylesheet\" type=\"text/css\" href=\"{}\">",
                    escape_attr(u)
                );
            }
            for (u, a) in &refs.preloads {
                let _ = writeln!(h, "<link rel=\"preload\" href=\"{}\" as=\"{a}\">", escape_attr(u));
            }
            for u in &refs.head_scripts {
                let _ = writeln!(
                    h,
                    "<script type=\"text/javascript\" src=\"{}\"></script>",
                    escape_attr(u)
                );
            }
            h.push_str(&font_faces(&refs.fonts));
            let _ = writeln!(
                h,
                "<script type=\"text/javascript\">var pageSection = \"{}\"; var adZone = {}; var lastUpdate = \"{}\";</script>",
                nav.first().map(String::as_str).unwrap_or("home"),
                (seed % 9000) + 1000,
                m.time
            );
            h.push_str("</head>\n<body bgcolor=\"#ffffff\">\n<div id=\"header\">");
            if let Some(l) = refs.logo.and_then(|i| refs.images.get(i)) {
                let _ = write!(h, "<a href=\"/\">{}</a>", img_tag(l, &m.site));
            }
            h.push_str("<form action=\"/search\" method=\"get\" id=\"search\"><input type=\"text\" name=\"q\" size=\"20\"> <input type=\"submit\" value=\"Search\"></form></div>\n<ul id=\"nav\">");
            for n in &nav {
                let _ = write!(h, "<li><a href=\"/{n}/\">{}</a></li>", capitalize(n));
            }
            let _ = write!(h, "</ul>\n<div id=\"timestamp\">Updated: {}</div>\n", m.time);
            let _ = writeln!(
                h,
                "<div id=\"top-story\"><h1><a href=\"{hero_link}\">{}</a></h1>",
                escape_text(&m.headline)
            );
            if let Some(hi) = refs.hero.and_then(|i| refs.images.get(i)) {
                h.push_str(&img_tag(hi, &m.headline));
                h.push('\n');
            }
            let _ = write!(h, "<p>{hero_par}</p></div>\n<div id=\"content\">\n");
            h
        })
        .collect();

    let fixed_max = prefixes.iter().map(String::len).max().unwrap_or(0)
        + image_blocks.iter().map(String::len).sum::<usize>()
        + suffix.len()
        + "</div>\n".len();
    // When the references alone exceed the target, every version still gets the same size.
    let target = target.max(fixed_max + MIN_FILL);
    let mut blocks: Vec<String> = Vec::new();
    let mut blocks_len = 0;
    loop {
        let b = html_block(&mut content, &style, kinds.f64(), redundancy);
        if fixed_max + blocks_len + b.len() + MIN_FILL > target {
            break;
        }
        blocks_len += b.len();
        blocks.push(b);
    }

    let mut out = Vec::with_capacity(metas.len());
    for (vi, prefix) in prefixes.iter().enumerate() {
        let mut doc = String::with_capacity(target + 64);
        doc.push_str(prefix);
        let mut ib = image_blocks.iter();
        for b in &blocks {
            doc.push_str(b);
            if let Some(i) = ib.next() {
                doc.push_str(i);
            }
        }
        for i in ib {
            doc.push_str(i);
        }
        let _ = vi;
        let rest = doc.len() + "</div>\n".len() + suffix.len();
        if target > rest {
            let mut fr = Rng::derive(seed, "html-filler");
            doc.push_str(&filler_html(&mut fr, target - rest));
        }
        doc.push_str("</div>\n");
        doc.push_str(&suffix);
        out.push(doc.into_bytes());
    }
    out
}

/// A lean document with the same references as [`html_versions`] would make, for targets too
/// small for the full page template: exactly `target` bytes when the references fit.
pub fn html_minimal(seed: u64, refs: &HtmlRefs, title: &str, target: usize) -> Vec<u8> {
    let mut h = String::from("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">");
    let _ = writeln!(h, "<title>{}</title>", escape_text(title));
    for u in &refs.stylesheets {
        let _ = writeln!(h, "<link rel=\"stylesheet\" href=\"{}\">", escape_attr(u));
    }
    for (u, a) in &refs.preloads {
        let _ = writeln!(
            h,
            "<link rel=\"preload\" href=\"{}\" as=\"{a}\">",
            escape_attr(u)
        );
    }
    for u in &refs.head_scripts {
        let _ = writeln!(h, "<script src=\"{}\"></script>", escape_attr(u));
    }
    h.push_str(&font_faces(&refs.fonts));
    h.push_str("</head>\n<body>\n");
    for (i, img) in refs.images.iter().enumerate() {
        h.push_str(&img_tag(img, &format!("image {}", i + 1)));
        h.push('\n');
    }
    for f in &refs.iframes {
        let _ = writeln!(
            h,
            "<iframe src=\"{}\" width=\"{}\" height=\"{}\"></iframe>",
            escape_attr(&f.url),
            f.width,
            f.height
        );
    }
    let mut tail = late_body_refs(refs);
    for u in &refs.body_scripts {
        let _ = writeln!(tail, "<script src=\"{}\"></script>", escape_attr(u));
    }
    tail.push_str("</body></html>\n");
    let rest = h.len() + tail.len();
    if target > rest {
        let mut fr = Rng::derive(seed, "html-filler");
        h.push_str(&filler_html(&mut fr, target - rest));
    }
    h.push_str(&tail);
    h.into_bytes()
}

fn filler_html(r: &mut Rng, n: usize) -> String {
    let open = "<p class=\"note\">";
    let close = "</p>\n";
    if n < open.len() + close.len() + 2 {
        return " ".repeat(n.saturating_sub(1)) + if n > 0 { "\n" } else { "" };
    }
    format!(
        "{open}{}{close}",
        fill_words(r, n - open.len() - close.len())
    )
}

fn img_tag(img: &ImgRef, alt: &str) -> String {
    let u = escape_attr(&img.url);
    let alt = escape_attr(alt);
    match img.srcset {
        Srcset::No => format!(
            "<img src=\"{u}\" width=\"{}\" height=\"{}\" alt=\"{alt}\" border=\"0\">",
            img.width, img.height
        ),
        Srcset::WithSrc => format!(
            "<img src=\"{u}\" srcset=\"{u} 1x\" width=\"{}\" height=\"{}\" alt=\"{alt}\" border=\"0\">",
            img.width, img.height
        ),
        Srcset::Only => format!(
            "<img srcset=\"{u} 1x\" width=\"{}\" height=\"{}\" alt=\"{alt}\" border=\"0\">",
            img.width, img.height
        ),
    }
}

/// A page's recurring vocabulary: its sections and CSS classes (real pages repeat theirs).
struct Style {
    sections: Vec<String>,
    classes: Vec<String>,
    year: usize,
    /// The `<font face>` and colours of the page's table layout.
    font: &'static str,
    colors: [String; 3],
}

impl Style {
    fn new(r: &mut Rng) -> Style {
        let mut sections = Vec::new();
        while sections.len() < 6 {
            let w = web_word(r).to_string();
            if !sections.contains(&w) {
                sections.push(w);
            }
        }
        let mut classes = Vec::new();
        while classes.len() < 7 {
            let w = if r.chance(0.5) {
                web_word(r).to_string()
            } else {
                slug(r, 2, "-")
            };
            if !classes.contains(&w) {
                classes.push(w);
            }
        }
        let font = *r.pick(FONT_FACES);
        let mut color = || format!("#{:06x}", r.next_u64() & 0xFF_FFFF);
        let colors = [color(), color(), color()];
        Style {
            sections,
            classes,
            year: 2003,
            font,
            colors,
        }
    }

    fn section<'a>(&'a self, r: &mut Rng) -> &'a str {
        &self.sections[r.zipf(self.sections.len(), 1.0)]
    }

    fn class<'a>(&'a self, r: &mut Rng) -> &'a str {
        &self.classes[r.zipf(self.classes.len(), 1.0)]
    }

    /// A story URL in the page's pattern: `/2003/SECTION/MM/DD/slug.words/index.html`.
    fn story_url(&self, r: &mut Rng) -> String {
        format!(
            "/{}/{}/10/{:02}/{}/index.html",
            self.year,
            self.section(r).to_ascii_uppercase(),
            r.range(10, 14),
            slug(r, 2, ".")
        )
    }
}

const FONT_FACES: &[&str] = &[
    "Verdana, Arial, Helvetica, sans-serif",
    "Arial, Helvetica, sans-serif",
    "Arial, Helvetica",
    "Geneva, Arial, sans-serif",
];

/// Link labels real pages repeat many times over.
const LINK_LABELS: &[&str] = &[
    "Full story",
    "Video",
    "Photos",
    "More",
    "Click here",
    "Details",
    "Buy now",
    "Quote",
    "Discuss",
    "E-mail this",
    "Print",
    "Audio",
];

/// Of the blocks that are not template, the share that are tracking and ad markup, minified
/// code or sprite offsets (random ids and numbers that gzip can do little with) rather than
/// prose, at redundancy 0; it falls linearly to 0 at redundancy 1.
const ENTROPY_SHARE: f64 = 1.0;

/// What a block of generated text is cut from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum BlockKind {
    Template,
    Entropy,
    Prose,
}

/// The kind of a block from its own uniform draw `u`: template below `redundancy`, then the
/// entropy band, then prose. A block only ever moves towards template as the redundancy grows,
/// so the gzip ratio grows smoothly with it (what the calibration's bisection needs).
fn block_kind(u: f64, redundancy: f64) -> BlockKind {
    let red = redundancy.clamp(0.0, 1.0);
    if u < red {
        BlockKind::Template
    } else if u < red + (1.0 - red) * ENTROPY_SHARE * (1.0 - red) {
        BlockKind::Entropy
    } else {
        BlockKind::Prose
    }
}

/// One block of the page body: template markup with probability `redundancy`, otherwise
/// prose, link lists and tables, or tracking markup (`u` decides, see [`block_kind`]).
fn html_block(r: &mut Rng, st: &Style, u: f64, redundancy: f64) -> String {
    match block_kind(u, redundancy) {
        BlockKind::Template => template_block(r, st),
        BlockKind::Entropy => tracking_block(r, st),
        BlockKind::Prose => text_block(r, st),
    }
}

/// A 2003 table-layout box: a coloured section header and rows of links, every cell wrapped in
/// the same `<font>` tag.
fn template_block(r: &mut Rng, st: &Style) -> String {
    let f = st.font;
    let [c0, c1, _] = &st.colors;
    let sect = st.section(r);
    let mut b = format!(
        "<table width=\"100%\" border=\"0\" cellspacing=\"0\" cellpadding=\"0\">\n<tr><td bgcolor=\"{c0}\" class=\"{}\"><font face=\"{f}\" size=\"2\" color=\"#ffffff\"><b>&nbsp;{}</b></font></td></tr>\n<tr><td><table width=\"100%\" border=\"0\" cellspacing=\"0\" cellpadding=\"2\">\n",
        st.class(r),
        capitalize(sect)
    );
    for _ in 0..r.range(3, 8) {
        let n = r.range(2, 5);
        let words: Vec<String> = (0..n).map(|_| word(r).to_string()).collect();
        let _ = write!(
            b,
            "<tr valign=\"top\"><td width=\"10\"><font face=\"{f}\" size=\"1\" color=\"{c1}\">&#149;</font></td><td><font face=\"{f}\" size=\"1\"><a href=\"{}\" class=\"{}\">{}</a></font>",
            st.story_url(r),
            st.class(r),
            capitalize(&words.join(" "))
        );
        if r.chance(0.4) {
            let _ = write!(
                b,
                "&nbsp;<font face=\"{f}\" size=\"1\" color=\"{c1}\">(<a href=\"/{}/\">{}</a>)</font>",
                sect,
                r.pick(LINK_LABELS)
            );
        }
        b.push_str("</td></tr>\n");
    }
    let _ = write!(
        b,
        "<tr><td colspan=\"2\" align=\"right\"><font face=\"{f}\" size=\"1\"><a href=\"/{sect}/\"><b>More {sect} &raquo;</b></a></font></td></tr>\n</table></td></tr></table>\n"
    );
    b
}

/// Ad and tracking markup: click-through links and counters with random ids.
fn tracking_block(r: &mut Rng, st: &Style) -> String {
    let mut b = String::from("<div class=\"ad\">");
    for _ in 0..r.range(1, 3) {
        let _ = write!(
            b,
            "<a href=\"/adclick/{};sz={};tile={};ord={}?c={:x}{:x}\" target=\"_top\">{}</a> ",
            st.section(r),
            r.pick(&["468x60", "120x600", "300x250", "728x90", "88x31"]),
            r.range(1, 9),
            r.next_u64() % 10_000_000_000,
            r.next_u64(),
            r.next_u64() & 0xFFFF_FFFF,
            headline(r)
        );
    }
    let _ = writeln!(
        b,
        "<span class=\"hit\" id=\"h{:x}\" title=\"{:x}{:x}\"></span></div>",
        r.next_u64() & 0xFF_FFFF,
        r.next_u64(),
        r.next_u64()
    );
    b
}

/// One block of page text: a story, a link list, a table or a box.
fn text_block(r: &mut Rng, st: &Style) -> String {
    let mut b = String::new();
    match r.below(12) {
        0..=4 => {
            let _ = writeln!(
                b,
                "<div class=\"story\"><h3><a href=\"{}\">{}</a></h3>",
                st.story_url(r),
                headline(r)
            );
            if r.chance(0.4) {
                let _ = writeln!(
                    b,
                    "<p class=\"byline\">By {} {}, Staff Writer</p>",
                    name(r),
                    name(r)
                );
            }
            for _ in 0..r.range(1, 2) {
                let _ = writeln!(b, "<p>{}</p>", paragraph(r, 1, 3));
            }
            let _ = writeln!(
                b,
                "<p class=\"more\"><a href=\"/{}/\">Full story</a></p></div>",
                st.section(r)
            );
        }
        5..=8 => {
            let _ = write!(
                b,
                "<div class=\"{}\"><h4>{}</h4>\n<ul>\n",
                st.class(r),
                capitalize(st.section(r))
            );
            for _ in 0..r.range(4, 9) {
                let _ = writeln!(
                    b,
                    "<li class=\"{}\"><a href=\"{}\">{}</a></li>",
                    st.class(r),
                    st.story_url(r),
                    headline(r)
                );
            }
            b.push_str("</ul></div>\n");
        }
        9..=10 => {
            let _ = write!(
                b,
                "<table class=\"{}\" cellpadding=\"2\" cellspacing=\"0\" border=\"0\" width=\"100%\">\n<tr><th>{}</th><th>Last</th><th>Change</th><th>%</th></tr>\n",
                st.class(r),
                capitalize(st.section(r))
            );
            for _ in 0..r.range(3, 6) {
                let last = r.uniform(10.0, 12000.0);
                let ch = r.uniform(-120.0, 120.0);
                let _ = writeln!(
                    b,
                    "<tr class=\"{}\"><td><a href=\"/quote?s={}\">{}</a></td><td>{:.2}</td><td>{:+.2}</td><td>{:+.2}%</td></tr>",
                    if r.chance(0.5) { "odd" } else { "even" },
                    alnum(word(r)).to_ascii_uppercase(),
                    capitalize(word(r)),
                    last,
                    ch,
                    ch / last * 100.0
                );
            }
            b.push_str("</table>\n");
        }
        _ => {
            let _ = write!(
                b,
                "<div class=\"weather\"><b>{}</b> {}&deg;F {} <a href=\"/weather/?zip={:05}\">Forecast</a>",
                name(r),
                r.range(20, 99),
                capitalize(word(r)),
                r.range(1000, 99999)
            );
            let _ = writeln!(
                b,
                " <span class=\"small\">{}</span></div>",
                sentence(r, 4, 10)
            );
        }
    }
    b
}

/// A small advertisement document for an `<iframe>`: one image (if any) behind a click-through
/// link, a little script, exactly `target` bytes when that fits.
pub fn ad_frame(seed: u64, img: Option<&ImgRef>, click: &str, target: usize) -> Vec<u8> {
    let mut r = Rng::derive(seed, "ad-frame");
    let mut s = String::from("<html>\n<head>\n<title>Advertisement</title>\n");
    let _ = writeln!(
        s,
        "<script type=\"text/javascript\">var adId = {}; var adSlot = \"{}\"; function {}() {{ window.top.location = \"{}?id=\" + adId; return false; }}</script>",
        r.range(10_000, 99_999),
        slug(&mut r, 2, "-"),
        ident(&mut r),
        escape_attr(click)
    );
    s.push_str(
        "</head>\n<body leftmargin=\"0\" topmargin=\"0\" marginwidth=\"0\" marginheight=\"0\">\n",
    );
    let _ = write!(s, "<a href=\"{}\" target=\"_top\">", escape_attr(click));
    match img {
        Some(i) => s.push_str(&img_tag(i, &headline(&mut r))),
        None => s.push_str(&headline(&mut r)),
    }
    s.push_str("</a>\n");
    let close = "</body>\n</html>\n";
    let t = target.saturating_sub(close.len());
    pad_comment(&mut s, seed, t, "<!-- ", " -->\n");
    s.push_str(close);
    s.into_bytes()
}

// ---------------------------------------------------------------------------------------------
// CSS

/// An image a stylesheet uses as a background.
#[derive(Clone, Debug)]
pub struct CssImage {
    pub url: String,
    pub width: u32,
    pub height: u32,
    /// Which of its page's background images this is (0-based): each gets its own
    /// `:nth-child` rule, so every one is shown by some element and a real browser, which
    /// fetches a background only when an element shows it, fetches them all.
    pub slot: usize,
}

const ELEMENTS: &[&str] = &[
    "body", "a", "p", "h1", "h2", "h3", "h4", "ul", "li", "td", "th", "table", "div", "span",
    "img", "form", "input", "b", "em", "strong", "small",
];
const PSEUDO: &[&str] = &[":hover", ":link", ":visited", ":active", ":first-child"];
const FONTS: &[&str] = &[
    "Arial, Helvetica, sans-serif",
    "Verdana, Arial, sans-serif",
    "Georgia, \"Times New Roman\", serif",
    "Tahoma, Geneva, sans-serif",
    "\"Trebuchet MS\", Arial, sans-serif",
    "\"Courier New\", monospace",
];

fn selector(r: &mut Rng) -> String {
    match r.below(8) {
        0 => format!("#{}", web_word(r)),
        1 => format!(".{}", slug(r, 2, "-")),
        2 => r.pick(ELEMENTS).to_string(),
        3 => format!("#{} .{} {}", web_word(r), web_word(r), r.pick(ELEMENTS)),
        4 => format!(".{} a{}", slug(r, 2, "-"), r.pick(PSEUDO)),
        5 => format!(
            "#{} {}, #{} {}",
            web_word(r),
            r.pick(ELEMENTS),
            web_word(r),
            r.pick(ELEMENTS)
        ),
        6 => format!("{}.{}", r.pick(ELEMENTS), web_word(r)),
        _ => format!("#{}-{} > {}", web_word(r), web_word(r), r.pick(ELEMENTS)),
    }
}

fn declaration(r: &mut Rng, palette: &[String]) -> String {
    let c = r.pick(palette).clone();
    match r.below(22) {
        0 => format!("color: {c}"),
        1 => format!("background-color: {c}"),
        2 => format!("font-family: {}", r.pick(FONTS)),
        3 => format!("font-size: {}px", r.range(9, 28)),
        4 => format!("font-weight: {}", r.pick(&["bold", "normal", "600"])),
        5 => format!("margin: {}px {}px", r.range(0, 20), r.range(0, 20)),
        6 => format!(
            "padding: {}px {}px {}px {}px",
            r.range(0, 12),
            r.range(0, 12),
            r.range(0, 12),
            r.range(0, 12)
        ),
        7 => format!(
            "border{}: {}px {} {c}",
            r.pick(&["", "-top", "-bottom", "-left", "-right"]),
            r.range(1, 3),
            r.pick(&["solid", "dotted", "dashed"])
        ),
        8 => format!("width: {}{}", r.range(10, 980), r.pick(&["px", "%", "px"])),
        9 => format!("height: {}px", r.range(8, 400)),
        10 => format!("text-decoration: {}", r.pick(&["none", "underline"])),
        11 => format!("text-align: {}", r.pick(&["left", "center", "right"])),
        12 => format!("float: {}", r.pick(&["left", "right", "none"])),
        13 => format!(
            "display: {}",
            r.pick(&["block", "inline", "none", "inline-block"])
        ),
        14 => format!("line-height: {}.{}em", r.range(1, 2), r.range(0, 9)),
        15 => format!("position: {}", r.pick(&["relative", "absolute", "static"])),
        16 => format!("top: {}px", r.range(0, 200)),
        17 => format!("left: {}px", r.range(0, 600)),
        18 => format!("z-index: {}", r.range(1, 100)),
        19 => format!("list-style: {}", r.pick(&["none", "disc", "square"])),
        20 => format!("overflow: {}", r.pick(&["hidden", "auto", "visible"])),
        _ => format!("letter-spacing: {}px", r.range(0, 3)),
    }
}

/// A stylesheet's house style: the few declaration blocks it repeats for every section (2003
/// sheets spelled out the same font, size and colour per selector).
struct CssTheme {
    sections: Vec<String>,
    blocks: Vec<String>,
}

impl CssTheme {
    fn new(r: &mut Rng, palette: &[String]) -> CssTheme {
        let sections = (0..r.range(4, 8)).map(|_| alnum(web_word(r))).collect();
        let font = *r.pick(FONTS);
        let blocks = (0..6)
            .map(|_| {
                format!(
                    "font-family: {font}; font-size: {}px; color: {}; text-decoration: none;{}",
                    r.range(10, 13),
                    r.pick(palette),
                    if r.chance(0.5) {
                        " font-weight: bold;"
                    } else {
                        ""
                    }
                )
            })
            .collect();
        CssTheme { sections, blocks }
    }

    fn rule(&self, r: &mut Rng) -> String {
        let s = r.pick(&self.sections);
        let part = *r.pick(&["Head", "Link", "Item", "Text", "Nav", "Box"]);
        let sel = match r.below(3) {
            0 => format!(".{s}{part} a:link, .{s}{part} a:visited"),
            1 => format!(".{s}{part}, .{s}{part} td"),
            _ => format!("#{s} .{s}{part} a:hover"),
        };
        let extra = match r.below(3) {
            0 => format!(" margin: {}px {}px;", r.below(12), r.below(12)),
            1 => format!(" width: {}px;", r.range(40, 760)),
            _ => String::new(),
        };
        format!("{sel} {{ {}{extra} }}\n", r.pick(&self.blocks))
    }
}

/// Sprite offsets: one icon class per line, positions all different.
fn sprite_rules(r: &mut Rng) -> String {
    let mut s = String::new();
    for _ in 0..r.range(2, 5) {
        let _ = writeln!(
            s,
            ".i{:x}{{background-position:-{}px -{}px;width:{}px}}",
            r.next_u64() & 0xF_FFFF,
            r.below(900),
            r.below(700),
            r.range(8, 64)
        );
    }
    s
}

/// A stylesheet of exactly `target` bytes (when its imports and image rules fit).
pub fn css_sheet(
    seed: u64,
    imports: &[String],
    images: &[CssImage],
    target: usize,
    redundancy: f64,
) -> Vec<u8> {
    let mut r = Rng::derive(seed, "css");
    let palette: Vec<String> = (0..r.range(5, 9))
        .map(|_| format!("#{:06x}", r.next_u64() & 0xFF_FFFF))
        .collect();
    let mut s = String::new();
    let _ = writeln!(
        s,
        "/* {} styles, rev {} */",
        capitalize(web_word(&mut r)),
        r.range(100, 999)
    );
    for u in imports {
        let _ = writeln!(s, "@import url(\"{u}\");");
    }
    for img in images {
        let _ = writeln!(
            s,
            "*:nth-child({}) {{ background: url({}) {} {}px {}px; min-width: {}px; min-height: {}px; }}",
            img.slot + 1,
            img.url,
            r.pick(&["no-repeat", "repeat-x", "repeat-y"]),
            r.range(0, 10),
            r.range(0, 10),
            img.width,
            img.height
        );
    }
    const FILL_MIN: usize = 8;
    let theme = CssTheme::new(&mut r, &palette);
    let mut kinds = Rng::derive(seed, "css-kinds");
    loop {
        let rule = match block_kind(kinds.f64(), redundancy) {
            BlockKind::Template => theme.rule(&mut r),
            BlockKind::Entropy => sprite_rules(&mut r),
            BlockKind::Prose => {
                let mut rule = format!("{} {{", selector(&mut r));
                for _ in 0..r.range(1, 6) {
                    let _ = write!(rule, " {};", declaration(&mut r, &palette));
                }
                rule.push_str(" }\n");
                rule
            }
        };
        if s.len() + rule.len() + FILL_MIN > target {
            break;
        }
        s.push_str(&rule);
    }
    if target > s.len() {
        let n = target - s.len();
        if n >= FILL_MIN {
            let mut fr = Rng::derive(seed, "css-fill");
            let _ = writeln!(s, "/* {} */", fill_words(&mut fr, n - 7));
        } else {
            s.push_str(&" ".repeat(n - 1));
            s.push('\n');
        }
    }
    s.into_bytes()
}

// ---------------------------------------------------------------------------------------------
// JavaScript

fn js_function(r: &mut Rng) -> String {
    let name = ident(r);
    let a = alnum(web_word(r));
    let b = alnum(word(r));
    let b = if b == a || b.is_empty() {
        "opts".to_string()
    } else {
        b
    };
    let mut f = format!("function {name}({a}, {b}) {{\n");
    for _ in 0..r.range(1, 5) {
        match r.below(8) {
            0 => {
                let _ = writeln!(
                    f,
                    "  var {} = document.getElementById(\"{}\");",
                    alnum(web_word(r)),
                    slug(r, 2, "-")
                );
            }
            1 => {
                let v = alnum(web_word(r));
                let _ = writeln!(
                    f,
                    "  if ({a} && {a}.style) {{ {a}.style.display = \"{}\"; }}",
                    r.pick(&["none", "block", "inline"])
                );
                let _ = writeln!(f, "  var {v} = {} + {};", r.range(0, 500), b);
            }
            2 => {
                let _ = writeln!(
                    f,
                    "  for (var i = 0; i < {a}.length; i++) {{\n    if ({a}[i] == {b}) {{ return i; }}\n  }}"
                );
            }
            3 => {
                let _ = writeln!(
                    f,
                    "  {b} = {b} || \"{}\";\n  document.cookie = \"{}=\" + escape({b}) + \"; path=/\";",
                    alnum(word(r)),
                    alnum(web_word(r))
                );
            }
            4 => {
                let _ = writeln!(
                    f,
                    "  window.setTimeout(function() {{ {}({a}); }}, {});",
                    ident(r),
                    r.range(1, 60) * 100
                );
            }
            5 => {
                let _ = writeln!(
                    f,
                    "  var url = \"/{}/{}?id=\" + {a} + \"&t=\" + new Date().getTime();",
                    slug(r, 1, ""),
                    slug(r, 1, "")
                );
            }
            6 => {
                let _ = writeln!(
                    f,
                    "  if (navigator.userAgent.indexOf(\"{}\") != -1) {{ {b} = {}; }}",
                    r.pick(&["MSIE", "Gecko", "Opera", "Safari", "Mozilla/4"]),
                    r.range(0, 9)
                );
            }
            _ => {
                let _ = writeln!(
                    f,
                    "  // {}\n  {a}.innerHTML = \"{}\";",
                    sentence(r, 4, 10),
                    headline(r)
                );
            }
        }
    }
    let _ = writeln!(
        f,
        "  return {};\n}}",
        r.pick(&["true", "false", "null", &a, &b])
    );
    f
}

/// A `document.write` menu: entries in arrays, written out as table rows (2003 navigation).
fn js_menu(r: &mut Rng, font: &str) -> String {
    let name = format!("menu{}", capitalize(&alnum(web_word(r))));
    let mut f = format!("var {name} = new Array();\n");
    for i in 0..r.range(3, 8) {
        let w = alnum(web_word(r));
        let _ = writeln!(
            f,
            "{name}[{i}] = new Array(\"{}\", \"/{}/\", \"{}\");",
            capitalize(&w),
            w,
            r.pick(&["nav", "navOn", "navSub"])
        );
    }
    let _ = write!(
        f,
        "function write{}() {{\n  for (var i = 0; i < {name}.length; i++) {{\n    document.write('<tr><td class=\"' + {name}[i][2] + '\"><font face=\"{font}\" size=\"1\"><a href=\"' + {name}[i][1] + '\">' + {name}[i][0] + '</a></font></td></tr>');\n  }}\n}}\n",
        capitalize(&name)
    );
    f
}

/// Minified code: short random names, packed numbers and keys (what gzip gains least on).
fn js_minified(r: &mut Rng) -> String {
    let id = |r: &mut Rng| {
        let c = (b'a' + r.below(26) as u8) as char;
        format!("{c}{}", r.below(100))
    };
    let (f, a, b, c) = (id(r), id(r), id(r), id(r));
    let mut s = format!("function {f}({a},{b}){{var {c}=[");
    for i in 0..r.range(12, 40) {
        if i > 0 {
            s.push(',');
        }
        let _ = write!(s, "{}", r.next_u64() % 10_000_000);
    }
    let _ = writeln!(
        s,
        "];for(var i=0;i<{c}.length;i++)if({c}[i]=={a})return \"{:x}\"+{b};return \"{:x}\"}}",
        r.next_u64() & 0xFFFF_FFFF,
        r.next_u64() & 0xFF_FFFF
    );
    s
}

/// A script of exactly `target` bytes.
pub fn js_script(seed: u64, target: usize, redundancy: f64) -> Vec<u8> {
    let mut r = Rng::derive(seed, "js");
    let mut s = format!(
        "/* {} {}.{} */\nvar {} = {{ version: \"{}.{}\", section: \"{}\", zone: {} }};\n",
        capitalize(web_word(&mut r)),
        r.range(1, 5),
        r.range(0, 20),
        ident(&mut r),
        r.range(1, 5),
        r.range(0, 20),
        web_word(&mut r),
        r.range(100, 9999)
    );
    let font = *r.pick(FONT_FACES);
    let mut kinds = Rng::derive(seed, "js-kinds");
    loop {
        let f = match block_kind(kinds.f64(), redundancy) {
            BlockKind::Template => js_menu(&mut r, font),
            BlockKind::Entropy => js_minified(&mut r),
            BlockKind::Prose => js_function(&mut r),
        };
        if s.len() + f.len() + 8 > target {
            break;
        }
        s.push_str(&f);
    }
    pad_comment(&mut s, seed, target, "/* ", " */\n");
    s.into_bytes()
}

fn pad_comment(s: &mut String, seed: u64, target: usize, open: &str, close: &str) {
    if target <= s.len() {
        return;
    }
    let n = target - s.len();
    if n > open.len() + close.len() {
        let mut fr = Rng::derive(seed, "fill");
        s.push_str(open);
        s.push_str(&fill_words(&mut fr, n - open.len() - close.len()));
        s.push_str(close);
    } else {
        s.push_str(&" ".repeat(n - 1));
        s.push('\n');
    }
}

/// A JSON document of exactly `target` bytes (when target ≥ 12).
pub fn json_text(seed: u64, target: usize) -> Vec<u8> {
    let mut r = Rng::derive(seed, "json");
    let mut s = String::from("{\"items\":[");
    let mut first = true;
    loop {
        let item = format!(
            "{}{{\"id\":{},\"title\":\"{}\",\"url\":\"/{}/{}\",\"score\":{:.3},\"tags\":[\"{}\",\"{}\"]}}",
            if first { "" } else { "," },
            r.range(1000, 999_999),
            headline(&mut r),
            slug(&mut r, 1, ""),
            slug(&mut r, 3, "-"),
            r.f64() * 100.0,
            web_word(&mut r),
            web_word(&mut r)
        );
        if s.len() + item.len() + 14 > target {
            break;
        }
        first = false;
        s.push_str(&item);
    }
    s.push_str("],\"note\":\"");
    let close = "\"}\n";
    if target > s.len() + close.len() {
        let n = target - s.len() - close.len();
        let mut fr = Rng::derive(seed, "fill");
        s.push_str(&fill_words(&mut fr, n));
    }
    s.push_str(close);
    s.into_bytes()
}

/// Plain prose of exactly `target` bytes.
pub fn plain_text(seed: u64, target: usize) -> Vec<u8> {
    let mut r = Rng::derive(seed, "text");
    let mut s = String::new();
    while s.len() < target {
        s.push_str(&paragraph(&mut r, 3, 7));
        s.push_str("\n\n");
    }
    s.truncate(target);
    s.into_bytes()
}

/// An SVG drawing of exactly `target` bytes (when target ≥ ~200).
pub fn svg_image(seed: u64, target: usize) -> Vec<u8> {
    let mut r = Rng::derive(seed, "svg");
    let (w, h) = (r.range(16, 400), r.range(16, 300));
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\">\n"
    );
    let close = "</svg>\n";
    loop {
        let mut e = String::new();
        let fill = format!("#{:06x}", r.next_u64() & 0xFF_FFFF);
        match r.below(3) {
            0 => {
                let _ = write!(
                    e,
                    "<path fill=\"{fill}\" d=\"M{} {}",
                    r.below(w),
                    r.below(h)
                );
                for _ in 0..r.range(3, 12) {
                    let _ = write!(
                        e,
                        " {}{:.1} {:.1}",
                        r.pick(&["L", "l", "Q", "C", "c"]),
                        r.uniform(0.0, w as f64),
                        r.uniform(0.0, h as f64)
                    );
                }
                e.push_str("z\"/>\n");
            }
            1 => {
                let _ = writeln!(
                    e,
                    "<circle cx=\"{}\" cy=\"{}\" r=\"{}\" fill=\"{fill}\"/>",
                    r.below(w),
                    r.below(h),
                    r.range(1, 40)
                );
            }
            _ => {
                let _ = writeln!(
                    e,
                    "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" rx=\"{}\" fill=\"{fill}\"/>",
                    r.below(w),
                    r.below(h),
                    r.range(1, w),
                    r.range(1, h),
                    r.range(0, 6)
                );
            }
        }
        if s.len() + e.len() + close.len() + 12 > target {
            break;
        }
        s.push_str(&e);
    }
    let t = target.saturating_sub(close.len());
    pad_comment(&mut s, seed, t, "<!-- ", " -->\n");
    s.push_str(close);
    s.into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gzip_ratio(b: &[u8]) -> f64 {
        b.len() as f64 / gzip_len(b) as f64
    }

    #[test]
    fn redundancy_orders_compressibility_and_the_default_is_a_median_page() {
        let meta = HtmlMeta {
            site: "Example".into(),
            title: "Example".into(),
            headline: "A Short One".into(),
            time: "10:42 a.m. EDT".into(),
        };
        let html = |red| {
            gzip_ratio(
                &html_versions(
                    3,
                    &HtmlRefs::default(),
                    std::slice::from_ref(&meta),
                    40_000,
                    red,
                )[0],
            )
        };
        let css = |red| gzip_ratio(&css_sheet(4, &[], &[], 40_000, red));
        let js = |red| gzip_ratio(&js_script(5, 40_000, red));
        for (what, f) in [
            ("html", &html as &dyn Fn(f64) -> f64),
            ("css", &css),
            ("js", &js),
        ] {
            let (lo, mid, hi) = (f(0.0), f(0.5), f(1.0));
            eprintln!("{what}: ×{lo:.2} ×{mid:.2} ×{hi:.2}");
            assert!(lo < mid && mid < hi, "{what}: ×{lo:.2} ×{mid:.2} ×{hi:.2}");
        }
        // 000 Table 3 spans ×2.45–5.2 (median ×4.36); real front pages ×4.1–6.5.
        assert!(html(0.0) < 3.2, "{}", html(0.0));
        assert!(html(1.0) > 5.5, "{}", html(1.0));
        assert!(
            (3.9..=4.9).contains(&html(DEFAULT_REDUNDANCY)),
            "{}",
            html(DEFAULT_REDUNDANCY)
        );
        assert!(
            (3.9..=4.9).contains(&css(DEFAULT_REDUNDANCY)),
            "{}",
            css(DEFAULT_REDUNDANCY)
        );
        assert!(
            (3.6..=4.9).contains(&js(DEFAULT_JS_REDUNDANCY)),
            "{}",
            js(DEFAULT_JS_REDUNDANCY)
        );
    }

    #[test]
    fn exact_sizes() {
        for &t in &[200usize, 1000, 5000, 33_333] {
            for red in [0.0, DEFAULT_REDUNDANCY, 1.0] {
                assert_eq!(css_sheet(1, &[], &[], t, red).len(), t);
                assert_eq!(js_script(2, t, red).len(), t);
            }
            assert_eq!(json_text(3, t).len(), t);
            assert_eq!(plain_text(4, t).len(), t);
            assert_eq!(svg_image(5, t).len(), t);
        }
        let refs = HtmlRefs::default();
        let metas = vec![
            HtmlMeta {
                site: "Example".into(),
                title: "Example".into(),
                headline: "A Short One".into(),
                time: "10:42 a.m. EDT".into(),
            },
            HtmlMeta {
                site: "Example".into(),
                title: "Example".into(),
                headline: "A Much Longer Headline Than the First One Was".into(),
                time: "11:07 a.m. EDT".into(),
            },
        ];
        for &t in &[3000usize, 20_000, 60_000] {
            for red in [0.0, DEFAULT_REDUNDANCY, 1.0] {
                for d in html_versions(9, &refs, &metas, t, red) {
                    assert_eq!(d.len(), t);
                }
            }
        }
    }
}
