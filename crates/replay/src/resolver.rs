//! The caching resolver that runs in `edge` and that `ue` uses by default: answers from a cache
//! that honours TTLs (TTL 0 is never cached), forwards misses to one upstream (the
//! authoritative server in `net`) over UDP with a timeout and retries, falls back to TCP when
//! the upstream answer is truncated, and answers SERVFAIL when the upstream stays silent.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{RData, Record};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::dns::{
    encode_for, name_key, parse_query, response_to, serve_tcp, serve_udp, DnsError, Handler,
    Transport, EDNS_PAYLOAD,
};

pub use webpep_accept::{Clock, TokioClock};

/// How the resolver forwards and caches.
#[derive(Clone, Debug)]
pub struct ResolverConfig {
    /// The authoritative server.
    pub upstream: SocketAddr,
    /// How long to wait for each upstream attempt.
    pub timeout: Duration,
    /// Attempts after the first one.
    pub retries: u32,
    /// Most cached answers; when full, expired ones are dropped, then everything.
    pub max_entries: usize,
}

impl ResolverConfig {
    /// Defaults: 2 s timeout, one retry, 10 000 entries.
    pub fn new(upstream: SocketAddr) -> ResolverConfig {
        ResolverConfig {
            upstream,
            timeout: Duration::from_secs(2),
            retries: 1,
            max_entries: 10_000,
        }
    }
}

/// Counters of the resolver.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResolverStats {
    pub queries: u64,
    pub cache_hits: u64,
    pub cache_misses: u64,
    /// Packets sent upstream (retries included; TCP fallbacks included).
    pub upstream_queries: u64,
    pub upstream_timeouts: u64,
    /// SERVFAIL answers sent because the upstream failed.
    pub servfail: u64,
    /// Packets dropped (not DNS, or not a query).
    pub dropped: u64,
}

#[derive(Default)]
struct Counters {
    queries: AtomicU64,
    cache_hits: AtomicU64,
    cache_misses: AtomicU64,
    upstream_queries: AtomicU64,
    upstream_timeouts: AtomicU64,
    servfail: AtomicU64,
    dropped: AtomicU64,
}

type Key = (String, u16, u16);

#[derive(Clone)]
struct Entry {
    rcode: ResponseCode,
    answers: Vec<Record>,
    authority: Vec<Record>,
    stored: Instant,
    ttl: u32,
}

struct Inner {
    config: ResolverConfig,
    cache: Mutex<HashMap<Key, Entry>>,
    counters: Counters,
    ids: AtomicU64,
    clock: Arc<dyn Clock>,
}

/// The caching resolver. Cheap to clone.
///
/// Upstream sockets are created on the thread that runs the resolver's future: run it on a
/// current-thread runtime on a thread inside the namespace it belongs to.
#[derive(Clone)]
pub struct CachingResolver {
    inner: Arc<Inner>,
}

impl CachingResolver {
    /// A resolver whose cache runs on tokio's clock ([`TokioClock`]).
    pub fn new(config: ResolverConfig) -> CachingResolver {
        Self::with_clock(config, Arc::new(TokioClock))
    }

    /// A resolver whose cache reads the time from `clock` to store, age and expire answers.
    pub fn with_clock(config: ResolverConfig, clock: Arc<dyn Clock>) -> CachingResolver {
        CachingResolver {
            inner: Arc::new(Inner {
                config,
                cache: Mutex::new(HashMap::new()),
                counters: Counters::default(),
                ids: AtomicU64::new(0),
                clock,
            }),
        }
    }

    /// Forgets every cached answer.
    pub fn flush(&self) {
        self.cache().clear();
    }

    /// Cached answers (expired ones included until they are evicted).
    pub fn cache_len(&self) -> usize {
        self.cache().len()
    }

