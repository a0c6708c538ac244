//! `DnsProxy`: the rewriting DNS proxy of 002 §3.2 (`webpep dns`). It forwards each client
//! query to one upstream resolver, rewrites the answer under its [`RewritePolicy`] (or
//! forwards it unchanged) and answers over the transport the query came on.
//!
//! The client's query goes upstream byte for byte except for a fresh random ID, so EDNS
//! options, DO and CD bits and the question's case survive; answers that are not rewritten
//! come back byte for byte except for the client's ID.
//!
//! Over TCP a client outside `allow_clients` is disconnected at once, before it takes one of
//! the `max_tcp_connections` slots; when every slot is taken, the connection that has waited
//! longest on its client (idle, or stalled mid-message) is closed to make room.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use hickory_proto::op::{Message, MessageType, OpCode, ResponseCode};
use ipnet::IpNet;
use tokio::io::AsyncReadExt;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use crate::error::DnsError;
use crate::policy::RewritePolicy;
use crate::rewrite::rewrite_response;
use crate::upstream::Upstream;
use crate::wire::{
    encode, error_reply, fit_udp, random_id, set_wire_id, udp_limit, write_frame, TcpFrames,
};

/// At most one log line per this long for malformed packets; the rest are counted into it.
const MALFORMED_LOG_PERIOD: Duration = Duration::from_secs(10);

/// Bytes read from a TCP client at a time.
const TCP_READ_CHUNK: usize = 4096;

/// How the proxy forwards and what it rewrites.
#[derive(Clone, Debug)]
pub struct DnsProxyConfig {
    /// The resolver every query is forwarded to.
    pub upstream: SocketAddr,
    /// `None`: a plain forwarder.
    pub policy: Option<RewritePolicy>,
    /// How long to wait for each upstream attempt (default 2 s; two attempts, then SERVFAIL).
    pub timeout: Duration,
    /// Client networks served (default: loopback only). Others get REFUSED, no bigger than
    /// their query and never forwarded: the proxy is not an open resolver for anyone to
    /// reflect traffic off.
    pub allow_clients: Vec<IpNet>,
}

/// Loopback, IPv4 and IPv6: the networks served unless configured.
pub fn loopback_only() -> Vec<IpNet> {
    let v4 = IpNet::new(IpAddr::from([127, 0, 0, 0]), 8).expect("valid prefix");
    vec![v4, IpNet::from(IpAddr::from(std::net::Ipv6Addr::LOCALHOST))]
}

impl DnsProxyConfig {
    /// A plain forwarder to `upstream` with a 2 s timeout.
    pub fn new(upstream: SocketAddr) -> Self {
        DnsProxyConfig {
            upstream,
            policy: None,
            timeout: Duration::from_secs(2),
            allow_clients: loopback_only(),
        }
    }
}

/// Resource bounds of the proxy; the defaults suit an edge serving one cell.
#[derive(Clone, Debug)]
pub struct DnsProxyLimits {
    /// Upstream UDP attempts per query (default 2); then the client gets SERVFAIL.
    pub attempts: u32,
    /// Most UDP queries being resolved at once (default 256); beyond it the proxy stops reading
    /// its socket and the kernel drops the excess, so a flood cannot grow tasks without bound.
    pub max_in_flight: usize,
    /// Most TCP client connections at once (default 64). When all are taken, the one that has
    /// waited longest on its client gives way to a new one; if every one is being answered,
    /// the first of them to be done gives way (later ones wait in the backlog meanwhile).
    pub max_tcp_connections: usize,
    /// A TCP client connection idle this long, or whose next message has not arrived whole
    /// in this long, is closed; so is one that does not take its answer in this long
    /// (default 10 s: over a slow link the first query after the handshake may take
    /// seconds, and idle connections give way to new ones anyway).
    pub tcp_idle: Duration,
}

impl Default for DnsProxyLimits {
    fn default() -> Self {
        DnsProxyLimits {
            attempts: 2,
            max_in_flight: 256,
            max_tcp_connections: 64,
            tcp_idle: Duration::from_secs(10),
        }
    }
}

/// Counters of the proxy since it was created.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DnsProxyStats {
    /// Well-formed queries received (UDP and TCP).
    pub queries: u64,
    /// Answers rewritten under the policy.
    pub rewritten: u64,
    /// Upstream answers passed on unchanged.
    pub forwarded: u64,
    /// Packets dropped because they were not well-formed DNS queries.
    pub malformed: u64,
    /// Queries answered SERVFAIL because the upstream did not answer usably.
    pub upstream_failures: u64,
    /// Packets sent to the upstream (retries and TCP fallbacks included).
    pub upstream_packets: u64,
    /// Clients outside `allow_clients`: UDP queries answered REFUSED, TCP connections closed.
    pub refused: u64,
}

