//! The authoritative server and the caching resolver on loopback.
//!
//! No test waits for time to pass: the resolver's TTL expiry is decided on an injected
//! [`ManualClock`] or in tokio's paused time, and its upstream timeouts run in paused time.

mod common;

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, RecordType};
use webpep_replay::{
    AuthDns, CachingResolver, CancellationToken, Clock, ResolverConfig, Transport, DEFAULT_TTL,
};

/// A clock for the resolver's cache that moves only when told to.
struct ManualClock {
    start: tokio::time::Instant,
    offset: Mutex<Duration>,
}

impl ManualClock {
    fn new() -> Arc<ManualClock> {
        Arc::new(ManualClock {
            start: tokio::time::Instant::now(),
            offset: Mutex::new(Duration::ZERO),
        })
    }

    fn advance(&self, by: Duration) {
        *self.offset.lock().unwrap() += by;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> tokio::time::Instant {
        self.start + *self.offset.lock().unwrap()
    }
}

fn query_bytes(id: u16, name: &str, rtype: RecordType) -> Vec<u8> {
    let mut m = Message::new();
    m.set_id(id)
        .set_message_type(MessageType::Query)
        .set_op_code(OpCode::Query)
        .set_recursion_desired(true);
    m.add_query(Query::query(Name::from_ascii(name).expect("name"), rtype));
    m.to_vec().expect("encode")
}

fn udp_client() -> UdpSocket {
    let s = UdpSocket::bind("127.0.0.1:0").expect("bind");
    s.set_read_timeout(Some(Duration::from_secs(3)))
        .expect("timeout");
    s
}

fn ask_udp(server: SocketAddr, id: u16, name: &str, rtype: RecordType) -> Message {
    let s = udp_client();
    s.send_to(&query_bytes(id, name, rtype), server)
        .expect("send");
    let mut buf = [0u8; 4096];
    let n = s.recv(&mut buf).expect("answer");
    let m = Message::from_vec(&buf[..n]).expect("parse answer");
    assert_eq!(m.id(), id);
    assert_eq!(m.message_type(), MessageType::Response);
    m
}

fn ask_tcp(server: SocketAddr, id: u16, name: &str, rtype: RecordType) -> Message {
    let mut s = TcpStream::connect(server).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(3)))
        .expect("timeout");
    let q = query_bytes(id, name, rtype);
    let mut out = (q.len() as u16).to_be_bytes().to_vec();
    out.extend_from_slice(&q);
    s.write_all(&out).expect("send");
    let mut len = [0u8; 2];
    s.read_exact(&mut len).expect("len");
    let mut buf = vec![0u8; u16::from_be_bytes(len) as usize];
    s.read_exact(&mut buf).expect("answer");
    Message::from_vec(&buf).expect("parse")
}

fn a_records(m: &Message) -> Vec<(Ipv4Addr, u32)> {
    m.answers()
        .iter()
        .filter_map(|r| match r.data() {
            RData::A(a) => Some((a.0, r.ttl())),
            _ => None,
        })
        .collect()
}

struct Dns {
    auth: AuthDns,
    udp: SocketAddr,
    tcp: SocketAddr,
    _bg: Bg,
}

fn start_auth(ttl: u32) -> Dns {
    let auth = AuthDns::new(
        [
            (ALPHA.to_string(), IpAddr::from([127, 0, 0, 2])),
            (BETA.to_string(), IpAddr::from([127, 0, 0, 3])),
        ],
        ttl,
    );
    let udp = UdpSocket::bind("127.0.0.1:0").expect("udp");
    let tcp = TcpListener::bind("127.0.0.1:0").expect("tcp");
    let (ua, ta) = (udp.local_addr().expect("a"), tcp.local_addr().expect("a"));
    let a = auth.clone();
    let bg = spawn(move |cancel| async move {
        let (u, t) = tokio::join!(a.serve_udp(udp, cancel.clone()), a.serve_tcp(tcp, cancel));
        u.expect("udp");
        t.expect("tcp");
    });
    Dns {
        auth,
        udp: ua,
        tcp: ta,
        _bg: bg,
    }
}

