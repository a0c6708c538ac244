//! webpep's shared HTTP cache: the subset of RFC 9111 that deployed shared proxies (Squid,
//! Varnish, nginx) implement, bounded in bytes on disk with LRU eviction, surviving a restart.
//!
//! - [`policy`] holds every RFC rule as a pure function (storability, freshness, age, request
//!   directives, validation, Vary, invalidation), tested with fixed clocks;
//! - a [`Storage`] keeps entries by key and bodies by SHA-256 ([`Storage::body_by_hash`]); the
//!   [`DiskStore`] implements it with body files named by their hash (identical bodies once),
//!   metadata in a redb index, and hot small bodies in memory;
//! - [`HttpCache`] applies the policy to a store: [`HttpCache::lookup`], [`HttpCache::store`],
//!   [`HttpCache::freshen`], [`HttpCache::invalidate`], [`HttpCache::stats`]; its methods
//!   block on I/O;
//! - [`AsyncHttpCache`] is what the proxy calls: the same methods, async, their blocking work
//!   on a bounded blocking pool so no tokio worker waits on the disk;
//! - [`lru::LruModel`] is the LRU the store evicts with, pure and public (a model of a
//!   client's cache).
//!
//! The key is scheme + authority + path-and-query (method-independent for GET/HEAD), the Vary
//! secondary key, and a `variant` naming the proxy's transformed representation.
//!
//! # How the proxy uses it
//!
//! ```
//! use std::time::{Duration, SystemTime};
//! use webpep_cache::{client_not_modified, CacheConfig, HttpCache, Lookup};
//!
//! let dir = tempfile::tempdir()?;
//! let cache = HttpCache::open(CacheConfig::new(dir.path()))?;
//! let req = http::Request::get("http://example.com/app.js").body(())?.into_parts().0;
//! let t0 = SystemTime::now();
//!
//! // Miss: fetch from the origin, then offer the response to the cache (it decides).
//! assert!(matches!(cache.lookup(&req, "", t0), Lookup::Miss));
//! let resp = http::Response::builder()
//!     .status(200)
//!     .header("cache-control", "max-age=60")
//!     .header("etag", "\"v1\"")
//!     .body(())?
//!     .into_parts()
//!     .0;
//! assert!(cache.store(&req, &resp, b"console.log(1)", "", t0, t0)?);
//!
//! // Fresh: serve it (Age is set); answer the client's own conditional with a 304.
//! if let Lookup::Fresh(hit) = cache.lookup(&req, "", t0 + Duration::from_secs(5)) {
//!     assert_eq!(hit.headers["age"], "5");
//!     assert!(!client_not_modified(&req, &hit));
//! }
//!
//! // Stale: revalidate with the stored validators; a 304 freshens the entry.
//! let later = t0 + Duration::from_secs(120);
//! let Lookup::Stale(old) = cache.lookup(&req, "", later) else { unreachable!() };
//! assert_eq!(old.conditional_headers()["if-none-match"], "\"v1\"");
//! let not_modified = http::Response::builder().status(304).body(())?.into_parts().0;
//! let renewed = cache.freshen(&old, &not_modified, later, later).expect("304 applies");
//! assert_eq!(&renewed.body[..], b"console.log(1)");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Deliberate limits: only GET responses are stored (HEAD lookups are served from them); 206 and
//! range requests are not cached; a response with `Set-Cookie` is stored only when explicitly
//! `public` or `s-maxage`; qualified `private`/`no-cache` act as their unqualified forms.

mod async_cache;
pub mod directives;
mod entry;
mod error;
mod http_cache;
pub mod lru;
pub mod policy;
mod storage;
mod store;

pub use async_cache::{AsyncHttpCache, DEFAULT_BLOCKING_PERMITS};
pub use entry::{BodyHash, Entry, ValidUntil};
pub use error::CacheError;
pub use http_cache::{
    client_not_modified, only_if_cached, CacheConfig, CacheStats, CachedResponse, HttpCache, Lookup,
};
pub use storage::{MemoryLookup, Purge, Storage, StorageStats, Stored};
pub use store::DiskStore;
