//! The lab's DNS: an authoritative server for the corpus domains ([`AuthDns`], in `net`) and the
//! UDP/TCP serving loops it shares with the caching resolver (`resolver.rs`, in `edge`).

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA, SOA};
use hickory_proto::rr::{DNSClass, Name, RData, Record, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use crate::resolver::CachingResolver;

/// The TTL of the authoritative answers unless configured (CDN-like, DESIGN §7.1).
pub const DEFAULT_TTL: u32 = 30;
/// The UDP payload size this side advertises with EDNS.
pub(crate) const EDNS_PAYLOAD: u16 = 1232;
/// A DNS-over-TCP connection with no query for this long is closed.
const TCP_IDLE: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum DnsError {
    #[error("DNS socket: {0}")]
    Io(#[from] io::Error),
    #[error("malformed DNS message: {0}")]
    Malformed(String),
    #[error("not a query")]
    NotAQuery,
    #[error("DNS encoding: {0}")]
    Encode(String),
    #[error("upstream: {0}")]
    Upstream(String),
}

/// Which transport a message came over (UDP answers are size-limited and may be truncated).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    Udp,
    Tcp,
}

/// The key of a name: lowercase, without the final dot.
pub(crate) fn name_key(name: &Name) -> String {
    name.to_ascii().trim_end_matches('.').to_ascii_lowercase()
}

fn key_of(name: &str) -> String {
    name.trim().trim_end_matches('.').to_ascii_lowercase()
}

/// Encodes `msg`; over UDP, a message bigger than the client's limit goes out truncated (TC)
/// so that the client retries over TCP.
pub(crate) fn encode_for(
    msg: &Message,
    query: &Message,
    transport: Transport,
) -> Result<Vec<u8>, DnsError> {
    let bytes = msg.to_vec().map_err(|e| DnsError::Encode(e.to_string()))?;
    if transport == Transport::Udp {
        let limit = query
            .extensions()
            .as_ref()
            .map_or(512, |e| e.max_payload().max(512)) as usize;
        if bytes.len() > limit {
            return msg
                .truncate()
                .to_vec()
                .map_err(|e| DnsError::Encode(e.to_string()));
        }
    }
    Ok(bytes)
}

/// A response skeleton for `query`: same id, opcode, RD and question; EDNS when the query had it.
pub(crate) fn response_to(query: &Message) -> Message {
    let mut resp = Message::new();
    resp.set_id(query.id())
        .set_message_type(MessageType::Response)
        .set_op_code(query.op_code())
        .set_recursion_desired(query.recursion_desired())
        .set_checking_disabled(query.checking_disabled());
    resp.add_queries(query.queries().iter().cloned());
    if query.extensions().is_some() {
        let mut e = Edns::new();
        e.set_max_payload(EDNS_PAYLOAD);
        resp.set_edns(e);
    }
    resp
}

/// Parses a packet that must be a standard query with one question. `Ok(Err(reply))`: a
/// well-formed message this server answers with an error code (NOTIMP, FORMERR).
pub(crate) fn parse_query(packet: &[u8]) -> Result<Result<(Message, Query), Message>, DnsError> {
    let query = Message::from_vec(packet).map_err(|e| DnsError::Malformed(e.to_string()))?;
    if query.message_type() != MessageType::Query {
        return Err(DnsError::NotAQuery);
    }
    if query.op_code() != OpCode::Query {
        let mut r = response_to(&query);
        r.set_response_code(ResponseCode::NotImp);
        return Ok(Err(r));
    }
    if query.queries().len() != 1 {
        let mut r = response_to(&query);
        r.set_response_code(ResponseCode::FormErr);
        return Ok(Err(r));
    }
    let q = query.queries()[0].clone();
    Ok(Ok((query, q)))
}

/// Counters of the authoritative server.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AuthDnsStats {
    pub queries: u64,
    /// Answers with at least one record.
    pub answered: u64,
    /// Known name, no record of the asked type.
    pub nodata: u64,
    pub nxdomain: u64,
    /// Other error codes (NOTIMP, FORMERR, REFUSED).
    pub errors: u64,
    /// Packets dropped (not DNS, or not a query).
    pub dropped: u64,
}

