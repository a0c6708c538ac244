//! `DnsProxy`: the rewriting DNS proxy of 002 §3.2 (`webpep dns`). It forwards each client
//! query to one upstream resolver, rewrites the answer under its [`RewritePolicy`] (or
//! forwards it unchanged) and answers over the transport the query came on.
//!
//! The client's query goes upstream byte for byte except for a fresh random ID, so EDNS
//! options, DO and CD bits and the question's case survive; answers that are not rewritten
//! come back byte for byte except for the client's ID.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hickory_proto::op::{Message, MessageType, OpCode, ResponseCode};
use ipnet::IpNet;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use crate::error::DnsError;
use crate::policy::RewritePolicy;
use crate::rewrite::rewrite_response;
use crate::upstream::Upstream;
use crate::wire::{
    encode, error_reply, fit_udp, random_id, read_frame, set_wire_id, udp_limit, write_frame,
};

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
    /// Most TCP client connections at once (default 64); beyond it new ones wait in the backlog.
    pub max_tcp_connections: usize,
    /// A TCP client connection idle (or stalled mid-message) this long is closed (default 10 s).
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
    /// Queries from clients outside `allow_clients`, answered REFUSED.
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
        let tracker = TaskTracker::new();
        loop {
            let Some(permit) = next_permit(&permits, &cancel).await else {
                break;
            };
            let Some((stream, peer)) = webpep_accept::accept(&listener, &cancel, "dns proxy").await
            else {
                break;
            };
            let proxy = self.clone();
            let cancel = cancel.clone();
            tracker.spawn(async move {
                let _permit = permit;
                tokio::select! {
                    _ = cancel.cancelled() => {}
                    r = proxy.tcp_connection(stream, peer) => {
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

    /// Length-prefixed queries answered in order until the client closes, goes idle, or sends
    /// a malformed message (then it is disconnected).
    async fn tcp_connection(
        &self,
        mut stream: tokio::net::TcpStream,
        peer: SocketAddr,
    ) -> io::Result<()> {
        loop {
            let frame =
                match tokio::time::timeout(self.limits.tcp_idle, read_frame(&mut stream)).await {
                    Err(_) => return Ok(()),
                    Ok(r) => r?,
                };
            let Some(packet) = frame else {
                return Ok(());
            };
            match self.answer(&packet, Transport::Tcp, peer).await {
                Some(bytes) => write_frame(&mut stream, &bytes).await?,
                None => return Ok(()),
            }
        }
    }

    /// The answer to one client packet; `None`: drop it (logged).
    async fn answer(
        &self,
        packet: &[u8],
        transport: Transport,
        peer: SocketAddr,
    ) -> Option<Vec<u8>> {
        let ip = peer.ip().to_canonical();
        if !self.cfg.allow_clients.iter().any(|n| n.contains(&ip)) {
            return self.refuse(packet, peer);
        }
        match self.try_answer(packet, transport).await {
            Ok(bytes) => Some(bytes),
            Err(e) => {
                self.counters.malformed.fetch_add(1, Ordering::Relaxed);
                warn!(%peer, ?transport, len = packet.len(), error = %e, "dns proxy: packet dropped");
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
