//! `StubResolver`: the edge proxy's own resolver for origin names (001, 002: lookups happen
//! on the wired side, never over the air). It asks one upstream resolver for A and AAAA at
//! once, caches the result for the records' TTL (clamped), caches "no such host" for a short
//! negative TTL, and coalesces concurrent lookups of one name into one pair of queries.
//!
//! Names are looked up as given (absolute): no search domains, no /etc/hosts.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, RecordType};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::debug;

use crate::error::DnsError;
use crate::policy::normalize;
use crate::rewrite::addresses;
use crate::upstream::Upstream;
use crate::wire::{encode, random_id};

/// The UDP payload size the stub advertises (the DNS flag day 2020 value).
const EDNS_PAYLOAD: u16 = 1232;

pub use webpep_accept::{Clock, TokioClock};

/// How the stub resolver asks and caches.
#[derive(Clone, Debug)]
pub struct StubConfig {
    /// How long to wait for each upstream attempt.
    pub timeout: Duration,
    /// UDP attempts per query.
    pub attempts: u32,
    /// Most cached names; when full, expired entries go first, then those expiring soonest.
    pub max_entries: usize,
    /// Answers are kept at least this long (0: a TTL of 0 is not cached at all).
    pub min_ttl: u32,
    /// Answers are kept at most this long, whatever their TTL.
    pub max_ttl: u32,
    /// Longest time "no such host" is remembered (the SOA minimum, RFC 2308, when shorter).
    pub negative_ttl: u32,
    /// Also ask AAAA (addresses returned after the IPv4 ones).
    pub ipv6: bool,
}

impl Default for StubConfig {
    /// 2 s timeout, 2 attempts, 10 000 names, TTLs clamped to [0 s, 1 day], 30 s negative,
    /// IPv6 asked.
    fn default() -> Self {
        StubConfig {
            timeout: Duration::from_secs(2),
            attempts: 2,
            max_entries: 10_000,
            min_ttl: 0,
            max_ttl: 86_400,
            negative_ttl: 30,
            ipv6: true,
        }
    }
}

/// Counters of the stub resolver.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StubStats {
    /// Name lookups (IP literals not counted).
    pub lookups: u64,
    /// Lookups answered from the cache.
    pub cache_hits: u64,
    /// Lookups that waited for another lookup of the same name already asking upstream.
    pub coalesced: u64,
    /// Packets sent upstream (one per family per lookup, plus retries and TCP fallbacks).
    pub queries_sent: u64,
    /// Lookups that failed because the upstream did not answer usably.
    pub failures: u64,
}

#[derive(Default)]
struct Counters {
    lookups: AtomicU64,
    cache_hits: AtomicU64,
    coalesced: AtomicU64,
    queries_sent: AtomicU64,
    failures: AtomicU64,
}

/// The result of resolving a name, shared with coalesced lookups.
#[derive(Clone, Debug)]
enum Outcome {
    Found(Vec<IpAddr>),
    NotFound,
    Failed(String),
}

impl Outcome {
    fn into_result(self, host: &str) -> Result<Vec<IpAddr>, DnsError> {
        match self {
            Outcome::Found(a) => Ok(a),
            Outcome::NotFound => Err(DnsError::NotFound(host.to_string())),
            Outcome::Failed(e) => Err(DnsError::Upstream(e)),
        }
    }
}

enum Slot {
    Ready {
        outcome: Outcome,
        expires: Instant,
    },
    /// A lookup is asking upstream; its result arrives here (`None` until then).
    Pending(watch::Receiver<Option<Outcome>>),
}

/// What a lookup does: use the cache, wait for a lookup in flight, or ask upstream itself.
enum Claim {
    Hit(Outcome),
    Wait(watch::Receiver<Option<Outcome>>),
    Lead(watch::Sender<Option<Outcome>>),
}

/// One family's answer.
enum FamilyAnswer {
    Addrs(Vec<IpAddr>, u32),
    /// NXDOMAIN or NODATA, with the negative TTL the upstream allows.
    Nothing(Option<u32>),
    Failed(String),
}

/// The edge's caching stub resolver. Share it with `Arc`.
pub struct StubResolver {
    upstream: Upstream,
    cfg: StubConfig,
    slots: Mutex<HashMap<String, Slot>>,
    counters: Counters,
    clock: Arc<dyn Clock>,
}

impl StubResolver {
    /// A resolver that asks `upstream`, its cache on tokio's clock ([`TokioClock`]).
    pub fn new(upstream: SocketAddr, cfg: StubConfig) -> Self {
        Self::with_clock(upstream, cfg, Arc::new(TokioClock))
    }

