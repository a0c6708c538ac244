//! Compression ratio and speed of each coding and level on realistic web text.
//!
//! Samples: the Debian `apache2-doc` manual (an HTML page, its CSS and a script) when
//! installed, else a generated page. Run: `cargo bench -p webpep-optimize --bench compress`.
//! Ratios are printed once per sample before the timings (criterion reports MB/s).

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use webpep_optimize::compress::{decode, encode, Coding, CompressConfig};

/// Real web text from the Debian manual, if present.
const REAL_SAMPLES: &[(&str, &str)] = &[
    ("html", "/usr/share/doc/apache2-doc/manual/en/mod/core.html"),
    (
        "css",
        "/usr/share/doc/apache2-doc/manual/style/css/manual.css",
    ),
    (
        "js",
        "/usr/share/doc/apache2-doc/manual/style/scripts/prettify.js",
    ),
];

/// A page-like body for machines without the manual.
fn generated_html() -> Vec<u8> {
    let mut s = String::from("<!DOCTYPE html><html><head><title>Front page</title>");
    s.push_str("<link rel=\"stylesheet\" href=\"/css/site.css\"></head><body><ul class=\"nav\">");
    for i in 0..600 {
        s.push_str(&format!(
            "<li class=\"item-{}\"><a href=\"/section/{}/story-{i}.html\" title=\"Story {i}\">\
             Headline number {i} about the {} of {}</a><span class=\"date\">2003-0{}-1{}</span></li>\n",
            i % 7,
            i % 11,
            ["weather", "markets", "election", "match", "storm"][i % 5],
            ["Paris", "Lagos", "Lima", "Osaka", "Perth", "Oslo"][i % 6],
            1 + i % 9,
            i % 10
        ));
    }
    s.push_str("</ul></body></html>\n");
    s.into_bytes()
}

fn samples() -> Vec<(String, Vec<u8>)> {
    let real: Vec<(String, Vec<u8>)> = REAL_SAMPLES
        .iter()
        .filter_map(|(name, path)| std::fs::read(path).ok().map(|b| (name.to_string(), b)))
        .collect();
    if real.is_empty() {
        eprintln!("apache2-doc not installed; using a generated page");
        vec![("generated-html".to_string(), generated_html())]
    } else {
        real
    }
}

/// (label, coding, config) for each coding at a fast, a default and a best level.
fn settings() -> Vec<(String, Coding, CompressConfig)> {
    let base = CompressConfig::default();
    let mut out = Vec::new();
    for level in [1u32, 6, 9] {
        out.push((
            format!("gzip-{level}"),
            Coding::Gzip,
            CompressConfig {
                gzip_level: level,
                ..base.clone()
            },
        ));
    }
    for q in [4u32, 9, 11] {
        out.push((
            format!("br-{q}"),
            Coding::Br,
            CompressConfig {
                brotli_quality: q,
                ..base.clone()
            },
        ));
    }
    for level in [3i32, 12, 19] {
        out.push((
            format!("zstd-{level}"),
            Coding::Zstd,
            CompressConfig {
                zstd_level: level,
                ..base.clone()
            },
        ));
    }
    out
}

fn bench(c: &mut Criterion) {
    for (name, body) in samples() {
        let mut group = c.benchmark_group(format!("encode/{name}"));
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.sample_size(10);
        for (label, coding, cfg) in settings() {
            let enc = encode(&body, coding, &cfg);
            eprintln!(
                "{name} ({} B) {label}: {} B, ratio {:.2}",
                body.len(),
                enc.len(),
                body.len() as f64 / enc.len().max(1) as f64
            );
            group.bench_with_input(BenchmarkId::from_parameter(&label), &body, |b, body| {
                b.iter(|| encode(black_box(body), coding, &cfg))
            });
        }
        group.finish();

        let mut group = c.benchmark_group(format!("decode/{name}"));
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.sample_size(10);
        for coding in [Coding::Gzip, Coding::Br, Coding::Zstd] {
            let enc = encode(&body, coding, &CompressConfig::default());
            group.bench_with_input(
                BenchmarkId::from_parameter(coding.token()),
                &enc,
                |b, enc| b.iter(|| decode(black_box(enc), coding.token(), body.len())),
            );
        }
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
