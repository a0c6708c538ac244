//! What issue 2 must show, as tests that send real traffic through the emulator between two
//! namespaces, at time scales that keep them short. They need root (CI is root): without it
//! they print `SKIP: ...` and pass, unless `WEBPEP_REQUIRE_NETNS=1` (set by `.ci/run`).

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;

use common::{can_run, trace_rate_matches};

use webpep_link::probe::{Percentiles, ProbeBed};
use webpep_link_model::presets::preset;
use webpep_link_model::{resolve, ResolvedProfile, Trace};

fn gprs() -> ResolvedProfile {
    resolve("gprs").expect("gprs preset")
}

#[test]
fn ping_median_matches_the_profile_rtt() {
    if !can_run("ping_median_matches_the_profile_rtt") {
        return;
    }
    let p = gprs();
    let bed = ProbeBed::start(&p, 10.0, 3).expect("link");
    let (rtts, lost) = bed.ping_series(31, 1.0).expect("pings");
    let pc = Percentiles::of(&rtts);
    eprintln!(
        "gprs ping rtts {rtts:?} lost {lost}; configured {}",
        p.rtt_ms()
    );
    assert_eq!(lost, 0);
    let err = (pc.median - p.rtt_ms()).abs() / p.rtt_ms();
    assert!(
        err <= 0.15,
        "median {} vs configured {}",
        pc.median,
        p.rtt_ms()
    );
}

/// IP bytes of a full-size TCP segment over the MSS's payload (20 IP + 20 TCP + 12 options).
const TCP_OVERHEAD: f64 = 1500.0 / 1448.0;

#[test]
fn one_megabyte_over_gprs_reaches_the_configured_rate() {
    if !can_run("one_megabyte_over_gprs_reaches_the_configured_rate") {
        return;
    }
    let p = gprs();
    let bed = ProbeBed::start(&p, 20.0, 5).expect("link");
    let r = bed.bulk(1 << 20).expect("download");
    let share = r.kbps * TCP_OVERHEAD / p.down_kbps();
    eprintln!(
        "1 MB over gprs: {:.2} kbps goodput, {:.2} kbps wire ({share:.3} of the rate)",
        r.kbps, r.wire_kbps
    );
    assert!(
        (0.85..=1.0).contains(&share),
        "{share:.3} of the configured rate"
    );
}

#[test]
fn rtt_jumps_by_the_reacquire_delay_after_the_release_timeout() {
    if !can_run("rtt_jumps_by_the_reacquire_delay_after_the_release_timeout") {
        return;
    }
    // Without the setup's random spread (its range is a model unit test): a few samples then
    // show the release jump itself.
    let mut p = gprs();
    for r in [&mut p.profile.down.radio, &mut p.profile.up.radio]
        .into_iter()
        .flatten()
    {
        r.setup_ms += r.setup_spread_ms / 2.0;
        r.setup_spread_ms = 0.0;
    }
    let release_s = p.release_after_idle_ms().expect("gprs has radio") / 1000.0;
    let bed = ProbeBed::start(&p, 10.0, 11).expect("link");
    let short = bed.idle_rtt(2.0, 7).expect("short gap");
    let long = bed.idle_rtt(release_s + 1.0, 7).expect("long gap");
    let jump = long - short;
    let want = p.reacquire_rtt_ms();
    eprintln!("gprs RTT after 2 s idle {short:.0} ms, after {} s {long:.0} ms: +{jump:.0} (configured +{want:.0})", release_s + 1.0);
    assert!(
        (jump - want).abs() <= 0.2 * want,
        "jump {jump:.0} ms vs {want:.0} ms"
    );
}

#[test]
fn bulk_download_fills_the_queue() {
    if !can_run("bulk_download_fills_the_queue") {
        return;
    }
    let p = gprs();
    let k = 20.0;
    let bed = ProbeBed::start(&p, k, 13).expect("link");
    let queue_s = p.profile.down.queue_bytes as f64 * 8.0 / (p.down_kbps() * 1000.0);
    let expect_ms = p.rtt_ms() + queue_s * 1000.0;
    let done = Arc::new(AtomicBool::new(false));
    let rtts = thread::scope(|sc| {
        let d = done.clone();
        let bed_ref = &bed;
        let pinger = sc.spawn(move || {
            let mut p = bed_ref.pinger().expect("pinger");
            let mut rtts = Vec::new();
            while !d.load(Ordering::Relaxed) {
                thread::sleep(bed_ref.scaled(2.0));
                if let Some(rtt) = p.ping(bed_ref.scaled(60.0)).expect("ping") {
                    rtts.push(bed_ref.unscaled_ms(rtt));
                }
            }
            rtts
        });
        // A receiver with a 1 MB buffer: only the network limits the sender.
        let r = bed.bulk_with(1 << 20, Some(1 << 20));
        done.store(true, Ordering::Relaxed);
        r.expect("download");
        pinger.join().expect("pinger thread")
    });
    let c = bed.link.counters_now();
    let max = rtts.iter().copied().fold(0.0, f64::max);
    eprintln!(
        "ping RTT during 1 MB: max {max:.0} ms, expected base + queue/rate = {expect_ms:.0} ms; {} drops; samples {rtts:.0?}",
        c.down.dropped_queue_packets
    );
    assert!(
        c.down.dropped_queue_packets > 0,
        "the queue never overflowed"
    );
    assert!(
        (max - expect_ms).abs() <= 0.2 * expect_ms,
        "max RTT {max:.0} vs {expect_ms:.0}"
    );
    // The model's own queue-delay samples agree: the longest wait ≈ queue ÷ rate.
    let max_wait_s = c.down.queue_delay_max_us as f64 * k / 1e6;
    assert!(
        (max_wait_s - queue_s).abs() <= 0.1 * queue_s,
        "max queue wait {max_wait_s:.1} s vs {queue_s:.1} s"
    );
}

