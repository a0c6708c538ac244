//! The disk store: bodies as files named by their SHA-256 (identical bodies stored once), a
//! redb index of metadata, LRU eviction bounded in bytes, and a bounded in-memory copy of hot
//! small bodies so a hit costs no disk read.
//!
//! Layout under the cache directory:
//! - `index.redb` — key → entry JSON; key → last-access tick;
//! - `bodies/ab/abcdef…` — one file per distinct body, named by its hex SHA-256;
//! - `tmp/` — bodies being written (renamed into `bodies/` when complete).
//!
//! Crash safety: a body is written to `tmp/` and renamed before the index commits, so the index
//! never names a body that was not fully written; on open, entries whose body is missing or has
//! the wrong length are dropped and unreferenced body files deleted. Bodies are verified against
//! their hash on every disk read, so a silently damaged file is dropped, never served. Most index
//! commits are non-durable (no fsync); one in [`DURABLE_EVERY`] commits, or the first after
//! [`DURABLE_INTERVAL`], and the one on close, are durable. A crash then forgets at most the
//! last second of stores — harmless for a cache — and never leaves an entry without its body.
//!
//! Concurrency: the in-memory state (entries, LRU order, memory copies) sits behind one mutex
//! held only for map operations. Every change to the index or to body files additionally holds
//! `write_lock`, which orders index commits exactly as the state changes and means a body file is
//! never deleted while another writer is about to reference it.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use redb::{Database, DatabaseError, Durability, ReadableTable, StorageError, TableDefinition};
use sha2::{Digest, Sha256};

use crate::entry::{BodyHash, Entry};
use crate::error::{index_err, CacheError};
use crate::lru::LruModel;
use crate::policy::HeuristicConfig;
use crate::storage::{MemoryLookup, Purge, Storage, StorageStats, Stored};

const ENTRIES: TableDefinition<&str, &[u8]> = TableDefinition::new("entries");
const ACCESS: TableDefinition<&str, u64> = TableDefinition::new("access");

/// At most this many non-durable index commits in a row.
const DURABLE_EVERY: u32 = 256;
/// At most this long between durable index commits while stores go on.
const DURABLE_INTERVAL: Duration = Duration::from_secs(1);

/// Held by every writer of the index or body files; remembers when the index was last synced.
struct Writer {
    last_durable: Instant,
    since_durable: u32,
}

/// Byte accounting per entry on top of its body: the index record (headers, key).
fn meta_cost(key: &str, encoded: &[u8]) -> u64 {
    (key.len() + encoded.len()) as u64
}

/// SHA-256 of a body.
pub(crate) fn body_hash(body: &[u8]) -> BodyHash {
    Sha256::digest(body).into()
}

struct Slot {
    entry: Arc<Entry>,
    cost: u64,
    /// Its access tick changed since the index last recorded it (listed in `dirty_access`).
    dirty: bool,
}

struct BodyRef {
    refs: u32,
    len: u64,
}

/// Bodies kept in memory, bounded in bytes, LRU.
struct MemoryBodies {
    map: HashMap<BodyHash, Bytes>,
    /// Sizes and recency; its total is the bytes held.
    order: LruModel<BodyHash>,
    max_bytes: u64,
    /// Larger bodies are not worth displacing many small hot ones.
    max_object: u64,
}

impl MemoryBodies {
    fn get(&mut self, hash: &BodyHash) -> Option<Bytes> {
        let body = self.map.get(hash)?.clone();
        self.order.touch(hash);
        Some(body)
    }

    fn insert(&mut self, hash: BodyHash, body: Bytes) {
        let len = body.len() as u64;
        if len > self.max_object || self.map.contains_key(&hash) {
            return;
        }
        self.map.insert(hash, body);
        for (victim, _) in self.order.access(hash, len, self.max_bytes) {
            self.map.remove(&victim);
        }
    }

    fn remove(&mut self, hash: &BodyHash) {
        self.map.remove(hash);
        self.order.remove(hash);
    }

