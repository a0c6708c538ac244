//! The link model driven by a fuzzed script of packet arrivals, in the documented calling
//! order (`enqueue(now, ..)` when a packet arrives; `poll_deliver(now)` until `None`; then
//! sleep until `next_wakeup()`), with time never going backwards.
//!
//! Input: byte 0 picks the profile (0: gprs, as the brief asks; others: presets that exercise
//! outages, FEC and traces), byte 1 the time scale, bytes 2..10 the seed; then events of five
//! bytes `[d0, d1, flags, l0, l1]`: the arrival comes `u16(d0, d1) × unit[flags & 3]` after the
//! previous one (unit 1 µs, 1 ms, 10 ms, 100 ms: up to 109 minutes), on side `flags >> 2 & 1`, with
//! `1 + u16(l0, l1) % 2000` bytes; with `flags >> 3 & 1` the link starts over at the arrival in
//! epoch `flags >> 4` (`Link::restart`, as the lab does before each load: traces, outage
//! schedule and random streams), packets in flight or not.
//!
//! Checked: per side, deliveries come in FIFO order (payload ids increase), only for accepted
//! packets, never before their enqueue time, with their own length and enqueue time; every
//! wakeup is in the future once `poll_deliver` returned `None`; the queue stays within its
//! limit; the counters agree with what the driver saw (delivered + dropped + lost ≤ enqueued,
//! and = once drained).

#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use webpep_link_model::presets::preset;
use webpep_link_model::profile::{FecSpec, GilbertSpec, Rate};
use webpep_link_model::{Enqueued, Link, ResolvedProfile, Side, SimTime, Trace};

const TIME_SCALES: [f64; 6] = [1.0, 2.0, 10.0, 50.0, 0.5, 0.1];
const UNITS_US: [u64; 4] = [1, 1_000, 10_000, 100_000];
/// Wakeups allowed while draining after the script, per packet enqueued (plus a floor).
const DRAIN_WAKEUPS_PER_PACKET: u64 = 64;

fn profile(selector: u8) -> ResolvedProfile {
    let named = |n: &str| preset(n, None).unwrap().resolve(None).unwrap();
    match selector % 6 {
        1 => named("gprs-mobile"), // random outages
        2 => named("cdma-1x"),     // no radio, no bunching
        3 => {
            // gprs with FEC/ARQ, burst loss and a scheduled outage.
            let mut p = preset("gprs", None).unwrap();
            p.down.fec = Some(FecSpec {
                error_rate: 0.02,
                fec_share: 0.05,
                ..FecSpec::default()
            });
            p.up.fec = Some(FecSpec {
                error_rate: 0.05,
                arq: false,
                ..FecSpec::default()
            });
            p.down.loss.random = 0.01;
            p.up.loss.gilbert = Some(GilbertSpec {
                p_good_to_bad: 0.05,
                p_bad_to_good: 0.3,
                loss_good: 0.0,
                loss_bad: 0.5,
            });
            p.outages.scheduled = vec![[2.0, 3.0], [4.0, 1.0], [30.0, 20.0]];
            p.resolve(None).unwrap()
        }
        4 | 5 => {
            // Trace rates (bursty, with repeated timestamps and a gap), as Mahimahi traces.
            let down = Trace::parse("0\n0\n1\n1\n1\n5\n9\n9\n40\n", "down").unwrap();
            let up = Trace::parse("3\n3\n17\n", "up").unwrap();
            let mut p = preset("gprs", None).unwrap();
            if selector % 6 == 5 {
                p.down.bunching = p.up.bunching.clone();
            }
            ResolvedProfile {
                profile: p,
                down_rate: Rate::Trace(Arc::new(down)),
                up_rate: Rate::Trace(Arc::new(up)),
            }
        }
        _ => named("gprs"),
    }
}

#[derive(Default)]
struct SideLog {
    /// (enqueue time, len, accepted) per payload id.
    sent: Vec<(SimTime, usize, bool)>,
    dropped: u64,
    delivered: u64,
    last_delivered_id: Option<u32>,
}

struct Driver {
    link: Link<u32>,
    now: SimTime,
    logs: [SideLog; 2],
    limits: [u64; 2],
}

fn idx(side: Side) -> usize {
    match side {
        Side::Down => 0,
        Side::Up => 1,
    }
}

