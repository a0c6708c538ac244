//! `DnsProxy` end to end on loopback, against a fake upstream resolver.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::{RData, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use webpep_dns::{
    CancellationToken, DnsProxy, DnsProxyConfig, DnsProxyLimits, NameMatch, RewritePolicy,
};

const WAIT: Duration = Duration::from_secs(5);

struct Running {
    addr: SocketAddr,
    proxy: Arc<DnsProxy>,
    cancel: CancellationToken,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Running {
    async fn stop(self) {
        self.cancel.cancel();
        let r = tokio::time::timeout(Duration::from_secs(2), self.task).await;
        assert!(matches!(r, Ok(Ok(Ok(())))), "graceful shutdown: {r:?}");
    }
}

fn www_policy() -> RewritePolicy {
    RewritePolicy::new(
        NameMatch::WwwPrefix,
        vec!["10.0.0.12".parse().unwrap(), "fd00::12".parse().unwrap()],
    )
}

async fn start_proxy(
    upstream: SocketAddr,
    policy: Option<RewritePolicy>,
    timeout: Duration,
) -> Running {
    let mut cfg = DnsProxyConfig::new(upstream);
    cfg.policy = policy;
    cfg.timeout = timeout;
    start_with(cfg).await
}

async fn start_with(cfg: DnsProxyConfig) -> Running {
    start_limited(cfg, DnsProxyLimits::default()).await
}

async fn start_limited(cfg: DnsProxyConfig, limits: DnsProxyLimits) -> Running {
    let (udp, tcp) = bind_pair();
    let addr = udp.local_addr().unwrap();
    let proxy = Arc::new(DnsProxy::with_limits(cfg, limits));
    let cancel = CancellationToken::new();
    let task = tokio::spawn(proxy.clone().serve(Some(udp), Some(tcp), cancel.clone()));
    Running {
        addr,
        proxy,
        cancel,
        task,
    }
}

async fn ask(addr: SocketAddr, q: &Message) -> Message {
    let bytes = udp_exchange(addr, &q.to_vec().unwrap(), WAIT)
        .await
        .expect("an answer");
    Message::from_vec(&bytes).unwrap()
}

#[tokio::test]
async fn a_answer_is_rewritten_with_the_proxy_first_and_the_origin_after() {
    let up = start_upstream().await;
    let p = start_proxy(up.addr, Some(www_policy()), Duration::from_secs(2)).await;
    let resp = ask(p.addr, &query(0x4242, "www.foo.com.", RecordType::A, false)).await;
    assert_eq!(resp.id(), 0x4242, "the client's ID");
    assert_eq!(resp.response_code(), ResponseCode::NoError);
    assert_eq!(
        answers(&resp),
        vec![
            row("www.foo.com.", 86_400, "10.0.0.12"),
            // One TTL for the answer (RFC 2181 §5.2): the origin's 10 s would undo the day.
            row("www.foo.com.", 86_400, "193.123.25.10")
        ]
    );
    let s = p.proxy.stats();
    assert_eq!((s.queries, s.rewritten, s.forwarded), (1, 1, 0));
    p.stop().await;
}

#[tokio::test]
async fn aaaa_rewrite_without_fallback_and_a_custom_ttl() {
    let up = start_upstream().await;
    let mut policy = www_policy();
    policy.ttl = 7200;
    policy.keep_original = false;
    let p = start_proxy(up.addr, Some(policy), Duration::from_secs(2)).await;
    let resp = ask(p.addr, &query(7, "WWW.foo.com.", RecordType::AAAA, true)).await;
    assert_eq!(answers(&resp), vec![row("WWW.foo.com.", 7200, "fd00::12")]);
    assert!(resp.extensions().is_some(), "EDNS kept");
    p.stop().await;
}

#[tokio::test]
async fn an_alias_gets_one_address_rrset_with_the_chains_end_as_fallback() {
    let up = start_upstream().await;
    let p = start_proxy(up.addr, Some(www_policy()), Duration::from_secs(2)).await;
    let resp = ask(p.addr, &query(9, "www.cdn.com.", RecordType::A, false)).await;
    // The CNAME chain is flattened: an alias may own no other data (RFC 1034 §3.6.2).
    assert_eq!(
        answers(&resp),
        vec![
            row("www.cdn.com.", 86_400, "10.0.0.12"),
            row("www.cdn.com.", 86_400, "198.51.100.7"),
        ]
    );
    p.stop().await;
}

#[tokio::test]
async fn non_matching_names_and_nxdomain_pass_through_byte_for_byte() {
    let up = start_upstream().await;
    let p = start_proxy(up.addr, Some(www_policy()), Duration::from_secs(2)).await;
    for (id, qname) in [(11u16, "img.foo.com."), (12, "www.nowhere.org.")] {
        let q = query(id, qname, RecordType::A, true).to_vec().unwrap();
        let direct = udp_exchange(up.addr, &q, WAIT).await.unwrap();
        let via_proxy = udp_exchange(p.addr, &q, WAIT).await.unwrap();
        assert_eq!(via_proxy, direct, "{qname}");
    }
    let nx = Message::from_vec(
        &udp_exchange(
            p.addr,
            &query(13, "www.nowhere.org.", RecordType::A, false)
                .to_vec()
                .unwrap(),
            WAIT,
        )
        .await
        .unwrap(),
    )
    .unwrap();
    assert_eq!(nx.response_code(), ResponseCode::NXDomain);
    assert!(nx.answers().is_empty());
    assert!(matches!(nx.name_servers()[0].data(), RData::SOA(_)));
    let s = p.proxy.stats();
    assert_eq!((s.rewritten, s.forwarded), (0, 3));
    p.stop().await;
}

#[tokio::test]
async fn plain_forwarder_changes_nothing() {
    let up = start_upstream().await;
    let p = start_proxy(up.addr, None, Duration::from_secs(2)).await;
    let q = query(21, "www.foo.com.", RecordType::A, false)
        .to_vec()
        .unwrap();
    let direct = udp_exchange(up.addr, &q, WAIT).await.unwrap();
    assert_eq!(udp_exchange(p.addr, &q, WAIT).await.unwrap(), direct);
    p.stop().await;
}

#[tokio::test]
async fn tcp_carries_two_pipelined_queries_on_one_connection() {
    let up = start_upstream().await;
    let p = start_proxy(up.addr, Some(www_policy()), Duration::from_secs(2)).await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    // Both frames in one write: the proxy must split them by their length prefixes.
    let mut out = Vec::new();
    for (id, qname) in [(31u16, "www.foo.com."), (32, "img.foo.com.")] {
        let q = query(id, qname, RecordType::A, false).to_vec().unwrap();
        out.extend_from_slice(&(q.len() as u16).to_be_bytes());
        out.extend_from_slice(&q);
    }
    s.write_all(&out).await.unwrap();
    let first = Message::from_vec(&read_frame(&mut s).await.unwrap().unwrap()).unwrap();
    let second = Message::from_vec(&read_frame(&mut s).await.unwrap().unwrap()).unwrap();
    assert_eq!(first.id(), 31);
    assert_eq!(answers(&first)[0], row("www.foo.com.", 86_400, "10.0.0.12"));
    assert_eq!(second.id(), 32);
    assert_eq!(answers(&second), vec![row("img.foo.com.", 60, "192.0.2.5")]);
    p.stop().await;
}

#[tokio::test]
async fn truncated_upstream_answer_is_retried_over_tcp() {
    let up = start_upstream().await;
    let p = start_proxy(up.addr, Some(www_policy()), Duration::from_secs(2)).await;
    let resp = ask(p.addr, &query(41, "www.big.com.", RecordType::A, true)).await;
    assert!(!resp.truncated());
    assert_eq!(
        answers(&resp),
        vec![
            row("www.big.com.", 86_400, "10.0.0.12"),
            row("www.big.com.", 86_400, "192.0.2.1")
        ]
    );
    assert_eq!((up.udp(), up.tcp()), (1, 1));
    p.stop().await;
}

// Paused time: the two 200 ms upstream timeouts are virtual, so the test waits for neither and
// the time they took is exact. Loopback delivers within the send call, so tokio moves its
// clock only when every task waits on a timer.
#[tokio::test(start_paused = true)]
async fn silent_upstream_gives_servfail_after_two_tries() {
    let up = start_upstream().await;
    let p = start_proxy(up.addr, Some(www_policy()), Duration::from_millis(200)).await;
    let t0 = tokio::time::Instant::now();
    let resp = ask(p.addr, &query(51, "slow.foo.com.", RecordType::A, false)).await;
    let waited = t0.elapsed();
    assert!(
        waited >= Duration::from_millis(400) && waited < Duration::from_millis(600),
        "two 200 ms attempts, then SERVFAIL: {waited:?}"
    );
    assert_eq!(resp.id(), 51);
    assert_eq!(resp.response_code(), ResponseCode::ServFail);
    assert_eq!(resp.queries().len(), 1);
    assert_eq!(up.udp(), 2);
    assert_eq!(p.proxy.stats().upstream_failures, 1);
    p.stop().await;
}

// Paused time: each 300 ms "no answer" window is virtual. Loopback delivers within the send
// call, so an answer, had the proxy sent one, would be waiting before tokio moved its clock.
#[tokio::test(start_paused = true)]
async fn malformed_packets_get_no_answer_and_the_proxy_keeps_serving() {
    let up = start_upstream().await;
    let p = start_proxy(up.addr, Some(www_policy()), Duration::from_secs(2)).await;
    // Garbage, a truncated header, and a response where a query belongs.
    let mut response = query(61, "www.foo.com.", RecordType::A, false);
    response.set_message_type(hickory_proto::op::MessageType::Response);
    let bad: Vec<Vec<u8>> = vec![
        b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff".to_vec(),
        vec![0, 1, 2],
        response.to_vec().unwrap(),
    ];
    for packet in &bad {
        assert_eq!(
            udp_exchange(p.addr, packet, Duration::from_millis(300)).await,
            None
        );
    }
    let ok = ask(p.addr, &query(62, "www.foo.com.", RecordType::A, false)).await;
    assert_eq!(ok.id(), 62);
    assert_eq!(answers(&ok).len(), 2);
    let s = p.proxy.stats();
    assert_eq!((s.malformed, s.queries), (3, 1));
    assert_eq!(up.udp(), 1, "nothing malformed went upstream");

    // A TCP client sending garbage is disconnected.
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(&[0, 4, 1, 2, 3, 4]).await.unwrap();
    let r = tokio::time::timeout(WAIT, read_frame(&mut s))
        .await
        .expect("closed, not hung");
    assert!(matches!(r, Ok(None) | Err(_)), "{r:?}");
    p.stop().await;
}

#[tokio::test]
async fn small_udp_client_gets_tc_for_a_big_rewritten_answer() {
    // An answer that fits the upstream's reply but not the client's 512 bytes once the proxy
    // adds its records must go out truncated, so the client retries over TCP.
    let up = start_upstream().await;
    let mut policy = www_policy();
    policy.proxy_addrs = (1..=40u8)
        .map(|i| std::net::IpAddr::from([10, 0, 1, i]))
        .collect();
    let p = start_proxy(up.addr, Some(policy), Duration::from_secs(2)).await;
    let resp = ask(p.addr, &query(71, "www.foo.com.", RecordType::A, false)).await;
    assert!(resp.truncated());
    assert!(resp.answers().is_empty());
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    write_frame(
        &mut s,
        &query(72, "www.foo.com.", RecordType::A, false)
            .to_vec()
            .unwrap(),
    )
    .await
    .unwrap();
    let full = Message::from_vec(&read_frame(&mut s).await.unwrap().unwrap()).unwrap();
    assert_eq!(full.answers().len(), 41);
    assert!(!full.truncated());
    p.stop().await;
}

// Paused time: the 400 ms upstream timeouts are virtual, so "only four at once" is checked
// before any of them can end, however busy the machine. Loopback delivers within the send
// call, and the 2 ms polls are the next timers while the queries travel.
#[tokio::test(start_paused = true)]
async fn a_flood_is_bounded_by_the_in_flight_limit() {
    let up = start_upstream().await;
    let (udp, tcp) = bind_pair();
    let addr = udp.local_addr().unwrap();
    let mut cfg = DnsProxyConfig::new(up.addr);
    cfg.timeout = Duration::from_millis(400);
    let limits = webpep_dns::DnsProxyLimits {
        max_in_flight: 4,
        attempts: 1,
        ..Default::default()
    };
    let proxy = Arc::new(DnsProxy::with_limits(cfg, limits));
    let cancel = CancellationToken::new();
    let task = tokio::spawn(proxy.clone().serve(Some(udp), Some(tcp), cancel.clone()));
    let p = Running {
        addr,
        proxy,
        cancel,
        task,
    };

    // 50 queries for a name the upstream never answers: only 4 may be waiting upstream.
    let client = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    for id in 0..50u16 {
        let q = query(id, "slow.foo.com.", RecordType::A, false)
            .to_vec()
            .unwrap();
        client.send_to(&q, p.addr).await.unwrap();
    }
    wait_until("four queries upstream", WAIT, || up.udp() >= 4).await;
    // Virtual: 300 ms on, still before the first timeout.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(up.udp(), 4, "in flight upstream while the first four wait");
    assert_eq!(p.proxy.stats().upstream_packets, 4);
    // Then the backlog drains four at a time, each answered SERVFAIL.
    let mut buf = vec![0u8; 512];
    let first = tokio::time::timeout(WAIT, client.recv_from(&mut buf))
        .await
        .unwrap()
        .unwrap();
    let m = Message::from_vec(&buf[..first.0]).unwrap();
    assert_eq!(m.response_code(), ResponseCode::ServFail);
    p.stop().await;
}

#[tokio::test]
async fn clients_outside_the_allowed_networks_get_refused_and_nothing_is_forwarded() {
    let up = start_upstream().await;
    let mut cfg = DnsProxyConfig::new(up.addr);
    cfg.policy = Some(www_policy());
    cfg.allow_clients = vec!["192.0.2.0/24".parse().unwrap()];
    let p = start_with(cfg).await;
    // UDP: REFUSED, no bigger than the query (nothing to amplify).
    let q = query(0x5151, "www.foo.com.", RecordType::A, false);
    let sent = q.to_vec().unwrap();
    let resp = ask(p.addr, &q).await;
    assert_eq!(resp.id(), 0x5151);
    assert_eq!(resp.response_code(), ResponseCode::Refused);
    assert!(resp.answers().is_empty());
    assert!(resp.to_vec().unwrap().len() <= sent.len());
    // TCP: the connection is closed at once.
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    let mut out = (sent.len() as u16).to_be_bytes().to_vec();
    out.extend_from_slice(&sent);
    let _ = s.write_all(&out).await;
    let r = tokio::time::timeout(WAIT, read_frame(&mut s))
        .await
        .expect("closed, not hung");
    assert!(matches!(r, Ok(None) | Err(_)), "{r:?}");
    let st = p.proxy.stats();
    assert_eq!((st.refused, st.upstream_packets, st.rewritten), (2, 0, 0));
    p.stop().await;
    // The default serves loopback: the same query is answered.
    let p = start_proxy(up.addr, Some(www_policy()), Duration::from_secs(2)).await;
    let resp = ask(p.addr, &query(1, "www.foo.com.", RecordType::A, false)).await;
    assert_eq!(resp.response_code(), ResponseCode::NoError);
    assert_eq!(p.proxy.stats().refused, 0);
    p.stop().await;
}

/// A TCP connection to `to` from the loopback address `from` (any of 127.0.0.0/8 can be bound
/// on Linux).
async fn connect_from(from: &str, to: SocketAddr) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket
        .bind(SocketAddr::new(from.parse().unwrap(), 0))
        .unwrap();
    socket.connect(to).await.unwrap()
}

