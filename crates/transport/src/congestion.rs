//! The link-aware congestion controller: a window just above the link's bandwidth-delay
//! product, learned from acknowledgements, with no slow start and no collapse on loss.
//!
//! GPRSWeb's transport (paper 001, "GPRSWeb Protocol") gave each host a credit of an estimated
//! BDP (10 KB for a GPRS 3+1 device), then kept it 10 % above the measured RTT × throughput: the
//! operator's link already shares bandwidth between users, so probing for it by filling queues
//! (as TCP does) only delays every other flow (001 "Fairness between flows": a new flow's
//! packets waited 16–20 s behind a bulk one). This controller does that:
//!
//! - the **rate** is the largest per-round-trip delivery rate of the last round trips, each
//!   sample taken over at least the minimum RTT and never faster than the packets were sent
//!   (so ACKs that arrive in bunches, as on GPRS, do not inflate it);
//! - the **RTT** is the mean RTT of two round trips' packets sent with the window below the
//!   BDP (averaged with the previous measurement), so that no queue is in it, re-measured
//!   every `measure_every` round trips by lowering the window below the last RTT's BDP until
//!   what was in flight above it has left (a measurement the window set, not the path, is
//!   taken as it is and repeated at once: the path got faster). Its mean, not its minimum: on a
//!   radio link the RTT varies with scheduling and block-flow set-up far more than with the
//!   queue, and a window of rate × minimum RTT leaves such a link idle. An RTT measured with
//!   the queue in it would feed back into a larger window and a longer queue (any smoothed
//!   RTT does); one measured below the BDP cannot;
//! - the **window** is rate × (RTT + room for how it varies: 001's 10 %, or twice the mean
//!   deviation of the measured RTTs if more), and one packet. Below the BDP, each round trip's
//!   rate is the window's worth, so the window grows by the headroom per round trip until the
//!   link is full; above it, the rate stops growing. A loss does not lower it: the estimates
//!   are kept through an outage;
//! - a **cold start** (nothing remembered) doubles the window per round trip from
//!   `initial_window` until the rate stops growing, a loss, or a queue a quarter as long as
//!   the minimum RTT; a connection that can start from what the previous one learned does.
//!
//! [`LinkAware`] is the pure core (inputs carry `now`; no clock, no I/O); [`Controller`] adapts
//! it to quinn's `congestion::Controller`, and [`ControllerFactory`] remembers what the last
//! connection learned so the next one starts there.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::windowed::Windowed;

/// Settings of the link-aware controller. The defaults are the ones the papers justify.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// The window before anything is measured and nothing is remembered: GPRS 3+1's BDP
    /// (001: "for 3+1 class GPRS devices this initial estimate is 10KB").
    pub initial_window: u64,
    /// Never below this many bytes (a few packets keep the ACK clock going).
    pub min_window: u64,
    /// Never above this many bytes.
    pub max_window: u64,
    /// The window is this × rate × RTT (001: "10% higher than the measured RTT-throughput
    /// product, to allow the link to remain fully utilised in the presence of typical levels
    /// of jitter").
    pub headroom: f64,
    /// The cold start's growth per round trip.
    pub startup_gain: f64,
    /// The rate is the largest of this many round trips'.
    pub rate_rounds: u64,
    /// Round trips between two RTT measurements.
    pub measure_every: u64,
    /// While the RTT is measured the window is this × the latest rate × the minimum RTT
    /// (below the BDP: no queue).
    pub measure_gain: f64,
    /// Hold the stream data buffered for sending to what the window can send
    /// ([`LinkAware::stream_budget`]), so that acknowledgements always go out: quinn sends
    /// none on its own while its window is full and stream data waits (see
    /// docs/transport.md, "A limit of quinn").
    pub ack_room: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            initial_window: 10 * 1024,
            min_window: 4 * 1200,
            max_window: 64 * 1024 * 1024,
            headroom: 1.1,
            startup_gain: 2.0,
            rate_rounds: 10,
            // About three round trips below the BDP in forty: 1–2 % of the link.
            measure_every: 40,
            measure_gain: 0.85,
            ack_room: true,
        }
    }
}

/// What a connection learned about the link: enough to start the next one at its BDP.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinkEstimate {
    /// Delivery rate, bytes per second.
    pub rate: f64,
    /// The mean RTT with no queue.
    pub rtt: Duration,
    /// The smallest RTT seen.
    pub min_rtt: Duration,
    /// The rate was never measured with the link full (the connection only ever had less to
    /// send than the link carries, or ended in its cold start): the link carries at least
    /// this much, maybe more.
    pub lower_bound: bool,
}

