//! Shared by the namespace test suites.

#![allow(dead_code)] // each suite uses part of it

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use webpep_link::probe::ProbeBed;
use webpep_link_model::{ResolvedProfile, Trace};

pub use webpep_link::testing::netns_available as can_run;

/// Floods `bytes_per_s` (wall) of 1500-byte IP packets from the outer side to the inner side
/// until `stop`.
fn udp_flood(bed: &ProbeBed, bytes_per_s: f64, stop: &AtomicBool) {
    let dst = SocketAddr::from((bed.link.inner_addr(), 9));
    let sock = bed
        .link
        .outer()
        .run(|| UdpSocket::bind("0.0.0.0:0"))
        .expect("ns")
        .expect("bind");
    let payload = [0x55u8; 1472];
    let start = Instant::now();
    let mut sent = 0f64;
    while !stop.load(Ordering::Relaxed) {
        let due = start.elapsed().as_secs_f64() * bytes_per_s;
        while sent < due {
            let _ = sock.send_to(&payload, dst);
            sent += 1500.0;
        }
        thread::sleep(Duration::from_micros(500));
    }
}

/// Runs a flood over a trace profile and compares what the link delivered in 30 s (unscaled)
/// of its own time with what the trace offers in that window.
pub fn trace_rate_matches(p: &ResolvedProfile, trace: &Trace, k: f64) {
    let bed = ProbeBed::start(p, k, 19).expect("link");
    // Something must receive, or the inner kernel answers with ICMP errors (harmless but noisy).
    let _sink = bed
        .link
        .inner()
        .run(|| UdpSocket::bind("0.0.0.0:9"))
        .expect("ns")
        .expect("bind sink");
    // Offer twice the trace's peak one-second rate so the queue never runs dry.
    let per_ms = {
        let mut peak = 0u64;
        let mut s = 0;
        while s < trace.period_ms {
            peak = peak.max(trace.bytes_between(s, s + 1000));
            s += 1000;
        }
        peak as f64
    };
    let flood_rate = 2.0 * per_ms * k;
    let stop = AtomicBool::new(false);
    thread::scope(|sc| {
        sc.spawn(|| udp_flood(&bed, flood_rate, &stop));
        thread::sleep(bed.scaled(3.0));
        let a = bed.link.counters_now();
        thread::sleep(bed.scaled(30.0));
        let b = bed.link.counters_now();
        stop.store(true, Ordering::Relaxed);
        let from_ms = (a.elapsed_us as f64 * k / 1000.0) as u64;
        let to_ms = (b.elapsed_us as f64 * k / 1000.0) as u64;
        let delivered = b.down.delivered_bytes - a.down.delivered_bytes;
        let offered = trace.bytes_between(from_ms, to_ms);
        let secs = (to_ms - from_ms) as f64 / 1000.0;
        eprintln!(
            "trace {}: {:.0} kbps delivered vs {:.0} kbps in the trace over {secs:.1} s (mean of the whole trace {:.0} kbps)",
            trace.source,
            delivered as f64 * 8.0 / secs / 1000.0,
            offered as f64 * 8.0 / secs / 1000.0,
            trace.mean_kbps()
        );
        let err = (delivered as f64 - offered as f64).abs() / offered as f64;
        assert!(
            err <= 0.05,
            "delivered {delivered} vs trace {offered} bytes ({:.1} %)",
            err * 100.0
        );
    });
}
