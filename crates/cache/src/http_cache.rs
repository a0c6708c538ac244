//! [`HttpCache`]: the API the proxy calls — policy decisions from [`crate::policy`] applied to
//! a [`Storage`] (the disk store unless told otherwise). Synchronous: async code uses
//! [`crate::AsyncHttpCache`].

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::header::{AGE, CONTENT_LENGTH, CONTENT_LOCATION, ETAG, LAST_MODIFIED, LOCATION};
use http::request::Parts as RequestParts;
use http::response::Parts as ResponseParts;
use http::{HeaderMap, HeaderValue, Method, StatusCode};
use sha2::{Digest, Sha256};

use crate::directives::{RequestDirectives, ResponseDirectives};
use crate::entry::{BodyHash, Entry, ValidUntil};
use crate::error::CacheError;
use crate::policy::{self, HeuristicConfig, Usability};
use crate::storage::{MemoryLookup, Purge, Storage, Stored};
use crate::store::{body_hash, DiskStore};

/// Where and how big the cache is.
#[derive(Clone, Debug, PartialEq)]
pub struct CacheConfig {
    /// The directory holding the index and bodies (created if missing).
    pub dir: PathBuf,
    /// The bound on stored bytes (bodies once each, plus per-entry metadata).
    pub max_bytes: u64,
    /// Larger responses are not stored; `None` means `max_bytes / 8`.
    pub max_object_bytes: Option<u64>,
    /// The bound on bodies kept in memory for disk-free hits.
    pub memory_bytes: u64,
    /// The cap on a heuristic freshness lifetime (§4.2.2).
    pub heuristic_max: Duration,
    /// The fraction of (Date − Last-Modified) used as heuristic lifetime.
    pub heuristic_fraction: f64,
    /// [`crate::AsyncHttpCache`]: at most this many cache operations run on blocking
    /// threads at once (file reads, SHA-256, index commits).
    pub blocking_permits: usize,
}

impl CacheConfig {
    /// Defaults for everything but the directory: 1 GiB on disk, objects up to 1/8 of it,
    /// 64 MiB in memory, heuristic 10 % capped at 24 h.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        CacheConfig {
            dir: dir.into(),
            max_bytes: 1 << 30,
            max_object_bytes: None,
            memory_bytes: 64 << 20,
            heuristic_max: Duration::from_secs(24 * 3600),
            heuristic_fraction: 0.1,
            blocking_permits: crate::DEFAULT_BLOCKING_PERMITS,
        }
    }

    fn max_object(&self) -> u64 {
        self.max_object_bytes
            .unwrap_or(self.max_bytes / 8)
            .min(self.max_bytes)
    }
}

/// Counters and sizes, for the proxy's `/metrics`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Stored entries.
    pub entries: u64,
    /// Bytes accounted against `max_bytes`.
    pub bytes: u64,
    /// The configured bound.
    pub max_bytes: u64,
    /// Bytes of bodies held in memory.
    pub memory_bytes: u64,
    /// Lookups answered Fresh.
    pub hits: u64,
    /// Lookups answered Miss.
    pub misses: u64,
    /// Lookups answered Stale (validation needed).
    pub stale: u64,
    /// Responses stored (including re-stores on freshen).
    pub stores: u64,
    /// Entries evicted to keep the bound.
    pub evictions: u64,
}

/// The answer to a lookup.
#[derive(Clone, Debug)]
pub enum Lookup {
    /// Usable as is.
    Fresh(CachedResponse),
    /// Stored but must be validated: send [`CachedResponse::conditional_headers`] to the origin,
    /// then [`HttpCache::freshen`] on a 304 or [`HttpCache::store`] on a full response.
    Stale(CachedResponse),
    /// Nothing stored (a request with `only-if-cached` then gets 504 from the caller).
    Miss,
}

/// A stored response ready to send.
#[derive(Clone, Debug)]
pub struct CachedResponse {
    /// The stored status.
    pub status: StatusCode,
    /// The stored headers with `Age` set to the current age.
    pub headers: HeaderMap,
    /// The body (for a HEAD request the caller sends none).
    pub body: Bytes,
    key: String,
    entry: Arc<Entry>,
}

impl CachedResponse {
    /// When the certificate the stored response came under expires, if it came over TLS.
    pub fn valid_until(&self) -> Option<SystemTime> {
        self.entry.valid_until
    }

    fn new(key: String, entry: Arc<Entry>, body: Bytes, age: Duration) -> Self {
        let mut headers = entry.headers.clone();
        // §1.2.2: ages beyond 2^31 are sent as 2^31.
        let secs = age.as_secs().min(1 << 31);
        headers.insert(AGE, HeaderValue::from(secs));
        CachedResponse {
            status: entry.status,
            headers,
            body,
            key,
            entry,
        }
    }

