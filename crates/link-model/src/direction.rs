//! One direction of the emulated link: a pure state machine in virtual time.
//!
//! A packet goes through, in order:
//! 1. the drop-tail queue (bounded in bytes; the packet in service still counts);
//! 2. radio block-flow acquisition when it arrives at an idle channel (setup, or setup plus
//!    re-acquisition after the release timeout);
//! 3. serialization at the rate (constant, or the delivery opportunities of a trace), with the
//!    FEC share taken out of the capacity and ARQ retransmissions added to it; outages pause it;
//! 4. loss (random, Gilbert–Elliott, or FEC residual without ARQ);
//! 5. propagation: base delay + jitter + ARQ delay, in order, never inside an outage;
//! 6. uplink ACK bunching, if configured.
//!
//! Inputs take `now`; outputs are polled. Calling order (as quinn-proto documents its own):
//! `enqueue(now, ..)` whenever a packet arrives; `poll_deliver(now)` until it returns `None`;
//! then sleep until `next_wakeup()`. Time must not go backwards between calls.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use crate::fec::FecModel;
use crate::outage::Outages;
use crate::profile::{DirectionSpec, GilbertSpec, JitterSpec, RadioSpec, Rate};
use crate::rng::Rng;
use crate::time::{scaled_ms, SimTime};
use crate::trace::{Trace, OPPORTUNITY_BYTES};
use crate::{Counters, Event, EventKind};

/// Whether the queue took the packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Enqueued {
    Accepted,
    /// The drop-tail queue was full.
    Dropped,
}

/// A packet leaving the link.
#[derive(Clone, Debug, PartialEq)]
pub struct Delivered<P> {
    pub payload: P,
    pub len: usize,
    pub enqueued_at: SimTime,
    pub delivered_at: SimTime,
}

#[derive(Debug)]
struct Queued<P> {
    payload: P,
    len: usize,
    enqueued_at: SimTime,
    /// Earliest service start (after block-flow acquisition).
    not_before: SimTime,
}

#[derive(Debug)]
struct InService {
    start: SimTime,
    end: SimTime,
    arq_delay: Duration,
    fec_lost: bool,
}

#[derive(Debug)]
struct InFlight<P> {
    payload: P,
    len: usize,
    enqueued_at: SimTime,
    deliver_at: SimTime,
}

/// The serializer: turns (start, bytes) into a completion time.
#[derive(Debug)]
enum Serializer {
    /// Bytes per microsecond (already scaled).
    Constant {
        bytes_per_us: f64,
    },
    Trace(TraceCursor),
}

/// Walks a trace's delivery opportunities, Mahimahi style: each carries 1500 bytes; bytes an
/// opportunity has left after a packet completes go to the next packet if it was already
/// waiting at that opportunity; otherwise they are wasted.
#[derive(Debug)]
struct TraceCursor {
    trace: Arc<Trace>,
    time_scale: f64,
    /// When the trace's millisecond 0 is (moved by [`Direction::restart`]).
    origin: SimTime,
    cycle: u64,
    index: usize,
    /// (time, bytes) left over in the last used opportunity.
    leftover: Option<(SimTime, u64)>,
}

impl TraceCursor {
    fn time_of(&self, cycle: u64, index: usize) -> SimTime {
        let ms = cycle * self.trace.period_ms + self.trace.timestamps_ms[index];
        self.origin + Duration::from_micros((ms as f64 * 1000.0 / self.time_scale).round() as u64)
    }

    /// Starts the trace over: its millisecond 0 is `at`, as when a Mahimahi shell starts.
    fn restart(&mut self, at: SimTime) {
        self.origin = at;
        self.cycle = 0;
        self.index = 0;
        self.leftover = None;
    }

    fn current(&self) -> SimTime {
        self.time_of(self.cycle, self.index)
    }

    fn step(&mut self) {
        self.index += 1;
        if self.index == self.trace.timestamps_ms.len() {
            self.index = 0;
            self.cycle += 1;
        }
    }