    /// A resolver that asks `upstream` and reads the time from `clock` to store and expire
    /// answers (the upstream's timeouts stay on tokio's timers).
    pub fn with_clock(upstream: SocketAddr, cfg: StubConfig, clock: Arc<dyn Clock>) -> Self {
        StubResolver {
            upstream: Upstream {
                addr: upstream,
                timeout: cfg.timeout,
                attempts: cfg.attempts,
            },
            cfg,
            slots: Mutex::new(HashMap::new()),
            counters: Counters::default(),
            clock,
        }
    }

    /// The counters so far.
    pub fn stats(&self) -> StubStats {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        StubStats {
            lookups: get(&c.lookups),
            cache_hits: get(&c.cache_hits),
            coalesced: get(&c.coalesced),
            queries_sent: get(&c.queries_sent),
            failures: get(&c.failures),
        }
    }

    /// Forgets every cached answer (lookups in flight are unaffected).
    pub fn clear(&self) {
        self.slots().retain(|_, s| matches!(s, Slot::Pending(_)));
    }

    fn slots(&self) -> MutexGuard<'_, HashMap<String, Slot>> {
        // A panic while holding the lock leaves a consistent map: recover it.
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The addresses of `host` (IPv4 first). An IP literal (also `[v6]`) is returned as is.
    pub async fn lookup(&self, host: &str) -> Result<Vec<IpAddr>, DnsError> {
        let literal = host.trim().trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = literal.parse::<IpAddr>() {
            return Ok(vec![ip]);
        }
        let key = normalize(host);
        if key.is_empty() || key.len() > 253 {
            return Err(DnsError::InvalidName(host.to_string()));
        }
        let name = Name::from_ascii(format!("{key}."))
            .map_err(|_| DnsError::InvalidName(host.to_string()))?;
        self.counters.lookups.fetch_add(1, Ordering::Relaxed);
        loop {
            match self.claim(&key) {
                Claim::Hit(outcome) => {
                    self.counters.cache_hits.fetch_add(1, Ordering::Relaxed);
                    return outcome.into_result(host);
                }
                Claim::Lead(tx) => return self.lead(&key, &name, tx).await.into_result(host),
                Claim::Wait(mut rx) => {
                    self.counters.coalesced.fetch_add(1, Ordering::Relaxed);
                    let result = rx
                        .wait_for(Option::is_some)
                        .await
                        .ok()
                        .and_then(|v| v.clone());
                    if let Some(outcome) = result {
                        return outcome.into_result(host);
                    }
                    // The leading lookup was cancelled: take the lead (or follow its successor).
                }
            }
        }
    }

    /// What a lookup of `key` does now. Synchronous, so the lock is never held across an await.
    fn claim(&self, key: &str) -> Claim {
        let mut slots = self.slots();
        match slots.get(key) {
            Some(Slot::Ready { outcome, expires }) if *expires > self.clock.now() => {
                Claim::Hit(outcome.clone())
            }
            Some(Slot::Pending(rx)) => Claim::Wait(rx.clone()),
            _ => {
                let (tx, rx) = watch::channel(None);
                slots.insert(key.to_string(), Slot::Pending(rx));
                Claim::Lead(tx)
            }
        }
    }

    /// Resolves `name` for everyone waiting on `key`, then caches the outcome.
    async fn lead(&self, key: &str, name: &Name, tx: watch::Sender<Option<Outcome>>) -> Outcome {
        // If this future is dropped midway, the guard removes the pending slot; the dropped
        // sender wakes the waiters, which retry.
        let mut guard = PendingGuard {
            resolver: self,
            key,
            armed: true,
        };
        let (outcome, ttl) = self.resolve(name).await;
        if matches!(outcome, Outcome::Failed(_)) {
            self.counters.failures.fetch_add(1, Ordering::Relaxed);
        }
        {
            let mut slots = self.slots();
            match ttl {
                Some(ttl) if ttl > 0 => {
                    let expires = self.clock.now() + Duration::from_secs(u64::from(ttl));
                    slots.insert(
                        key.to_string(),
                        Slot::Ready {
                            outcome: outcome.clone(),
                            expires,
                        },
                    );
                    self.evict(&mut slots);
                }
                _ => {
                    slots.remove(key);
                }
            }
        }
        guard.armed = false;
        // Nobody waiting is fine.
        let _ = tx.send(Some(outcome.clone()));
        outcome
    }

