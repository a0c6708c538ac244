//! The controller against made-up acknowledgement sequences and a small bottleneck model, in
//! virtual time.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::*;

const MS: Duration = Duration::from_millis(1);
const MSS: u64 = 1200;

/// A bottleneck of `rate` bytes/s with a FIFO queue, a queue-free round trip of `base` plus a
/// per-packet extra delay taken in turn from `jitter`, and an optional outage during which
/// what leaves the queue is lost.
struct Pipe {
    rate: f64,
    base: Duration,
    jitter: Vec<Duration>,
    turn: usize,
    busy_until: Instant,
    /// (ack time, send time)
    acks: BinaryHeap<Reverse<(Instant, Instant)>>,
    /// (time the loss is noticed, send time)
    losses: BinaryHeap<Reverse<(Instant, Instant)>>,
    outage: Option<(Instant, Instant)>,
    /// (period, length): the link delivers nothing for `length` at the start of every
    /// `period` (a radio link's bursty deliveries; what is queued goes after the gap).
    gaps: Option<(Duration, Duration)>,
    /// The sender holds its unacknowledged payload to the controller's stream budget, as
    /// quinn's send window does in webpep, and quinn then reports every acknowledgement as
    /// application-limited (its window is never full).
    held_to_budget: bool,
    t0: Instant,
}

/// Stream data per byte of a full packet in quinn (1,300 of 1,350: more than the budget's
/// `PAYLOAD_SHARE`, which leaves room for the frames' own bytes).
const STREAM_SHARE: f64 = 1300.0 / 1350.0;

/// What a run of the sender saw.
#[derive(Debug, Default)]
struct Seen {
    delivered: u64,
    queue_area: f64,
    peak_queue: f64,
    seconds: f64,
    smallest_window: u64,
}

impl Seen {
    fn throughput(&self) -> f64 {
        self.delivered as f64 / self.seconds
    }
    fn mean_queue(&self) -> f64 {
        self.queue_area / self.seconds
    }
}

impl Pipe {
    fn new(t0: Instant, rate: f64, base: Duration) -> Self {
        Pipe {
            rate,
            base,
            jitter: vec![Duration::ZERO],
            turn: 0,
            busy_until: t0,
            acks: BinaryHeap::new(),
            losses: BinaryHeap::new(),
            outage: None,
            gaps: None,
            held_to_budget: false,
            t0,
        }
    }

    fn bdp(&self) -> f64 {
        self.rate * self.base.as_secs_f64()
    }

    fn queue_at(&self, t: Instant) -> f64 {
        self.busy_until.saturating_duration_since(t).as_secs_f64() * self.rate
    }

    fn send(&mut self, now: Instant) {
        let mut start = self.busy_until.max(now);
        if let Some((period, length)) = self.gaps {
            let into = (start - self.t0).as_nanos() % period.as_nanos();
            if into < length.as_nanos() {
                start += Duration::from_nanos((length.as_nanos() - into) as u64);
            }
        }
        let depart = start + Duration::from_secs_f64(MSS as f64 / self.rate);
        self.busy_until = depart;
        match self.outage {
            Some((from, to)) if depart >= from && depart < to => {
                // Noticed once the link is back and a round trip has passed.
                self.losses.push(Reverse((to + self.base, now)));
            }
            _ => {
                let extra = self.jitter[self.turn % self.jitter.len()];
                self.turn += 1;
                self.acks.push(Reverse((depart + self.base + extra, now)));
            }
        }
    }

