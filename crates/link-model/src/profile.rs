//! Link profiles: the parameters of one emulated link, the named presets taken from the papers,
//! custom profiles from TOML, and time scaling.
//!
//! All numbers here are *unscaled* (what the real link shows); the model divides delays and
//! multiplies rates by the time scale when it is built.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::trace::Trace;
use crate::ModelError;

/// Upper bounds that keep the model's set-up and per-packet work bounded.
pub const MAX_SLOTS_PER_BLOCK: u32 = 10_000;
pub const MAX_RETRANSMISSIONS: u32 = 64;

/// Size of the IP packet a ping probe sends (20 IP + 8 UDP/ICMP + 64 payload).
pub const PING_PACKET_BYTES: f64 = 92.0;

/// How fast one direction carries bytes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub enum RateSpec {
    /// A constant rate of IP bytes, in kbit/s.
    Kbps(f64),
    /// A Mahimahi delivery trace (path; relative paths are relative to the profile file).
    Trace(PathBuf),
}

/// Per-packet extra one-way delay: mostly uniform in [0, spread], and with probability
/// `tail_prob` a heavy-tail excursion up to `tail_max_ms` (GPRS RTTs of 0.7–1 s with occasional
/// 3–4 s: papers 001 §3, 003 §3). Delivery stays in order (the RLC delivers in sequence), so a
/// delayed packet holds back the ones behind it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct JitterSpec {
    pub spread_ms: f64,
    pub tail_prob: f64,
    pub tail_max_ms: f64,
}

/// Radio block flow (GPRS TBF, 003 §6.4): the first packet after `setup_after_idle_ms` of
/// silence waits `setup_ms` plus a uniform share of `setup_spread_ms` for a block flow; after
/// `release_after_idle_ms` the channel is released and re-acquiring it costs `reacquire_ms` on
/// top of the setup.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RadioSpec {
    pub setup_after_idle_ms: f64,
    pub setup_ms: f64,
    /// Extra setup delay drawn uniformly from [0, spread] per block flow (001 §3: the first
    /// packet after idle sees 0.6–3 s downlink, 0.4–1.3 s uplink). Default 0.
    #[serde(default)]
    pub setup_spread_ms: f64,
    pub release_after_idle_ms: f64,
    pub reacquire_ms: f64,
}

/// Gilbert–Elliott burst loss: a two-state chain stepped once per packet.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GilbertSpec {
    pub p_good_to_bad: f64,
    pub p_bad_to_good: f64,
    #[serde(default)]
    pub loss_good: f64,
    pub loss_bad: f64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LossSpec {
    /// Independent loss probability per packet.
    pub random: f64,
    pub gilbert: Option<GilbertSpec>,
}

/// Link-layer FEC and ARQ (000 §4.4): radio blocks of `block_bytes` are made of
/// `slots_per_block` slots; slots are corrupted at mean rate `error_rate` in bursts of mean
/// length `burst_slots`; a share `fec_share` of each block's slots is redundancy and repairs up
/// to that many corrupted slots. A block that FEC cannot repair is retransmitted by ARQ (costing
/// capacity again, and `arq_delay_ms` per round) or, with ARQ off, its packet is lost.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FecSpec {
    pub error_rate: f64,
    pub fec_share: f64,
    pub block_bytes: u32,
    pub slots_per_block: u32,
    pub burst_slots: f64,
    pub arq: bool,
    pub arq_delay_ms: f64,
    pub max_retransmissions: u32,
}

impl Default for FecSpec {
    fn default() -> Self {
        // GPRS CS-2 carries 30 data bytes per RLC block; 100 slots as in 000 §4.4.
        FecSpec {
            error_rate: 0.0,
            fec_share: 0.0,
            block_bytes: 30,
            slots_per_block: 100,
            burst_slots: 2.0,
            arq: true,
            arq_delay_ms: 200.0,
            max_retransmissions: 8,
        }
    }
}

/// Uplink ACK bunching (001 §4): delivered packets are released in groups of `count`, or when
/// the first of a group has waited `max_wait_ms`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BunchingSpec {
    pub count: u32,
    pub max_wait_ms: f64,
}

/// One direction of the link.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DirectionSpec {
    pub rate: RateSpec,
    pub base_delay_ms: f64,
    #[serde(default)]
    pub jitter: JitterSpec,
    #[serde(default)]
    pub radio: Option<RadioSpec>,
    /// Drop-tail queue limit in bytes (GPRS downlink: 120 KB, 001 §4).
    pub queue_bytes: u64,
    #[serde(default)]
    pub loss: LossSpec,
    #[serde(default)]
    pub fec: Option<FecSpec>,
    #[serde(default)]
    pub bunching: Option<BunchingSpec>,
}