    fn bytes(&self) -> u64 {
        self.order.bytes()
    }
}

struct State {
    entries: HashMap<String, Slot>,
    /// URI → the keys stored for it (all variants and Vary keys), for invalidation.
    by_uri: HashMap<String, Vec<String>>,
    /// Entries in order of use, each sized by its metadata cost (bodies are shared, so their
    /// bytes are counted in `bytes` once per body, not here).
    lru: LruModel<String>,
    /// primary key (URI + variant) → (Vary names of its entries, number of entries).
    vary: HashMap<String, (Vec<String>, usize)>,
    bodies: HashMap<BodyHash, BodyRef>,
    bytes: u64,
    memory: MemoryBodies,
    /// Access ticks not yet written to the index; flushed with the next write.
    /// Keys whose access tick the index has not recorded yet; a Vec plus the slot's flag so a
    /// hit costs no extra hashing.
    dirty_access: Vec<String>,
}

/// What removing an entry from the state left to do on disk.
#[derive(Default)]
struct Detached {
    keys: Vec<String>,
    freed_bodies: Vec<BodyHash>,
}

impl State {
    /// Remove `key` from the in-memory state; returns the body hash if it became unreferenced.
    fn detach(&mut self, key: &str, out: &mut Detached) {
        let Some(slot) = self.entries.remove(key) else {
            return;
        };
        self.lru.remove(&key.to_string());
        let uri = uri_of(key);
        if let Some(keys) = self.by_uri.get_mut(uri) {
            keys.retain(|k| k != key);
            if keys.is_empty() {
                self.by_uri.remove(uri);
            }
        }
        self.bytes -= slot.cost;
        if let Some(primary) = primary_of(key) {
            if let Some((_, count)) = self.vary.get_mut(primary) {
                *count -= 1;
                if *count == 0 {
                    self.vary.remove(primary);
                }
            }
        }
        let hash = slot.entry.body_hash;
        if let Some(body) = self.bodies.get_mut(&hash) {
            body.refs -= 1;
            if body.refs == 0 {
                self.bytes -= body.len;
                self.bodies.remove(&hash);
                self.memory.remove(&hash);
                out.freed_bodies.push(hash);
            }
        }
        out.keys.push(key.to_string());
    }

    /// Insert an entry (the key must be absent); returns the entry's total cost added.
    fn attach(
        &mut self,
        key: &str,
        primary: &str,
        entry: Arc<Entry>,
        cost: u64,
        tick: Option<u64>,
    ) {
        let hash = entry.body_hash;
        let body = self.bodies.entry(hash).or_insert(BodyRef {
            refs: 0,
            len: entry.body_len,
        });
        if body.refs == 0 {
            self.bytes += body.len;
        }
        body.refs += 1;
        self.bytes += cost;
        let vary = self
            .vary
            .entry(primary.to_string())
            .or_insert_with(|| (entry.vary.clone(), 0));
        vary.1 += 1;
        self.entries.insert(
            key.to_string(),
            Slot {
                entry,
                cost,
                dirty: tick.is_none(),
            },
        );
        self.by_uri
            .entry(uri_of(key).to_string())
            .or_default()
            .push(key.to_string());
        let key = key.to_string();
        match tick {
            Some(t) => self.lru.place(key, cost, t),
            None => {
                self.lru.insert(key.clone(), cost);
                self.dirty_access.push(key);
            }
        }
    }

    /// The access ticks to record in the index, clearing the dirty marks.
    fn take_dirty(&mut self) -> HashMap<String, u64> {
        let mut ticks = HashMap::with_capacity(self.dirty_access.len());
        for key in std::mem::take(&mut self.dirty_access) {
            // Entries removed since their access need no record.
            if let Some(slot) = self.entries.get_mut(&key) {
                slot.dirty = false;
                if let Some(tick) = self.lru.tick_of(&key) {
                    ticks.insert(key, tick);
                }
            }
        }
        ticks
    }

