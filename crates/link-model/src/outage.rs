//! Outage schedule: scheduled windows plus random ones drawn lazily, in time order, from their
//! own seeded stream (so the schedule does not depend on the traffic). Both directions of a
//! link build the same schedule from the same seed.

use crate::profile::OutageSpec;
use crate::rng::Rng;
use std::time::Duration;

use crate::time::{scaled_ms, SimTime};

#[derive(Clone, Debug)]
pub struct Outages {
    /// Known windows [start, end), sorted, non-overlapping after merging.
    windows: Vec<(SimTime, SimTime)>,
    random: Option<RandomGen>,
    /// What [`Outages::restart`] rebuilds the schedule from.
    spec: OutageSpec,
    time_scale: f64,
    seed: u64,
}

#[derive(Clone, Debug)]
struct RandomGen {
    rng: Rng,
    mean_gap_ms: f64,
    min_ms: f64,
    max_ms: f64,
    time_scale: f64,
    /// Random windows are generated up to here.
    generated_to: SimTime,
}

impl Outages {
    pub fn new(spec: &OutageSpec, time_scale: f64, seed: u64) -> Self {
        Self::from(spec, time_scale, seed, SimTime::ZERO)
    }

    /// The schedule with its time 0 at `origin`: scheduled windows are offsets from it and
    /// random ones are drawn from it on.
    fn from(spec: &OutageSpec, time_scale: f64, seed: u64, origin: SimTime) -> Self {
        let mut windows: Vec<(SimTime, SimTime)> = spec
            .scheduled
            .iter()
            .map(|[s, d]| {
                let start = origin + scaled_ms(s * 1000.0, time_scale);
                (start, start + scaled_ms(d * 1000.0, time_scale))
            })
            .collect();
        windows.sort();
        let random = spec.random.as_ref().map(|r| RandomGen {
            rng: Rng::new(seed, 0x07A6E),
            mean_gap_ms: r.mean_interval_s * 1000.0,
            min_ms: r.min_s * 1000.0,
            max_ms: r.max_s * 1000.0,
            time_scale,
            generated_to: origin,
        });
        let mut o = Outages {
            windows,
            random,
            spec: spec.clone(),
            time_scale,
            seed,
        };
        o.merge();
        o
    }

    pub fn none() -> Self {
        Self::new(&OutageSpec::default(), 1.0, 0)
    }

    /// Starts the schedule over at `now`, as a new link would (see `Link::restart`): an
    /// outage under way ends there; scheduled windows count from `now`; random ones are drawn
    /// from `now` on from the epoch's own stream.
    pub fn restart(&mut self, now: SimTime, epoch: u64) {
        let seed = crate::rng::epoch_seed(self.seed, epoch);
        let spec = std::mem::take(&mut self.spec);
        let fresh = Self::from(&spec, self.time_scale, seed, now);
        *self = Outages {
            seed: self.seed,
            ..fresh
        };
    }

    fn merge(&mut self) {
        self.windows.sort();
        let mut out: Vec<(SimTime, SimTime)> = Vec::with_capacity(self.windows.len());
        for (s, e) in self.windows.drain(..) {
            match out.last_mut() {
                Some(last) if s <= last.1 => last.1 = last.1.max(e),
                _ => out.push((s, e)),
            }
        }
        self.windows = out;
    }

    /// Makes sure random windows are known up to `t` (and one beyond).
    fn generate_to(&mut self, t: SimTime) {
        let Some(g) = self.random.as_mut() else {
            return;
        };
        let mut added = false;
        while g.generated_to <= t {
            let gap = g.rng.exponential(g.mean_gap_ms);
            let dur = g.rng.between(g.min_ms, g.max_ms);
            // Always move forward, however small the numbers (a zero-length step would loop).
            let start = g.generated_to + scaled_ms(gap, g.time_scale).max(Duration::from_micros(1));
            let end = start + scaled_ms(dur, g.time_scale);
            self.windows.push((start, end));
            g.generated_to = end;
            added = true;
        }
        if added {
            self.merge();
        }
    }

    /// The first outage window that ends after `t`, if any.
    pub fn next_after(&mut self, t: SimTime) -> Option<(SimTime, SimTime)> {
        self.generate_to(t);
        let i = self.windows.partition_point(|w| w.1 <= t);
        self.windows.get(i).copied()
    }

    /// `t`, or the end of the outage that contains it.
    pub fn shift(&mut self, t: SimTime) -> SimTime {
        match self.next_after(t) {
            Some((s, e)) if s <= t => e,
            _ => t,
        }
    }

    /// Windows known so far (for logs and tests).
    pub fn windows(&self) -> &[(SimTime, SimTime)] {
        &self.windows
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::RandomOutageSpec;

    #[test]
    fn scheduled_windows_shift_times() {
        let spec = OutageSpec {
            scheduled: vec![[10.0, 20.0]],
            random: None,
        };
        let mut o = Outages::new(&spec, 1.0, 0);
        assert_eq!(
            o.shift(SimTime::from_millis(5_000)),
            SimTime::from_millis(5_000)
        );
        assert_eq!(
            o.shift(SimTime::from_millis(15_000)),
            SimTime::from_millis(30_000)
        );
        assert_eq!(
            o.shift(SimTime::from_millis(30_000)),
            SimTime::from_millis(30_000)
        );
        // time scale 10: the same outage at 1 s for 2 s.
        let mut o = Outages::new(&spec, 10.0, 0);
        assert_eq!(
            o.shift(SimTime::from_millis(1_500)),
            SimTime::from_millis(3_000)
        );
    }

    #[test]
    fn random_outages_have_the_configured_durations_and_are_seeded() {
        let spec = OutageSpec {
            scheduled: vec![],
            random: Some(RandomOutageSpec {
                mean_interval_s: 60.0,
                min_s: 5.0,
                max_s: 40.0,
            }),
        };
        let mut a = Outages::new(&spec, 1.0, 42);
        let mut b = Outages::new(&spec, 1.0, 42);
        a.next_after(SimTime::from_secs_f64(3600.0));
        b.next_after(SimTime::from_secs_f64(3600.0));
        assert_eq!(a.windows(), b.windows());
        assert!(a.windows().len() > 20);
        for (s, e) in a.windows() {
            let d = (*e - *s).as_secs_f64();
            assert!((5.0..=80.0).contains(&d), "{d}"); // merged windows may be longer
        }
    }
}
