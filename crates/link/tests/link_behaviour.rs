//! What issue 2 must show, as tests that send real traffic through the emulator between two
//! namespaces, at time scales that keep them short. They need root (CI is root): without it
//! they print `SKIP: ...` and pass, unless `WEBPEP_REQUIRE_NETNS=1` (set by `.ci/run`).

use std::time::Duration;

use webpep_link::probe::{Percentiles, ProbeBed};
use webpep_link_model::{resolve, ResolvedProfile};

fn can_run(test: &str) -> bool {
    // SAFETY: no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    let reason = "not root: network namespaces and TUN devices need CAP_NET_ADMIN";
    if std::env::var("WEBPEP_REQUIRE_NETNS").as_deref() == Ok("1") {
        panic!("{test}: {reason} (WEBPEP_REQUIRE_NETNS=1)");
    }
    eprintln!("SKIP: {test}: {reason}");
    false
}

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
    let (rtts, lost) = bed.ping_series(15, 1.0).expect("pings");
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

#[test]
fn small_bulk_debug() {
    if !can_run("x") {
        return;
    }
    let p = resolve("dialup").unwrap();
    let bed = ProbeBed::start(&p, 10.0, 3).expect("link");
    let h = std::thread::scope(|sc| {
        sc.spawn(|| {
            for _ in 0..25 {
                std::thread::sleep(Duration::from_secs(1));
                let c = bed.link.counters_now();
                eprintln!(
                    "down enq {} deliv {} drop {} | up enq {} deliv {}",
                    c.down.enqueued_packets,
                    c.down.delivered_packets,
                    c.down.dropped_queue_packets,
                    c.up.enqueued_packets,
                    c.up.delivered_packets
                );
            }
        });
        let r = bed.bulk(1048576);
        eprintln!("{r:?}");
    });
    let _ = h;
}
