//! Behaviour of the model, proved exactly in virtual time.

use std::collections::HashSet;
use std::time::Duration;

use crate::presets::preset;
use crate::profile::*;
use crate::*;

fn plain(kbps: f64, delay_ms: f64) -> DirectionSpec {
    DirectionSpec {
        rate: RateSpec::Kbps(kbps),
        base_delay_ms: delay_ms,
        jitter: JitterSpec::default(),
        radio: None,
        queue_bytes: 1 << 30,
        loss: LossSpec::default(),
        fec: None,
        bunching: None,
    }
}

fn dir(spec: DirectionSpec) -> Direction<u32> {
    dir_scaled(spec, 1.0)
}

fn dir_scaled(spec: DirectionSpec, k: f64) -> Direction<u32> {
    let rate = match &spec.rate {
        RateSpec::Kbps(x) => Rate::Kbps(*x),
        RateSpec::Trace(_) => unreachable!(),
    };
    Direction::new(&spec, &rate, k, 1, 1, outage::Outages::none())
}

fn ms(x: u64) -> SimTime {
    SimTime::from_millis(x)
}

/// Drives a direction through `arrivals` (time, len, payload) in time order, polling at every
/// wakeup, until it is idle. Returns deliveries in order and the payloads the queue dropped.
pub(crate) fn drive(
    d: &mut Direction<u32>,
    arrivals: &[(SimTime, usize, u32)],
) -> (Vec<(u32, SimTime)>, Vec<u32>) {
    let mut out = Vec::new();
    let mut dropped = Vec::new();
    let mut now = d.clock();
    let mut next = 0;
    loop {
        while next < arrivals.len() && arrivals[next].0 <= now {
            let (_, len, p) = arrivals[next];
            if d.enqueue(now, len, p) == Enqueued::Dropped {
                dropped.push(p);
            }
            next += 1;
        }
        while let Some(p) = d.poll_deliver(now) {
            out.push((p.payload, p.delivered_at));
        }
        let arrival = arrivals.get(next).map(|a| a.0);
        now = match (arrival, d.next_wakeup()) {
            (Some(a), Some(w)) => a.min(w),
            (Some(a), None) => a,
            (None, Some(w)) => w,
            (None, None) => return (out, dropped),
        };
    }
}

fn drain(d: &mut Direction<u32>) -> Vec<(u32, SimTime)> {
    drive(d, &[]).0
}

pub(crate) fn at(t: u64, len: usize, p: u32) -> (SimTime, usize, u32) {
    (ms(t), len, p)
}

#[test]
fn constant_rate_serializes_then_delays() {
    // 12 kbps: 1500 bytes take exactly 1 s; 100 ms one-way.
    let mut d = dir(plain(12.0, 100.0));
    d.enqueue(ms(0), 1500, 1);
    d.enqueue(ms(0), 1500, 2);
    assert_eq!(drain(&mut d), vec![(1, ms(1100)), (2, ms(2100))]);
}

#[test]
fn time_scale_divides_delays_and_multiplies_rates() {
    let mut d = dir_scaled(plain(12.0, 100.0), 10.0);
    d.enqueue(ms(0), 1500, 1);
    assert_eq!(drain(&mut d), vec![(1, ms(110))]);
}

#[test]
fn trace_delivers_at_its_timestamps_and_loops() {
    let trace = Trace::parse("10\n20\n20\n30\n", "t").unwrap();
    let mut spec = plain(1.0, 0.0);
    spec.rate = RateSpec::Trace("t".into());
    let rate = Rate::Trace(std::sync::Arc::new(trace));
    let mut d: Direction<u32> = Direction::new(&spec, &rate, 1.0, 1, 1, outage::Outages::none());
    for i in 0..6 {
        d.enqueue(ms(0), 1500, i);
    }
    // second cycle: 30+10, 30+20, 30+20, ...
    let times: Vec<u64> = drain(&mut d)
        .iter()
        .map(|(_, t)| t.as_micros() / 1000)
        .collect();
    assert_eq!(times, vec![10, 20, 20, 30, 40, 50]);
}