impl LinkEstimate {
    /// Bytes the link holds in flight with no queue: rate × RTT.
    pub fn bdp(&self) -> f64 {
        self.rate * self.rtt.as_secs_f64()
    }
}

/// Send records kept for rate samples; beyond this (acknowledgements stopped coming) the
/// oldest are dropped.
const MAX_SEND_RECORDS: usize = 1 << 16;

/// How many mean deviations of the measured RTT the window covers above the mean.
const SPREAD_COVERED: f64 = 1.5;

/// The most queue-free RTTs the window's floor covers (see [`LinkAware::window`]): three
/// gave 95 % of four's goodput over the UMTS trace, five twice its queue over EV-DO and LTE.
const FLOOR_RTTS: u32 = 4;

/// A radio link's delivery gaps: the cold start takes acknowledgements late by less than
/// twice this for a queue only when they keep coming for this long (on a short path, late by
/// less than half the minimum RTT, for that long). Gaps are tens of milliseconds whatever
/// the RTT, so a satellite's or a GPRS link's queue is still seen at once.
const STARTUP_JITTER: Duration = Duration::from_millis(40);

/// The payload share of a full packet (a 1350-byte datagram carries 1290 bytes of stream
/// data: IP, UDP, QUIC's short header, the STREAM frame's and the AEAD tag's bytes).
const PAYLOAD_SHARE: f64 = 0.95;

/// RTT samples kept per measurement for their spread.
const MAX_MEASURED: usize = 256;

/// The mean absolute deviation of `samples` from `mean`.
fn mean_deviation(samples: &[Duration], mean: Duration) -> Duration {
    if samples.is_empty() {
        return Duration::ZERO;
    }
    let total: Duration = samples.iter().map(|&s| s.abs_diff(mean)).sum();
    total / samples.len() as u32
}

/// Where the controller is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Growing by `startup_gain` per round trip.
    Startup,
    /// The window below the BDP, until what was in flight above it has left.
    Drain,
    /// Still below the BDP: the mean RTT of the packets sent over one round trip from here is
    /// the queue-free RTT.
    Measure,
    /// headroom × rate × RTT.
    Cruise,
}

/// The controller's state. Tell it what was sent, acknowledged and lost; read
/// [`LinkAware::window`].
#[derive(Clone, Debug)]
pub struct LinkAware {
    cfg: Config,
    window: u64,
    phase: Phase,
    /// Largest delivery-rate sample per round trip, over the last `rate_rounds` of them.
    rate: Windowed<f64>,
    /// The queue-free mean RTT, once measured (or remembered).
    rtt: Option<Duration>,
    min_rtt: Option<Duration>,
    /// Bytes acknowledged so far, when the last acknowledgement came, and when the packet it
    /// acknowledged had been sent.
    delivered: u64,
    delivered_time: Option<Instant>,
    first_sent_time: Option<Instant>,
    in_flight: u64,
    /// Per send (in send order): the delivery state then, from which an acknowledgement makes
    /// a rate sample robust to ACK compression (the larger of the send and the ack interval).
    sends: VecDeque<SendRecord>,
    round: Round,
    rounds: u64,
    /// Rounds whose sample entered the rate filter (its slots).
    rate_rounds: u64,
    /// The round trip at which the RTT was last measured, and whether a measurement is due
    /// before `measure_every` has passed (the link got slower).
    measured_at: u64,
    measure_due: bool,
    /// The link changed since the RTT was measured: the next measurement replaces it.
    rtt_stale: bool,
    /// The mean deviation of the RTTs measured with the queue-free RTT.
    rtt_spread: Duration,
    /// The RTTs of the measurement under way.
    measured: Vec<Duration>,
    /// While measuring: sends from this instant count, and their RTTs so far.
    measure_from: Option<Instant>,
    measure_sum: Duration,
    measure_samples: u32,
    /// Window-limited round trips in a row well below the rate estimate.
    slower_rounds: u32,
    /// Best rate when the cold start last grew by a quarter, and rounds since.
    startup_best: f64,
    startup_flat_rounds: u32,
    startup_queued_acks: u32,
    /// When the acknowledgements in a row showing a queue began to come.
    startup_queued_since: Option<Instant>,
    /// When the initial window's worth had been acknowledged: the packets sent before it
    /// (the handshake's and the initial flight) went out blind and queue behind one another
    /// on a slow link, which says nothing about a queue of the link's own.
    initial_flight_acked: Option<Instant>,
    /// The rate estimate is only a lower bound (see [`LinkEstimate::lower_bound`]).
    rate_lower_bound: bool,
    /// The sender's smoothed RTT (quinn's, which its pacer divides the window by).
    smoothed_rtt: Option<Duration>,
    /// Bytes per packet.
    mtu: u64,
}