    pub fn stats(&self) -> ResolverStats {
        let c = &self.inner.counters;
        let get = |a: &AtomicU64| a.load(Ordering::SeqCst);
        ResolverStats {
            queries: get(&c.queries),
            cache_hits: get(&c.cache_hits),
            cache_misses: get(&c.cache_misses),
            upstream_queries: get(&c.upstream_queries),
            upstream_timeouts: get(&c.upstream_timeouts),
            servfail: get(&c.servfail),
            dropped: get(&c.dropped),
        }
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Entry>> {
        self.inner
            .cache
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Answers on a pre-bound UDP socket until `cancel`.
    pub async fn serve_udp(
        &self,
        socket: std::net::UdpSocket,
        cancel: CancellationToken,
    ) -> Result<(), DnsError> {
        serve_udp(Handler::Resolver(self.clone()), socket, cancel).await
    }

    /// Answers on a pre-bound TCP listener until `cancel`.
    pub async fn serve_tcp(
        &self,
        listener: std::net::TcpListener,
        cancel: CancellationToken,
    ) -> Result<(), DnsError> {
        serve_tcp(Handler::Resolver(self.clone()), listener, cancel).await
    }

    /// The answer to one client message. `Err`: drop the packet.
    pub async fn handle(&self, packet: &[u8], transport: Transport) -> Result<Vec<u8>, DnsError> {
        let c = &self.inner.counters;
        let (query, q) = match parse_query(packet) {
            Ok(Ok(x)) => x,
            Ok(Err(mut reply)) => {
                reply.set_recursion_available(true);
                return encode_for(&reply, &reply, transport);
            }
            Err(e) => {
                c.dropped.fetch_add(1, Ordering::Relaxed);
                return Err(e);
            }
        };
        c.queries.fetch_add(1, Ordering::Relaxed);
        let key: Key = (
            name_key(q.name()),
            u16::from(q.query_type()),
            u16::from(q.query_class()),
        );
        let mut resp = response_to(&query);
        resp.set_recursion_available(true);

        if let Some((entry, age)) = self.lookup(&key) {
            c.cache_hits.fetch_add(1, Ordering::Relaxed);
            debug!(name = %key.0, "resolver: cache hit");
            fill(&mut resp, &entry, age);
            return encode_for(&resp, &query, transport);
        }
        c.cache_misses.fetch_add(1, Ordering::Relaxed);
        match self.forward(&q).await {
            Ok(upstream) => {
                let entry = Entry {
                    rcode: upstream.response_code(),
                    answers: upstream.answers().to_vec(),
                    authority: upstream.name_servers().to_vec(),
                    stored: self.inner.clock.now(),
                    ttl: 0,
                };
                if let Some(ttl) = cache_ttl(&upstream) {
                    self.store(
                        key,
                        Entry {
                            ttl,
                            ..entry.clone()
                        },
                    );
                }
                fill(&mut resp, &entry, 0);
            }
            Err(e) => {
                c.servfail.fetch_add(1, Ordering::Relaxed);
                warn!(name = %key.0, error = %e, "resolver: SERVFAIL");
                resp.set_response_code(ResponseCode::ServFail);
            }
        }
        encode_for(&resp, &query, transport)
    }

    /// A fresh cache entry for `key` and its age in seconds.
    fn lookup(&self, key: &Key) -> Option<(Entry, u32)> {
        let now = self.inner.clock.now();
        let mut cache = self.cache();
        let entry = cache.get(key)?;
        let age = now.saturating_duration_since(entry.stored);
        if age >= Duration::from_secs(u64::from(entry.ttl)) {
            cache.remove(key);
            return None;
        }
        Some((entry.clone(), age.as_secs() as u32))
    }

    fn store(&self, key: Key, entry: Entry) {
        let max = self.inner.config.max_entries.max(1);
        let now = self.inner.clock.now();
        let mut cache = self.cache();
        if cache.len() >= max && !cache.contains_key(&key) {
            cache.retain(|_, e| {
                now.saturating_duration_since(e.stored) < Duration::from_secs(u64::from(e.ttl))
            });
            if cache.len() >= max {
                cache.clear();
            }
        }
        cache.insert(key, entry);
    }

    fn next_id(&self) -> u16 {
        let mut h = RandomState::new().build_hasher();
        h.write_u64(self.inner.ids.fetch_add(1, Ordering::Relaxed));
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        h.finish() as u16
    }

    /// Asks the upstream: UDP with a timeout per attempt, `retries` more attempts, TCP when the
    /// UDP answer is truncated.
    async fn forward(&self, q: &Query) -> Result<Message, DnsError> {
        let cfg = &self.inner.config;
        let c = &self.inner.counters;
        let id = self.next_id();
        let mut msg = Message::new();
        msg.set_id(id)
            .set_message_type(MessageType::Query)
            .set_op_code(OpCode::Query)
            .set_recursion_desired(true);
        msg.add_query(q.clone());
        let mut edns = Edns::new();
        edns.set_max_payload(EDNS_PAYLOAD);
        msg.set_edns(edns);
        let bytes = msg.to_vec().map_err(|e| DnsError::Encode(e.to_string()))?;

        let bind: SocketAddr = if cfg.upstream.is_ipv4() {
            (Ipv4Addr::UNSPECIFIED, 0).into()
        } else {
            (Ipv6Addr::UNSPECIFIED, 0).into()
        };
        let socket = UdpSocket::bind(bind).await?;
        socket.connect(cfg.upstream).await?;
        let mut buf = vec![0u8; 65_535];
        let mut last_error = String::from("no answer");
        for _attempt in 0..=cfg.retries {
            c.upstream_queries.fetch_add(1, Ordering::Relaxed);
            if let Err(e) = socket.send(&bytes).await {
                last_error = e.to_string();
                tokio::time::sleep(cfg.timeout.min(Duration::from_millis(100))).await;
                continue;
            }
            let deadline = Instant::now() + cfg.timeout;
            loop {
                let n = match tokio::time::timeout_at(deadline, socket.recv(&mut buf)).await {
                    Err(_) => {
                        c.upstream_timeouts.fetch_add(1, Ordering::Relaxed);
                        last_error =
                            format!("no answer from {} in {:?}", cfg.upstream, cfg.timeout);
                        break;
                    }
                    Ok(Err(e)) => {
                        // e.g. ICMP port unreachable: wait out this attempt's time, then retry.
                        last_error = e.to_string();
                        tokio::time::sleep_until(deadline).await;
                        break;
                    }
                    Ok(Ok(n)) => n,
                };
                let Ok(answer) = Message::from_vec(&buf[..n]) else {
                    debug!("resolver: malformed upstream answer ignored");
                    continue;
                };
                if !matches_query(&answer, id, q) {
                    debug!("resolver: unrelated upstream answer ignored");
                    continue;
                }
                if answer.truncated() {
                    return self.forward_tcp(&bytes, id, q).await;
                }
                return Ok(answer);
            }
        }
        Err(DnsError::Upstream(last_error))
    }

    async fn forward_tcp(&self, query: &[u8], id: u16, q: &Query) -> Result<Message, DnsError> {
        let cfg = &self.inner.config;
        self.inner
            .counters
            .upstream_queries
            .fetch_add(1, Ordering::Relaxed);
        let exchange = async {
            let mut stream = TcpStream::connect(cfg.upstream).await?;
            let len = u16::try_from(query.len())
                .map_err(|_| DnsError::Encode("query too long".into()))?;
            let mut out = len.to_be_bytes().to_vec();
            out.extend_from_slice(query);
            stream.write_all(&out).await?;
            let mut len = [0u8; 2];
            stream.read_exact(&mut len).await?;
            let mut answer = vec![0u8; u16::from_be_bytes(len) as usize];
            stream.read_exact(&mut answer).await?;
            let answer =
                Message::from_vec(&answer).map_err(|e| DnsError::Upstream(e.to_string()))?;
            if !matches_query(&answer, id, q) {
                return Err(DnsError::Upstream("unrelated answer over TCP".into()));
            }
            Ok(answer)
        };
        match tokio::time::timeout(cfg.timeout, exchange).await {
            Ok(r) => r,
            Err(_) => Err(DnsError::Upstream(format!(
                "no TCP answer from {} in {:?}",
                cfg.upstream, cfg.timeout
            ))),
        }
    }
}

fn matches_query(answer: &Message, id: u16, q: &Query) -> bool {
    answer.id() == id
        && answer.message_type() == MessageType::Response
        && answer.queries().len() == 1
        && name_key(answer.queries()[0].name()) == name_key(q.name())
        && answer.queries()[0].query_type() == q.query_type()
        && answer.queries()[0].query_class() == q.query_class()
}

/// How long an upstream answer may be cached: the smallest answer TTL; for a negative answer,
/// the SOA's TTL capped by its minimum (RFC 2308). `None`: not cacheable (TTL 0, no SOA,
/// server failure).
fn cache_ttl(msg: &Message) -> Option<u32> {
    let negative_ttl = || {
        msg.name_servers()
            .iter()
            .filter_map(|r| match r.data() {
                RData::SOA(soa) => Some(r.ttl().min(soa.minimum())),
                _ => None,
            })
            .min()
    };
    let ttl = match msg.response_code() {
        ResponseCode::NoError if !msg.answers().is_empty() => {
            msg.answers().iter().map(Record::ttl).min()
        }
        ResponseCode::NoError | ResponseCode::NXDomain => negative_ttl(),
        _ => None,
    }?;
    (ttl > 0).then_some(ttl)
}

/// Puts a (possibly cached) answer into `resp`, with TTLs reduced by `age` seconds.
fn fill(resp: &mut Message, entry: &Entry, age: u32) {
    resp.set_response_code(entry.rcode);
    for r in &entry.answers {
        let mut r = r.clone();
        r.set_ttl(r.ttl().saturating_sub(age));
        resp.add_answer(r);
    }
    for r in &entry.authority {
        let mut r = r.clone();
        r.set_ttl(r.ttl().saturating_sub(age));
        resp.add_name_server(r);
    }
}
