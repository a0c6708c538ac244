//! The lab network carries traffic ue → edge → net and back, through both emulated hops.

use std::net::SocketAddr;

use webpep_lab::topology::{Topology, TopologyConfig};
use webpep_link::probe::{EchoServer, Percentiles, Pinger};
use webpep_link::testing::netns_available;
use webpep_link_model::resolve;

#[test]
fn ue_reaches_every_domain_through_edge() {
    if !netns_available("ue_reaches_every_domain_through_edge") {
        return;
    }
    let air = resolve("cdma-1x").expect("profile");
    let mut cfg = TopologyConfig::new(air.clone(), vec!["www.a.test".into(), "img.b.test".into()]);
    cfg.time_scale = 10.0;
    let topo = Topology::build(&cfg).expect("topology");
    let k = cfg.time_scale;
    for (name, addr) in &topo.domains {
        let echo = EchoServer::start(&topo.net, SocketAddr::from((*addr, 7))).expect("echo");
        let mut p = Pinger::new(&topo.ue, echo.addr).expect("pinger");
        let mut rtts = Vec::new();
        for _ in 0..8 {
            let d = p
                .ping(std::time::Duration::from_secs(2))
                .expect("ping")
                .unwrap_or_else(|| panic!("no answer from {name}"));
            rtts.push(d.as_secs_f64() * 1000.0 * k);
        }
        let median = Percentiles::of(&rtts).median;
        let expect = air.rtt_ms() + cfg.wired_rtt_ms;
        eprintln!(
            "{name} {addr}: median RTT {median:.0} ms (air {:.0} + wire {:.0})",
            air.rtt_ms(),
            cfg.wired_rtt_ms
        );
        assert!(
            (median - expect).abs() <= 0.2 * expect,
            "{median} vs {expect}"
        );
    }
    // Traffic crossed the air link both ways.
    let c = topo.air.counters_now();
    assert!(c.down.delivered_packets >= 16 && c.up.delivered_packets >= 16);
}
