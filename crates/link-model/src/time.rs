//! Virtual time: the model never reads a clock; every input carries `now`.

use std::fmt;
use std::ops::{Add, Sub};
use std::time::Duration;

/// Microseconds since the model was created (the emulator's own zero, as smoltcp's `Instant`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SimTime(pub u64);

impl SimTime {
    pub const ZERO: SimTime = SimTime(0);

    pub fn from_micros(us: u64) -> Self {
        SimTime(us)
    }
    pub fn from_millis(ms: u64) -> Self {
        SimTime(ms * 1000)
    }
    pub fn from_secs_f64(s: f64) -> Self {
        SimTime((s * 1e6).round().max(0.0) as u64)
    }
    pub fn as_micros(self) -> u64 {
        self.0
    }
    pub fn as_millis_f64(self) -> f64 {
        self.0 as f64 / 1000.0
    }
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e6
    }
    /// `self - earlier`, or zero when `earlier` is later.
    pub fn saturating_since(self, earlier: SimTime) -> Duration {
        Duration::from_micros(self.0.saturating_sub(earlier.0))
    }
}

impl Add<Duration> for SimTime {
    type Output = SimTime;
    fn add(self, d: Duration) -> SimTime {
        SimTime(self.0.saturating_add(d.as_micros() as u64))
    }
}

impl Sub<SimTime> for SimTime {
    type Output = Duration;
    fn sub(self, earlier: SimTime) -> Duration {
        self.saturating_since(earlier)
    }
}

impl fmt::Display for SimTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.3}s", self.as_secs_f64())
    }
}

/// Milliseconds (as configured, unscaled) to a scaled duration: delays shrink by the time scale.
pub(crate) fn scaled_ms(ms: f64, time_scale: f64) -> Duration {
    Duration::from_nanos((ms.max(0.0) * 1e6 / time_scale).round() as u64)
}
