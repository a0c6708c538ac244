//! The link-aware controller driving a bulk sender over webpep's link model, in virtual time:
//! does it fill the link without filling its queue? (DESIGN §4; 001 "Fairness between flows".)
//! The simulator is `sim/mod.rs`; the real traces' tests are in the data suite.

mod sim;

use std::time::Duration;

use sim::{beside_reno_arriving, report, transfer, transfer_with, Reno};

/// Over GPRS (38 kbit/s, RTT ~0.6 s back to back, a 120 KB queue, ACKs bunched and each
/// burst of them after 200 ms of uplink silence waiting for a block flow): a 1 MB transfer
/// keeps a mean queue of a sixth of TCP's (Reno fills the queue, 001 Fig. 4) at a goodput
/// within 10 % of that TCP's, over ten seeds of the link. (This Reno is an ideal one: losses
/// found at once, no timeouts; on the real network TCP reached 77–80 % of GPRS, 000 Table 2.)
///
/// On this model goodput and queue trade against each other whatever the controller: fixed
/// windows of 12 KB and 20 KB give 91.9 % and 98.2 % of the link with mean queues of 5.9 KB
/// and 12.4 KB (`SIM_FIXED_WINDOW=12000`), because every ACK pays an uplink block-flow
/// set-up and the link idles whenever its queue runs dry before the ACKs come. Over the ten
/// seeds the controller gives 92.1–96.1 % (mean 94.5 %) at mean queues of 9.0–14.0 KB (mean
/// 11.1 KB); docs/transport.md has the table. The 95 % under 10 KB is not met here.
#[test]
fn gprs_bulk_keeps_the_queue_small_at_near_tcp_goodput() {
    let seeds: u64 = std::env::var("SIM_SEEDS").map_or(10, |n| n.parse().unwrap());
    let (mut queues, mut tcp_queues) = (0.0, 0.0);
    for seed in 1..=seeds {
        let o = transfer("gprs", 1 << 20, seed);
        report("gprs", 1 << 20, &o);
        let tcp = transfer_with("gprs", 1 << 20, seed, Reno::new());
        report("gprs (Reno)", 1 << 20, &tcp);
        queues += o.mean_queue;
        tcp_queues += tcp.mean_queue;
        assert!(o.mean_queue < tcp.mean_queue / 4.0, "seed {seed}");
        assert!(o.goodput >= 0.87 * o.link_rate, "seed {seed}");
        assert!(o.goodput >= 0.9 * tcp.goodput, "seed {seed}");
        assert_eq!(o.lost, 0, "seed {seed}");
    }
    assert!(queues < tcp_queues / 6.0);
    assert!(queues / (seeds as f64) < 12_000.0);
}

/// CDMA 1x (78 kbit/s, RTT ~400 ms): at least 95 % of the link, queue under 10 KB.
#[test]
fn cdma_bulk_fills_the_link_not_its_queue() {
    let o = transfer("cdma-1x", 1 << 20, 1);
    report("cdma-1x", 1 << 20, &o);
    let tcp = transfer_with("cdma-1x", 1 << 20, 1, Reno::new());
    report("cdma-1x (Reno)", 1 << 20, &tcp);
    assert!(o.goodput >= 0.95 * o.link_rate);
    assert!(o.mean_queue < 10_000.0);
    assert!(o.mean_queue < tcp.mean_queue / 4.0);
}

/// A geostationary satellite (10 Mbit/s, RTT ~600 ms: a 750 KB BDP) from the 10 KB start:
/// the cold start finds the BDP without a loss (doubling per round trip it takes some eight
/// round trips, so a cold 10 MB transfer as a whole runs at about two thirds of the link),
/// and after it the link runs full with a queue of a fraction of the BDP.
#[test]
fn geo_sat_cold_start_finds_the_bdp() {
    let o = transfer("geo-sat", 10 << 20, 1);
    report("geo-sat", 10 << 20, &o);
    let tcp = transfer_with("geo-sat", 10 << 20, 1, Reno::new());
    report("geo-sat (Reno)", 10 << 20, &tcp);
    assert_eq!(o.lost, 0);
    assert!(o.steady_goodput >= 0.95 * o.link_rate);
    assert!(o.goodput >= tcp.goodput);
    let bdp = o.link_rate * 0.6;
    assert!(o.mean_queue < 0.25 * bdp);
}

/// Page-sized transfers over GPRS from a cold connection (no remembered estimate), beside
/// Reno from two packets: a page's first 20 KB response goes at least half again as fast as
/// TCP's (the 10 KB start: 71–82 % of the link over three seeds, Reno 37–44 %), and 100 KB
/// as fast as TCP's within 10 %. The initial flight's RTTs, which hold its own serialization
/// (eight packets take two seconds at 38 kbit/s), do not end the cold start: when they did,
/// the window fell to 5 KB and a 20 KB response ran at 54 % of the link.
#[test]
fn gprs_cold_page_sized_transfers() {
    for seed in 1..=3 {
        let o = transfer("gprs", 20_000, seed);
        report("gprs cold", 20_000, &o);
        let tcp = transfer_with("gprs", 20_000, seed, Reno::new());
        report("gprs cold (Reno)", 20_000, &tcp);
        assert!(o.goodput >= 1.5 * tcp.goodput, "seed {seed}");
        assert!(o.goodput >= 0.65 * o.link_rate, "seed {seed}");
        let o = transfer("gprs", 100_000, seed);
        report("gprs cold", 100_000, &o);
        let tcp = transfer_with("gprs", 100_000, seed, Reno::new());
        report("gprs cold (Reno)", 100_000, &tcp);
        assert!(o.goodput >= 0.9 * tcp.goodput, "seed {seed}");
        assert_eq!(o.lost, 0, "seed {seed}");
    }
}

/// `SIM_PROFILE=NAME [SIM_BYTES=N] [SIM_STARTS=S,S..] cargo test ... -- --ignored any_profile`:
/// transfers over any profile (trace profiles need `WEBPEP_TRACE_DIR` or ../shared beside the
/// project) from each start (seconds into the link's life), beside Reno, for exploring.
/// `SIM_ARRIVALS=T:BYTES,T:BYTES..` (seconds after the start) replaces `SIM_BYTES` with bytes
/// the sender gets in pieces, as a page's responses reach the edge.
#[test]
#[ignore = "exploration: set SIM_PROFILE"]
fn any_profile() {
    let profile = std::env::var("SIM_PROFILE").expect("SIM_PROFILE");
    let bytes = std::env::var("SIM_BYTES").map_or(1 << 20, |n| n.parse().unwrap());
    let starts: Vec<f64> = std::env::var("SIM_STARTS")
        .unwrap_or_else(|_| "0".into())
        .split(',')
        .map(|s| s.parse().unwrap())
        .collect();
    let arrivals: Vec<(Duration, u64)> = match std::env::var("SIM_ARRIVALS") {
        Ok(list) => list
            .split(',')
            .map(|a| {
                let (t, b) = a.split_once(':').expect("T:BYTES");
                (
                    Duration::from_secs_f64(t.parse().unwrap()),
                    b.parse().unwrap(),
                )
            })
            .collect(),
        Err(_) => vec![(Duration::ZERO, bytes)],
    };
    beside_reno_arriving(&profile, &arrivals, &starts);
}
