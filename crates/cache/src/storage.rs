//! The storage layer under [`crate::HttpCache`]: entries (metadata) by key, bodies by their
//! SHA-256, a byte bound. No HTTP rule lives here — storability, freshness, validation and
//! Vary are decided by [`crate::policy`] in [`crate::HttpCache`] above it.
//!
//! Every method may block (file reads and writes, SHA-256 checks, index commits): async code
//! calls it through [`crate::AsyncHttpCache`], which runs it on a bounded blocking pool. Only
//! [`Storage::lookup_in_memory`] and [`Storage::stats`] promise not to block.
//!
//! Keys: a *primary* key (URI, NUL, variant) and a *secondary* key (from the request headers
//! the stored response Varies on) joined by a NUL make an entry's key.

use std::sync::Arc;

use bytes::Bytes;

use crate::entry::{BodyHash, Entry};
use crate::error::CacheError;

/// A stored entry and its body.
#[derive(Clone, Debug)]
pub struct Stored {
    /// The full key (primary, NUL, secondary).
    pub key: String,
    /// The stored metadata.
    pub meta: Arc<Entry>,
    /// The body, whose SHA-256 is `meta.body_hash()`.
    pub body: Bytes,
}

/// The answer of [`Storage::lookup_in_memory`].
#[derive(Clone, Debug)]
pub enum MemoryLookup {
    /// Stored, and its body is in memory.
    Hit(Stored),
    /// Nothing stored under the key (known without any I/O).
    Absent,
    /// Answering needs I/O: call [`Storage::lookup`] (off the async runtime).
    NotInMemory,
}

/// What [`Storage::purge`] removes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purge<'a> {
    /// Every entry whose key starts with this (a URI and a NUL: all its variants and Vary
    /// keys).
    Prefix(&'a str),
    /// One entry, only if it still refers to this body when one is given.
    Key {
        /// The full key.
        key: &'a str,
        /// Remove only if the entry's body has this hash.
        if_body: Option<[u8; 32]>,
    },
}

/// Sizes of a store.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StorageStats {
    /// Stored entries.
    pub entries: u64,
    /// Bytes accounted against the bound (each distinct body once, plus metadata).
    pub bytes: u64,
    /// Entries evicted to keep the bound, since open.
    pub evictions: u64,
    /// Bytes of bodies held in memory.
    pub memory_bytes: u64,
}

/// A cache store: entries by key, bodies addressable by their SHA-256. Synchronous and shared
/// between threads; every method takes `&self`. [`crate::DiskStore`] (a redb index and body
/// files) is the implementation the proxy uses.
pub trait Storage: Send + Sync {
    /// The entry under `primary` whose secondary key `secondary` computes from the Vary names
    /// stored for `primary`, with its body; marks it used. A damaged body reads as `None`
    /// (and the store drops the entry).
    fn lookup(&self, primary: &str, secondary: &dyn Fn(&[String]) -> String) -> Option<Stored>;

    /// [`Storage::lookup`] without any I/O: answers from memory when it can, else says
    /// [`MemoryLookup::NotInMemory`]. The default never answers.
    fn lookup_in_memory(
        &self,
        primary: &str,
        secondary: &dyn Fn(&[String]) -> String,
    ) -> MemoryLookup {
        let _ = (primary, secondary);
        MemoryLookup::NotInMemory
    }

    /// Store `meta` and `body` (whose SHA-256 must be `meta.body_hash()`) under `primary` and
    /// `secondary`, replacing an older entry and, when the Vary names changed, every entry of
    /// `primary`; evicts to the bound.
    fn insert(
        &self,
        primary: &str,
        secondary: &str,
        meta: Entry,
        body: &[u8],
    ) -> Result<(), CacheError>;

    /// Replace the metadata of the entry under `key` when its body is unchanged (after a 304).
    /// Returns false when the entry is gone or has another body.
    fn update_meta(&self, key: &str, meta: Entry) -> Result<bool, CacheError>;

    /// Remove entries; returns how many.
    fn purge(&self, target: Purge<'_>) -> Result<usize, CacheError>;

    /// A stored body by its SHA-256 (whichever entries refer to it), checked against the hash.
    fn body_by_hash(&self, hash: &BodyHash) -> Option<Bytes>;

    /// Make pending bookkeeping (such as the access order) durable.
    fn flush(&self) -> Result<(), CacheError> {
        Ok(())
    }

    /// Current sizes; never blocks on I/O.
    fn stats(&self) -> StorageStats;
}
