//! Mahimahi trace parsing: arbitrary text must parse or fail cleanly, and a parsed trace must
//! hold its invariants (non-decreasing timestamps, period ≥ 1, `bytes_between` monotone,
//! additive, and equal to a brute-force count of the looped opportunities).

#![no_main]

use libfuzzer_sys::fuzz_target;
use webpep_link_model::trace::{Trace, OPPORTUNITY_BYTES};

/// Opportunities strictly before `t`, counted one by one (only for small `t / period`).
fn brute_force_before(tr: &Trace, t: u64) -> u64 {
    let p = tr.period_ms;
    let mut n = 0;
    let mut c = 0u64;
    while let Some(base) = c.checked_mul(p) {
        if base >= t {
            break;
        }
        for &ts in tr.timestamps_ms.iter() {
            if base.checked_add(ts).is_some_and(|x| x < t) {
                n += 1;
            }
        }
        c += 1;
    }
    n
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let tr = match Trace::parse(&text, "fuzz.trace") {
        Ok(t) => t,
        Err(e) => {
            // Every error names the source and a line.
            let msg = e.to_string();
            assert!(msg.starts_with("fuzz.trace: line "), "{msg}");
            return;
        }
    };
    let ts = &tr.timestamps_ms;
    assert!(!ts.is_empty());
    assert!(ts.windows(2).all(|w| w[0] <= w[1]), "timestamps decrease");
    assert!(tr.period_ms >= 1);
    assert_eq!(tr.period_ms, ts[ts.len() - 1].max(1));
    assert!(ts.iter().all(|&t| t <= tr.period_ms));
    let kbps = tr.mean_kbps();
    assert!(kbps.is_finite() && kbps > 0.0, "mean rate {kbps}");

    // Query points: around every timestamp in the first three cycles, plus the period edges.
    // Keep to points whose cycle arithmetic cannot overflow.
    let p = tr.period_ms;
    let mut points = vec![0u64, 1];
    for c in 0..3u64 {
        let Some(base) = c.checked_mul(p) else { break };
        for &t in ts.iter().take(64) {
            if let Some(x) = base.checked_add(t) {
                points.extend([x.saturating_sub(1), x, x.saturating_add(1)]);
            }
        }
        points.push(base);
    }
    points.retain(|&x| x <= u64::MAX / 4);
    points.sort_unstable();
    points.dedup();

    let small = p <= 1 << 20 && ts.len() <= 4096;
    let mut prev = 0u64;
    for &t in &points {
        let b = tr.bytes_between(0, t);
        assert_eq!(b % OPPORTUNITY_BYTES, 0);
        assert!(
            b >= prev,
            "bytes_between(0, {t}) = {b} < {prev}: not monotone"
        );
        prev = b;
        assert_eq!(tr.bytes_between(t, t), 0);
        if small && t <= 3 * p {
            assert_eq!(
                b / OPPORTUNITY_BYTES,
                brute_force_before(&tr, t),
                "bytes_between(0, {t}) disagrees with a brute-force count"
            );
        }
    }
    // Additivity over consecutive query points.
    for w in points.windows(3).take(64) {
        let (a, b, c) = (w[0], w[1], w[2]);
        assert_eq!(
            tr.bytes_between(a, b) + tr.bytes_between(b, c),
            tr.bytes_between(a, c),
            "bytes_between not additive at {a}, {b}, {c}"
        );
    }
    // A reversed window is empty.
    if let [.., a, b] = points[..] {
        assert_eq!(tr.bytes_between(b, a), 0);
    }
});
