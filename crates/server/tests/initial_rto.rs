//! The initial-RTO program on real sockets: a namespace a rule names gets its timeout, another
//! keeps the kernel's 1 s, a port rule touches only that port, dropping the guard restores
//! the kernel's timer; and `[air] initial-rto` gives the proxy's accepted side its timeout.
//!
//! Needs root (CI is root). Without it the tests print `SKIP: ...` and pass, unless
//! `WEBPEP_REQUIRE_NETNS=1`, which makes them fail instead.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use webpep_link::testing::netns_available as can_run;
use webpep_link::{NetNs, Tun, TunConfig};
use webpep_server::initial_rto::{self, InitialRto, RtoRule};

const SECOND: Duration = Duration::from_secs(1);

/// A namespace whose 10.9.9.0/24 goes into a TUN nobody reads: a SYN sent there is never
/// answered, so the socket keeps the RTO it started with.
fn silent_net() -> (NetNs, Tun) {
    let ns = NetNs::new().expect("namespace");
    let tun = Tun::create(&ns, "rto%d").expect("tun");
    tun.configure(
        &ns,
        &TunConfig {
            addr: Ipv4Addr::new(10, 9, 9, 1),
            prefix_len: 24,
            mtu: 1500,
        },
    )
    .expect("configure tun");
    (ns, tun)
}

/// The RTO a connection from `ns` (from 10.9.9.1:`port` if given) to the silent 10.9.9.2
/// starts with.
fn rto(ns: &NetNs, port: Option<u16>) -> Duration {
    let dst = SocketAddr::from((Ipv4Addr::new(10, 9, 9, 2), 80));
    let local = port.map(|p| SocketAddr::from((Ipv4Addr::new(10, 9, 9, 1), p)));
    ns.run(move || initial_rto::rto_of_a_new_connection(dst, local))
        .expect("run in namespace")
        .expect("rto")
}

fn cookie(ns: &NetNs) -> u64 {
    ns.run(initial_rto::netns_cookie_here)
        .expect("run in namespace")
        .expect("cookie")
}

#[test]
fn rules_set_the_initial_rto_of_their_namespace_and_port_until_dropped() {
    if !can_run("rules_set_the_initial_rto_of_their_namespace_and_port_until_dropped") {
        return;
    }
    let (a, _t1) = silent_net();
    let (b, _t2) = silent_net();
    assert_eq!(rto(&a, None), SECOND, "kernel default");

    let whole = InitialRto::install(&[RtoRule {
        netns_cookie: cookie(&a),
        local_port: None,
        timeout: 3 * SECOND,
    }])
    .expect("install");
    assert_eq!(rto(&a, None), 3 * SECOND);
    assert_eq!(rto(&b, None), SECOND, "another namespace is untouched");

    // A second program beside it (two labs in one process), for one port of b only.
    let port = InitialRto::install(&[RtoRule {
        netns_cookie: cookie(&b),
        local_port: Some(40_123),
        timeout: 7 * SECOND,
    }])
    .expect("second");
    assert_eq!(rto(&b, Some(40_123)), 7 * SECOND);
    assert_eq!(rto(&b, Some(40_124)), SECOND, "another port is untouched");
    assert_eq!(rto(&a, None), 3 * SECOND);

    drop(whole);
    drop(port);
    assert_eq!(rto(&a, None), SECOND, "detached on drop");
    assert_eq!(rto(&b, Some(40_123)), SECOND, "detached on drop");
}

#[test]
fn out_of_range_timeouts_are_refused() {
    for bad in [Duration::ZERO, 121 * SECOND] {
        let err = InitialRto::install(&[RtoRule {
            netns_cookie: 1,
            local_port: None,
            timeout: bad,
        }])
        .expect_err("refused");
        assert!(err.to_string().contains("outside"), "{err}");
    }
    assert!(InitialRto::install(&[]).is_err());
}

#[test]
fn the_proxy_gives_its_listening_ports_the_configured_initial_rto() {
    if !can_run("the_proxy_gives_its_listening_ports_the_configured_initial_rto") {
        return;
    }
    let (ns, _tun) = silent_net();
    let cfg = webpep_server::ServerConfig::from_toml("[air]\ninitial-rto = \"5s\"\n", "test")
        .expect("config");
    let server = webpep_server::Server::new(cfg).expect("server");
    let listener = ns
        .run(|| std::net::TcpListener::bind("127.0.0.1:3128"))
        .expect("ns")
        .expect("bind");
    let cancel = tokio_util::sync::CancellationToken::new();
    let c = cancel.clone();
    let handle = ns
        .run(move || {
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("runtime");
                rt.block_on(server.serve(vec![listener], None, c))
            })
        })
        .expect("ns");
    // Sockets on the listening port (as accepted ones are; here one on another address of the
    // namespace) get 5 s; the proxy's other sockets (its origin side) keep the kernel's 1 s.
    let deadline = std::time::Instant::now() + 5 * SECOND;
    while rto(&ns, Some(3128)) != 5 * SECOND {
        assert!(std::time::Instant::now() < deadline, "never installed");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(rto(&ns, None), SECOND);
    cancel.cancel();
    handle.join().expect("serve thread").expect("serve");
    assert_eq!(rto(&ns, Some(3128)), SECOND, "removed when serving ends");
}
