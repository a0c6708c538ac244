//! Per-client limits (DESIGN §9): concurrent connections per client and in total, and a
//! request rate per client (a token bucket shared by the client's connections).
//!
//! The bookkeeping is pure ([`ConnCounter`], [`TokenBucket`], [`RateLimiter`] take
//! [`Instant`]s and never read the clock) so it is tested in virtual time; [`ClientLimits`]
//! is the thin shell that locks and reads the clock.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv6Addr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::config::LimitsConfig;

/// Which limit refused a connection or a request (also the `reason` label of the metric).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    /// `limits.max-client-connections`.
    ClientConnections,
    /// `limits.max-connections`.
    Connections,
    /// `limits.client-rate` / `client-burst`.
    Rate,
    /// `limits.max-buffered-bytes` / `max-client-buffered-bytes`.
    Buffer,
}

impl Limit {
    /// Every limit, in metric order.
    pub const ALL: [Limit; 4] = [
        Limit::ClientConnections,
        Limit::Connections,
        Limit::Rate,
        Limit::Buffer,
    ];

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Limit::ClientConnections => "connections",
            Limit::Connections => "total",
            Limit::Rate => "rate",
            Limit::Buffer => "buffer",
        }
    }
}

/// The address a client is counted under. An IPv4-mapped IPv6 address is its IPv4 address;
/// an IPv6 address counts under its /64, since one subscriber usually gets a whole /64
/// (a per-address limit would be bypassed by changing the interface id).
pub fn client_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
    }
}

/// Open connections per client and in total. Clients without connections have no entry, so
/// the map is as large as the number of connected clients.
#[derive(Debug)]
pub struct ConnCounter {
    per_client: HashMap<IpAddr, usize>,
    total: usize,
    max_per_client: usize,
    max_total: usize,
}

impl ConnCounter {
    /// A counter enforcing the two limits.
    pub fn new(max_per_client: usize, max_total: usize) -> Self {
        ConnCounter {
            per_client: HashMap::new(),
            total: 0,
            max_per_client,
            max_total,
        }
    }

    /// Counts a new connection of `client`, or says which limit it would exceed.
    pub fn open(&mut self, client: IpAddr) -> Result<(), Limit> {
        if self.total >= self.max_total {
            return Err(Limit::Connections);
        }
        let n = self.per_client.entry(client).or_insert(0);
        if *n >= self.max_per_client {
            return Err(Limit::ClientConnections);
        }
        *n += 1;
        self.total += 1;
        Ok(())
    }

    /// Counts a new connection of `client` beyond the total (one that takes an evicted
    /// connection's place), still within the per-client limit.
    pub fn open_over_limit(&mut self, client: IpAddr) -> Result<(), Limit> {
        let n = self.per_client.entry(client).or_insert(0);
        if *n >= self.max_per_client {
            return Err(Limit::ClientConnections);
        }
        *n += 1;
        self.total += 1;
        Ok(())
    }

    /// Counts a connection of `client` as closed (one that [`ConnCounter::open`] accepted).
    pub fn close(&mut self, client: IpAddr) {
        if let Some(n) = self.per_client.get_mut(&client) {
            *n -= 1;
            self.total -= 1;
            if *n == 0 {
                self.per_client.remove(&client);
            }
        }
    }

    /// Connections of `client` now.
    pub fn of(&self, client: IpAddr) -> usize {
        self.per_client.get(&client).copied().unwrap_or(0)
    }

    /// Connections now.
    pub fn total(&self) -> usize {
        self.total
    }

    /// Clients with a connection now (the size of the map).
    pub fn clients(&self) -> usize {
        self.per_client.len()
    }
}

/// A token bucket: up to `burst` tokens, refilled at `rate` per second; a request takes one.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TokenBucket {
    tokens: f64,
    at: Instant,
}

impl TokenBucket {
    /// A full bucket.
    pub fn full(burst: f64, now: Instant) -> Self {
        TokenBucket {
            tokens: burst,
            at: now,
        }
    }

    /// Tokens at `now` (a clock that went backwards refills nothing).
    pub fn level(&self, rate: f64, burst: f64, now: Instant) -> f64 {
        let dt = now.saturating_duration_since(self.at).as_secs_f64();
        (self.tokens + dt * rate).min(burst)
    }