/// Outages: nothing is delivered in either direction while one lasts (cell reselection,
/// tunnels: 001 §3). Packets wait in the queue (and overflow it) meanwhile.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OutageSpec {
    /// Scheduled outages as `[start_s, duration_s]`, in unscaled seconds from the start.
    pub scheduled: Vec<[f64; 2]>,
    pub random: Option<RandomOutageSpec>,
}

/// Random outages: exponential gaps with the given mean between outages, durations uniform in
/// [min_s, max_s] (001 §3: 5–40 s).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RandomOutageSpec {
    pub mean_interval_s: f64,
    pub min_s: f64,
    pub max_s: f64,
}

/// A whole profile: what a named preset or a TOML file defines.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub down: DirectionSpec,
    pub up: DirectionSpec,
    #[serde(default)]
    pub outages: OutageSpec,
}

/// A direction's rate once traces are loaded.
#[derive(Clone, Debug, PartialEq)]
pub enum Rate {
    Kbps(f64),
    Trace(Arc<Trace>),
}

impl Rate {
    pub fn mean_kbps(&self) -> f64 {
        match self {
            Rate::Kbps(k) => *k,
            Rate::Trace(t) => t.mean_kbps(),
        }
    }
}

/// A profile whose traces are loaded and whose parameters are checked: what the model takes.
#[derive(Clone, Debug, PartialEq)]
pub struct ResolvedProfile {
    pub profile: Profile,
    pub down_rate: Rate,
    pub up_rate: Rate,
}

impl ResolvedProfile {
    /// Configured downlink rate (mean rate for traces), kbit/s.
    pub fn down_kbps(&self) -> f64 {
        self.down_rate.mean_kbps()
    }
    pub fn up_kbps(&self) -> f64 {
        self.up_rate.mean_kbps()
    }

    /// The round-trip time a ping sees when the link is otherwise idle but not released (one
    /// second after the previous ping): base delays, the median of the jitter, block-flow
    /// setup, ACK bunching's wait for a lone packet, and the serialization of a 92-byte packet.
    pub fn rtt_ms(&self) -> f64 {
        let one = |d: &DirectionSpec, rate: &Rate| {
            let ser = PING_PACKET_BYTES * 8.0 / rate.mean_kbps();
            let setup = d
                .radio
                .as_ref()
                .filter(|r| r.setup_after_idle_ms <= 1000.0)
                .map_or(0.0, |r| r.setup_ms + r.setup_spread_ms / 2.0);
            let bunch = d.bunching.as_ref().map_or(0.0, |b| b.max_wait_ms);
            d.base_delay_ms + d.jitter.spread_ms / 2.0 + setup + bunch + ser
        };
        one(&self.profile.down, &self.down_rate) + one(&self.profile.up, &self.up_rate)
    }

    /// Extra round-trip time after the channel has been released (both directions re-acquire).
    pub fn reacquire_rtt_ms(&self) -> f64 {
        [&self.profile.down, &self.profile.up]
            .iter()
            .filter_map(|d| d.radio.as_ref().map(|r| r.reacquire_ms))
            .fold(0.0, |a, b| a + b)
    }

    /// The shortest idle gap after which the channel is released (if the profile has radio).
    pub fn release_after_idle_ms(&self) -> Option<f64> {
        [&self.profile.down, &self.profile.up]
            .iter()
            .filter_map(|d| d.radio.as_ref().map(|r| r.release_after_idle_ms))
            .reduce(f64::min)
    }
}

impl Profile {
    /// Parses a TOML profile; errors name the file.
    pub fn from_toml(text: &str, source: &str) -> Result<Profile, ModelError> {
        toml::from_str(text).map_err(|e| ModelError::Profile {
            file: source.to_string(),
            message: e.to_string(),
        })
    }

    /// The profile as a TOML file that [`Profile::from_toml`] reads back unchanged: a preset
    /// written out is the starting point of a custom profile.
    pub fn to_toml(&self) -> Result<String, ModelError> {
        toml::to_string_pretty(self).map_err(|e| ModelError::Profile {
            file: self.name.clone(),
            message: e.to_string(),
        })
    }

    /// Loads traces (relative to `base_dir`) and checks every parameter.
    pub fn resolve(&self, base_dir: Option<&Path>) -> Result<ResolvedProfile, ModelError> {
        let rate = |r: &RateSpec| -> Result<Rate, ModelError> {
            Ok(match r {
                RateSpec::Kbps(k) => Rate::Kbps(*k),
                RateSpec::Trace(p) => {
                    let path = match base_dir {
                        Some(b) if p.is_relative() => b.join(p),
                        _ => p.clone(),
                    };
                    Rate::Trace(Arc::new(Trace::load(&path)?))
                }
            })
        };
        self.validate()?;
        Ok(ResolvedProfile {
            down_rate: rate(&self.down.rate)?,
            up_rate: rate(&self.up.rate)?,
            profile: self.clone(),
        })
    }