    /// Runs a sender with the controller from `now` to `until`. `offered`: an application
    /// that has this many bytes per second to send (None: always more than the window).
    fn drive(
        &mut self,
        c: &mut LinkAware,
        now: &mut Instant,
        until: Instant,
        offered: Option<f64>,
    ) -> Seen {
        let start = *now;
        let mut seen = Seen {
            smallest_window: c.window(),
            ..Seen::default()
        };
        let mut in_flight = 0u64;
        let mut sent = 0u64;
        // What is in flight from an earlier drive.
        in_flight += (self.acks.len() + self.losses.len()) as u64 * MSS;
        loop {
            let allowed = |sent: u64, t: Instant| match offered {
                None => true,
                Some(r) => (sent as f64) < r * t.saturating_duration_since(start).as_secs_f64(),
            };
            let held = self.held_to_budget;
            let room = |in_flight: u64, c: &LinkAware| match (held, c.stream_budget()) {
                (true, Some(budget)) => ((in_flight + MSS) as f64 * STREAM_SHARE) as u64 <= budget,
                _ => in_flight + MSS <= c.window(),
            };
            while room(in_flight, c) && allowed(sent, *now) {
                c.on_sent(*now, MSS);
                self.send(*now);
                in_flight += MSS;
                sent += MSS;
            }
            let ack = self.acks.peek().map(|r| r.0 .0);
            let loss = self.losses.peek().map(|r| r.0 .0);
            let mut next = [ack, loss].into_iter().flatten().min();
            if let Some(r) = offered {
                if in_flight + MSS <= c.window() {
                    let due = start + Duration::from_secs_f64((sent + MSS) as f64 / r);
                    next = Some(next.map_or(due, |n| n.min(due)));
                }
            }
            let next = next.expect("something is pending").max(*now);
            if next > until {
                break;
            }
            let dt = (next - *now).as_secs_f64();
            let (q0, q1) = (self.queue_at(*now), self.queue_at(next));
            seen.queue_area += (q0 + q1) / 2.0 * dt;
            seen.peak_queue = seen.peak_queue.max(q0);
            *now = next;
            if ack == Some(next) {
                let Reverse((at, sent_at)) = self.acks.pop().unwrap();
                in_flight -= MSS;
                seen.delivered += MSS;
                c.on_ack(at, sent_at, MSS, offered.is_some() || self.held_to_budget);
            } else if loss == Some(next) {
                let Reverse((at, sent_at)) = self.losses.pop().unwrap();
                in_flight -= MSS;
                c.on_loss(at, sent_at, true, MSS);
            }
            seen.smallest_window = seen.smallest_window.min(c.window());
        }
        *now = until;
        seen.seconds = (until - start).as_secs_f64();
        seen
    }
}

#[test]
fn starts_at_the_initial_window_or_at_what_was_remembered() {
    let c = LinkAware::new(Config::default(), None);
    assert_eq!(c.window(), 10 * 1024);
    let remembered = LinkEstimate {
        rate: 100_000.0,
        rtt: 220 * MS,
        min_rtt: 200 * MS,
        lower_bound: false,
    };
    let c = LinkAware::new(Config::default(), Some(remembered));
    // 1.1 × 100 KB/s × 0.22 s and a packet, with no cold start.
    assert_eq!(c.window(), 25_400);
    assert_eq!(c.phase(), Phase::Cruise);
    // Only a lower bound: the cold start, from there.
    let c = LinkAware::new(
        Config::default(),
        Some(LinkEstimate {
            lower_bound: true,
            ..remembered
        }),
    );
    assert_eq!(c.window(), 25_400);
    assert_eq!(c.phase(), Phase::Startup);
}

/// The window's floor lets the pacer (the window over the smoothed RTT) send at the rate
/// when the smoothed RTT holds more than the queue-free RTT, but covers at most four of
/// those: beyond that the smoothed RTT holds a queue, and a floor that grew with it fed on its
/// own queue whenever the link carried less than the estimate (over the EV-DO trace a bulk
/// transfer filled the link's 1 MB queue).
#[test]
fn the_windows_floor_does_not_grow_with_its_own_queue() {
    let remembered = LinkEstimate {
        rate: 100_000.0,
        rtt: 100 * MS,
        min_rtt: 100 * MS,
        lower_bound: false,
    };
    let mut c = LinkAware::new(Config::default(), Some(remembered));
    // 1.1 × 100 KB/s × 0.1 s and a packet.
    assert_eq!(c.window(), 12_200);
    // A smoothed RTT of 300 ms (the handshake's, the link's jitter): 1.1 × the rate × 0.3 s
    // over the pacer's 1.25.
    c.on_smoothed_rtt(300 * MS);
    assert_eq!(c.window(), 26_400);
    // Ten seconds: no more than four queue-free RTTs' worth.
    c.on_smoothed_rtt(10_000 * MS);
    assert_eq!(c.window(), 35_200);
}

