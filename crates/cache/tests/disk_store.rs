//! The disk side: byte bound with LRU eviction, restart persistence, repair of damaged or
//! missing bodies, deduplication, concurrency, and a property test of the bound.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::*;
use http::Method;
use proptest::prelude::*;
use sha2::{Digest, Sha256};
use webpep_cache::{CacheConfig, HttpCache, Lookup};

fn body_file(dir: &Path, body: &[u8]) -> PathBuf {
    let name = hex::encode(Sha256::digest(body));
    dir.join("bodies").join(&name[..2]).join(name)
}

fn body_for(i: usize, len: usize) -> Vec<u8> {
    let mut b = format!("object {i} ").into_bytes();
    b.resize(len, b'a' + (i % 26) as u8);
    b
}

fn uri(i: usize) -> String {
    format!("http://site{}.example/obj/{i}", i % 3)
}

fn store_obj(cache: &HttpCache, i: usize, len: usize) -> bool {
    let rs = resp(
        200,
        &[("cache-control", "max-age=3600"), ("date", &date(0))],
    );
    cache
        .store(&get(&uri(i), &[]), &rs, &body_for(i, len), "", t(0), t(0))
        .unwrap()
}

fn lookup_body(cache: &HttpCache, i: usize) -> Option<Vec<u8>> {
    match cache.lookup(&get(&uri(i), &[]), "", t(1)) {
        Lookup::Fresh(r) | Lookup::Stale(r) => Some(r.body.to_vec()),
        Lookup::Miss => None,
    }
}

/// Sum of the sizes of body files on disk.
fn bytes_on_disk(dir: &Path) -> u64 {
    let mut total = 0;
    for fan in std::fs::read_dir(dir.join("bodies")).unwrap().flatten() {
        for f in std::fs::read_dir(fan.path()).unwrap().flatten() {
            total += f.metadata().unwrap().len();
        }
    }
    total
}

#[test]
fn http_cache_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<HttpCache>();
    assert_send_sync::<webpep_cache::CachedResponse>();
}

#[test]
fn bounded_bytes_with_lru_eviction() {
    let dir = tempfile::tempdir().unwrap();
    let max = 20_000;
    let cache = cache_in(dir.path(), max);
    for i in 0..10 {
        assert!(store_obj(&cache, i, 1000));
    }
    assert_eq!(cache.stats().entries, 10);
    assert_eq!(cache.stats().evictions, 0);
    // Object 0 becomes the most recently used; 1 is now the oldest-accessed.
    assert!(lookup_body(&cache, 0).is_some());
    for i in 10..40 {
        store_obj(&cache, i, 1000);
        assert!(cache.stats().bytes <= max);
    }
    let s = cache.stats();
    assert!(s.evictions > 0);
    assert!(s.bytes <= max, "{} > {max}", s.bytes);
    assert!(bytes_on_disk(dir.path()) <= s.bytes);
    assert!(lookup_body(&cache, 1).is_none(), "oldest-accessed evicted");
    assert!(lookup_body(&cache, 39).is_some(), "newest kept");
    // Evicted bodies are gone from disk too.
    assert!(!body_file(dir.path(), &body_for(1, 1000)).exists());
}

#[test]
fn oversized_objects_are_not_stored() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = CacheConfig::new(dir.path());
    cfg.max_bytes = 80_000;
    let cache = HttpCache::open(cfg).unwrap();
    // Default max object: 1/8 of max_bytes = 10,000.
    assert!(store_obj(&cache, 1, 10_000));
    assert!(!store_obj(&cache, 2, 10_001));
    let mut cfg = CacheConfig::new(dir.path());
    cfg.max_bytes = 80_000;
    cfg.max_object_bytes = Some(500);
    drop(cache);
    let cache = HttpCache::open(cfg).unwrap();
    assert!(!store_obj(&cache, 3, 501));
}

