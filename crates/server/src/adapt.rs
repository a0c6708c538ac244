//! What the edge does at the link it serves (issue 33): the decisions that scale with the
//! client's measured rate and RTT, as pure functions of numbers (sans-IO). The I/O shell
//! ([`crate::conn`] reading `TCP_INFO`, [`crate::proxy`] timing the transforms, the inline
//! stage, the QUIC front end reading its connection's estimates) only feeds them.
//!
//! - Inlining ([`inline_plan`]): an inlined object saves the browser one request, about a
//!   round trip; it must not cost more than that. Its bytes cross the link either way, but
//!   inlined they come before the rest of the page, so an object may be inlined when it takes
//!   at most half a round trip at the rate: `max-bytes` becomes half of rate × min RTT (the
//!   other sizes in proportion), within a quarter and four times the configured value; and
//!   the page waits for its candidates at most half a smoothed RTT (within `timeout`). A link
//!   not measured yet (a new connection of a new client, no `TCP_INFO`) gets the configured
//!   values as they are.
//! - A candidate too big ([`too_big_to_inline`]): decided from the origin's `Content-Length`
//!   when the head arrives, before the body is read or transcoded.
//! - Holding a response for a transform ([`hold_for_transform`]): the transform's expected
//!   cost (its measured cost per byte, times the queue ahead of it) against the time the
//!   bytes it is expected to save take at the measured rate. When it costs more, the original
//!   goes out now, and the variant is made in the background for the next client.

use std::time::Duration;

use crate::client_link::ClientLink;
use crate::config::InlineConfig;

/// A client's link measured well enough to scale by.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measured {
    /// Delivery rate, bytes per second (> 0).
    pub rate: u64,
    /// The least RTT seen.
    pub min_rtt: Duration,
    /// The smoothed RTT (queueing included).
    pub srtt: Duration,
}

impl Measured {
    /// The link when both its rate and its RTT are known; `None` otherwise (today's defaults
    /// apply).
    pub fn of(link: Option<&ClientLink>) -> Option<Measured> {
        let l = link?;
        let rate = l.delivery_rate.filter(|&r| r > 0)?;
        let min_rtt = l.min_rtt?;
        Some(Measured {
            rate,
            min_rtt,
            srtt: l.srtt.unwrap_or(min_rtt).max(min_rtt),
        })
    }

    /// Rate × min RTT, in bytes.
    pub fn bdp(&self) -> u64 {
        (self.rate as f64 * self.min_rtt.as_secs_f64()) as u64
    }

    /// How long `bytes` take at the rate.
    pub fn time_for(&self, bytes: u64) -> Duration {
        Duration::from_secs_f64(bytes as f64 / self.rate as f64)
    }
}

/// How far the inline sizes move from the configured ones, either way.
pub const INLINE_SCALE_BOUND: f64 = 4.0;

/// The shortest inline wait on a measured link (a candidate in the cache still comes).
pub const MIN_INLINE_WAIT: Duration = Duration::from_millis(5);

/// The inline limits for one page.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct InlinePlan {
    /// The largest stylesheet or script inlined (bytes of its text).
    pub max_bytes: usize,
    /// The largest image inlined (bytes as the client would get it).
    pub image_max_bytes: usize,
    /// Bytes inlined into the page at most.
    pub max_total: usize,
    /// How long the page waits for its candidates.
    pub wait: Duration,
    /// Scaled from a measured link (false: the configured values as they are).
    pub scaled: bool,
}

