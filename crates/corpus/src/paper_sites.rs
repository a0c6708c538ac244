//! The built-in `paper-sites` corpus: pages generated, deterministically from a seed, from the
//! page tables of the papers (DESIGN §7.3).
//!
//! | pages | source | what is matched |
//! |---|---|---|
//! | `altavista, mail, yahoo, go, bbc, amazon, aol, sourceforge, fortunecity, cnn` | 000 Table 1 | domains, object count, total bytes and the largest object exactly; the mean follows |
//! | `top10-<name>` | 003 Table 6 | objects, domains, total |
//! | `session-yahoo`, `session-cnn`, `session-britannica` | 002 §4.1 | objects, domains, total |
//! | `static-1`, `static-2` | 001 Tables 1–2 | the HTML size and the count and size range of each image type |
//! | `preget-big`, `preget-small` | 004 §5.2 | 6 pictures > 100 KB + 8 > 50 KB; 24 pictures < 1 KB + 28 < 5 KB |
//!
//! Conventions: KB = 1000 bytes; a page's object count includes the root document (003 lists
//! Google with 2 objects: the page and its logo); for 000 Table 1 the largest object is the
//! root HTML. Text objects (HTML, CSS, JS) are generated to exact sizes and absorb the few per
//! cent by which fitted images miss their targets, so a 000/002/003 page's version-0 total is
//! exact whenever it has a text object that may grow (all but the smallest pages).
//! 004's "total data" counts response headers too: the body total is the tabled total less
//! ~250 bytes per response.
//!
//! Structure of a page: the root HTML links 1–3 stylesheets (the first `@import`s a second on
//! larger pages), loads scripts in the head and at the end of the body (one announced by
//! `<link rel=preload>`), shows images with `<img>` (some with `srcset="U 1x"`, one with a
//! srcset only), and holds one or two ad `<iframe>`s whose documents show one more image.
//! Some images are backgrounds referenced only from the stylesheets (two or three levels of
//! discovery). References are relative on the same host and absolute `http://host/path`
//! otherwise. The 001 and 004 pages are only HTML and images, as their tables say.
//!
//! Hosts: most of a role's objects go to its first CDN-like host and the rest spread, except
//! on cnn, whose hosts 000 Figure 3 shows: the page with its stylesheets and scripts on `www`,
//! every image but the ads' and a beacon on `i.cnn.net`, and ad and tracking hosts.
//!
//! Versions: every page has [`VERSIONS`] versions. The root HTML changes its time of day and
//! headline (and nothing else but the cut of a filler paragraph, so its size stays exact); the
//! top story's image is re-rendered with other content at the same dimensions and quality;
//! every other object has one version (identical bytes on every visit).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::images::{self, ImageKind, Picture};
use crate::model::*;
use crate::rng::{hash_str, Rng};
use crate::scan::{discover, relative_ref};
use crate::store::{Corpus, CorpusError, CorpusWriter};
use crate::text::{self, CssImage, HtmlMeta, HtmlRefs, IframeRef, ImgRef, Srcset};

/// The corpus name.
pub const NAME: &str = "paper-sites";
/// Versions per page.
pub const VERSIONS: usize = 3;
/// Bytes per KB in the papers' tables (as taken here).
pub const KB: f64 = 1000.0;

const HTML_TYPE: &str = "text/html; charset=utf-8";
const HTML_CACHE: &str = "max-age=60";
const STATIC_CACHE: &str = "max-age=2592000";
/// 2003-10-14 09:00:00 GMT: when the pages were "captured".
const EPOCH: u64 = 1_066_122_000;

/// One page's table row.
#[derive(Clone, Debug)]
pub struct PageSpec {
    pub id: String,
    pub source: String,
    /// Site label used in titles (`CNN.com`).
    pub label: String,
    /// Registered domain the virtual domains live under (`cnn.com`).
    pub base: String,
    /// Path prefix of the page's URLs (`""` or `/top10`), so pages on the same domains never
    /// share a URL.
    pub prefix: String,
    pub objects: usize,
    pub domains: usize,
    /// Body bytes of version 0 (target).
    pub total: u64,
    /// The largest object (000 Table 1), made the root HTML.
    pub max: Option<u64>,
    /// Typed compositions (001, 004): the root HTML's size and groups of images.
    pub typed: Option<Typed>,
    /// Share of the bytes in HTML, CSS and JS (000 Table 3's "fixed-fidelity" content); the
    /// rest is images. `None` for typed pages, whose composition is given.
    pub text_share: Option<f64>,
    /// The hosts the papers show for this page, in place of the generic spread: each
    /// `(name prefix, role, under .net)` after `www`, and every object of a role on its
    /// role's host (see [`known_hosts`]). `None` for the generic spread.
    pub hosts: Option<&'static [(&'static str, &'static str, bool)]>,
    /// How many of the page's objects are smaller than 1 KB, where a paper says (see
    /// [`under_1kb`]); `None`: as the log-normal spread of the images falls.
    pub under_1kb: Option<usize>,
    /// How much gzip shrinks the page's HTML, CSS and JS together (000 Table 3's lossless
    /// column; the median of its four sites for other pages). The generator calibrates the
    /// text's template redundancy to it.
    pub text_gzip: f64,
}

/// 000 Table 3: fixed-fidelity (HTML/CSS/JS) KB, the same after gzip, and variable-fidelity
/// (image) KB of the four sites the paper studies in depth.
const TABLE3: [(&str, f64, f64, f64); 4] = [
    ("mail", 11.8, 3.0, 17.4),
    ("yahoo", 36.8, 7.1, 24.9),
    ("amazon", 45.4, 9.5, 46.0),
    ("cnn", 160.0, 65.3, 35.4),
];

/// The text share of a 000 Table 3 site, or the pooled share of all four (67 %) for pages the
/// papers give no split for: Table 3 is the only measured split of 2003 pages we have.
fn text_share(id: &str) -> f64 {
    match TABLE3.iter().find(|t| t.0 == id) {
        Some((_, text, _, img)) => text / (text + img),
        None => {
            let text: f64 = TABLE3.iter().map(|t| t.1).sum();
            let img: f64 = TABLE3.iter().map(|t| t.3).sum();
            text / (text + img)
        }
    }
}

/// The gzip ratio of a 000 Table 3 site's text, or the median of the four (×4.36) for other
/// pages: the pooled ratio (×3.0) is cnn.com's alone, whose 160 KB of text shrank least; real
/// front pages in ../shared/data/pages shrink ×4.1–6.5.
fn text_gzip(id: &str) -> f64 {
    match TABLE3.iter().find(|t| t.0 == id) {
        Some((_, text, packed, _)) => text / packed,
        None => {
            let mut r: Vec<f64> = TABLE3.iter().map(|t| t.1 / t.2).collect();
            r.sort_by(f64::total_cmp);
            (r[1] + r[2]) / 2.0
        }
    }
}

