//! A whole `lab run` on a small corpus: every configuration loads every object over the
//! emulated link, and the files of DESIGN §7.5 are written.

use std::path::Path;

use webpep_corpus::{Corpus, CorpusWriter, Manifest, Object, Page, FORMAT_VERSION};
use webpep_lab::configs;
use webpep_lab::results::{LoadRecord, Results};
use webpep_lab::runner::{run, RunOptions};
use webpep_link::testing::{netns_available, skip_unless_required};

const LM: &str = "Mon, 01 Jan 2024 00:00:00 GMT";

/// A fresh directory for one test, removed when the guard goes (also when the test fails).
struct TestDir(std::path::PathBuf);

impl TestDir {
    fn new(name: &str) -> TestDir {
        let dir = std::env::temp_dir().join(format!("webpep-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        TestDir(dir)
    }
}

impl std::ops::Deref for TestDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn small_corpus(dir: &Path) -> Corpus {
    let mut w = CorpusWriter::create(dir).unwrap();
    let mut objects = Vec::new();
    let mut html = String::from("<html><head><link rel=stylesheet href=\"/s.css\"></head><body>");
    let mut extra = Vec::new();
    for i in 0..6 {
        let host = if i % 2 == 0 {
            "www.small.test"
        } else {
            "img.small.test"
        };
        html += &format!("<img src=\"http://{host}/i{i}.gif\">");
        let body: Vec<u8> = (0..3000u32).map(|b| (b * 7 + i) as u8).collect();
        extra.push(Object {
            url: format!("http://{host}/i{i}.gif"),
            content_type: "image/gif".into(),
            status: 200,
            headers: vec![],
            versions: vec![w.version(&body, LM).unwrap()],
        });
    }
    html += "</body></html>";
    objects.push(Object {
        url: "http://www.small.test/".into(),
        content_type: "text/html".into(),
        status: 200,
        headers: vec![],
        versions: vec![w.version(html.as_bytes(), LM).unwrap()],
    });
    objects.push(Object {
        url: "http://www.small.test/s.css".into(),
        content_type: "text/css".into(),
        status: 200,
        headers: vec![],
        versions: vec![w
            .version(
                b"body { background: url(http://img.small.test/bg.gif) }",
                LM,
            )
            .unwrap()],
    });
    objects.push(Object {
        url: "http://img.small.test/bg.gif".into(),
        content_type: "image/gif".into(),
        status: 200,
        headers: vec![],
        versions: vec![w.version(&[1u8; 2000], LM).unwrap()],
    });
    objects.extend(extra);
    w.finish(&Manifest {
        format_version: FORMAT_VERSION,
        name: "small".into(),
        description: String::new(),
        domains: vec!["www.small.test".into(), "img.small.test".into()],
        pages: vec![Page {
            id: "small".into(),
            url: "http://www.small.test/".into(),
            source: "test".into(),
            captured_schemes: false,
            objects,
        }],
    })
    .unwrap()
}

/// Runs the configurations `names` on the small corpus over cdma-1x at time scale 10 with
/// 1 s gaps, writing under `dir/out`.
fn run_small(dir: &Path, names: &[&str]) -> webpep_lab::results::Results {
    run(&small_options(dir, names)).expect("run")
}

/// [`run_small`]'s options.
fn small_options(dir: &Path, names: &[&str]) -> RunOptions {
    options(small_corpus(&dir.join("corpus")), dir, names)
}

/// The built-in configurations `names` on `corpus` over cdma-1x at time scale 10 with 1 s
/// gaps, writing under `dir/out`.
fn options(corpus: Corpus, dir: &Path, names: &[&str]) -> RunOptions {
    let all = configs::load(None).unwrap();
    let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    let mut opts = RunOptions::new(
        webpep_link_model::resolve("cdma-1x").unwrap(),
        corpus,
        dir.join("out"),
    );
    opts.configs = configs::select(&all, &names).unwrap();
    opts.time_scale = 10.0;
    opts.gap_s = 1.0;
    opts.progress = false;
    opts
}

#[test]
fn lab_run_writes_results_hars_and_report() {
    if !netns_available("lab_run_writes_results_hars_and_report") {
        return;
    }
    let dir = TestDir::new("run");
    let mut opts = small_options(&dir, &["http11", "pipelining", "h2", "http11-warm"]);
    opts.gap_s = 2.0;
    let r = run(&opts).expect("run");
    eprintln!("{}", r.table());
    assert_eq!(r.loads.len(), 4);
    for l in &r.loads {
        assert_eq!(l.objects + l.inlined, 9, "{}: every object", l.config);
        assert_eq!(l.errors, 0, "{}", l.config);
        // Requested + inlined + missing = the page's objects, nothing missing (issue 36).
        assert_eq!(
            (l.page_objects, l.missing),
            (9, 0),
            "{}: {:?}",
            l.config,
            l.missing_why
        );
        let b = l.breakdown_ms;
        let sum = b.dns + b.connect + b.idle + b.payload;
        assert!((sum - l.plt_ms).abs() < 1.0, "breakdown sums to PLT");
        assert!(
            l.plt_ms > 1000.0,
            "several cdma-1x RTTs (unscaled): {}",
            l.plt_ms
        );
        assert!(dir.join("out").join(&l.har).exists());
        if l.config != "http11-warm" {
            assert!(b.dns > 300.0, "{}: DNS crosses the link: {b:?}", l.config);
            assert!(
                l.air_down_bytes > 20_000,
                "{}: {}",
                l.config,
                l.air_down_bytes
            );
        }
    }
    let warm = r.loads.iter().find(|l| l.config == "http11-warm").unwrap();
    let cold = r.loads.iter().find(|l| l.config == "http11").unwrap();
    assert!(
        warm.air_down_bytes < cold.air_down_bytes / 2,
        "304s on the revisit"
    );
    let results: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("out/results.json")).unwrap()).unwrap();
    assert_eq!(results["loads"].as_array().unwrap().len(), 4);
    assert!(results["summary"][0]["plt_ms"]["mean"].as_f64().unwrap() > 0.0);
    let report = std::fs::read_to_string(dir.join("out/report.html")).unwrap();
    assert_eq!(report.matches("<svg").count(), 3);
    let har: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("out").join(&cold.har)).unwrap()).unwrap();
    assert_eq!(har["log"]["entries"].as_array().unwrap().len(), 9);
}