    /// `If-None-Match` / `If-Modified-Since` built from the stored validators (§4.3.1).
    pub fn conditional_headers(&self) -> HeaderMap {
        policy::conditional_headers(&self.entry.headers)
    }

    /// Whether the stored response has a validator, so a revalidation can end in a 304.
    pub fn has_validator(&self) -> bool {
        self.entry.headers.contains_key(ETAG) || self.entry.headers.contains_key(LAST_MODIFIED)
    }

    /// Whether this (stale) response may be served at `now` because the origin failed:
    /// unreachable or timed out (`origin_unreachable`), or answered 5xx. See
    /// [`policy::stale_on_error_allowed`]. The caller should log that it served stale.
    pub fn usable_on_origin_error(&self, now: SystemTime, origin_unreachable: bool) -> bool {
        policy::stale_on_error_allowed(
            &self.entry.directives,
            self.entry.lifetime,
            self.entry.age_at(now),
            origin_unreachable,
        )
    }

    /// The freshness lifetime of the stored response (§4.2.1).
    pub fn freshness_lifetime(&self) -> Duration {
        self.entry.lifetime
    }

    /// The SHA-256 of the body: [`HttpCache::body_by_hash`] finds it again.
    pub fn body_hash(&self) -> &BodyHash {
        &self.entry.body_hash
    }
}

/// Whether the client's own conditional request (If-None-Match / If-Modified-Since) is
/// satisfied by `cached`, so the proxy answers 304 without a body.
pub fn client_not_modified(req: &RequestParts, cached: &CachedResponse) -> bool {
    policy::client_not_modified(&req.method, &req.headers, cached.status, &cached.headers)
}

/// Whether the request says `only-if-cached` (§5.2.1.7): on a Miss (or a Stale entry that
/// cannot be served) the caller answers 504 instead of contacting the origin.
pub fn only_if_cached(req: &RequestParts) -> bool {
    RequestDirectives::parse(&req.headers).only_if_cached
}

/// A shared HTTP cache: RFC 9111 policy over a [`Storage`]. `Send + Sync`; every method
/// takes `&self`. Methods may block on file and index I/O: from async code use
/// [`crate::AsyncHttpCache`].
pub struct HttpCache {
    store: Arc<dyn Storage>,
    heuristic: HeuristicConfig,
    max_bytes: u64,
    max_object: u64,
    hits: AtomicU64,
    misses: AtomicU64,
    stale: AtomicU64,
    stores: AtomicU64,
}

/// The secondary key as stored: short and fixed-length whatever the Vary'd headers hold.
fn secondary_id(vary: &[String], headers: &HeaderMap) -> String {
    if vary.is_empty() {
        return "-".to_string();
    }
    let digest = Sha256::digest(policy::secondary_key(vary, headers).as_bytes());
    hex::encode(&digest[..16])
}

/// The primary key: URI, NUL, variant. NUL cannot occur in a URI.
fn primary(req: &RequestParts, variant: &str) -> Option<(String, String)> {
    let uri = policy::primary_key(&req.uri, &req.headers)?;
    let primary = format!("{uri}\0{variant}");
    Some((uri, primary))
}

impl HttpCache {
    /// Open (or create) the cache in `cfg.dir`, dropping damaged entries and enforcing the bound.
    pub fn open(cfg: CacheConfig) -> Result<HttpCache, CacheError> {
        let heuristic = check(&cfg)?;
        let store = DiskStore::open(&cfg.dir, cfg.max_bytes, cfg.memory_bytes, heuristic)?;
        HttpCache::with_storage(Arc::new(store), &cfg)
    }

    /// The cache over another store; of `cfg` only the bounds (`max_bytes`, the largest
    /// object) and the heuristic are used — the store has its own directory and memory.
    pub fn with_storage(
        store: Arc<dyn Storage>,
        cfg: &CacheConfig,
    ) -> Result<HttpCache, CacheError> {
        let heuristic = check(cfg)?;
        Ok(HttpCache {
            store,
            heuristic,
            max_bytes: cfg.max_bytes,
            max_object: cfg.max_object(),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            stale: AtomicU64::new(0),
            stores: AtomicU64::new(0),
        })
    }

    /// The store under the policy.
    pub fn storage(&self) -> &Arc<dyn Storage> {
        &self.store
    }

    /// Find a stored response for `req` (GET or HEAD) in representation `variant` ("" for the
    /// origin's bytes; the proxy's transformed variants have their own names).
    pub fn lookup(&self, req: &RequestParts, variant: &str, now: SystemTime) -> Lookup {
        self.lookup_with(req, variant, now, false)
            .unwrap_or(Lookup::Miss)
    }

