//! The lab network carries traffic ue → edge → net and back, through both emulated hops.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use webpep_lab::edge_proxy::EdgeProxy;
use webpep_lab::topology::{TcpEra, Topology, TopologyConfig};
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

/// The RTO a new connection from `ns` (from `local` if given) to `dst` starts with.
fn rto(ns: &webpep_link::NetNs, dst: SocketAddr, local: Option<SocketAddr>) -> Duration {
    ns.run(move || webpep_server::initial_rto::rto_of_a_new_connection(dst, local))
        .expect("run in namespace")
        .expect("rto")
}

/// A gprs lab at time scale 10 with one domain.
fn gprs_at_k10() -> TopologyConfig {
    let mut cfg = TopologyConfig::new(resolve("gprs").expect("profile"), vec!["www.a.test".into()]);
    cfg.time_scale = 10.0;
    cfg
}

#[test]
fn end_hosts_start_with_the_eras_initial_rto_scaled() {
    if !netns_available("end_hosts_start_with_the_eras_initial_rto_scaled") {
        return;
    }
    let mut cfg = gprs_at_k10();
    for era in [TcpEra::Y2003, TcpEra::Modern] {
        cfg.tcp = era;
        let topo = Topology::build(&cfg).expect("topology");
        let origin = SocketAddr::from((topo.domains["www.a.test"], 9));
        let ue = SocketAddr::from((topo.ue_addr(), 9));
        // 3 s (2003) or 1 s (today), divided by k like every delay of the lab.
        let want = era.initial_rto() / 10;
        let from_ue = rto(&topo.ue, origin, None);
        let from_net = rto(&topo.net, ue, None);
        assert_eq!((from_ue, from_net), (want, want), "{}", era.name());
        // edge is not an end host: its timeout is the proxy's, set per load.
        assert_eq!(rto(&topo.edge, ue, None), Duration::from_secs(1));
    }
}

#[test]
fn the_edge_proxy_sets_the_air_sides_initial_rto_per_load() {
    if !netns_available("the_edge_proxy_sets_the_air_sides_initial_rto_per_load") {
        return;
    }
    let topo = Topology::build(&gprs_at_k10()).expect("topology");
    let all = webpep_lab::configs::load(None).expect("built-in configurations");
    let work = std::env::temp_dir().join(format!("webpep-rto-{}", std::process::id()));
    let ue = SocketAddr::from((topo.ue_addr(), 9));
    let second = Duration::from_secs(1);
    // A socket on the proxy's port (from edge's other address, as the listener holds this
    // one): what an accepted air-side connection gets.
    let on_proxy_port = Some(SocketAddr::from((
        topo.wire.outer_addr(),
        webpep_lab::edge_proxy::PROXY_PORT,
    )));
    let edge_rto = |local| rto(&topo.edge, ue, local);

    // Tuned: the proxy's own `[air] initial-rto`, 003 §6.1's 7 s ÷ k, on its ports only.
    let proxy = EdgeProxy::start(&topo, &all["explicit"], TcpEra::Y2003, &work, 10.0, None)
        .expect("explicit");
    let deadline = Instant::now() + Duration::from_secs(5);
    while edge_rto(on_proxy_port) != 7 * second / 10 {
        assert!(
            Instant::now() < deadline,
            "the proxy never set its initial RTO"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(edge_rto(None), second, "the origin side keeps the kernel's");
    drop(proxy);
    assert_eq!(edge_rto(on_proxy_port), second, "gone with the proxy");

    // Untuned: the lab gives the whole edge the era's 3 s ÷ k while the load runs.
    let proxy = EdgeProxy::start(
        &topo,
        &all["explicit-no-tuning"],
        TcpEra::Y2003,
        &work,
        10.0,
        None,
    )
    .expect("explicit-no-tuning");
    assert_eq!(edge_rto(None), 3 * second / 10);
    assert_eq!(edge_rto(on_proxy_port), 3 * second / 10);
    drop(proxy);
    assert_eq!(
        edge_rto(None),
        second,
        "the kernel's again once the load is over"
    );
    let _ = std::fs::remove_dir_all(&work);
}