#[derive(Clone, Debug)]
pub struct Typed {
    pub html: u64,
    pub groups: Vec<Group>,
}

#[derive(Clone, Debug)]
pub struct Group {
    pub kind: ImageKind,
    pub count: usize,
    pub min: u64,
    pub max: u64,
    pub total: u64,
}

/// Of the objects of a role with several candidate hosts, the share put on the first one.
const PRIMARY_SHARE: f64 = 0.85;
/// The smallest CSS, JS or frame object planned.
const MIN_TEXT: u64 = 600;

/// cnn.com's hosts as 000 Figure 3's timeline of its download shows them: the page, its
/// stylesheets and scripts on `www2.cnn.com`; its images on `i2.cnn.net`; the rest ad and
/// tracking servers (`ads.web.aol.com`, an Akamai host, `216.39.69.70`, `ping.nnselect.com`).
/// The generic spread puts a quarter of the images elsewhere and the text on a host of its
/// own, which loaded cnn in 94–99 s against 000 Table 1's 196.3 s, the one page of the ten
/// outside 0.7–1.5× (aol.com, as big on 8 hosts, took 80.0 s there), so how cnn's objects sat
/// on its hosts is part of what made it slow: on these hosts its 54 small images queue on the
/// browser's 2 connections to one host, and it loads in about 130 s (×0.66).
const CNN_HOSTS: [(&str, &str, bool); 5] = [
    ("i", "image", true),
    ("ads", "ad", false),
    ("banners", "adimage", false),
    ("promo", "ad", false),
    ("stats", "beacon", false),
];

/// The hosts the papers show for a 000 Table 1 page, if they show them.
fn known_hosts(id: &str) -> Option<&'static [(&'static str, &'static str, bool)]> {
    match id {
        "cnn" => Some(&CNN_HOSTS),
        _ => None,
    }
}

/// How many of a 000 Table 1 page's `n` objects are under 1 KB, where 000 says: of cnn's,
/// "nearly 60 %" (§4.1.1) and "more than 60 %" (§4.1.2), so 60 % (and "more than 70 %" under
/// 2 KB, which follows). A free log-normal spread of cnn's 35 KB of images over 57 of them put
/// 73 % under 1 KB.
fn under_1kb(id: &str, n: usize) -> Option<usize> {
    match id {
        "cnn" => Some((n as f64 * 0.6).round() as usize),
        _ => None,
    }
}

/// Where a page's domain count departs from 000 Table 1, and why, or whose hosts the papers show.
fn domains_note(id: &str) -> &'static str {
    match id {
        "yahoo" => " (000 §3's \"4 servers\"; Table 1 prints 6, 002 §4.1 counts 3)",
        "cnn" => " (the hosts 000 Figure 3 shows)",
        _ => "",
    }
}

fn kb(x: f64) -> u64 {
    (x * KB).round() as u64
}