    /// [`HttpCache::lookup`] when it needs no I/O (a miss, or a body held in memory); `None`
    /// when it does. Counts only what it answers.
    pub fn lookup_in_memory(
        &self,
        req: &RequestParts,
        variant: &str,
        now: SystemTime,
    ) -> Option<Lookup> {
        self.lookup_with(req, variant, now, true)
    }

    fn lookup_with(
        &self,
        req: &RequestParts,
        variant: &str,
        now: SystemTime,
        memory_only: bool,
    ) -> Option<Lookup> {
        if !(req.method == Method::GET || req.method == Method::HEAD) {
            return Some(Lookup::Miss);
        }
        let found = match primary(req, variant) {
            None => None,
            Some((_, primary)) => {
                let secondary = |vary: &[String]| secondary_id(vary, &req.headers);
                if memory_only {
                    match self.store.lookup_in_memory(&primary, &secondary) {
                        MemoryLookup::Hit(stored) => Some(stored),
                        MemoryLookup::Absent => None,
                        MemoryLookup::NotInMemory => return None,
                    }
                } else {
                    self.store.lookup(&primary, &secondary)
                }
            }
        };
        let Some(Stored {
            key,
            meta: entry,
            body,
        }) = found
        else {
            self.misses.fetch_add(1, Ordering::Relaxed);
            return Some(Lookup::Miss);
        };
        let age = entry.age_at(now);
        let directives = RequestDirectives::parse(&req.headers);
        let usability = policy::usability(&directives, &entry.directives, entry.lifetime, age);
        let response = CachedResponse::new(key, entry, body, age);
        Some(match usability {
            Usability::Fresh => {
                self.hits.fetch_add(1, Ordering::Relaxed);
                Lookup::Fresh(response)
            }
            Usability::MustValidate => {
                self.stale.fetch_add(1, Ordering::Relaxed);
                Lookup::Stale(response)
            }
        })
    }

    /// A stored body by its SHA-256, whichever responses share it (checked against the hash
    /// when read from disk).
    pub fn body_by_hash(&self, hash: &BodyHash) -> Option<Bytes> {
        self.store.body_by_hash(hash)
    }

    /// Store a response received at `response_time` for a request sent at `request_time`.
    /// Returns Ok(false) when policy says not storable (the caller needn't check first).
    pub fn store(
        &self,
        req: &RequestParts,
        resp: &ResponseParts,
        body: &[u8],
        variant: &str,
        request_time: SystemTime,
        response_time: SystemTime,
    ) -> Result<bool, CacheError> {
        if let Err(reason) = policy::storable(&req.method, &req.headers, resp.status, &resp.headers)
        {
            tracing::trace!(uri = %req.uri, ?reason, "not storable");
            return Ok(false);
        }
        if body.len() as u64 > self.max_object {
            tracing::trace!(uri = %req.uri, len = body.len(), "larger than max_object_bytes");
            return Ok(false);
        }
        let Some((_, primary)) = primary(req, variant) else {
            return Ok(false);
        };
        let mut headers = policy::strip_hop_by_hop(&resp.headers);
        // The stored body is what will be served: keep a Content-Length truthful.
        if headers.contains_key(CONTENT_LENGTH) {
            headers.insert(CONTENT_LENGTH, HeaderValue::from(body.len()));
        }
        let vary = policy::vary_names(&headers).unwrap_or_default();
        let secondary = secondary_id(&vary, &req.headers);
        let entry = Entry::new(
            resp.status,
            headers,
            request_time,
            response_time,
            body_hash(body),
            body.len() as u64,
            vary,
            &self.heuristic,
            resp.extensions.get::<ValidUntil>().map(|v| v.0),
        );
        // Never fresh and nothing to validate with: storing it could never save a transfer.
        let has_validator =
            entry.headers.contains_key(ETAG) || entry.headers.contains_key(LAST_MODIFIED);
        if entry.lifetime.is_zero() && !has_validator {
            return Ok(false);
        }
        self.store.insert(&primary, &secondary, entry, body)?;
        self.stores.fetch_add(1, Ordering::Relaxed);
        Ok(true)
    }