#[derive(Default)]
struct Counters {
    queries: AtomicU64,
    rewritten: AtomicU64,
    forwarded: AtomicU64,
    malformed: AtomicU64,
    upstream_failures: AtomicU64,
    upstream_packets: AtomicU64,
    refused: AtomicU64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Transport {
    Udp,
    Tcp,
}

/// The rewriting DNS proxy. Share it with `Arc`; [`DnsProxy::stats`] may be read while it
/// serves.
pub struct DnsProxy {
    cfg: DnsProxyConfig,
    limits: DnsProxyLimits,
    upstream: Upstream,
    counters: Counters,
    /// Malformed packets are counted one by one but logged at a bounded rate: a flood of
    /// them must not flood the log.
    malformed_log: Mutex<LogLimiter>,
}

impl DnsProxy {
    /// A proxy with `cfg` and the default limits; it serves nothing until [`DnsProxy::serve`].
    pub fn new(cfg: DnsProxyConfig) -> Self {
        Self::with_limits(cfg, DnsProxyLimits::default())
    }

    /// A proxy with `cfg` and `limits`.
    pub fn with_limits(cfg: DnsProxyConfig, limits: DnsProxyLimits) -> Self {
        let upstream = Upstream {
            addr: cfg.upstream,
            timeout: cfg.timeout,
            attempts: limits.attempts,
        };
        DnsProxy {
            cfg,
            limits,
            upstream,
            counters: Counters::default(),
            malformed_log: Mutex::new(LogLimiter::new(MALFORMED_LOG_PERIOD)),
        }
    }

    /// The counters so far.
    pub fn stats(&self) -> DnsProxyStats {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        DnsProxyStats {
            queries: get(&c.queries),
            rewritten: get(&c.rewritten),
            forwarded: get(&c.forwarded),
            malformed: get(&c.malformed),
            upstream_failures: get(&c.upstream_failures),
            upstream_packets: get(&c.upstream_packets),
            refused: get(&c.refused),
        }
    }

    /// Serves on pre-bound sockets (the lab binds them inside a network namespace) until
    /// `cancel`; then stops reading, abandons queries in flight and returns. Must run inside
    /// a tokio runtime; an error is returned only when a socket cannot be used at all.
    pub async fn serve(
        self: Arc<Self>,
        udp: Option<std::net::UdpSocket>,
        tcp: Option<std::net::TcpListener>,
        cancel: CancellationToken,
    ) -> io::Result<()> {
        let udp_side = async {
            match udp {
                Some(s) => self.clone().serve_udp(s, cancel.clone()).await,
                None => Ok(()),
            }
        };
        let tcp_side = async {
            match tcp {
                Some(l) => self.clone().serve_tcp(l, cancel.clone()).await,
                None => Ok(()),
            }
        };
        tokio::try_join!(udp_side, tcp_side).map(|_| ())
    }

    async fn serve_udp(
        self: Arc<Self>,
        socket: std::net::UdpSocket,
        cancel: CancellationToken,
    ) -> io::Result<()> {
        socket.set_nonblocking(true)?;
        let socket = Arc::new(tokio::net::UdpSocket::from_std(socket)?);
        info!(addr = %socket.local_addr()?, upstream = %self.cfg.upstream, "dns proxy: listening (udp)");
        let permits = Arc::new(Semaphore::new(self.limits.max_in_flight.max(1)));
        let tracker = TaskTracker::new();
        let mut buf = vec![0u8; 65_535];
        loop {
            // Take a permit before reading: when all are in use the socket is not read.
            let Some(permit) = next_permit(&permits, &cancel).await else {
                break;
            };
            let received = tokio::select! {
                _ = cancel.cancelled() => break,
                r = socket.recv_from(&mut buf) => r,
            };
            let (n, peer) = match received {
                Ok(x) => x,
                Err(e) => {
                    // Linux reports ICMP errors for earlier sends here: not fatal.
                    debug!(error = %e, "dns proxy: udp receive error");
                    continue;
                }
            };
            let packet = buf[..n].to_vec();
            let proxy = self.clone();
            let socket = socket.clone();
            let cancel = cancel.clone();
            tracker.spawn(async move {
                let _permit = permit;
                let answer = tokio::select! {
                    _ = cancel.cancelled() => None,
                    a = proxy.answer(&packet, Transport::Udp, peer) => a,
                };
                if let Some(bytes) = answer {
                    if let Err(e) = socket.send_to(&bytes, peer).await {
                        debug!(%peer, error = %e, "dns proxy: udp send failed");
                    }
                }
            });
        }
        tracker.close();
        tracker.wait().await;
        Ok(())
    }

