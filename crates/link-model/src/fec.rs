//! Link-layer FEC and ARQ (000 §4.4).
//!
//! A radio block has `slots_per_block` slots; a share `fec_share` of them is redundancy that
//! repairs up to that many corrupted slots. Slot corruption follows a two-state burst process
//! with mean rate `error_rate` and mean burst length `burst_slots`. The probability that FEC
//! cannot repair a block is computed exactly (a small dynamic programme over slots), once, when
//! the model is built; per block the model then draws one Bernoulli variable.

use crate::profile::FecSpec;
use crate::rng::Rng;

#[derive(Clone, Debug)]
pub struct FecModel {
    spec: FecSpec,
    /// Data bytes a block carries once the FEC share is taken out.
    payload_per_block: f64,
    /// Probability that a block is still corrupt after FEC.
    residual: f64,
    rng: Rng,
}

/// What FEC and ARQ did to one packet.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FecOutcome {
    /// Bytes the packet occupies on the air, retransmissions included.
    pub air_bytes: u64,
    /// Blocks retransmitted by ARQ.
    pub retransmitted_blocks: u64,
    /// ARQ rounds the packet waited for (each costs the ARQ delay).
    pub arq_rounds: u32,
    /// The packet could not be repaired (ARQ off, or out of retransmissions).
    pub lost: bool,
}

/// Probability that a block of `slots` slots has more than `correctable` corrupted slots, when
/// slots follow a burst chain with stationary error rate `e` and mean burst `burst` slots.
pub fn block_failure_probability(e: f64, burst: f64, slots: u32, correctable: u32) -> f64 {
    if e <= 0.0 {
        return 0.0;
    }
    if e >= 1.0 {
        return if correctable >= slots { 0.0 } else { 1.0 };
    }
    let p_bg = (1.0 / burst).min(1.0); // leave a burst
    let p_gb = (e * p_bg / (1.0 - e)).min(1.0); // enter one, so that P(bad) = e
    let n = slots as usize;
    // dp[s][k]: probability that the current slot is in state s (0 good, 1 bad) with k errors.
    let mut dp = vec![[0.0f64; 2]; n + 1];
    dp[0][0] = 1.0 - e;
    dp[1][1] = e;
    for _ in 1..n {
        let mut next = vec![[0.0f64; 2]; n + 1];
        for k in 0..=n {
            let [g, b] = dp[k];
            if g == 0.0 && b == 0.0 {
                continue;
            }
            next[k][0] += g * (1.0 - p_gb) + b * p_bg;
            if k < n {
                next[k + 1][1] += g * p_gb + b * (1.0 - p_bg);
            }
        }
        dp = next;
    }
    let ok: f64 = dp
        .iter()
        .take(correctable as usize + 1)
        .map(|[g, b]| g + b)
        .sum();
    (1.0 - ok).clamp(0.0, 1.0)
}

impl FecModel {
    /// Draws from `rng` from now on (a link restarted into a new epoch).
    pub fn reseed(&mut self, rng: Rng) {
        self.rng = rng;
    }

    pub fn new(spec: &FecSpec, rng: Rng) -> Self {
        let correctable = (spec.fec_share * spec.slots_per_block as f64).floor() as u32;
        FecModel {
            payload_per_block: spec.block_bytes as f64 * (1.0 - spec.fec_share),
            residual: block_failure_probability(
                spec.error_rate,
                spec.burst_slots,
                spec.slots_per_block,
                correctable,
            ),
            spec: spec.clone(),
            rng,
        }
    }

    /// Probability that a block stays corrupt after FEC.
    pub fn residual_block_error(&self) -> f64 {
        self.residual
    }

    /// Sends one packet of `len` bytes through FEC and (if on) ARQ.
    pub fn send(&mut self, len: usize) -> FecOutcome {
        // The last block of a packet may be shared with the next packet (RLC packs blocks),
        // so the air bytes are proportional; failures are drawn per (whole) block.
        let exact_blocks = len as f64 / self.payload_per_block;
        let blocks = exact_blocks.ceil().max(1.0) as u64;
        let block = self.spec.block_bytes as u64;
        let mut out = FecOutcome {
            air_bytes: (exact_blocks * block as f64).round().max(1.0) as u64,
            ..Default::default()
        };
        if self.residual <= 0.0 {
            return out;
        }
        let mut pending = (0..blocks)
            .filter(|_| self.rng.chance(self.residual))
            .count() as u64;
        if pending == 0 {
            return out;
        }
        if !self.spec.arq {
            out.lost = true;
            return out;
        }
        while pending > 0 {
            if out.arq_rounds >= self.spec.max_retransmissions {
                out.lost = true;
                break;
            }
            out.arq_rounds += 1;
            out.retransmitted_blocks += pending;
            out.air_bytes += pending * block;
            pending = (0..pending)
                .filter(|_| self.rng.chance(self.residual))
                .count() as u64;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_probability_matches_independent_binomial_for_unit_bursts() {
        // burst = 1 and tiny e: nearly independent slots; P(>0 errors in 100) ≈ 1-(1-e)^100.
        let e = 0.001;
        let p = block_failure_probability(e, 1.0 / (1.0 - e), 100, 0);
        let expect = 1.0 - (1.0f64 - e).powi(100);
        assert!((p - expect).abs() < 1e-3, "{p} vs {expect}");
    }

    #[test]
    fn more_fec_repairs_more() {
        let mut last = 1.0;
        for c in 0..25 {
            let p = block_failure_probability(0.009, 4.0, 100, c);
            assert!(p <= last + 1e-12);
            last = p;
        }
        assert!(last < 0.01);
        assert_eq!(block_failure_probability(0.0, 4.0, 100, 0), 0.0);
    }

    #[test]
    fn arq_retransmits_and_no_arq_loses() {
        let spec = FecSpec {
            error_rate: 0.05,
            ..FecSpec::default()
        };
        let mut m = FecModel::new(&spec, Rng::new(1, 1));
        let outs: Vec<_> = (0..200).map(|_| m.send(1500)).collect();
        assert!(outs.iter().any(|o| o.retransmitted_blocks > 0));
        assert!(outs.iter().all(|o| o.air_bytes >= 50 * 30));
        let mut m = FecModel::new(&FecSpec { arq: false, ..spec }, Rng::new(1, 1));
        assert!((0..200).map(|_| m.send(1500)).any(|o| o.lost));
    }
}