    /// Evict least recently used entries until the byte bound holds.
    fn evict_to(&mut self, max_bytes: u64, out: &mut Detached) -> u64 {
        let mut evicted = 0;
        while self.bytes > max_bytes {
            let Some(victim) = self.lru.oldest().map(|(k, _)| k.clone()) else {
                break;
            };
            self.detach(&victim, out);
            evicted += 1;
        }
        evicted
    }

    /// Keys starting with `prefix`, which must begin with a URI and a NUL.
    fn keys_with_prefix(&self, prefix: &str) -> Vec<String> {
        self.by_uri
            .get(uri_of(prefix))
            .map(|keys| {
                keys.iter()
                    .filter(|k| k.starts_with(prefix))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// The URI part of a key (everything before the first NUL).
fn uri_of(key: &str) -> &str {
    key.split('\0').next().unwrap_or(key)
}

/// The primary part of a full key (everything before the last NUL).
fn primary_of(key: &str) -> Option<&str> {
    key.rsplit_once('\0').map(|(p, _)| p)
}

/// Join a primary key and a secondary key.
pub(crate) fn full_key(primary: &str, secondary: &str) -> String {
    format!("{primary}\0{secondary}")
}

/// The on-disk cache store: a redb index of entries, bodies as files named by their SHA-256,
/// hot small bodies in memory. Implements [`Storage`]; every method but
/// [`Storage::lookup_in_memory`] and [`Storage::stats`] may do file or index I/O.
pub struct DiskStore {
    bodies_dir: PathBuf,
    tmp_dir: PathBuf,
    db: Database,
    max_bytes: u64,
    state: Mutex<State>,
    write_lock: Mutex<Writer>,
    evictions: AtomicU64,
    tmp_counter: AtomicU64,
}

/// A lock that survives a panicked holder: the state is plain data and stays consistent per
/// operation, so continuing beats poisoning the whole proxy.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl DiskStore {
    /// Open (or create) the store in `dir`, repair it, and enforce the bound of `max_bytes`;
    /// keep up to `memory_bytes` of bodies in memory. `heuristic` is the one entries are
    /// decoded with (their freshness lifetimes are precomputed).
    pub fn open(
        dir: &Path,
        max_bytes: u64,
        memory_bytes: u64,
        heuristic: HeuristicConfig,
    ) -> Result<DiskStore, CacheError> {
        let bodies_dir = dir.join("bodies");
        let tmp_dir = dir.join("tmp");
        fs::create_dir_all(&bodies_dir).map_err(|e| CacheError::io(&bodies_dir, e))?;
        // Anything left in tmp/ is a write that never finished.
        if tmp_dir.exists() {
            fs::remove_dir_all(&tmp_dir).map_err(|e| CacheError::io(&tmp_dir, e))?;
        }
        fs::create_dir_all(&tmp_dir).map_err(|e| CacheError::io(&tmp_dir, e))?;
        let db_path = dir.join("index.redb");
        let db = open_index(&db_path)?;

        let memory = MemoryBodies {
            map: HashMap::new(),
            order: LruModel::new(),
            max_bytes: memory_bytes,
            max_object: (memory_bytes / 16).min(4 << 20),
        };
        let mut state = State {
            entries: HashMap::new(),
            by_uri: HashMap::new(),
            lru: LruModel::new(),
            vary: HashMap::new(),
            bodies: HashMap::new(),
            bytes: 0,
            memory,
            dirty_access: Vec::new(),
        };
        let store_dirs = (bodies_dir.clone(), tmp_dir.clone());
        let dropped = load_index(&db, &store_dirs.0, &heuristic, &mut state)?;
        remove_orphans(&bodies_dir, &state.bodies);

        let mut out = Detached {
            keys: dropped,
            freed_bodies: Vec::new(),
        };
        let evicted = state.evict_to(max_bytes, &mut out);
        let store = DiskStore {
            bodies_dir,
            tmp_dir,
            db,
            max_bytes,
            state: Mutex::new(state),
            write_lock: Mutex::new(Writer {
                last_durable: Instant::now(),
                since_durable: 0,
            }),
            evictions: AtomicU64::new(evicted),
            tmp_counter: AtomicU64::new(0),
        };
        if !out.keys.is_empty() {
            tracing::info!(
                dropped = out.keys.len(),
                evicted,
                "cache index repaired on open"
            );
            store.commit(
                &mut lock(&store.write_lock),
                &[],
                &out.keys,
                HashMap::new(),
                true,
            )?;
            store.delete_bodies(&out.freed_bodies);
        }
        Ok(store)
    }

    fn body_path(&self, hash: &BodyHash) -> PathBuf {
        body_path(&self.bodies_dir, hash)
    }

    /// The entry for `primary` whose secondary key `secondary` computes from the stored Vary
    /// names, marked used, and its body when a copy is in memory. Memory only.
    fn probe(
        &self,
        primary: &str,
        secondary: &dyn Fn(&[String]) -> String,
    ) -> Option<(String, Arc<Entry>, Option<Bytes>)> {
        let mut st = lock(&self.state);
        let names = &st.vary.get(primary)?.0;
        let key = full_key(primary, &secondary(names));
        let slot = st.entries.get_mut(&key)?;
        let entry = slot.entry.clone();
        let was_dirty = std::mem::replace(&mut slot.dirty, true);
        st.lru.touch(&key);
        if !was_dirty {
            st.dirty_access.push(key.clone());
        }
        let body = st.memory.get(&entry.body_hash);
        Some((key, entry, body))
    }

    /// Read a body file and check it against its hash; `None` when missing or damaged.
    fn read_body(&self, hash: &BodyHash) -> Option<Bytes> {
        let path = self.body_path(hash);
        match fs::read(&path) {
            Ok(bytes) if body_hash(&bytes) == *hash => Some(Bytes::from(bytes)),
            Ok(_) => {
                tracing::warn!(path = %path.display(), "cache body does not match its hash; dropped");
                None
            }
            // Usually evicted between the index look-up and the read (then dropping is a
            // no-op); otherwise deleted behind our back, and the entry must go.
            Err(e) if e.kind() == ErrorKind::NotFound => None,
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cache body unreadable; dropped");
                None
            }
        }
    }

    /// Keep a copy of a body just read in memory, unless it was evicted meanwhile (the copy
    /// would outlive its entries).
    fn remember(&self, hash: &BodyHash, body: &Bytes) {
        let mut st = lock(&self.state);
        if st.bodies.contains_key(hash) {
            st.memory.insert(*hash, body.clone());
        }
    }

    /// Find the entry for `primary` whose secondary key `secondary` computes from the stored
    /// Vary names, and its body. A damaged body file drops the entry and reads as a miss.
    pub(crate) fn get(
        &self,
        primary: &str,
        secondary: &dyn Fn(&[String]) -> String,
    ) -> Option<(String, Arc<Entry>, Bytes)> {
        let (key, entry, body) = self.probe(primary, secondary)?;
        if let Some(body) = body {
            return Some((key, entry, body));
        }
        match self.read_body(&entry.body_hash) {
            Some(body) => {
                self.remember(&entry.body_hash, &body);
                Some((key, entry, body))
            }
            None => {
                if let Err(e) = self.remove_if(&key, Some(entry.body_hash)) {
                    tracing::warn!(error = %e, "dropping a damaged cache entry failed");
                }
                None
            }
        }
    }

    /// A stored body by its SHA-256: from memory, else its file (checked against the hash).
    pub(crate) fn body(&self, hash: &BodyHash) -> Option<Bytes> {
        {
            let mut st = lock(&self.state);
            if let Some(body) = st.memory.get(hash) {
                return Some(body);
            }
            if !st.bodies.contains_key(hash) {
                return None;
            }
        }
        let body = self.read_body(hash)?;
        self.remember(hash, &body);
        Some(body)
    }

    /// Store `entry` with `body` under `primary` + `secondary`, replacing an older entry and, if
    /// the Vary names changed, every entry of the same primary key; evict to the bound.
    pub(crate) fn put(
        &self,
        primary: &str,
        secondary: &str,
        entry: Entry,
        body: &[u8],
    ) -> Result<(), CacheError> {
        let key = full_key(primary, secondary);
        let encoded = entry.encode();
        let cost = meta_cost(&key, &encoded);
        let hash = entry.body_hash;
        let entry = Arc::new(entry);

        let mut writer = lock(&self.write_lock);
        let have_body = lock(&self.state).bodies.contains_key(&hash);
        if !have_body {
            self.write_body(&hash, body)?;
        }
        let (detached, dirty, evicted, present) = {
            let mut st = lock(&self.state);
            let mut out = Detached::default();
            let vary_changed = st
                .vary
                .get(primary)
                .is_some_and(|(names, _)| *names != entry.vary);
            if vary_changed {
                for k in st.keys_with_prefix(&format!("{primary}\0")) {
                    st.detach(&k, &mut out);
                }
            } else {
                st.detach(&key, &mut out);
            }
            st.attach(&key, primary, entry.clone(), cost, None);
            if body.len() as u64 <= st.memory.max_object {
                st.memory.insert(hash, Bytes::copy_from_slice(body));
            }
            let evicted = st.evict_to(self.max_bytes, &mut out);
            // Only when the entry alone exceeds the bound is it evicted right away.
            let present = st.entries.contains_key(&key);
            // A body freed by the replaced entry may be the new entry's own.
            out.freed_bodies.retain(|h| !st.bodies.contains_key(h));
            (out, st.take_dirty(), evicted, present)
        };
        self.evictions.fetch_add(evicted, Ordering::Relaxed);
        // A replaced key that is present again must stay in the index.
        let removed: Vec<String> = detached
            .keys
            .iter()
            .filter(|k| !(present && **k == key))
            .cloned()
            .collect();
        let inserted = if present {
            vec![(key.clone(), encoded)]
        } else {
            Vec::new()
        };
        if let Err(e) = self.commit(&mut writer, &inserted, &removed, dirty, false) {
            // Keep memory and index in agreement: forget the new entry too.
            let mut out = Detached::default();
            lock(&self.state).detach(&key, &mut out);
            return Err(e);
        }
        self.delete_bodies(&detached.freed_bodies);
        Ok(())
    }

    /// Replace the metadata of an existing entry whose body is unchanged (after a 304).
    /// Returns false when the entry is gone (evicted or invalidated meanwhile).
    pub(crate) fn replace_meta(&self, key: &str, entry: Entry) -> Result<bool, CacheError> {
        let encoded = entry.encode();
        let cost = meta_cost(key, &encoded);
        let mut writer = lock(&self.write_lock);
        let (out, dirty, evicted, present) = {
            let mut st = lock(&self.state);
            let Some(slot) = st.entries.get_mut(key) else {
                return Ok(false);
            };
            if slot.entry.body_hash != entry.body_hash {
                return Ok(false);
            }
            let old_cost = slot.cost;
            slot.entry = Arc::new(entry);
            slot.cost = cost;
            let was_dirty = std::mem::replace(&mut slot.dirty, true);
            st.bytes = st.bytes - old_cost + cost;
            st.lru.insert(key.to_string(), cost);
            if !was_dirty {
                st.dirty_access.push(key.to_string());
            }
            // Longer headers can push the total over the bound.
            let mut out = Detached::default();
            let evicted = st.evict_to(self.max_bytes, &mut out);
            let present = st.entries.contains_key(key);
            (out, st.take_dirty(), evicted, present)
        };
        self.evictions.fetch_add(evicted, Ordering::Relaxed);
        let inserted = if present {
            vec![(key.to_string(), encoded)]
        } else {
            Vec::new()
        };
        self.commit(&mut writer, &inserted, &out.keys, dirty, false)?;
        self.delete_bodies(&out.freed_bodies);
        Ok(present)
    }

    /// Remove every entry whose key starts with `prefix`; returns how many.
    pub(crate) fn remove_prefix(&self, prefix: &str) -> Result<usize, CacheError> {
        let mut writer = lock(&self.write_lock);
        let out = {
            let mut st = lock(&self.state);
            let mut out = Detached::default();
            for k in st.keys_with_prefix(prefix) {
                st.detach(&k, &mut out);
            }
            out
        };
        if out.keys.is_empty() {
            return Ok(0);
        }
        self.commit(&mut writer, &[], &out.keys, HashMap::new(), false)?;
        self.delete_bodies(&out.freed_bodies);
        Ok(out.keys.len())
    }

    /// Remove `key` if it still refers to `hash` (or unconditionally when `hash` is None);
    /// returns how many entries went (0 or 1).
    pub(crate) fn remove_if(&self, key: &str, hash: Option<BodyHash>) -> Result<usize, CacheError> {
        let mut writer = lock(&self.write_lock);
        let out = {
            let mut st = lock(&self.state);
            let current = st.entries.get(key).map(|s| s.entry.body_hash);
            let mut out = Detached::default();
            if current.is_some() && (hash.is_none() || current == hash) {
                st.detach(key, &mut out);
            }
            out
        };
        if out.keys.is_empty() {
            return Ok(0);
        }
        self.commit(&mut writer, &[], &out.keys, HashMap::new(), false)?;
        self.delete_bodies(&out.freed_bodies);
        Ok(out.keys.len())
    }

    /// Write pending access ticks to the index (also done with every store, and on drop).
    pub(crate) fn flush(&self) -> Result<(), CacheError> {
        let mut writer = lock(&self.write_lock);
        let dirty = lock(&self.state).take_dirty();
        if dirty.is_empty() && writer.since_durable == 0 {
            return Ok(());
        }
        self.commit(&mut writer, &[], &[], dirty, true)
    }

    /// Current sizes.
    pub(crate) fn stats(&self) -> StorageStats {
        let st = lock(&self.state);
        StorageStats {
            entries: st.entries.len() as u64,
            bytes: st.bytes,
            evictions: self.evictions.load(Ordering::Relaxed),
            memory_bytes: st.memory.bytes(),
        }
    }

    /// Write a body atomically: a temp file renamed into place.
    fn write_body(&self, hash: &BodyHash, body: &[u8]) -> Result<(), CacheError> {
        let path = self.body_path(hash);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).map_err(|e| CacheError::io(parent, e))?;
        }
        let n = self.tmp_counter.fetch_add(1, Ordering::Relaxed);
        let tmp = self.tmp_dir.join(format!("{}.{n}", hex::encode(hash)));
        let result = fs::File::create(&tmp)
            .and_then(|mut f| f.write_all(body))
            .and_then(|()| fs::rename(&tmp, &path));
        if let Err(e) = result {
            let _ = fs::remove_file(&tmp);
            return Err(CacheError::io(&path, e));
        }
        Ok(())
    }

