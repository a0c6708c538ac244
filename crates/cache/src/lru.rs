//! The LRU model: keys with sizes in order of last use, and what a byte bound evicts.
//!
//! Pure (no I/O, no clock): [`LruModel::touch`] moves a key to the newest end,
//! [`LruModel::insert`] adds or resizes one, [`LruModel::evict_to`] removes least recently used
//! keys until the total size is within a bound. The disk store keeps both its entries and its
//! in-memory body copies in one of these; the edge can keep one per client to model what that
//! client's cache still holds ([`LruModel::access`] is a client using a response).
//!
//! O(log n) per operation with a tick-ordered `BTreeMap`; the ticks are exposed so an order can
//! be persisted and restored ([`LruModel::tick_of`], [`LruModel::place`]).
//!
//! ```
//! use webpep_cache::lru::LruModel;
//!
//! // A client cache of 100 bytes.
//! let mut client = LruModel::new();
//! assert!(client.access("a", 40, 100).is_empty());
//! assert!(client.access("b", 40, 100).is_empty());
//! client.touch(&"a"); // "b" is now the least recently used
//! assert_eq!(client.access("c", 40, 100), vec![("b", 40)]);
//! assert!(client.contains(&"a") && client.contains(&"c"));
//! assert_eq!(client.bytes(), 80);
//! ```

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;

/// Keys with sizes, ordered by last use.
#[derive(Debug, Clone)]
pub struct LruModel<K> {
    /// key → (tick of last use, size).
    by_key: HashMap<K, (u64, u64)>,
    by_tick: BTreeMap<u64, K>,
    next_tick: u64,
    bytes: u64,
}

impl<K: Hash + Eq + Clone> Default for LruModel<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Hash + Eq + Clone> LruModel<K> {
    /// An empty model.
    pub fn new() -> Self {
        LruModel {
            by_key: HashMap::new(),
            by_tick: BTreeMap::new(),
            next_tick: 0,
            bytes: 0,
        }
    }

    /// Add `key` of `size` as used now, or, if present, set its size and mark it used now.
    /// Returns its new tick. Evicts nothing: see [`LruModel::evict_to`] and
    /// [`LruModel::access`].
    pub fn insert(&mut self, key: K, size: u64) -> u64 {
        let tick = self.next_tick;
        self.place(key, size, tick);
        tick
    }

    /// Mark `key` as used now; false (and nothing changes) when it is absent.
    pub fn touch(&mut self, key: &K) -> bool {
        let Some(&(_, size)) = self.by_key.get(key) else {
            return false;
        };
        let tick = self.next_tick;
        self.move_to(key, size, tick);
        true
    }

    /// A client using `key` of `size` (a hit touches it, a miss adds it), then the least
    /// recently used keys evicted until the total is within `max_bytes`, oldest first. A key
    /// larger than the bound is evicted itself.
    pub fn access(&mut self, key: K, size: u64, max_bytes: u64) -> Vec<(K, u64)> {
        self.insert(key, size);
        self.evict_to(max_bytes)
    }

    /// Put `key` of `size` at a given tick (restoring a persisted order). Two keys never share
    /// a tick: a taken one moves the key to the next free tick.
    pub fn place(&mut self, key: K, size: u64, tick: u64) {
        let tick = if self.by_tick.get(&tick).is_some_and(|k| *k != key) {
            self.next_tick.max(tick + 1)
        } else {
            tick
        };
        self.move_to(&key, size, tick);
        if !self.by_tick.contains_key(&tick) {
            // `move_to` found no such key: a new one.
            self.by_key.insert(key.clone(), (tick, size));
            self.by_tick.insert(tick, key);
            self.bytes += size;
        }
        self.next_tick = self.next_tick.max(tick + 1);
    }

    /// Move an existing key to `tick` with `size`; nothing when it is absent.
    fn move_to(&mut self, key: &K, size: u64, tick: u64) {
        // On the hit path the key is known: move the owned key instead of cloning it.
        if let Some(slot) = self.by_key.get_mut(key) {
            let owned = self.by_tick.remove(&slot.0).unwrap_or_else(|| key.clone());
            self.bytes = self.bytes - slot.1 + size;
            *slot = (tick, size);
            self.by_tick.insert(tick, owned);
            self.next_tick = self.next_tick.max(tick + 1);
        }
    }

    /// Forget `key`; returns its size.
    pub fn remove(&mut self, key: &K) -> Option<u64> {
        let (tick, size) = self.by_key.remove(key)?;
        self.by_tick.remove(&tick);
        self.bytes -= size;
        Some(size)
    }

    /// The least recently used key and its size.
    pub fn oldest(&self) -> Option<(&K, u64)> {
        let key = self.by_tick.values().next()?;
        Some((key, self.by_key[key].1))
    }

    /// Remove and return the least recently used key and its size.
    pub fn pop_oldest(&mut self) -> Option<(K, u64)> {
        let (_, key) = self.by_tick.pop_first()?;
        let (_, size) = self.by_key.remove(&key)?;
        self.bytes -= size;
        Some((key, size))
    }

