//! A whole link: the two directions, with one outage schedule.

use crate::direction::{Delivered, Direction, Enqueued};
use crate::outage::Outages;
use crate::profile::ResolvedProfile;
use crate::time::SimTime;
use crate::{Counters, Event};

/// Which way a packet travels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Side {
    /// From the network towards the device.
    Down,
    /// From the device towards the network.
    Up,
}

impl Side {
    pub const BOTH: [Side; 2] = [Side::Down, Side::Up];

    pub fn name(self) -> &'static str {
        match self {
            Side::Down => "down",
            Side::Up => "up",
        }
    }
}

/// The emulated link: one [`Direction`] per side, seeded, in virtual time.
#[derive(Debug)]
pub struct Link<P> {
    pub down: Direction<P>,
    pub up: Direction<P>,
    time_scale: f64,
}

impl<P> Link<P> {
    /// `time_scale` k: rates ×k, delays and timeouts ÷k.
    pub fn new(profile: &ResolvedProfile, time_scale: f64, seed: u64) -> Self {
        let k = if time_scale > 0.0 { time_scale } else { 1.0 };
        let outages = || Outages::new(&profile.profile.outages, k, seed);
        Link {
            down: Direction::new(
                &profile.profile.down,
                &profile.down_rate,
                k,
                seed,
                1,
                outages(),
            ),
            up: Direction::new(&profile.profile.up, &profile.up_rate, k, seed, 2, outages()),
            time_scale: k,
        }
    }

    pub fn time_scale(&self) -> f64 {
        self.time_scale
    }

    pub fn direction(&self, side: Side) -> &Direction<P> {
        match side {
            Side::Down => &self.down,
            Side::Up => &self.up,
        }
    }

    pub fn direction_mut(&mut self, side: Side) -> &mut Direction<P> {
        match side {
            Side::Down => &mut self.down,
            Side::Up => &mut self.up,
        }
    }

    pub fn enqueue(&mut self, side: Side, now: SimTime, len: usize, payload: P) -> Enqueued {
        self.direction_mut(side).enqueue(now, len, payload)
    }

    pub fn poll_deliver(&mut self, side: Side, now: SimTime) -> Option<Delivered<P>> {
        self.direction_mut(side).poll_deliver(now)
    }

    /// The earliest wakeup of either direction.
    pub fn next_wakeup(&self) -> Option<SimTime> {
        match (self.down.next_wakeup(), self.up.next_wakeup()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    pub fn counters(&self, side: Side) -> &Counters {
        self.direction(side).counters()
    }

    /// Both directions start over at `now` as a new link of epoch `epoch` (see
    /// [`Direction::restart`]): the lab does this before each load, with the load's repeat
    /// number as the epoch, so that every configuration's load r meets the same trace, the
    /// same outage schedule and the same random streams.
    pub fn restart(&mut self, now: SimTime, epoch: u64) {
        self.down.restart(now, epoch);
        self.up.restart(now, epoch);
    }

    pub fn set_event_log(&mut self, on: bool) {
        self.down.set_event_log(on);
        self.up.set_event_log(on);
    }

    pub fn drain_events(&mut self, side: Side) -> Vec<Event> {
        self.direction_mut(side).drain_events()
    }
}