impl Driver {
    /// Polls both sides at `now` until neither delivers, checking each delivery.
    fn poll_all(&mut self) {
        for side in Side::BOTH {
            while let Some(d) = self.link.poll_deliver(side, self.now) {
                let log = &mut self.logs[idx(side)];
                let id = d.payload;
                let (at, len, accepted) = *log
                    .sent
                    .get(id as usize)
                    .unwrap_or_else(|| panic!("{side:?}: delivered unknown payload {id}"));
                assert!(accepted, "{side:?}: packet {id} was dropped but delivered");
                if let Some(last) = log.last_delivered_id {
                    assert!(
                        id > last,
                        "{side:?}: packet {id} delivered after {last}: not FIFO"
                    );
                }
                log.last_delivered_id = Some(id);
                assert_eq!(d.len, len, "{side:?}: packet {id} length");
                assert_eq!(d.enqueued_at, at, "{side:?}: packet {id} enqueue time");
                assert_eq!(
                    d.delivered_at, self.now,
                    "{side:?}: packet {id} delivered_at"
                );
                assert!(
                    d.delivered_at >= d.enqueued_at,
                    "{side:?}: packet {id} delivered at {} before its enqueue at {}",
                    d.delivered_at,
                    d.enqueued_at
                );
                log.delivered += 1;
            }
        }
        if let Some(w) = self.link.next_wakeup() {
            assert!(
                w > self.now,
                "next_wakeup {w} is not after now {} although poll_deliver returned None",
                self.now
            );
        }
        self.check_counters(false);
    }

    /// Sleeps from wakeup to wakeup up to `until` (inclusive); false if the budget ran out.
    fn run_until(&mut self, until: Option<SimTime>, mut budget: u64) -> bool {
        while let Some(w) = self.link.next_wakeup() {
            if until.is_some_and(|u| w > u) {
                break;
            }
            if budget == 0 {
                return false;
            }
            budget -= 1;
            self.now = w;
            self.poll_all();
        }
        if let Some(u) = until {
            if u > self.now {
                self.now = u;
                self.poll_all();
            }
        }
        true
    }

    fn check_counters(&self, drained: bool) {
        for side in Side::BOTH {
            let c = self.link.counters(side);
            let log = &self.logs[idx(side)];
            let q = self.link.direction(side).queue_bytes();
            assert!(
                q <= self.limits[idx(side)],
                "{side:?}: queue {q} over its limit"
            );
            assert_eq!(
                c.enqueued_packets,
                log.sent.len() as u64,
                "{side:?}: enqueued"
            );
            assert_eq!(c.dropped_queue_packets, log.dropped, "{side:?}: dropped");
            assert_eq!(c.delivered_packets, log.delivered, "{side:?}: delivered");
            let gone = c.delivered_packets + c.dropped_queue_packets + c.lost_packets;
            assert!(
                gone <= c.enqueued_packets,
                "{side:?}: delivered {} + dropped {} + lost {} > enqueued {}",
                c.delivered_packets,
                c.dropped_queue_packets,
                c.lost_packets,
                c.enqueued_packets
            );
            assert!(c.lost_fec_packets <= c.lost_packets);
            assert!(c.delivered_bytes + c.dropped_queue_bytes <= c.enqueued_bytes);
            if drained {
                assert_eq!(
                    gone, c.enqueued_packets,
                    "{side:?}: packets unaccounted for"
                );
                assert_eq!(q, 0, "{side:?}: queue not empty once drained");
                assert!(self.link.direction(side).is_idle(), "{side:?}: not idle");
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 10 {
        return;
    }
    let resolved = profile(data[0]);
    let k = TIME_SCALES[data[1] as usize % TIME_SCALES.len()];
    let seed = u64::from_le_bytes(data[2..10].try_into().unwrap());
    let limits = [
        resolved.profile.down.queue_bytes,
        resolved.profile.up.queue_bytes,
    ];
    let mut drv = Driver {
        link: Link::new(&resolved, k, seed),
        now: SimTime::ZERO,
        logs: [SideLog::default(), SideLog::default()],
        limits,
    };
    let mut packets = 0u64;
    for ev in data[10..].chunks_exact(5) {
        let delta = u64::from(u16::from_le_bytes([ev[0], ev[1]])) * UNITS_US[ev[2] as usize & 3];
        let side = if ev[2] >> 2 & 1 == 0 {
            Side::Down
        } else {
            Side::Up
        };
        let len = 1 + usize::from(u16::from_le_bytes([ev[3], ev[4]])) % 2000;
        let at = SimTime::from_micros(drv.now.as_micros() + delta);
        // Everything due before the arrival happens first (the shell sleeps until the
        // earlier of the next wakeup and the next packet).
        let budget = 1_000 + DRAIN_WAKEUPS_PER_PACKET * (packets + 1) * 4;
        assert!(
            drv.run_until(Some(at), budget),
            "more than {budget} wakeups before {at} ({packets} packets so far)"
        );
        if ev[2] >> 3 & 1 == 1 {
            drv.link.restart(drv.now, u64::from(ev[2] >> 4));
        }
        let log = &mut drv.logs[idx(side)];
        let id = log.sent.len() as u32;
        let r = drv.link.enqueue(side, drv.now, len, id);
        log.sent.push((drv.now, len, r == Enqueued::Accepted));
        if r == Enqueued::Dropped {
            log.dropped += 1;
        }
        packets += 1;
        drv.poll_all();
    }
    // Drain: everything enqueued is eventually delivered, dropped or lost.
    let budget = 1_000 + DRAIN_WAKEUPS_PER_PACKET * packets * 4;
    assert!(
        drv.run_until(None, budget),
        "the link did not drain within {budget} wakeups ({packets} packets)"
    );
    drv.check_counters(true);
});
