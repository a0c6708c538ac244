//! The pure model of a slow link (shared/DESIGN.md §7.2): seeded, driven by virtual time, one
//! [`Direction`] per way, no I/O and no clock. The I/O shell (`webpep-link`) feeds it packets
//! and wall-clock `now`; tests feed it made-up packets and virtual `now`.
//!
//! Units: profiles hold unscaled numbers (what the real link shows); a model built with time
//! scale k runs k times faster (rates ×k, delays and timeouts ÷k). Counters and events are in
//! the model's own (scaled) time; multiply by k to report unscaled figures.

pub mod direction;
pub mod fec;
pub mod fec_sweep;
pub mod link;
pub mod outage;
pub mod presets;
pub mod profile;
pub mod rng;
pub mod time;
pub mod trace;

#[cfg(test)]
mod tests;

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

pub use direction::{Delivered, Direction, Enqueued};
pub use link::{Link, Side};
pub use presets::{resolve, PRESET_NAMES};
pub use profile::{Profile, ResolvedProfile};
pub use time::SimTime;
pub use trace::Trace;

/// Errors of profile and trace handling. Each names the file (and line) or profile at fault.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("{path}: {message}")]
    Io { path: PathBuf, message: String },
    #[error("{file}: line {line}: {message}")]
    Trace {
        file: String,
        line: usize,
        message: String,
    },
    #[error("{file}: invalid profile: {message}")]
    Profile { file: String, message: String },
    #[error("profile {profile}: {message}")]
    Parameter { profile: String, message: String },
    #[error("unknown profile {name:?}: {message}")]
    UnknownProfile { name: String, message: String },
}

/// How many queue-delay samples a direction keeps (the first ones; enough for any test or plot).
pub const MAX_QUEUE_DELAY_SAMPLES: usize = 1 << 20;

/// Per-direction counters.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Counters {
    pub enqueued_packets: u64,
    pub enqueued_bytes: u64,
    pub delivered_packets: u64,
    pub delivered_bytes: u64,
    /// Dropped by the full drop-tail queue.
    pub dropped_queue_packets: u64,
    pub dropped_queue_bytes: u64,
    /// Lost on the air (random, burst, or FEC residual without ARQ).
    pub lost_packets: u64,
    /// Of those, lost because FEC/ARQ could not repair them.
    pub lost_fec_packets: u64,
    pub arq_retransmitted_blocks: u64,
    queue_delay_us: Vec<u64>,
}

impl Counters {
    fn record_queue_delay(&mut self, d: Duration) {
        if self.queue_delay_us.len() < MAX_QUEUE_DELAY_SAMPLES {
            self.queue_delay_us.push(d.as_micros() as u64);
        }
    }

    /// Time each packet waited in the queue before its service started (µs, scaled time).
    pub fn queue_delay_samples(&self) -> &[u64] {
        &self.queue_delay_us
    }
}

/// What happened to a packet, for per-packet logs (Mahimahi's vocabulary plus loss).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// Entered the queue.
    Arrival,
    /// Dropped by the full queue.
    Drop,
    /// Lost on the air.
    Loss,
    /// Left the link.
    Delivery,
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            EventKind::Arrival => "+",
            EventKind::Drop => "d",
            EventKind::Loss => "l",
            EventKind::Delivery => "-",
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Event {
    pub time: SimTime,
    pub kind: EventKind,
    pub bytes: usize,
    /// Queue occupancy after the event.
    pub queue_bytes: u64,
    /// For deliveries and losses: time since the packet arrived.
    pub delay_us: u64,
}