/// The inline limits for a client on `link` (see the module's head); `srtt`: the client's
/// smoothed RTT when known without its rate (a new connection): the wait scales with it,
/// the sizes stay as configured.
pub fn inline_plan(
    link: Option<Measured>,
    srtt: Option<Duration>,
    cfg: &InlineConfig,
) -> InlinePlan {
    let Some(m) = link else {
        return InlinePlan {
            max_bytes: cfg.max_bytes,
            image_max_bytes: cfg.image_max_bytes,
            max_total: cfg.max_total,
            wait: srtt.map_or(cfg.timeout.0, |rtt| inline_wait(rtt, cfg)),
            scaled: srtt.is_some(),
        };
    };
    let base = cfg.max_bytes.max(1) as f64;
    let ratio = (m.bdp() as f64 / 2.0 / base).clamp(1.0 / INLINE_SCALE_BOUND, INLINE_SCALE_BOUND);
    let scale = |n: usize| (n as f64 * ratio).round() as usize;
    InlinePlan {
        max_bytes: scale(cfg.max_bytes),
        image_max_bytes: scale(cfg.image_max_bytes),
        max_total: scale(cfg.max_total),
        wait: inline_wait(m.srtt, cfg),
        scaled: true,
    }
}

/// Half the smoothed RTT, within `timeout` (at least [`MIN_INLINE_WAIT`]).
fn inline_wait(srtt: Duration, cfg: &InlineConfig) -> Duration {
    (srtt / 2).clamp(MIN_INLINE_WAIT.min(cfg.timeout.0), cfg.timeout.0)
}

/// The most a transcode is taken to shrink an image: an image declared larger than this
/// many times `image-max-bytes` cannot come out small enough to inline.
pub const IMAGE_SHRINK: u64 = 4;

/// What a content coding may add to a small text (a gzip header and trailer).
pub const CODING_SLACK: u64 = 64;

/// A candidate the origin declared `declared` bytes long (in its coding) cannot go in:
/// decided from the head, before the body is read or transformed. Unknown length: not yet.
pub fn too_big_to_inline(image: bool, declared: Option<u64>, plan: &InlinePlan) -> bool {
    let Some(n) = declared else { return false };
    let limit = if image {
        (plan.image_max_bytes as u64).saturating_mul(IMAGE_SHRINK)
    } else {
        // A coded text is no shorter decoded (beyond the coding's own few bytes).
        plan.max_bytes as u64 + CODING_SLACK
    };
    n > limit
}

/// What a kind of transform has cost and saved, per byte of its input (a moving average of
/// its runs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CostEstimate {
    /// Seconds of work per input byte.
    pub secs_per_byte: f64,
    /// The share of its input a run saves (0–1).
    pub saved_fraction: f64,
    /// Runs seen.
    pub runs: u64,
}

impl CostEstimate {
    /// The expected work of a run over `bytes`.
    pub fn work_for(&self, bytes: u64) -> Duration {
        Duration::from_secs_f64((self.secs_per_byte * bytes as f64).clamp(0.0, 1e6))
    }

    /// The estimate after a run over `bytes_in` that gave `bytes_out` in `took` (the first
    /// run sets it; later ones move it by an eighth).
    pub fn observe(
        est: Option<CostEstimate>,
        bytes_in: u64,
        bytes_out: u64,
        took: Duration,
    ) -> Option<CostEstimate> {
        if bytes_in == 0 {
            return est;
        }
        let cost = took.as_secs_f64() / bytes_in as f64;
        let saved = bytes_in.saturating_sub(bytes_out) as f64 / bytes_in as f64;
        Some(match est {
            None => CostEstimate {
                secs_per_byte: cost,
                saved_fraction: saved,
                runs: 1,
            },
            Some(e) => CostEstimate {
                secs_per_byte: e.secs_per_byte + (cost - e.secs_per_byte) / 8.0,
                saved_fraction: e.saved_fraction + (saved - e.saved_fraction) / 8.0,
                runs: e.runs + 1,
            },
        })
    }
}

/// What to do with a response a transform wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// Transform it before it goes out (today's behaviour; also when nothing is measured).
    Transform,
    /// Send the original now; make the variant in the background for the next client.
    Defer,
    /// Send the original; no variant is made (nowhere to keep it).
    Skip,
}