    fn delete_bodies(&self, hashes: &[BodyHash]) {
        for hash in hashes {
            let path = self.body_path(hash);
            if let Err(e) = fs::remove_file(&path) {
                if e.kind() != ErrorKind::NotFound {
                    tracing::warn!(path = %path.display(), error = %e, "cannot delete evicted body");
                }
            }
        }
    }

    /// One index transaction: upserts, removals and access ticks; durable when `sync` or when
    /// the last durable commit is too old.
    fn commit(
        &self,
        writer: &mut Writer,
        inserted: &[(String, Vec<u8>)],
        removed: &[String],
        access: HashMap<String, u64>,
        sync: bool,
    ) -> Result<(), CacheError> {
        let durable = sync
            || writer.since_durable + 1 >= DURABLE_EVERY
            || writer.last_durable.elapsed() >= DURABLE_INTERVAL;
        let mut tx = self.db.begin_write().map_err(index_err)?;
        tx.set_durability(if durable {
            Durability::Immediate
        } else {
            Durability::None
        });
        {
            let mut entries = tx.open_table(ENTRIES).map_err(index_err)?;
            let mut ticks = tx.open_table(ACCESS).map_err(index_err)?;
            for key in removed {
                entries.remove(key.as_str()).map_err(index_err)?;
                ticks.remove(key.as_str()).map_err(index_err)?;
            }
            for (key, value) in inserted {
                entries
                    .insert(key.as_str(), value.as_slice())
                    .map_err(index_err)?;
            }
            for (key, tick) in &access {
                // Ticks of entries removed since the access are not worth keeping.
                if entries.get(key.as_str()).map_err(index_err)?.is_some() {
                    ticks.insert(key.as_str(), *tick).map_err(index_err)?;
                }
            }
        }
        tx.commit().map_err(index_err)?;
        if durable {
            writer.last_durable = Instant::now();
            writer.since_durable = 0;
        } else {
            writer.since_durable += 1;
        }
        Ok(())
    }
}