#[derive(Clone, Copy, Debug)]
struct SendRecord {
    /// Bytes in flight after this send were within two packets of the window, or with
    /// `ack_room` of the stream budget's share of it: the sender was held by the window or
    /// the budget, not by the application.
    at_budget: bool,
    sent: Instant,
    delivered: u64,
    delivered_time: Instant,
    first_sent_time: Instant,
}

/// One round trip: from a send to its acknowledgement (it ends when a packet sent after it
/// began is acknowledged).
#[derive(Clone, Debug, Default)]
struct Round {
    /// `delivered` when it began.
    start_delivered: u64,
    best_rate: Option<f64>,
    app_limited: bool,
    /// A packet acknowledged in it was sent with the window (or the stream budget) nearly
    /// full: the window held the sender in this round trip, whatever quinn says of the rest.
    held: bool,
    lost: bool,
}

impl LinkAware {
    /// A controller that starts at `cfg.initial_window`, or at what `remembered` says: in
    /// cruise at its BDP, or, when it is only a lower bound, in the cold start from there
    /// (a connection that only ever carried small responses learned little of the link, and
    /// cruising from its rate would grow by the headroom alone, 10 % a round trip).
    pub fn new(cfg: Config, remembered: Option<LinkEstimate>) -> Self {
        let usable = remembered.filter(|e| e.rate > 0.0 && !e.rtt.is_zero());
        let mut c = LinkAware {
            window: cfg.initial_window,
            phase: match usable {
                Some(e) if !e.lower_bound => Phase::Cruise,
                _ => Phase::Startup,
            },
            rate: Windowed::max(cfg.rate_rounds),
            rtt: usable.map(|e| e.rtt),
            min_rtt: usable.map(|e| e.min_rtt),
            delivered: 0,
            delivered_time: None,
            first_sent_time: None,
            in_flight: 0,
            sends: VecDeque::new(),
            // The first round trip is the initial flight's: it ends with the acknowledgement
            // of a packet sent after the first acknowledgement came (not with that first one).
            round: Round {
                start_delivered: 1,
                ..Round::default()
            },
            rounds: 0,
            rate_rounds: 0,
            measured_at: 0,
            measure_due: false,
            rtt_stale: false,
            rtt_spread: Duration::ZERO,
            measured: Vec::new(),
            measure_from: None,
            measure_sum: Duration::ZERO,
            measure_samples: 0,
            slower_rounds: 0,
            startup_best: 0.0,
            startup_flat_rounds: 0,
            startup_queued_acks: 0,
            startup_queued_since: None,
            initial_flight_acked: None,
            rate_lower_bound: usable.is_none_or(|e| e.lower_bound),
            smoothed_rtt: None,
            mtu: 1200,
            cfg,
        };
        if let Some(e) = usable {
            c.rate.update(0, e.rate);
            c.window = c.cruise_window(e.rate).max(c.cfg.initial_window);
        }
        c.window = c.clamp(c.window as f64);
        c
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Bytes that may be in flight now: the target window, or in cruise, if more, what makes
    /// a pacer that sends 5/4 of the window per smoothed RTT (quinn's) send at headroom × the
    /// rate estimate. The smoothed RTT holds the queue and, early on, the handshake's long
    /// round trips, which the target window (rate × the queue-free RTT) leaves out; paced
    /// over it, that window would hold the sender below the link. The floor, 0.88 × rate ×
    /// smoothed RTT, is less than the link holds with that RTT's own queue in it, so it
    /// cannot build a queue of its own while the link carries the estimated rate.
    ///
    /// When the link carries less (the estimate holds its fastest bursts and what it carried
    /// before it slowed), the floor would feed on its own queue: each second of queue raised
    /// it by a second of the estimate. So the smoothed RTT it covers is at most
    /// `FLOOR_RTTS` queue-free RTTs; beyond that the smoothed RTT holds a queue, not the
    /// handshake or the link's jitter. A 4 MB transfer over the EV-DO trace (its rate falls
    /// from ~50 to ~5 KB/s for twenty seconds) filled the link's 1 MB queue without the cap,
    /// and over the UMTS, EV-DO and LTE traces the cap took the mean queue from 183, 171
    /// and 298 KB to 41, 44 and 103 KB, losses from 80, 47 and 783 to 0, 0 and 35, at 98 %,
    /// 98 % and 100 % of the goodput (`tests/link_sim.rs`, `trace_links_keep_their_queues`).
    pub fn window(&self) -> u64 {
        const PACER_GAIN: f64 = 1.25;
        let floor = match (self.phase, self.rate.best(), self.smoothed_rtt) {
            (Phase::Cruise, Some(rate), Some(srtt)) => {
                let srtt = match self.rtt.or(self.min_rtt) {
                    Some(rtt) => srtt.min(rtt * FLOOR_RTTS),
                    None => srtt,
                };
                self.clamp(self.cfg.headroom * rate * srtt.as_secs_f64() / PACER_GAIN)
            }
            _ => 0,
        };
        self.window.max(floor)
    }

    /// The sender's smoothed RTT changed (see [`LinkAware::window`]).
    pub fn on_smoothed_rtt(&mut self, srtt: Duration) {
        self.smoothed_rtt = Some(srtt);
    }

    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// Round trips measured so far.
    pub fn rounds(&self) -> u64 {
        self.rounds
    }

    /// The current estimate, once the rate and the RTT are known.
    pub fn estimate(&self) -> Option<LinkEstimate> {
        Some(LinkEstimate {
            rate: self.rate.best()?,
            rtt: self.rtt?,
            min_rtt: self.min_rtt?,
            lower_bound: self.rate_lower_bound,
        })
    }

    /// The delivery-rate estimate so far, bytes per second, before the RTT is measured too
    /// (in the cold start: what the link carried at least).
    pub fn rate(&self) -> Option<f64> {
        self.rate.best()
    }

    /// Sending rate for a pacer, bytes per second: headroom × the delivery-rate estimate.
    pub fn pacing_rate(&self) -> Option<f64> {
        self.rate.best().map(|r| r * self.cfg.headroom)
    }

    /// The path's packet size changed.
    pub fn set_mtu(&mut self, mtu: u16) {
        self.mtu = u64::from(mtu.max(1200));
    }

    /// `bytes` were sent at `now`.
    pub fn on_sent(&mut self, now: Instant, bytes: u64) {
        if self.in_flight == 0 {
            // From idle: the next rate sample measures from here, not across the idle time.
            self.delivered_time = Some(now);
            self.first_sent_time = Some(now);
        }
        if self.sends.len() >= MAX_SEND_RECORDS {
            self.sends.pop_front();
        }
        self.in_flight += bytes;
        // Held to the stream budget, what is in flight is the budget's payload in packets
        // that carry a little more of it than `PAYLOAD_SHARE` (1,300 of 1,350 bytes): at a
        // 300 KB window that falls 4 KB short of the window, so the budget, not the window,
        // is what a held sender comes within two packets of.
        let full = self.stream_budget().unwrap_or_else(|| self.window());
        let at_budget = self.in_flight + 2 * self.mtu >= full;
        self.sends.push_back(SendRecord {
            at_budget,
            sent: now,
            delivered: self.delivered,
            delivered_time: self.delivered_time.unwrap_or(now),
            first_sent_time: self.first_sent_time.unwrap_or(now),
        });
    }

    /// Bytes of stream data the sender may hold unacknowledged (quinn's send window) with
    /// `ack_room`: what the window carries ([`LinkAware::sender_window`] has a packet more). quinn sends no acknowledgement
    /// by itself while stream data waits and the window is full; held to this, everything
    /// buffered can be sent, nothing waits, and acknowledgements go out as they are due.
    /// Without it, on a link loaded both ways, each end's acknowledgements waited behind its
    /// own window, both ends went silent until a probe timeout, and each end's RTT held the
    /// other's queue. At least one packet's payload. `None` without `ack_room`.
    pub fn stream_budget(&self) -> Option<u64> {
        self.cfg.ack_room.then(|| {
            let payload = self.window() as f64 * PAYLOAD_SHARE;
            (payload as u64).max((self.mtu as f64 * PAYLOAD_SHARE) as u64)
        })
    }

    /// The window quinn checks its packets against: [`LinkAware::window`], and with
    /// `ack_room` one packet more. The stream budget fills the window proper; the packet
    /// above it is what lets quinn send the budget's last packet (it checks a full packet
    /// against the window) and is otherwise used by acknowledgement-only packets alone.
    /// Without it the budget would carry a packet less than the window and a cold 10 KB
    /// response would take two round trips.
    pub fn sender_window(&self) -> u64 {
        self.window() + if self.cfg.ack_room { self.mtu } else { 0 }
    }

    /// A packet sent at `sent` carrying `bytes` was acknowledged at `now`. `app_limited`: the
    /// sender had less to send than the window allowed before this acknowledgement.
    pub fn on_ack(&mut self, now: Instant, sent: Instant, bytes: u64, app_limited: bool) {
        let rtt = now.saturating_duration_since(sent);
        let min_rtt = self.min_rtt.map_or(rtt, |m| m.min(rtt));
        self.min_rtt = Some(min_rtt);
        self.in_flight = self.in_flight.saturating_sub(bytes);
        self.delivered += bytes;
        self.delivered_time = Some(now);
        if self.initial_flight_acked.is_none() && self.delivered >= self.cfg.initial_window {
            self.initial_flight_acked = Some(now);
        }

        match self.phase {
            // In the cold start, acknowledgements in a row with a queue a quarter as long as
            // the minimum RTT end it at once: waiting for the round trip's end would double
            // the window again on top of that queue.
            Phase::Startup => {
                if self.initial_flight_acked.is_none_or(|t| sent < t) {
                    // The initial flight: its RTTs hold its own serialization.
                } else if rtt > min_rtt * 5 / 4 + Duration::from_millis(5) {
                    // Late by more than a radio link's delivery gaps explain ends it at once;
                    // less late, the lateness must last: a radio link delivers in bursts (a 3G
                    // trace's deliveries come 10–30 ms apart, at times more), and the packets
                    // behind one gap all come late together. That is the link's jitter, not a
                    // queue of this sender's.
                    let since = *self.startup_queued_since.get_or_insert(now);
                    self.startup_queued_acks += 1;
                    let half = min_rtt / 2;
                    let long = rtt - min_rtt > half.min(2 * STARTUP_JITTER)
                        || now >= since + half.min(STARTUP_JITTER);
                    if self.startup_queued_acks >= 2 && long {
                        self.start_drain(self.rate.best());
                    }
                } else {
                    self.startup_queued_acks = 0;
                    self.startup_queued_since = None;
                }
            }
            Phase::Drain if self.in_flight <= self.window => {
                self.phase = Phase::Measure;
                self.measure_from = Some(now);
                self.measure_sum = Duration::ZERO;
                self.measure_samples = 0;
            }
            Phase::Measure => {
                let from = self.measure_from.unwrap_or(now);
                if sent >= from {
                    self.measure_sum += rtt;
                    self.measure_samples += 1;
                    if self.measured.len() < MAX_MEASURED {
                        self.measured.push(rtt);
                    }
                    // Two round trips' sends (as long as the RTT, at most four minimum RTTs
                    // each), four packets at least: on GPRS one round trip is a handful of
                    // packets whose RTTs vary by seconds.
                    let span = self.rtt.unwrap_or(min_rtt).min(min_rtt * 4).max(min_rtt) * 2;
                    if sent >= from + span && self.measure_samples >= 4 {
                        let mean = self.measure_sum / self.measure_samples;
                        let spread = mean_deviation(&self.measured, mean);
                        self.measured.clear();
                        // An RTT as long as the window takes to drain at the link's rate
                        // (Little's law) says the window, not the path, set it: the link was
                        // full, so a queue of this sender's may be in it (the path got faster
                        // since the window was sized from the last measurement). Below the
                        // BDP the path's RTT is longer than that. Taken as it is and measured
                        // again at once, below it, until the path sets the RTT.
                        let queued = self.rate.best().is_some_and(|rate| {
                            let drain = self.window as f64 / rate;
                            (0.9 * drain..=1.05 * drain).contains(&mean.as_secs_f64())
                        });
                        // Averaged with the last measurement unless the link changed.
                        (self.rtt, self.rtt_spread) = match (self.rtt, self.rtt_stale || queued) {
                            (Some(last), false) => {
                                (Some((last + mean) / 2), (self.rtt_spread + spread) / 2)
                            }
                            _ => (Some(mean), spread),
                        };
                        self.measure_due |= queued;
                        self.rtt_stale = false;
                        self.measured_at = self.rounds;
                        self.phase = Phase::Cruise;
                        if let Some(rate) = self.rate.best() {
                            self.window = self.cruise_window(rate);
                        }
                    }
                }
            }
            _ => {}
        }
        // The send record of this packet (sends of one instant share their state).
        let at = self.sends.partition_point(|r| r.sent < sent);
        let record = self.sends.get(at).copied().filter(|r| r.sent == sent);
        // Held to the stream budget, the sender never fills the window and quinn calls it
        // application-limited; a packet sent with the window within two packets of full
        // was sent by a sender the window held, and so was its round trip's (in the cold
        // start the first packets after the window doubled go out with half of it free;
        // counting those alone as application-limited doubled it only every third round trip).
        let held = self.cfg.ack_room && record.is_some_and(|r| r.at_budget);
        let round = &mut self.round;
        round.app_limited |= app_limited;
        round.held |= held;
        let Some(record) = record else {
            // Acknowledged out of order after a later send's acknowledgement: no sample.
            return;
        };
        self.first_sent_time = Some(sent);
        let send_elapsed = sent.saturating_duration_since(record.first_sent_time);
        let ack_elapsed = now.saturating_duration_since(record.delivered_time);
        let interval = send_elapsed.max(ack_elapsed);
        // Shorter than a round trip, a sample measures bunching, not the link.
        if interval >= min_rtt && !interval.is_zero() {
            let sample = (self.delivered - record.delivered) as f64 / interval.as_secs_f64();
            round.best_rate = Some(round.best_rate.map_or(sample, |r| r.max(sample)));
        }
        // Older sends are acknowledged or lost by now.
        self.sends.drain(..at);
        if record.delivered >= round.start_delivered {
            self.end_round();
        }
    }

    /// Packets sent at `sent` were declared lost at `now`. On these links a loss is an outage
    /// or a radio burst, not a full router queue, so the window stays: the rate and RTT
    /// estimates (kept through an outage) say what the link carries when it is back.
    pub fn on_loss(&mut self, _now: Instant, _sent: Instant, _persistent: bool, bytes: u64) {
        self.in_flight = self.in_flight.saturating_sub(bytes);
        self.round.lost = true;
    }

    fn end_round(&mut self) {
        let mut round = std::mem::replace(
            &mut self.round,
            Round {
                start_delivered: self.delivered,
                ..Round::default()
            },
        );
        round.app_limited &= !round.held;
        self.rounds += 1;
        let measuring = matches!(self.phase, Phase::Drain | Phase::Measure);
        // Four window-limited round trips in a row that delivered less than 60 % of the
        // estimate: the link got slower (a busier cell, a worse channel). Waiting for the
        // filter to forget the faster rounds would queue the difference for ten round trips,
        // each longer by that queue; and each packet now takes longer to serialize, so the
        // RTT is measured again.
        let slower = !measuring
            && !round.app_limited
            && !round.lost
            && matches!((round.best_rate, self.rate.best()), (Some(r), Some(best)) if r < 0.6 * best);
        self.slower_rounds = if slower { self.slower_rounds + 1 } else { 0 };
        if self.slower_rounds >= 4 {
            self.rate.clear();
            self.rate_lower_bound = true;
            self.slower_rounds = 0;
            self.measure_due = true;
            self.rtt_stale = true;
        }
        if let Some(sample) = round.best_rate {
            // An application-limited round, or one held below the BDP to measure the RTT,
            // says only that the link carries at least this much; nor do such rounds age the
            // estimate: an idle or trickling connection keeps what the link was last seen to
            // carry.
            let known = self.rate.best().unwrap_or(0.0);
            if !(round.app_limited || measuring) || sample > known {
                self.rate_rounds += 1;
                self.rate.update(self.rate_rounds, sample);
            }
            // With the window the limit in cruise, the link was full.
            if self.phase == Phase::Cruise && !round.app_limited {
                self.rate_lower_bound = false;
            }
        }
        let Some(rate) = self.rate.best() else {
            return;
        };
        match self.phase {
            Phase::Startup => {
                // A loss, or three window-limited round trips without a quarter more rate:
                // the pipe is full.
                let mut full = round.lost;
                if !round.app_limited {
                    if rate >= self.startup_best * 1.25 {
                        self.startup_best = rate;
                        self.startup_flat_rounds = 0;
                    } else {
                        self.startup_flat_rounds += 1;
                        full |= self.startup_flat_rounds >= 3;
                    }
                }
                if full {
                    self.start_drain(Some(rate));
                } else if !round.app_limited {
                    self.window = self.clamp(self.window as f64 * self.cfg.startup_gain);
                }
            }
            Phase::Drain | Phase::Measure => {}
            Phase::Cruise => {
                let due =
                    self.measure_due || self.rounds >= self.measured_at + self.cfg.measure_every;
                if due && !round.app_limited {
                    self.measure_due = false;
                    // Below the BDP whatever the estimates say: the latest rate (the filter
                    // may still hold a faster link's) over the minimum RTT (the measured RTT
                    // may hold a queue).
                    self.start_drain(Some(round.best_rate.unwrap_or(rate).min(rate)));
                } else if round.app_limited {
                    // Nothing to learn about the window's size; keep it, but never below
                    // the target.
                    self.window = self.window.max(self.cruise_window(rate));
                } else {
                    self.window = self.cruise_window(rate);
                }
            }
        }
    }

    /// Lowers the window below the BDP (`measure_gain` × `rate` × the RTT below) until what
    /// was in flight above it has left, then measures the RTT.
    ///
    /// That RTT is the queue-free RTT measured last, or the minimum RTT for the first
    /// measurement and after the link got slower (the window is then below the BDP whatever
    /// the link's jitter). A path that got faster shows in the measurement (see `on_ack`). On a link whose mean RTT is far above its minimum
    /// (GPRS: 0.6 s back to back, 2–3 s with its block-flow set-ups), a window of the minimum
    /// RTT leaves the link idle for most of the measurement's two round trips: over the link
    /// model's GPRS, measuring below the last RTT instead took a 1 MB transfer from 93.2 % to
    /// 94.5 % of the link and its mean queue from 11.7 to 11.1 KB (ten seeds,
    /// `tests/link_sim.rs`).
    fn start_drain(&mut self, rate: Option<f64>) {
        self.phase = Phase::Drain;
        let floor = match (self.rtt, self.rtt_stale) {
            (Some(rtt), false) => rtt,
            _ => self.min_rtt.unwrap_or_default(),
        };
        self.window = match rate {
            Some(r) => self.clamp(self.cfg.measure_gain * r * floor.as_secs_f64()),
            // No rate sample yet: below the initial window, which is the estimate of the
            // BDP the cold start began from.
            None => self.clamp(self.cfg.measure_gain * self.cfg.initial_window as f64),
        };
    }

    /// rate × the RTT to cover, and one packet more.
    ///
    /// The RTT to cover is the queue-free mean RTT (the minimum RTT until it has been
    /// measured) with room for how it varies: headroom × the mean, or the mean plus twice the
    /// mean deviation of the RTTs measured with it if that is more. A link whose ACKs come
    /// irregularly (GPRS: an uplink block flow set up for ACKs after 200 ms idle, 0.3–1.1 s)
    /// idles whenever its queue runs dry before the next ACK comes, and on GPRS an idle
    /// downlink is a new block-flow set-up too; 001's 10 % covers a steadier link. The spread
    /// is measured below the BDP, so it cannot grow with this sender's own queue.
    ///
    /// The extra packet: a window is used in whole packets, and on a slow link the headroom
    /// is less than one (10 % of GPRS's 5 KB), so without it the rate measured would be the
    /// rounded-down window's, and the window would never grow to the link's.
    fn cruise_window(&self, rate: f64) -> u64 {
        let rtt = self.rtt.or(self.min_rtt).unwrap_or_default().as_secs_f64();
        let covered =
            (self.cfg.headroom * rtt).max(rtt + SPREAD_COVERED * self.rtt_spread.as_secs_f64());
        self.clamp(rate * covered + self.mtu as f64)
    }

    fn clamp(&self, w: f64) -> u64 {
        (w.max(0.0) as u64).clamp(
            self.cfg.min_window,
            self.cfg.max_window.max(self.cfg.min_window),
        )
    }
}

/// What the last connection to an edge learned, shared by the connections a
/// [`ControllerFactory`] builds (a reconnect starts where the previous connection was).
#[derive(Clone, Debug, Default)]
pub struct LinkMemory(Arc<Mutex<Option<LinkEstimate>>>);

impl LinkMemory {
    pub fn get(&self) -> Option<LinkEstimate> {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
    /// Remembers `e`, unless it is only a lower bound below what is remembered: a connection
    /// that carried only small responses does not make the next one start slower than an
    /// earlier one saw the link carry.
    pub fn set(&self, e: LinkEstimate) {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match *m {
            Some(known) if e.lower_bound && known.rate > e.rate => {}
            _ => *m = Some(e),
        }
    }
}

/// The stream budget of one connection's controller ([`LinkAware::stream_budget`]), for
/// the task that sets quinn's send window to it (the controller runs inside quinn's
/// connection state and cannot set it itself).
#[derive(Debug, Default)]
pub struct SendBudget {
    bytes: std::sync::atomic::AtomicU64,
    changed: tokio::sync::Notify,
}

impl SendBudget {
    /// Bytes of stream data the connection may hold unacknowledged now.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Resolves when the budget changed since the last call.
    pub async fn changed(&self) {
        self.changed.notified().await
    }