struct Resolver {
    resolver: CachingResolver,
    udp: SocketAddr,
    tcp: SocketAddr,
    _bg: Bg,
}

fn start_resolver(config: ResolverConfig) -> Resolver {
    serve_resolver(CachingResolver::new(config))
}

fn serve_resolver(resolver: CachingResolver) -> Resolver {
    let udp = UdpSocket::bind("127.0.0.1:0").expect("udp");
    let tcp = TcpListener::bind("127.0.0.1:0").expect("tcp");
    let (ua, ta) = (udp.local_addr().expect("a"), tcp.local_addr().expect("a"));
    let r = resolver.clone();
    let bg = spawn(move |cancel| async move {
        let (u, t) = tokio::join!(r.serve_udp(udp, cancel.clone()), r.serve_tcp(tcp, cancel));
        u.expect("udp");
        t.expect("tcp");
    });
    Resolver {
        resolver,
        udp: ua,
        tcp: ta,
        _bg: bg,
    }
}

#[test]
fn authoritative_answers_with_the_configured_ttl() {
    let dns = start_auth(DEFAULT_TTL);
    let m = ask_udp(dns.udp, 7, "www.alpha.test.", RecordType::A);
    assert_eq!(m.response_code(), ResponseCode::NoError);
    assert!(m.authoritative());
    assert_eq!(a_records(&m), vec![(Ipv4Addr::new(127, 0, 0, 2), 30)]);
    // Case-insensitive, and the question comes back as asked.
    let m = ask_udp(dns.udp, 8, "IMG.Beta.TEST.", RecordType::A);
    assert_eq!(a_records(&m), vec![(Ipv4Addr::new(127, 0, 0, 3), 30)]);
    assert_eq!(m.queries()[0].name().to_ascii(), "IMG.Beta.TEST.");
    // TCP too, with a TTL changed at run time.
    dns.auth.set_ttl(5);
    let m = ask_tcp(dns.tcp, 9, "www.alpha.test.", RecordType::A);
    assert_eq!(a_records(&m), vec![(Ipv4Addr::new(127, 0, 0, 2), 5)]);
    // Known name, no AAAA: NODATA with an SOA.
    let m = ask_udp(dns.udp, 10, "www.alpha.test.", RecordType::AAAA);
    assert_eq!(m.response_code(), ResponseCode::NoError);
    assert!(m.answers().is_empty());
    assert!(matches!(m.name_servers()[0].data(), RData::SOA(_)));
    let stats = dns.auth.stats();
    assert_eq!((stats.queries, stats.answered, stats.nodata), (4, 3, 1));
}

#[test]
fn unknown_names_are_nxdomain() {
    let dns = start_auth(DEFAULT_TTL);
    let m = ask_udp(dns.udp, 1, "www.elsewhere.test.", RecordType::A);
    assert_eq!(m.response_code(), ResponseCode::NXDomain);
    assert!(m.answers().is_empty());
    let soa = &m.name_servers()[0];
    match soa.data() {
        RData::SOA(s) => assert_eq!(s.minimum(), DEFAULT_TTL),
        other => panic!("{other:?}"),
    }
    let m = ask_tcp(dns.tcp, 2, "alpha.test.", RecordType::A);
    assert_eq!(m.response_code(), ResponseCode::NXDomain);
    assert_eq!(dns.auth.stats().nxdomain, 2);
}