    /// Takes a token at `now`, or returns how long until one is there.
    pub fn take(&mut self, rate: f64, burst: f64, now: Instant) -> Result<(), Duration> {
        let level = self.level(rate, burst, now);
        self.tokens = level;
        self.at = now.max(self.at);
        if level >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - level) / rate))
        }
    }
}

/// How often idle buckets are looked for.
const PRUNE_EVERY: Duration = Duration::from_secs(30);

/// One token bucket per client. A bucket that has refilled completely is the same as no
/// bucket, so such buckets are dropped every [`PRUNE_EVERY`]: the map holds only clients
/// active within the last `burst / rate` seconds (plus one prune period).
#[derive(Debug)]
pub struct RateLimiter {
    rate: f64,
    burst: f64,
    buckets: HashMap<IpAddr, TokenBucket>,
    next_prune: Instant,
}

impl RateLimiter {
    /// `rate` requests per second (> 0) with bursts of `burst` (≥ 1).
    pub fn new(rate: f64, burst: u32, now: Instant) -> Self {
        RateLimiter {
            rate,
            burst: f64::from(burst.max(1)),
            buckets: HashMap::new(),
            next_prune: now + PRUNE_EVERY,
        }
    }

    /// Admits a request of `client` at `now`, or returns how long until it would be.
    pub fn check(&mut self, client: IpAddr, now: Instant) -> Result<(), Duration> {
        if now >= self.next_prune {
            self.prune(now);
        }
        let (rate, burst) = (self.rate, self.burst);
        self.buckets
            .entry(client)
            .or_insert_with(|| TokenBucket::full(burst, now))
            .take(rate, burst, now)
    }

    /// Drops the buckets that are full again at `now`.
    pub fn prune(&mut self, now: Instant) {
        let (rate, burst) = (self.rate, self.burst);
        self.buckets
            .retain(|_, b| b.level(rate, burst, now) < burst);
        self.next_prune = now + PRUNE_EVERY;
    }

    /// Clients with a bucket now.
    pub fn clients(&self) -> usize {
        self.buckets.len()
    }
}

/// The connections that have no request in flight (waiting for their next request, or still
/// sending a head or a body), oldest idle first: under a full connection table the oldest
/// gives way to a new client, so idle and slowly-sending connections cannot fill the table
/// and lock well-behaved clients out.
#[derive(Debug)]
pub struct IdleConns<T> {
    by_age: BTreeMap<(Instant, u64), T>,
    since: HashMap<u64, Instant>,
}

impl<T> Default for IdleConns<T> {
    fn default() -> Self {
        IdleConns {
            by_age: BTreeMap::new(),
            since: HashMap::new(),
        }
    }
}

impl<T> IdleConns<T> {
    /// Connection `id` has been idle since `now` (a connection already idle keeps its age).
    pub fn idle(&mut self, id: u64, now: Instant, handle: T) {
        if self.since.contains_key(&id) {
            return;
        }
        self.since.insert(id, now);
        self.by_age.insert((now, id), handle);
    }

    /// Connection `id` is busy (or gone): no longer a candidate.
    pub fn busy(&mut self, id: u64) -> Option<T> {
        let at = self.since.remove(&id)?;
        self.by_age.remove(&(at, id))
    }

    /// Takes the connection idle the longest.
    pub fn pop_oldest(&mut self) -> Option<(u64, T)> {
        let (&(at, id), _) = self.by_age.iter().next()?;
        self.since.remove(&id);
        self.by_age.remove(&(at, id)).map(|h| (id, h))
    }

    /// Idle connections now.
    pub fn len(&self) -> usize {
        self.since.len()
    }

    /// True when none is idle.
    pub fn is_empty(&self) -> bool {
        self.since.is_empty()
    }
}

/// Bytes of bodies held in memory, in total and per client, within two budgets.
#[derive(Debug)]
pub struct BufferBudget {
    total: u64,
    per_client: HashMap<IpAddr, u64>,
    max_total: u64,
    max_per_client: u64,
}

impl BufferBudget {
    /// A budget of `max_total` bytes, at most `max_per_client` of them for one client.
    pub fn new(max_total: u64, max_per_client: u64) -> Self {
        BufferBudget {
            total: 0,
            per_client: HashMap::new(),
            max_total,
            max_per_client,
        }
    }

    /// Takes `n` bytes for `client`, or nothing when either budget would be exceeded.
    pub fn take(&mut self, client: IpAddr, n: u64) -> bool {
        let held = self.per_client.get(&client).copied().unwrap_or(0);
        if self.total.saturating_add(n) > self.max_total
            || held.saturating_add(n) > self.max_per_client
        {
            return false;
        }
        self.total += n;
        *self.per_client.entry(client).or_insert(0) += n;
        true
    }