    async fn serve_tcp(
        self: Arc<Self>,
        listener: std::net::TcpListener,
        cancel: CancellationToken,
    ) -> io::Result<()> {
        listener.set_nonblocking(true)?;
        let listener = tokio::net::TcpListener::from_std(listener)?;
        info!(addr = %listener.local_addr()?, upstream = %self.cfg.upstream, "dns proxy: listening (tcp)");
        let permits = Arc::new(Semaphore::new(self.limits.max_tcp_connections.max(1)));
        let slots = Arc::new(TcpSlots::default());
        let tracker = TaskTracker::new();
        loop {
            let Some((stream, peer)) = webpep_accept::accept(&listener, &cancel, "dns proxy").await
            else {
                break;
            };
            if !self.client_allowed(peer.ip()) {
                // Closed before it takes a slot: idle connections from anywhere must not keep
                // the clients served waiting.
                self.counters.refused.fetch_add(1, Ordering::Relaxed);
                debug!(%peer, "dns proxy: client not allowed, tcp connection closed");
                continue;
            }
            let permit = match permits.clone().try_acquire_owned() {
                Ok(p) => p,
                Err(_) => {
                    slots.make_room();
                    let Some(p) = next_permit(&permits, &cancel).await else {
                        break;
                    };
                    p
                }
            };
            slots.room_made();
            let slot = TcpSlot::join(&slots);
            let proxy = self.clone();
            let cancel = cancel.clone();
            tracker.spawn(async move {
                let _permit = permit;
                tokio::select! {
                    _ = cancel.cancelled() => {}
                    r = proxy.tcp_connection(stream, peer, &slot) => {
                        if let Err(e) = r {
                            debug!(%peer, error = %e, "dns proxy: tcp connection ended");
                        }
                    }
                }
            });
        }
        tracker.close();
        tracker.wait().await;
        Ok(())
    }