#[test]
fn an_object_the_server_cannot_serve_is_an_error_and_the_run_goes_on() {
    if !netns_available("an_object_the_server_cannot_serve_is_an_error_and_the_run_goes_on") {
        return;
    }
    let dir = TestDir::new("run-missing");
    let corpus = small_corpus(&dir.join("corpus"));
    // Lose one image's body.
    let victim = &corpus.manifest.pages[0].objects[3].versions[0].body;
    std::fs::remove_file(dir.join("corpus").join("bodies").join(victim)).unwrap();
    let all = configs::load(None).unwrap();
    let mut opts = RunOptions::new(
        webpep_link_model::resolve("cdma-1x").unwrap(),
        corpus,
        dir.join("out"),
    );
    opts.configs = configs::select(&all, &["http11".to_string()]).unwrap();
    opts.time_scale = 10.0;
    opts.gap_s = 1.0;
    opts.repeat = 2;
    opts.progress = false;
    let r = run(&opts).expect("the run goes on");
    assert_eq!(r.loads.len(), 2);
    for l in &r.loads {
        assert_eq!(l.objects, 9);
        assert_eq!(l.errors, 1, "the lost body is one failed object");
    }
}

/// A page over six domains with DNS TTL 0: every lookup crosses the air link, and the DNS
/// time of the breakdown is several round trips.
/// How many of a HAR's entries spent time on `timing` (`dns`: made a lookup; `connect`:
/// opened a connection); HAR writes −1 for a step that did not happen.
fn har_count(path: &Path, timing: &str) -> usize {
    let har: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    har["log"]["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["timings"][timing].as_f64().unwrap_or(-1.0) >= 0.0)
        .count()
}

/// The load of `config` in a run of the small corpus, checked complete (9 objects, no error).
fn full_load<'a>(r: &'a Results, config: &str) -> &'a LoadRecord {
    let l = r.loads.iter().find(|l| l.config == config).unwrap();
    assert_eq!((l.objects + l.inlined, l.errors), (9, 0), "{config}");
    l
}

/// How many of a HAR's entries made a DNS lookup.
fn har_lookups(path: &Path) -> usize {
    har_count(path, "dns")
}

#[test]
fn dns_over_the_link_shows_in_the_breakdown() {
    if !netns_available("dns_over_the_link_shows_in_the_breakdown") {
        return;
    }
    let dir = TestDir::new("run-dns");
    let mut w = CorpusWriter::create(&dir.join("corpus")).unwrap();
    let hosts: Vec<String> = (0..6).map(|i| format!("d{i}.six.test")).collect();
    let mut html = String::from("<html><body>");
    let mut objects = Vec::new();
    for h in &hosts[1..] {
        html += &format!("<img src=\"http://{h}/x.gif\">");
        objects.push(Object {
            url: format!("http://{h}/x.gif"),
            content_type: "image/gif".into(),
            status: 200,
            headers: vec![],
            versions: vec![w.version(&[7u8; 500], LM).unwrap()],
        });
    }
    html += "</body></html>";
    objects.insert(
        0,
        Object {
            url: format!("http://{}/", hosts[0]),
            content_type: "text/html".into(),
            status: 200,
            headers: vec![],
            versions: vec![w.version(html.as_bytes(), LM).unwrap()],
        },
    );
    let corpus = w
        .finish(&Manifest {
            format_version: FORMAT_VERSION,
            name: "six".into(),
            description: String::new(),
            domains: hosts.clone(),
            pages: vec![Page {
                id: "six".into(),
                url: format!("http://{}/", hosts[0]),
                source: "test".into(),
                captured_schemes: false,
                objects,
            }],
        })
        .unwrap();
    let profile = webpep_link_model::resolve("cdma-1x").unwrap();
    let rtt = profile.rtt_ms();
    let all = configs::load(None).unwrap();
    let mut opts = RunOptions::new(profile, corpus, dir.join("out"));
    opts.configs = configs::select(&all, &["http11".to_string()]).unwrap();
    opts.time_scale = 10.0;
    opts.gap_s = 1.0;
    opts.dns_ttl_s = 0;
    opts.progress = false;
    let r = run(&opts).expect("run");
    let l = &r.loads[0];
    assert_eq!(l.errors, 0);
    eprintln!("six domains, TTL 0: {:?} (RTT {rtt:.0} ms)", l.breakdown_ms);
    // The root's lookup alone is one RTT; the five others overlap each other but not payload.
    assert!(l.breakdown_ms.dns >= 1.5 * rtt, "{:?}", l.breakdown_ms);
    let lookups = har_lookups(&dir.join("out").join(&l.har));
    assert_eq!(lookups, 6, "one lookup per domain crossed the link");
}

/// 002's long TTL: on a revisit after the origins' TTL has run out, the plain client looks
/// every name up again over the air, while under DNS rewriting the proxy's answers (TTL one
/// day) are still cached and the revisit makes no lookup at all.
#[test]
fn dns_rewriting_answers_outlive_the_origin_ttl_on_a_revisit() {
    if !netns_available("dns_rewriting_answers_outlive_the_origin_ttl_on_a_revisit") {
        return;
    }
    let dir = TestDir::new("run-dns-warm");
    let mut opts = small_options(&dir, &["http11-warm", "transparent-dns-warm"]);
    // TTL 2 s unscaled is 1 s of wall time at k = 10 (the floor); the gap, 2 s of wall time.
    opts.dns_ttl_s = 2;
    opts.gap_s = 20.0;
    let r = run(&opts).expect("run");
    eprintln!("{}", r.table());
    let lookups = |config: &str| {
        let l = full_load(&r, config);
        (
            har_lookups(&dir.join("out").join(&l.har)),
            l.breakdown_ms.dns,
        )
    };
    let (plain_n, plain_ms) = lookups("http11-warm");
    assert!(
        plain_n >= 1 && plain_ms > 0.0,
        "expired answers are looked up again: {plain_n}, {plain_ms} ms"
    );
    assert_eq!(
        lookups("transparent-dns-warm"),
        (0, 0.0),
        "the proxy's answers are still cached"
    );
}