impl Drop for DiskStore {
    fn drop(&mut self) {
        if let Err(e) = self.flush() {
            tracing::warn!(error = %e, "cache access order not saved");
        }
    }
}

/// Open the index; a damaged or outdated one is moved aside (`index.redb.damaged`) and a new
/// one started: losing a cache's contents beats a proxy that will not start. A database open
/// elsewhere, or an I/O failure such as a permission error, is still an error.
fn open_index(path: &Path) -> Result<Database, CacheError> {
    let err = match Database::create(path) {
        Ok(db) => return Ok(db),
        Err(e) => e,
    };
    let damaged = match &err {
        DatabaseError::DatabaseAlreadyOpen => false,
        DatabaseError::Storage(StorageError::Io(io)) => {
            matches!(io.kind(), ErrorKind::UnexpectedEof | ErrorKind::InvalidData)
        }
        _ => true,
    };
    if !damaged {
        return Err(index_err(err));
    }
    let aside = path.with_extension("redb.damaged");
    tracing::warn!(path = %path.display(), error = %err, "cache index damaged; starting empty");
    fs::rename(path, &aside).map_err(|e| CacheError::io(path, e))?;
    Database::create(path).map_err(index_err)
}

fn body_path(bodies_dir: &Path, hash: &BodyHash) -> PathBuf {
    let name = hex::encode(hash);
    bodies_dir.join(&name[..2]).join(name)
}

