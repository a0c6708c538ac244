//! webpep's shared HTTP cache: the subset of RFC 9111 that deployed shared proxies (Squid,
//! Varnish, nginx) implement, bounded in bytes on disk with LRU eviction, surviving a restart.
//!
//! - [`policy`] holds every RFC rule as a pure function (storability, freshness, age, request
//!   directives, validation, Vary, invalidation), tested with fixed clocks;
//! - a disk store keeps bodies as files named by SHA-256 (identical bodies once), metadata in
//!   a redb index, and hot small bodies in memory;
//! - [`HttpCache`] is what the proxy calls: [`HttpCache::lookup`], [`HttpCache::store`],
//!   [`HttpCache::freshen`], [`HttpCache::invalidate`], [`HttpCache::stats`].
//!
//! The key is scheme + authority + path-and-query (method-independent for GET/HEAD), the Vary
//! secondary key, and a `variant` naming the proxy's transformed representation.
//!
//! Deliberate limits: only GET responses are stored (HEAD lookups are served from them); 206 and
//! range requests are not cached; a response with `Set-Cookie` is stored only when explicitly
//! `public` or `s-maxage`; qualified `private`/`no-cache` act as their unqualified forms.

pub mod directives;
mod entry;
mod error;
mod http_cache;
mod lru;
pub mod policy;
mod store;

pub use error::CacheError;
pub use http_cache::{
    client_not_modified, only_if_cached, CacheConfig, CacheStats, CachedResponse, HttpCache, Lookup,
};
