//! Fuzzes the lab's corpus importers (`webpep_corpus::import`) with arbitrary bytes as a HAR
//! file and as a WARC file (plain or gzipped): neither may panic; an import that succeeds
//! leaves a corpus that opens and whose every body is there with its recorded hash and size.
//! Written to a scratch directory per process, emptied before each input.

#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use webpep_corpus::import::{import_har, import_warc};
use webpep_corpus::Corpus;

fn scratch() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| std::env::temp_dir().join(format!("webpep-fuzz-{}", std::process::id())))
}

/// True when a JSON document declares a number over 1 MB somewhere: the HAR importer then
/// synthesizes bodies that large (up to its cap) by design, which is slow, not a bug.
fn declares_large(v: &serde_json::Value) -> bool {
    match v {
        serde_json::Value::Number(n) => n.as_f64().is_some_and(|f| f.abs() > 1e6),
        serde_json::Value::Array(a) => a.iter().any(declares_large),
        serde_json::Value::Object(o) => o.values().any(declares_large),
        _ => false,
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, body)) = data.split_first() else {
        return;
    };
    let har = sel & 1 == 0;
    if har {
        match serde_json::from_slice::<serde_json::Value>(body) {
            Ok(v) if declares_large(&v) => return,
            _ => {}
        }
    }
    let dir = scratch();
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).expect("scratch directory");
    let input = dir.join(if har { "input.har" } else { "input.warc" });
    std::fs::write(&input, body).expect("scratch input");
    let out = dir.join("corpus");
    let imported = if har {
        import_har(&input, &out, "fuzz")
    } else {
        import_warc(&input, &out, "fuzz")
    };
    let Ok(corpus) = imported else {
        return;
    };
    let reopened = Corpus::open(&out).expect("an imported corpus opens");
    assert_eq!(reopened.manifest.pages.len(), corpus.manifest.pages.len());
    for page in &reopened.manifest.pages {
        for object in &page.objects {
            for version in &object.versions {
                let bytes = reopened.body(&version.body).expect("every body is stored");
                assert_eq!(bytes.len() as u64, version.size, "{}", object.url);
            }
        }
    }
});