    /// Returns `n` bytes `client` took.
    pub fn give_back(&mut self, client: IpAddr, n: u64) {
        if let Some(held) = self.per_client.get_mut(&client) {
            let n = n.min(*held);
            *held -= n;
            self.total -= n;
            if *held == 0 {
                self.per_client.remove(&client);
            }
        }
    }

    /// Bytes held now.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Clients holding bytes now.
    pub fn clients(&self) -> usize {
        self.per_client.len()
    }
}

/// The running server's [`BufferBudget`], shared by leases.
#[derive(Debug)]
pub struct Buffers {
    budget: Mutex<BufferBudget>,
    /// Bytes held now, readable without the lock (`/metrics`).
    held: AtomicU64,
}

impl Buffers {
    /// The budget of `[limits]`.
    pub fn new(cfg: &LimitsConfig) -> Arc<Self> {
        Arc::new(Buffers {
            budget: Mutex::new(BufferBudget::new(
                cfg.max_buffered_bytes,
                cfg.max_client_buffered_bytes,
            )),
            held: AtomicU64::new(0),
        })
    }

    /// An empty lease for `ip`, to grow as a body is read.
    pub fn lease(self: &Arc<Self>, ip: IpAddr) -> BufferLease {
        BufferLease {
            buffers: self.clone(),
            client: client_key(ip),
            bytes: 0,
        }
    }

    /// Bytes held now.
    pub fn held(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }
}

/// Bytes of the budget held by one body; returned when the lease is dropped.
#[derive(Debug)]
pub struct BufferLease {
    buffers: Arc<Buffers>,
    client: IpAddr,
    bytes: u64,
}

impl BufferLease {
    /// Holds `total` bytes in all (more than now: takes the difference), or returns false
    /// and holds what it held.
    pub fn grow_to(&mut self, total: u64) -> bool {
        if total <= self.bytes {
            return true;
        }
        let more = total - self.bytes;
        let mut b = lock(&self.buffers.budget);
        if !b.take(self.client, more) {
            return false;
        }
        self.buffers.held.store(b.total(), Ordering::Relaxed);
        self.bytes = total;
        true
    }

    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Drop for BufferLease {
    fn drop(&mut self) {
        if self.bytes > 0 {
            let mut b = lock(&self.buffers.budget);
            b.give_back(self.client, self.bytes);
            self.buffers.held.store(b.total(), Ordering::Relaxed);
        }
    }
}

/// Why a request body was refused while it was read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyRefused {
    /// Over `limits.max-request-body`.
    TooLarge,
    /// The buffered-body budget (of all clients, or of this one) is spent now.
    OverBudget,
}

impl BodyRefused {
    pub fn status(self) -> http::StatusCode {
        match self {
            BodyRefused::TooLarge => http::StatusCode::PAYLOAD_TOO_LARGE,
            BodyRefused::OverBudget => http::StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    pub fn reason(self) -> &'static str {
        match self {
            BodyRefused::TooLarge => "request body over the limit",
            BodyRefused::OverBudget => "the proxy holds too many buffered request bodies now (limits.max-buffered-bytes, max-client-buffered-bytes); retry later",
        }
    }
}

/// A request body read whole, whichever front end reads it: `limits.max-request-body` and
/// its share of the buffered-body budget, checked as its bytes arrive (many streams or
/// connections of one client could otherwise each hold that much).
#[derive(Debug)]
pub struct BodyIntake {
    lease: BufferLease,
    max: u64,
}

impl BodyIntake {
    pub fn new(buffers: &Arc<Buffers>, ip: IpAddr, max: u64) -> Self {
        BodyIntake {
            lease: buffers.lease(ip),
            max,
        }
    }

    /// Admits a body of `total` bytes in all (read so far, or declared before it comes).
    pub fn admit(&mut self, total: u64) -> Result<(), BodyRefused> {
        if total > self.max {
            return Err(BodyRefused::TooLarge);
        }
        if !self.lease.grow_to(total) {
            return Err(BodyRefused::OverBudget);
        }
        Ok(())
    }