/// Asks for `www.foo.com` on `s` and returns the answer's ID, failing after `within`.
async fn tcp_ask(s: &mut TcpStream, id: u16, within: Duration) -> u16 {
    let q = query(id, "www.foo.com.", RecordType::A, false);
    write_frame(s, &q.to_vec().unwrap()).await.unwrap();
    let bytes = tokio::time::timeout(within, read_frame(s))
        .await
        .expect("answered in time")
        .unwrap()
        .expect("an answer");
    Message::from_vec(&bytes).unwrap().id()
}

/// True when the proxy has closed `s` (end of stream or reset), false after `within`.
async fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    let mut b = [0u8; 1];
    matches!(
        tokio::time::timeout(within, s.read(&mut b)).await,
        Ok(Ok(0) | Err(_))
    )
}

/// Two TCP slots, loopback clients allowed but 127.0.0.2.
fn two_slots(upstream: SocketAddr) -> (DnsProxyConfig, DnsProxyLimits) {
    let mut cfg = DnsProxyConfig::new(upstream);
    cfg.allow_clients = vec!["127.0.0.1/32".parse().unwrap()];
    let limits = DnsProxyLimits {
        max_tcp_connections: 2,
        ..Default::default()
    };
    (cfg, limits)
}

// The TCP slot tests run in paused (virtual) time: the clock moves only when every task waits
// on a timer, so "answered within 1 s" holds on a busy machine and means no timer (10 s idle)
// had to fire first. Loopback delivers within the send call, so no I/O is mistaken for idle.