#[test]
fn garbage_packets_are_dropped_and_the_server_goes_on() {
    let dns = start_auth(DEFAULT_TTL);
    let s = udp_client();
    s.set_read_timeout(Some(Duration::from_millis(300)))
        .expect("t");
    let mut response_bit = query_bytes(3, "www.alpha.test.", RecordType::A);
    response_bit[2] |= 0x80; // QR: a response, not a query
    for junk in [
        &b""[..],
        b"\x00",
        b"hello, this is not DNS",
        &[0xff; 12],
        &query_bytes(3, "www.alpha.test.", RecordType::A)[..20],
        &response_bit,
    ] {
        s.send_to(junk, dns.udp).expect("send");
    }
    let mut buf = [0u8; 512];
    assert!(s.recv(&mut buf).is_err(), "no answer to garbage");
    // Garbage over TCP closes that connection only.
    let mut t = TcpStream::connect(dns.tcp).expect("tcp");
    t.set_read_timeout(Some(Duration::from_secs(3))).expect("t");
    t.write_all(b"\x00\x05junk!").expect("w");
    assert_eq!(t.read(&mut buf).expect("eof"), 0);
    // Still answering.
    assert_eq!(
        a_records(&ask_udp(dns.udp, 4, "www.alpha.test.", RecordType::A)).len(),
        1
    );
    // Two questions: FORMERR.
    let mut two = Message::new();
    two.set_id(5).set_message_type(MessageType::Query);
    two.add_query(Query::query(
        Name::from_ascii("a.test.").expect("n"),
        RecordType::A,
    ));
    two.add_query(Query::query(
        Name::from_ascii("b.test.").expect("n"),
        RecordType::A,
    ));
    s.send_to(&two.to_vec().expect("e"), dns.udp).expect("send");
    s.set_read_timeout(Some(Duration::from_secs(3))).expect("t");
    let n = s.recv(&mut buf).expect("formerr");
    assert_eq!(
        Message::from_vec(&buf[..n]).expect("p").response_code(),
        ResponseCode::FormErr
    );
    let stats = dns.auth.stats();
    assert!(stats.dropped >= 6, "{stats:?}");
}

#[test]
fn resolver_caches_until_the_ttl_expires() {
    let dns = start_auth(1);
    let clock = ManualClock::new();
    let res = serve_resolver(CachingResolver::with_clock(
        ResolverConfig::new(dns.udp),
        clock.clone(),
    ));
    let m = ask_udp(res.udp, 11, "www.alpha.test.", RecordType::A);
    assert!(m.recursion_available());
    assert!(!m.authoritative());
    assert_eq!(a_records(&m), vec![(Ipv4Addr::new(127, 0, 0, 2), 1)]);
    assert_eq!(dns.auth.stats().queries, 1);
    // Second query: from the cache, the upstream is not asked.
    let m = ask_udp(res.udp, 12, "WWW.ALPHA.TEST.", RecordType::A);
    assert_eq!(a_records(&m).len(), 1);
    assert!(a_records(&m)[0].1 <= 1);
    assert_eq!(dns.auth.stats().queries, 1);
    let stats = res.resolver.stats();
    assert_eq!(
        (stats.queries, stats.cache_hits, stats.upstream_queries),
        (2, 1, 1)
    );
    // Over TCP from the same cache.
    let m = ask_tcp(res.tcp, 13, "www.alpha.test.", RecordType::A);
    assert_eq!(a_records(&m).len(), 1);
    assert_eq!(dns.auth.stats().queries, 1);
    // Just before the TTL is over: still from the cache.
    clock.advance(Duration::from_millis(999));
    ask_udp(res.udp, 14, "www.alpha.test.", RecordType::A);
    assert_eq!(dns.auth.stats().queries, 1, "1 ms before the 1 s TTL ends");
    // Once the TTL is over, the upstream is asked again.
    clock.advance(Duration::from_millis(1));
    let m = ask_udp(res.udp, 15, "www.alpha.test.", RecordType::A);
    assert_eq!(a_records(&m), vec![(Ipv4Addr::new(127, 0, 0, 2), 1)]);
    assert_eq!(
        dns.auth.stats().queries,
        2,
        "asked again once the TTL is over"
    );
    // flush() forgets everything.
    res.resolver.flush();
    assert_eq!(res.resolver.cache_len(), 0);
    ask_udp(res.udp, 16, "www.alpha.test.", RecordType::A);
    assert_eq!(dns.auth.stats().queries, 3);
    // Negative answers are cached for the SOA's TTL (1 s here), then asked again.
    let m = ask_udp(res.udp, 17, "nope.test.", RecordType::A);
    assert_eq!(m.response_code(), ResponseCode::NXDomain);
    let m = ask_udp(res.udp, 18, "nope.test.", RecordType::A);
    assert_eq!(m.response_code(), ResponseCode::NXDomain);
    assert_eq!(dns.auth.stats().queries, 4);
    clock.advance(Duration::from_secs(1));
    let m = ask_udp(res.udp, 19, "nope.test.", RecordType::A);
    assert_eq!(m.response_code(), ResponseCode::NXDomain);
    assert_eq!(dns.auth.stats().queries, 5, "the negative TTL is over");
}