#[derive(Default)]
struct AuthCounters {
    queries: AtomicU64,
    answered: AtomicU64,
    nodata: AtomicU64,
    nxdomain: AtomicU64,
    errors: AtomicU64,
    dropped: AtomicU64,
}

struct AuthInner {
    zone: RwLock<HashMap<String, Vec<IpAddr>>>,
    ttl: AtomicU32,
    counters: AuthCounters,
}

/// The authoritative DNS server of the virtual domains: A (and AAAA) records for the names it
/// knows, NXDOMAIN with an SOA (negative TTL = the TTL) for every other name. Cheap to clone.
#[derive(Clone)]
pub struct AuthDns {
    inner: Arc<AuthInner>,
}

impl AuthDns {
    /// A server for `records` (name → address; a name may appear several times) with `ttl`.
    pub fn new(records: impl IntoIterator<Item = (String, IpAddr)>, ttl: u32) -> AuthDns {
        let dns = AuthDns {
            inner: Arc::new(AuthInner {
                zone: RwLock::new(HashMap::new()),
                ttl: AtomicU32::new(ttl),
                counters: AuthCounters::default(),
            }),
        };
        for (name, addr) in records {
            dns.insert(&name, addr);
        }
        dns
    }

    /// Adds an address for `name`.
    pub fn insert(&self, name: &str, addr: IpAddr) {
        let mut zone = self.inner.zone.write().unwrap_or_else(|p| p.into_inner());
        let addrs = zone.entry(key_of(name)).or_default();
        if !addrs.contains(&addr) {
            addrs.push(addr);
        }
    }

    /// Removes `name`.
    pub fn remove(&self, name: &str) {
        let mut zone = self.inner.zone.write().unwrap_or_else(|p| p.into_inner());
        zone.remove(&key_of(name));
    }

    /// Changes the TTL of answers from now on.
    pub fn set_ttl(&self, ttl: u32) {
        self.inner.ttl.store(ttl, Ordering::SeqCst);
    }

    pub fn ttl(&self) -> u32 {
        self.inner.ttl.load(Ordering::SeqCst)
    }

    pub fn stats(&self) -> AuthDnsStats {
        let c = &self.inner.counters;
        let get = |a: &AtomicU64| a.load(Ordering::SeqCst);
        AuthDnsStats {
            queries: get(&c.queries),
            answered: get(&c.answered),
            nodata: get(&c.nodata),
            nxdomain: get(&c.nxdomain),
            errors: get(&c.errors),
            dropped: get(&c.dropped),
        }
    }

    /// The answer to one DNS message (pure: no I/O). `Err`: drop the packet.
    pub fn answer(&self, packet: &[u8], transport: Transport) -> Result<Vec<u8>, DnsError> {
        let c = &self.inner.counters;
        let (query, q) = match parse_query(packet) {
            Ok(Ok(x)) => x,
            Ok(Err(reply)) => {
                c.errors.fetch_add(1, Ordering::Relaxed);
                return encode_for(&reply, &reply, transport);
            }
            Err(e) => {
                c.dropped.fetch_add(1, Ordering::Relaxed);
                return Err(e);
            }
        };
        c.queries.fetch_add(1, Ordering::Relaxed);
        let ttl = self.ttl();
        let mut resp = response_to(&query);
        resp.set_authoritative(true);
        if q.query_class() != DNSClass::IN {
            c.errors.fetch_add(1, Ordering::Relaxed);
            resp.set_authoritative(false)
                .set_response_code(ResponseCode::Refused);
            return encode_for(&resp, &query, transport);
        }
        let addrs = {
            let zone = self.inner.zone.read().unwrap_or_else(|p| p.into_inner());
            zone.get(&name_key(q.name())).cloned()
        };
        match addrs {
            Some(addrs) => {
                let qt = q.query_type();
                for addr in addrs {
                    let rdata = match addr {
                        IpAddr::V4(v4) if qt == RecordType::A || qt == RecordType::ANY => {
                            RData::A(A(v4))
                        }
                        IpAddr::V6(v6) if qt == RecordType::AAAA || qt == RecordType::ANY => {
                            RData::AAAA(AAAA(v6))
                        }
                        _ => continue,
                    };
                    resp.add_answer(Record::from_rdata(q.name().clone(), ttl, rdata));
                }
                if resp.answers().is_empty() {
                    c.nodata.fetch_add(1, Ordering::Relaxed);
                    resp.add_name_server(soa_for(q.name(), ttl));
                } else {
                    c.answered.fetch_add(1, Ordering::Relaxed);
                }
            }
            None => {
                c.nxdomain.fetch_add(1, Ordering::Relaxed);
                resp.set_response_code(ResponseCode::NXDomain);
                resp.add_name_server(soa_for(q.name(), ttl));
            }
        }
        encode_for(&resp, &query, transport)
    }