#[tokio::test(start_paused = true)]
async fn tcp_connections_from_clients_not_allowed_are_closed_at_once_and_take_no_slot() {
    let up = start_upstream().await;
    let (cfg, limits) = two_slots(up.addr);
    let p = start_limited(cfg, limits).await;
    let mut refused = Vec::new();
    for _ in 0..6 {
        refused.push(connect_from("127.0.0.2", p.addr).await);
    }
    for (i, s) in refused.iter_mut().enumerate() {
        assert!(
            closed_within(s, Duration::from_secs(1)).await,
            "connection {i}"
        );
    }
    let t0 = tokio::time::Instant::now();
    let mut s = connect_from("127.0.0.1", p.addr).await;
    assert_eq!(tcp_ask(&mut s, 81, Duration::from_secs(1)).await, 81);
    assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
    let st = p.proxy.stats();
    assert_eq!((st.refused, st.queries), (6, 1));
    p.stop().await;
}

#[tokio::test(start_paused = true)]
async fn the_connection_idle_longest_gives_way_to_a_new_one() {
    let up = start_upstream().await;
    let (cfg, limits) = two_slots(up.addr);
    let p = start_limited(cfg, limits).await;
    let mut first = connect_from("127.0.0.1", p.addr).await;
    // Virtual time (paused): lets the first connection be idle 1 s longer than the second.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut second = connect_from("127.0.0.1", p.addr).await;
    // The second is mid-message: waiting on its client too, but not as long.
    second.write_all(&[0]).await.unwrap();
    // Virtual time, as above.
    tokio::time::sleep(Duration::from_secs(1)).await;

    let t0 = tokio::time::Instant::now();
    let mut third = connect_from("127.0.0.1", p.addr).await;
    assert_eq!(tcp_ask(&mut third, 82, Duration::from_secs(1)).await, 82);
    assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
    assert!(closed_within(&mut first, Duration::from_millis(100)).await);
    // The second is still served: the rest of its message gets its answer.
    let q = query(83, "www.foo.com.", RecordType::A, false)
        .to_vec()
        .unwrap();
    let mut rest = vec![q.len() as u8];
    rest.extend_from_slice(&q);
    second.write_all(&rest).await.unwrap();
    let a = tokio::time::timeout(Duration::from_secs(1), read_frame(&mut second)).await;
    assert_eq!(
        Message::from_vec(&a.unwrap().unwrap().unwrap())
            .unwrap()
            .id(),
        83
    );
    p.stop().await;
}