/// A connection that carried only small responses learned a lower bound of the link (on the
/// UMTS trace, a 10 KB response's); the next one starts from it but still finds the link's
/// rate (cruising from it, a 100 KB response there ran at 38 % of the link where TCP got
/// 67 %), and the memory keeps a full estimate over a lower bound.
#[test]
fn a_lower_bound_does_not_hold_the_next_connection_back() {
    let t0 = Instant::now();
    let mut now = t0;
    let learned = LinkEstimate {
        rate: 10_000.0,
        rtt: 100 * MS,
        min_rtt: 100 * MS,
        lower_bound: true,
    };
    let mut pipe = Pipe::new(now, 100_000.0, 100 * MS);
    let start = now;
    let mut next = LinkAware::new(Config::default(), Some(learned));
    let seen = pipe.drive(&mut next, &mut now, start + Duration::from_secs(2), None);
    assert!(seen.throughput() > 0.75 * pipe.rate, "{seen:?}");
    let steady = pipe.drive(&mut next, &mut now, start + Duration::from_secs(10), None);
    assert!(steady.throughput() >= 0.95 * pipe.rate, "{steady:?}");
    let full = next.estimate().unwrap();
    assert!(!full.lower_bound, "{full:?}");

    let memory = LinkMemory::default();
    memory.set(full);
    memory.set(learned);
    assert_eq!(memory.get(), Some(full));
}

#[test]
fn acks_in_bunches_do_not_raise_the_rate_above_the_send_rate() {
    // Packets sent every 250 ms (4.8 KB/s); each fourth one's acknowledgement, 600 ms after
    // it was sent, comes with those of the three before it (GPRS's ACK bunching).
    let mut c = LinkAware::new(Config::default(), None);
    let t0 = Instant::now();
    let sends: Vec<Instant> = (0..80).map(|i| t0 + 250 * MS * i).collect();
    // (time, false = send i / true = the bunch ending with i), in time order.
    let mut events: Vec<(Instant, bool, usize)> = Vec::new();
    for (i, s) in sends.iter().enumerate() {
        events.push((*s, false, i));
        if i % 4 == 3 {
            events.push((*s + 600 * MS, true, i));
        }
    }
    events.sort();
    for (at, is_ack, i) in events {
        if is_ack {
            for sent in &sends[i - 3..=i] {
                c.on_ack(at, *sent, MSS, false);
            }
        } else {
            c.on_sent(at, MSS);
        }
    }
    let rate = c.pacing_rate().unwrap() / c.config().headroom;
    assert!(rate <= 4800.0 * 1.05, "{rate}");
    assert!(rate >= 4800.0 * 0.9, "{rate}");
}

#[test]
fn a_cold_start_finds_a_fast_links_bdp_and_keeps_its_queue_small() {
    let t0 = Instant::now();
    let mut now = t0;
    // 1 MB/s, 50 ms: a 50 KB BDP, from a 10 KB start.
    let mut pipe = Pipe::new(t0, 1_000_000.0, 50 * MS);
    let mut c = LinkAware::new(Config::default(), None);
    let warm = pipe.drive(&mut c, &mut now, t0 + Duration::from_secs(1), None);
    // The first second includes the cold start and the first RTT measurement.
    assert!(warm.throughput() > 0.65 * pipe.rate, "{warm:?}");
    let steady = pipe.drive(&mut c, &mut now, t0 + Duration::from_secs(5), None);
    assert!(steady.throughput() >= 0.97 * pipe.rate, "{steady:?}");
    assert!(steady.mean_queue() < 0.35 * pipe.bdp(), "{steady:?}");
    let e = c.estimate().unwrap();
    assert!((e.rate - pipe.rate).abs() < 0.05 * pipe.rate, "{e:?}");
    assert_eq!(
        e.min_rtt,
        50 * MS + Duration::from_secs_f64(MSS as f64 / pipe.rate)
    );
}

#[test]
fn a_jittery_gprs_like_link_is_kept_full_with_a_small_queue() {
    let t0 = Instant::now();
    let mut now = t0;
    // 4.75 KB/s, 600 ms, each packet 0-300 ms late in turn: the window must cover the
    // jitter, or the link idles while packets wait out their delay.
    let mut pipe = Pipe::new(t0, 4750.0, 600 * MS);
    pipe.jitter = (0..7).map(|i| 50 * MS * i).collect();
    let mut c = LinkAware::new(Config::default(), None);
    pipe.drive(&mut c, &mut now, t0 + Duration::from_secs(30), None);
    let steady = pipe.drive(&mut c, &mut now, t0 + Duration::from_secs(300), None);
    assert!(
        steady.throughput() >= 0.95 * pipe.rate,
        "{steady:?} {:?}",
        c.estimate()
    );
    assert!(steady.mean_queue() < 10_000.0, "{steady:?}");
}