#[test]
fn cached_answers_count_their_ttl_down_with_the_clock() {
    let dns = start_auth(30);
    let clock = ManualClock::new();
    let res = serve_resolver(CachingResolver::with_clock(
        ResolverConfig::new(dns.udp),
        clock.clone(),
    ));
    let m = ask_udp(res.udp, 1, "img.beta.test.", RecordType::A);
    assert_eq!(a_records(&m), vec![(Ipv4Addr::new(127, 0, 0, 3), 30)]);
    clock.advance(Duration::from_millis(10_500));
    let m = ask_udp(res.udp, 2, "img.beta.test.", RecordType::A);
    assert_eq!(a_records(&m), vec![(Ipv4Addr::new(127, 0, 0, 3), 20)]);
    clock.advance(Duration::from_millis(19_499));
    let m = ask_udp(res.udp, 3, "img.beta.test.", RecordType::A);
    assert_eq!(a_records(&m), vec![(Ipv4Addr::new(127, 0, 0, 3), 1)]);
    assert_eq!(dns.auth.stats().queries, 1);
    clock.advance(Duration::from_millis(1));
    let m = ask_udp(res.udp, 4, "img.beta.test.", RecordType::A);
    assert_eq!(a_records(&m), vec![(Ipv4Addr::new(127, 0, 0, 3), 30)]);
    assert_eq!(dns.auth.stats().queries, 2);
}

/// The answer `resolver` gives to an A query for `name`, asked directly (no socket).
async fn resolve(resolver: &CachingResolver, id: u16, name: &str) -> Message {
    let bytes = resolver
        .handle(&query_bytes(id, name, RecordType::A), Transport::Udp)
        .await
        .expect("an answer");
    Message::from_vec(&bytes).expect("parse answer")
}

/// The default clock is tokio's: paused time moves the cache's expiry too.
#[tokio::test]
async fn the_default_clock_follows_tokio_time() {
    let dns = start_auth(1);
    let res = CachingResolver::new(ResolverConfig::new(dns.udp));
    resolve(&res, 1, "www.alpha.test.").await;
    // Paused only while no exchange is under way: with time paused, tokio moves the clock to
    // the next timer whenever every task waits, which could be the upstream's timeout.
    tokio::time::pause();
    resolve(&res, 2, "www.alpha.test.").await;
    tokio::time::advance(Duration::from_millis(999)).await;
    resolve(&res, 3, "www.alpha.test.").await;
    assert_eq!(dns.auth.stats().queries, 1, "1 ms before the 1 s TTL ends");
    tokio::time::advance(Duration::from_millis(1)).await;
    tokio::time::resume();
    let m = resolve(&res, 4, "www.alpha.test.").await;
    assert_eq!(a_records(&m), vec![(Ipv4Addr::new(127, 0, 0, 2), 1)]);
    assert_eq!(
        dns.auth.stats().queries,
        2,
        "asked again once the TTL is over"
    );
    let s = res.stats();
    assert_eq!((s.cache_hits, s.upstream_queries), (2, 2));
}