/// 002's repeated downloads (`http11-repeat`): the revisit fetches every body again (cache
/// off) with the names still cached over the connections kept from the first load, except
/// those the origins closed while idle (Apache's 15 s). A warm revisit (`http11-warm`)
/// revalidates from its cache and, by default, opens its connections again.
#[test]
fn a_repeated_download_fetches_everything_again_over_kept_connections() {
    if !netns_available("a_repeated_download_fetches_everything_again_over_kept_connections") {
        return;
    }
    let dir = TestDir::new("run-repeat");
    let mut opts = small_options(&dir, &["http11", "http11-warm", "http11-repeat"]);
    // The same with origins that keep idle connections for 100 s.
    let kept = configs::parse(
        "[repeat-kept]\npolicy = \"http11\"\nwarm = true\nrevisit_cache = false\n\
         revisit_connections = true\norigin_keepalive_s = 100\n",
        "test",
    )
    .unwrap();
    opts.configs
        .push(("repeat-kept".into(), kept["repeat-kept"].clone()));
    // 20 s unscaled between the loads: past the origins' 15 s keep-alive, within the 30 s TTL.
    opts.gap_s = 20.0;
    let r = run(&opts).expect("run");
    eprintln!("{}", r.table());
    let load = |config: &str| {
        let l = full_load(&r, config);
        let har = dir.join("out").join(&l.har);
        (l.body_bytes, har_lookups(&har), har_count(&har, "connect"))
    };
    let (cold_bytes, cold_lookups, cold_connects) = load("http11");
    assert!(cold_lookups > 0 && cold_connects > 0);
    let (bytes, lookups, connects) = load("http11-repeat");
    assert_eq!(bytes, cold_bytes, "every body fetched again");
    assert_eq!(lookups, 0, "the names are still cached");
    assert!(connects > 0, "the origins closed the idle connections");
    let (bytes, lookups, connects) = load("repeat-kept");
    assert_eq!(
        (bytes, lookups, connects),
        (cold_bytes, 0, 0),
        "kept connections"
    );
    let (bytes, lookups, connects) = load("http11-warm");
    assert!(
        bytes * 2 < cold_bytes,
        "a warm revisit revalidates: {bytes}"
    );
    assert_eq!(lookups, 0);
    assert!(connects > 0, "connections closed between the loads");
}

/// webpep's edge proxy in each of its modes (issue 4): every object arrives through it; the
/// explicit and URL-rewriting modes keep DNS off the air link, DNS rewriting and interception
/// do not; URL rewriting sends every request to the proxy's address.
#[test]
fn the_edge_proxy_serves_every_mode() {
    if !netns_available("the_edge_proxy_serves_every_mode") {
        return;
    }
    let dir = TestDir::new("run-proxy");
    let names = [
        "http11",
        "explicit",
        "explicit-pipelining",
        "transparent-dns",
        "transparent-url",
        "intercept",
        "explicit-plain",
        "dual",
    ];
    let r = run_small(&dir, &names);
    eprintln!("{}\n{}\n{}", r.table(), r.air_table(), r.link_table());
    assert_eq!(r.loads.len(), names.len());
    assert!(
        (r.link_down_kbps - 78.0).abs() < 1e-6 && r.link_rtt_ms > 100.0,
        "cdma-1x facts: {} kbit/s, {} ms",
        r.link_down_kbps,
        r.link_rtt_ms
    );
    for l in &r.loads {
        // The link cannot carry more than its rate, and no load beats one idle RTT plus
        // its bodies at the full rate.
        assert!(
            l.utilization > 0.0 && l.utilization <= 1.02,
            "{}: utilization {}",
            l.config,
            l.utilization
        );
        assert!(
            l.efficiency > 0.0 && l.efficiency < 1.0 && l.bound_ms < l.plt_ms,
            "{}: efficiency {} (bound {} ms, PLT {} ms)",
            l.config,
            l.efficiency,
            l.bound_ms,
            l.plt_ms
        );
        assert_eq!(l.objects + l.inlined, 9, "{}: every object", l.config);
        assert_eq!(l.errors, 0, "{}", l.config);
        // Requested + inlined + missing = the page's objects, nothing missing (issue 36).
        assert_eq!(
            (l.page_objects, l.missing),
            (9, 0),
            "{}: {:?}",
            l.config,
            l.missing_why
        );
        // webpep's proxy copies the small stylesheet into the page, except with every
        // switch off.
        let inlines = !matches!(l.config.as_str(), "http11" | "explicit-plain");
        assert_eq!(l.inlined, usize::from(inlines), "{}: inlined", l.config);
        let dns = l.breakdown_ms.dns;
        match l.config.as_str() {
            "explicit" | "explicit-pipelining" | "explicit-plain" | "transparent-url" | "dual" => {
                assert!(dns < 1.0, "{}: no DNS over the air: {dns}", l.config)
            }
            _ => assert!(dns > 300.0, "{}: DNS crosses the air: {dns}", l.config),
        }
    }
    let url_load = r
        .loads
        .iter()
        .find(|l| l.config == "transparent-url")
        .unwrap();
    let har: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("out").join(&url_load.har)).unwrap())
            .unwrap();
    let entries = har["log"]["entries"].as_array().unwrap();
    // Every object but the stylesheet, which the proxy inlined into the page.
    assert_eq!(entries.len() + url_load.inlined, 9);
    for e in entries {
        let u = e["request"]["url"].as_str().unwrap();
        assert!(
            u.contains("/www.small.test/") || u.contains("/img.small.test/"),
            "every URL is rewritten to the proxy: {u}"
        );
    }
    // Nothing is left behind: the proxy's cache directories are gone.
    let left: Vec<_> = std::fs::read_dir(dir.join("out"))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("edge-cache"))
        .collect();
    assert!(left.is_empty(), "cache directories left behind");
}