    fn set(&self, bytes: u64) {
        if self.bytes.swap(bytes, std::sync::atomic::Ordering::Relaxed) != bytes {
            self.changed.notify_one();
        }
    }
}

/// quinn's view of the controller.
#[derive(Clone, Debug)]
pub struct Controller {
    core: LinkAware,
    memory: LinkMemory,
    initial_window: u64,
    /// Whose controller this is, for the log ([`ControllerFactory::label`]).
    label: Arc<str>,
    /// Shared with the connection's clones of this controller (`congestion_state`).
    budget: Arc<SendBudget>,
}

impl Controller {
    pub fn core(&self) -> &LinkAware {
        &self.core
    }

    /// The connection's stream budget, `None` without `ack_room`.
    pub fn send_budget(&self) -> Option<Arc<SendBudget>> {
        self.core.cfg.ack_room.then(|| self.budget.clone())
    }

    fn publish(&self) {
        if let Some(bytes) = self.core.stream_budget() {
            self.budget.set(bytes);
        }
    }
}

impl quinn::congestion::Controller for Controller {
    fn on_sent(&mut self, now: Instant, bytes: u64, _last_packet_number: u64) {
        self.core.on_sent(now, bytes);
    }

    fn on_ack(
        &mut self,
        now: Instant,
        sent: Instant,
        bytes: u64,
        app_limited: bool,
        rtt: &quinn_proto::RttEstimator,
    ) {
        self.core.on_smoothed_rtt(rtt.get());
        let rounds = self.core.rounds();
        let phase = self.core.phase();
        self.core.on_ack(now, sent, bytes, app_limited);
        if self.core.rounds() != rounds || self.core.phase() != phase {
            tracing::debug!(
                sender = %self.label,
                phase = ?self.core.phase(),
                window = self.core.window(),
                estimate = ?self.core.estimate(),
                srtt = ?rtt.get(),
                min_rtt = ?rtt.min(),
                app_limited,
                "link-aware controller"
            );
            if let Some(e) = self.core.estimate() {
                self.memory.set(e);
            }
        }
        self.publish();
    }