/// Every page of the corpus, in manifest order.
pub fn specs() -> Vec<PageSpec> {
    let mut v = Vec::new();
    // 000 Table 1: site, domains, objects, total KB, mean KB (derived), max KB.
    type Row = (
        &'static str,
        &'static str,
        &'static str,
        usize,
        usize,
        f64,
        f64,
        f64,
    );
    let t1: [Row; 10] = [
        (
            "altavista",
            "altavista.com",
            "AltaVista",
            2,
            4,
            13.6,
            3.4,
            10.1,
        ),
        ("mail", "mail.com", "Mail.com", 4, 11, 36.7, 3.3, 11.0),
        // Table 1 prints 6 domains for yahoo, but 000 §3 describes the same page as "60.3 KB
        // and 4 servers" (its other three pages agree with the table), and 002 §4.1 found
        // yahoo.com's 16 objects on 3 domains: 4 it is (see `domains_note`).
        ("yahoo", "yahoo.com", "Yahoo!", 4, 16, 60.3, 3.8, 36.0),
        ("go", "go.com", "GO.com", 3, 29, 92.8, 3.2, 51.8),
        ("bbc", "bbc.co.uk", "BBC", 2, 35, 72.5, 2.1, 38.4),
        ("amazon", "amazon.com", "Amazon.com", 3, 42, 91.9, 2.2, 46.8),
        ("aol", "aol.com", "AOL.com", 8, 66, 168.5, 2.6, 21.7),
        (
            "sourceforge",
            "sourceforge.net",
            "SourceForge.net",
            5,
            53,
            132.3,
            2.5,
            40.3,
        ),
        (
            "fortunecity",
            "fortunecity.com",
            "FortuneCity",
            1,
            46,
            168.7,
            3.7,
            59.1,
        ),
        ("cnn", "cnn.com", "CNN.com", 6, 67, 186.8, 2.8, 22.3),
    ];
    for (id, base, label, d, n, total, mean, max) in t1 {
        let share = text_share(id);
        let split = if TABLE3.iter().any(|t| t.0 == id) {
            "000 Table 3"
        } else {
            "pooled 000 Table 3"
        };
        v.push(PageSpec {
            id: id.into(),
            source: format!(
                "000 Table 1: {label}: {n} objects over {d} domains{}, {total} KB total, {mean} KB mean, {max} KB max (KB = 1000 bytes; the largest object is the root HTML); {:.0} % HTML/CSS/JS ({split})",
                domains_note(id),
                share * 100.0
            ),
            label: label.into(),
            base: base.into(),
            prefix: String::new(),
            objects: n,
            domains: d,
            total: kb(total),
            max: Some(kb(max)),
            typed: None,
            text_share: Some(share),
            text_gzip: text_gzip(id),
            hosts: known_hosts(id),
            under_1kb: under_1kb(id, n),
        });
    }
    // 003 Table 6.
    let t6: [(&str, &str, &str, usize, usize, f64); 10] = [
        ("altavista", "altavista.com", "AltaVista", 6, 3, 25.4),
        ("chek", "chek.com", "Chek", 14, 1, 37.7),
        ("cnn", "cnn.com", "CNN.com", 36, 8, 185.0),
        ("excite", "excite.com", "Excite", 16, 5, 55.4),
        (
            "fortunecity",
            "fortunecity.com",
            "FortuneCity",
            36,
            7,
            142.0,
        ),
        ("go", "go.com", "GO.com", 16, 2, 33.7),
        ("google", "google.com", "Google", 2, 1, 10.3),
        ("lycos", "lycos.com", "Lycos", 5, 3, 30.3),
        ("ms", "microsoft.com", "Microsoft", 16, 2, 87.0),
        ("yahoo", "yahoo.com", "Yahoo!", 4, 2, 37.4),
    ];
    for (name, base, label, n, d, total) in t6 {
        v.push(PageSpec {
            id: format!("top10-{name}"),
            source: format!(
                "003 Table 6: {label}: {n} objects over {d} domains, {total} KB (KB = 1000 bytes); {:.0} % HTML/CSS/JS (pooled 000 Table 3)",
                text_share("") * 100.0
            ),
            label: label.into(),
            base: base.into(),
            prefix: "/top10".into(),
            objects: n,
            domains: d,
            total: kb(total),
            max: None,
            typed: None,
            text_share: Some(text_share("")),
            text_gzip: text_gzip(""),
            hosts: None,
            under_1kb: None,
        });
    }
    // 002 §4.1.
    for (name, base, label, n, d, total) in [
        ("yahoo", "yahoo.com", "Yahoo!", 16, 3, 74.0),
        ("cnn", "cnn.com", "CNN.com", 58, 6, 197.0),
        ("britannica", "britannica.com", "Britannica", 32, 15, 178.0),
    ] {
        v.push(PageSpec {
            id: format!("session-{name}"),
            source: format!(
                "002 §4.1: {label}: {n} objects over {d} domains, {total} KB (KB = 1000 bytes); {:.0} % HTML/CSS/JS (pooled 000 Table 3)",
                text_share("") * 100.0
            ),
            label: label.into(),
            base: base.into(),
            prefix: "/session".into(),
            objects: n,
            domains: d,
            total: kb(total),
            max: None,
            typed: None,
            text_share: Some(text_share("")),
            text_gzip: text_gzip(""),
            hosts: None,
            under_1kb: None,
        });
    }
    // 001 Tables 1-2 (STATIC-I: 17 KB = 52 %, jpegs 29 %, gifs 19 %;
    // STATIC-II: 40 KB = 25 %, jpegs 17 %, small gifs 17 %, large gifs 34 %).
    let s1_total = 17.0 / 0.52;
    let s2_total = 40.0 / 0.25;
    let static_pages = [
        (
            "static-1",
            "001 Table 1 (STATIC-I): index.html 17 KB (52 %), 3 JPEGs of 2-4 KB (29 %), 5 GIFs of 200 B-5 KB (19 %)",
            17.0,
            vec![
                (ImageKind::Jpeg, 3, 2.0, 4.0, s1_total * 0.29),
                (ImageKind::Gif, 5, 0.2, 5.0, s1_total * 0.19),
            ],
        ),
        (
            "static-2",
            "001 Table 2 (STATIC-II): index.html 40 KB (25 %), 8 JPEGs of 2-5 KB (17 %), 24 GIFs of 200 B-2 KB (17 %), 12 GIFs of 2-10 KB (34 %)",
            40.0,
            vec![
                (ImageKind::Jpeg, 8, 2.0, 5.0, s2_total * 0.17),
                (ImageKind::Gif, 24, 0.2, 2.0, s2_total * 0.17),
                (ImageKind::Gif, 12, 2.0, 10.0, s2_total * 0.34),
            ],
        ),
        (
            "preget-big",
            "004 §5.2 (big): 6 pictures larger than 100 KB and 8 larger than 50 KB; 1252 KB total data including headers",
            4.0,
            vec![
                (ImageKind::Jpeg, 6, 100.0, 160.0, 750.0),
                (ImageKind::Jpeg, 8, 50.0, 99.0, 494.0),
            ],
        ),
        (
            "preget-small",
            "004 §5.2 (small): 24 pictures smaller than 1 KB and 28 smaller than 5 KB; 163.3 KB total data including headers",
            9.0,
            vec![
                (ImageKind::Gif, 24, 0.3, 0.99, 17.3),
                (ImageKind::Jpeg, 28, 3.9, 4.95, 124.0),
            ],
        ),
    ];
    for (id, source, html, groups) in static_pages {
        let (base, label, prefix) = if id.starts_with("static") {
            ("gprsweb-static.net", "GPRSWeb test page", format!("/{id}"))
        } else {
            (
                "pregetting-test.net",
                "Pre-getting test page",
                format!("/{}", &id[7..]),
            )
        };
        let groups: Vec<Group> = groups
            .into_iter()
            .map(|(kind, count, min, max, total)| Group {
                kind,
                count,
                min: kb(min),
                max: kb(max),
                total: kb(total),
            })
            .collect();
        let objects = 1 + groups.iter().map(|g| g.count).sum::<usize>();
        let total = kb(html) + groups.iter().map(|g| g.total).sum::<u64>();
        v.push(PageSpec {
            id: id.into(),
            source: source.into(),
            label: label.into(),
            base: base.into(),
            prefix,
            objects,
            domains: 1,
            total,
            max: None,
            typed: Some(Typed {
                html: kb(html),
                groups,
            }),
            text_share: None,
            text_gzip: text_gzip(""),
            hosts: None,
            under_1kb: None,
        });
    }
    v
}

/// Writes the whole corpus into `dir` (created if needed).
pub fn generate(dir: &Path, seed: u64) -> Result<Corpus, CorpusError> {
    generate_pages(dir, seed, &[])
}

/// Writes the corpus restricted to the pages `ids` (all pages when empty) into `dir`. A page's
/// content depends only on the seed and its id, never on which other pages are generated.
pub fn generate_pages(dir: &Path, seed: u64, ids: &[&str]) -> Result<Corpus, CorpusError> {
    let all = specs();
    for id in ids {
        if !all.iter().any(|s| s.id == *id) {
            return Err(CorpusError::Generate {
                message: format!("paper-sites has no page {id}"),
            });
        }
    }
    let chosen: Vec<PageSpec> = all
        .into_iter()
        .filter(|s| ids.is_empty() || ids.contains(&s.id.as_str()))
        .collect();
    // Pages are independent: build them on up to two threads, write them in order.
    let results: Vec<Mutex<Option<Result<GenPage, CorpusError>>>> =
        chosen.iter().map(|_| Mutex::new(None)).collect();
    let next = AtomicUsize::new(0);
    let workers = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, 2);
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(spec) = chosen.get(i) else { break };
                let r = build_page(spec, seed);
                if let Ok(mut slot) = results[i].lock() {
                    *slot = Some(r);
                }
            });
        }
    });
    let mut w = CorpusWriter::create(dir)?;
    let mut pages = Vec::new();
    let mut domains = BTreeSet::new();
    let mut urls: HashMap<String, String> = HashMap::new();
    for (slot, spec) in results.into_iter().zip(&chosen) {
        let gp = slot.into_inner().ok().flatten().unwrap_or_else(|| {
            Err(CorpusError::Generate {
                message: format!("page {} was not built", spec.id),
            })
        })?;
        let mut objects = Vec::new();
        for o in gp.objects {
            if let Some(other) = urls.insert(o.url.clone(), spec.id.clone()) {
                return Err(CorpusError::Generate {
                    message: format!("{} is in both {other} and {}", o.url, spec.id),
                });
            }
            if let Some(h) = host_of(&o.url) {
                domains.insert(h.to_string());
            }
            let mut versions = Vec::new();
            for (bytes, lm) in &o.versions {
                versions.push(w.version(bytes, lm)?);
            }
            objects.push(Object {
                url: o.url,
                content_type: o.content_type,
                status: 200,
                headers: o.headers,
                versions,
            });
        }
        pages.push(Page {
            id: spec.id.clone(),
            url: objects[0].url.clone(),
            source: spec.source.clone(),
            captured_schemes: false,
            objects,
        });
    }
    let manifest = Manifest {
        format_version: FORMAT_VERSION,
        name: NAME.into(),
        description: format!(
            "Built-in corpus generated from the page tables of the papers (000 Table 1, 003 Table 6, 002 §4.1, 001 Tables 1-2, 004 §5.2), seed {seed}; {VERSIONS} versions per page"
        ),
        domains: domains.into_iter().collect(),
        pages,
    };
    w.finish(&manifest)
}