/// `accept_webp`: the browser that lists image/webp gets a photo as WebP through the proxy;
/// the papers' browser, which does not, gets JPEG (smaller than the origin's either way).
#[test]
fn webp_goes_only_to_a_browser_that_accepts_it() {
    if !netns_available("webp_goes_only_to_a_browser_that_accepts_it") {
        return;
    }
    let dir = TestDir::new("run-webp");
    let corpus_dir = dir.join("corpus");
    let mut w = CorpusWriter::create(&corpus_dir).unwrap();
    let photo = webpep_corpus::images::fit(webpep_corpus::images::ImageKind::Jpeg, 7, 12_000)
        .unwrap()
        .bytes;
    let html = b"<html><body><img src=\"http://img.webp.test/photo.jpg\"></body></html>";
    let objects = vec![
        Object {
            url: "http://www.webp.test/".into(),
            content_type: "text/html".into(),
            status: 200,
            headers: vec![],
            versions: vec![w.version(html, LM).unwrap()],
        },
        Object {
            url: "http://img.webp.test/photo.jpg".into(),
            content_type: "image/jpeg".into(),
            status: 200,
            headers: vec![],
            versions: vec![w.version(&photo, LM).unwrap()],
        },
    ];
    let corpus = w
        .finish(&Manifest {
            format_version: FORMAT_VERSION,
            name: "webp".into(),
            description: String::new(),
            domains: vec!["www.webp.test".into(), "img.webp.test".into()],
            pages: vec![Page {
                id: "webp".into(),
                url: "http://www.webp.test/".into(),
                source: "test".into(),
                captured_schemes: false,
                objects,
            }],
        })
        .unwrap();
    let r = run(&options(
        corpus,
        &dir,
        &["http11", "explicit", "explicit-webp"],
    ))
    .expect("run");
    let photo_entry = |config: &str| {
        let l = r.loads.iter().find(|l| l.config == config).unwrap();
        assert_eq!((l.objects, l.errors), (2, 0), "{config}");
        let har: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("out").join(&l.har)).unwrap()).unwrap();
        har["log"]["entries"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["request"]["url"].as_str().unwrap().ends_with("photo.jpg"))
            .cloned()
            .unwrap()
    };
    let accept = |e: &serde_json::Value| {
        e["request"]["headers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|h| h["name"].as_str().unwrap().eq_ignore_ascii_case("accept"))
            .map(|h| h["value"].as_str().unwrap().to_string())
            .unwrap()
    };
    let mime = |e: &serde_json::Value| e["response"]["content"]["mimeType"].clone();
    let size = |e: &serde_json::Value| e["response"]["content"]["size"].as_u64().unwrap();

    let direct = photo_entry("http11");
    assert_eq!(mime(&direct), "image/jpeg");
    assert_eq!(size(&direct), photo.len() as u64);
    let old = photo_entry("explicit");
    assert!(!accept(&old).contains("image/webp"), "{}", accept(&old));
    assert_eq!(mime(&old), "image/jpeg");
    let new = photo_entry("explicit-webp");
    assert!(
        accept(&new).starts_with("image/webp,text/xml"),
        "{}",
        accept(&new)
    );
    assert_eq!(mime(&new), "image/webp");
    assert!(
        size(&new) < size(&old) && size(&old) < photo.len() as u64,
        "WebP {} < JPEG {} < origin {}",
        size(&new),
        size(&old),
        photo.len()
    );
}

/// DESIGN §9: an outage of the air link loses no request. Through the edge proxy (no DNS at
/// the client) and through the dual proxy (one QUIC connection, which outlives the outage),
/// a page loaded across a 20 s outage gets every object, only later.
#[test]
fn an_air_outage_loses_no_request_through_the_edge_proxy() {
    if !netns_available("an_air_outage_loses_no_request_through_the_edge_proxy") {
        return;
    }
    let dir = TestDir::new("run-outage");
    let corpus = small_corpus(&dir.join("corpus"));
    let all = configs::load(None).unwrap();
    let names: Vec<String> = ["explicit", "transparent-url", "dual"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let load_over = |outages: bool, out: &str| {
        let mut profile = webpep_link_model::presets::preset("cdma-1x", None).unwrap();
        if outages {
            // One 20 s outage 1 s in (unscaled): the lab counts it from each load's start, so
            // every load meets it, the later repeats too (counted from the link's start, it
            // would hit one load of the run at most).
            profile.outages.scheduled = vec![[1.0, 20.0]];
        }
        let mut opts = RunOptions::new(
            profile.resolve(None).unwrap(),
            corpus.clone(),
            dir.join(out),
        );
        opts.configs = configs::select(&all, &names).unwrap();
        opts.time_scale = 10.0;
        opts.gap_s = 1.0;
        opts.progress = false;
        opts.baseline = "explicit".into();
        opts.repeat = 2;
        run(&opts).expect("run")
    };
    let plain = load_over(false, "plain");
    let cut = load_over(true, "outages");
    eprintln!("{}\n{}", plain.table(), cut.table());
    assert_eq!(cut.loads.len(), 6);
    for l in &cut.loads {
        assert_eq!(l.objects + l.inlined, 9, "{}: every object", l.config);
        assert_eq!(l.errors, 0, "{}: no request lost", l.config);
        let before = plain
            .loads
            .iter()
            .find(|p| p.config == l.config && p.repeat == l.repeat)
            .unwrap()
            .plt_ms;
        assert!(
            l.plt_ms > before + 10_000.0,
            "{} #{}: {:.1} s across the outage against {:.1} s without: it was not met",
            l.config,
            l.repeat,
            l.plt_ms / 1000.0,
            before / 1000.0
        );
    }
}

/// The Chromium binary, or `None` with a printed reason; in CI (`WEBPEP_REQUIRE_CHROMIUM=1`)
/// a missing browser fails the test instead.
fn peers_available(test: &str) -> bool {
    use webpep_lab::configs::Peer;
    let why: Vec<String> = [Peer::Squid, Peer::Ziproxy]
        .into_iter()
        .filter_map(webpep_lab::peers::cannot_run)
        .collect();
    if why.is_empty() {
        return true;
    }
    skip_unless_required(test, "WEBPEP_REQUIRE_PEERS", &why.join("; "))
}

/// Processes whose command line mentions `needle` (a peer's configuration path).
fn processes_mentioning(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().filter_map(|e| e.ok()) {
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(needle) {
                found.push(cmd);
            }
        }
    }
    found
}