    /// Moves the cursor to the first opportunity at or after `t`, skipping whole cycles.
    fn skip_to(&mut self, t: SimTime) {
        if self.current() >= t {
            return;
        }
        let t_ms = (t - self.origin).as_micros() as f64 * self.time_scale / 1000.0;
        let cycle = (t_ms / self.trace.period_ms as f64).floor() as u64;
        if cycle > self.cycle + 1 {
            self.cycle = cycle - 1;
            self.index = 0;
        }
        while self.current() < t {
            self.step();
        }
    }

    fn serve(&mut self, start: SimTime, mut bytes: u64, outages: &mut Outages) -> SimTime {
        if let Some((t, left)) = self.leftover.take() {
            if t >= start {
                if bytes <= left {
                    self.leftover = Some((t, left - bytes));
                    return t;
                }
                bytes -= left;
            }
        }
        self.skip_to(start);
        loop {
            let t = self.current();
            self.step();
            // No capacity during an outage.
            let shifted = outages.shift(t);
            if shifted != t {
                self.skip_to(shifted);
                continue;
            }
            if bytes <= OPPORTUNITY_BYTES {
                self.leftover = Some((t, OPPORTUNITY_BYTES - bytes));
                return t;
            }
            bytes -= OPPORTUNITY_BYTES;
        }
    }
}

impl Serializer {
    fn serve(&mut self, start: SimTime, bytes: u64, outages: &mut Outages) -> SimTime {
        match self {
            Serializer::Constant { bytes_per_us } => {
                // Transmission pauses during outages.
                let mut start = outages.shift(start);
                let mut remaining_us = bytes as f64 / *bytes_per_us;
                loop {
                    let end = start + Duration::from_nanos((remaining_us * 1000.0).round() as u64);
                    match outages.next_after(start) {
                        Some((s, e)) if s < end => {
                            remaining_us -= (s - start).as_nanos() as f64 / 1000.0;
                            start = e;
                        }
                        _ => return end,
                    }
                }
            }
            Serializer::Trace(c) => c.serve(start, bytes, outages),
        }
    }
}

#[derive(Debug)]
struct Radio {
    setup_after_idle: Duration,
    setup: Duration,
    setup_spread: Duration,
    release_after_idle: Duration,
    reacquire: Duration,
}

#[derive(Debug)]
struct Jitter {
    spread: Duration,
    tail_prob: f64,
    tail_max: Duration,
}

#[derive(Debug)]
struct Gilbert {
    spec: GilbertSpec,
    bad: bool,
}

#[derive(Debug)]
struct Bunching {
    count: usize,
    max_wait: Duration,
    /// Packets of the group being released that are still to go.
    releasing: usize,
}

/// One direction of the link. `P` is whatever the shell carries (packet bytes, or `()` in tests).
#[derive(Debug)]
pub struct Direction<P> {
    serializer: Serializer,
    base_delay: Duration,
    jitter: Jitter,
    radio: Option<Radio>,
    queue_limit: u64,
    random_loss: f64,
    gilbert: Option<Gilbert>,
    fec: Option<FecModel>,
    /// Delay of one ARQ round (scaled).
    arq_delay: Duration,
    bunching: Option<Bunching>,
    outages: Outages,
    rng_delay: Rng,
    rng_loss: Rng,
    /// Its own stream, so profiles without a setup spread keep their delay and loss draws.
    rng_radio: Rng,
    /// The link's seed and this direction's stream number (to reseed in a new epoch).
    seed: u64,
    stream: u64,

    queue: VecDeque<Queued<P>>,
    queue_bytes: u64,
    in_service: Option<InService>,
    /// When the channel last finished sending (None: never used, i.e. not acquired).
    last_busy_end: Option<SimTime>,
    in_flight: VecDeque<InFlight<P>>,
    last_delivery: SimTime,
    /// Latest `now` seen, to catch callers that move time backwards.
    clock: SimTime,

    counters: Counters,
    events: Option<Vec<Event>>,
}

/// The random processes of a direction, each with its own stream of the link's seed (so
/// turning one on does not shift the others' draws), for [`Direction::new`] and
/// [`Direction::restart`] alike.
#[derive(Clone, Copy)]
enum Draw {
    Delay = 1,
    Loss = 2,
    Fec = 3,
    Radio = 4,
}