// ---------------------------------------------------------------------------------------------
// Planning

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Root,
    MainCss,
    ImportedCss,
    ExtraCss,
    HeadJs,
    BodyJs,
    Frame,
    Logo,
    Hero,
    Image,
    CssImage,
    FrameImage,
}

impl Role {
    fn is_text(self) -> bool {
        matches!(
            self,
            Role::MainCss
                | Role::ImportedCss
                | Role::ExtraCss
                | Role::HeadJs
                | Role::BodyJs
                | Role::Frame
        )
    }
}

#[derive(Clone, Debug)]
struct Plan {
    role: Role,
    kind: Option<ImageKind>,
    target: u64,
    domain: usize,
    url: String,
    /// For css-only images: which stylesheet (index into the plan).
    owner: Option<usize>,
}

struct GenObject {
    url: String,
    content_type: String,
    headers: Vec<(String, String)>,
    versions: Vec<(Vec<u8>, String)>,
}

struct GenPage {
    objects: Vec<GenObject>,
}

fn http_date(secs: u64) -> String {
    httpdate::fmt_http_date(std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs))
}

/// The page's virtual domains: `www.<base>` first, then CDN-like names under the site's name
/// (`known`'s, when the papers show the page's hosts).
fn domain_names(
    base: &str,
    n: usize,
    known: Option<&[(&'static str, &'static str, bool)]>,
) -> Vec<(String, &'static str)> {
    let label = base.split('.').next().unwrap_or(base);
    let generic: [(&str, &str, bool); 16] = [
        ("img", "image", false),
        ("ads", "ad", false),
        ("static", "static", false),
        ("i", "image", true),
        ("media", "image", false),
        ("js", "static", false),
        ("graphics", "image", false),
        ("content", "image", true),
        ("promo", "ad", false),
        ("stats", "beacon", false),
        ("css", "static", false),
        ("pics", "image", false),
        ("video", "image", false),
        ("cache", "static", true),
        ("banners", "ad", false),
        ("svcs", "static", false),
    ];
    let extra = known.unwrap_or(&generic);
    let mut v = vec![(format!("www.{base}"), "root")];
    for (prefix, role, net) in extra.iter().take(n.saturating_sub(1)) {
        let host = if *net {
            format!("{prefix}.{label}.net")
        } else {
            format!("{prefix}.{base}")
        };
        v.push((host, role));
    }
    v
}

/// Splits `sum` into `n` sizes drawn log-normally, each within [lo, hi].
fn split_sizes(r: &mut Rng, n: usize, sum: u64, lo: u64, hi: u64, sigma: f64) -> Vec<u64> {
    if n == 0 {
        return Vec::new();
    }
    let hi = hi.max(lo);
    let sum = sum.clamp(lo * n as u64, hi * n as u64);
    let w: Vec<f64> = (0..n).map(|_| r.lognormal(1.0, sigma)).collect();
    let mut fixed = vec![false; n];
    let mut vals = vec![0f64; n];
    for _ in 0..50 {
        let fixed_sum: f64 = (0..n).filter(|&i| fixed[i]).map(|i| vals[i]).sum();
        let free_w: f64 = (0..n).filter(|&i| !fixed[i]).map(|i| w[i]).sum();
        if free_w <= 0.0 {
            break;
        }
        let scale = (sum as f64 - fixed_sum) / free_w;
        let mut changed = false;
        for i in 0..n {
            if fixed[i] {
                continue;
            }
            let v = w[i] * scale;
            if v < lo as f64 {
                vals[i] = lo as f64;
                fixed[i] = true;
                changed = true;
            } else if v > hi as f64 {
                vals[i] = hi as f64;
                fixed[i] = true;
                changed = true;
            } else {
                vals[i] = v;
            }
        }
        if !changed {
            break;
        }
    }
    vals.iter().map(|v| v.round() as u64).collect()
}

/// `n` image sizes summing to about `sum`, exactly `small` of them under 1 KB: those
/// log-normal in [43, 850] bytes around 300 (spacers, bullets, icons), the others log-normal
/// from 1.25 KB up to `cap` sharing the rest. The margins keep both clear of 1 KB, which
/// fitted graphics this small miss by up to 15 %.
fn split_at_1kb(r: &mut Rng, n: usize, small: usize, sum: u64, cap: u64) -> Vec<u64> {
    let big = n - small.min(n);
    let small_sum = (small as u64 * 300)
        .min(sum.saturating_sub(big as u64 * 1_250))
        .max(small as u64 * 43);
    let mut v = split_sizes(
        r,
        big,
        sum.saturating_sub(small_sum),
        1_250,
        cap.max(1_250),
        0.6,
    );
    v.extend(split_sizes(r, small.min(n), small_sum, 43, 850, 1.0));
    v
}

fn image_kind_for(r: &mut Rng, target: u64) -> ImageKind {
    let u = r.f64();
    if target < 1_200 {
        if u < 0.8 {
            ImageKind::Gif
        } else {
            ImageKind::Png
        }
    } else if target < 6_000 {
        if u < 0.4 {
            ImageKind::Jpeg
        } else if u < 0.85 {
            ImageKind::Gif
        } else {
            ImageKind::Png
        }
    } else if u < 0.75 {
        ImageKind::Jpeg
    } else if u < 0.95 {
        ImageKind::Gif
    } else {
        ImageKind::Png
    }
}