/// A load started later meets the trace from its beginning again, as a new Mahimahi shell
/// would: a trace with a burst at its start and a gap after (here 3 opportunities in the
/// first 30 ms, then none until 1000 ms).
#[test]
fn a_restarted_trace_offers_its_beginning_again() {
    let trace = Trace::parse("10\n20\n30\n1000\n", "t").unwrap();
    let rate = Rate::Trace(std::sync::Arc::new(trace));
    let spec = plain(1.0, 0.0);
    let fresh =
        || -> Direction<u32> { Direction::new(&spec, &rate, 1.0, 1, 1, outage::Outages::none()) };
    let times = |d: &mut Direction<u32>, from: u64| -> Vec<u64> {
        let arrivals: Vec<_> = (0..3).map(|i| at(from, 1500, i)).collect();
        drive(d, &arrivals)
            .0
            .iter()
            .map(|(_, t)| t.as_micros() / 1000)
            .collect()
    };
    // Without a restart, packets at 2500 ms fall in the gap of the third cycle.
    let mut d = fresh();
    assert_eq!(times(&mut d, 2500), vec![3000, 3010, 3020]);
    // Restarted at 2500 ms, they meet the trace's opening burst, as at time 0.
    let mut d = fresh();
    d.restart(ms(2500), 0);
    assert_eq!(times(&mut d, 2500), vec![2510, 2520, 2530]);
    let mut d = fresh();
    assert_eq!(times(&mut d, 0), vec![10, 20, 30]);
    // A constant rate is not affected.
    let mut c = dir(plain(12.0, 0.0));
    c.restart(ms(100), 0);
    assert_eq!(drive(&mut c, &[at(0, 1500, 1)]).0[0].1, ms(1000));
}

#[test]
fn trace_opportunity_is_shared_by_small_packets_and_split_for_big_ones() {
    let trace = Trace::parse("10\n20\n30\n40\n", "t").unwrap();
    let rate = Rate::Trace(std::sync::Arc::new(trace));
    let spec = plain(1.0, 0.0);
    let mut d: Direction<u32> = Direction::new(&spec, &rate, 1.0, 1, 1, outage::Outages::none());
    let arrivals = [
        at(0, 500, 1),  // at 10, leaves 1000
        at(0, 1000, 2), // uses the rest of 10
        at(0, 2000, 3), // needs 20 and part of 30
        at(35, 100, 4), // arrives after 30: that leftover is gone, uses 40
    ];
    let got: Vec<(u32, u64)> = drive(&mut d, &arrivals)
        .0
        .into_iter()
        .map(|(p, t)| (p, t.as_micros() / 1000))
        .collect();
    assert_eq!(got, vec![(1, 10), (2, 10), (3, 30), (4, 40)]);
}

#[test]
fn full_queue_drops_tail() {
    let mut spec = plain(12.0, 0.0);
    spec.queue_bytes = 3000;
    let mut d = dir(spec);
    // the third does not fit; once the first has been sent (1 s), there is room again
    let arrivals = [
        at(0, 1500, 1),
        at(0, 1500, 2),
        at(0, 1500, 3),
        at(1000, 1500, 4),
    ];
    let (got, dropped) = drive(&mut d, &arrivals);
    assert_eq!(dropped, vec![3]);
    assert_eq!(d.counters().dropped_queue_packets, 1);
    let got: Vec<u32> = got.into_iter().map(|p| p.0).collect();
    assert_eq!(got, vec![1, 2, 4]);
    // queue delays: 0, 1 s, 1 s
    assert_eq!(
        d.counters().queue_delay_samples(),
        &[0, 1_000_000, 1_000_000]
    );
}

#[test]
fn block_flow_setup_and_release_at_the_timeout() {
    let mut spec = plain(12.0, 0.0);
    spec.radio = Some(RadioSpec {
        setup_after_idle_ms: 200.0,
        setup_ms: 150.0,
        setup_spread_ms: 0.0,
        release_after_idle_ms: 6000.0,
        reacquire_ms: 300.0,
    });
    let mut d = dir(spec);
    let tx = 1000; // a 1500-byte packet at 12 kbps
                   // First use: the channel is not held: setup + re-acquire.
    let one = |d: &mut Direction<u32>, t: u64, p: u32| drive(d, &[at(t, 1500, p)]).0;
    assert_eq!(one(&mut d, 0, 1), vec![(1, ms(450 + tx))]);
    // Busy until 1450. Next packet 100 ms later: no setup (idle < 200 ms).
    assert_eq!(one(&mut d, 1550, 2), vec![(2, ms(1550 + tx))]);
    // Idle 1 s: setup only.
    assert_eq!(one(&mut d, 3550, 3), vec![(3, ms(3550 + 150 + tx))]);
    // Last busy end 4700. Idle 5999 ms: still held.
    assert_eq!(
        one(&mut d, 4700 + 5999, 4),
        vec![(4, ms(4700 + 5999 + 150 + tx))]
    );
    // Idle exactly the timeout: released, re-acquire.
    let end = 4700 + 5999 + 150 + tx;
    assert_eq!(
        one(&mut d, end + 6000, 5),
        vec![(5, ms(end + 6000 + 450 + tx))]
    );
}