    /// Length-prefixed queries answered in order until the client closes, goes idle, is
    /// closed to make room, or sends a malformed message (then it is disconnected).
    async fn tcp_connection(
        &self,
        mut stream: tokio::net::TcpStream,
        peer: SocketAddr,
        slot: &TcpSlot,
    ) -> io::Result<()> {
        let idle = self.limits.tcp_idle;
        let mut frames = TcpFrames::new(usize::from(u16::MAX));
        let mut chunk = vec![0u8; TCP_READ_CHUNK];
        // When the wait for the next message began: it must arrive whole within `idle`.
        let mut since = Instant::now();
        loop {
            let packet = match frames.next_frame() {
                Ok(Some(packet)) => packet,
                Ok(None) => {
                    if !slot.wait_on_client(since) {
                        debug!(%peer, "dns proxy: tcp connection closed to make room");
                        return Ok(());
                    }
                    let read = tokio::select! {
                        _ = slot.evicted() => {
                            debug!(%peer, "dns proxy: tcp connection closed to make room");
                            return Ok(());
                        }
                        r = tokio::time::timeout_at(since + idle, stream.read(&mut chunk)) => r,
                    };
                    match read {
                        Err(_) => return Ok(()),
                        Ok(Ok(0)) if frames.buffered() > 0 => {
                            return Err(io::ErrorKind::UnexpectedEof.into())
                        }
                        Ok(Ok(0)) => return Ok(()),
                        Ok(Ok(n)) => frames.push(&chunk[..n]),
                        Ok(Err(e)) => return Err(e),
                    }
                    continue;
                }
                Err(e) => {
                    self.count_malformed(peer, Transport::Tcp, 0, &e);
                    return Ok(());
                }
            };
            slot.busy();
            let Some(bytes) = self.answer(&packet, Transport::Tcp, peer).await else {
                return Ok(());
            };
            // A client that does not read its answers must not hold its slot either.
            tokio::time::timeout(idle, write_frame(&mut stream, &bytes))
                .await
                .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "answer not taken"))??;
            since = Instant::now();
        }
    }

    /// True when `ip` is in `allow_clients`.
    fn client_allowed(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.cfg.allow_clients.iter().any(|n| n.contains(&ip))
    }

    /// Counts a dropped packet as malformed and logs it, unless lines are being held back.
    fn count_malformed(
        &self,
        peer: SocketAddr,
        transport: Transport,
        len: usize,
        error: &dyn std::fmt::Display,
    ) {
        self.counters.malformed.fetch_add(1, Ordering::Relaxed);
        let line = self
            .malformed_log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .allow(std::time::Instant::now());
        if let Some(suppressed) = line {
            warn!(%peer, ?transport, len, %error, suppressed, "dns proxy: packet dropped");
        }
    }

    /// The answer to one client packet; `None`: drop it (logged).
    async fn answer(
        &self,
        packet: &[u8],
        transport: Transport,
        peer: SocketAddr,
    ) -> Option<Vec<u8>> {
        if !self.client_allowed(peer.ip()) {
            return self.refuse(packet, peer);
        }
        match self.try_answer(packet, transport).await {
            Ok(bytes) => Some(bytes),
            Err(e) => {
                self.count_malformed(peer, transport, packet.len(), &e);
                None
            }
        }
    }

    /// REFUSED for a query from a client outside `allow_clients` (at debug level: a scan must
    /// not flood the log); anything that is not a query is dropped.
    fn refuse(&self, packet: &[u8], peer: SocketAddr) -> Option<Vec<u8>> {
        let query = Message::from_vec(packet)
            .ok()
            .filter(|m| m.message_type() == MessageType::Query);
        let Some(query) = query else {
            self.counters.malformed.fetch_add(1, Ordering::Relaxed);
            debug!(%peer, "dns proxy: packet from a client not allowed dropped");
            return None;
        };
        self.counters.refused.fetch_add(1, Ordering::Relaxed);
        debug!(%peer, "dns proxy: client not allowed, REFUSED");
        let reply = encode(&error_reply(&query, ResponseCode::Refused)).ok()?;
        // Never larger than what came in.
        (reply.len() <= packet.len()).then_some(reply)
    }

    /// `Err`: the packet is not a query to answer (the caller drops it).
    async fn try_answer(&self, packet: &[u8], transport: Transport) -> Result<Vec<u8>, DnsError> {
        let c = &self.counters;
        let query = Message::from_vec(packet).map_err(|e| DnsError::Malformed(e.to_string()))?;
        if query.message_type() != MessageType::Query {
            return Err(DnsError::Malformed(
                "a response where a query was expected".into(),
            ));
        }
        c.queries.fetch_add(1, Ordering::Relaxed);
        let limit = match transport {
            Transport::Udp => udp_limit(&query),
            Transport::Tcp => usize::from(u16::MAX),
        };
        if query.op_code() != OpCode::Query {
            // NOTIFY, UPDATE...: nothing a web client sends; not passed to the resolver.
            return fit_udp(encode(&error_reply(&query, ResponseCode::NotImp))?, limit);
        }

        let id = random_id();
        let mut upstream_query = packet.to_vec();
        set_wire_id(&mut upstream_query, id);
        let reply = match self
            .upstream
            .exchange(&upstream_query, id, query.queries(), &c.upstream_packets)
            .await
        {
            Ok(r) => r,
            Err(e) => {
                c.upstream_failures.fetch_add(1, Ordering::Relaxed);
                warn!(question = ?query.queries().first().map(|q| q.to_string()), error = %e, "dns proxy: upstream failed, answering SERVFAIL");
                return fit_udp(encode(&error_reply(&query, ResponseCode::ServFail))?, limit);
            }
        };

        let rewritten = match &self.cfg.policy {
            Some(policy) => match rewrite_response(&reply.bytes, policy) {
                Ok(r) => r,
                Err(e) => {
                    // Cannot happen for a reply that parsed; kept safe rather than panicking.
                    c.upstream_failures.fetch_add(1, Ordering::Relaxed);
                    warn!(error = %e, "dns proxy: upstream answer not rewritable, answering SERVFAIL");
                    return fit_udp(encode(&error_reply(&query, ResponseCode::ServFail))?, limit);
                }
            },
            None => None,
        };
        let mut out = match rewritten {
            Some(bytes) => {
                c.rewritten.fetch_add(1, Ordering::Relaxed);
                debug!(question = ?reply.msg.queries().first().map(|q| q.to_string()), "dns proxy: rewritten");
                bytes
            }
            None => {
                c.forwarded.fetch_add(1, Ordering::Relaxed);
                reply.bytes
            }
        };
        set_wire_id(&mut out, query.id());
        fit_udp(out, limit)
    }
}

/// The next of `permits` (a bound on work in flight), or `None` once `cancel` fires.
async fn next_permit(
    permits: &Arc<Semaphore>,
    cancel: &CancellationToken,
) -> Option<OwnedSemaphorePermit> {
    tokio::select! {
        _ = cancel.cancelled() => None,
        p = permits.clone().acquire_owned() => p.ok(),
    }
}