/// Load the index into `state`, dropping entries that cannot be decoded or whose body file is
/// missing or of the wrong length. Returns the dropped keys.
fn load_index(
    db: &Database,
    bodies_dir: &Path,
    heuristic: &HeuristicConfig,
    state: &mut State,
) -> Result<Vec<String>, CacheError> {
    let tx = db.begin_read().map_err(index_err)?;
    let entries = match tx.open_table(ENTRIES) {
        Ok(t) => t,
        // A fresh database has no tables yet.
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
        Err(e) => return Err(index_err(e)),
    };
    let mut ticks: HashMap<String, u64> = HashMap::new();
    if let Ok(access) = tx.open_table(ACCESS) {
        for row in access.iter().map_err(index_err)? {
            let (k, v) = row.map_err(index_err)?;
            ticks.insert(k.value().to_string(), v.value());
        }
    }
    let mut dropped = Vec::new();
    let mut loaded: Vec<(String, Arc<Entry>, u64, u64)> = Vec::new();
    let mut checked: HashMap<BodyHash, bool> = HashMap::new();
    for row in entries.iter().map_err(index_err)? {
        let (k, v) = row.map_err(index_err)?;
        let key = k.value().to_string();
        let Some(entry) = Entry::decode(v.value(), heuristic) else {
            dropped.push(key);
            continue;
        };
        let ok = *checked.entry(entry.body_hash).or_insert_with(|| {
            fs::metadata(body_path(bodies_dir, &entry.body_hash))
                .is_ok_and(|m| m.is_file() && m.len() == entry.body_len)
        });
        if !ok || primary_of(&key).is_none() {
            dropped.push(key);
            continue;
        }
        let cost = meta_cost(&key, v.value());
        let tick = ticks.get(&key).copied().unwrap_or(0);
        loaded.push((key, Arc::new(entry), cost, tick));
    }
    // Oldest first; ticks made unique (a missing or repeated tick would corrupt the order)
    // while never moving below the recorded value, so later records stay comparable.
    loaded.sort_by(|a, b| a.3.cmp(&b.3).then_with(|| a.0.cmp(&b.0)));
    let mut next = 0u64;
    for (key, entry, cost, recorded) in loaded {
        let tick = recorded.max(next);
        next = tick + 1;
        if let Some(primary) = primary_of(&key) {
            let primary = primary.to_string();
            // Entries of one primary key must agree on Vary; a disagreeing one is unreachable.
            if state
                .vary
                .get(&primary)
                .is_some_and(|(names, _)| *names != entry.vary)
            {
                dropped.push(key);
                continue;
            }
            state.attach(&key, &primary, entry, cost, Some(tick));
        }
    }
    Ok(dropped)
}

