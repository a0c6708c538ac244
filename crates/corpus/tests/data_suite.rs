//! The data suite: imports the real files in `../shared/data` (HAR captures and a WARC) and,
//! when installed, the Debian apache2-doc manual. Built only with `--features data-suite`:
//! `cargo test -p webpep-corpus --features data-suite --test data_suite`.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Instant;

use webpep_corpus::import;
use webpep_corpus::scan::{self, RefKind};
use webpep_corpus::*;

/// `shared/data` found among the ancestors of the current directory.
fn data_dir() -> PathBuf {
    let cwd = std::env::current_dir().expect("current dir");
    for a in cwd.ancestors() {
        let d = a.join("shared").join("data");
        if d.join("har").is_dir() {
            return d;
        }
    }
    panic!("no shared/data among the ancestors of {}", cwd.display());
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("webpep-data-suite-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// Every body of every page is there and matches its hash.
fn check_bodies(c: &Corpus) -> u64 {
    let mut seen = HashSet::new();
    let mut bytes = 0;
    for p in &c.manifest.pages {
        for o in &p.objects {
            for v in &o.versions {
                if seen.insert(v.body.clone()) {
                    let b = c.body(&v.body).unwrap_or_else(|e| panic!("{}: {e}", o.url));
                    assert_eq!(b.len() as u64, v.size, "{}", o.url);
                    bytes += v.size;
                }
            }
            assert!(host_of(&o.url).is_some());
        }
    }
    bytes
}

fn discovered(c: &Corpus, p: &Page) -> Vec<scan::Discovered> {
    scan::discover(&p.url, |u| {
        p.objects
            .iter()
            .find(|o| o.url == u)
            .and_then(|o| Some((o.content_type.clone(), c.body(&o.version(0).body).ok()?)))
    })
}

#[test]
fn har_files() {
    let data = data_dir();
    // (file, entries, at least this many objects in the first page, at least this many domains)
    let expect: &[(&str, usize, usize, usize)] = &[
        ("contentTypes-aftonbladet.se.har", 175, 150, 30),
        ("contentTypes-ferguson.har", 174, 140, 35),
        ("en.wikipedia.org.spdy-wpt.har", 102, 30, 3),
        ("haralyzer-cnn-chrome.har", 292, 250, 90),
        ("haralyzer-cnn.har", 145, 130, 40),
        ("harviewer-google.com.har", 5, 4, 2),
        ("sitespeed-www-sitespeed-io.har", 14, 13, 2),
    ];
    let mut files: Vec<PathBuf> = std::fs::read_dir(data.join("har"))
        .expect("har dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().map(|x| x == "har").unwrap_or(false))
        .collect();
    files.sort();
    assert!(files.len() >= 7, "{files:?}");
    println!(
        "{:<36} {:>6} {:>6} {:>8} {:>10} {:>8}",
        "file", "pages", "objs", "domains", "bytes", "secs"
    );
    for f in &files {
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        let out = tmp(&name);
        let t = Instant::now();
        let c = import::import_har(f, &out, "h").unwrap_or_else(|e| panic!("{e}"));
        let secs = t.elapsed().as_secs_f64();
        let bytes = check_bodies(&c);
        let p = &c.manifest.pages[0];
        println!(
            "{name:<36} {:>6} {:>6} {:>8} {:>10} {:>8.1}",
            c.manifest.pages.len(),
            p.objects.len(),
            p.domains().len(),
            bytes,
            secs
        );
        println!("    {}", p.source);
        if name.starts_with("en.wikipedia.org") {
            // WebPageTest's 3 runs of one URL are one page's visits; its repeat views are not
            // pages.
            let d = &c.manifest.description;
            assert_eq!(c.manifest.pages.len(), 1, "{d}");
            assert!(
                d.contains("2 further loads") && d.contains("3 repeat views"),
                "{d}"
            );
        }
        if let Some((_, _, min_objects, min_domains)) = expect.iter().find(|e| e.0 == name) {
            assert!(
                p.objects.len() >= *min_objects,
                "{name}: {} objects",
                p.objects.len()
            );
            assert!(
                p.domains().len() >= *min_domains,
                "{name}: {} domains",
                p.domains().len()
            );
        }
        // Where the document was synthesized, the loader can find every object from it.
        let doc = p
            .objects
            .iter()
            .position(|o| o.status == 200 && o.content_type.contains("html"));
        if let Some(k) = doc {
            let d = &p.objects[k];
            let b = c.body(&d.version(0).body).unwrap();
            let synthesized = b.starts_with(b"<!DOCTYPE HTML PUBLIC \"-//W3C//DTD HTML 4.01")
                || b.starts_with(b"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>");
            if synthesized {
                let sub = Page {
                    url: d.url.clone(),
                    ..p.clone()
                };
                let found: HashSet<String> =
                    discovered(&c, &sub).into_iter().map(|x| x.url).collect();
                let missing: Vec<&str> = p.objects[k..]
                    .iter()
                    .filter(|o| o.status < 400 && !found.contains(&o.url))
                    .map(|o| o.url.as_str())
                    .collect();
                assert!(missing.is_empty(), "{name}: not discoverable: {missing:?}");
                println!(
                    "    document synthesized; all {} objects discoverable",
                    p.objects.len() - k
                );
            }
        }
        let _ = std::fs::remove_dir_all(&out);
    }
}

#[test]
fn warc_file() {
    let f = data_dir().join("pages").join("pywb-iana.warc.gz");
    let out = tmp("iana");
    let t = Instant::now();
    let c = import::import_warc(&f, &out, "iana").unwrap_or_else(|e| panic!("{e}"));
    println!("{} in {:?}", c.manifest.description, t.elapsed());
    for s in list(&c) {
        println!(
            "  {:<40} {:>4} {:>3} {:>9}",
            s.id, s.objects, s.domains, s.bytes
        );
    }
    check_bodies(&c);
    assert!(c.manifest.pages.len() >= 10, "{}", c.manifest.pages.len());
    let home = c.manifest.page("iana-index").expect("the home page");
    assert_eq!(home.url, "http://www.iana.org/");
    let found = discovered(&c, home);
    // Two levels: fonts come from the stylesheet.
    assert!(found
        .iter()
        .any(|d| d.kind == RefKind::CssUrl && d.url.contains("fonts/") && d.depth == 2));
    for o in &home.objects {
        assert!(
            found.iter().any(|d| d.url == o.url),
            "{} not discoverable",
            o.url
        );
    }
    let root = c.body(&home.objects[0].version(0).body).unwrap();
    assert!(String::from_utf8_lossy(&root[..200])
        .to_lowercase()
        .contains("<!doctype html>"));
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn apache_manual() {
    let manual = Path::new("/usr/share/doc/apache2-doc/manual");
    if !manual.is_dir() {
        println!(
            "skipped: {} is not installed (apt-get install apache2-doc)",
            manual.display()
        );
        return;
    }
    let out = tmp("apache");
    let t = Instant::now();
    let c = import::import_dir(&[manual.to_path_buf()], &out, "apache-manual", 3)
        .unwrap_or_else(|e| panic!("{e}"));
    println!("{} in {:?}", c.manifest.description, t.elapsed());
    check_bodies(&c);
    assert!(c.manifest.pages.len() > 100, "{}", c.manifest.pages.len());
    assert_eq!(c.manifest.domains.len(), 3, "{:?}", c.manifest.domains);
    let mut multi = 0;
    for p in c.manifest.pages.iter().step_by(17) {
        assert!(p.objects.len() >= 2, "{}: {}", p.id, p.objects.len());
        multi += usize::from(p.domains().len() > 1);
        let found: HashSet<String> = discovered(&c, p).into_iter().map(|d| d.url).collect();
        for o in &p.objects {
            assert!(
                found.contains(&o.url),
                "{}: {} not discoverable",
                p.id,
                o.url
            );
        }
    }
    assert!(multi > 0, "objects spread over the domains");
    let _ = std::fs::remove_dir_all(&out);
}

/// Direct air bytes close to the capture's: for every HAR, the bodies the replay server sends a
/// client that accepts the captured codings (the encoded copy, else the body), summed over the
/// responses whose capture declared a transfer size, are within 10 % of those responses'
/// captured transfer sizes.
#[test]
fn har_served_bytes_match_the_capture() {
    let data = data_dir();
    let mut files: Vec<PathBuf> = std::fs::read_dir(data.join("har"))
        .expect("har dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().map(|x| x == "har").unwrap_or(false))
        .collect();
    files.sort();
    println!(
        "{:<36} {:>9} {:>12} {:>12} {:>12} {:>8}",
        "file", "responses", "captured", "served", "identity", "served/"
    );
    let mut failed = Vec::new();
    for f in &files {
        let name = f.file_stem().unwrap().to_string_lossy().to_string();
        let out = tmp(&format!("wire-{name}"));
        let (c, summary) = import::import_har_with(f, &out, &name, Default::default())
            .unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let (mut n, mut captured, mut served, mut identity) = (0u64, 0u64, 0u64, 0u64);
        let mut seen = HashSet::new();
        for p in &c.manifest.pages {
            for o in &p.objects {
                if !seen.insert(o.url.clone()) {
                    continue;
                }
                let v = o.version(0);
                let all = std::iter::once(v).chain(v.then.iter().map(|r| &r.version));
                for v in all {
                    let Some(t) = v.capture.as_ref().and_then(|c| c.transfer_size) else {
                        continue;
                    };
                    n += 1;
                    captured += t;
                    served += v.served_size();
                    identity += v.size;
                }
            }
        }
        let ratio = served as f64 / captured.max(1) as f64;
        println!(
            "{:<36} {:>9} {:>12} {:>12} {:>12} {:>8.3}",
            f.file_name().unwrap().to_string_lossy(),
            n,
            captured,
            served,
            identity,
            ratio
        );
        for line in summary.render().lines() {
            println!("    {line}");
        }
        if n > 0 && !(0.9..=1.1).contains(&ratio) {
            failed.push(format!(
                "{name}: served {served} for {captured} captured ({ratio:.3})"
            ));
        }
        let _ = std::fs::remove_dir_all(&out);
    }
    assert!(failed.is_empty(), "{failed:#?}");
}
