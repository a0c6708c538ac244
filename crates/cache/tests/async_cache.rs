//! The async facade: its blocking work runs off the runtime's workers, at most N at once; the
//! store under it through the `Storage` trait; bodies addressable by SHA-256.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{get, req_m, resp, t};
use http::Method;
use sha2::{Digest, Sha256};
use webpep_cache::{
    AsyncHttpCache, BodyHash, CacheConfig, DiskStore, Entry, HttpCache, Lookup, MemoryLookup,
    Purge, Storage, StorageStats, Stored,
};

/// What a call that may block does in place of slow I/O: it returns when the test lets it, not
/// after a time (which would race the test's own timers on a busy machine).
type Hold = Box<dyn Fn() + Send + Sync>;

/// A [`DiskStore`] that records the thread of every call that may block, holds each in its
/// [`Hold`] (so running it on a worker would visibly stall the worker) and counts how many run
/// at once.
struct Observed {
    inner: DiskStore,
    hold: Hold,
    threads: Mutex<Vec<ThreadId>>,
    running: AtomicUsize,
    max_running: AtomicUsize,
}

impl Observed {
    fn enter(&self) -> Guard<'_> {
        self.threads
            .lock()
            .unwrap()
            .push(std::thread::current().id());
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_running.fetch_max(now, Ordering::SeqCst);
        (self.hold)();
        Guard(self)
    }
}

struct Guard<'a>(&'a Observed);

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Storage for Observed {
    fn lookup(&self, primary: &str, secondary: &dyn Fn(&[String]) -> String) -> Option<Stored> {
        let _g = self.enter();
        self.inner.lookup(primary, secondary)
    }
    fn lookup_in_memory(
        &self,
        primary: &str,
        secondary: &dyn Fn(&[String]) -> String,
    ) -> MemoryLookup {
        // Memory only: allowed on the worker, not observed.
        self.inner.lookup_in_memory(primary, secondary)
    }
    fn insert(
        &self,
        p: &str,
        s: &str,
        meta: Entry,
        body: &[u8],
    ) -> Result<(), webpep_cache::CacheError> {
        let _g = self.enter();
        self.inner.insert(p, s, meta, body)
    }
    fn update_meta(&self, key: &str, meta: Entry) -> Result<bool, webpep_cache::CacheError> {
        let _g = self.enter();
        self.inner.update_meta(key, meta)
    }
    fn purge(&self, target: Purge<'_>) -> Result<usize, webpep_cache::CacheError> {
        let _g = self.enter();
        self.inner.purge(target)
    }
    fn body_by_hash(&self, hash: &BodyHash) -> Option<Bytes> {
        let _g = self.enter();
        self.inner.body_by_hash(hash)
    }
    fn stats(&self) -> StorageStats {
        self.inner.stats()
    }
}

/// An observed disk store with no in-memory bodies (so every hit needs the disk).
fn observed(dir: &std::path::Path, hold: Hold, permits: usize) -> (AsyncHttpCache, Arc<Observed>) {
    let mut cfg = CacheConfig::new(dir);
    cfg.memory_bytes = 0;
    let heuristic = webpep_cache::policy::HeuristicConfig::default();
    let inner = DiskStore::open(dir, cfg.max_bytes, 0, heuristic).unwrap();
    let store = Arc::new(Observed {
        inner,
        hold,
        threads: Mutex::new(Vec::new()),
        running: AtomicUsize::new(0),
        max_running: AtomicUsize::new(0),
    });
    let cache = HttpCache::with_storage(store.clone(), &cfg).unwrap();
    (AsyncHttpCache::new(cache, permits), store)
}

fn uri(i: usize) -> String {
    format!("http://example.com/o{i}.js")
}