#[test]
fn tcp_survives_a_20_second_outage() {
    if !can_run("tcp_survives_a_20_second_outage") {
        return;
    }
    let mut profile = preset("gprs", None).expect("gprs");
    profile.outages.scheduled = vec![[10.0, 20.0]];
    let p = profile.resolve(None).expect("resolves");
    let k = 20.0;
    let bed = ProbeBed::start(&p, k, 17).expect("link");
    // 150 KB takes ~32 s at 38 kbps: the outage at 10–30 s falls in the middle.
    let r = bed
        .bulk(150 * 1024)
        .expect("the transfer completes after the outage");
    let c = bed.link.counters_now();
    eprintln!(
        "150 KB across a 20 s outage: {:.1} s (unscaled), {} down packets delivered",
        r.seconds, c.down.delivered_packets
    );
    let plain_s = 150.0 * 1024.0 * 8.0 * TCP_OVERHEAD / (p.down_kbps() * 1000.0);
    assert!(
        r.seconds >= plain_s + 20.0 * 0.9,
        "{:.1} s is too fast to have waited out the outage",
        r.seconds
    );
    assert!(
        r.seconds <= plain_s + 20.0 + 30.0,
        "{:.1} s: TCP took too long to recover",
        r.seconds
    );
}

#[test]
fn trace_profile_delivers_the_trace_rate() {
    if !can_run("trace_profile_delivers_the_trace_rate") {
        return;
    }
    // A synthetic trace with a varying rate: 10 s period, 0.4–1.6 Mbps in 1 s steps.
    let mut text = String::new();
    for sec in 0..10u64 {
        let per_s = [40, 80, 120, 60, 100, 130, 50, 90, 110, 70][sec as usize];
        for i in 0..per_s {
            text += &format!("{}\n", sec * 1000 + i * 1000 / per_s);
        }
    }
    text += "10000\n";
    let dir = std::env::temp_dir().join(format!("webpep-trace-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp");
    let down = dir.join("synthetic.down");
    let up = dir.join("synthetic.up");
    std::fs::write(&down, &text).expect("write");
    std::fs::write(&up, "0\n1\n2\n3\n4\n5\n").expect("write");
    let spec = format!("trace:{},{}", down.display(), up.display());
    let p = resolve(&spec).expect("trace profile");
    let trace = Trace::load(&down).expect("trace");
    trace_rate_matches(&p, &trace, 2.0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The lab restarts a trace as each load starts, as each Mahimahi shell does: a probe sent
/// into the trace's dead time waits for the next cycle; right after a restart it meets the
/// trace's opening burst.
#[test]
fn a_restarted_trace_starts_over_for_the_next_load() {
    if !can_run("a_restarted_trace_starts_over_for_the_next_load") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("webpep-restart-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Down: 50 opportunities in the first 50 ms, then none until the period ends at 20 s.
    let mut down: String = (1..=50).map(|t| format!("{t}\n")).collect();
    down += "20000\n";
    // Up: one opportunity every millisecond.
    let up: String = (1..=20000).map(|t| format!("{t}\n")).collect();
    let (d, u) = (dir.join("burst.down"), dir.join("steady.up"));
    std::fs::write(&d, down).unwrap();
    std::fs::write(&u, up).unwrap();
    let p = resolve(&format!("trace:{},{}", d.display(), u.display())).expect("trace profile");
    let _ = std::fs::remove_dir_all(&dir);

    let bed = ProbeBed::start(&p, 10.0, 1).expect("link");
    let mut pinger = bed.pinger().expect("pinger");
    let timeout = bed.scaled(40.0);
    thread::sleep(bed.scaled(2.0));
    let in_the_gap = pinger.ping(timeout).expect("ping").expect("an answer");
    bed.link.restart(0);
    let after_restart = pinger.ping(timeout).expect("ping").expect("an answer");
    let (gap_ms, fresh_ms) = (bed.unscaled_ms(in_the_gap), bed.unscaled_ms(after_restart));
    eprintln!(
        "RTT in the trace's dead time {gap_ms:.0} ms; right after a restart {fresh_ms:.0} ms"
    );
    assert!(gap_ms > 15_000.0, "waited for the next cycle: {gap_ms}");
    assert!(fresh_ms < 2_000.0, "met the opening burst: {fresh_ms}");
}
