//! A recency order over keys: `touch` moves a key to the newest end, `oldest` names the next
//! eviction victim. O(log n) per operation with a tick-ordered BTreeMap; the ticks are exposed so
//! the disk store can persist the order across a restart.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;

/// Keys ordered by last use.
#[derive(Debug)]
pub(crate) struct LruOrder<K> {
    by_key: HashMap<K, u64>,
    by_tick: BTreeMap<u64, K>,
    next_tick: u64,
}

impl<K: Hash + Eq + Clone> LruOrder<K> {
    /// An empty order whose first tick is `first_tick` (after the ticks of a reopened store).
    pub(crate) fn new(first_tick: u64) -> Self {
        LruOrder {
            by_key: HashMap::new(),
            by_tick: BTreeMap::new(),
            next_tick: first_tick,
        }
    }

    /// Mark `key` as used now (inserting it if new); returns its new tick.
    pub(crate) fn touch(&mut self, key: &K) -> u64 {
        let tick = self.next_tick;
        self.next_tick += 1;
        self.place(key, tick);
        tick
    }

    /// Put `key` at a given tick (used when reloading a persisted order).
    pub(crate) fn place(&mut self, key: &K, tick: u64) {
        // Two keys on one tick would lose one from the order (and from eviction): move along.
        let tick = if self.by_tick.get(&tick).is_some_and(|k| k != key) {
            self.next_tick.max(tick + 1)
        } else {
            tick
        };
        // On the hit path the key is known: move the owned key instead of cloning it twice.
        match self.by_key.get_mut(key) {
            Some(old) => {
                let owned = self.by_tick.remove(old).unwrap_or_else(|| key.clone());
                *old = tick;
                self.by_tick.insert(tick, owned);
            }
            None => {
                self.by_key.insert(key.clone(), tick);
                self.by_tick.insert(tick, key.clone());
            }
        }
        self.next_tick = self.next_tick.max(tick + 1);
    }

    /// The tick of `key`'s last use.
    pub(crate) fn tick_of(&self, key: &K) -> Option<u64> {
        self.by_key.get(key).copied()
    }

    /// Forget `key`.
    pub(crate) fn remove(&mut self, key: &K) {
        if let Some(tick) = self.by_key.remove(key) {
            self.by_tick.remove(&tick);
        }
    }

    /// The least recently used key.
    pub(crate) fn oldest(&self) -> Option<&K> {
        self.by_tick.values().next()
    }

    /// How many keys are ordered.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.by_key.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn touch_moves_to_newest() {
        let mut lru = LruOrder::new(0);
        lru.touch(&"a");
        lru.touch(&"b");
        lru.touch(&"c");
        assert_eq!(lru.oldest(), Some(&"a"));
        lru.touch(&"a");
        assert_eq!(lru.oldest(), Some(&"b"));
        lru.remove(&"b");
        assert_eq!(lru.oldest(), Some(&"c"));
        assert_eq!(lru.len(), 2);
    }

    #[test]
    fn colliding_ticks_keep_every_key() {
        let mut lru = LruOrder::new(0);
        lru.place(&"a", 5);
        lru.place(&"b", 5);
        assert_eq!(lru.len(), 2);
        assert_eq!(lru.oldest(), Some(&"a"));
        lru.remove(&"a");
        assert_eq!(lru.oldest(), Some(&"b"));
    }

    #[test]
    fn placed_ticks_advance_the_clock() {
        let mut lru = LruOrder::new(0);
        lru.place(&"old", 10);
        let t = lru.touch(&"new");
        assert!(t > 10);
        assert_eq!(lru.oldest(), Some(&"old"));
    }
}