    /// After a 304 from the origin for a Stale entry: update stored headers, return the fresh
    /// response. `None` when the 304 does not apply to this stored response (§4.3.4: its strong
    /// ETag or Last-Modified differs) — then fetch in full.
    pub fn freshen(
        &self,
        stale: &CachedResponse,
        not_modified: &ResponseParts,
        request_time: SystemTime,
        response_time: SystemTime,
    ) -> Option<CachedResponse> {
        if not_modified.status != StatusCode::NOT_MODIFIED
            || !policy::not_modified_applies(&stale.entry.headers, &not_modified.headers)
        {
            return None;
        }
        let old = &stale.entry;
        let headers = policy::freshen_headers(&old.headers, &not_modified.headers, response_time);
        let entry = Entry::new(
            old.status,
            headers,
            request_time,
            response_time,
            old.body_hash,
            old.body_len,
            old.vary.clone(),
            &self.heuristic,
            // The 304 came under the certificate the origin shows now.
            not_modified
                .extensions
                .get::<ValidUntil>()
                .map(|v| v.0)
                .or(old.valid_until),
        );
        let directives = ResponseDirectives::parse(&entry.headers);
        let key = stale.key.clone();
        if directives.no_store || directives.private {
            // The origin withdrew permission to share: serve this once, keep nothing.
            let purge = Purge::Key {
                key: &key,
                if_body: None,
            };
            if let Err(e) = self.store.purge(purge) {
                tracing::warn!(error = %e, "removing a withdrawn entry failed");
            }
        } else {
            let result = self
                .store
                .update_meta(&key, entry.clone())
                .and_then(|replaced| {
                    match (replaced, key.rsplit_once('\0')) {
                        (true, _) => Ok(()),
                        // Evicted meanwhile: the body is at hand, store it again.
                        (false, Some((primary, secondary))) => {
                            self.store
                                .insert(primary, secondary, entry.clone(), &stale.body)
                        }
                        (false, None) => Ok(()),
                    }
                });
            match result {
                Ok(()) => {
                    self.stores.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => tracing::warn!(error = %e, "storing freshened headers failed"),
            }
        }
        let age = entry.initial_age;
        Some(CachedResponse::new(
            key,
            Arc::new(entry),
            stale.body.clone(),
            age,
        ))
    }

    /// Drop every stored response for the request's target URI, all variants and Vary keys
    /// (§4.4; call for unsafe methods with a non-error response).
    pub fn invalidate(&self, req: &RequestParts) {
        let Some(uri) = policy::primary_key(&req.uri, &req.headers) else {
            return;
        };
        match self.store.purge(Purge::Prefix(&format!("{uri}\0"))) {
            Ok(n) if n > 0 => tracing::debug!(%uri, entries = n, "invalidated"),
            Ok(_) => {}
            Err(e) => tracing::warn!(%uri, error = %e, "invalidation failed"),
        }
    }

    /// §4.4 in full: after an unsafe request (POST, PUT, DELETE, …) got a non-error response
    /// (2xx or 3xx), drop the stored responses of the target URI and of the URIs in `Location`
    /// and `Content-Location` when they have the same origin (other origins could otherwise
    /// be purged by anyone). Safe methods and error responses invalidate nothing.
    pub fn invalidate_after(&self, req: &RequestParts, resp: &ResponseParts) {
        let code = resp.status.as_u16();
        if !policy::invalidates(&req.method) || !(200..400).contains(&code) {
            return;
        }
        self.invalidate(req);
        let Some(target) = policy::primary_key(&req.uri, &req.headers) else {
            return;
        };
        for name in [LOCATION, CONTENT_LOCATION] {
            let Some(value) = resp.headers.get(&name).and_then(|v| v.to_str().ok()) else {
                continue;
            };
            if let Some(uri) = policy::resolve_same_origin(&target, value.trim()) {
                if let Err(e) = self.store.purge(Purge::Prefix(&format!("{uri}\0"))) {
                    tracing::warn!(%uri, error = %e, "invalidation failed");
                }
            }
        }
    }

    /// Save the LRU order now (it is also saved with every store and when the cache is dropped).
    pub fn flush(&self) -> Result<(), CacheError> {
        self.store.flush()
    }

    /// Counters and sizes.
    pub fn stats(&self) -> CacheStats {
        let s = self.store.stats();
        CacheStats {
            entries: s.entries,
            bytes: s.bytes,
            max_bytes: self.max_bytes,
            memory_bytes: s.memory_bytes,
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            stale: self.stale.load(Ordering::Relaxed),
            stores: self.stores.load(Ordering::Relaxed),
            evictions: s.evictions,
        }
    }
}

/// Check a configuration; returns the heuristic it asks for.
fn check(cfg: &CacheConfig) -> Result<HeuristicConfig, CacheError> {
    if cfg.max_bytes == 0 {
        return Err(CacheError::Config("max_bytes must be above 0".into()));
    }
    if !(0.0..=1.0).contains(&cfg.heuristic_fraction) {
        return Err(CacheError::Config(format!(
            "heuristic_fraction {} is not within 0..=1",
            cfg.heuristic_fraction
        )));
    }
    if cfg.blocking_permits == 0 {
        return Err(CacheError::Config(
            "blocking_permits must be above 0".into(),
        ));
    }
    Ok(HeuristicConfig {
        fraction: cfg.heuristic_fraction,
        max: cfg.heuristic_max,
    })
}