/// Polls `cond` every millisecond until it holds or `within` has passed (a bound on a hang,
/// not a measure of speed); whether it holds.
fn poll_until(within: Duration, cond: impl Fn() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while !cond() {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    true
}

/// A gate that holds the store's calls while closed.
#[derive(Default)]
struct Gate {
    open: Mutex<bool>,
    changed: Condvar,
}

impl Gate {
    fn set(&self, open: bool) {
        *self.open.lock().unwrap() = open;
        self.changed.notify_all();
    }

    /// Waits while the gate is closed (at most 60 s: a bound on a hang).
    fn pass(&self) {
        let open = self.open.lock().unwrap();
        let _ = self
            .changed
            .wait_timeout_while(open, Duration::from_secs(60), |open| !*open)
            .unwrap();
    }
}

fn cacheable() -> http::response::Parts {
    resp(200, &[("cache-control", "max-age=600"), ("etag", "\"v1\"")])
}

/// On a current-thread runtime a task that yields in a loop counts only while the runtime's one
/// thread is free. Each cache operation must let it count (the store holds every call until the
/// counter has moved, for at most 10 s), and the store must never be called on the runtime's
/// thread. Were the blocking work done inline, the counter would stand still across every
/// operation and the thread ids would match.
#[test]
fn blocking_work_never_runs_on_the_runtime_thread() {
    let dir = tempfile::tempdir().unwrap();
    let ticks = Arc::new(AtomicUsize::new(0));
    let hold: Hold = {
        let ticks = ticks.clone();
        // Once a call has waited in vain (the worker was held), the rest do not wait again.
        let stalled = std::sync::atomic::AtomicBool::new(false);
        Box::new(move || {
            let at = ticks.load(Ordering::SeqCst);
            if !stalled.load(Ordering::SeqCst)
                && !poll_until(Duration::from_secs(10), || {
                    ticks.load(Ordering::SeqCst) > at
                })
            {
                stalled.store(true, Ordering::SeqCst);
            }
        })
    };
    let (cache, store) = observed(dir.path(), hold, 4);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let worker = std::thread::current().id();
    rt.block_on(async {
        let ticker = {
            let ticks = ticks.clone();
            tokio::spawn(async move {
                loop {
                    ticks.fetch_add(1, Ordering::Relaxed);
                    tokio::task::yield_now().await;
                }
            })
        };
        let progressed = |before: usize| ticks.load(Ordering::Relaxed) > before;
        let body = Bytes::from_static(b"console.log(1)");
        for i in 0..5 {
            let before = ticks.load(Ordering::Relaxed);
            let stored = cache
                .store(&get(&uri(i), &[]), &cacheable(), &body, "", t(0), t(0))
                .await
                .unwrap();
            assert!(stored);
            assert!(progressed(before), "store {i} held the worker");
        }
        for i in 0..5 {
            let before = ticks.load(Ordering::Relaxed);
            let Lookup::Fresh(hit) = cache.lookup(&get(&uri(i), &[]), "", t(1)).await else {
                panic!("object {i} not fresh");
            };
            assert_eq!(hit.body, body);
            assert!(progressed(before), "lookup {i} held the worker");
        }
        // Revalidation, body by hash, invalidation: the same.
        let Lookup::Stale(old) = cache.lookup(&get(&uri(0), &[]), "", t(700)).await else {
            panic!("not stale");
        };
        let before = ticks.load(Ordering::Relaxed);
        let fresh = cache.freshen(&old, &resp(304, &[]), t(700), t(700)).await;
        assert!(fresh.is_some());
        assert!(progressed(before), "freshen held the worker");
        let before = ticks.load(Ordering::Relaxed);
        assert_eq!(
            cache.body_by_hash(old.body_hash()).await,
            Some(body.clone())
        );
        assert!(progressed(before), "body_by_hash held the worker");
        let before = ticks.load(Ordering::Relaxed);
        cache.invalidate(&req_m(Method::POST, &uri(1), &[])).await;
        assert!(progressed(before), "invalidate held the worker");
        assert!(matches!(
            cache.lookup(&get(&uri(1), &[]), "", t(2)).await,
            Lookup::Miss
        ));
        ticker.abort();
    });
    let threads = store.threads.lock().unwrap();
    // 5 stores, 5 lookups + 1 stale lookup, freshen, body_by_hash, invalidate; the lookup of
    // the invalidated object was answered from memory (an absent key needs no I/O).
    assert_eq!(threads.len(), 14, "{threads:?}");
    assert!(threads.iter().all(|id| *id != worker), "{threads:?}");
}

/// 32 lookups at once through a facade of 3 permits: never more than 3 in the store at once,
/// and the 3 do run in parallel. Lookups given up on (timed out) keep their permit until their
/// work is done, so the bound holds for those too. The store's calls wait at a closed gate, not
/// for a time: the timeouts surely cut them short and the 3 surely overlap, however busy the
/// machine.
#[test]
fn at_most_n_operations_run_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let gate = Arc::new(Gate::default());
    gate.set(true);
    let hold: Hold = {
        let gate = gate.clone();
        Box::new(move || gate.pass())
    };
    let (cache, store) = observed(dir.path(), hold, 3);
    for i in 0..8 {
        let stored = cache
            .blocking()
            .store(&get(&uri(i), &[]), &cacheable(), b"x", "", t(0), t(0))
            .unwrap();
        assert!(stored);
    }
    store.max_running.store(0, Ordering::SeqCst);
    gate.set(false);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(64)
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async {
        // Given up on after 5 ms, while their work is held in the store or queued.
        let abandoned: Vec<_> = (0..16)
            .map(|i| {
                let cache = cache.clone();
                tokio::spawn(async move {
                    let req = get(&uri(i % 8), &[]);
                    tokio::time::timeout(Duration::from_millis(5), cache.lookup(&req, "", t(1)))
                        .await
                        .is_err()
                })
            })
            .collect();
        for a in abandoned {
            assert!(
                a.await.unwrap(),
                "a 5 ms timeout should cut a lookup held in the store short"
            );
        }
        assert!(
            poll_until(Duration::from_secs(10), || store
                .running
                .load(Ordering::SeqCst)
                == 3),
            "3 abandoned lookups in the store at once ({})",
            store.running.load(Ordering::SeqCst)
        );
        // Queued behind the abandoned work's permits.
        let finished: Vec<_> = (0..32)
            .map(|i| {
                let cache = cache.clone();
                tokio::spawn(async move {
                    matches!(
                        cache.lookup(&get(&uri(i % 8), &[]), "", t(1)).await,
                        Lookup::Fresh(_)
                    )
                })
            })
            .collect();
        gate.set(true);
        for f in finished {
            assert!(f.await.unwrap());
        }
    });
    drop(rt);
    let max = store.max_running.load(Ordering::SeqCst);
    assert_eq!(max, 3, "at most (and, held at the gate, exactly) 3 at once");
    assert_eq!(cache.max_blocking(), 3);
}