/// A transform decision with its reasons.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HoldDecision {
    /// The decision.
    pub hold: Hold,
    /// The client's rate (bytes per second) the times below are at; `None`: not measured.
    pub rate: Option<u64>,
    /// The expected time the response would be held (work and queue), when estimated.
    pub cost: Option<Duration>,
    /// The time its saved bytes are expected to take at the rate (before the kind has run:
    /// the whole response's), when the link is measured.
    pub saves: Option<Duration>,
    /// The time the bytes already waiting for the client's link take at the rate: a response
    /// made now waits that long for the link anyway, so holding it costs only the work
    /// beyond it.
    pub ahead: Duration,
}

impl HoldDecision {
    /// How long a held response waits for its transform at most (what it saves and what it
    /// would wait for the link anyway): past it the original goes out and the variant is made
    /// for the next client. `None`: no bound (no link measured).
    pub fn bound(&self) -> Option<Duration> {
        self.saves.map(|s| s + self.ahead)
    }
}

/// Whether to hold a `bytes`-long response for a transform of estimate `est` on `link`,
/// after `queue`, the wait for a worker (the work ahead of it per worker), and with `ahead` bytes waiting for
/// the client's link before it ([`crate::air_budget::AirBudgets::waiting_bytes`]);
/// `cacheable`: a variant made in the background would be kept for the next client.
pub fn hold_for_transform(
    link: Option<Measured>,
    bytes: u64,
    est: Option<CostEstimate>,
    queue: Duration,
    cacheable: bool,
    ahead: u64,
) -> HoldDecision {
    let Some(m) = link else {
        return HoldDecision {
            hold: Hold::Transform,
            rate: None,
            cost: None,
            saves: None,
            ahead: Duration::ZERO,
        };
    };
    let ahead = m.time_for(ahead);
    let Some(e) = est else {
        // Not run yet: held for, but no longer than the whole response takes at the rate
        // (no transform can save more).
        return HoldDecision {
            hold: Hold::Transform,
            rate: Some(m.rate),
            cost: None,
            saves: Some(m.time_for(bytes)),
            ahead,
        };
    };
    let cost = e.work_for(bytes) + queue;
    let saves = m.time_for((bytes as f64 * e.saved_fraction.clamp(0.0, 1.0)) as u64);
    // A transform that saves nothing is never worth its time, whatever waits ahead.
    let hold = if cost <= saves + ahead && !saves.is_zero() {
        Hold::Transform
    } else if cacheable {
        Hold::Defer
    } else {
        Hold::Skip
    };
    HoldDecision {
        hold,
        rate: Some(m.rate),
        cost: Some(cost),
        saves: Some(saves),
        ahead,
    }
}

/// The kinds of transform whose costs are kept apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Image transcoding (`image/*`).
    Image,
    /// Everything else the body filters work on (compression, URL rewriting).
    Text,
}

impl Kind {
    /// Every kind, in the order of their labels.
    pub const ALL: [Kind; 2] = [Kind::Image, Kind::Text];

    /// The kind of a response of this Content-Type.
    pub fn of(content_type: Option<&str>) -> Kind {
        match content_type {
            Some(t)
                if t.trim_start()
                    .get(..6)
                    .is_some_and(|p| p.eq_ignore_ascii_case("image/")) =>
            {
                Kind::Image
            }
            _ => Kind::Text,
        }
    }