/// DESIGN §7.4: Squid and Ziproxy run at the edge as the explicit proxy in place of webpep's,
/// every object arrives through them, and neither process nor directory outlives the run.
#[test]
fn peer_proxies_run_at_the_edge_in_place_of_webpep() {
    let test = "peer_proxies_run_at_the_edge_in_place_of_webpep";
    if !netns_available(test) || !peers_available(test) {
        return;
    }
    let dir = TestDir::new("run-peers");
    let r = run_small(&dir, &["http11", "squid", "ziproxy"]);
    let out = dir.join("out");
    eprintln!("{}\n{}", r.table(), r.air_table());
    assert!(r.configs["squid"].contains("Squid, stock"));
    for l in &r.loads {
        assert_eq!(l.objects + l.inlined, 9, "{}: every object", l.config);
        assert_eq!(l.errors, 0, "{}", l.config);
        if l.config != "http11" {
            assert!(l.breakdown_ms.dns < 1.0, "{}: the proxy resolves", l.config);
        }
    }
    let har_of = |config: &str| -> serde_json::Value {
        let l = r.loads.iter().find(|l| l.config == config).unwrap();
        serde_json::from_slice(&std::fs::read(out.join(&l.har)).unwrap()).unwrap()
    };
    let header = |e: &serde_json::Value, name: &str| -> Option<String> {
        e["response"]["headers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|h| h["name"].as_str().unwrap().eq_ignore_ascii_case(name))
            .map(|h| h["value"].as_str().unwrap().to_string())
    };
    // Squid names itself in Via on every response.
    for e in har_of("squid")["log"]["entries"].as_array().unwrap() {
        let via = header(e, "Via").unwrap_or_default();
        assert!(via.contains("squid"), "Via from Squid: {via:?}");
    }
    // Ziproxy gzips the page for the browser and closes each connection after a response.
    let zi = har_of("ziproxy");
    let entries = zi["log"]["entries"].as_array().unwrap();
    let page = entries
        .iter()
        .find(|e| e["request"]["url"] == "http://www.small.test/")
        .unwrap();
    assert_eq!(header(page, "Content-Encoding").as_deref(), Some("gzip"));
    assert!(entries
        .iter()
        .all(|e| header(e, "Connection").as_deref() == Some("close")));
    // Nothing is left behind.
    assert!(
        processes_mentioning(&out.to_string_lossy()).is_empty(),
        "a peer process is left"
    );
    let left: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("peer-"))
        .collect();
    assert!(left.is_empty(), "peer directories left behind");
}

/// Namespaces and Chromium both there (else a printed reason; CI requires Chromium).
fn chromium_available(test: &str) -> bool {
    netns_available(test) && webpep_lab::chromium::available_for_test(test)
}

/// A page whose name is on Chromium's HSTS preload list (all of `.dev` is), with an http://
/// ad frame on another site: Chromium fetches the page over https on its own, and the frame,
/// now cross-site, runs in a process of its own. Both loads record every object; the
/// Chromium load says which host it upgraded.
#[test]
fn chromium_records_an_hsts_upgrade_and_a_cross_site_frame() {
    let test = "chromium_records_an_hsts_upgrade_and_a_cross_site_frame";
    if !chromium_available(test) {
        return;
    }
    let dir = TestDir::new("run-chromium-frames");
    let mut w = CorpusWriter::create(&dir.join("corpus")).unwrap();
    let mut object = |url: &str, content_type: &str, body: &[u8]| Object {
        url: url.into(),
        content_type: content_type.into(),
        status: 200,
        headers: vec![],
        versions: vec![w.version(body, LM).unwrap()],
    };
    let banner: Vec<u8> = (0..2000u32).map(|b| (b * 13) as u8).collect();
    let objects = vec![
        object(
            "http://www.frames.dev/",
            "text/html",
            b"<html><body><p>news</p><iframe src=\"http://ads.other.test/ad.html\"></iframe></body></html>",
        ),
        object(
            "http://ads.other.test/ad.html",
            "text/html",
            b"<html><body><img src=\"http://ads.other.test/banner.gif\"></body></html>",
        ),
        object("http://ads.other.test/banner.gif", "image/gif", &banner),
    ];
    let corpus = w
        .finish(&Manifest {
            format_version: FORMAT_VERSION,
            name: "frames".into(),
            description: String::new(),
            domains: vec!["www.frames.dev".into(), "ads.other.test".into()],
            pages: vec![Page {
                id: "frames".into(),
                url: "http://www.frames.dev/".into(),
                source: "test".into(),
                captured_schemes: false,
                objects,
            }],
        })
        .unwrap();
    let r = run(&options(corpus, &dir, &["http11", "chromium"])).expect("run");
    eprintln!("{}\n{}", r.table(), r.tls_upgrade_note());
    for l in &r.loads {
        assert_eq!(l.errors, 0, "{}", l.config);
        assert_eq!(
            l.objects, 3,
            "{}: the page, the frame and its image",
            l.config
        );
        let har: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("out").join(&l.har)).unwrap()).unwrap();
        let urls: Vec<&str> = har["log"]["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["request"]["url"].as_str().unwrap())
            .collect();
        assert!(
            urls.contains(&"http://ads.other.test/banner.gif"),
            "{}: {urls:?}",
            l.config
        );
        let (page, upgrades) = match l.config.as_str() {
            "chromium" => (
                "https://www.frames.dev/",
                vec!["www.frames.dev".to_string()],
            ),
            _ => ("http://www.frames.dev/", vec![]),
        };
        assert_eq!(urls[0], page, "{}", l.config);
        assert_eq!(l.tls_upgrades, upgrades, "{}", l.config);
        assert_eq!(
            har["log"]["pages"][0]["_tlsUpgrades"],
            serde_json::json!(upgrades)
        );
    }
    assert!(r
        .tls_upgrade_note()
        .contains("frames: www.frames.dev (chromium)"));
}

/// Issue 36 item 2: a blocking script in the head whose host does not resolve stops neither
/// browser: the 2003 model (whose scripts block its parser) and real Chromium both load the
/// rest of the page, and the failed script is counted as an error, not lost.
#[test]
fn a_blocking_script_whose_host_does_not_resolve_stops_neither_browser() {
    let test = "a_blocking_script_whose_host_does_not_resolve_stops_neither_browser";
    if !chromium_available(test) {
        return;
    }
    let dir = TestDir::new("run-unresolved-script");
    let mut w = CorpusWriter::create(&dir.join("corpus")).unwrap();
    let gif: Vec<u8> = (0..3000u32).map(|b| (b * 7) as u8).collect();
    let mut object = |url: &str, content_type: &str, body: &[u8]| Object {
        url: url.into(),
        content_type: content_type.into(),
        status: 200,
        headers: vec![],
        versions: vec![w.version(body, LM).unwrap()],
    };
    let objects = vec![
        object(
            "http://www.script.test/",
            "text/html",
            b"<html><head><script src=\"http://nowhere.invalid/a.js\"></script></head>\
              <body><img src=\"/one.gif\"><img src=\"/two.gif\"></body></html>",
        ),
        object("http://www.script.test/one.gif", "image/gif", &gif),
        object("http://www.script.test/two.gif", "image/gif", &gif),
    ];
    let corpus = w
        .finish(&Manifest {
            format_version: FORMAT_VERSION,
            name: "script".into(),
            description: String::new(),
            domains: vec!["www.script.test".into()],
            pages: vec![Page {
                id: "script".into(),
                url: "http://www.script.test/".into(),
                source: "test".into(),
                captured_schemes: false,
                objects,
            }],
        })
        .unwrap();
    let r = run(&options(corpus, &dir, &["http11", "chromium"])).expect("run");
    eprintln!("{}", r.table());
    for l in &r.loads {
        let har: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("out").join(&l.har)).unwrap()).unwrap();
        let status = |path: &str| {
            har["log"]["entries"]
                .as_array()
                .unwrap()
                .iter()
                .find(|e| e["request"]["url"].as_str().unwrap().ends_with(path))
                .map(|e| e["response"]["status"].as_u64().unwrap_or(0))
        };
        assert_eq!(status("/a.js"), Some(0), "{}: the script failed", l.config);
        for path in ["/one.gif", "/two.gif"] {
            assert_eq!(status(path), Some(200), "{}: {path} after it", l.config);
        }
        assert!(l.errors >= 1, "{}: the failure is counted", l.config);
        assert_eq!((l.page_objects, l.missing), (3, 0), "{}", l.config);
    }
    let model = r.loads.iter().find(|l| l.config == "http11").unwrap();
    assert_eq!((model.objects, model.errors), (4, 1));
}

