//! The link model's seeded PRNG (xoshiro256** seeded through SplitMix64), with the samplers
//! the corpus generators need, so generated corpora are the same bytes on every machine.

/// Deterministic pseudo-random numbers: the link model's generator (stream 0 of `seed`), with
/// the samplers the generators need on top.
#[derive(Clone, Debug)]
pub struct Rng(webpep_link_model::rng::Rng);

/// FNV-1a of a string: stable across runs (unlike `std`'s hasher).
pub fn hash_str(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01B3);
    }
    h
}

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(webpep_link_model::rng::Rng::new(seed, 0))
    }

    /// A generator for a named sub-stream: independent of how much the parent was used.
    pub fn derive(seed: u64, label: &str) -> Rng {
        Rng::new(seed ^ hash_str(label).rotate_left(17))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// Uniform in [0, 1).
    pub fn f64(&mut self) -> f64 {
        self.0.unit()
    }

    /// Uniform in [0, n) (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        if n <= 1 {
            return 0;
        }
        (((self.next_u64() >> 32) * n as u64) >> 32) as usize
    }

    /// Uniform in [lo, hi] (inclusive).
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        if hi <= lo {
            return lo;
        }
        lo + self.below(hi - lo + 1)
    }

    /// Uniform in [lo, hi).
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.f64()
    }

    pub fn chance(&mut self, p: f64) -> bool {
        self.f64() < p
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    /// Standard normal (Box–Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = self.f64().max(1e-300);
        let u2 = self.f64();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }

    /// Log-normal with the given median and shape.
    pub fn lognormal(&mut self, median: f64, sigma: f64) -> f64 {
        median * (sigma * self.normal()).exp()
    }

    /// An index drawn with a Zipf-like weight (rank r has weight 1/(r+k)).
    pub fn zipf(&mut self, n: usize, k: f64) -> usize {
        // Inverse of the continuous CDF of 1/(x+k) on [0, n).
        let u = self.f64();
        let a = k.ln();
        let b = (n as f64 + k).ln();
        let x = (a + u * (b - a)).exp() - k;
        (x as usize).min(n.saturating_sub(1))
    }

    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i + 1);
            items.swap(i, j);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_spread() {
        let mut a = Rng::new(7);
        let mut b = Rng::new(7);
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
        let mut hist = [0usize; 10];
        for _ in 0..10_000 {
            hist[a.below(10)] += 1;
        }
        assert!(hist.iter().all(|&h| (800..1200).contains(&h)), "{hist:?}");
        assert_ne!(
            Rng::derive(1, "a").next_u64(),
            Rng::derive(1, "b").next_u64()
        );
    }
}