#[test]
fn identical_bodies_are_stored_once() {
    let dir = tempfile::tempdir().unwrap();
    let cache = cache_in(dir.path(), 1 << 20);
    let rs = resp(200, &[("cache-control", "max-age=60")]);
    let body = vec![7u8; 5000];
    cache
        .store(&get("http://a.example/x", &[]), &rs, &body, "", t(0), t(0))
        .unwrap();
    let one = cache.stats().bytes;
    cache
        .store(&get("http://b.example/y", &[]), &rs, &body, "", t(0), t(0))
        .unwrap();
    let two = cache.stats().bytes;
    assert!(
        two - one < 1000,
        "second alias costs metadata only: {one} → {two}"
    );
    assert_eq!(bytes_on_disk(dir.path()), 5000);
    // Removing one alias keeps the shared body for the other.
    cache.invalidate(&req_m(Method::PUT, "http://a.example/x", &[]));
    assert!(body_file(dir.path(), &body).exists());
    assert!(matches!(
        cache.lookup(&get("http://b.example/y", &[]), "", t(1)),
        Lookup::Fresh(_)
    ));
}

#[test]
fn survives_restart_with_entries_order_and_bound() {
    let dir = tempfile::tempdir().unwrap();
    let max = 20_000;
    {
        let cache = cache_in(dir.path(), max);
        for i in 0..15 {
            store_obj(&cache, i, 1000);
        }
        // Touch 0 so it is the most recently used when the cache closes.
        assert!(lookup_body(&cache, 0).is_some());
    }
    let cache = cache_in(dir.path(), max);
    let s = cache.stats();
    assert_eq!(s.entries, 15);
    assert!(s.bytes <= max);
    for i in 0..15 {
        assert_eq!(lookup_body(&cache, i), Some(body_for(i, 1000)), "entry {i}");
    }
    // 3 becomes the most recently used before closing.
    assert!(lookup_body(&cache, 3).is_some());
    drop(cache);

    // Reopen with a smaller bound: evicted down to it, least recently used first.
    let cache = cache_in(dir.path(), 5_000);
    let s = cache.stats();
    assert!(s.bytes <= 5_000, "{}", s.bytes);
    assert!(s.entries >= 3);
    assert!(
        lookup_body(&cache, 3).is_some(),
        "most recently looked up survives"
    );
    assert!(
        lookup_body(&cache, 14).is_some(),
        "next most recent survives"
    );
    assert!(lookup_body(&cache, 1).is_none());
    assert!(bytes_on_disk(dir.path()) <= s.bytes);
}

#[test]
fn lost_access_order_still_yields_a_consistent_bound() {
    let dir = tempfile::tempdir().unwrap();
    {
        let cache = cache_in(dir.path(), 1 << 20);
        for i in 0..12 {
            store_obj(&cache, i, 1000);
        }
    }
    // Simulate an index whose access records were lost.
    {
        let db = redb::Database::create(dir.path().join("index.redb")).unwrap();
        let tx = db.begin_write().unwrap();
        let table: redb::TableDefinition<&str, u64> = redb::TableDefinition::new("access");
        tx.delete_table(table).unwrap();
        tx.commit().unwrap();
    }
    let cache = cache_in(dir.path(), 4_000);
    let s = cache.stats();
    assert!(s.bytes <= 4_000 && s.entries >= 2, "{s:?}");
    // Further stores keep evicting correctly.
    for i in 20..30 {
        store_obj(&cache, i, 1000);
        assert!(cache.stats().bytes <= 4_000);
    }
    assert!(bytes_on_disk(dir.path()) <= cache.stats().bytes);
}

#[test]
fn missing_or_corrupt_body_on_reopen_drops_the_entry() {
    let dir = tempfile::tempdir().unwrap();
    {
        let cache = cache_in(dir.path(), 1 << 20);
        for i in 0..4 {
            store_obj(&cache, i, 2000);
        }
    }
    // 0: deleted; 1: truncated; 2: same length, different bytes; 3: untouched. Plus an orphan
    // body and a leftover temp file.
    std::fs::remove_file(body_file(dir.path(), &body_for(0, 2000))).unwrap();
    std::fs::write(body_file(dir.path(), &body_for(1, 2000)), b"short").unwrap();
    std::fs::write(body_file(dir.path(), &body_for(2, 2000)), vec![b'z'; 2000]).unwrap();
    let orphan = body_file(dir.path(), b"nobody refers to me");
    std::fs::create_dir_all(orphan.parent().unwrap()).unwrap();
    std::fs::write(&orphan, b"nobody refers to me").unwrap();
    std::fs::write(dir.path().join("tmp").join("partial.0"), b"half").unwrap();

    let cache = cache_in(dir.path(), 1 << 20);
    assert_eq!(
        cache.stats().entries,
        2,
        "missing and truncated bodies dropped on open"
    );
    assert!(!orphan.exists(), "orphan body deleted");
    assert!(!dir.path().join("tmp").join("partial.0").exists());
    // Same-length corruption is caught by the hash check on read: a miss, never bad bytes.
    assert_eq!(lookup_body(&cache, 2), None);
    assert_eq!(cache.stats().entries, 1);
    assert_eq!(lookup_body(&cache, 3), Some(body_for(3, 2000)));
    // The cache keeps working: the dropped object can be stored again.
    assert!(store_obj(&cache, 2, 2000));
    assert_eq!(lookup_body(&cache, 2), Some(body_for(2, 2000)));
}