    /// Answers on a pre-bound UDP socket until `cancel`.
    pub async fn serve_udp(
        &self,
        socket: std::net::UdpSocket,
        cancel: CancellationToken,
    ) -> Result<(), DnsError> {
        serve_udp(Handler::Auth(self.clone()), socket, cancel).await
    }

    /// Answers on a pre-bound TCP listener until `cancel`.
    pub async fn serve_tcp(
        &self,
        listener: std::net::TcpListener,
        cancel: CancellationToken,
    ) -> Result<(), DnsError> {
        serve_tcp(Handler::Auth(self.clone()), listener, cancel).await
    }
}

/// The SOA that goes with negative answers: owner the name's last two labels, minimum = TTL.
fn soa_for(name: &Name, ttl: u32) -> Record {
    let labels = name.num_labels();
    let zone = if labels > 2 {
        name.trim_to(2)
    } else {
        name.clone()
    };
    let ns = Name::from_ascii("ns.webpep.lab.").unwrap_or_else(|_| Name::root());
    let mbox = Name::from_ascii("hostmaster.webpep.lab.").unwrap_or_else(|_| Name::root());
    let soa = SOA::new(ns, mbox, 1, 3600, 600, 86_400, ttl);
    Record::from_rdata(zone, ttl, RData::SOA(soa))
}

/// The two DNS servers behind the shared serving loops.
#[derive(Clone)]
pub(crate) enum Handler {
    Auth(AuthDns),
    Resolver(CachingResolver),
}

impl Handler {
    fn name(&self) -> &'static str {
        match self {
            Handler::Auth(_) => "auth-dns",
            Handler::Resolver(_) => "resolver",
        }
    }

    async fn handle(
        &self,
        packet: &[u8],
        transport: Transport,
        peer: SocketAddr,
    ) -> Option<Vec<u8>> {
        let r = match self {
            Handler::Auth(a) => a.answer(packet, transport),
            Handler::Resolver(r) => r.handle(packet, transport).await,
        };
        match r {
            Ok(bytes) => Some(bytes),
            Err(e) => {
                warn!(server = self.name(), %peer, len = packet.len(), error = %e, "dns: packet dropped");
                None
            }
        }
    }
}

pub(crate) async fn serve_udp(
    handler: Handler,
    socket: std::net::UdpSocket,
    cancel: CancellationToken,
) -> Result<(), DnsError> {
    socket.set_nonblocking(true)?;
    let socket = Arc::new(tokio::net::UdpSocket::from_std(socket)?);
    if let Ok(addr) = socket.local_addr() {
        info!(server = handler.name(), %addr, "dns: listening (udp)");
    }
    let tracker = TaskTracker::new();
    let mut buf = vec![0u8; 65_535];
    loop {
        let received = tokio::select! {
            _ = cancel.cancelled() => break,
            r = socket.recv_from(&mut buf) => r,
        };
        let (n, peer) = match received {
            Ok(x) => x,
            Err(e) => {
                // ICMP errors from earlier sends surface here on Linux: not fatal.
                debug!(server = handler.name(), error = %e, "dns: udp receive error");
                continue;
            }
        };
        let packet = buf[..n].to_vec();
        let handler = handler.clone();
        let socket = socket.clone();
        let cancel = cancel.clone();
        tracker.spawn(async move {
            let answer = tokio::select! {
                _ = cancel.cancelled() => None,
                a = handler.handle(&packet, Transport::Udp, peer) => a,
            };
            if let Some(bytes) = answer {
                if let Err(e) = socket.send_to(&bytes, peer).await {
                    debug!(server = handler.name(), %peer, error = %e, "dns: udp send failed");
                }
            }
        });
    }
    tracker.close();
    tracker.wait().await;
    Ok(())
}