    /// Its label in `/metrics` and the access log.
    pub fn label(self) -> &'static str {
        match self {
            Kind::Image => "image",
            Kind::Text => "text",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

impl Hold {
    /// Its label in `/metrics`, the access log and `Server-Timing`.
    pub fn label(self) -> &'static str {
        match self {
            Hold::Transform => "held",
            Hold::Defer => "deferred",
            Hold::Skip => "skipped",
        }
    }
}

/// The record of what the transforms cost, per [`Kind`]: the estimates the decisions read,
/// and the counters `/metrics` shows.
#[derive(Debug, Default)]
pub struct Costs {
    estimates: std::sync::Mutex<[Option<CostEstimate>; 2]>,
    micros: [std::sync::atomic::AtomicU64; 2],
    bytes_in: [std::sync::atomic::AtomicU64; 2],
    bytes_out: [std::sync::atomic::AtomicU64; 2],
    /// By [`Hold`]: held, deferred, skipped.
    holds: [[std::sync::atomic::AtomicU64; 3]; 2],
}

impl Costs {
    /// The estimate for `kind`, once a run has been seen.
    pub fn estimate(&self, kind: Kind) -> Option<CostEstimate> {
        self.estimates.lock().unwrap_or_else(|e| e.into_inner())[kind.index()]
    }

    /// A run of `kind` over `bytes_in` that gave `bytes_out` and took `took` of work.
    pub fn ran(&self, kind: Kind, bytes_in: u64, bytes_out: u64, took: Duration) {
        use std::sync::atomic::Ordering::Relaxed;
        let i = kind.index();
        {
            let mut e = self.estimates.lock().unwrap_or_else(|e| e.into_inner());
            e[i] = CostEstimate::observe(e[i], bytes_in, bytes_out, took);
        }
        self.micros[i].fetch_add(took.as_micros() as u64, Relaxed);
        self.bytes_in[i].fetch_add(bytes_in, Relaxed);
        self.bytes_out[i].fetch_add(bytes_out, Relaxed);
    }