#[test]
fn damaged_index_is_set_aside_and_the_cache_starts_empty() {
    let dir = tempfile::tempdir().unwrap();
    {
        let cache = cache_in(dir.path(), 1 << 20);
        store_obj(&cache, 1, 3000);
    }
    let mut garbage = vec![0u8; 8192];
    garbage[..27].copy_from_slice(b"this is not a redb database");
    std::fs::write(dir.path().join("index.redb"), &garbage).unwrap();
    let cache = cache_in(dir.path(), 1 << 20);
    assert_eq!(cache.stats().entries, 0);
    assert!(dir.path().join("index.redb.damaged").exists());
    assert_eq!(
        bytes_on_disk(dir.path()),
        0,
        "bodies of the lost index are orphans, removed"
    );
    assert!(store_obj(&cache, 2, 3000));
    assert_eq!(lookup_body(&cache, 2), Some(body_for(2, 3000)));
}

#[test]
fn a_cache_directory_open_twice_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let _first = cache_in(dir.path(), 1 << 20);
    assert!(HttpCache::open(CacheConfig::new(dir.path())).is_err());
}

#[test]
fn concurrent_lookups_and_stores() {
    let dir = tempfile::tempdir().unwrap();
    let max = 60_000;
    let cache = Arc::new(cache_in(dir.path(), max));
    let threads: Vec<_> = (0..6)
        .map(|tid| {
            let cache = Arc::clone(&cache);
            std::thread::spawn(move || {
                for round in 0..200 {
                    let i = (tid * 31 + round * 7) % 120;
                    if round % 3 == 0 {
                        store_obj(&cache, i, 500 + (i % 5) * 300);
                    } else if let Some(body) = lookup_body(&cache, i) {
                        // Whatever is served is exactly what was stored for that key.
                        assert_eq!(body, body_for(i, 500 + (i % 5) * 300));
                    }
                    if round % 50 == 0 {
                        cache.invalidate(&req_m(Method::DELETE, &uri(i), &[]));
                    }
                }
            })
        })
        .collect();
    for th in threads {
        th.join().unwrap();
    }
    let s = cache.stats();
    assert!(s.bytes <= max);
    assert!(s.hits > 0 && s.stores > 0);
    assert!(bytes_on_disk(dir.path()) <= s.bytes);
    drop(cache);
    let reopened = cache_in(dir.path(), max);
    assert_eq!(reopened.stats().entries, s.entries);
    assert_eq!(reopened.stats().bytes, s.bytes);
}