    /// The budget the body holds, to keep until it has been forwarded.
    pub fn into_lease(self) -> BufferLease {
        self.lease
    }
}

/// The limits of a running server: the shell around the pure counters.
#[derive(Debug)]
pub struct ClientLimits {
    conns: Mutex<ConnCounter>,
    idle: Mutex<IdleConns<CancellationToken>>,
    next_id: AtomicU64,
    /// None when `client-rate` is 0 (unlimited).
    rate: Option<Mutex<RateLimiter>>,
}

/// A counted connection; dropping it (on any exit path) releases the count.
#[derive(Debug)]
pub struct ConnSlot<'a> {
    limits: &'a ClientLimits,
    client: IpAddr,
    handle: ConnHandle,
}

/// What names a counted connection to [`ClientLimits::idle`] and [`ClientLimits::busy`].
#[derive(Debug, Clone)]
pub struct ConnHandle {
    id: u64,
    /// Fires when the connection must give way to a new client.
    pub evict: CancellationToken,
}

impl ConnSlot<'_> {
    /// The handle the connection's tasks mark it idle or busy with.
    pub fn handle(&self) -> ConnHandle {
        self.handle.clone()
    }

    /// The connection has no request in flight from now on: it may be evicted.
    pub fn idle(&self) {
        self.limits.idle(&self.handle);
    }

    /// The connection has a request in flight: it is kept.
    pub fn busy(&self) {
        self.limits.busy(&self.handle);
    }

    /// Fires when the connection was chosen to give way.
    pub fn evicted(&self) -> CancellationToken {
        self.handle.evict.clone()
    }
}

impl Drop for ConnSlot<'_> {
    fn drop(&mut self) {
        lock(&self.limits.idle).busy(self.handle.id);
        lock(&self.limits.conns).close(self.client);
    }
}

/// Locks a mutex whose data stays consistent even if a holder panicked (the counters are
/// updated in single steps).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl ClientLimits {
    /// The limits of `[limits]`.
    pub fn new(cfg: &LimitsConfig) -> Self {
        ClientLimits {
            conns: Mutex::new(ConnCounter::new(
                cfg.max_client_connections,
                cfg.max_connections,
            )),
            idle: Mutex::new(IdleConns::default()),
            next_id: AtomicU64::new(0),
            rate: (cfg.client_rate > 0.0).then(|| {
                Mutex::new(RateLimiter::new(
                    cfg.client_rate,
                    cfg.client_burst,
                    Instant::now(),
                ))
            }),
        }
    }

    /// Counts a new connection from `ip` for as long as the returned slot lives. When every
    /// place is taken, the connection idle the longest is told to close and the new one is
    /// counted in its place (the second value is then true); the count exceeds the limit
    /// only until the evicted connection has closed. The new connection starts idle.
    pub fn open(&self, ip: IpAddr) -> Result<(ConnSlot<'_>, bool), Limit> {
        let client = client_key(ip);
        let mut evicted = false;
        {
            let mut conns = lock(&self.conns);
            match conns.open(client) {
                Ok(()) => {}
                Err(Limit::Connections) => {
                    let Some((_, victim)) = lock(&self.idle).pop_oldest() else {
                        return Err(Limit::Connections);
                    };
                    victim.cancel();
                    conns.open_over_limit(client)?;
                    evicted = true;
                }
                Err(e) => return Err(e),
            }
        }
        let slot = ConnSlot {
            limits: self,
            client,
            handle: ConnHandle {
                id: self.next_id.fetch_add(1, Ordering::Relaxed),
                evict: CancellationToken::new(),
            },
        };
        slot.idle();
        Ok((slot, evicted))
    }

    /// Connection `h` has no request in flight from now on: it may be evicted.
    pub fn idle(&self, h: &ConnHandle) {
        if !h.evict.is_cancelled() {
            lock(&self.idle).idle(h.id, Instant::now(), h.evict.clone());
        }
    }

    /// Connection `h` has a request in flight: it is kept.
    pub fn busy(&self, h: &ConnHandle) {
        lock(&self.idle).busy(h.id);
    }

    /// Admits one request from `ip`, or returns how long until one would be admitted.
    pub fn request(&self, ip: IpAddr) -> Result<(), Duration> {
        match &self.rate {
            None => Ok(()),
            Some(r) => lock(r).check(client_key(ip), Instant::now()),
        }
    }

    /// Connections open now (counted ones).
    pub fn connections(&self) -> usize {
        lock(&self.conns).total()
    }
}