pub(crate) async fn serve_tcp(
    handler: Handler,
    listener: std::net::TcpListener,
    cancel: CancellationToken,
) -> Result<(), DnsError> {
    listener.set_nonblocking(true)?;
    let listener = tokio::net::TcpListener::from_std(listener)?;
    if let Ok(addr) = listener.local_addr() {
        info!(server = handler.name(), %addr, "dns: listening (tcp)");
    }
    let tracker = TaskTracker::new();
    while let Some((stream, peer)) = webpep_accept::accept(&listener, &cancel, handler.name()).await
    {
        let handler = handler.clone();
        let cancel = cancel.clone();
        tracker.spawn(async move {
            tokio::select! {
                _ = cancel.cancelled() => {}
                r = tcp_connection(&handler, stream, peer) => {
                    if let Err(e) = r {
                        debug!(server = handler.name(), %peer, error = %e, "dns: tcp connection ended");
                    }
                }
            }
        });
    }
    tracker.close();
    tracker.wait().await;
    Ok(())
}

/// Length-prefixed messages (RFC 1035 §4.2.2), answered in order; a malformed one closes the
/// connection.
async fn tcp_connection(
    handler: &Handler,
    mut stream: tokio::net::TcpStream,
    peer: SocketAddr,
) -> io::Result<()> {
    loop {
        let mut len = [0u8; 2];
        match tokio::time::timeout(TCP_IDLE, stream.read_exact(&mut len)).await {
            Err(_) => return Ok(()),
            Ok(Err(e)) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
            Ok(Err(e)) => return Err(e),
            Ok(Ok(_)) => {}
        }
        let len = u16::from_be_bytes(len) as usize;
        if len == 0 {
            return Ok(());
        }
        let mut packet = vec![0u8; len];
        match tokio::time::timeout(TCP_IDLE, stream.read_exact(&mut packet)).await {
            Err(_) => return Ok(()),
            Ok(r) => r?,
        };
        let Some(answer) = handler.handle(&packet, Transport::Tcp, peer).await else {
            return Ok(());
        };
        let Ok(alen) = u16::try_from(answer.len()) else {
            warn!(
                server = handler.name(),
                "dns: answer over 65535 bytes not sent"
            );
            return Ok(());
        };
        let mut out = Vec::with_capacity(answer.len() + 2);
        out.extend_from_slice(&alen.to_be_bytes());
        out.extend_from_slice(&answer);
        stream.write_all(&out).await?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Mutated and random packets never panic the authoritative server.
    #[test]
    fn arbitrary_packets_do_not_panic() {
        let dns = AuthDns::new(
            [("www.a.test".to_string(), IpAddr::from([127, 0, 0, 2]))],
            30,
        );
        let mut q = Message::new();
        q.set_id(1).set_message_type(MessageType::Query);
        q.add_query(Query::query(
            Name::from_ascii("www.a.test.").expect("name"),
            RecordType::A,
        ));
        let seed = q.to_vec().expect("encode");
        let good = dns.answer(&seed, Transport::Udp).expect("answer");
        assert!(Message::from_vec(&good).expect("parse").answers().len() == 1);
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for round in 0..20_000 {
            let mut buf = seed.clone();
            if round % 4 == 0 {
                buf = (0..(next() % 100)).map(|_| next() as u8).collect();
            } else {
                for _ in 0..(1 + next() % 3) {
                    let i = (next() as usize) % buf.len();
                    buf[i] = next() as u8;
                }
            }
            if let Ok(answer) = dns.answer(&buf, Transport::Udp) {
                assert!(answer.len() <= 512);
            }
        }
    }
}
