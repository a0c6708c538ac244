//! `DnsProxy` end to end on loopback, against a fake upstream resolver.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::{RData, RecordType};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use webpep_dns::{CancellationToken, DnsProxy, DnsProxyConfig, NameMatch, RewritePolicy};

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
    let (udp, tcp) = bind_pair();
    let addr = udp.local_addr().unwrap();
    let proxy = Arc::new(DnsProxy::new(cfg));
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

#[tokio::test]
async fn silent_upstream_gives_servfail_after_two_tries() {
    let up = start_upstream().await;
    let p = start_proxy(up.addr, Some(www_policy()), Duration::from_millis(200)).await;
    let t0 = Instant::now();
    let resp = ask(p.addr, &query(51, "slow.foo.com.", RecordType::A, false)).await;
    assert!(
        t0.elapsed() >= Duration::from_millis(400),
        "{:?}",
        t0.elapsed()
    );
    assert_eq!(resp.id(), 51);
    assert_eq!(resp.response_code(), ResponseCode::ServFail);
    assert_eq!(resp.queries().len(), 1);
    assert_eq!(up.udp(), 2);
    assert_eq!(p.proxy.stats().upstream_failures, 1);
    p.stop().await;
}

#[tokio::test]
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

#[tokio::test]
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
    tokio::time::sleep(Duration::from_millis(250)).await;
    assert_eq!(up.udp(), 4, "in flight upstream while the first four wait");
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
    // TCP: the same.
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    let mut out = (sent.len() as u16).to_be_bytes().to_vec();
    out.extend_from_slice(&sent);
    s.write_all(&out).await.unwrap();
    let tcp = Message::from_vec(&read_frame(&mut s).await.unwrap().unwrap()).unwrap();
    assert_eq!(tcp.response_code(), ResponseCode::Refused);
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
