#![allow(dead_code)] // each test binary uses part of it
//! A bulk sender over webpep's link model in virtual time, driven by the link-aware
//! controller or by an ideal Reno, for `link_sim.rs` and the data suite.
//!
//! The sender is window-limited and paced (as quinn paces: the window spread over a smoothed
//! RTT); each data packet is acknowledged by a small packet on the uplink; a packet is lost when
//! three later ones were acknowledged before it, or when nothing was heard for a while.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use webpep_link_model::{resolve, Enqueued, Link, Side, SimTime};
use webpep_transport::{CongestionConfig, LinkAware};

pub const PACKET: u64 = 1200;
pub const ACK: usize = 50;

#[derive(Debug)]
enum Packet {
    Data { seq: u64 },
    Ack { seq: u64 },
}

pub struct Outcome {
    /// Bytes delivered over the time from the first send to the last delivery, bytes/s.
    pub goodput: f64,
    /// The link's configured downlink rate, bytes/s.
    pub link_rate: f64,
    /// Time-weighted mean of the downlink queue while the transfer ran, bytes.
    pub mean_queue: f64,
    pub peak_queue: u64,
    pub final_window: u64,
    pub lost: u64,
    /// Goodput over the second half of the bytes (after the cold start), bytes/s.
    pub steady_goodput: f64,
    /// From the start to the last delivery.
    pub completion: Duration,
}

/// What the simulated sender needs of a congestion controller.
pub trait Window {
    /// The sender's smoothed RTT (what its pacer spreads the window over).
    fn on_smoothed_rtt(&mut self, _srtt: Duration) {}
    fn on_sent(&mut self, now: Instant, bytes: u64);
    fn on_ack(&mut self, now: Instant, sent: Instant, bytes: u64, app_limited: bool);
    fn on_loss(&mut self, now: Instant, sent: Instant, persistent: bool, bytes: u64);
    fn window(&self) -> u64;
    fn describe(&self) -> String {
        String::new()
    }
}

impl Window for LinkAware {
    fn on_smoothed_rtt(&mut self, srtt: Duration) {
        LinkAware::on_smoothed_rtt(self, srtt)
    }
    fn on_sent(&mut self, now: Instant, bytes: u64) {
        LinkAware::on_sent(self, now, bytes)
    }
    fn on_ack(&mut self, now: Instant, sent: Instant, bytes: u64, app_limited: bool) {
        LinkAware::on_ack(self, now, sent, bytes, app_limited)
    }
    fn on_loss(&mut self, now: Instant, sent: Instant, persistent: bool, bytes: u64) {
        LinkAware::on_loss(self, now, sent, persistent, bytes)
    }
    fn window(&self) -> u64 {
        LinkAware::window(self)
    }
    fn describe(&self) -> String {
        format!("{:?} {:?}", self.phase(), self.estimate())
    }
}

/// TCP as the papers measured it (Reno: slow start from two packets, halving on a loss, one
/// packet after a timeout), for the comparison.
pub struct Reno {
    cwnd: f64,
    ssthresh: f64,
    /// Losses of packets sent before this instant belong to the loss event already counted.
    recovery_until: Option<Instant>,
}

impl Reno {
    pub fn new() -> Self {
        Reno {
            cwnd: 2.0 * PACKET as f64,
            ssthresh: f64::INFINITY,
            recovery_until: None,
        }
    }
}

impl Window for Reno {
    fn on_sent(&mut self, _now: Instant, _bytes: u64) {}
    fn on_ack(&mut self, _now: Instant, _sent: Instant, bytes: u64, _app_limited: bool) {
        let mss = PACKET as f64;
        if self.cwnd < self.ssthresh {
            self.cwnd += bytes as f64;
        } else {
            self.cwnd += mss * bytes as f64 / self.cwnd;
        }
    }
    fn on_loss(&mut self, now: Instant, sent: Instant, persistent: bool, _bytes: u64) {
        if self.recovery_until.is_some_and(|t| sent < t) {
            return;
        }
        self.recovery_until = Some(now);
        self.ssthresh = (self.cwnd / 2.0).max(2.0 * PACKET as f64);
        self.cwnd = if persistent {
            PACKET as f64
        } else {
            self.ssthresh
        };
    }
    fn window(&self) -> u64 {
        self.cwnd as u64
    }
}

pub fn transfer(profile: &str, bytes: u64, seed: u64) -> Outcome {
    let mut cfg = CongestionConfig::default();
    if let Ok(w) = std::env::var("SIM_FIXED_WINDOW") {
        let w: u64 = w.parse().unwrap();
        cfg.min_window = w;
        cfg.max_window = w;
    }
    transfer_with(profile, bytes, seed, LinkAware::new(cfg, None))
}

pub fn transfer_with<C: Window>(profile: &str, bytes: u64, seed: u64, cc: C) -> Outcome {
    transfer_from(profile, bytes, seed, SimTime::ZERO, cc)
}