/// Issue 36 item 5: air bytes are the load's up to its end. A page that fetches a 6 KB
/// image 150 ms (wall) after its load event: Chromium's load counts the page's bytes only, the image's
/// come under `late_down_bytes` (within the late window); the browser model, which runs no
/// scripts, never asks for it and reports it as not referenced.
#[test]
fn chromium_late_requests_are_counted_apart_from_the_load() {
    let test = "chromium_late_requests_are_counted_apart_from_the_load";
    if !chromium_available(test) {
        return;
    }
    let dir = TestDir::new("run-chromium-late");
    let mut w = CorpusWriter::create(&dir.join("corpus")).unwrap();
    let late: Vec<u8> = (0..6_000u32).map(|b| (b * 31 + b / 7) as u8).collect();
    let objects = vec![
        Object {
            url: "http://www.late.test/".into(),
            content_type: "text/html".into(),
            status: 200,
            headers: vec![],
            versions: vec![w
                .version(
                    b"<html><body onload=\"setTimeout(function () { new Image().src = \
                      '/late.gif'; }, 150)\"><p>news</p></body></html>",
                    LM,
                )
                .unwrap()],
        },
        Object {
            url: "http://www.late.test/late.gif".into(),
            content_type: "image/gif".into(),
            status: 200,
            headers: vec![],
            versions: vec![w.version(&late, LM).unwrap()],
        },
    ];
    let corpus = w
        .finish(&Manifest {
            format_version: FORMAT_VERSION,
            name: "late".into(),
            description: String::new(),
            domains: vec!["www.late.test".into()],
            pages: vec![Page {
                id: "late".into(),
                url: "http://www.late.test/".into(),
                source: "test".into(),
                captured_schemes: false,
                objects,
            }],
        })
        .unwrap();
    let r = run(&options(corpus, &dir, &["http11", "chromium"])).expect("run");
    eprintln!("{}", r.air_table());
    let load = |c: &str| r.loads.iter().find(|l| l.config == c).expect(c);
    let chromium = load("chromium");
    assert!(
        chromium.late_down_bytes > 6_000,
        "the late image crossed after the load event: {chromium:?}"
    );
    assert!(
        chromium.air_down_bytes < 6_000,
        "the load's bytes leave the late image out: {chromium:?}"
    );
    assert!(chromium.utilization <= 1.0, "{chromium:?}");
    let model = load("http11");
    assert_eq!((model.late_down_bytes, model.late_up_bytes), (0, 0));
    assert_eq!(
        model.missing_why.get("not referenced"),
        Some(&1),
        "{model:?}"
    );
    assert!(r
        .air_table()
        .contains("Late: air bytes after the load event"));
}

/// DESIGN §7.4: real Chromium in `ue` loads the page over the emulated link, direct (its DNS
/// crossing the air to the lab's resolver) and through the edge proxy, and its load is
/// recorded like the browser model's.
#[test]
fn real_chromium_loads_the_page_direct_and_through_the_edge_proxy() {
    let test = "real_chromium_loads_the_page_direct_and_through_the_edge_proxy";
    if !chromium_available(test) {
        return;
    }
    let dir = TestDir::new("run-chromium");
    let r = run_small(
        &dir,
        &[
            "http11",
            "chromium",
            "chromium-explicit",
            "chromium-transparent-dns",
            "chromium-transparent-url",
        ],
    );
    eprintln!("{}\n{}", r.table(), r.air_table());
    assert!(r.configs["chromium"].contains("real Chromium"));
    for l in &r.loads {
        // The stylesheet's background image is fetched only if something shows it: the
        // small page's body does.
        assert_eq!(l.objects + l.inlined, 9, "{}: every object", l.config);
        assert_eq!(l.errors, 0, "{}", l.config);
        assert!(l.plt_ms > 1000.0, "{}: PLT {} ms", l.config, l.plt_ms);
        assert!(l.air_down_bytes > 0 && l.air_up_bytes > 0, "{}", l.config);
        let b = &l.breakdown_ms;
        assert!((b.dns + b.connect + b.idle + b.payload - l.plt_ms).abs() < 1.0);
        match l.config.as_str() {
            // Chromium's lookups cross the air to the lab's resolver in edge (under DNS
            // rewriting, redirected to the rewriting proxy).
            "chromium" | "chromium-transparent-dns" => {
                assert!(b.dns > 100.0, "{}: DNS over the air: {}", l.config, b.dns)
            }
            "chromium-explicit" | "chromium-transparent-url" => {
                assert!(b.dns < 1.0, "{}: no DNS at the client: {}", l.config, b.dns)
            }
            _ => {}
        }
    }
    let har_of = |config: &str| -> serde_json::Value {
        let l = r.loads.iter().find(|l| l.config == config).unwrap();
        serde_json::from_slice(&std::fs::read(dir.join("out").join(&l.har)).unwrap()).unwrap()
    };
    // Through the proxy: absolute URIs to the proxy's address, answered by it (the stylesheet
    // inlined into the page).
    let explicit = r
        .loads
        .iter()
        .find(|l| l.config == "chromium-explicit")
        .unwrap();
    assert_eq!(explicit.inlined, 1);
    let har = har_of("chromium-explicit");
    let entries = har["log"]["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 8);
    let image = entries
        .iter()
        .find(|e| e["request"]["url"] == "http://img.small.test/bg.gif")
        .expect("the stylesheet's image");
    let has = |e: &serde_json::Value, side: &str, name: &str, value: &str| {
        e[side]["headers"].as_array().unwrap().iter().any(|h| {
            h["name"].as_str().unwrap().eq_ignore_ascii_case(name)
                && h["value"].as_str().unwrap().contains(value)
        })
    };
    assert!(has(image, "request", "Proxy-Connection", "keep-alive"));
    assert!(has(image, "response", "Via", "webpep"));
    // DNS rewriting: the names resolve to the proxy, which answers every object.
    let edge_answers = |config: &str| {
        let har = har_of(config);
        har["log"]["entries"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| has(e, "response", "Via", "webpep"))
            .count()
    };
    assert_eq!(edge_answers("chromium-transparent-dns"), 8);
    assert_eq!(
        edge_answers("chromium"),
        0,
        "direct loads do not meet the proxy"
    );
    // URL rewriting: every URL Chromium asked for names the proxy.
    for e in har_of("chromium-transparent-url")["log"]["entries"]
        .as_array()
        .unwrap()
    {
        let u = e["request"]["url"].as_str().unwrap();
        assert!(
            u.contains("/www.small.test/") || u.contains("/img.small.test/"),
            "rewritten: {u}"
        );
    }
    // No browser profile is left behind.
    let left: Vec<_> = std::fs::read_dir(dir.join("out"))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("chromium-"))
        .collect();
    assert!(left.is_empty(), "browser directories left behind");
}

