//! A fake upstream resolver for the tests (UDP and TCP on one loopback port) and small
//! client helpers.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA, CNAME, SOA};
use hickory_proto::rr::{Name, RData, Record, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio_util::sync::CancellationToken;

pub fn name(s: &str) -> Name {
    Name::from_ascii(s).unwrap()
}

/// The fake zone:
/// - `www.foo.com`: A 193.123.25.10 (TTL 10), AAAA 2001:db8::10 (TTL 10)
/// - `img.foo.com`: A 192.0.2.5 (TTL 60)
/// - `www.cdn.com`: CNAME `edge.cdn.net` (TTL 300), which has A 198.51.100.7 (TTL 20)
/// - `www.big.com`: A 192.0.2.1 (TTL 60); over UDP always answered truncated (TC, no records)
/// - `short.foo.com`: A 192.0.2.9 with TTL 1
/// - `delay.foo.com`: A 192.0.2.10 (TTL 60), answered after 300 ms
/// - `slow.foo.com`: never answered
/// - `www.v4only.com`: A 192.0.2.11, no AAAA (NODATA with SOA, TTL 5)
/// - anything else: NXDOMAIN with an SOA (TTL 60)
pub fn answer(query: &Message, over_tcp: bool) -> Option<Message> {
    let q = query.queries().first()?.clone();
    let qname = q.name().to_ascii().to_ascii_lowercase();
    let mut resp = Message::new();
    resp.set_id(query.id())
        .set_message_type(MessageType::Response)
        .set_op_code(OpCode::Query)
        .set_recursion_desired(query.recursion_desired())
        .set_recursion_available(true);
    resp.add_query(q.clone());
    if query.extensions().is_some() {
        let mut e = Edns::new();
        e.set_max_payload(1232);
        resp.set_edns(e);
    }
    let a = |owner: &Name, ttl, ip: &str| {
        Record::from_rdata(owner.clone(), ttl, RData::A(A(ip.parse().unwrap())))
    };
    let owner = q.name().clone();
    let t = q.query_type();
    let soa = |zone: &str, ttl| {
        Record::from_rdata(
            name(zone),
            ttl,
            RData::SOA(SOA::new(name("ns.test."), name("h.test."), 1, 1, 1, 1, ttl)),
        )
    };
    match qname.as_str() {
        "slow.foo.com." => return None,
        "www.foo.com." => match t {
            RecordType::A => {
                resp.add_answer(a(&owner, 10, "193.123.25.10"));
            }
            RecordType::AAAA => {
                resp.add_answer(Record::from_rdata(
                    owner,
                    10,
                    RData::AAAA(AAAA("2001:db8::10".parse().unwrap())),
                ));
            }
            _ => {}
        },
        "img.foo.com." if t == RecordType::A => {
            resp.add_answer(a(&owner, 60, "192.0.2.5"));
        }
        "www.cdn.com." if t == RecordType::A => {
            resp.add_answer(Record::from_rdata(
                owner,
                300,
                RData::CNAME(CNAME(name("edge.cdn.net."))),
            ));
            resp.add_answer(a(&name("edge.cdn.net."), 20, "198.51.100.7"));
        }
        "www.big.com." if t == RecordType::A => {
            if !over_tcp {
                resp.set_truncated(true);
            } else {
                resp.add_answer(a(&owner, 60, "192.0.2.1"));
            }
        }
        "short.foo.com." if t == RecordType::A => {
            resp.add_answer(a(&owner, 1, "192.0.2.9"));
        }
        "delay.foo.com." if t == RecordType::A => {
            resp.add_answer(a(&owner, 60, "192.0.2.10"));
        }
        "www.v4only.com." => match t {
            RecordType::A => {
                resp.add_answer(a(&owner, 60, "192.0.2.11"));
            }
            _ => {
                resp.add_name_server(soa("v4only.com.", 5));
            }
        },
        "short.foo.com." | "img.foo.com." | "www.cdn.com." | "www.big.com." | "delay.foo.com." => {
            resp.add_name_server(soa("foo.com.", 60));
        }
        _ => {
            resp.set_response_code(ResponseCode::NXDomain);
            resp.add_name_server(soa("test.", 60));
        }
    }
    Some(resp)
}

/// The fake upstream, serving [`answer`] until dropped.
pub struct FakeUpstream {
    pub addr: SocketAddr,
    pub udp_queries: Arc<AtomicU64>,
    pub tcp_queries: Arc<AtomicU64>,
    cancel: CancellationToken,
}

impl Drop for FakeUpstream {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

impl FakeUpstream {
    pub fn udp(&self) -> u64 {
        self.udp_queries.load(Ordering::SeqCst)
    }
    pub fn tcp(&self) -> u64 {
        self.tcp_queries.load(Ordering::SeqCst)
    }
}

/// Binds UDP and TCP on one free loopback port.
pub fn bind_pair() -> (std::net::UdpSocket, std::net::TcpListener) {
    for _ in 0..50 {
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = udp.local_addr().unwrap().port();
        if let Ok(tcp) = std::net::TcpListener::bind(("127.0.0.1", port)) {
            return (udp, tcp);
        }
    }
    panic!("no free port pair");
}

pub async fn start_upstream() -> FakeUpstream {
    let (udp, tcp) = bind_pair();
    udp.set_nonblocking(true).unwrap();
    tcp.set_nonblocking(true).unwrap();
    let addr = udp.local_addr().unwrap();
    let udp = Arc::new(UdpSocket::from_std(udp).unwrap());
    let tcp = TcpListener::from_std(tcp).unwrap();
    let udp_queries = Arc::new(AtomicU64::new(0));
    let tcp_queries = Arc::new(AtomicU64::new(0));
    let cancel = CancellationToken::new();
    {
        let (udp, count, cancel) = (udp.clone(), udp_queries.clone(), cancel.clone());
        tokio::spawn(async move {
            let mut buf = vec![0u8; 65535];
            loop {
                let (n, peer) = tokio::select! {
                    _ = cancel.cancelled() => return,
                    r = udp.recv_from(&mut buf) => match r { Ok(x) => x, Err(_) => continue },
                };
                count.fetch_add(1, Ordering::SeqCst);
                let Ok(query) = Message::from_vec(&buf[..n]) else {
                    continue;
                };
                let udp = udp.clone();
                tokio::spawn(async move {
                    if delayed(&query) {
                        // The scripted upstream's behaviour: `delay.foo.com` is slow to answer.
                        tokio::time::sleep(Duration::from_millis(300)).await;
                    }
                    if let Some(resp) = answer(&query, false) {
                        let _ = udp.send_to(&resp.to_vec().unwrap(), peer).await;
                    }
                });
            }
        });
    }
    {
        let (count, cancel) = (tcp_queries.clone(), cancel.clone());
        tokio::spawn(async move {
            loop {
                let (mut stream, _) = tokio::select! {
                    _ = cancel.cancelled() => return,
                    r = tcp.accept() => match r { Ok(x) => x, Err(_) => continue },
                };
                let count = count.clone();
                tokio::spawn(async move {
                    while let Ok(Some(packet)) = read_frame(&mut stream).await {
                        count.fetch_add(1, Ordering::SeqCst);
                        let Ok(query) = Message::from_vec(&packet) else {
                            return;
                        };
                        if let Some(resp) = answer(&query, true) {
                            if write_frame(&mut stream, &resp.to_vec().unwrap())
                                .await
                                .is_err()
                            {
                                return;
                            }
                        }
                    }
                });
            }
        });
    }
    FakeUpstream {
        addr,
        udp_queries,
        tcp_queries,
        cancel,
    }
}

fn delayed(query: &Message) -> bool {
    query
        .queries()
        .first()
        .is_some_and(|q| q.name().to_ascii().eq_ignore_ascii_case("delay.foo.com."))
}

pub async fn read_frame(s: &mut TcpStream) -> std::io::Result<Option<Vec<u8>>> {
    let mut len = [0u8; 2];
    if let Err(e) = s.read_exact(&mut len).await {
        return if e.kind() == std::io::ErrorKind::UnexpectedEof {
            Ok(None)
        } else {
            Err(e)
        };
    }
    let mut body = vec![0u8; u16::from_be_bytes(len) as usize];
    s.read_exact(&mut body).await?;
    Ok(Some(body))
}

pub async fn write_frame(s: &mut TcpStream, msg: &[u8]) -> std::io::Result<()> {
    let mut out = (msg.len() as u16).to_be_bytes().to_vec();
    out.extend_from_slice(msg);
    s.write_all(&out).await
}

/// A client query for `qname`/`qtype` with `id` (EDNS 4096 when `edns`).
pub fn query(id: u16, qname: &str, qtype: RecordType, edns: bool) -> Message {
    let mut m = Message::new();
    m.set_id(id)
        .set_message_type(MessageType::Query)
        .set_op_code(OpCode::Query)
        .set_recursion_desired(true);
    m.add_query(Query::query(name(qname), qtype));
    if edns {
        let mut e = Edns::new();
        e.set_max_payload(4096);
        m.set_edns(e);
    }
    m
}

/// Sends `packet` over UDP to `to`; the raw answer, or `None` after `wait`.
pub async fn udp_exchange(to: SocketAddr, packet: &[u8], wait: Duration) -> Option<Vec<u8>> {
    let s = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    s.send_to(packet, to).await.unwrap();
    let mut buf = vec![0u8; 65535];
    match tokio::time::timeout(wait, s.recv_from(&mut buf)).await {
        Ok(Ok((n, _))) => Some(buf[..n].to_vec()),
        _ => None,
    }
}

/// (owner, ttl, value) of each answer record.
pub fn answers(m: &Message) -> Vec<(String, u32, String)> {
    m.answers()
        .iter()
        .map(|r| {
            let v = match r.data() {
                RData::A(a) => a.0.to_string(),
                RData::AAAA(a) => a.0.to_string(),
                RData::CNAME(c) => format!("CNAME {}", c.0),
                other => format!("{other:?}"),
            };
            (r.name().to_ascii(), r.ttl(), v)
        })
        .collect()
}

pub fn row(owner: &str, ttl: u32, v: &str) -> (String, u32, String) {
    (owner.to_string(), ttl, v.to_string())
}

/// A clock for the stub resolver's cache that moves only when told to.
pub struct ManualClock {
    start: tokio::time::Instant,
    offset: Mutex<Duration>,
}

impl ManualClock {
    pub fn new() -> Arc<ManualClock> {
        Arc::new(ManualClock {
            start: tokio::time::Instant::now(),
            offset: Mutex::new(Duration::ZERO),
        })
    }

    pub fn advance(&self, by: Duration) {
        *self.offset.lock().unwrap() += by;
    }
}

impl webpep_dns::Clock for ManualClock {
    fn now(&self) -> tokio::time::Instant {
        self.start + *self.offset.lock().unwrap()
    }
}

/// Polls `cond` until it holds, failing the test after `within` (generous: a bound on a
/// hang, not a measure of speed).
pub async fn wait_until(what: &str, within: Duration, mut cond: impl FnMut() -> bool) {
    let polled = async {
        while !cond() {
            // A polling interval, not a wait for something to have happened.
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    };
    if tokio::time::timeout(within, polled).await.is_err() {
        panic!("not within {within:?}: {what}");
    }
}