#[test]
fn ttl_zero_is_never_cached() {
    let dns = start_auth(0);
    let res = start_resolver(ResolverConfig::new(dns.udp));
    for id in 0..3 {
        let m = ask_udp(res.udp, id, "img.beta.test.", RecordType::A);
        assert_eq!(a_records(&m), vec![(Ipv4Addr::new(127, 0, 0, 3), 0)]);
    }
    assert_eq!(dns.auth.stats().queries, 3);
    assert_eq!(res.resolver.stats().cache_hits, 0);
    assert_eq!(res.resolver.cache_len(), 0);
}

// Paused time: the two 200 ms upstream timeouts are virtual, so the test waits for neither and
// the time they took is exact. Loopback delivers within the send call, so tokio moves its
// clock only when every task waits on a timer, never while a packet is on its way.
#[tokio::test(start_paused = true)]
async fn silent_upstream_gets_one_retry_then_servfail() {
    let silent = UdpSocket::bind("127.0.0.1:0").expect("silent upstream");
    silent
        .set_read_timeout(Some(Duration::from_secs(3)))
        .expect("t");
    let mut config = ResolverConfig::new(silent.local_addr().expect("a"));
    config.timeout = Duration::from_millis(200);
    let resolver = CachingResolver::new(config);
    let udp = UdpSocket::bind("127.0.0.1:0").expect("udp");
    let addr = udp.local_addr().expect("a");
    let cancel = CancellationToken::new();
    let server = tokio::spawn({
        let (r, cancel) = (resolver.clone(), cancel.clone());
        async move { r.serve_udp(udp, cancel).await }
    });
    let client = tokio::net::UdpSocket::bind("127.0.0.1:0")
        .await
        .expect("client");
    let started = tokio::time::Instant::now();
    client
        .send_to(&query_bytes(21, "www.alpha.test.", RecordType::A), addr)
        .await
        .expect("send");
    let mut buf = [0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(60), client.recv(&mut buf))
        .await
        .expect("an answer before the 60 s (virtual) guard")
        .expect("recv");
    let waited = started.elapsed();
    let m = Message::from_vec(&buf[..n]).expect("parse answer");
    assert_eq!(m.id(), 21);
    assert_eq!(m.response_code(), ResponseCode::ServFail);
    assert!(
        waited >= Duration::from_millis(400) && waited < Duration::from_millis(600),
        "two 200 ms attempts, then SERVFAIL: {waited:?}"
    );
    for _ in 0..2 {
        let n = silent.recv(&mut buf).expect("forwarded query");
        let q = Message::from_vec(&buf[..n]).expect("query");
        assert_eq!(q.queries()[0].name().to_ascii(), "www.alpha.test.");
    }
    let stats = resolver.stats();
    assert_eq!(
        (
            stats.upstream_queries,
            stats.upstream_timeouts,
            stats.servfail
        ),
        (2, 2, 1)
    );
    cancel.cancel();
    server.await.expect("join").expect("serve");
}

#[test]
fn resolver_drops_garbage_and_keeps_edns() {
    let dns = start_auth(30);
    let res = start_resolver(ResolverConfig::new(dns.udp));
    let s = udp_client();
    s.set_read_timeout(Some(Duration::from_millis(300)))
        .expect("t");
    s.send_to(b"\x12\x34garbage", res.udp).expect("send");
    let mut buf = [0u8; 4096];
    assert!(s.recv(&mut buf).is_err());
    assert_eq!(res.resolver.stats().dropped, 1);
    // A query with EDNS gets EDNS back.
    let mut m = Message::new();
    m.set_id(31)
        .set_message_type(MessageType::Query)
        .set_recursion_desired(true);
    m.add_query(Query::query(
        Name::from_ascii("www.alpha.test.").expect("n"),
        RecordType::A,
    ));
    let mut e = Edns::new();
    e.set_max_payload(1232);
    m.set_edns(e);
    s.set_read_timeout(Some(Duration::from_secs(3))).expect("t");
    s.send_to(&m.to_vec().expect("e"), res.udp).expect("send");
    let n = s.recv(&mut buf).expect("answer");
    let r = Message::from_vec(&buf[..n]).expect("p");
    assert!(r.extensions().is_some());
    assert_eq!(a_records(&r).len(), 1);
}