/// The value of `Retry-After` for a wait: whole seconds, rounded up, at least 1.
pub fn retry_after_secs(wait: Duration) -> u64 {
    let whole = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    whole.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn counter_limits_per_client_and_total_and_forgets_idle_clients() {
        let mut c = ConnCounter::new(2, 3);
        let (a, b) = (ip("192.0.2.1"), ip("192.0.2.2"));
        assert_eq!(c.open(a), Ok(()));
        assert_eq!(c.open(a), Ok(()));
        assert_eq!(c.open(a), Err(Limit::ClientConnections));
        assert_eq!(c.of(a), 2, "a refused connection is not counted");
        assert_eq!(c.open(b), Ok(()));
        assert_eq!(c.open(b), Err(Limit::Connections));
        assert_eq!(c.total(), 3);
        c.close(a);
        assert_eq!(c.open(b), Ok(()), "a closed connection frees a place");
        c.close(a);
        c.close(b);
        c.close(b);
        assert_eq!((c.total(), c.clients()), (0, 0), "no entries at zero");
        // Closing more than was opened does not underflow.
        c.close(a);
        assert_eq!(c.total(), 0);
    }

    #[test]
    fn client_key_groups_mapped_v4_and_v6_subnets() {
        assert_eq!(client_key(ip("::ffff:192.0.2.7")), ip("192.0.2.7"));
        assert_eq!(client_key(ip("2001:db8:1:2:aaaa::1")), ip("2001:db8:1:2::"));
        assert_eq!(
            client_key(ip("2001:db8:1:2::1")),
            client_key(ip("2001:db8:1:2:ffff::9"))
        );
        assert_ne!(
            client_key(ip("2001:db8:1:2::1")),
            client_key(ip("2001:db8:1:3::1"))
        );
    }

    #[test]
    fn idle_connections_give_way_oldest_first() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let mut idle = IdleConns::default();
        idle.idle(1, at(0), "a");
        idle.idle(2, at(10), "b");
        idle.idle(3, at(20), "c");
        // Busy connections are not candidates; idle again, they are the youngest.
        assert_eq!(idle.busy(1), Some("a"));
        idle.idle(1, at(30), "a");
        // Marking an idle connection idle again keeps its age.
        idle.idle(2, at(40), "b");
        assert_eq!(idle.pop_oldest(), Some((2, "b")));
        assert_eq!(idle.pop_oldest(), Some((3, "c")));
        assert_eq!(idle.len(), 1);
        assert_eq!(idle.busy(3), None, "already taken");
        assert_eq!(idle.pop_oldest(), Some((1, "a")));
        assert!(idle.is_empty());
        assert_eq!(idle.pop_oldest(), None);
    }

    #[test]
    fn a_full_table_evicts_the_longest_idle_connection() {
        let cfg = LimitsConfig {
            max_client_connections: 10,
            max_connections: 2,
            ..LimitsConfig::default()
        };
        let l = ClientLimits::new(&cfg);
        let (a, _) = l.open(ip("192.0.2.1")).unwrap();
        let (b, _) = l.open(ip("192.0.2.2")).unwrap();
        a.busy();
        // b is the only idle one: it gives way.
        let (c, evicted) = l.open(ip("192.0.2.3")).unwrap();
        assert!(evicted);
        assert!(b.evicted().is_cancelled() && !a.evicted().is_cancelled());
        drop(b);
        assert_eq!(l.connections(), 2);
        // Both busy now: a new client is refused.
        c.busy();
        assert_eq!(l.open(ip("192.0.2.4")).unwrap_err(), Limit::Connections);
        a.idle();
        let (_d, evicted) = l.open(ip("192.0.2.4")).unwrap();
        assert!(evicted && a.evicted().is_cancelled());
    }

    #[test]
    fn buffer_budget_per_client_and_total() {
        let mut b = BufferBudget::new(100, 60);
        let (x, y) = (ip("192.0.2.1"), ip("192.0.2.2"));
        assert!(b.take(x, 50));
        assert!(!b.take(x, 11), "over the client's share");
        assert!(b.take(x, 10));
        assert!(b.take(y, 40));
        assert!(!b.take(y, 1), "over the total");
        b.give_back(x, 60);
        assert_eq!((b.total(), b.clients()), (40, 1));
        // Returning more than was taken does not underflow.
        b.give_back(y, 1000);
        assert_eq!((b.total(), b.clients()), (0, 0));
    }

    #[test]
    fn a_lease_returns_its_bytes_when_dropped() {
        let cfg = LimitsConfig {
            max_buffered_bytes: 1000,
            max_client_buffered_bytes: 600,
            ..LimitsConfig::default()
        };
        let buffers = Buffers::new(&cfg);
        let mut a = buffers.lease(ip("127.0.0.1"));
        assert!(a.grow_to(400));
        assert!(a.grow_to(300), "shrinking keeps what is held");
        let mut b = buffers.lease(ip("::ffff:127.0.0.1"));
        assert!(!b.grow_to(300), "the same client, over its share");
        assert_eq!((a.bytes(), b.bytes(), buffers.held()), (400, 0, 400));
        drop(a);
        assert_eq!(buffers.held(), 0);
        assert!(b.grow_to(600));
    }

    #[test]
    fn slot_releases_on_drop() {
        let cfg = LimitsConfig {
            max_client_connections: 1,
            ..LimitsConfig::default()
        };
        let l = ClientLimits::new(&cfg);
        let (s, _) = l.open(ip("127.0.0.1")).unwrap();
        assert_eq!(
            l.open(ip("::ffff:127.0.0.1")).unwrap_err(),
            Limit::ClientConnections
        );
        drop(s);
        assert_eq!(l.connections(), 0);
        let _s = l.open(ip("127.0.0.1")).unwrap();
    }

    #[test]
    fn bucket_allows_burst_then_rate() {
        let t0 = Instant::now();
        let mut b = TokenBucket::full(2.0, t0);
        assert_eq!(b.take(1.0, 2.0, t0), Ok(()));
        assert_eq!(b.take(1.0, 2.0, t0), Ok(()));
        let wait = b.take(1.0, 2.0, t0).unwrap_err();
        assert_eq!(wait, Duration::from_secs(1));
        // Half a token after 0.5 s: still 0.5 s to wait; refused requests take nothing.
        let t = t0 + Duration::from_millis(500);
        assert_eq!(b.take(1.0, 2.0, t), Err(Duration::from_millis(500)));
        assert_eq!(b.take(1.0, 2.0, t0 + Duration::from_secs(1)), Ok(()));
        // Long idle refills up to the burst, not beyond.
        let later = t0 + Duration::from_secs(100);
        assert_eq!(b.level(1.0, 2.0, later), 2.0);
        // A clock going backwards refills nothing.
        let mut c = TokenBucket::full(1.0, later);
        assert_eq!(c.take(1.0, 1.0, later), Ok(()));
        assert!(c.take(1.0, 1.0, t0).is_err());
    }

    #[test]
    fn bucket_fractional_rate() {
        let t0 = Instant::now();
        let mut b = TokenBucket::full(1.0, t0);
        assert_eq!(b.take(0.5, 1.0, t0), Ok(()));
        assert_eq!(b.take(0.5, 1.0, t0), Err(Duration::from_secs(2)));
        assert_eq!(b.take(0.5, 1.0, t0 + Duration::from_secs(2)), Ok(()));
    }

    #[test]
    fn limiter_is_per_client_and_prunes_full_buckets() {
        let t0 = Instant::now();
        let mut r = RateLimiter::new(1.0, 2, t0);
        let (a, b) = (ip("192.0.2.1"), ip("192.0.2.2"));
        assert!(r.check(a, t0).is_ok());
        assert!(r.check(a, t0).is_ok());
        assert!(r.check(a, t0).is_err());
        assert!(r.check(b, t0).is_ok(), "another client has its own bucket");
        assert_eq!(r.clients(), 2);
        // At 1.5 s b (one token taken) is full again, a (two taken) is not.
        let t1 = t0 + Duration::from_millis(1500);
        r.prune(t1);
        assert_eq!(r.clients(), 1, "b's bucket is full: dropped");
        // Pruning runs by itself on a later check, and a dropped bucket comes back full.
        let t2 = t0 + PRUNE_EVERY + PRUNE_EVERY;
        assert!(r.check(b, t2).is_ok());
        assert_eq!(r.clients(), 1, "a was pruned, b is back");
        assert!(r.check(b, t2).is_ok());
        assert!(r.check(b, t2).is_err());
    }

    #[test]
    fn retry_after_rounds_up_to_whole_seconds() {
        assert_eq!(retry_after_secs(Duration::ZERO), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(10)), 1);
        assert_eq!(retry_after_secs(Duration::from_secs(1)), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1001)), 2);
        assert_eq!(retry_after_secs(Duration::from_secs(30)), 30);
    }
}