/// The small corpus plus a page served only over https, which the URL-rewriting mode cannot
/// serve (it rewrites http:// URLs).
fn corpus_with_an_https_page(dir: &Path) -> Corpus {
    let small = small_corpus(&dir.join("small"));
    let mut w = CorpusWriter::create(dir).unwrap();
    let mut pages = small.manifest.pages.clone();
    for p in &mut pages {
        for o in &mut p.objects {
            for v in &mut o.versions {
                let body = small.body(&v.body).unwrap();
                *v = w.version(&body, LM).unwrap();
            }
        }
    }
    let html = b"<html><body><p>secure</p><img src=\"/s.gif\"></body></html>";
    pages.push(Page {
        id: "secure".into(),
        url: "https://www.small.test/".into(),
        source: "test".into(),
        captured_schemes: false,
        objects: vec![
            Object {
                url: "https://www.small.test/".into(),
                content_type: "text/html".into(),
                status: 200,
                headers: vec![],
                versions: vec![w.version(html, LM).unwrap()],
            },
            Object {
                url: "https://www.small.test/s.gif".into(),
                content_type: "image/gif".into(),
                status: 200,
                headers: vec![],
                versions: vec![w.version(&[7u8; 500], LM).unwrap()],
            },
        ],
    });
    w.finish(&Manifest {
        format_version: FORMAT_VERSION,
        name: "small-https".into(),
        description: String::new(),
        domains: small.manifest.domains.clone(),
        pages,
    })
    .unwrap()
}

#[test]
fn a_configuration_that_cannot_load_a_page_does_not_stop_the_run() {
    if !netns_available("a_configuration_that_cannot_load_a_page_does_not_stop_the_run") {
        return;
    }
    let dir = TestDir::new("run-na");
    let corpus = corpus_with_an_https_page(&dir.join("corpus"));
    let opts = options(corpus, &dir, &["http11", "transparent-url"]);
    let r = run(&opts).expect("the run completes");
    eprintln!("{}", r.not_applicable_note());
    // Every load but transparent-url on the https page, each with every object.
    let made: Vec<(&str, &str)> = r
        .loads
        .iter()
        .map(|l| (l.page.as_str(), l.config.as_str()))
        .collect();
    assert_eq!(
        made,
        [
            ("small", "http11"),
            ("small", "transparent-url"),
            ("secure", "http11")
        ]
    );
    assert!(r.loads.iter().all(|l| l.errors == 0), "{:?}", r.loads);
    assert_eq!(r.not_applicable.len(), 1);
    let na = &r.not_applicable[0];
    assert_eq!(
        (na.page.as_str(), na.config.as_str()),
        ("secure", "transparent-url")
    );
    assert!(na.reason.contains("URL-rewritten"), "{}", na.reason);
    // The files say the same, the run is marked whole, and the report names what was left out.
    let text = std::fs::read_to_string(dir.join("out/results.json")).unwrap();
    let back: Results = serde_json::from_str(&text).unwrap();
    assert!(back.complete);
    assert_eq!(back.not_applicable, r.not_applicable);
    let html = std::fs::read_to_string(dir.join("out/report.html")).unwrap();
    assert!(html.contains("Not applicable"), "report names it");
    assert!(r.not_applicable_note().contains("secure transparent-url"));
}

/// A page served only over https, of compressible text, a small stylesheet and an image.
fn https_text_corpus(dir: &Path) -> Corpus {
    let mut w = CorpusWriter::create(dir).unwrap();
    let mut html = String::from(
        "<html><head><link rel=stylesheet href=\"/s.css\"></head><body><img src=\"https://img.small.test/a.gif\">",
    );
    for i in 0..300 {
        html += &format!("<p class=\"story\">Story {i}: the slow link carries this text compressed only when the proxy can read it.</p>\n");
    }
    html += "</body></html>";
    let object = |url: &str, ct: &str, v| Object {
        url: url.into(),
        content_type: ct.into(),
        status: 200,
        headers: vec![],
        versions: vec![v],
    };
    let objects = vec![
        object(
            "https://www.small.test/",
            "text/html",
            w.version(html.as_bytes(), LM).unwrap(),
        ),
        object(
            "https://www.small.test/s.css",
            "text/css",
            w.version(b"p.story { margin: 0 0 1em 0; color: #222 }", LM)
                .unwrap(),
        ),
        object(
            "https://img.small.test/a.gif",
            "image/gif",
            w.version(&[9u8; 1500], LM).unwrap(),
        ),
    ];
    w.finish(&Manifest {
        format_version: FORMAT_VERSION,
        name: "small-https-text".into(),
        description: String::new(),
        domains: vec!["www.small.test".into(), "img.small.test".into()],
        pages: vec![Page {
            id: "secure".into(),
            url: "https://www.small.test/".into(),
            source: "test".into(),
            captured_schemes: false,
            objects,
        }],
    })
    .unwrap()
}