impl Draw {
    /// This process's stream in direction `stream` of a link seeded `seed`.
    fn rng(self, seed: u64, stream: u64) -> Rng {
        Rng::new(seed, stream * 16 + self as u64)
    }
}

impl<P> Direction<P> {
    /// Builds a direction from its spec and (loaded) rate; `seed` and `stream` pick the random
    /// streams; `outages` is shared in content with the other direction.
    pub fn new(
        spec: &DirectionSpec,
        rate: &Rate,
        time_scale: f64,
        seed: u64,
        stream: u64,
        outages: Outages,
    ) -> Self {
        let k = time_scale;
        let serializer = match rate {
            Rate::Kbps(kbps) => Serializer::Constant {
                bytes_per_us: kbps * k * 1000.0 / 8.0 / 1e6,
            },
            Rate::Trace(t) => Serializer::Trace(TraceCursor {
                trace: t.clone(),
                time_scale: k,
                origin: SimTime::ZERO,
                cycle: 0,
                index: 0,
                leftover: None,
            }),
        };
        let JitterSpec {
            spread_ms,
            tail_prob,
            tail_max_ms,
        } = spec.jitter;
        Direction {
            serializer,
            base_delay: scaled_ms(spec.base_delay_ms, k),
            jitter: Jitter {
                spread: scaled_ms(spread_ms, k),
                tail_prob,
                tail_max: scaled_ms(tail_max_ms.max(spread_ms), k),
            },
            radio: spec.radio.as_ref().map(|r: &RadioSpec| Radio {
                setup_after_idle: scaled_ms(r.setup_after_idle_ms, k),
                setup: scaled_ms(r.setup_ms, k),
                setup_spread: scaled_ms(r.setup_spread_ms, k),
                release_after_idle: scaled_ms(r.release_after_idle_ms, k),
                reacquire: scaled_ms(r.reacquire_ms, k),
            }),
            queue_limit: spec.queue_bytes,
            random_loss: spec.loss.random,
            gilbert: spec
                .loss
                .gilbert
                .clone()
                .map(|spec| Gilbert { spec, bad: false }),
            fec: spec
                .fec
                .as_ref()
                .map(|f| FecModel::new(f, Draw::Fec.rng(seed, stream))),
            arq_delay: scaled_ms(spec.fec.as_ref().map_or(0.0, |f| f.arq_delay_ms), k),
            bunching: spec.bunching.as_ref().map(|b| Bunching {
                count: b.count as usize,
                max_wait: scaled_ms(b.max_wait_ms, k),
                releasing: 0,
            }),
            outages,
            rng_delay: Draw::Delay.rng(seed, stream),
            rng_loss: Draw::Loss.rng(seed, stream),
            rng_radio: Draw::Radio.rng(seed, stream),
            seed,
            stream,
            queue: VecDeque::new(),
            queue_bytes: 0,
            in_service: None,
            last_busy_end: None,
            in_flight: VecDeque::new(),
            last_delivery: SimTime::ZERO,
            clock: SimTime::ZERO,
            counters: Counters::default(),
            events: None,
        }
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Starts this direction over at `now` as a new link of epoch `epoch` would start, so
    /// that loads started at different times meet the same link, as each Mahimahi shell does:
    /// a trace starts over (its first opportunity is `now` + its first timestamp); the outage
    /// schedule counts from `now`; loss, jitter, radio-setup and FEC draws come from the
    /// epoch's streams (epoch 0: the link's seed, as at its creation), and a Gilbert channel
    /// is in its good state. Packets queued or in flight keep going, and the radio channel
    /// keeps its state (the lab leaves an idle gap before each load, so it is released).
    pub fn restart(&mut self, now: SimTime, epoch: u64) {
        if let Serializer::Trace(c) = &mut self.serializer {
            c.restart(now);
        }
        self.outages.restart(now, epoch);
        let seed = crate::rng::epoch_seed(self.seed, epoch);
        let stream = self.stream;
        self.rng_delay = Draw::Delay.rng(seed, stream);
        self.rng_loss = Draw::Loss.rng(seed, stream);
        self.rng_radio = Draw::Radio.rng(seed, stream);
        if let Some(f) = self.fec.as_mut() {
            f.reseed(Draw::Fec.rng(seed, stream));
        }
        if let Some(g) = self.gilbert.as_mut() {
            g.bad = false;
        }
    }

    /// The latest `now` this direction has seen.
    pub fn clock(&self) -> SimTime {
        self.clock
    }

    /// Bytes waiting in the queue, the packet in service included.
    pub fn queue_bytes(&self) -> u64 {
        self.queue_bytes
    }

    /// Residual block error after FEC, if the FEC model is on.
    pub fn fec_residual_block_error(&self) -> Option<f64> {
        self.fec.as_ref().map(|f| f.residual_block_error())
    }

    pub fn set_event_log(&mut self, on: bool) {
        self.events = if on { Some(Vec::new()) } else { None };
    }

    pub fn drain_events(&mut self) -> Vec<Event> {
        self.events.as_mut().map(std::mem::take).unwrap_or_default()
    }

    fn log(&mut self, time: SimTime, kind: EventKind, bytes: usize, delay: Duration) {
        if let Some(ev) = self.events.as_mut() {
            ev.push(Event {
                time,
                kind,
                bytes,
                queue_bytes: self.queue_bytes,
                delay_us: delay.as_micros() as u64,
            });
        }
    }

    fn tick(&mut self, now: SimTime) {
        debug_assert!(
            now >= self.clock,
            "time went backwards: {now} < {}",
            self.clock
        );
        self.clock = self.clock.max(now);
    }

    /// A packet of `len` bytes arrives at the sending end of this direction.
    pub fn enqueue(&mut self, now: SimTime, len: usize, payload: P) -> Enqueued {
        self.tick(now);
        self.advance(now);
        self.counters.enqueued_packets += 1;
        self.counters.enqueued_bytes += len as u64;
        if self.queue_bytes + len as u64 > self.queue_limit {
            self.counters.dropped_queue_packets += 1;
            self.counters.dropped_queue_bytes += len as u64;
            self.log(now, EventKind::Drop, len, Duration::ZERO);
            return Enqueued::Dropped;
        }
        let mut not_before = now;
        if self.queue.is_empty() {
            if let Some(r) = &self.radio {
                let (setup, reacquire) = match self.last_busy_end {
                    None => (true, true),
                    Some(end) => {
                        let idle = now - end;
                        (idle >= r.setup_after_idle, idle >= r.release_after_idle)
                    }
                };
                if setup {
                    let spread = if r.setup_spread.is_zero() {
                        Duration::ZERO
                    } else {
                        Duration::from_nanos(
                            (r.setup_spread.as_nanos() as f64 * self.rng_radio.unit()) as u64,
                        )
                    };
                    let extra = if reacquire {
                        r.reacquire
                    } else {
                        Duration::ZERO
                    };
                    not_before = now + r.setup + spread + extra;
                }
            }
        }
        self.queue_bytes += len as u64;
        self.queue.push_back(Queued {
            payload,
            len,
            enqueued_at: now,
            not_before,
        });
        self.log(now, EventKind::Arrival, len, Duration::ZERO);
        self.advance(now);
        Enqueued::Accepted
    }

    /// Moves packets through service up to `now`.
    fn advance(&mut self, now: SimTime) {
        loop {
            if self.in_service.is_none() {
                let Some(head) = self.queue.front() else {
                    return;
                };
                let start = match self.last_busy_end {
                    Some(b) => head.not_before.max(b),
                    None => head.not_before,
                };
                let len = head.len;
                let (air, arq_delay, fec_lost) = match self.fec.as_mut() {
                    Some(f) => {
                        let o = f.send(len);
                        self.counters.arq_retransmitted_blocks += o.retransmitted_blocks;
                        let d = self.arq_delay.saturating_mul(o.arq_rounds);
                        (o.air_bytes, d, o.lost)
                    }
                    None => (len as u64, Duration::ZERO, false),
                };
                let end = self.serializer.serve(start, air, &mut self.outages);
                self.in_service = Some(InService {
                    start,
                    end,
                    arq_delay,
                    fec_lost,
                });
            }
            let Some(s) = self.in_service.as_ref() else {
                return;
            };
            if s.end > now {
                return;
            }
            let s = self.in_service.take().expect("checked above");
            let Some(q) = self.queue.pop_front() else {
                return;
            };
            self.queue_bytes -= q.len as u64;
            self.last_busy_end = Some(s.end);
            self.counters.record_queue_delay(s.start - q.enqueued_at);

            let lost = s.fec_lost || self.draw_loss();
            if lost {
                if s.fec_lost {
                    self.counters.lost_fec_packets += 1;
                }
                self.counters.lost_packets += 1;
                self.log(s.end, EventKind::Loss, q.len, s.end - q.enqueued_at);
                continue;
            }
            let mut deliver_at = s.end + self.base_delay + self.draw_jitter() + s.arq_delay;
            deliver_at = deliver_at.max(self.last_delivery);
            deliver_at = self.outages.shift(deliver_at);
            self.last_delivery = deliver_at;
            self.in_flight.push_back(InFlight {
                payload: q.payload,
                len: q.len,
                enqueued_at: q.enqueued_at,
                deliver_at,
            });
        }
    }

    fn draw_jitter(&mut self) -> Duration {
        let j = &self.jitter;
        if j.tail_prob > 0.0 && self.rng_delay.chance(j.tail_prob) {
            // Heavy tail: most excursions small, a few near the maximum.
            let u = self.rng_delay.unit();
            let extra = (j.tail_max.as_nanos() - j.spread.as_nanos()) as f64 * u * u;
            j.spread + Duration::from_nanos(extra as u64)
        } else if j.spread > Duration::ZERO {
            Duration::from_nanos((j.spread.as_nanos() as f64 * self.rng_delay.unit()) as u64)
        } else {
            Duration::ZERO
        }
    }

    fn draw_loss(&mut self) -> bool {
        let mut lost = self.rng_loss.chance(self.random_loss);
        if let Some(g) = self.gilbert.as_mut() {
            let flip = if g.bad {
                g.spec.p_bad_to_good
            } else {
                g.spec.p_good_to_bad
            };
            if self.rng_loss.chance(flip) {
                g.bad = !g.bad;
            }
            let p = if g.bad {
                g.spec.loss_bad
            } else {
                g.spec.loss_good
            };
            lost |= self.rng_loss.chance(p);
        }
        lost
    }

    /// The next packet that leaves the link by `now`, if any.
    pub fn poll_deliver(&mut self, now: SimTime) -> Option<Delivered<P>> {
        self.tick(now);
        self.advance(now);
        let front = self.in_flight.front()?;
        if front.deliver_at > now {
            return None;
        }
        if let Some(b) = self.bunching.as_mut() {
            if b.releasing == 0 {
                let ready = self
                    .in_flight
                    .iter()
                    .take(b.count)
                    .take_while(|p| p.deliver_at <= now)
                    .count();
                if ready < b.count && now < front.deliver_at + b.max_wait {
                    return None;
                }
                b.releasing = ready;
            }
            b.releasing -= 1;
        }
        let p = self.in_flight.pop_front()?;
        self.counters.delivered_packets += 1;
        self.counters.delivered_bytes += p.len as u64;
        self.log(now, EventKind::Delivery, p.len, now - p.enqueued_at);
        Some(Delivered {
            payload: p.payload,
            len: p.len,
            enqueued_at: p.enqueued_at,
            delivered_at: now,
        })
    }

    /// When something next happens (a transmission ends or a packet is due), if anything is
    /// pending. Valid after `poll_deliver` has returned `None`.
    pub fn next_wakeup(&self) -> Option<SimTime> {
        let service = self.in_service.as_ref().map(|s| s.end);
        let delivery = self.in_flight.front().map(|f| match &self.bunching {
            Some(b) if b.releasing == 0 && f.deliver_at <= self.clock => {
                let group_full = self
                    .in_flight
                    .get(b.count - 1)
                    .map(|p| p.deliver_at)
                    .unwrap_or(SimTime(u64::MAX));
                (f.deliver_at + b.max_wait).min(group_full)
            }
            _ => f.deliver_at,
        });
        match (service, delivery) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// True when nothing is queued, in service or in flight.
    pub fn is_idle(&self) -> bool {
        self.queue.is_empty() && self.in_flight.is_empty()
    }
}