fn plan_page(spec: &PageSpec, r: &mut Rng) -> Vec<Plan> {
    let n = spec.objects.max(1);
    let mut plan: Vec<Plan> = Vec::new();
    let mut push = |role: Role, kind: Option<ImageKind>, target: u64| {
        plan.push(Plan {
            role,
            kind,
            target,
            domain: 0,
            url: String::new(),
            owner: None,
        });
    };
    if let Some(t) = &spec.typed {
        push(Role::Root, None, t.html);
        let mut first_jpeg = true;
        let mut first_gif = true;
        for g in &t.groups {
            let sizes = split_sizes(r, g.count, g.total, g.min, g.max, 0.35);
            for s in sizes {
                let role = if g.kind == ImageKind::Jpeg && first_jpeg {
                    first_jpeg = false;
                    Role::Hero
                } else if g.kind == ImageKind::Gif && first_gif && s >= 1_000 {
                    first_gif = false;
                    Role::Logo
                } else {
                    Role::Image
                };
                push(role, Some(g.kind), s);
            }
        }
        return plan;
    }
    // Generic composition.
    let total = spec.total;
    let html = match spec.max {
        Some(m) => m,
        None => {
            let h = (total as f64 * r.uniform(0.22, 0.38)) as u64;
            h.clamp(4_000.min(total), 60_000)
        }
    };
    let rest = total.saturating_sub(html);
    // What HTML, CSS and JS beyond the root document should weigh: the page's text share
    // (000 Table 3), or, without one, at most half of the rest.
    let text_budget = match spec.text_share {
        Some(s) => ((s * total as f64) as u64).saturating_sub(html).min(rest),
        None => rest / 2,
    };
    let css = if n >= 10 {
        2
    } else if n >= 4 {
        1
    } else {
        0
    } + usize::from(n >= 45);
    let frames = usize::from(n >= 20) + usize::from(n >= 55);
    let js = if n >= 5 {
        1 + usize::from(n >= 12) + usize::from(n >= 25) + usize::from(n >= 50)
    } else {
        0
    };
    let images = n - 1 - css - js - frames;
    // Stylesheet backgrounds; with an imported sheet, one of them is the imported sheet's.
    let css_only = if css >= 2 && images >= 3 {
        (images / 8).max(2)
    } else if css > 0 && images >= 2 {
        (images / 8).max(1)
    } else {
        0
    };
    let frame_images = frames.min(images.saturating_sub(css_only + 1));
    // Text objects.
    let mut text: Vec<(Role, u64)> = Vec::new();
    for i in 0..css {
        let (role, median) = match i {
            0 => (Role::MainCss, 4_500.0),
            1 => (Role::ImportedCss, 1_800.0),
            _ => (Role::ExtraCss, 2_500.0),
        };
        text.push((role, r.lognormal(median, 0.4) as u64));
    }
    for i in 0..js {
        let role = if i == 0 { Role::HeadJs } else { Role::BodyJs };
        text.push((role, r.lognormal(4_500.0, 0.6) as u64));
    }
    for _ in 0..frames {
        text.push((Role::Frame, r.lognormal(1_300.0, 0.3) as u64));
    }
    if spec.text_share.is_some() && !text.is_empty() {
        // A text-heavy page carries its weight in bigger scripts and stylesheets rather than
        // more of them: every extra script would stop a 2003 parser once more, and the
        // papers' policy gains (000 Table 6) show pages bound by image requests, not scripts.
        let cap = spec
            .max
            .map(|m| (m as f64 / 1.12) as u64)
            .unwrap_or(40_000)
            .max(MIN_TEXT);
        let mut sizes = split_sizes(r, text.len(), text_budget, MIN_TEXT, cap, 0.5);
        sizes.sort_unstable_by(|a, b| b.cmp(a));
        // Largest to scripts, then the main stylesheet, frames, the other stylesheets.
        let rank = |role: Role| match role {
            Role::HeadJs | Role::BodyJs => 0,
            Role::MainCss => 1,
            Role::Frame => 2,
            _ => 3,
        };
        let mut order: Vec<usize> = (0..text.len()).collect();
        order.sort_by_key(|&i| (rank(text[i].0), i));
        for (k, i) in order.into_iter().enumerate() {
            text[i].1 = sizes[k];
        }
    }
    let text_sum: u64 = text.iter().map(|t| t.1).sum();
    if text_sum > text_budget && text_sum > 0 {
        let f = text_budget as f64 / text_sum as f64;
        for t in &mut text {
            t.1 = ((t.1 as f64 * f) as u64).max(MIN_TEXT);
        }
    }
    let text_sum: u64 = text.iter().map(|t| t.1).sum();
    let img_sum = rest.saturating_sub(text_sum);
    let cap = match spec.max {
        // Images may come out ~5 % over target: stay clear of the tabled maximum.
        Some(m) => (m as f64 / 1.12) as u64,
        None => (img_sum as f64 * 0.6).clamp(2_000.0, 90_000.0) as u64,
    };
    let mut sizes = match spec.under_1kb {
        Some(n1) => {
            let text_small =
                text.iter().filter(|t| t.1 < 1_000).count() + usize::from(html < 1_000);
            let small = n1.saturating_sub(text_small).min(images);
            split_at_1kb(r, images, small, img_sum, cap)
        }
        None => split_sizes(r, images, img_sum, 43, cap.max(43), 1.25),
    };
    sizes.sort_unstable_by(|a, b| b.cmp(a));
    // Roles for images: the largest is the top story's photo, one mid-size graphic the logo,
    // the smaller ones the stylesheet backgrounds, a mid-size one per ad frame.
    let mut roles = vec![Role::Image; images];
    if images > 0 {
        roles[0] = Role::Hero;
    }
    if images >= 3 {
        let li = (1..images)
            .min_by_key(|&i| sizes[i].abs_diff(3_000))
            .unwrap_or(1);
        roles[li] = Role::Logo;
    }
    let mut assigned = 0;
    let mut i = images;
    while assigned < css_only && i > 1 {
        i -= 1;
        // The first two always: one each for the main and the imported sheet.
        if roles[i] == Role::Image && (assigned < 2 || r.chance(0.7)) {
            roles[i] = Role::CssImage;
            assigned += 1;
        }
    }
    let mut fa = 0;
    for i in 1..images {
        if fa >= frame_images {
            break;
        }
        if roles[i] == Role::Image && sizes[i] >= 1_500 {
            roles[i] = Role::FrameImage;
            fa += 1;
        }
    }
    // Too few that big (a page of small images): the largest left, so every frame shows one.
    for role in roles.iter_mut().skip(1) {
        if fa >= frame_images {
            break;
        }
        if *role == Role::Image {
            *role = Role::FrameImage;
            fa += 1;
        }
    }
    push(Role::Root, None, html);
    for (role, t) in text {
        push(role, None, t);
    }
    for (s, role) in sizes.into_iter().zip(roles) {
        let kind = match role {
            Role::Hero if s >= images::MIN_JPEG as u64 => ImageKind::Jpeg,
            Role::Logo | Role::CssImage | Role::FrameImage => {
                if r.chance(0.8) {
                    ImageKind::Gif
                } else {
                    ImageKind::Png
                }
            }
            _ => image_kind_for(r, s),
        };
        let kind = if kind == ImageKind::Jpeg && s < images::MIN_JPEG as u64 {
            ImageKind::Gif
        } else {
            kind
        };
        push(role, Some(kind), s);
    }
    plan
}