    /// A decision about holding a client's response of `kind` for its transform.
    pub fn decided(&self, kind: Kind, hold: Hold) {
        let h = match hold {
            Hold::Transform => 0,
            Hold::Defer => 1,
            Hold::Skip => 2,
        };
        self.holds[kind.index()][h].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Prometheus text of the counters.
    pub fn metrics_text(&self) -> String {
        use std::fmt::Write as _;
        use std::sync::atomic::Ordering::Relaxed;
        let mut s = String::new();
        let series = [
            ("webpep_transform_work_microseconds_total", "Work of the transform runs (decode, transcode, rewrite, compress of one response) on the transform workers, not their wait for a worker, by kind, in microseconds.", &self.micros),
            ("webpep_transform_bytes_in_total", "Bytes those runs were given (in the origin's coding): with the work, the cost per byte.", &self.bytes_in),
            ("webpep_transform_bytes_out_total", "Bytes those runs gave.", &self.bytes_out),
        ];
        for (name, help, values) in series {
            let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} counter");
            for k in Kind::ALL {
                let _ = writeln!(
                    s,
                    "{name}{{kind=\"{}\"}} {}",
                    k.label(),
                    values[k.index()].load(Relaxed)
                );
            }
        }
        let name = "webpep_transform_holds_total";
        let _ = writeln!(s, "# HELP {name} Client responses a transform wanted, by what was done at the client's measured rate: held for the transform, sent original with the variant made in the background (deferred; every prefetch is), or sent original (skipped).\n# TYPE {name} counter");
        for k in Kind::ALL {
            for (j, hold) in [Hold::Transform, Hold::Defer, Hold::Skip]
                .into_iter()
                .enumerate()
            {
                let _ = writeln!(
                    s,
                    "{name}{{kind=\"{}\",decision=\"{}\"}} {}",
                    k.label(),
                    hold.label(),
                    self.holds[k.index()][j].load(Relaxed)
                );
            }
        }
        s
    }
}

/// The variants being made in the background ([`Hold::Defer`]), so that clients asking for the
/// same one meanwhile get the original without starting it again.
#[derive(Debug, Default)]
pub struct Making(std::sync::Arc<std::sync::Mutex<std::collections::HashSet<String>>>);

/// A variant claimed for making; the claim ends when this is dropped.
#[derive(Debug)]
pub struct MakingClaim {
    set: std::sync::Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
    key: String,
}

impl Making {
    /// Claims the variant `key`; `None` when it is being made already.
    pub fn claim(&self, key: String) -> Option<MakingClaim> {
        let mut set = self.0.lock().unwrap_or_else(|e| e.into_inner());
        set.insert(key.clone()).then(|| MakingClaim {
            set: self.0.clone(),
            key,
        })
    }
}

impl Drop for MakingClaim {
    fn drop(&mut self) {
        self.set
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inline_plan_of(link: Option<Measured>, cfg: &InlineConfig) -> InlinePlan {
        inline_plan(link, None, cfg)
    }
    use crate::config::Secs;

    const MS: Duration = Duration::from_millis(1);

    /// A duration in whole milliseconds, rounded (the estimates are floating point).
    fn ms(d: Option<Duration>) -> Option<u64> {
        d.map(|d| (d.as_secs_f64() * 1000.0).round() as u64)
    }

    fn link(rate: u64, min_rtt_ms: u64, srtt_ms: u64) -> Measured {
        Measured {
            rate,
            min_rtt: MS * min_rtt_ms as u32,
            srtt: MS * srtt_ms as u32,
        }
    }

    fn gprs() -> Measured {
        // 38.4 kbit/s, 700 ms minimum, 2.3 s smoothed (queues).
        link(4_800, 700, 2_300)
    }

    fn lte() -> Measured {
        // 40 Mbit/s, 40 ms.
        link(5_000_000, 40, 50)
    }

    #[test]
    fn an_unmeasured_link_gets_the_configured_values() {
        let cfg = InlineConfig::default();
        let p = inline_plan(None, None, &cfg);
        assert_eq!(
            (
                p.max_bytes,
                p.image_max_bytes,
                p.max_total,
                p.wait,
                p.scaled
            ),
            (4096, 1024, 32768, Duration::from_secs(1), false)
        );
        // Rate without RTT, or RTT without rate: not measured.
        let half = ClientLink {
            delivery_rate: None,
            min_rtt: Some(MS * 40),
            srtt: Some(MS * 50),
        };
        assert_eq!(Measured::of(Some(&half)), None);
        let rate_only = ClientLink {
            delivery_rate: Some(1000),
            min_rtt: None,
            srtt: None,
        };
        assert_eq!(Measured::of(Some(&rate_only)), None);
        assert_eq!(Measured::of(None), None);
        let full = ClientLink {
            delivery_rate: Some(4_750),
            min_rtt: Some(MS * 700),
            srtt: None,
        };
        assert_eq!(Measured::of(Some(&full)), Some(link(4_750, 700, 700)));
    }

    #[test]
    fn inline_sizes_follow_rate_times_rtt_within_bounds() {
        let cfg = InlineConfig::default();
        // GPRS: 3,360 B in flight; half of it, 1,680 B, is under the default 4,096.
        let p = inline_plan_of(Some(gprs()), &cfg);
        assert_eq!(p.max_bytes, 1680);
        assert_eq!(p.image_max_bytes, 420);
        assert_eq!(p.max_total, 13_440);
        // Half the smoothed RTT would be 1.15 s: the configured 1 s bounds it.
        assert_eq!(p.wait, Duration::from_secs(1));
        assert!(p.scaled);
        // A 3G link at 2 Mbit/s and 100 ms: 12.5 KB half-BDP, three times the default.
        let p = inline_plan_of(Some(link(250_000, 100, 120)), &cfg);
        assert_eq!(p.max_bytes, 12_500);
        assert_eq!(p.wait, MS * 60);
        // LTE's 200 KB in flight: four times the default at most; the wait half its RTT.
        let p = inline_plan_of(Some(lte()), &cfg);
        assert_eq!((p.max_bytes, p.image_max_bytes), (16_384, 4_096));
        assert_eq!(p.wait, MS * 25);
        // A crawling link: a quarter of the default at least; a tiny RTT waits 5 ms.
        let p = inline_plan_of(Some(link(100, 10, 2)), &cfg);
        assert_eq!((p.max_bytes, p.image_max_bytes), (1024, 256));
        assert_eq!(p.wait, MIN_INLINE_WAIT);
        // A configured timeout under the floor wins.
        let short = InlineConfig {
            timeout: Secs(MS),
            ..cfg
        };
        assert_eq!(inline_plan_of(Some(link(100, 10, 2)), &short).wait, MS);
        // A new connection: its handshake's RTT is known, its rate not yet. The page waits
        // half that RTT; the sizes stay as configured.
        let p = inline_plan(None, Some(MS * 180), &cfg);
        assert_eq!(p.wait, MS * 90);
        assert_eq!(
            (p.max_bytes, p.image_max_bytes),
            (cfg.max_bytes, cfg.image_max_bytes)
        );
        assert!(p.scaled);
        assert_eq!(inline_plan(None, Some(MS * 5000), &cfg).wait, cfg.timeout.0);
    }

    #[test]
    fn the_declared_length_decides_before_the_body() {
        let p = inline_plan(None, None, &InlineConfig::default());
        assert!(!too_big_to_inline(false, None, &p), "unknown: wait and see");
        assert!(!too_big_to_inline(false, Some(4096), &p));
        assert!(
            !too_big_to_inline(false, Some(4096 + 64), &p),
            "a coding's slack"
        );
        assert!(too_big_to_inline(false, Some(4096 + 65), &p));
        // An image may still shrink by transcoding, to a quarter.
        assert!(!too_big_to_inline(true, Some(4096), &p));
        assert!(too_big_to_inline(true, Some(4097), &p));
        // Scaled down on GPRS, a 2 KB script is out from its head.
        let g = inline_plan_of(Some(gprs()), &InlineConfig::default());
        assert!(too_big_to_inline(false, Some(2048), &g));
    }

    #[test]
    fn the_record_keeps_kinds_apart_and_renders() {
        let c = Costs::default();
        assert_eq!(Kind::of(Some("Image/JPEG")), Kind::Image);
        assert_eq!(Kind::of(Some("text/css")), Kind::Text);
        assert_eq!(Kind::of(None), Kind::Text);
        assert_eq!(c.estimate(Kind::Image), None);
        c.ran(Kind::Image, 1000, 400, MS * 2);
        c.decided(Kind::Image, Hold::Defer);
        assert_eq!(c.estimate(Kind::Image).map(|e| e.runs), Some(1));
        assert_eq!(c.estimate(Kind::Text), None);
        let t = c.metrics_text();
        assert!(
            t.contains("webpep_transform_work_microseconds_total{kind=\"image\"} 2000\n"),
            "{t}"
        );
        assert!(
            t.contains("webpep_transform_bytes_out_total{kind=\"image\"} 400\n"),
            "{t}"
        );
        assert!(
            t.contains("webpep_transform_holds_total{kind=\"image\",decision=\"deferred\"} 1\n"),
            "{t}"
        );
        assert!(
            t.contains("webpep_transform_bytes_in_total{kind=\"text\"} 0\n"),
            "{t}"
        );
    }

    #[test]
    fn a_variant_is_made_once_at_a_time() {
        let m = Making::default();
        let c = m.claim("u img=balanced".into()).expect("first");
        assert!(m.claim("u img=balanced".into()).is_none(), "being made");
        assert!(m.claim("v img=balanced".into()).is_some(), "another");
        drop(c);
        assert!(m.claim("u img=balanced".into()).is_some(), "made: again");
    }

    #[test]
    fn estimates_average_their_runs() {
        let e = CostEstimate::observe(None, 100_000, 40_000, MS * 100).unwrap();
        assert_eq!(e.runs, 1);
        assert!((e.secs_per_byte - 1e-6).abs() < 1e-12);
        assert!((e.saved_fraction - 0.6).abs() < 1e-9);
        // A second run costing twice as much moves it an eighth of the way.
        let e2 = CostEstimate::observe(Some(e), 100_000, 100_000, MS * 200).unwrap();
        assert!((e2.secs_per_byte - 1.125e-6).abs() < 1e-12);
        assert!((e2.saved_fraction - 0.525).abs() < 1e-9);
        assert_eq!(e2.runs, 2);
        // An empty input teaches nothing.
        assert_eq!(CostEstimate::observe(Some(e), 0, 0, MS), Some(e));
    }

    #[test]
    fn a_transform_is_held_only_when_its_savings_pay_for_it() {
        // A transcode: 1 µs per byte, saves half.
        let jpeg = Some(CostEstimate {
            secs_per_byte: 1e-6,
            saved_fraction: 0.5,
            runs: 10,
        });
        let idle = Duration::ZERO;
        // 100 KB over GPRS: 100 ms of work saves 50 KB, 10.4 s of air.
        let d = hold_for_transform(Some(gprs()), 100_000, jpeg, idle, true, 0);
        assert_eq!(d.hold, Hold::Transform);
        assert_eq!((ms(d.cost), ms(d.saves)), (Some(100), Some(10_417)));
        // Over LTE the 50 KB take 10 ms: not worth 100 ms now; made for the next client.
        let d = hold_for_transform(Some(lte()), 100_000, jpeg, idle, true, 0);
        assert_eq!(d.hold, Hold::Defer);
        assert_eq!(ms(d.saves), Some(10));
        // Nowhere to keep the variant: skipped.
        let d = hold_for_transform(Some(lte()), 100_000, jpeg, idle, false, 0);
        assert_eq!(d.hold, Hold::Skip);
        // The queue ahead counts: 1 Mbit/s saves 400 ms; 100 ms of work is held, but not
        // behind a second of work on two workers (600 ms).
        let mid = Some(link(125_000, 80, 100));
        assert_eq!(
            hold_for_transform(mid, 100_000, jpeg, idle, true, 0).hold,
            Hold::Transform
        );
        let busy = hold_for_transform(mid, 100_000, jpeg, 500 * MS, true, 0);
        assert_eq!((busy.hold, ms(busy.cost)), (Hold::Defer, Some(600)));
        // ...unless the client's link has 30 KB waiting before it (240 ms at 1 Mbit/s): the
        // response would wait for those anyway, and the hold's bound grows by as much.
        let backlogged = hold_for_transform(mid, 100_000, jpeg, 500 * MS, true, 30_000);
        assert_eq!(backlogged.hold, Hold::Transform);
        assert_eq!(ms(backlogged.bound()), Some(640));
        // Over LTE the same 25 KB take 5 ms: still not worth 100 ms.
        let d = hold_for_transform(Some(lte()), 100_000, jpeg, idle, true, 25_000);
        assert_eq!(d.hold, Hold::Defer);
        // No link measured: today's behaviour, no bound.
        let d = hold_for_transform(None, 100_000, jpeg, idle, true, 0);
        assert_eq!((d.hold, d.cost, d.saves), (Hold::Transform, None, None));
        // No run yet: held for, at most what the whole 100 KB take over LTE (20 ms).
        let d = hold_for_transform(Some(lte()), 100_000, None, idle, true, 0);
        assert_eq!(
            (d.hold, d.cost, ms(d.saves)),
            (Hold::Transform, None, Some(20))
        );
        // A transform that saves nothing is never worth holding for on a measured link.
        let none = Some(CostEstimate {
            secs_per_byte: 1e-9,
            saved_fraction: 0.0,
            runs: 3,
        });
        assert_eq!(
            hold_for_transform(Some(gprs()), 1_000, none, idle, true, 0).hold,
            Hold::Defer
        );
    }
}