#[test]
fn block_flow_setup_spread_stays_in_its_range_and_covers_it() {
    let mut spec = plain(12_000.0, 0.0);
    spec.radio = Some(RadioSpec {
        setup_after_idle_ms: 200.0,
        setup_ms: 400.0,
        setup_spread_ms: 1600.0,
        release_after_idle_ms: 600_000.0,
        reacquire_ms: 0.0,
    });
    let mut d = dir(spec);
    // 1 ms transmissions, one every 10 s: every packet finds the link idle and pays a setup.
    let arrivals: Vec<_> = (0..400u32)
        .map(|i| at(i as u64 * 10_000, 1500, i))
        .collect();
    let got = drive(&mut d, &arrivals).0;
    let waits: Vec<u64> = got
        .iter()
        .map(|(i, t)| (t.as_micros() - *i as u64 * 10_000_000) / 1000 - 1)
        .collect();
    assert!(
        waits.iter().all(|&w| (400..=2000).contains(&w)),
        "{waits:?}"
    );
    let mean = waits.iter().sum::<u64>() as f64 / waits.len() as f64;
    assert!((mean - 1200.0).abs() < 80.0, "mean setup {mean}");
    assert!(waits.iter().any(|&w| w < 500) && waits.iter().any(|&w| w > 1900));
}

#[test]
fn one_seed_gives_one_schedule() {
    let p = preset("gprs", None).unwrap().resolve(None).unwrap();
    let run = |seed: u64| {
        let mut l: Link<u32> = Link::new(&p, 1.0, seed);
        let arrivals: Vec<_> = (0..200u32).map(|i| at(i as u64 * 500, 1000, i)).collect();
        drive(&mut l.down, &arrivals).0
    };
    assert_eq!(run(7), run(7));
    assert_ne!(run(7), run(8));
}

#[test]
fn jitter_keeps_order_and_has_a_heavy_tail() {
    let mut spec = plain(1000.0, 100.0);
    spec.jitter = JitterSpec {
        spread_ms: 100.0,
        tail_prob: 0.05,
        tail_max_ms: 3000.0,
    };
    let mut d = dir(spec);
    // Well-spaced packets so FIFO does not hide the jitter.
    let arrivals: Vec<_> = (0..2000u32).map(|i| at(i as u64 * 5000, 100, i)).collect();
    let got = drive(&mut d, &arrivals).0;
    let mut delays: Vec<u64> = got
        .iter()
        .map(|(i, t)| (t.as_micros() - *i as u64 * 5_000_000) / 1000)
        .collect();
    assert!(got.windows(2).all(|w| w[0].1 <= w[1].1 && w[0].0 < w[1].0));
    delays.sort();
    let median = delays[delays.len() / 2];
    assert!((140..=160).contains(&median), "median {median}");
    assert!(
        *delays.last().unwrap() > 1000,
        "no tail: {:?}",
        delays.last()
    );
    assert!(delays.iter().all(|&d| d <= 3101));
}

#[test]
fn random_and_burst_loss_rates() {
    let mut spec = plain(1e6, 0.0);
    spec.loss.random = 0.1;
    let mut d = dir(spec);
    let arrivals: Vec<_> = (0..20000u32).map(|i| at(i as u64, 100, i)).collect();
    let n = drive(&mut d, &arrivals).0.len();
    assert!((17600..=18400).contains(&n), "{n}");

    let mut spec = plain(1e6, 0.0);
    spec.loss.gilbert = Some(GilbertSpec {
        p_good_to_bad: 0.01,
        p_bad_to_good: 0.2,
        loss_good: 0.0,
        loss_bad: 1.0,
    });
    let mut d = dir(spec);
    let arrivals: Vec<_> = (0..50000u32).map(|i| at(i as u64, 100, i)).collect();
    let got: Vec<u32> = drive(&mut d, &arrivals)
        .0
        .into_iter()
        .map(|p| p.0)
        .collect();
    let lost = 50000 - got.len();
    // stationary P(bad) = 0.01 / 0.21 ≈ 4.8 %
    assert!((1900..=2900).contains(&lost), "{lost}");
    // losses come in bursts: mean gap-run length ≈ 1 / 0.2 = 5
    let runs = got.windows(2).filter(|w| w[1] != w[0] + 1).count();
    let mean_burst = lost as f64 / runs as f64;
    assert!((3.5..=6.5).contains(&mean_burst), "{mean_burst}");
}