/// Delete body files no entry refers to, and anything in `bodies/` that is not a body.
fn remove_orphans(bodies_dir: &Path, referenced: &HashMap<BodyHash, BodyRef>) {
    let wanted: HashSet<String> = referenced.keys().map(hex::encode).collect();
    let Ok(fans) = fs::read_dir(bodies_dir) else {
        return;
    };
    for fan in fans.flatten() {
        let Ok(files) = fs::read_dir(fan.path()) else {
            continue;
        };
        for file in files.flatten() {
            let name = file.file_name().to_string_lossy().into_owned();
            if !wanted.contains(&name) {
                let path = file.path();
                tracing::debug!(path = %path.display(), "removing orphan cache body");
                if let Err(e) = fs::remove_file(&path) {
                    tracing::warn!(path = %path.display(), error = %e, "cannot remove orphan body");
                }
            }
        }
    }
}

impl Storage for DiskStore {
    fn lookup(&self, primary: &str, secondary: &dyn Fn(&[String]) -> String) -> Option<Stored> {
        self.get(primary, secondary)
            .map(|(key, meta, body)| Stored { key, meta, body })
    }

    /// Pure memory: the index is held in memory whole, so an absent key is known without I/O;
    /// a present one is answered when its body is one of the in-memory copies.
    fn lookup_in_memory(
        &self,
        primary: &str,
        secondary: &dyn Fn(&[String]) -> String,
    ) -> MemoryLookup {
        match self.probe(primary, secondary) {
            None => MemoryLookup::Absent,
            Some((key, meta, Some(body))) => MemoryLookup::Hit(Stored { key, meta, body }),
            Some((_, _, None)) => MemoryLookup::NotInMemory,
        }
    }

    fn insert(
        &self,
        primary: &str,
        secondary: &str,
        meta: Entry,
        body: &[u8],
    ) -> Result<(), CacheError> {
        self.put(primary, secondary, meta, body)
    }

    fn update_meta(&self, key: &str, meta: Entry) -> Result<bool, CacheError> {
        self.replace_meta(key, meta)
    }

    fn purge(&self, target: Purge<'_>) -> Result<usize, CacheError> {
        match target {
            Purge::Prefix(prefix) => self.remove_prefix(prefix),
            Purge::Key { key, if_body } => self.remove_if(key, if_body),
        }
    }

    fn body_by_hash(&self, hash: &BodyHash) -> Option<Bytes> {
        self.body(hash)
    }

    fn flush(&self) -> Result<(), CacheError> {
        DiskStore::flush(self)
    }

    fn stats(&self) -> StorageStats {
        DiskStore::stats(self)
    }
}