#[tokio::test(start_paused = true)]
async fn with_every_connection_being_answered_the_next_to_finish_gives_way() {
    let up = start_upstream().await;
    let (mut cfg, limits) = two_slots(up.addr);
    cfg.timeout = Duration::from_secs(1);
    let p = start_limited(cfg, limits).await;
    // Both slots wait on the upstream, which never answers: SERVFAIL after 2 × 1 s.
    let mut busy = Vec::new();
    for id in [84u16, 85] {
        let mut s = connect_from("127.0.0.1", p.addr).await;
        let q = query(id, "slow.foo.com.", RecordType::A, false);
        write_frame(&mut s, &q.to_vec().unwrap()).await.unwrap();
        busy.push(s);
    }
    // Virtual time: 100 ms into the upstream's 1 s attempts.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let t0 = tokio::time::Instant::now();
    let mut s = connect_from("127.0.0.1", p.addr).await;
    assert_eq!(tcp_ask(&mut s, 86, Duration::from_secs(5)).await, 86);
    // Answered once the first SERVFAIL has gone out, not after that connection's idle time.
    let waited = t0.elapsed();
    assert!(waited < Duration::from_secs(3), "{waited:?}");
    for b in &mut busy {
        let a = read_frame(b).await.unwrap().unwrap();
        assert_eq!(
            Message::from_vec(&a).unwrap().response_code(),
            ResponseCode::ServFail
        );
    }
    p.stop().await;
}