    /// Keeps the cache within `max_entries`.
    fn evict(&self, slots: &mut HashMap<String, Slot>) {
        let max = self.cfg.max_entries.max(1);
        if slots.len() <= max {
            return;
        }
        let now = self.clock.now();
        slots.retain(|_, s| !matches!(s, Slot::Ready { expires, .. } if *expires <= now));
        while slots.len() > max {
            let soonest = slots
                .iter()
                .filter_map(|(k, s)| match s {
                    Slot::Ready { expires, .. } => Some((*expires, k.clone())),
                    Slot::Pending(_) => None,
                })
                .min();
            match soonest {
                Some((_, k)) => {
                    slots.remove(&k);
                }
                None => break,
            }
        }
    }

    /// Asks A (and AAAA) at once; the outcome and how long it may be cached.
    async fn resolve(&self, name: &Name) -> (Outcome, Option<u32>) {
        let (v4, v6) = if self.cfg.ipv6 {
            tokio::join!(
                self.ask(name, RecordType::A),
                self.ask(name, RecordType::AAAA)
            )
        } else {
            (
                self.ask(name, RecordType::A).await,
                FamilyAnswer::Nothing(None),
            )
        };
        let mut addrs = Vec::new();
        let mut positive_ttl: Option<u32> = None;
        let mut negative_ttl = self.cfg.negative_ttl;
        let mut failure = None;
        for answer in [v4, v6] {
            match answer {
                FamilyAnswer::Addrs(a, ttl) => {
                    addrs.extend(a);
                    positive_ttl = Some(positive_ttl.map_or(ttl, |t| t.min(ttl)));
                }
                FamilyAnswer::Nothing(ttl) => {
                    negative_ttl = negative_ttl.min(ttl.unwrap_or(u32::MAX));
                }
                FamilyAnswer::Failed(e) => failure = Some(e),
            }
        }
        if !addrs.is_empty() {
            let ttl = positive_ttl
                .unwrap_or(0)
                .clamp(self.cfg.min_ttl, self.cfg.max_ttl.max(self.cfg.min_ttl));
            return (Outcome::Found(addrs), Some(ttl));
        }
        match failure {
            // Failures are not cached: the next lookup asks again.
            Some(e) => (Outcome::Failed(e), None),
            None => (Outcome::NotFound, Some(negative_ttl)),
        }
    }

    /// One query for `name`/`rtype`.
    async fn ask(&self, name: &Name, rtype: RecordType) -> FamilyAnswer {
        let id = random_id();
        let mut msg = Message::new();
        msg.set_id(id)
            .set_message_type(MessageType::Query)
            .set_op_code(OpCode::Query)
            .set_recursion_desired(true);
        msg.add_query(Query::query(name.clone(), rtype));
        let mut edns = Edns::new();
        edns.set_max_payload(EDNS_PAYLOAD);
        msg.set_edns(edns);
        let bytes = match encode(&msg) {
            Ok(b) => b,
            Err(e) => return FamilyAnswer::Failed(e.to_string()),
        };
        let reply = match self
            .upstream
            .exchange(&bytes, id, msg.queries(), &self.counters.queries_sent)
            .await
        {
            Ok(r) => r.msg,
            Err(e) => {
                debug!(%name, ?rtype, error = %e, "stub resolver: upstream failed");
                return FamilyAnswer::Failed(e.to_string());
            }
        };
        match reply.response_code() {
            ResponseCode::NoError | ResponseCode::NXDomain => {}
            other => return FamilyAnswer::Failed(format!("{other} for {name} {rtype}")),
        }
        let addrs: Vec<IpAddr> = addresses(&reply)
            .into_iter()
            .filter(|a| a.is_ipv4() == (rtype == RecordType::A))
            .collect();
        if addrs.is_empty() {
            return FamilyAnswer::Nothing(negative_ttl(&reply));
        }
        // The whole chain (CNAMEs included) must still be valid when the answer is reused.
        let ttl = reply.answers().iter().map(|r| r.ttl()).min().unwrap_or(0);
        FamilyAnswer::Addrs(addrs, ttl)
    }
}

/// RFC 2308 §5: the negative TTL is the SOA record's TTL capped by its MINIMUM field.
fn negative_ttl(reply: &Message) -> Option<u32> {
    reply
        .name_servers()
        .iter()
        .filter_map(|r| match r.data() {
            RData::SOA(soa) => Some(r.ttl().min(soa.minimum())),
            _ => None,
        })
        .min()
}

/// Removes a pending slot whose leading lookup was dropped before it finished.
struct PendingGuard<'a> {
    resolver: &'a StubResolver,
    key: &'a str,
    armed: bool,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            let mut slots = self.resolver.slots();
            if matches!(slots.get(self.key), Some(Slot::Pending(_))) {
                slots.remove(self.key);
            }
        }
    }
}
