//! The best value seen over a sliding window of numbered slots (time slices or rounds).
//!
//! Bounded: one entry per slot, and only the last `slots` slots are kept, so a filter fed on
//! every acknowledgement of a fast connection stays a handful of values.

use std::collections::VecDeque;

/// Keeps, per slot, the best value (by `better`), and answers the best over the last `slots`
/// slots up to the newest one seen.
#[derive(Clone, Debug)]
pub struct Windowed<T> {
    slots: u64,
    better: fn(&T, &T) -> bool,
    /// (slot, best in that slot), oldest first, slots increasing.
    entries: VecDeque<(u64, T)>,
}

impl<T: Copy> Windowed<T> {
    /// The largest value over the last `slots` slots.
    pub fn max(slots: u64) -> Self
    where
        T: PartialOrd,
    {
        Self::new(slots, |a, b| a > b)
    }

    /// The smallest value over the last `slots` slots.
    pub fn min(slots: u64) -> Self
    where
        T: PartialOrd,
    {
        Self::new(slots, |a, b| a < b)
    }

    fn new(slots: u64, better: fn(&T, &T) -> bool) -> Self {
        Windowed {
            slots: slots.max(1),
            better,
            entries: VecDeque::new(),
        }
    }

    /// Records `value` in `slot`. A slot older than the newest one seen counts in its own slot
    /// if that slot is still kept, and is ignored otherwise.
    pub fn update(&mut self, slot: u64, value: T) {
        match self.entries.back_mut() {
            Some((last, best)) if *last == slot => {
                if (self.better)(&value, best) {
                    *best = value;
                }
            }
            Some((last, _)) if *last > slot => {
                if let Some((_, best)) = self.entries.iter_mut().find(|(s, _)| *s == slot) {
                    if (self.better)(&value, best) {
                        *best = value;
                    }
                }
            }
            _ => self.entries.push_back((slot, value)),
        }
        self.expire(slot);
    }

    /// Drops what has left the window as of `slot` (the filter may be read between updates).
    pub fn expire(&mut self, slot: u64) {
        while let Some((first, _)) = self.entries.front() {
            if *first + self.slots <= slot {
                self.entries.pop_front();
            } else {
                break;
            }
        }
    }

    /// The best value in the window, if any.
    pub fn best(&self) -> Option<T> {
        let mut it = self.entries.iter().map(|(_, v)| *v);
        let first = it.next()?;
        Some(it.fold(first, |b, v| if (self.better)(&v, &b) { v } else { b }))
    }

    /// Forgets everything.
    pub fn clear(&mut self) {
        self.entries.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_over_the_last_slots() {
        let mut w = Windowed::<u32>::max(3);
        w.update(0, 10);
        w.update(1, 5);
        w.update(2, 7);
        assert_eq!(w.best(), Some(10));
        w.update(3, 6);
        // Slot 0 has left the window.
        assert_eq!(w.best(), Some(7));
        w.update(3, 8);
        assert_eq!(w.best(), Some(8));
        w.update(10, 1);
        assert_eq!(w.best(), Some(1));
    }

    #[test]
    fn min_keeps_one_entry_per_slot_and_accepts_a_late_sample() {
        let mut w = Windowed::<u32>::min(4);
        for i in 0..1000 {
            w.update(i / 100, 1000 - i as u32);
        }
        assert_eq!(w.entries.len(), 4);
        assert_eq!(w.best(), Some(1));
        w.update(8, 0);
        assert_eq!(w.best(), Some(0));
        // A sample for a slot already gone is ignored.
        w.update(2, 0);
        assert_eq!(w.entries.len(), 4);
    }

    #[test]
    fn empty_and_cleared() {
        let mut w = Windowed::<u32>::max(2);
        assert_eq!(w.best(), None);
        w.update(0, 3);
        w.clear();
        assert_eq!(w.best(), None);
    }
}

/// The median of the last `len` values: an estimate that single outliers, high or low, do not
/// move.
#[derive(Clone, Debug)]
pub struct RecentMedian {
    len: usize,
    values: VecDeque<f64>,
}

impl RecentMedian {
    pub fn new(len: usize) -> Self {
        RecentMedian {
            len: len.max(1),
            values: VecDeque::new(),
        }
    }

    pub fn push(&mut self, v: f64) {
        if self.values.len() == self.len {
            self.values.pop_front();
        }
        self.values.push_back(v);
    }

    /// The median (the upper one of an even count), if any value was pushed.
    pub fn median(&self) -> Option<f64> {
        let mut v: Vec<f64> = self.values.iter().copied().collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        Some(v[v.len() / 2])
    }

    /// The largest of the last values.
    pub fn max(&self) -> Option<f64> {
        self.values.iter().copied().reduce(f64::max)
    }

    pub fn clear(&mut self) {
        self.values.clear();
    }
}

#[cfg(test)]
mod median_tests {
    use super::RecentMedian;

    #[test]
    fn median_of_the_last_values() {
        let mut m = RecentMedian::new(3);
        assert_eq!(m.median(), None);
        m.push(5.0);
        assert_eq!(m.median(), Some(5.0));
        m.push(100.0);
        m.push(6.0);
        assert_eq!(m.median(), Some(6.0));
        assert_eq!(m.max(), Some(100.0));
        m.push(1.0);
        m.push(2.0);
        // 100 and 5 have left.
        assert_eq!(m.median(), Some(2.0));
        m.clear();
        assert_eq!(m.median(), None);
    }
}