/// The indexes of the page's hosts that have role `want`, in order.
fn hosts_with_role(names: &[(String, &'static str)], want: &str) -> Vec<usize> {
    names
        .iter()
        .enumerate()
        .filter(|(_, (_, role))| *role == want)
        .map(|(i, _)| i)
        .collect()
}

fn assign_domains(spec: &PageSpec, plan: &mut [Plan], r: &mut Rng) -> Vec<String> {
    let names = domain_names(&spec.base, spec.domains.max(1), spec.hosts);
    if spec.hosts.is_some() {
        place_on_known_hosts(plan, &names);
        return names.into_iter().map(|(h, _)| h).collect();
    }
    let by_role = |want: &str| hosts_with_role(&names, want);
    let image_d = by_role("image");
    let static_d = by_role("static");
    let ad_d = by_role("ad");
    let beacon_d = by_role("beacon");
    let any: Vec<usize> = (0..names.len()).collect();
    let smallest = plan
        .iter()
        .enumerate()
        .filter(|(_, p)| p.role == Role::Image)
        .min_by_key(|(_, p)| p.target)
        .map(|(i, _)| i);
    for (i, p) in plan.iter_mut().enumerate() {
        let cands: &[usize] = match p.role {
            Role::Root => &[0],
            Role::ImportedCss => &any,
            Role::MainCss | Role::ExtraCss | Role::HeadJs | Role::BodyJs => &static_d,
            Role::Frame | Role::FrameImage => &ad_d,
            _ if Some(i) == smallest && !beacon_d.is_empty() => &beacon_d,
            _ => &image_d,
        };
        p.domain = if cands.is_empty() || r.chance(0.25) {
            // Some of everything stays on the main host (same-host, relative references).
            if r.chance(0.5) || cands.is_empty() {
                *r.pick(&any)
            } else {
                0
            }
        } else if cands.len() > 1 && r.chance(PRIMARY_SHARE) {
            // One CDN host carries most of a role's objects (2003 cnn.com: nearly every image
            // on i.cnn.net), so the browser's 2 connections to it are the bottleneck that
            // more connections or pipelining relieve (000 §4.1.2, §4.2.1).
            cands[0]
        } else {
            *r.pick(cands)
        };
        if p.role == Role::Root {
            p.domain = 0;
        }
    }
    // Every domain serves something.
    for d in 0..names.len() {
        if plan.iter().any(|p| p.domain == d) {
            continue;
        }
        let mut counts = vec![0usize; names.len()];
        for p in plan.iter() {
            counts[p.domain] += 1;
        }
        let victim = (1..plan.len())
            .filter(|&i| counts[plan[i].domain] >= 2)
            .max_by_key(|&i| (counts[plan[i].domain], i));
        if let Some(v) = victim {
            plan[v].domain = d;
        }
    }
    names.into_iter().map(|(h, _)| h).collect()
}

/// Every object on its role's host (the first of them; ad frames take turns on the ad hosts):
/// text on a `static` host or else with the page, images on the `image` host, ad images on
/// an `adimage` host, the smallest image on a `beacon` host.
fn place_on_known_hosts(plan: &mut [Plan], names: &[(String, &'static str)]) {
    let first = |want: &str| hosts_with_role(names, want).first().copied();
    let ads = hosts_with_role(names, "ad");
    let text = first("static").unwrap_or(0);
    let image = first("image").unwrap_or(0);
    let ad_image = first("adimage")
        .or_else(|| ads.first().copied())
        .unwrap_or(image);
    let beacon = first("beacon");
    let smallest = plan
        .iter()
        .enumerate()
        .filter(|(_, p)| matches!(p.role, Role::Image))
        .min_by_key(|(_, p)| p.target)
        .map(|(i, _)| i);
    let mut frames = 0;
    for (i, p) in plan.iter_mut().enumerate() {
        p.domain = match p.role {
            Role::Root => 0,
            Role::MainCss | Role::ImportedCss | Role::ExtraCss | Role::HeadJs | Role::BodyJs => {
                text
            }
            Role::Frame if !ads.is_empty() => {
                frames += 1;
                ads[(frames - 1) % ads.len()]
            }
            Role::Frame => 0,
            Role::FrameImage => ad_image,
            _ => match beacon {
                Some(b) if Some(i) == smallest => b,
                _ => image,
            },
        };
    }
}

fn assign_urls(spec: &PageSpec, plan: &mut [Plan], hosts: &[String], r: &mut Rng) {
    let mut used = HashSet::new();
    let year_dir = format!("{}", 2003);
    for p in plan.iter_mut() {
        let host = &hosts[p.domain];
        let path = match p.role {
            Role::Root => format!("{}/", spec.prefix),
            _ => {
                let (dir, ext) = match (p.role, p.kind) {
                    (Role::MainCss | Role::ImportedCss | Role::ExtraCss, _) => {
                        ("css".to_string(), "css")
                    }
                    (Role::HeadJs | Role::BodyJs, _) => ("js".to_string(), "js"),
                    (Role::Frame, _) => ("ads".to_string(), "html"),
                    (_, Some(k)) => {
                        let d = match p.role {
                            Role::Hero => format!(
                                "{year_dir}/images/{:02}/{:02}",
                                r.range(9, 10),
                                r.range(1, 28)
                            ),
                            Role::CssImage => "images/bg".to_string(),
                            Role::FrameImage => "ads/banners".to_string(),
                            Role::Logo => "images/global".to_string(),
                            _ => r
                                .pick(&["images", "images/misc", "img", "graphics", "images/nav"])
                                .to_string(),
                        };
                        (d, k.ext())
                    }
                    _ => ("misc".to_string(), "bin"),
                };
                let words = r.range(1, 2);
                let sep = if r.chance(0.5) { "_" } else { "." };
                let mut stem = text::slug(r, words, sep);
                if r.chance(0.3) {
                    stem.push_str(&r.range(1, 120).to_string());
                }
                let mut path = format!("{}/{dir}/{stem}.{ext}", spec.prefix);
                let mut k = 2;
                while used.contains(&(host.clone(), path.clone())) {
                    path = format!("{}/{dir}/{stem}{k}.{ext}", spec.prefix);
                    k += 1;
                }
                path
            }
        };
        used.insert((host.clone(), path.clone()));
        p.url = format!("http://{host}{path}");
    }
}

fn times(r: &mut Rng) -> Vec<String> {
    let mut minutes = r.range(7 * 60, 16 * 60);
    (0..VERSIONS)
        .map(|_| {
            let t = format!(
                "{}:{:02} {}.m. EDT",
                ((minutes / 60) + 11) % 12 + 1,
                minutes % 60,
                if minutes / 60 < 12 { "a" } else { "p" }
            );
            minutes += r.range(6, 47);
            t
        })
        .collect()
}

/// Bytes over gzip bytes of the first versions.
fn gzip_ratio(objs: &[(usize, GenObject)]) -> f64 {
    let (raw, packed) = objs.iter().fold((0, 0), |(r, p), (_, o)| {
        let body = &o.versions[0].0;
        (r + body.len(), p + text::gzip_len(body))
    });
    raw as f64 / packed.max(1) as f64
}

fn build_page(spec: &PageSpec, seed: u64) -> Result<GenPage, CorpusError> {
    let pseed = seed ^ hash_str(&spec.id);
    let mut r = Rng::derive(pseed, "plan");
    let mut plan = plan_page(spec, &mut r);
    let hosts = assign_domains(spec, &mut plan, &mut r);
    assign_urls(spec, &mut plan, &hosts, &mut r);
    let seeds: Vec<u64> = plan.iter().map(|p| pseed ^ hash_str(&p.url)).collect();
    let oseed = |i: usize| seeds[i];

    // CSS-only images go to the main stylesheet, one to the imported one.
    let main_css = plan.iter().position(|p| p.role == Role::MainCss);
    let imported_css = plan.iter().position(|p| p.role == Role::ImportedCss);
    let mut first_css_img = true;
    for i in 0..plan.len() {
        if plan[i].role == Role::CssImage {
            plan[i].owner = match (first_css_img, imported_css) {
                (false, Some(ic)) if r.chance(0.4) => Some(ic),
                _ => main_css,
            };
            if first_css_img
                && imported_css.is_some()
                && plan.iter().filter(|p| p.role == Role::CssImage).count() >= 2
            {
                // The first goes to the imported sheet: three levels of discovery.
                plan[i].owner = imported_css;
            }
            first_css_img = false;
        }
    }

    // Images first: their achieved sizes decide the text sizes.
    let page_lm = EPOCH + (pseed % 3_600);
    let old_lm = page_lm - 86_400 * (3 + pseed % 40);
    let mut pictures: HashMap<usize, Picture> = HashMap::new();
    let mut objects: Vec<Option<GenObject>> = (0..plan.len()).map(|_| None).collect();
    for i in 0..plan.len() {
        let Some(kind) = plan[i].kind else { continue };
        let pic = images::fit(kind, oseed(i), plan[i].target as usize)?;
        let mut versions = vec![(pic.bytes.clone(), http_date(old_lm))];
        if plan[i].role == Role::Hero {
            versions[0].1 = http_date(page_lm);
            for v in 1..VERSIONS {
                let bytes = images::variant(
                    &pic,
                    oseed(i) ^ (v as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
                )?;
                versions.push((bytes, http_date(page_lm + 3_600 * v as u64)));
            }
        }
        objects[i] = Some(GenObject {
            url: plan[i].url.clone(),
            content_type: kind.mime().into(),
            headers: vec![("Cache-Control".into(), STATIC_CACHE.into())],
            versions,
        });
        pictures.insert(i, pic);
    }
    let img_bytes: u64 = pictures.values().map(|p| p.bytes.len() as u64).sum();

    // Text sizes: the planned ones, the last text object (or the HTML when the table gives no
    // maximum) absorbing what the images missed by.
    let text_idx: Vec<usize> = (0..plan.len())
        .filter(|&i| plan[i].role.is_text())
        .collect();
    let planned_text: u64 = text_idx.iter().map(|&i| plan[i].target).sum();
    let exact = spec.typed.is_none();
    if exact {
        let fixed_html = spec.max.is_some();
        let want_rest = spec.total as i64 - img_bytes as i64;
        if fixed_html {
            if let Some(&last) = text_idx.last() {
                let others: u64 = text_idx[..text_idx.len() - 1]
                    .iter()
                    .map(|&i| plan[i].target)
                    .sum();
                const FLOOR: i64 = 400;
                let t = want_rest - plan[0].target as i64 - others as i64;
                plan[last].target = t.max(FLOOR) as u64;
                // What the last object cannot give up comes from the other scripts and
                // stylesheets, each down to the same floor, so the total stays exact.
                let mut owed = FLOOR - t;
                for &i in &text_idx[..text_idx.len() - 1] {
                    if owed <= 0 {
                        break;
                    }
                    let give = (plan[i].target as i64 - FLOOR).clamp(0, owed);
                    plan[i].target -= give as u64;
                    owed -= give;
                }
            }
        } else {
            plan[0].target = (want_rest - planned_text as i64).max(2_000) as u64;
        }
    }

    // Every text object (stylesheets, scripts, frames, the root document), with template
    // redundancy `red`; `r` draws the references, the same way whatever `red` is.
    let make_text = |red: f64, r: &mut Rng| -> Vec<(usize, GenObject)> {
        let mut out = Vec::new();
        let ref_from = |from: usize, to: usize, r: &mut Rng| -> String {
            let rel = relative_ref(&plan[from].url, &plan[to].url);
            if rel.starts_with("http") || r.chance(0.6) {
                rel
            } else {
                crate::model::path_of(&plan[to].url).to_string()
            }
        };
        let dims = |i: usize| {
            pictures
                .get(&i)
                .map(|p| (p.width, p.height))
                .unwrap_or((1, 1))
        };

        // Stylesheets.
        for &i in &text_idx {
            let role = plan[i].role;
            if !matches!(role, Role::MainCss | Role::ImportedCss | Role::ExtraCss) {
                continue;
            }
            let imports: Vec<String> = if role == Role::MainCss {
                imported_css
                    .map(|ic| vec![ref_from(i, ic, r)])
                    .unwrap_or_default()
            } else {
                Vec::new()
            };
            let imgs: Vec<CssImage> = (0..plan.len())
                .filter(|&j| plan[j].role == Role::CssImage && plan[j].owner == Some(i))
                .map(|j| {
                    let (w, h) = dims(j);
                    CssImage {
                        url: relative_ref(&plan[i].url, &plan[j].url),
                        width: w,
                        height: h,
                        slot: plan[..j]
                            .iter()
                            .filter(|p| p.role == Role::CssImage)
                            .count(),
                    }
                })
                .collect();
            let body = text::css_sheet(oseed(i), &imports, &imgs, plan[i].target as usize, red);
            out.push((
                i,
                GenObject {
                    url: plan[i].url.clone(),
                    content_type: "text/css".into(),
                    headers: vec![("Cache-Control".into(), STATIC_CACHE.into())],
                    versions: vec![(body, http_date(old_lm))],
                },
            ));
        }
        // Scripts and ad frames.
        let frame_imgs: Vec<usize> = (0..plan.len())
            .filter(|&j| plan[j].role == Role::FrameImage)
            .collect();
        let mut fi = frame_imgs.iter();
        for &i in &text_idx {
            let (body, ctype) = match plan[i].role {
                Role::HeadJs | Role::BodyJs => (
                    text::js_script(oseed(i), plan[i].target as usize, red),
                    "application/javascript",
                ),
                Role::Frame => {
                    let img = fi.next().map(|&j| {
                        let (w, h) = dims(j);
                        ImgRef {
                            url: ref_from(i, j, r),
                            width: w,
                            height: h,
                            srcset: Srcset::No,
                        }
                    });
                    let click = format!(
                        "http://{}/click?zone={}",
                        hosts[plan[i].domain],
                        pseed % 10_000
                    );
                    (
                        text::ad_frame(oseed(i), img.as_ref(), &click, plan[i].target as usize),
                        HTML_TYPE,
                    )
                }
                _ => continue,
            };
            out.push((
                i,
                GenObject {
                    url: plan[i].url.clone(),
                    content_type: ctype.into(),
                    headers: vec![(
                        "Cache-Control".into(),
                        if ctype == HTML_TYPE {
                            HTML_CACHE
                        } else {
                            STATIC_CACHE
                        }
                        .into(),
                    )],
                    versions: vec![(body, http_date(old_lm))],
                },
            ));
        }

        // The root document.
        let mut refs = HtmlRefs::default();
        let mut scripts = Vec::new();
        #[allow(clippy::needless_range_loop)]
        for i in 1..plan.len() {
            match plan[i].role {
                Role::MainCss | Role::ExtraCss => refs.stylesheets.push(ref_from(0, i, r)),
                Role::HeadJs => refs.head_scripts.push(ref_from(0, i, r)),
                Role::BodyJs => scripts.push(ref_from(0, i, r)),
                Role::Frame => {
                    let (w, h) = *r.pick(&[(468, 60), (300, 250), (120, 600), (728, 90)]);
                    refs.iframes.push(IframeRef {
                        url: ref_from(0, i, r),
                        width: w,
                        height: h,
                    });
                }
                Role::Hero | Role::Logo | Role::Image => {
                    let (w, h) = dims(i);
                    let idx = refs.images.len();
                    match plan[i].role {
                        Role::Hero => refs.hero = Some(idx),
                        Role::Logo => refs.logo = Some(idx),
                        _ => {}
                    }
                    refs.images.push(ImgRef {
                        url: ref_from(0, i, r),
                        width: w,
                        height: h,
                        srcset: if r.chance(0.2) {
                            Srcset::WithSrc
                        } else {
                            Srcset::No
                        },
                    });
                }
                _ => {}
            }
        }
        // One image referenced by a srcset only (when there are several plain images).
        let plain: Vec<usize> = (0..refs.images.len())
            .filter(|&k| Some(k) != refs.hero && Some(k) != refs.logo)
            .collect();
        if plain.len() >= 3 {
            refs.images[plain[plain.len() / 2]].srcset = Srcset::Only;
        }
        // The last script is announced early with a preload.
        if let Some(last) = scripts.last() {
            refs.preloads.push((last.clone(), "script".into()));
        }
        refs.body_scripts = scripts;
        let mut hr = Rng::derive(pseed, "versions");
        let times = times(&mut hr);
        let metas: Vec<HtmlMeta> = times
            .into_iter()
            .map(|time| HtmlMeta {
                site: spec.label.clone(),
                title: format!(
                    "{} - {}",
                    spec.label,
                    text::capitalize(text::web_word(&mut hr))
                ),
                headline: text::headline(&mut hr),
                time,
            })
            .collect();
        // Same title in every version.
        let title = metas[0].title.clone();
        let metas: Vec<HtmlMeta> = metas
            .into_iter()
            .map(|mut m| {
                m.title = title.clone();
                m
            })
            .collect();
        let docs = text::html_versions(oseed(0), &refs, &metas, plan[0].target as usize, red);
        out.push((
            0,
            GenObject {
                url: plan[0].url.clone(),
                content_type: HTML_TYPE.into(),
                headers: vec![("Cache-Control".into(), HTML_CACHE.into())],
                versions: docs
                    .into_iter()
                    .enumerate()
                    .map(|(v, d)| (d, http_date(page_lm + 3_600 * v as u64)))
                    .collect(),
            },
        ));
        out
    };
    // The redundancy that gives the page's text its gzip ratio (bisection: the ratio grows
    // with the redundancy, up to sampling noise).
    // Every try draws the references from the same state of `r`; the closest try is kept.
    let mut best: Option<(f64, Vec<(usize, GenObject)>)> = None;
    let (mut lo, mut hi) = (0.0f64, 1.0f64);
    for _ in 0..12 {
        let mid = (lo + hi) / 2.0;
        let text = make_text(mid, &mut r.clone());
        let ratio = gzip_ratio(&text);
        let err = (ratio / spec.text_gzip).ln().abs();
        if best.as_ref().is_none_or(|(e, _)| err < *e) {
            best = Some((err, text));
        }
        if err < 0.01 {
            break;
        }
        if ratio < spec.text_gzip {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    for (i, o) in best.map(|b| b.1).unwrap_or_default() {
        objects[i] = Some(o);
    }

    let mut all = Vec::with_capacity(plan.len());
    for (i, o) in objects.into_iter().enumerate() {
        all.push(o.ok_or_else(|| CorpusError::Generate {
            message: format!(
                "{}: object {} ({:?}) not generated",
                spec.id, plan[i].url, plan[i].role
            ),
        })?);
    }
    // List the objects in the order a browser discovers them.
    let order = discover(&all[0].url, |u| {
        all.iter()
            .find(|o| o.url == u)
            .map(|o| (o.content_type.clone(), o.versions[0].0.clone()))
    });
    let mut slots: Vec<Option<GenObject>> = all.into_iter().map(Some).collect();
    let mut out = Vec::with_capacity(slots.len());
    for d in &order {
        if let Some(k) = slots
            .iter()
            .position(|o| o.as_ref().map(|o| o.url == d.url).unwrap_or(false))
        {
            if let Some(o) = slots[k].take() {
                out.push(o);
            }
        }
    }
    let undiscovered: Vec<String> = slots.iter().flatten().map(|o| o.url.clone()).collect();
    if !undiscovered.is_empty() {
        return Err(CorpusError::Generate {
            message: format!(
                "{}: objects not referenced by the page: {}",
                spec.id,
                undiscovered.join(", ")
            ),
        });
    }
    Ok(GenPage { objects: out })
}
