//! `StubResolver` against a fake upstream: caching, TTL expiry, coalescing, errors.
//!
//! No test sleeps to let time pass: TTL expiry is decided on an injected [`ManualClock`] or in
//! tokio's paused time; waiting for a lookup to get somewhere is a bounded poll.

mod common;

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use webpep_dns::{DnsError, StubConfig, StubResolver};

/// A bound on hangs, not on speed.
const WAIT: Duration = Duration::from_secs(10);

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[tokio::test]
async fn second_lookup_is_answered_from_the_cache() {
    let up = start_upstream().await;
    let r = StubResolver::new(up.addr, StubConfig::default());
    let first = r.lookup("www.foo.com").await.unwrap();
    assert_eq!(first, vec![ip("193.123.25.10"), ip("2001:db8::10")]);
    let sent = r.stats().queries_sent;
    assert_eq!(sent, 2, "A and AAAA");
    let second = r.lookup("WWW.foo.com.").await.unwrap();
    assert_eq!(second, first);
    let s = r.stats();
    assert_eq!(s.queries_sent, sent, "no query for the cached name");
    assert_eq!((s.lookups, s.cache_hits), (2, 1));
    assert_eq!(up.udp(), 2);
}

fn v4_only() -> StubConfig {
    StubConfig {
        ipv6: false,
        ..StubConfig::default()
    }
}

#[tokio::test]
async fn entries_expire_with_their_ttl() {
    let up = start_upstream().await;
    let clock = ManualClock::new();
    let r = StubResolver::with_clock(up.addr, v4_only(), clock.clone());
    assert_eq!(
        r.lookup("short.foo.com").await.unwrap(),
        vec![ip("192.0.2.9")]
    );
    clock.advance(Duration::from_millis(999));
    assert_eq!(
        r.lookup("short.foo.com").await.unwrap(),
        vec![ip("192.0.2.9")]
    );
    assert_eq!(r.stats().queries_sent, 1, "still within the 1 s TTL");
    clock.advance(Duration::from_millis(1));
    assert_eq!(
        r.lookup("short.foo.com").await.unwrap(),
        vec![ip("192.0.2.9")]
    );
    let s = r.stats();
    assert_eq!(s.queries_sent, 2, "asked again once the 1 s TTL is over");
    assert_eq!(s.cache_hits, 1);
    assert_eq!(up.udp(), 2);
}

/// The default clock is tokio's: paused time moves the cache's expiry too.
#[tokio::test]
async fn the_default_clock_follows_tokio_time() {
    let up = start_upstream().await;
    let r = StubResolver::new(up.addr, v4_only());
    r.lookup("short.foo.com").await.unwrap();
    // Paused only while no exchange is under way: with time paused, tokio moves the clock to
    // the next timer whenever every task waits, which could be the upstream's timeout.
    // The entry's 1 s began with the first lookup, some real milliseconds before the pause
    // (more on a loaded machine): half a second on is well inside it, 1.1 s well past it.
    tokio::time::pause();
    r.lookup("short.foo.com").await.unwrap();
    tokio::time::advance(Duration::from_millis(500)).await;
    r.lookup("short.foo.com").await.unwrap();
    assert_eq!(r.stats().queries_sent, 1);
    tokio::time::advance(Duration::from_millis(600)).await;
    tokio::time::resume();
    r.lookup("short.foo.com").await.unwrap();
    let s = r.stats();
    assert_eq!((s.queries_sent, s.cache_hits), (2, 2));
}

#[tokio::test]
async fn min_ttl_keeps_short_answers_longer() {
    let up = start_upstream().await;
    let cfg = StubConfig {
        min_ttl: 60,
        ..v4_only()
    };
    let clock = ManualClock::new();
    let r = StubResolver::with_clock(up.addr, cfg, clock.clone());
    r.lookup("short.foo.com").await.unwrap();
    clock.advance(Duration::from_secs(59));
    r.lookup("short.foo.com").await.unwrap();
    assert_eq!(r.stats().queries_sent, 1, "kept 60 s, not its 1 s TTL");
    clock.advance(Duration::from_secs(1));
    r.lookup("short.foo.com").await.unwrap();
    assert_eq!(r.stats().queries_sent, 2);
}