#[test]
fn an_outage_does_not_collapse_the_window() {
    let t0 = Instant::now();
    let mut now = t0;
    let mut pipe = Pipe::new(t0, 100_000.0, 100 * MS);
    let mut c = LinkAware::new(Config::default(), None);
    pipe.drive(&mut c, &mut now, t0 + Duration::from_secs(5), None);
    let before = c.estimate().unwrap();
    let target = (0.75 * before.bdp()) as u64;
    // 20 s without a link: everything sent then is lost.
    pipe.outage = Some((now, now + Duration::from_secs(20)));
    let across = pipe.drive(&mut c, &mut now, t0 + Duration::from_secs(26), None);
    assert!(
        across.smallest_window >= target.min(c.config().initial_window),
        "{across:?} {target}"
    );
    let after = pipe.drive(&mut c, &mut now, t0 + Duration::from_secs(30), None);
    assert!(after.throughput() >= 0.95 * pipe.rate, "{after:?}");
    let e = c.estimate().unwrap();
    assert!(
        (e.rate - before.rate).abs() < 0.1 * before.rate,
        "{e:?} vs {before:?}"
    );
}

#[test]
fn app_limited_rounds_do_not_shrink_the_estimate() {
    let t0 = Instant::now();
    let mut now = t0;
    let mut pipe = Pipe::new(t0, 100_000.0, 100 * MS);
    let mut c = LinkAware::new(Config::default(), None);
    pipe.drive(&mut c, &mut now, t0 + Duration::from_secs(5), None);
    let e = c.estimate().unwrap();
    let w = c.window();
    // A minute of a trickle at a tenth of the link's rate.
    let trickle = pipe.drive(
        &mut c,
        &mut now,
        t0 + Duration::from_secs(65),
        Some(10_000.0),
    );
    assert!(
        trickle.smallest_window >= w.min((1.1 * e.bdp()) as u64),
        "{trickle:?}"
    );
    assert!(c.estimate().unwrap().rate >= 0.95 * e.rate);
}

#[test]
fn a_slower_link_is_followed() {
    let t0 = Instant::now();
    let mut now = t0;
    let mut pipe = Pipe::new(t0, 100_000.0, 200 * MS);
    let mut c = LinkAware::new(Config::default(), None);
    pipe.drive(&mut c, &mut now, t0 + Duration::from_secs(5), None);
    // The cell gets busy: a quarter of the rate, and each packet takes four times as long to
    // serialize, so the path's RTT rises too (212 ms to 248 ms): the controller must take the
    // new RTT for the path's at its next measurement rather than shrink for good.
    pipe.rate = 25_000.0;
    pipe.drive(&mut c, &mut now, t0 + Duration::from_secs(25), None);
    let rtt = c.estimate().unwrap().rtt;
    assert!(rtt >= 248 * MS && rtt < 260 * MS, "{rtt:?}");
    let steady = pipe.drive(&mut c, &mut now, t0 + Duration::from_secs(40), None);
    let e = c.estimate().unwrap();
    assert!((e.rate - pipe.rate).abs() < 0.15 * pipe.rate, "{e:?}");
    assert!(steady.throughput() >= 0.95 * pipe.rate, "{steady:?}");
    assert!(steady.mean_queue() < 0.5 * pipe.bdp(), "{steady:?}");
}

#[test]
fn a_faster_path_is_followed() {
    let t0 = Instant::now();
    let mut now = t0;
    let mut pipe = Pipe::new(t0, 100_000.0, 600 * MS);
    let mut c = LinkAware::new(Config::default(), None);
    pipe.drive(&mut c, &mut now, t0 + Duration::from_secs(60), None);
    let slow = c.estimate().unwrap().rtt;
    assert!(slow >= 600 * MS && slow < 640 * MS, "{slow:?}");
    // A shorter route: half the RTT. A window sized for the old RTT would keep 300 ms of
    // queue until the RTT is measured again below the new BDP.
    pipe.base = 300 * MS;
    pipe.drive(&mut c, &mut now, t0 + Duration::from_secs(100), None);
    let rtt = c.estimate().unwrap().rtt;
    assert!(rtt < 340 * MS, "{rtt:?}");
    let steady = pipe.drive(&mut c, &mut now, t0 + Duration::from_secs(130), None);
    assert!(steady.throughput() >= 0.95 * pipe.rate, "{steady:?}");
    assert!(steady.mean_queue() < 0.5 * pipe.bdp(), "{steady:?}");
}