    /// Evict least recently used keys until the total size is within `max_bytes`; returns
    /// them, oldest first.
    pub fn evict_to(&mut self, max_bytes: u64) -> Vec<(K, u64)> {
        let mut out = Vec::new();
        while self.bytes > max_bytes {
            match self.pop_oldest() {
                Some(victim) => out.push(victim),
                None => break,
            }
        }
        out
    }

    /// Whether `key` is held.
    pub fn contains(&self, key: &K) -> bool {
        self.by_key.contains_key(key)
    }

    /// The size of `key`.
    pub fn size_of(&self, key: &K) -> Option<u64> {
        self.by_key.get(key).map(|&(_, s)| s)
    }

    /// The tick of `key`'s last use (larger is more recent).
    pub fn tick_of(&self, key: &K) -> Option<u64> {
        self.by_key.get(key).map(|&(t, _)| t)
    }

    /// The sum of the sizes held.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// How many keys are held.
    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// The keys, least recently used first.
    pub fn iter_oldest_first(&self) -> impl Iterator<Item = (&K, u64)> {
        self.by_tick.values().map(|k| (k, self.by_key[k].1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn touch_moves_to_newest() {
        let mut lru = LruModel::new();
        lru.insert("a", 1);
        lru.insert("b", 1);
        lru.insert("c", 1);
        assert_eq!(lru.oldest(), Some((&"a", 1)));
        assert!(lru.touch(&"a"));
        assert_eq!(lru.oldest(), Some((&"b", 1)));
        lru.remove(&"b");
        assert_eq!(lru.oldest(), Some((&"c", 1)));
        assert_eq!(lru.len(), 2);
        assert!(!lru.touch(&"zz"));
        assert_eq!(lru.len(), 2);
    }

    #[test]
    fn colliding_ticks_keep_every_key() {
        let mut lru = LruModel::new();
        lru.place("a", 1, 5);
        lru.place("b", 2, 5);
        assert_eq!(lru.len(), 2);
        assert_eq!(lru.bytes(), 3);
        assert_eq!(lru.oldest(), Some((&"a", 1)));
        lru.remove(&"a");
        assert_eq!(lru.oldest(), Some((&"b", 2)));
    }

    #[test]
    fn placed_ticks_advance_the_clock() {
        let mut lru = LruModel::new();
        lru.place("old", 1, 10);
        let t = lru.insert("new", 1);
        assert!(t > 10);
        assert_eq!(lru.oldest(), Some((&"old", 1)));
    }

    #[test]
    fn sizes_are_summed_and_replaced() {
        let mut lru = LruModel::new();
        lru.insert("a", 10);
        lru.insert("b", 20);
        assert_eq!(lru.bytes(), 30);
        lru.insert("a", 5);
        assert_eq!(lru.bytes(), 25);
        assert_eq!(lru.size_of(&"a"), Some(5));
        assert_eq!(lru.oldest(), Some((&"b", 20)));
        assert_eq!(lru.remove(&"b"), Some(20));
        assert_eq!(lru.bytes(), 5);
        assert_eq!(lru.remove(&"b"), None);
    }

    #[test]
    fn evict_to_removes_least_recently_used_first() {
        let mut lru = LruModel::new();
        for (k, s) in [("a", 30), ("b", 30), ("c", 30), ("d", 30)] {
            lru.insert(k, s);
        }
        lru.touch(&"a");
        assert_eq!(lru.evict_to(60), vec![("b", 30), ("c", 30)]);
        let left: Vec<_> = lru.iter_oldest_first().collect();
        assert_eq!(left, vec![(&"d", 30), (&"a", 30)]);
        assert!(lru.evict_to(60).is_empty());
    }

    #[test]
    fn access_of_an_oversized_key_evicts_it_and_everything_older() {
        let mut lru = LruModel::new();
        assert!(lru.access("a", 10, 100).is_empty());
        assert_eq!(lru.access("huge", 150, 100), vec![("a", 10), ("huge", 150)]);
        assert!(lru.is_empty());
        assert_eq!(lru.bytes(), 0);
    }

    #[test]
    fn access_hit_keeps_the_key() {
        let mut lru = LruModel::new();
        lru.access(1u32, 50, 100);
        lru.access(2, 50, 100);
        // A hit on 1 makes 2 the victim of the next miss.
        assert!(lru.access(1, 50, 100).is_empty());
        assert_eq!(lru.access(3, 50, 100), vec![(2, 50)]);
    }

    /// The model against a naive list: same evictions for any sequence of accesses.
    #[test]
    fn matches_a_naive_lru() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut model = LruModel::new();
        let mut naive: Vec<(u64, u64)> = Vec::new(); // oldest first
        for _ in 0..5000 {
            let key = next() % 40;
            let size = 1 + next() % 30;
            let got = model.access(key, size, 200);
            naive.retain(|(k, _)| *k != key);
            naive.push((key, size));
            let mut want = Vec::new();
            while naive.iter().map(|(_, s)| s).sum::<u64>() > 200 {
                want.push(naive.remove(0));
            }
            assert_eq!(got, want);
            assert_eq!(model.bytes(), naive.iter().map(|(_, s)| s).sum::<u64>());
        }
    }
}