/// A transfer that begins `start` into the link's life (into its trace, for trace profiles).
pub fn transfer_from<C: Window>(
    profile: &str,
    bytes: u64,
    seed: u64,
    start: SimTime,
    cc: C,
) -> Outcome {
    transfer_arriving(profile, &[(Duration::ZERO, bytes)], seed, start, cc)
}

/// A transfer whose bytes the application hands to the sender in pieces: `arrivals` holds
/// (time after `start`, bytes) in time order. A page's responses reach the edge this way (the
/// document first, its subresources as the browser asks for them), so the sender's first
/// round trips are application-limited.
pub fn transfer_arriving<C: Window>(
    profile: &str,
    arrivals: &[(Duration, u64)],
    seed: u64,
    start: SimTime,
    mut cc: C,
) -> Outcome {
    let mut arrivals: std::collections::VecDeque<(SimTime, u64)> = arrivals
        .iter()
        .map(|&(after, b)| (start + after, b))
        .collect();
    let resolved = resolve(profile).expect("preset");
    let mut link: Link<Packet> = Link::new(&resolved, 1.0, seed);
    let base = Instant::now();
    let at = |t: SimTime| base + Duration::from_micros(t.as_micros());

    let mut now = start;
    let mut next_seq = 0u64;
    let mut to_send = 0u64;
    let mut outstanding: BTreeMap<u64, SimTime> = BTreeMap::new();
    let mut in_flight = 0u64;
    let mut next_send = start;
    let mut srtt: Option<Duration> = None;
    let mut last_heard = start;
    let mut delivered = 0u64;
    let mut last_delivery = start;
    let mut queue_area = 0.0f64;
    let mut peak_queue = 0u64;
    let mut lost = 0u64;
    let mut half_at: Option<SimTime> = None;
    let needed: u64 = arrivals.iter().map(|&(_, b)| b.div_ceil(PACKET)).sum();
    let trace_every: Option<u64> = std::env::var("SIM_TRACE")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .map(|ms| ms.max(1) * 1000);

    while delivered < needed * PACKET {
        assert!(
            now - start < Duration::from_secs(3600),
            "{profile}: the transfer stalled"
        );
        while arrivals.front().is_some_and(|&(t, _)| t <= now) {
            let (_, b) = arrivals.pop_front().unwrap();
            to_send += b.div_ceil(PACKET);
        }
        // Send what the window and the pacer allow.
        while to_send > 0 && in_flight + PACKET <= cc.window() && now >= next_send {
            let seq = next_seq;
            next_seq += 1;
            // A drop-tail drop is found lost like any other loss.
            let _: Enqueued = link.enqueue(Side::Down, now, PACKET as usize, Packet::Data { seq });
            cc.on_sent(at(now), PACKET);
            outstanding.insert(seq, now);
            in_flight += PACKET;
            to_send -= 1;
            let rtt = srtt.unwrap_or(Duration::from_millis(333));
            // quinn's pacer: the window over the smoothed RTT, with a little burst allowance.
            let rate = cc.window() as f64 / rtt.as_secs_f64() * 1.25;
            next_send = now + Duration::from_secs_f64(PACKET as f64 / rate);
        }
        // The receiver acknowledges each data packet.
        while let Some(d) = link.poll_deliver(Side::Down, now) {
            if let Packet::Data { seq } = d.payload {
                delivered += PACKET;
                last_delivery = now;
                if half_at.is_none() && delivered >= needed * PACKET / 2 {
                    half_at = Some(now);
                }
                link.enqueue(Side::Up, now, ACK, Packet::Ack { seq });
            }
        }
        while let Some(d) = link.poll_deliver(Side::Up, now) {
            let Packet::Ack { seq } = d.payload else {
                continue;
            };
            last_heard = now;
            if let Some(sent) = outstanding.remove(&seq) {
                in_flight -= PACKET;
                let rtt = now - sent;
                srtt = Some(match srtt {
                    None => rtt,
                    Some(s) => (s * 7 + rtt) / 8,
                });
                cc.on_smoothed_rtt(srtt.unwrap());
                cc.on_ack(at(now), at(sent), PACKET, to_send == 0);
            }
            // Packet threshold: three later packets acknowledged.
            let gone: Vec<u64> = outstanding
                .range(..seq.saturating_sub(2))
                .map(|(s, _)| *s)
                .collect();
            for s in gone {
                let sent = outstanding.remove(&s).unwrap();
                in_flight -= PACKET;
                to_send += 1;
                lost += 1;
                cc.on_loss(at(now), at(sent), false, PACKET);
            }
        }
        // Nothing heard for long: what is outstanding is lost (an outage or a tail loss).
        let quiet = srtt.map_or(Duration::from_secs(10), |s| s * 4 + Duration::from_secs(1));
        if !outstanding.is_empty()
            && now - last_heard.max(*outstanding.values().next().unwrap()) > quiet
        {
            for (_, sent) in std::mem::take(&mut outstanding) {
                in_flight -= PACKET;
                to_send += 1;
                lost += 1;
                cc.on_loss(at(now), at(sent), true, PACKET);
            }
            last_heard = now;
        }

        // Move time to the next thing that happens.
        let mut next = link.next_wakeup();
        if to_send > 0 && in_flight + PACKET <= cc.window() {
            next = Some(next.map_or(next_send.max(now), |n| n.min(next_send.max(now))));
        }
        if let Some(&(t, _)) = arrivals.front() {
            next = Some(next.map_or(t, |n| n.min(t)));
        }
        if let Some(first) = outstanding.values().next() {
            let deadline = last_heard.max(*first) + quiet + Duration::from_micros(1);
            next = Some(next.map_or(deadline, |n| n.min(deadline)));
        }
        let next = next.expect("something is pending").max(now);
        let queue = link.direction(Side::Down).queue_bytes();
        // SIM_TRACE=MS prints the controller's state every MS milliseconds.
        if let Some(every) = trace_every {
            if next.as_micros() / every != now.as_micros() / every {
                eprintln!(
                    "{now} w {} q {queue} {} srtt {:?} delivered {delivered}",
                    cc.window(),
                    cc.describe(),
                    srtt
                );
            }
        }
        peak_queue = peak_queue.max(queue);
        queue_area += queue as f64 * (next - now).as_secs_f64();
        // (Never stand still: a wakeup at `now` already happened.)
        now = if next > now {
            next
        } else {
            now + Duration::from_micros(1)
        };
    }
    let elapsed = (last_delivery - start).as_secs_f64();
    Outcome {
        goodput: delivered as f64 / elapsed,
        link_rate: resolved.down_kbps() * 1000.0 / 8.0,
        mean_queue: queue_area / elapsed,
        peak_queue,
        final_window: cc.window(),
        lost,
        steady_goodput: (delivered - needed * PACKET / 2) as f64
            / (last_delivery - half_at.unwrap_or(start)).as_secs_f64(),
        completion: last_delivery - start,
    }
}