#[test]
fn outage_delivers_nothing_then_resumes() {
    let spec = plain(12.0, 100.0);
    let outages = outage::Outages::new(
        &OutageSpec {
            scheduled: vec![[2.0, 20.0]],
            random: None,
        },
        1.0,
        0,
    );
    let mut d: Direction<u32> = Direction::new(&spec, &Rate::Kbps(12.0), 1.0, 1, 1, outages);
    for i in 0..5 {
        d.enqueue(ms(0), 1500, i);
    }
    let got = drain(&mut d);
    // 1st: 1.1 s; 2nd: tx ends 2.0 s, would arrive 2.1 s → after the outage at 22 s;
    // 3rd: transmission starts at 22 s.
    let times: Vec<u64> = got.iter().map(|p| p.1.as_micros() / 1000).collect();
    assert_eq!(times, vec![1100, 22000, 23100, 24100, 25100]);
    assert!(times.iter().all(|&t| !(2000..22000).contains(&t)));
}

/// Restarted, a link counts its scheduled outages from the restart and draws its random ones
/// and its losses from the epoch's streams: the same epoch gives the same schedule wherever
/// it starts; epoch 0 is the link as created.
#[test]
fn a_restart_starts_outages_and_random_streams_over() {
    let spec = OutageSpec {
        scheduled: vec![[2.0, 20.0]],
        random: None,
    };
    let mut o = outage::Outages::new(&spec, 1.0, 7);
    assert_eq!(o.shift(ms(3000)), ms(22000));
    o.restart(ms(100_000), 3);
    // The old window is gone; the scheduled one is 2 s after the restart.
    assert_eq!(o.shift(ms(3000)), ms(3000));
    assert_eq!(o.shift(ms(103_000)), ms(122_000));
    assert_eq!(o.shift(ms(101_000)), ms(101_000));

    let random = OutageSpec {
        scheduled: vec![],
        random: Some(RandomOutageSpec {
            mean_interval_s: 60.0,
            min_s: 5.0,
            max_s: 40.0,
        }),
    };
    // Windows of one epoch, relative to where it started.
    let windows = |origin: u64, epoch: u64| -> Vec<(u64, u64)> {
        let mut o = outage::Outages::new(&random, 1.0, 7);
        o.restart(ms(origin), epoch);
        o.next_after(ms(origin + 600_000));
        o.windows()
            .iter()
            .map(|(s, e)| {
                let rel = |t: SimTime| (t - ms(origin)).as_micros() as u64;
                (rel(*s), rel(*e))
            })
            .collect()
    };
    assert_eq!(windows(0, 1), windows(50_000, 1));
    assert_ne!(windows(0, 1), windows(0, 2));
    let created = {
        let mut o = outage::Outages::new(&random, 1.0, 7);
        o.next_after(ms(600_000));
        o.windows().to_vec()
    };
    let restarted: Vec<(SimTime, SimTime)> = windows(0, 0)
        .into_iter()
        .map(|(s, e)| (SimTime::from_micros(s), SimTime::from_micros(e)))
        .collect();
    assert_eq!(created, restarted);

    // Losses: the same epoch loses the same packets of a load, wherever the load starts.
    let mut lossy = plain(1000.0, 10.0);
    lossy.loss.random = 0.3;
    let lost = |start: u64, epoch: u64| -> Vec<u32> {
        let mut d = dir(lossy.clone());
        // An earlier load draws from the streams first.
        drive(
            &mut d,
            &(0..50)
                .map(|i| at(i, 100, 1000 + i as u32))
                .collect::<Vec<_>>(),
        );
        d.restart(ms(start), epoch);
        let arrivals: Vec<_> = (0..200u32)
            .map(|i| at(start + u64::from(i), 100, i))
            .collect();
        let got: HashSet<u32> = drive(&mut d, &arrivals).0.iter().map(|p| p.0).collect();
        (0..200).filter(|i| !got.contains(i)).collect()
    };
    assert_eq!(lost(10_000, 4), lost(70_000, 4));
    assert_ne!(lost(10_000, 4), lost(10_000, 5));
    assert!(!lost(10_000, 4).is_empty());
}