/// The TCP connections holding slots, so that a new connection finding all taken can have the
/// one that has waited longest on its client close.
#[derive(Default)]
struct TcpSlots {
    inner: Mutex<SlotsInner>,
}

#[derive(Default)]
struct SlotsInner {
    next_id: u64,
    /// Each connection: since when it has waited on its client (`None` while being answered)
    /// and how to close it.
    conns: HashMap<u64, (Option<Instant>, CancellationToken)>,
    /// A new connection waits for a slot that no connection waiting on its client could give:
    /// the next one to wait gives way.
    room_wanted: bool,
}

impl TcpSlots {
    fn lock(&self) -> std::sync::MutexGuard<'_, SlotsInner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// All slots are taken: closes the connection that has waited longest on its client, or
    /// if none waits, has the next one to wait close instead.
    fn make_room(&self) {
        let mut inner = self.lock();
        let oldest = inner
            .conns
            .iter_mut()
            .filter_map(|(_, (since, evict))| since.map(|t| (t, since, evict)))
            .min_by_key(|(t, _, _)| *t);
        match oldest {
            Some((_, since, evict)) => {
                *since = None;
                evict.cancel();
            }
            None => inner.room_wanted = true,
        }
    }

    /// A slot was had: no connection need give way any more.
    fn room_made(&self) {
        self.lock().room_wanted = false;
    }
}

/// One connection's place in [`TcpSlots`]; it leaves on drop.
struct TcpSlot {
    slots: Arc<TcpSlots>,
    id: u64,
    evict: CancellationToken,
}

impl TcpSlot {
    fn join(slots: &Arc<TcpSlots>) -> Self {
        let evict = CancellationToken::new();
        let mut inner = slots.lock();
        let id = inner.next_id;
        inner.next_id += 1;
        inner.conns.insert(id, (None, evict.clone()));
        drop(inner);
        TcpSlot {
            slots: slots.clone(),
            id,
            evict,
        }
    }

    /// Marks the connection as waiting on its client since `since`; false: it must close to
    /// make room for a new one.
    fn wait_on_client(&self, since: Instant) -> bool {
        let mut inner = self.slots.lock();
        if inner.room_wanted {
            inner.room_wanted = false;
            return false;
        }
        if self.evict.is_cancelled() {
            return false;
        }
        if let Some(c) = inner.conns.get_mut(&self.id) {
            c.0 = Some(since);
        }
        true
    }

    /// Marks the connection as being answered: not to be closed to make room.
    fn busy(&self) {
        if let Some(c) = self.slots.lock().conns.get_mut(&self.id) {
            c.0 = None;
        }
    }

    /// Completes when the connection is to close to make room.
    async fn evicted(&self) {
        self.evict.cancelled().await
    }
}

impl Drop for TcpSlot {
    fn drop(&mut self) {
        self.slots.lock().conns.remove(&self.id);
    }
}

/// At most one log line per period: [`LogLimiter::allow`] says whether a line may go out now
/// and how many were held back since the last one. Pure over the instants it is given.
#[derive(Clone, Debug)]
struct LogLimiter {
    period: Duration,
    /// When the last line went out.
    last: Option<std::time::Instant>,
    suppressed: u64,
}

impl LogLimiter {
    fn new(period: Duration) -> Self {
        LogLimiter {
            period,
            last: None,
            suppressed: 0,
        }
    }

    /// `Some(n)`: log a line at `now`, saying that `n` were held back before it; `None`: hold
    /// this one back (it is counted).
    fn allow(&mut self, now: std::time::Instant) -> Option<u64> {
        match self.last {
            Some(last) if now.saturating_duration_since(last) < self.period => {
                self.suppressed += 1;
                None
            }
            _ => {
                self.last = Some(now);
                Some(std::mem::take(&mut self.suppressed))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_log_lines_are_rate_limited_with_a_count_of_those_held_back() {
        let t0 = std::time::Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut l = LogLimiter::new(Duration::from_secs(10));
        assert_eq!(l.allow(at(0)), Some(0), "the first line goes out");
        for ms in (1..10_000).step_by(10) {
            assert_eq!(l.allow(at(ms)), None, "{ms} ms");
        }
        assert_eq!(
            l.allow(at(10_000)),
            Some(1000),
            "one line per period, with the count"
        );
        assert_eq!(l.allow(at(10_001)), None);
        assert_eq!(l.allow(at(60_000)), Some(1), "after a quiet spell at once");
        assert_eq!(l.allow(at(70_000)), Some(0));
        // An instant earlier than the last line's (another thread's clock read) holds back.
        assert_eq!(l.allow(at(69_000)), None);
    }
}