#[derive(Clone, Debug)]
enum Op {
    Store(usize, usize),
    Lookup(usize),
    Invalidate(usize),
    /// Revalidate key k with a 304 that adds a header of n bytes.
    Freshen(usize, usize),
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (0usize..40, 1usize..4000).prop_map(|(k, n)| Op::Store(k, n)),
        3 => (0usize..40).prop_map(Op::Lookup),
        1 => (0usize..40).prop_map(Op::Invalidate),
        2 => (0usize..40, 0usize..3000).prop_map(|(k, n)| Op::Freshen(k, n)),
        1 => Just(Op::Reopen),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    #[test]
    fn store_never_exceeds_max_bytes(max in 4_000u64..30_000, ops in proptest::collection::vec(op(), 1..60)) {
        let dir = tempfile::tempdir().unwrap();
        let mut cache = cache_in(dir.path(), max);
        for op in ops {
            match op {
                Op::Store(k, n) => { store_obj(&cache, k, n); }
                Op::Lookup(k) => {
                    if let Some(body) = lookup_body(&cache, k) {
                        prop_assert_eq!(&body, &body_for(k, body.len()));
                    }
                }
                Op::Invalidate(k) => cache.invalidate(&req_m(Method::POST, &uri(k), &[])),
                Op::Freshen(k, n) => {
                    // Long after max-age=3600: the entry is stale and gets revalidated.
                    if let Lookup::Stale(old) = cache.lookup(&get(&uri(k), &[]), "", t(10_000)) {
                        let pad = "p".repeat(n);
                        let nm = resp(304, &[("x-pad", pad.as_str()), ("cache-control", "max-age=3600")]);
                        let renewed = cache.freshen(&old, &nm, t(10_000), t(10_000));
                        prop_assert_eq!(renewed.map(|r| r.body), Some(old.body));
                    }
                }
                Op::Reopen => { drop(cache); cache = cache_in(dir.path(), max); }
            }
            let s = cache.stats();
            prop_assert!(s.bytes <= max, "bytes {} > max {}", s.bytes, max);
            prop_assert!(bytes_on_disk(dir.path()) <= s.bytes);
        }
    }
}

#[test]
fn body_deleted_while_running_is_a_miss_and_heals() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = CacheConfig::new(dir.path());
    // No memory copies: every hit reads the file.
    cfg.memory_bytes = 0;
    let cache = HttpCache::open(cfg).unwrap();
    store_obj(&cache, 5, 1500);
    assert_eq!(lookup_body(&cache, 5), Some(body_for(5, 1500)));
    std::fs::remove_file(body_file(dir.path(), &body_for(5, 1500))).unwrap();
    assert_eq!(lookup_body(&cache, 5), None);
    assert_eq!(cache.stats().entries, 0);
    assert!(store_obj(&cache, 5, 1500));
    assert_eq!(lookup_body(&cache, 5), Some(body_for(5, 1500)));
}

#[test]
fn concurrent_aliases_of_shared_bodies_never_lose_a_live_body() {
    let dir = tempfile::tempdir().unwrap();
    let max = 12_000;
    let cache = Arc::new(cache_in(dir.path(), max));
    // Four distinct bodies shared by many URIs: stores, evictions and invalidations race on
    // the same body files.
    let shared: Vec<Vec<u8>> = (0..4).map(|b| vec![b'A' + b as u8; 1200]).collect();
    let threads: Vec<_> = (0..4)
        .map(|tid| {
            let cache = Arc::clone(&cache);
            let shared = shared.clone();
            std::thread::spawn(move || {
                let rs = resp(200, &[("cache-control", "max-age=3600")]);
                for round in 0..150 {
                    let k = (tid * 13 + round * 5) % 40;
                    let u = format!("http://alias.example/{k}");
                    let body = &shared[k % 4];
                    match round % 4 {
                        0 | 1 => {
                            cache
                                .store(&get(&u, &[]), &rs, body, "", t(0), t(0))
                                .unwrap();
                        }
                        2 => {
                            if let Lookup::Fresh(r) = cache.lookup(&get(&u, &[]), "", t(1)) {
                                assert_eq!(&r.body[..], &body[..]);
                            }
                        }
                        _ => cache.invalidate(&req_m(Method::DELETE, &u, &[])),
                    }
                }
            })
        })
        .collect();
    for th in threads {
        th.join().unwrap();
    }
    let before = cache.stats();
    assert!(before.bytes <= max);
    drop(cache);
    // Every entry still has its body file: nothing is dropped on reopen.
    let mut cfg = CacheConfig::new(dir.path());
    cfg.max_bytes = max;
    cfg.memory_bytes = 0;
    let reopened = HttpCache::open(cfg).unwrap();
    assert_eq!(reopened.stats().entries, before.entries);
    for k in 0..40 {
        let u = format!("http://alias.example/{k}");
        if let Lookup::Fresh(r) = reopened.lookup(&get(&u, &[]), "", t(1)) {
            assert_eq!(&r.body[..], &shared[k % 4][..]);
        }
    }
    assert_eq!(
        reopened.stats().entries,
        before.entries,
        "no body failed its check"
    );
}