#[tokio::test]
async fn max_ttl_caps_long_answers() {
    let up = start_upstream().await;
    let cfg = StubConfig {
        max_ttl: 5,
        ..v4_only()
    };
    let clock = ManualClock::new();
    let r = StubResolver::with_clock(up.addr, cfg, clock.clone());
    r.lookup("img.foo.com").await.unwrap();
    clock.advance(Duration::from_secs(4));
    r.lookup("img.foo.com").await.unwrap();
    assert_eq!(r.stats().queries_sent, 1);
    clock.advance(Duration::from_secs(1));
    r.lookup("img.foo.com").await.unwrap();
    assert_eq!(r.stats().queries_sent, 2, "its 60 s TTL capped at 5 s");
}

#[tokio::test]
async fn not_found_is_remembered_for_the_negative_ttl() {
    let up = start_upstream().await;
    let cfg = StubConfig {
        negative_ttl: 30,
        ..v4_only()
    };
    let clock = ManualClock::new();
    let r = StubResolver::with_clock(up.addr, cfg, clock.clone());
    let not_found = |res: Result<Vec<IpAddr>, DnsError>| matches!(res, Err(DnsError::NotFound(_)));
    assert!(not_found(r.lookup("nowhere.test").await));
    clock.advance(Duration::from_secs(29));
    assert!(not_found(r.lookup("nowhere.test").await));
    assert_eq!(
        r.stats().queries_sent,
        1,
        "the SOA allows 60 s; 30 s configured"
    );
    clock.advance(Duration::from_secs(1));
    assert!(not_found(r.lookup("nowhere.test").await));
    assert_eq!(r.stats().queries_sent, 2);
}

// Paused time: the upstream's 300 ms delay is virtual (no real wait), so the followers join
// while the leader's query is out, however busy the machine.
#[tokio::test(start_paused = true)]
async fn concurrent_lookups_of_one_name_share_one_query() {
    let up = start_upstream().await;
    let r = Arc::new(StubResolver::new(
        up.addr,
        StubConfig {
            ipv6: false,
            ..StubConfig::default()
        },
    ));
    let tasks: Vec<_> = (0..10)
        .map(|_| {
            let r = r.clone();
            tokio::spawn(async move { r.lookup("delay.foo.com").await })
        })
        .collect();
    for t in tasks {
        assert_eq!(t.await.unwrap().unwrap(), vec![ip("192.0.2.10")]);
    }
    let s = r.stats();
    assert_eq!(s.queries_sent, 1);
    assert_eq!(s.lookups, 10);
    assert_eq!(s.coalesced + s.cache_hits, 9);
    assert_eq!(
        s.coalesced, 9,
        "the answer is 300 ms away: every follower joins"
    );
    assert_eq!(up.udp(), 1);
}

// Paused time: the upstream's 300 ms delay is virtual, so the follower surely joins while the
// leader is still waiting, however busy the machine (in real time a 300 ms stall would let the
// leader finish first). Every exchange here is on loopback, delivered within the send call.
#[tokio::test(start_paused = true)]
async fn a_cancelled_leader_does_not_strand_its_followers() {
    let up = start_upstream().await;
    let r = Arc::new(StubResolver::new(
        up.addr,
        StubConfig {
            ipv6: false,
            ..StubConfig::default()
        },
    ));
    let leader = {
        let r = r.clone();
        tokio::spawn(async move { r.lookup("delay.foo.com").await })
    };
    wait_until("the leader asked", WAIT, || r.stats().queries_sent == 1).await;
    let follower = {
        let r = r.clone();
        tokio::spawn(async move { r.lookup("delay.foo.com").await })
    };
    wait_until("the follower waits", WAIT, || r.stats().coalesced == 1).await;
    assert_eq!(r.stats().queries_sent, 1, "the answer is 300 ms away");
    leader.abort();
    let got = tokio::time::timeout(Duration::from_secs(3), follower)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.unwrap(), vec![ip("192.0.2.10")]);
}

