//! How many packets per second the pure model moves: the ceiling of the emulator's rate
//! (the pump adds the TUN reads and writes on top). Run: `cargo bench -p webpep-link-model`.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use webpep_link_model::presets::{preset, trace_profile};
use webpep_link_model::{Link, Side, SimTime, Trace};

/// Pushes `n` 1500-byte packets through the downlink at `gap_us` spacing, polling at every
/// wakeup, and returns how many were delivered.
fn run(link: &mut Link<u32>, n: u32, gap_us: u64) -> u64 {
    let mut now = SimTime::ZERO;
    let mut next = 0u32;
    let mut delivered = 0u64;
    loop {
        while next < n && SimTime::from_micros(next as u64 * gap_us) <= now {
            link.enqueue(Side::Down, now, 1500, next);
            next += 1;
        }
        while link.poll_deliver(Side::Down, now).is_some() {
            delivered += 1;
        }
        let arrival = (next < n).then(|| SimTime::from_micros(next as u64 * gap_us));
        now = match (arrival, link.next_wakeup()) {
            (Some(a), Some(w)) => a.min(w),
            (Some(a), None) => a,
            (None, Some(w)) => w,
            (None, None) => return delivered,
        };
    }
}

fn bench(c: &mut Criterion) {
    let n = 10_000u32;
    let mut g = c.benchmark_group("link-model");
    g.throughput(Throughput::Elements(n as u64));
    let gprs = preset("gprs", None).unwrap().resolve(None).unwrap();
    g.bench_function("gprs (jitter, radio, bunching) 10k packets", |b| {
        b.iter(|| {
            let mut l = Link::new(&gprs, 1.0, 1);
            black_box(run(&mut l, n, 300_000))
        })
    });
    let mut p = preset("gprs", None).unwrap();
    p.down.fec = Some(Default::default());
    if let Some(f) = p.down.fec.as_mut() {
        f.error_rate = 0.009;
        f.fec_share = 0.05;
    }
    let fec = p.resolve(None).unwrap();
    g.bench_function("gprs + FEC/ARQ 10k packets", |b| {
        b.iter(|| {
            let mut l = Link::new(&fec, 1.0, 1);
            black_box(run(&mut l, n, 300_000))
        })
    });
    // A synthetic 12 Mbps trace (one opportunity per millisecond, looping each second).
    let text: String = (0..=1000).map(|t| format!("{t}\n")).collect();
    let dir = std::env::temp_dir().join(format!("webpep-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("t.down");
    std::fs::write(&f, text).unwrap();
    let _ = Trace::load(&f).unwrap();
    let tp = trace_profile("bench", &f, &f, 20.0, "bench")
        .resolve(None)
        .unwrap();
    g.bench_function("trace 12 Mbps 10k packets", |b| {
        b.iter(|| {
            let mut l = Link::new(&tp, 1.0, 1);
            black_box(run(&mut l, n, 900))
        })
    });
    g.finish();
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, bench);
criterion_main!(benches);