    fn on_congestion_event(
        &mut self,
        now: Instant,
        sent: Instant,
        is_persistent_congestion: bool,
        lost_bytes: u64,
    ) {
        self.core
            .on_loss(now, sent, is_persistent_congestion, lost_bytes);
        self.publish();
    }

    fn on_mtu_update(&mut self, new_mtu: u16) {
        self.core.set_mtu(new_mtu);
        self.publish();
    }

    fn window(&self) -> u64 {
        self.core.sender_window()
    }

    fn metrics(&self) -> quinn::congestion::ControllerMetrics {
        let mut m = quinn::congestion::ControllerMetrics::default();
        m.congestion_window = self.core.sender_window();
        m.pacing_rate = self.core.pacing_rate().map(|r| (r * 8.0) as u64);
        m
    }

    fn clone_box(&self) -> Box<dyn quinn::congestion::Controller> {
        Box::new(self.clone())
    }

    fn initial_window(&self) -> u64 {
        self.initial_window
    }

    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any> {
        self
    }
}

/// Builds link-aware controllers for quinn; each starts from what the last one learned.
#[derive(Clone, Debug)]
pub struct ControllerFactory {
    pub config: Config,
    pub memory: LinkMemory,
    /// Names the sender in the controller's log lines (`client`, `edge to 10.0.0.2`): in
    /// the lab the client's uplink and the edge's downlink controllers share one log.
    pub label: Arc<str>,
}

impl Default for ControllerFactory {
    /// Labelled `client`: the edge names each of its connections' controllers after the
    /// client's address when it accepts it ([`crate::EdgeTransport::accept`]).
    fn default() -> Self {
        ControllerFactory {
            config: Config::default(),
            memory: LinkMemory::default(),
            label: "client".into(),
        }
    }
}

impl quinn::congestion::ControllerFactory for ControllerFactory {
    fn build(
        self: Arc<Self>,
        _now: Instant,
        current_mtu: u16,
    ) -> Box<dyn quinn::congestion::Controller> {
        let mut core = LinkAware::new(self.config.clone(), self.memory.get());
        core.set_mtu(current_mtu);
        let controller = Controller {
            initial_window: core.sender_window(),
            core,
            memory: self.memory.clone(),
            label: self.label.clone(),
            budget: Arc::default(),
        };
        controller.publish();
        Box::new(controller)
    }
}

#[cfg(test)]
#[path = "congestion_tests.rs"]
mod tests;