pub fn report(profile: &str, bytes: u64, o: &Outcome) {
    eprintln!(
        "{profile} {bytes} B in {:.2} s: goodput {:.0} B/s = {:.1} % of {:.0} B/s (second half {:.1} %); mean queue {:.0} B, peak {} B; window {} B; lost {}",
        o.completion.as_secs_f64(),
        o.goodput,
        100.0 * o.goodput / o.link_rate,
        o.link_rate,
        100.0 * o.steady_goodput / o.link_rate,
        o.mean_queue,
        o.peak_queue,
        o.final_window,
        o.lost
    );
}

/// Means over transfers from several starts.
pub struct Means {
    pub goodput: f64,
    pub completion: f64,
    pub mean_queue: f64,
    pub lost: f64,
}

impl Means {
    fn of(v: &[Outcome]) -> Means {
        let mean = |f: fn(&Outcome) -> f64| v.iter().map(f).sum::<f64>() / v.len() as f64;
        Means {
            goodput: mean(|o| o.goodput),
            completion: mean(|o| o.completion.as_secs_f64()),
            mean_queue: mean(|o| o.mean_queue),
            lost: mean(|o| o.lost as f64),
        }
    }
}

/// `bytes` over `profile` from each start (seconds into the link's life: into the trace, for
/// a trace profile), with the link-aware controller (cold) and with Reno: the means of each.
pub fn beside_reno(profile: &str, bytes: u64, starts: &[f64]) -> (Means, Means) {
    beside_reno_arriving(profile, &[(Duration::ZERO, bytes)], starts)
}

/// [`beside_reno`] for bytes handed to the sender in pieces (see [`transfer_arriving`]).
pub fn beside_reno_arriving(
    profile: &str,
    arrivals: &[(Duration, u64)],
    starts: &[f64],
) -> (Means, Means) {
    let bytes: u64 = arrivals.iter().map(|&(_, b)| b).sum();
    let (mut ours, mut reno) = (Vec::new(), Vec::new());
    for &start in starts {
        let at = SimTime::from_secs_f64(start);
        let cc = LinkAware::new(CongestionConfig::default(), None);
        let o = transfer_arriving(profile, arrivals, 1, at, cc);
        report(&format!("{profile} from {start} s"), bytes, &o);
        let tcp = transfer_arriving(profile, arrivals, 1, at, Reno::new());
        report(&format!("{profile} from {start} s (Reno)"), bytes, &tcp);
        ours.push(o);
        reno.push(tcp);
    }
    let (ours, reno) = (Means::of(&ours), Means::of(&reno));
    eprintln!(
        "{profile}, {} starts: done in {:.2} s (Reno {:.2}), goodput {:.0} B/s (Reno {:.0}), mean queue {:.0} B (Reno {:.0}), lost {:.1} (Reno {:.1})",
        starts.len(),
        ours.completion,
        reno.completion,
        ours.goodput,
        reno.goodput,
        ours.mean_queue,
        reno.mean_queue,
        ours.lost,
        reno.lost
    );
    (ours, reno)
}
