//! The lab's data suite: a real page load (cnn.com, 2015, from a HAR in `../shared/data`:
//! 138 objects on 42 domains, 4.9 MB, 66 real bodies) hosted by the lab and loaded over a
//! real link trace (the T-Mobile UMTS drive), by the browser model direct and through the edge
//! proxy, and by real Chromium through the proxy. Built only with `--features data-suite`:
//! `cargo test -p webpep-lab --features data-suite --test data_suite` (as root; CI).

use std::path::{Path, PathBuf};

use webpep_corpus::import;
use webpep_lab::configs;
use webpep_lab::runner::{run, RunOptions};
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

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
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
    let dir = TestDir(std::env::temp_dir().join(format!("webpep-lab-data-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&dir.0);
    let har = data_dir().join("har/haralyzer-cnn.har");
    let corpus = import::import_har(&har, &dir.0.join("corpus"), "cnn-2015").expect("import");
    let page = &corpus.manifest.pages[0];
    let (objects, domains) = (page.objects.len(), corpus.manifest.domains.clone());
    assert!(
        objects > 100 && domains.len() > 30,
        "{objects} objects, {} domains",
        domains.len()
    );

    let all = configs::load(None).unwrap();
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

    // The browser model fetches every object of the capture, direct and through the proxy
    // (there, less the small stylesheets and scripts the proxy copied into their pages).
    for c in ["http11", "explicit"] {
        let l = load(c);
        assert_eq!((l.objects + l.inlined, l.errors), (objects, 0), "{c}");
    }
    // The proxy compresses and transcodes a real page: fewer bytes cross the air (×3.2 when
    // this test was written; asserted loosely, it is a behaviour check, not a benchmark).
    let (direct, proxied) = (load("http11"), load("explicit"));
    assert!(
        proxied.air_down_bytes * 2 < direct.air_down_bytes,
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
