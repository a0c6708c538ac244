//! Cache-hit lookups of 4 KB bodies: from the in-memory body copies (the proxy's hot path) and
//! with memory copies disabled (every hit reads and hash-checks the body file).

use std::time::{Duration, SystemTime};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use http::{Request, Response};
use webpep_cache::{CacheConfig, HttpCache, Lookup};

const OBJECTS: usize = 1000;

fn uri(i: usize) -> String {
    format!("http://bench{}.example/static/object-{i}.js", i % 8)
}

fn filled_cache(dir: &std::path::Path, memory_bytes: u64) -> HttpCache {
    let mut cfg = CacheConfig::new(dir);
    cfg.memory_bytes = memory_bytes;
    let cache = HttpCache::open(cfg).expect("open cache");
    let now = SystemTime::now();
    let resp = Response::builder()
        .status(200)
        .header("cache-control", "max-age=86400")
        .header("content-type", "application/javascript")
        .header("etag", "\"bench\"")
        .body(())
        .expect("response")
        .into_parts()
        .0;
    for i in 0..OBJECTS {
        let req = Request::get(uri(i))
            .body(())
            .expect("request")
            .into_parts()
            .0;
        let mut body = vec![b'x'; 4096];
        body[..8].copy_from_slice(&(i as u64).to_le_bytes());
        cache
            .store(&req, &resp, &body, "", now, now)
            .expect("store");
    }
    cache
}

fn bench(c: &mut Criterion) {
    let requests: Vec<_> = (0..OBJECTS)
        .map(|i| {
            Request::get(uri(i))
                .header("accept-encoding", "gzip, deflate")
                .header("user-agent", "Mozilla/5.0 (bench)")
                .body(())
                .expect("request")
                .into_parts()
                .0
        })
        .collect();
    let now = SystemTime::now() + Duration::from_secs(1);
    let mut group = c.benchmark_group("lookup_hit_4k");
    group.throughput(Throughput::Elements(1));
    for (name, memory) in [("memory", 64u64 << 20), ("disk", 0)] {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = filled_cache(dir.path(), memory);
        let mut i = 0;
        group.bench_function(name, |b| {
            b.iter(|| {
                i = (i + 1) % OBJECTS;
                match cache.lookup(&requests[i], "", now) {
                    Lookup::Fresh(r) => r.body.len(),
                    _ => panic!("bench expects hits"),
                }
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
