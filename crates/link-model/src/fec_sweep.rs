//! `webpep link fec-sweep`: the trade-off of 000 §4.4 computed with the model in virtual time.
//! For each channel error rate and FEC share it sends a bulk transfer through one direction
//! with ARQ (normalized transfer time, the shape of 000 Fig. 6: an optimum FEC share that grows
//! with the error rate) and measures the residual loss without ARQ (000 Fig. 7).

use serde::Serialize;

use crate::direction::{Direction, Enqueued};
use crate::outage::Outages;
use crate::profile::{DirectionSpec, FecSpec, JitterSpec, LossSpec, Rate, RateSpec};
use crate::time::SimTime;

/// Parameters of a sweep.
#[derive(Clone, Debug)]
pub struct SweepConfig {
    /// Channel (slot) error rates, as fractions.
    pub error_rates: Vec<f64>,
    /// FEC shares, as fractions.
    pub fec_shares: Vec<f64>,
    /// Bytes of the bulk transfer.
    pub transfer_bytes: u64,
    /// Raw radio rate, kbit/s.
    pub rate_kbps: f64,
    /// The FEC/ARQ parameters other than error rate and share.
    pub fec: FecSpec,
    pub seed: u64,
}

impl Default for SweepConfig {
    fn default() -> Self {
        SweepConfig {
            error_rates: vec![0.002, 0.005, 0.009, 0.015, 0.025],
            fec_shares: (0..=20).map(|p| p as f64 / 100.0).collect(),
            transfer_bytes: 1 << 20,
            rate_kbps: 40.0,
            fec: FecSpec::default(),
            seed: 1,
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct SweepPoint {
    pub error_rate: f64,
    pub fec_share: f64,
    /// Transfer time with ARQ, divided by the best channel's time without FEC.
    pub normalized_time: f64,
    /// Residual block error after FEC (the data loss rate without ARQ).
    pub residual_block_loss: f64,
    /// Share of 1500-byte packets lost without ARQ.
    pub packet_loss_no_arq: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct SweepResult {
    pub points: Vec<SweepPoint>,
    /// Per error rate, the FEC share with the least transfer time.
    pub optimum: Vec<(f64, f64)>,
}

fn direction(cfg: &SweepConfig, error_rate: f64, fec_share: f64, arq: bool) -> Direction<()> {
    let spec = DirectionSpec {
        rate: RateSpec::Kbps(cfg.rate_kbps),
        base_delay_ms: 0.0,
        jitter: JitterSpec::default(),
        radio: None,
        queue_bytes: u64::MAX / 2,
        loss: LossSpec::default(),
        fec: Some(FecSpec {
            error_rate,
            fec_share,
            arq,
            ..cfg.fec.clone()
        }),
        bunching: None,
    };
    Direction::new(
        &spec,
        &Rate::Kbps(cfg.rate_kbps),
        1.0,
        cfg.seed,
        7,
        Outages::none(),
    )
}

/// Sends `bytes` at time zero in 1500-byte packets; returns (last delivery time, packets lost).
fn bulk(d: &mut Direction<()>, bytes: u64) -> (SimTime, u64) {
    let packets = bytes.div_ceil(1500);
    for _ in 0..packets {
        let r = d.enqueue(SimTime::ZERO, 1500, ());
        debug_assert_eq!(r, Enqueued::Accepted);
    }
    let mut now = SimTime::ZERO;
    let mut last = SimTime::ZERO;
    loop {
        while let Some(p) = d.poll_deliver(now) {
            last = p.delivered_at;
        }
        match d.next_wakeup() {
            Some(t) => now = t,
            None => break,
        }
    }
    (last, d.counters().lost_packets)
}

pub fn sweep(cfg: &SweepConfig) -> SweepResult {
    let best = cfg
        .error_rates
        .iter()
        .copied()
        .fold(f64::INFINITY, f64::min);
    let reference = bulk(&mut direction(cfg, best, 0.0, true), cfg.transfer_bytes)
        .0
        .as_secs_f64();
    let mut points = Vec::new();
    let mut optimum = Vec::new();
    for &e in &cfg.error_rates {
        let mut best_here = (f64::INFINITY, 0.0);
        for &f in &cfg.fec_shares {
            let mut with_arq = direction(cfg, e, f, true);
            let t = bulk(&mut with_arq, cfg.transfer_bytes).0.as_secs_f64() / reference;
            let mut no_arq = direction(cfg, e, f, false);
            let residual = no_arq.fec_residual_block_error().unwrap_or(0.0);
            let (_, lost) = bulk(&mut no_arq, cfg.transfer_bytes);
            let sent = cfg.transfer_bytes.div_ceil(1500);
            if t < best_here.0 {
                best_here = (t, f);
            }
            points.push(SweepPoint {
                error_rate: e,
                fec_share: f,
                normalized_time: t,
                residual_block_loss: residual,
                packet_loss_no_arq: lost as f64 / sent as f64,
            });
        }
        optimum.push((e, best_here.1));
    }
    SweepResult { points, optimum }
}

impl SweepResult {
    /// Two text tables: normalized time (with ARQ) and residual block loss (without ARQ).
    pub fn to_table(&self) -> String {
        let rates: Vec<f64> = self.optimum.iter().map(|o| o.0).collect();
        // Every error rate was swept over the same shares: take the first one's.
        let shares: Vec<f64> = self
            .points
            .iter()
            .filter(|p| Some(&p.error_rate) == rates.first())
            .map(|p| p.fec_share)
            .collect();
        let get = |e: f64, f: f64| {
            self.points
                .iter()
                .find(|p| p.error_rate == e && p.fec_share == f)
                .expect("every (rate, share) was computed")
        };
        let mut s = String::new();
        s.push_str(
            "Normalized transfer time with ARQ (000 Fig. 6); * marks the optimum per error rate\n",
        );
        s.push_str("FEC %  ");
        for e in &rates {
            s.push_str(&format!("{:>10}", format!("e={:.1}%", e * 100.0)));
        }
        s.push('\n');
        for &f in &shares {
            s.push_str(&format!("{:>5.0}  ", f * 100.0));
            for (e, opt) in &self.optimum {
                let mark = if *opt == f { "*" } else { " " };
                s.push_str(&format!("{:>9.3}{mark}", get(*e, f).normalized_time));
            }
            s.push('\n');
        }
        s.push_str("\nResidual data loss without ARQ, % of radio blocks (000 Fig. 7)\n");
        s.push_str("FEC %  ");
        for e in &rates {
            s.push_str(&format!("{:>10}", format!("e={:.1}%", e * 100.0)));
        }
        s.push('\n');
        for &f in &shares {
            s.push_str(&format!("{:>5.0}  ", f * 100.0));
            for e in &rates {
                s.push_str(&format!("{:>10.3}", get(*e, f).residual_block_loss * 100.0));
            }
            s.push('\n');
        }
        s.push_str("\nOptimum FEC share per error rate: ");
        let opts: Vec<String> = self
            .optimum
            .iter()
            .map(|(e, f)| format!("{:.1}% → {:.0}%", e * 100.0, f * 100.0))
            .collect();
        s.push_str(&opts.join(", "));
        s.push('\n');
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn optimum_grows_with_error_rate_and_fec_removes_loss() {
        let cfg = SweepConfig {
            transfer_bytes: 200_000,
            ..SweepConfig::default()
        };
        let r = sweep(&cfg);
        let opts: Vec<f64> = r.optimum.iter().map(|o| o.1).collect();
        assert!(opts.windows(2).all(|w| w[1] >= w[0]), "{opts:?}");
        assert!(opts.last() > opts.first(), "{opts:?}");
        // Each curve has an interior optimum: worse with no FEC and with the most FEC.
        for (e, f) in &r.optimum {
            assert!(*f > 0.0 && *f < 0.20, "e={e} optimum {f}");
        }
        // Without ARQ, residual loss falls with FEC.
        for e in &cfg.error_rates {
            let loss: Vec<f64> = r
                .points
                .iter()
                .filter(|p| p.error_rate == *e)
                .map(|p| p.residual_block_loss)
                .collect();
            assert!(loss.windows(2).all(|w| w[1] <= w[0] + 1e-12));
            assert!(loss[0] > 0.01 && *loss.last().unwrap() < 0.01, "{loss:?}");
        }
    }
}