/// Issue 35: an https page through the dual proxy. Tunnelled (`dual`), the edge sees only
/// bytes; intercepted (`dual-intercept`), the client ends the browser's TLS with a leaf of the
/// lab CA, the edge fetches the page over verified TLS and compresses it and inlines its
/// stylesheet, and fewer bytes cross the air.
#[test]
fn an_https_page_gets_every_stage_when_the_client_intercepts() {
    if !netns_available("an_https_page_gets_every_stage_when_the_client_intercepts") {
        return;
    }
    let dir = TestDir::new("run-intercept");
    let corpus = https_text_corpus(&dir.join("corpus"));
    let opts = options(corpus, &dir, &["dual", "dual-intercept"]);
    let r = run(&opts).expect("the run completes");
    eprintln!("{}\n{}", r.table(), r.air_table());
    let load = |c: &str| r.loads.iter().find(|l| l.config == c).unwrap();
    let (tunnel, intercept) = (load("dual"), load("dual-intercept"));
    for l in [tunnel, intercept] {
        assert_eq!(l.errors, 0, "{}: {l:?}", l.config);
        assert_eq!((l.page_objects, l.missing), (3, 0), "{}", l.config);
    }
    assert_eq!(tunnel.inlined, 0, "a tunnel cannot be read");
    assert_eq!(intercept.inlined, 1, "the stylesheet went into the page");
    assert!(
        intercept.air_down_bytes * 2 < tunnel.air_down_bytes,
        "compressed: {} bytes down intercepted, {} tunnelled",
        intercept.air_down_bytes,
        tunnel.air_down_bytes
    );
}

/// Real Chromium through the intercepting client: it trusts the lab's CA through the NSS
/// database of its fresh profile (no `--ignore-certificate-errors`), so the leaf the client
/// minted is accepted and every object arrives.
#[test]
fn chromium_trusts_the_intercepting_client_through_its_nss_database() {
    if !chromium_available("chromium_trusts_the_intercepting_client_through_its_nss_database") {
        return;
    }
    let dir = TestDir::new("run-chromium-intercept");
    let corpus = https_text_corpus(&dir.join("corpus"));
    let opts = options(
        corpus,
        &dir,
        &[
            "chromium",
            "chromium-dual-intercept",
            "chromium-dual-intercept-h2",
        ],
    );
    let r = run(&opts).expect("the run completes");
    eprintln!("{}\n{}", r.table(), r.air_table());
    for l in &r.loads {
        assert_eq!(l.errors, 0, "{}: {l:?}", l.config);
        assert_eq!(l.missing, 0, "{}: {:?}", l.config, l.missing_why);
    }
    let load = |c: &str| r.loads.iter().find(|l| l.config == c).unwrap();
    // Over the client's HTTPS port too: Chromium trusts the port's certificate (the lab CA)
    // and its tunnels ride HTTP/2 streams.
    for c in ["chromium-dual-intercept", "chromium-dual-intercept-h2"] {
        assert!(
            load(c).air_down_bytes * 2 < load("chromium").air_down_bytes,
            "{c}: the intercepted page crossed the air compressed"
        );
    }
    let h1 = load("chromium-dual-intercept")
        .client_proxy
        .expect("counted");
    let h2 = load("chromium-dual-intercept-h2")
        .client_proxy
        .expect("counted");
    assert!(h1.connections >= 1 && h1.h2_connections == 0, "{h1:?}");
    assert!(
        h2.h2_connections >= 1,
        "Chromium spoke HTTP/2 to the client: {h2:?}"
    );
    assert!(load("chromium").client_proxy.is_none());
}

/// Issue 35 item 5: the same https page through the edge proxy alone. Tunnelled
/// (`explicit`), the edge sees only bytes; intercepted by the edge itself
/// (`explicit-intercept`, the lab CA signing its leaves), the page is compressed and its
/// stylesheet inlined, and fewer bytes cross the air.
#[test]
fn an_https_page_gets_every_stage_when_the_edge_intercepts() {
    if !netns_available("an_https_page_gets_every_stage_when_the_edge_intercepts") {
        return;
    }
    let dir = TestDir::new("run-explicit-intercept");
    let corpus = https_text_corpus(&dir.join("corpus"));
    let opts = options(corpus, &dir, &["explicit", "explicit-intercept"]);
    let r = run(&opts).expect("the run completes");
    eprintln!("{}\n{}", r.table(), r.air_table());
    let load = |c: &str| r.loads.iter().find(|l| l.config == c).unwrap();
    let (tunnel, intercept) = (load("explicit"), load("explicit-intercept"));
    for l in [tunnel, intercept] {
        assert_eq!(l.errors, 0, "{}: {l:?}", l.config);
        assert_eq!((l.page_objects, l.missing), (3, 0), "{}", l.config);
    }
    assert_eq!(tunnel.inlined, 0, "a tunnel cannot be read");
    assert_eq!(intercept.inlined, 1, "the stylesheet went into the page");
    assert!(
        intercept.air_down_bytes * 2 < tunnel.air_down_bytes,
        "compressed: {} bytes down intercepted, {} tunnelled",
        intercept.air_down_bytes,
        tunnel.air_down_bytes
    );
}

/// Real Chromium through the intercepting edge (no client software): it trusts the lab's CA
/// through its NSS database, speaks HTTP/2 inside the CONNECT, and gets every object.
#[test]
fn chromium_trusts_the_intercepting_edge_through_its_nss_database() {
    if !chromium_available("chromium_trusts_the_intercepting_edge_through_its_nss_database") {
        return;
    }
    let dir = TestDir::new("run-chromium-explicit-intercept");
    let corpus = https_text_corpus(&dir.join("corpus"));
    let opts = options(corpus, &dir, &["chromium", "chromium-explicit-intercept"]);
    let r = run(&opts).expect("the run completes");
    eprintln!("{}\n{}", r.table(), r.air_table());
    for l in &r.loads {
        assert_eq!(l.errors, 0, "{}: {l:?}", l.config);
        assert_eq!(l.missing, 0, "{}: {:?}", l.config, l.missing_why);
    }
    let load = |c: &str| r.loads.iter().find(|l| l.config == c).unwrap();
    assert!(
        load("chromium-explicit-intercept").air_down_bytes * 2 < load("chromium").air_down_bytes,
        "the intercepted page crossed the air compressed"
    );
}
