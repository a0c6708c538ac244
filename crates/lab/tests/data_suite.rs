//! The lab's data suite: a real page load (cnn.com, 2015, from a HAR in `../shared/data`:
//! 138 objects on 42 domains, 4.9 MB, 66 real bodies) hosted by the lab and loaded over a
//! real link trace (the T-Mobile UMTS drive), by the browser model direct and through the edge
//! proxy, and by real Chromium through the proxy. Built only with `--features data-suite`:
//! `cargo test -p webpep-lab --features data-suite --test data_suite` (as root; CI).

use std::path::{Path, PathBuf};

use webpep_corpus::import;
use webpep_lab::runner::{run, RunOptions};
use webpep_lab::{configs, missing};
use webpep_link::testing::netns_available;

/// `shared/data` found among the ancestors of the current directory.
fn data_dir() -> PathBuf {
    let cwd = std::env::current_dir().expect("current dir");
    cwd.ancestors()
        .map(|a| a.join("shared").join("data"))
        .find(|d| d.join("har").is_dir())
        .unwrap_or_else(|| panic!("no shared/data among the ancestors of {}", cwd.display()))
}

/// A fresh directory, removed when the guard goes (also when the test fails).
struct TestDir(PathBuf);

impl TestDir {
    /// `webpep-lab-NAME-PID` in the temporary directory, emptied.
    fn fresh(name: &str) -> TestDir {
        let dir = std::env::temp_dir().join(format!("webpep-lab-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        TestDir(dir)
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The tests of one binary run in parallel; lab runs, which pace real traffic through the
/// link emulator, go one at a time so that one does not slow the other's link.
fn one_lab_run_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static LAB: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LAB.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn har_of(out: &Path, har: &str) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(out.join(har)).expect("HAR")).expect("HAR JSON")
}

#[test]
fn a_real_page_over_a_real_trace_direct_and_through_the_edge_proxy() {
    let test = "a_real_page_over_a_real_trace_direct_and_through_the_edge_proxy";
    if !netns_available(test) || !webpep_lab::chromium::available_for_test(test) {
        return;
    }
    let _one = one_lab_run_at_a_time();
    let dir = TestDir::fresh("data");
    let har = data_dir().join("har/haralyzer-cnn.har");
    let corpus = import::import_har(&har, &dir.0.join("corpus"), "cnn-2015").expect("import");
    let page = &corpus.manifest.pages[0];
    let (objects, domains) = (page.objects.len(), corpus.manifest.domains.clone());
    assert!(
        objects > 100 && domains.len() > 30,
        "{objects} objects, {} domains",
        domains.len()
    );

    let mut all = configs::load(None).unwrap();
    // The proxy with its transforms always waited for: this test checks that they work on a
    // real page. (Scaled with the link, a debug build's transcodes — hundreds of ms — are not
    // worth their time at UMTS rates, so the first load gets the originals and the variants
    // are made for the next; tests/adapt.rs in the server covers that decision.)
    all.extend(
        configs::parse(
            "[explicit]\npolicy = \"http11\"\nproxy = \"explicit\"\nadapt = false\n",
            "the data suite",
        )
        .unwrap(),
    );
    let names: Vec<String> = ["http11", "explicit", "chromium-explicit"]
        .map(String::from)
        .into();
    let profile = webpep_link_model::resolve("umts").expect("the UMTS trace in shared/data");
    let mut opts = RunOptions::new(profile, corpus, dir.0.join("out"));
    opts.configs = configs::select(&all, &names).unwrap();
    opts.time_scale = 10.0;
    opts.gap_s = 1.0;
    opts.progress = false;
    let r = run(&opts).expect("run");
    eprintln!("{}\n{}\n{}", r.table(), r.air_table(), r.tls_upgrade_note());
    let load = |c: &str| r.loads.iter().find(|l| l.config == c).unwrap();
    let out = dir.0.join("out");
    // No load used more of the link than the trace offered during it: Chromium's bytes after
    // its load event are counted apart (issue 36 item 5: counted in, they made 112 %).
    for l in &r.loads {
        println!(
            "{}: utilization {:.3}, efficiency {:.3}, late {} B down",
            l.config, l.utilization, l.efficiency, l.late_down_bytes
        );
        assert!(
            l.utilization <= 1.0,
            "{}: utilization {}",
            l.config,
            l.utilization
        );
    }
    // Over a trace, no load of the browser model beats the physical bound (issue 33: 1.30
    // over the LTE trace when the bound used the trace's mean rate). Chromium's record may
    // hold objects that finished after its load event (their bodies raise the bound), so it
    // is not held to it.
    for l in r.loads.iter().filter(|l| l.config != "chromium-explicit") {
        assert!(
            l.efficiency > 0.0 && l.efficiency <= 1.0,
            "{}: efficiency {} (bound {} ms, PLT {} ms)",
            l.config,
            l.efficiency,
            l.bound_ms,
            l.plt_ms
        );
    }

    // Every object of the page is accounted for in every load, Chromium's included.
    for l in &r.loads {
        let page = &opts.corpus.manifest.pages[0];
        assert_every_object_accounted(&out, page, l, "cnn 2015 over umts");
    }

    // The browser model fetches every object of the capture, direct and through the proxy
    // (there, less the small stylesheets and scripts the proxy copied into their pages).
    for c in ["http11", "explicit"] {
        let l = load(c);
        assert_eq!((l.objects + l.inlined, l.errors), (objects, 0), "{c}");
    }
    // The proxy transcodes images and compresses what the origin sent plain: fewer bytes
    // cross the air. Against origins that send what the capture sent (its text gzipped as on
    // the real wire, issue 36) that is ×1.28 here (1,736,231 B against 2,227,682 B); it was
    // ×3.2 when the replay served every text uncompressed. A behaviour check, not a benchmark.
    let (direct, proxied) = (load("http11"), load("explicit"));
    assert!(
        proxied.air_down_bytes < direct.air_down_bytes,
        "explicit {} B down vs http11 {} B",
        proxied.air_down_bytes,
        direct.air_down_bytes
    );
    // The text came compressed by the proxy (60 of the 138 responses when this was written).
    let compressed = har_of(&out, &proxied.har)["log"]["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| {
            e["response"]["headers"]
                .as_array()
                .unwrap()
                .iter()
                .any(|h| {
                    h["name"]
                        .as_str()
                        .unwrap()
                        .eq_ignore_ascii_case("content-encoding")
                })
        })
        .count();
    assert!(compressed > 30, "{compressed} compressed responses");

    // Real Chromium runs the page's real scripts through the proxy. What it asks for beyond
    // the capture is an error only where the capture has no such host (its scripts build
    // some URLs at run time); every object of a corpus host arrives.
    let l = load("chromium-explicit");
    assert!(
        l.objects + l.inlined >= objects * 9 / 10,
        "{} objects, {} inlined",
        l.objects,
        l.inlined
    );
    for e in har_of(&out, &l.har)["log"]["entries"].as_array().unwrap() {
        let url = e["request"]["url"].as_str().unwrap();
        let host = url::Url::parse(url)
            .unwrap()
            .host_str()
            .unwrap_or_default()
            .to_string();
        if e["response"]["status"].as_u64().unwrap_or(0) == 0 {
            assert!(
                !domains.contains(&host),
                "{url} failed on a corpus host: {e}"
            );
        }
    }
}

/// The browser model takes of a real site's stylesheets what the browser that captured it
/// fetched (the WARC of www.iana.org in ../shared/data, its records in the order fetched):
/// for the home page, the regular and bold Open Sans faces and the home page's logo, not the
/// light face nor the 2x logo of screen.css, and nothing of print.css (five more fonts).
#[test]
fn a_real_sites_stylesheets_give_what_the_capturing_browser_fetched() {
    use webpep_loader::discover::{HtmlScanner, Need};
    use webpep_loader::stylesheet::{scan_stylesheet, DocumentStyle};
    use webpep_loader::Viewport;

    let dir = TestDir::fresh("iana");
    let warc = data_dir().join("pages/pywb-iana.warc.gz");
    let corpus = import::import_warc(&warc, &dir.0.join("corpus"), "iana").expect("import");
    let body = |url: &str| -> Vec<u8> {
        let o = corpus
            .manifest
            .pages
            .iter()
            .flat_map(|p| &p.objects)
            .find(|o| o.url == url)
            .unwrap_or_else(|| panic!("{url} not in the capture"));
        corpus.body(&o.version(0).body).expect("body")
    };
    let home = "http://www.iana.org/";
    let screen = Viewport::default();
    let mut scanner = HtmlScanner::for_browser(home.parse().unwrap(), true, screen);
    let mut found = scanner.feed(&body(home));
    found.extend(scanner.finish());
    let mut doc = DocumentStyle::default();
    for e in scanner.take_elements() {
        doc.elements.add(e);
    }
    for u in scanner.take_font_uses() {
        doc.add_font_use(u);
    }
    let mut pending = Vec::new();
    let mut sheets = Vec::new();
    for d in found.iter().filter(|d| d.url.path().ends_with(".css")) {
        sheets.push((d.url.path().to_string(), d.need.clone()));
        let css = String::from_utf8_lossy(&body(d.url.as_str())).into_owned();
        let sheet = scan_stylesheet(&css, &d.url, d.need != Need::Unused, &screen);
        for u in sheet.font_uses {
            doc.add_font_use(u);
        }
        pending.extend(sheet.refs);
    }
    assert_eq!(
        sheets,
        [
            ("/_css/2013.1/screen.css".to_string(), Need::Always),
            ("/_css/2013.1/print.css".to_string(), Need::Unused),
        ]
    );
    let mut got: Vec<String> = doc
        .take_needed(&mut pending, |d| &d.need)
        .iter()
        .map(|d| d.url.path().to_string())
        .collect();
    got.sort();
    assert_eq!(
        got,
        [
            "/_css/2013.1/fonts/OpenSans-Bold.ttf",
            "/_css/2013.1/fonts/OpenSans-Regular.ttf",
            "/_img/2013.1/iana-logo-homepage.png",
        ],
        "left waiting: {:?}",
        pending.iter().map(|d| d.url.path()).collect::<Vec<_>>()
    );
}

/// The URLs a load got, without their scheme (the h2 configuration fetches a capture's
/// http:// objects over TLS): its HAR's entries with a status (status 0: the fetch failed).
fn urls_got(out: &Path, har: &str) -> std::collections::BTreeSet<String> {
    har_of(out, har)["log"]["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .filter(|e| e["response"]["status"].as_u64().unwrap_or(0) > 0)
        .filter_map(|e| e["request"]["url"].as_str())
        .map(|u| u.split_once("://").map_or(u, |(_, rest)| rest).to_string())
        .collect()
}

/// Each failed entry of a load: its URL without the scheme (as [`urls_got`]) and its error.
fn failures(out: &Path, har: &str) -> Vec<(String, String)> {
    har_of(out, har)["log"]["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .filter(|e| e["response"]["status"].as_u64().unwrap_or(0) == 0)
        .map(|e| {
            let u = e["request"]["url"].as_str().unwrap_or("?");
            (
                u.split_once("://").map_or(u, |(_, rest)| rest).to_string(),
                e["response"]["_error"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// Issue 36 item 2: no object goes missing silently. Each of the page's objects (the
/// corpus's, one per URL without its scheme) was requested (the HAR's entries, failures
/// included), copied into its page by the proxy, or is reported missing with why.
fn assert_every_object_accounted(
    out: &Path,
    page: &webpep_corpus::Page,
    l: &webpep_lab::results::LoadRecord,
    what: &str,
) {
    let objects: std::collections::BTreeSet<String> = page
        .objects
        .iter()
        .filter_map(|o| missing::key(&o.url))
        .collect();
    let requested = har_of(out, &l.har)["log"]["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .filter_map(|e| missing::key(e["request"]["url"].as_str()?))
        .filter(|k| objects.contains(k))
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    println!(
        "  {}: {} of the page's {} objects requested, {} inlined, {} not: {:?}",
        l.config,
        requested,
        objects.len(),
        l.inlined,
        l.missing,
        l.missing_why
    );
    let config = &l.config;
    assert_eq!(l.page_objects, objects.len(), "{what} {config}");
    assert_eq!(
        requested + l.inlined + l.missing,
        l.page_objects,
        "{what} {config}: requested + inlined + reported missing = the page's objects"
    );
    assert_eq!(
        l.missing_why.values().sum::<usize>(),
        l.missing,
        "{what} {config}"
    );
}

/// Issue 33: the `h2` baseline lost 151 of 244 objects of one real page over gprs that
/// `http11` loaded, with "no response progress": streams waiting behind a hundred others were
/// given up on. On every HAR in `../shared/data/har`, over gprs, no object `http11` gets is lost
/// by `h2` that way. What h2 may still lose is printed: a connection that could not be set up
/// within the modern browser's 127 s (its dozens of parallel connections keep gprs's 120 KB
/// queue full, so handshakes wait or drop there), as on a real link.
#[test]
fn h2_loses_no_object_http11_gets_to_a_stream_timeout_on_every_shared_har() {
    let test = "h2_loses_no_object_http11_gets_to_a_stream_timeout_on_every_shared_har";
    if !netns_available(test) {
        return;
    }
    let _one = one_lab_run_at_a_time();
    let mut hars: Vec<PathBuf> = std::fs::read_dir(data_dir().join("har"))
        .expect("har dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "har"))
        .collect();
    hars.sort();
    assert!(hars.len() >= 5, "{hars:?}");
    let all = configs::load(None).unwrap();
    let names: Vec<String> = ["http11", "h2"].map(String::from).into();
    for (i, har) in hars.iter().enumerate() {
        let dir = TestDir::fresh(&format!("h2-{i}"));
        let corpus = import::import_har(har, &dir.0.join("corpus"), &format!("har{i}"))
            .unwrap_or_else(|e| panic!("{}: {e}", har.display()));
        let profile = webpep_link_model::resolve("gprs").unwrap();
        let mut opts = RunOptions::new(profile, corpus, dir.0.join("out"));
        opts.configs = configs::select(&all, &names).unwrap();
        opts.time_scale = 20.0;
        opts.gap_s = 1.0;
        opts.progress = false;
        let r = run(&opts).expect("run");
        let out = dir.0.join("out");
        for page in r
            .loads
            .iter()
            .map(|l| l.page.clone())
            .collect::<std::collections::BTreeSet<_>>()
        {
            let load = |c: &str| {
                r.loads
                    .iter()
                    .find(|l| l.page == page && l.config == c)
                    .unwrap_or_else(|| panic!("{}: no {c} load of {page}", har.display()))
            };
            let (h1, h2) = (load("http11"), load("h2"));
            let (got1, got2) = (urls_got(&out, &h1.har), urls_got(&out, &h2.har));
            let missing: Vec<&String> = got1.difference(&got2).collect();
            let failed = failures(&out, &h2.har);
            // The h2 errors of the objects http11 got.
            let lost: std::collections::BTreeMap<&String, &String> = failed
                .iter()
                .filter(|(u, _)| got1.contains(u) && !got2.contains(u))
                .map(|(u, e)| (u, e))
                .collect();
            println!(
                "{} {page}: http11 {} objects ({} errors) in {:.1} s, h2 {} ({} errors) in {:.1} s",
                har.file_name().unwrap().to_string_lossy(),
                h1.objects,
                h1.errors,
                h1.plt_ms / 1000.0,
                h2.objects,
                h2.errors,
                h2.plt_ms / 1000.0
            );
            let corpus_page = opts
                .corpus
                .manifest
                .page(&page)
                .expect("the page in its corpus");
            for l in [h1, h2] {
                assert_every_object_accounted(&out, corpus_page, l, &har.display().to_string());
            }
            for l in [h1, h2] {
                assert!(
                    l.efficiency <= 1.0,
                    "{} {page} {}: efficiency {}",
                    har.display(),
                    l.config,
                    l.efficiency
                );
            }
            println!("  h2 lost {} that http11 got: {lost:#?}", lost.len());
            let stream_timeouts: Vec<_> = lost
                .iter()
                .filter(|(_, e)| e.contains("no response progress"))
                .collect();
            assert!(
                stream_timeouts.is_empty(),
                "{} {page}: h2 gave up on streams http11 loaded: {stream_timeouts:#?}",
                har.display()
            );
            assert_eq!(
                lost.len(),
                missing.len(),
                "every lost object has its error: {missing:?}"
            );
        }
    }
}

/// The captures of `../shared/data` as corpora for the lab: every HAR, and three of the
/// WARC's pages (its home page, the protocols registry and the DNSSEC page: the other
/// thirteen are the same site's pages with the same stylesheets and fonts).
fn every_shared_capture(dir: &Path) -> Vec<(String, webpep_corpus::Corpus, Vec<String>)> {
    let mut hars: Vec<PathBuf> = std::fs::read_dir(data_dir().join("har"))
        .expect("har dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "har"))
        .collect();
    hars.sort();
    assert!(hars.len() >= 5, "{hars:?}");
    let mut out = Vec::new();
    for (i, har) in hars.iter().enumerate() {
        let corpus = import::import_har(har, &dir.join(format!("har{i}")), &format!("har{i}"))
            .unwrap_or_else(|e| panic!("{}: {e}", har.display()));
        let name = har.file_name().unwrap().to_string_lossy().into_owned();
        out.push((name, corpus, Vec::new()));
    }
    let warc = data_dir().join("pages/pywb-iana.warc.gz");
    let corpus = import::import_warc(&warc, &dir.join("warc"), "iana").expect("WARC import");
    let pages: Vec<String> = ["index", "protocols", "dnssec"]
        .iter()
        .map(|want| {
            corpus
                .manifest
                .pages
                .iter()
                .map(|p| p.id.clone())
                .find(|id| id.ends_with(&format!("-{want}")))
                .unwrap_or_else(|| panic!("no {want} page in the WARC's corpus"))
        })
        .collect();
    out.push(("pywb-iana.warc.gz".into(), corpus, pages));
    out
}

/// Issue 36's must-show: every capture of `../shared/data` (each HAR, three WARC pages) loaded
/// under `http11`, `h2`, `explicit` and `chromium` over the UMTS trace and over gprs, and every
/// object of every page accounted for in every load: requested, copied into its page by the
/// proxy, or reported missing with why. (`http11` and `h2` on the HARs over gprs: the test
/// above.) Where the capture gives every object's transfer size, what the direct loads
/// carried is that within 10 %: the replay sends what the capture sent.
#[test]
fn every_shared_capture_loads_with_every_object_accounted_for() {
    let test = "every_shared_capture_loads_with_every_object_accounted_for";
    if !netns_available(test) || !webpep_lab::chromium::available_for_test(test) {
        return;
    }
    let _one = one_lab_run_at_a_time();
    let dir = TestDir::fresh("all");
    let all = configs::load(None).unwrap();
    let every = ["http11", "h2", "explicit", "chromium"];
    let mut loads = 0;
    for (capture, corpus, pages) in every_shared_capture(&dir.0) {
        let warc = !pages.is_empty();
        // Time scales that keep a debug build's work small beside the link's.
        for (profile, k) in [("umts", 10.0), ("gprs", 20.0)] {
            let names: Vec<String> = every
                .iter()
                .filter(|c| profile == "umts" || warc || ["explicit", "chromium"].contains(c))
                .map(|c| c.to_string())
                .collect();
            let out = dir.0.join(format!("out-{capture}-{profile}"));
            let resolved = webpep_link_model::resolve(profile).unwrap();
            let mut opts = RunOptions::new(resolved, corpus.clone(), out.clone());
            opts.configs = configs::select(&all, &names).unwrap();
            opts.pages = pages.clone();
            opts.time_scale = k;
            opts.gap_s = 1.0;
            opts.progress = false;
            let r = run(&opts).unwrap_or_else(|e| panic!("{capture} over {profile}: {e}"));
            for l in &r.loads {
                let page = corpus
                    .manifest
                    .page(&l.page)
                    .expect("the page in its corpus");
                let what = format!("{capture} {} over {profile}", l.page);
                println!(
                    "{what} {}: {:.1} s, {} B down, {} errors",
                    l.config,
                    l.plt_ms / 1000.0,
                    l.air_down_bytes,
                    l.errors
                );
                assert_every_object_accounted(&out, page, l, &what);
                assert!(
                    l.utilization <= 1.0,
                    "{what} {}: utilization {}",
                    l.config,
                    l.utilization
                );
                // Chromium's record may hold objects finished after its load event.
                if l.config != "chromium" {
                    assert!(
                        l.efficiency > 0.0 && l.efficiency <= 1.0,
                        "{what} {}: efficiency {}",
                        l.config,
                        l.efficiency
                    );
                }
                let sizes: Option<u64> = page
                    .objects
                    .iter()
                    .map(|o| o.version(0).capture.as_ref()?.transfer_size)
                    .sum();
                if let Some(captured) = sizes.filter(|_| l.config == "http11") {
                    let (air, bodies) = (
                        l.air_down_bytes as f64 / captured as f64,
                        l.body_bytes as f64 / captured as f64,
                    );
                    println!(
                        "  against the capture's {captured} B: air ×{air:.3}, bodies ×{bodies:.3}"
                    );
                    assert!(
                        (0.9..=1.1).contains(&air),
                        "{what}: air ×{air:.3} of the capture"
                    );
                    assert!(
                        (0.9..=1.1).contains(&bodies),
                        "{what}: bodies ×{bodies:.3} of the capture"
                    );
                }
                loads += 1;
            }
        }
    }
    println!("{loads} loads");
}