#[tokio::test]
async fn ip_literals_need_no_query() {
    let up = start_upstream().await;
    let r = StubResolver::new(up.addr, StubConfig::default());
    assert_eq!(
        r.lookup("192.0.2.77").await.unwrap(),
        vec![ip("192.0.2.77")]
    );
    assert_eq!(
        r.lookup("[2001:db8::7]").await.unwrap(),
        vec![ip("2001:db8::7")]
    );
    assert_eq!(r.stats().queries_sent, 0);
    assert_eq!(up.udp(), 0);
}

#[tokio::test]
async fn nxdomain_is_not_found_and_cached_negatively() {
    let up = start_upstream().await;
    let r = StubResolver::new(up.addr, StubConfig::default());
    assert!(matches!(
        r.lookup("nowhere.test").await,
        Err(DnsError::NotFound(_))
    ));
    assert!(matches!(
        r.lookup("nowhere.test").await,
        Err(DnsError::NotFound(_))
    ));
    assert_eq!(
        r.stats().queries_sent,
        2,
        "one A and one AAAA, then the negative entry"
    );
}

#[tokio::test]
async fn nodata_for_one_family_keeps_the_other() {
    let up = start_upstream().await;
    let r = StubResolver::new(up.addr, StubConfig::default());
    assert_eq!(
        r.lookup("www.v4only.com").await.unwrap(),
        vec![ip("192.0.2.11")]
    );
}

// Paused time: the timeouts are the test, and nothing answers, so tokio moving its clock to
// the next timer whenever every task waits is just what should happen.
#[tokio::test(start_paused = true)]
async fn silent_upstream_is_an_error_that_is_not_cached() {
    let up = start_upstream().await;
    let cfg = StubConfig {
        ipv6: false,
        timeout: Duration::from_millis(100),
        ..StubConfig::default()
    };
    let r = StubResolver::new(up.addr, cfg);
    assert!(matches!(
        r.lookup("slow.foo.com").await,
        Err(DnsError::Upstream(_))
    ));
    assert!(matches!(
        r.lookup("slow.foo.com").await,
        Err(DnsError::Upstream(_))
    ));
    let s = r.stats();
    assert_eq!(s.queries_sent, 4, "two tries per lookup, nothing cached");
    assert_eq!(s.failures, 2);
}

#[tokio::test]
async fn bad_names_are_refused_without_a_query() {
    let up = start_upstream().await;
    let r = StubResolver::new(up.addr, StubConfig::default());
    for bad in ["", ".", "a..b", &"x".repeat(300)] {
        assert!(
            matches!(r.lookup(bad).await, Err(DnsError::InvalidName(_))),
            "{bad:?}"
        );
    }
    assert_eq!(r.stats().queries_sent, 0);
}

#[tokio::test]
async fn cache_stays_within_max_entries() {
    let up = start_upstream().await;
    let cfg = StubConfig {
        ipv6: false,
        max_entries: 2,
        ..StubConfig::default()
    };
    let r = StubResolver::new(up.addr, cfg);
    for name in ["www.foo.com", "img.foo.com", "www.cdn.com"] {
        r.lookup(name).await.unwrap();
    }
    // www.foo.com (TTL 10) expires soonest and was evicted; the others are still cached.
    r.lookup("img.foo.com").await.unwrap();
    r.lookup("www.cdn.com").await.unwrap();
    assert_eq!(r.stats().queries_sent, 3);
    r.lookup("www.foo.com").await.unwrap();
    assert_eq!(r.stats().queries_sent, 4);
}