    // The negated comparisons are deliberate: a NaN must fail every check.
    #[allow(clippy::neg_cmp_op_on_partial_ord)]
    fn validate(&self) -> Result<(), ModelError> {
        let err = |what: String| ModelError::Parameter {
            profile: self.name.clone(),
            message: what,
        };
        let prob = |name: &str, p: f64| {
            if (0.0..=1.0).contains(&p) {
                Ok(())
            } else {
                Err(err(format!("{name} = {p} is not a probability in [0, 1]")))
            }
        };
        let nonneg = |name: &str, v: f64| {
            if v >= 0.0 && v.is_finite() {
                Ok(())
            } else {
                Err(err(format!("{name} = {v} must be a finite number ≥ 0")))
            }
        };
        for (dir, d) in [("down", &self.down), ("up", &self.up)] {
            if let RateSpec::Kbps(k) = d.rate {
                if !(k > 0.0 && k.is_finite()) {
                    return Err(err(format!(
                        "{dir}.rate = {k} kbps must be a positive rate"
                    )));
                }
            }
            nonneg(&format!("{dir}.base_delay_ms"), d.base_delay_ms)?;
            nonneg(&format!("{dir}.jitter.spread_ms"), d.jitter.spread_ms)?;
            nonneg(&format!("{dir}.jitter.tail_max_ms"), d.jitter.tail_max_ms)?;
            prob(&format!("{dir}.jitter.tail_prob"), d.jitter.tail_prob)?;
            if d.queue_bytes < 1500 {
                return Err(err(format!(
                    "{dir}.queue_bytes = {} must hold at least one 1500-byte packet",
                    d.queue_bytes
                )));
            }
            prob(&format!("{dir}.loss.random"), d.loss.random)?;
            if let Some(g) = &d.loss.gilbert {
                prob(
                    &format!("{dir}.loss.gilbert.p_good_to_bad"),
                    g.p_good_to_bad,
                )?;
                prob(
                    &format!("{dir}.loss.gilbert.p_bad_to_good"),
                    g.p_bad_to_good,
                )?;
                prob(&format!("{dir}.loss.gilbert.loss_good"), g.loss_good)?;
                prob(&format!("{dir}.loss.gilbert.loss_bad"), g.loss_bad)?;
            }
            if let Some(r) = &d.radio {
                nonneg(&format!("{dir}.radio.setup_ms"), r.setup_ms)?;
                nonneg(&format!("{dir}.radio.setup_spread_ms"), r.setup_spread_ms)?;
                nonneg(
                    &format!("{dir}.radio.setup_after_idle_ms"),
                    r.setup_after_idle_ms,
                )?;
                nonneg(&format!("{dir}.radio.reacquire_ms"), r.reacquire_ms)?;
                if !(r.release_after_idle_ms >= r.setup_after_idle_ms) {
                    return Err(err(format!(
                        "{dir}.radio.release_after_idle_ms must be ≥ setup_after_idle_ms"
                    )));
                }
            }
            if let Some(f) = &d.fec {
                prob(&format!("{dir}.fec.error_rate"), f.error_rate)?;
                if !(0.0..0.9).contains(&f.fec_share) {
                    return Err(err(format!(
                        "{dir}.fec.fec_share = {} must be in [0, 0.9)",
                        f.fec_share
                    )));
                }
                if f.block_bytes == 0
                    || !(1..=MAX_SLOTS_PER_BLOCK).contains(&f.slots_per_block)
                    || !(f.burst_slots >= 1.0)
                {
                    return Err(err(format!(
                        "{dir}.fec: block_bytes must be > 0, slots_per_block in 1..={MAX_SLOTS_PER_BLOCK}, burst_slots ≥ 1"
                    )));
                }
                if f.max_retransmissions > MAX_RETRANSMISSIONS {
                    return Err(err(format!(
                        "{dir}.fec.max_retransmissions = {} must be ≤ {MAX_RETRANSMISSIONS}",
                        f.max_retransmissions
                    )));
                }
                nonneg(&format!("{dir}.fec.arq_delay_ms"), f.arq_delay_ms)?;
            }
            if let Some(b) = &d.bunching {
                if b.count == 0 {
                    return Err(err(format!("{dir}.bunching.count must be ≥ 1")));
                }
                nonneg(&format!("{dir}.bunching.max_wait_ms"), b.max_wait_ms)?;
            }
        }
        for [s, dur] in &self.outages.scheduled {
            nonneg("outages.scheduled start", *s)?;
            nonneg("outages.scheduled duration", *dur)?;
        }
        if let Some(r) = &self.outages.random {
            if !(r.mean_interval_s >= 1.0) || !(r.min_s >= 0.0) || !(r.max_s >= r.min_s) {
                return Err(err(
                    "outages.random needs mean_interval_s ≥ 1 and 0 ≤ min_s ≤ max_s".into(),
                ));
            }
        }
        Ok(())
    }
}
