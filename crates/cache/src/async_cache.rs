//! [`AsyncHttpCache`]: the cache for async code. Every operation that may touch the disk —
//! body file reads (and their SHA-256 check), hashing a body to store, writing it, index (redb)
//! commits, purges — runs on tokio's blocking threads, at most `permits` at once (a
//! semaphore), so a tokio worker never waits on the disk and a burst of cache work cannot take
//! every blocking thread.
//!
//! One thing runs on the caller's thread: [`AsyncHttpCache::lookup`] first asks the store
//! whether it can answer from memory alone ([`crate::Storage::lookup_in_memory`]: a mutex held
//! for a few map operations, no I/O). A miss, or a hit whose body is one of the in-memory
//! copies, is answered at once; that is most lookups, and a trip through the pool (two thread
//! hand-offs) would cost more than the lookup. Only a hit on a body not in memory goes to the
//! pool.

use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use http::request::Parts as RequestParts;
use http::response::Parts as ResponseParts;
use tokio::sync::Semaphore;

use crate::entry::BodyHash;
use crate::error::CacheError;
use crate::http_cache::{CacheConfig, CacheStats, CachedResponse, HttpCache, Lookup};

/// How many cache operations run on blocking threads at once unless configured otherwise
/// ([`CacheConfig::blocking_permits`]).
pub const DEFAULT_BLOCKING_PERMITS: usize = 4;

/// An [`HttpCache`] whose blocking work runs on a bounded blocking pool. Cheap to clone (the
/// clones share the cache and the bound). The async methods need a tokio runtime; a caller
/// already on a blocking thread (a transform) uses [`AsyncHttpCache::blocking`].
#[derive(Clone)]
pub struct AsyncHttpCache {
    cache: Arc<HttpCache>,
    permits: Arc<Semaphore>,
    max_permits: usize,
}

impl AsyncHttpCache {
    /// Open the disk cache of `cfg` (blocking: call at start-up or from a blocking thread),
    /// with `cfg.blocking_permits` blocking operations at once.
    pub fn open(cfg: CacheConfig) -> Result<AsyncHttpCache, CacheError> {
        let permits = cfg.blocking_permits;
        Ok(AsyncHttpCache::new(HttpCache::open(cfg)?, permits))
    }

    /// Wrap a cache; at most `permits` (at least 1) of its operations run at once.
    pub fn new(cache: HttpCache, permits: usize) -> AsyncHttpCache {
        let permits = permits.max(1);
        AsyncHttpCache {
            cache: Arc::new(cache),
            permits: Arc::new(Semaphore::new(permits)),
            max_permits: permits,
        }
    }

    /// The synchronous cache, for code already on a blocking thread (its methods block).
    pub fn blocking(&self) -> &Arc<HttpCache> {
        &self.cache
    }

    /// The bound on blocking operations at once.
    pub fn max_blocking(&self) -> usize {
        self.max_permits
    }

    /// Run `f` on a blocking thread once a permit is free. A panic in `f` is resumed here;
    /// `None` when the runtime is shutting down and `f` never ran.
    async fn run<T, F>(&self, f: F) -> Option<T>
    where
        F: FnOnce(&HttpCache) -> T + Send + 'static,
        T: Send + 'static,
    {
        // The semaphore is never closed.
        let permit = self.permits.clone().acquire_owned().await.ok()?;
        let cache = self.cache.clone();
        // The permit travels with the work: if this future is dropped, the bound still
        // holds until the work is done.
        let task = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            f(&cache)
        });
        match task.await {
            Ok(v) => Some(v),
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(_) => None,
        }
    }

    /// [`HttpCache::lookup`]: from memory when possible, else on the pool.
    pub async fn lookup(&self, req: &RequestParts, variant: &str, now: SystemTime) -> Lookup {
        if let Some(found) = self.cache.lookup_in_memory(req, variant, now) {
            return found;
        }
        let (req, variant) = (req.clone(), variant.to_string());
        self.run(move |c| c.lookup(&req, &variant, now))
            .await
            .unwrap_or(Lookup::Miss)
    }

    /// [`HttpCache::store`] on the pool (the body's SHA-256, its file, the index commit).
    pub async fn store(
        &self,
        req: &RequestParts,
        resp: &ResponseParts,
        body: &Bytes,
        variant: &str,
        request_time: SystemTime,
        response_time: SystemTime,
    ) -> Result<bool, CacheError> {
        let (req, resp, body, variant) =
            (req.clone(), resp.clone(), body.clone(), variant.to_string());
        self.run(move |c| c.store(&req, &resp, &body, &variant, request_time, response_time))
            .await
            .unwrap_or(Err(CacheError::ShuttingDown))
    }

    /// [`HttpCache::freshen`] on the pool (an index commit, or a body write when the entry
    /// was evicted meanwhile).
    pub async fn freshen(
        &self,
        stale: &CachedResponse,
        not_modified: &ResponseParts,
        request_time: SystemTime,
        response_time: SystemTime,
    ) -> Option<CachedResponse> {
        let (stale, not_modified) = (stale.clone(), not_modified.clone());
        self.run(move |c| c.freshen(&stale, &not_modified, request_time, response_time))
            .await
            .flatten()
    }

    /// [`HttpCache::invalidate`] on the pool.
    pub async fn invalidate(&self, req: &RequestParts) {
        let req = req.clone();
        self.run(move |c| c.invalidate(&req)).await;
    }

    /// [`HttpCache::invalidate_after`] on the pool.
    pub async fn invalidate_after(&self, req: &RequestParts, resp: &ResponseParts) {
        let (req, resp) = (req.clone(), resp.clone());
        self.run(move |c| c.invalidate_after(&req, &resp)).await;
    }

    /// [`HttpCache::body_by_hash`] on the pool.
    pub async fn body_by_hash(&self, hash: &BodyHash) -> Option<Bytes> {
        let hash = *hash;
        self.run(move |c| c.body_by_hash(&hash)).await.flatten()
    }

    /// [`HttpCache::flush`] on the pool.
    pub async fn flush(&self) -> Result<(), CacheError> {
        self.run(|c| c.flush())
            .await
            .unwrap_or(Err(CacheError::ShuttingDown))
    }

    /// Counters and sizes (memory only: no I/O).
    pub fn stats(&self) -> CacheStats {
        self.cache.stats()
    }
}