#[test]
fn memory_carries_the_estimate_to_the_next_connection() {
    use quinn::congestion::ControllerFactory as _;
    let factory = Arc::new(ControllerFactory::default());
    // quinn's window: the controller's and, for the stream budget's last packet and the
    // acknowledgements, one packet (`ack_room`).
    let first = factory.clone().build(Instant::now(), 1200);
    assert_eq!(first.initial_window(), 10 * 1024 + 1200);
    factory.memory.set(LinkEstimate {
        rate: 1_000_000.0,
        rtt: 60 * MS,
        min_rtt: 50 * MS,
        lower_bound: false,
    });
    let second = factory.clone().build(Instant::now(), 1200);
    // 1.1 × 1 MB/s × 60 ms and a packet, and the packet of room.
    assert_eq!(second.initial_window(), 67_200 + 1200);
    assert_eq!(second.window(), 67_200 + 1200);
}

#[test]
fn a_bursty_links_gaps_do_not_end_the_cold_start_early() {
    let t0 = Instant::now();
    let mut now = t0;
    // 3G-like: 300 KB/s, 80 ms, and nothing delivered for 30 ms of every 100 (a trace's
    // deliveries come in bursts): the packets behind each gap come late together, which is
    // not a queue of the sender's. The cold start must grow past the 10 KB start to the
    // link's BDP (about 17 KB at the 210 KB/s the gaps leave) within its first second.
    let mut pipe = Pipe::new(t0, 300_000.0, 80 * MS);
    pipe.gaps = Some((100 * MS, 30 * MS));
    let mut c = LinkAware::new(Config::default(), None);
    let first = pipe.drive(&mut c, &mut now, t0 + Duration::from_millis(1000), None);
    let second = pipe.drive(&mut c, &mut now, t0 + Duration::from_millis(2000), None);
    let carried = 210_000.0;
    eprintln!("{first:?} {second:?} {:?} {:?}", c.phase(), c.estimate());
    assert!(first.throughput() > 0.6 * carried, "{first:?}");
    assert!(second.throughput() > 0.9 * carried, "{second:?}");
}

#[test]
fn a_sender_held_to_the_stream_budget_still_finds_and_fills_the_link() {
    // 1 MB/s, 50 ms (a 50 KB BDP from a 10 KB start), and GPRS's 4.75 KB/s, 600 ms.
    for (rate, base, least) in [(1_000_000.0, 50 * MS, 0.93), (4750.0, 600 * MS, 0.85)] {
        let t0 = Instant::now();
        let mut now = t0;
        let mut pipe = Pipe::new(t0, rate, base);
        pipe.held_to_budget = true;
        let mut c = LinkAware::new(Config::default(), None);
        let rtts = |n: u32| t0 + (base + Duration::from_secs_f64(MSS as f64 / rate)) * n;
        pipe.drive(&mut c, &mut now, rtts(40), None);
        let steady = pipe.drive(&mut c, &mut now, rtts(140), None);
        assert!(steady.throughput() >= least * rate, "{rate}: {steady:?}");
        assert!(
            steady.mean_queue() < 0.35 * pipe.bdp() + MSS as f64,
            "{rate}: {steady:?}"
        );
        // The budget is the window's payload; quinn's window has a packet more, for the
        // budget's last packet and acknowledgements. Never less than a packet's payload.
        let budget = c.stream_budget().unwrap();
        assert!(budget as f64 <= c.window() as f64 * PAYLOAD_SHARE + 1.0);
        assert!(budget >= (MSS as f64 * PAYLOAD_SHARE) as u64);
        assert_eq!(c.sender_window(), c.window() + 1200);
    }
    // A satellite's 375 KB BDP (1.25 MB/s, 300 ms) from the 10 KB start: held to the budget,
    // quinn calls every acknowledgement application-limited, yet the cold start doubles each
    // round trip and passes the BDP in the sixth (counting held packets alone, it had
    // reached 40 KB by the seventh; held within two packets of the window rather than of
    // the budget, it stopped at 320 KB).
    let (rate, base) = (1_250_000.0, 300 * MS);
    let t0 = Instant::now();
    let mut now = t0;
    let mut pipe = Pipe::new(t0, rate, base);
    pipe.held_to_budget = true;
    let mut c = LinkAware::new(Config::default(), None);
    let rtt = base + Duration::from_secs_f64(MSS as f64 / rate);
    let mut largest = 0;
    for n in 1..=7 {
        pipe.drive(&mut c, &mut now, t0 + rtt * n, None);
        largest = largest.max(c.window());
    }
    assert!(largest as f64 >= pipe.bdp(), "{largest} {:?}", c.phase());
    // Without ack_room there is no budget.
    let c = LinkAware::new(
        Config {
            ack_room: false,
            ..Config::default()
        },
        None,
    );
    assert_eq!(c.stream_budget(), None);
}