#[tokio::test(start_paused = true)]
async fn idle_and_stalled_tcp_connections_are_closed_after_the_idle_time() {
    let up = start_upstream().await;
    let p = start_proxy(up.addr, None, Duration::from_secs(2)).await;
    let idle = DnsProxyLimits::default().tcp_idle;
    let t0 = tokio::time::Instant::now();
    let mut silent = connect_from("127.0.0.1", p.addr).await;
    let (mut trickle_read, mut trickle) = connect_from("127.0.0.1", p.addr).await.into_split();
    let mut answered = connect_from("127.0.0.1", p.addr).await;
    let writer = tokio::spawn(async move {
        // One byte of a 20-byte message every 2 s: progress, never whole within the idle time.
        let _ = trickle.write_all(&[0, 20]).await;
        for _ in 0..20 {
            tokio::time::sleep(Duration::from_secs(2)).await;
            if trickle.write_all(&[1]).await.is_err() {
                return;
            }
        }
    });
    let (silent_at, trickle_at, answered_at) = tokio::join!(
        async {
            assert!(closed_within(&mut silent, idle * 2).await);
            t0.elapsed()
        },
        async {
            let mut b = [0u8; 16];
            let closed = tokio::time::timeout(idle * 2, async {
                while let Ok(1..) = trickle_read.read(&mut b).await {}
            });
            assert!(closed.await.is_ok());
            t0.elapsed()
        },
        async {
            // Its idle time starts again from its answer at 5 s.
            tokio::time::sleep(Duration::from_secs(5)).await;
            assert_eq!(tcp_ask(&mut answered, 87, Duration::from_secs(1)).await, 87);
            assert!(closed_within(&mut answered, idle * 2).await);
            t0.elapsed()
        },
    );
    writer.abort();
    let around = |at: Duration, want: Duration| at >= want && at < want + Duration::from_secs(1);
    assert!(around(silent_at, idle), "{silent_at:?}");
    assert!(around(trickle_at, idle), "{trickle_at:?}");
    assert!(
        around(answered_at, idle + Duration::from_secs(5)),
        "{answered_at:?}"
    );
    p.stop().await;
}