#[test]
fn outage_pauses_a_transmission_in_progress() {
    let spec = plain(12.0, 0.0);
    let outages = outage::Outages::new(
        &OutageSpec {
            scheduled: vec![[0.5, 10.0]],
            random: None,
        },
        1.0,
        0,
    );
    let mut d: Direction<u32> = Direction::new(&spec, &Rate::Kbps(12.0), 1.0, 1, 1, outages);
    d.enqueue(ms(0), 1500, 1);
    assert_eq!(drain(&mut d), vec![(1, ms(11000))]);
}

#[test]
fn ack_bunching_releases_groups() {
    let mut spec = plain(1e6, 10.0);
    spec.bunching = Some(BunchingSpec {
        count: 4,
        max_wait_ms: 100.0,
    });
    let mut d = dir(spec);
    let arrivals: Vec<_> = (0..6u32).map(|i| at(i as u64 * 10, 40, i)).collect();
    let got: Vec<(u32, u64)> = drive(&mut d, &arrivals)
        .0
        .into_iter()
        .map(|(p, t)| (p, t.as_micros() / 1000))
        .collect();
    // four arrive by 40 ms and go together; the last two wait for max_wait after the 5th (50 ms).
    assert_eq!(
        got,
        vec![(0, 40), (1, 40), (2, 40), (3, 40), (4, 150), (5, 150)]
    );
}

#[test]
fn fec_share_takes_capacity() {
    let mut spec = plain(12.0, 0.0);
    spec.fec = Some(FecSpec {
        fec_share: 0.25,
        block_bytes: 30,
        ..FecSpec::default()
    });
    let mut d = dir(spec);
    d.enqueue(ms(0), 1500, 1);
    // 1500 bytes at 22.5 data bytes per 30-byte block: 2000 bytes on air, 1.333 s at 12 kbps.
    assert_eq!(drain(&mut d), vec![(1, SimTime::from_micros(1_333_333))]);
}

#[test]
fn no_wakeup_when_idle() {
    let mut d = dir(plain(12.0, 10.0));
    assert_eq!(d.next_wakeup(), None);
    d.enqueue(ms(0), 1500, 1);
    assert_eq!(d.next_wakeup(), Some(ms(1000)));
    assert!(d.poll_deliver(ms(1000)).is_none());
    assert_eq!(d.next_wakeup(), Some(ms(1010)));
    drain(&mut d);
    assert!(d.is_idle());
    let _ = Duration::ZERO;
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever arrives, in whatever order of sizes and gaps: the gprs model delivers in
        /// order, never earlier than base delay + serialization after arrival, and accounts
        /// for every packet (delivered + dropped + lost = enqueued).
        #[test]
        fn gprs_conserves_and_orders(script in proptest::collection::vec((0u64..3_000, 40usize..1500), 1..200), seed in 0u64..1000) {
            let p = preset("gprs", None).unwrap().resolve(None).unwrap();
            let mut l: Link<u32> = Link::new(&p, 1.0, seed);
            let mut t = 0;
            let arrivals: Vec<_> = script
                .iter()
                .enumerate()
                .map(|(i, (gap, len))| {
                    t += gap;
                    at(t, *len, i as u32)
                })
                .collect();
            let (got, dropped) = drive(&mut l.down, &arrivals);
            let c = l.down.counters();
            prop_assert_eq!(c.delivered_packets + c.dropped_queue_packets + c.lost_packets, arrivals.len() as u64);
            prop_assert_eq!(dropped.len() as u64, c.dropped_queue_packets);
            prop_assert!(got.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1));
            for (id, when) in &got {
                let (arr, len, _) = arrivals[*id as usize];
                let min = arr + scaled_min(len, 38.0, 200.0);
                prop_assert!(*when >= min, "packet {} delivered at {} before {}", id, when, min);
            }
        }
    }

    fn scaled_min(len: usize, kbps: f64, delay_ms: f64) -> Duration {
        Duration::from_secs_f64(len as f64 * 8.0 / (kbps * 1000.0) + delay_ms / 1000.0)
            - Duration::from_micros(1)
    }
}