/// Bodies are addressable by their SHA-256: shared by responses with identical bodies, read
/// from disk (and checked) when not in memory, gone when no entry refers to them.
#[test]
fn body_by_hash_finds_stored_bodies() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = CacheConfig::new(dir.path());
    cfg.memory_bytes = 0;
    let cache = HttpCache::open(cfg).unwrap();
    let body = b"body shared by two URLs";
    let hash: BodyHash = Sha256::digest(body).into();
    for i in 0..2 {
        assert!(cache
            .store(&get(&uri(i), &[]), &cacheable(), body, "", t(0), t(0))
            .unwrap());
    }
    let Lookup::Fresh(hit) = cache.lookup(&get(&uri(0), &[]), "", t(1)) else {
        panic!("not fresh");
    };
    assert_eq!(hit.body_hash(), &hash);
    assert_eq!(cache.body_by_hash(&hash).as_deref(), Some(&body[..]));
    assert_eq!(cache.body_by_hash(&[0; 32]), None);
    // One of the two responses gone: the body stays for the other.
    cache.invalidate(&req_m(Method::POST, &uri(0), &[]));
    assert_eq!(cache.body_by_hash(&hash).as_deref(), Some(&body[..]));
    // A damaged file is never served.
    let name = hex_name(&hash);
    let path = dir.path().join("bodies").join(&name[..2]).join(&name);
    std::fs::write(&path, b"damaged").unwrap();
    assert_eq!(cache.body_by_hash(&hash), None);
    // Both gone: so is the body.
    std::fs::write(&path, body).unwrap();
    cache.invalidate(&req_m(Method::POST, &uri(1), &[]));
    assert_eq!(cache.body_by_hash(&hash), None);
    assert!(!path.exists());
}

#[test]
fn body_by_hash_from_memory_and_through_the_facade() {
    let dir = tempfile::tempdir().unwrap();
    let cache = AsyncHttpCache::open(CacheConfig::new(dir.path())).unwrap();
    let body = Bytes::from_static(b"in memory");
    let hash: BodyHash = Sha256::digest(&body).into();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        assert!(cache
            .store(&get(&uri(0), &[]), &cacheable(), &body, "", t(0), t(0))
            .await
            .unwrap());
        assert_eq!(cache.body_by_hash(&hash).await, Some(body.clone()));
        assert_eq!(cache.body_by_hash(&[1; 32]).await, None);
    });
    // The body file can go: the memory copy answers.
    let name = hex_name(&hash);
    std::fs::remove_file(dir.path().join("bodies").join(&name[..2]).join(&name)).unwrap();
    assert_eq!(cache.blocking().body_by_hash(&hash), Some(body));
}

/// The memory-only lookup answers misses and memory hits, and declines the rest.
#[test]
fn lookup_in_memory_never_reads_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let heuristic = webpep_cache::policy::HeuristicConfig::default();
    let cfg = CacheConfig::new(dir.path());
    let disk = Arc::new(DiskStore::open(dir.path(), 1 << 20, 1 << 20, heuristic).unwrap());
    let cache = HttpCache::with_storage(disk, &cfg).unwrap();
    assert!(matches!(
        cache.lookup_in_memory(&get(&uri(0), &[]), "", t(0)),
        Some(Lookup::Miss)
    ));
    cache
        .store(&get(&uri(0), &[]), &cacheable(), b"abc", "", t(0), t(0))
        .unwrap();
    assert!(matches!(
        cache.lookup_in_memory(&get(&uri(0), &[]), "", t(1)),
        Some(Lookup::Fresh(_))
    ));
    drop(cache);
    // Reopened: the index is loaded, no body is in memory yet.
    let disk = Arc::new(DiskStore::open(dir.path(), 1 << 20, 1 << 20, heuristic).unwrap());
    let cache = HttpCache::with_storage(disk, &cfg).unwrap();
    assert!(cache
        .lookup_in_memory(&get(&uri(0), &[]), "", t(1))
        .is_none());
    assert!(matches!(
        cache.lookup_in_memory(&get(&uri(1), &[]), "", t(1)),
        Some(Lookup::Miss)
    ));
    // The full lookup reads it, after which memory answers.
    assert!(matches!(
        cache.lookup(&get(&uri(0), &[]), "", t(1)),
        Lookup::Fresh(_)
    ));
    assert!(matches!(
        cache.lookup_in_memory(&get(&uri(0), &[]), "", t(1)),
        Some(Lookup::Fresh(_))
    ));
    let s = cache.stats();
    assert_eq!((s.hits, s.misses), (2, 1));
}

fn hex_name(hash: &BodyHash) -> String {
    hash.iter().map(|b| format!("{b:02x}")).collect()
}
