//! `webpep lab transport-bench`: the link transport against TCP over the emulated slow link
//! (issue 34 item 5). The edge (in `edge`) sends and the device (in `ue`) receives:
//!
//! - goodput of each size from a cold connection (connect to last byte), as a share of the
//!   link's downlink rate, and on an open connection that has just carried a warm-up
//!   transfer (request to last byte: what the dual proxy's one long-lived connection sees);
//! - the completion time of a small request on an idle connection (the idle RTT), and of the
//!   same request issued while a bulk transfer runs (on the same QUIC connection; a second TCP
//!   connection for TCP, as a browser would open, 001 Fig. 4);
//! - the downlink queue's mean and largest delay during each transfer, and its packets lost.
//!
//! Transports: QUIC with webpep's link-aware controller, QUIC with quinn's Cubic and BBR, and
//! TCP with the kernel's cubic and reno. All times are reported unscaled.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use webpep_link::LinkCounters;
use webpep_link_model::ResolvedProfile;
use webpep_transport::write_order::WriteOrder;
use webpep_transport::{client_config, server_config, EdgeIdentity, TransportSettings};

use crate::configs::QuicCongestion;
use crate::nsrt::{run_in, NsService};
use crate::topology::{Topology, TopologyConfig};
use crate::{LabError, Result};

/// A transport under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Transport {
    #[serde(rename = "quic-webpep")]
    QuicWebpep,
    #[serde(rename = "quic-cubic")]
    QuicCubic,
    #[serde(rename = "quic-bbr")]
    QuicBbr,
    #[serde(rename = "tcp-cubic")]
    TcpCubic,
    #[serde(rename = "tcp-reno")]
    TcpReno,
}

impl Transport {
    pub const ALL: [Transport; 5] = [
        Transport::QuicWebpep,
        Transport::QuicCubic,
        Transport::QuicBbr,
        Transport::TcpCubic,
        Transport::TcpReno,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Transport::QuicWebpep => "quic-webpep",
            Transport::QuicCubic => "quic-cubic",
            Transport::QuicBbr => "quic-bbr",
            Transport::TcpCubic => "tcp-cubic",
            Transport::TcpReno => "tcp-reno",
        }
    }

    fn quic_controller(self) -> Option<webpep_transport::Congestion> {
        let c = match self {
            Transport::QuicWebpep => QuicCongestion::LinkAware,
            Transport::QuicCubic => QuicCongestion::Cubic,
            Transport::QuicBbr => QuicCongestion::Bbr,
            Transport::TcpCubic | Transport::TcpReno => return None,
        };
        Some(c.factory())
    }

    fn tcp_congestion(self) -> Option<&'static str> {
        match self {
            Transport::TcpCubic => Some("cubic"),
            Transport::TcpReno => Some("reno"),
            _ => None,
        }
    }
}

impl std::str::FromStr for Transport {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        Transport::ALL
            .into_iter()
            .find(|t| t.name() == s)
            .ok_or_else(|| {
                format!(
                    "unknown transport {s:?} ({})",
                    Transport::ALL.map(|t| t.name()).join(", ")
                )
            })
    }
}

/// What to measure.
#[derive(Clone, Debug)]
pub struct TransportBenchOptions {
    pub profile: ResolvedProfile,
    pub time_scale: f64,
    pub seed: u64,
    /// Transfer sizes, bytes.
    pub sizes: Vec<u64>,
    /// The bulk transfer the small request runs beside (0: skip that test).
    pub bulk_bytes: u64,
    /// The small request's size.
    pub small_bytes: u64,
    /// Bytes the bulk request also uploads, for the small request beside a bulk transfer
    /// both ways (0: skip that test).
    pub bulk_up_bytes: u64,
    /// What an open connection carries before its transfers are timed (0: no open-connection
    /// measurements).
    pub warm_up_bytes: u64,
    pub transports: Vec<Transport>,
}

/// One transfer.
#[derive(Clone, Debug, Serialize)]
pub struct Transfer {
    pub transport: Transport,
    pub bytes: u64,
    /// On a connection that had just carried the warm-up transfer (request to last byte);
    /// otherwise from a cold connection (connect to last byte).
    pub open: bool,
    /// Unscaled seconds.
    pub seconds: f64,
    /// bytes ÷ seconds ÷ the link's downlink rate.
    pub goodput_share: f64,
    /// Bytes the link delivered downwards during the transfer (IP packets: the payload with
    /// every header, retransmissions and the handshake of a cold connection).
    pub air_down_bytes: u64,
    /// air_down_bytes ÷ seconds ÷ the link's downlink rate: how busy the link was. Goodput is
    /// this × bytes ÷ air_down_bytes (what the headers leave of each packet).
    pub link_busy_share: f64,
    /// Downlink queue delay during the transfer (unscaled ms), mean per packet and largest.
    pub queue_mean_ms: f64,
    pub queue_max_ms: f64,
    /// The mean queue in bytes at the link's rate.
    pub queue_mean_bytes: f64,
    pub dropped_packets: u64,
}

/// The small request, idle and beside a bulk transfer.
#[derive(Clone, Debug, Serialize)]
pub struct SmallBeside {
    pub transport: Transport,
    pub idle_ms: f64,
    pub beside_bulk_ms: f64,
    /// beside_bulk ÷ idle.
    pub ratio: f64,
    /// Beside a bulk transfer both ways (the bulk request also uploads `bulk_up_bytes`), and
    /// that ÷ idle; `None` when not measured.
    pub beside_both_ms: Option<f64>,
    pub both_ratio: Option<f64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct TransportBenchReport {
    pub profile: String,
    pub down_kbps: f64,
    pub time_scale: f64,
    pub transfers: Vec<Transfer>,
    pub small: Vec<SmallBeside>,
}

impl TransportBenchReport {
    pub fn table(&self) -> String {
        let mut s = format!(
            "transport bench over {} ({:.0} kbit/s down), time scale {}\n\n| transport | connection | bytes | seconds | goodput (% of link) | link busy | payload of air bytes | queue mean | queue max | dropped |\n|---|---|---|---|---|---|---|---|---|---|\n",
            self.profile, self.down_kbps, self.time_scale
        );
        for t in &self.transfers {
            s.push_str(&format!(
                "| {} | {} | {} | {:.1} | {:.1} % | {:.1} % | {:.1} % | {:.0} ms ({:.1} KB) | {:.0} ms | {} |\n",
                t.transport.name(),
                if t.open { "open" } else { "cold" },
                t.bytes,
                t.seconds,
                100.0 * t.goodput_share,
                100.0 * t.link_busy_share,
                100.0 * t.bytes as f64 / t.air_down_bytes.max(1) as f64,
                t.queue_mean_ms,
                t.queue_mean_bytes / 1000.0,
                t.queue_max_ms,
                t.dropped_packets
            ));
        }
        if !self.small.is_empty() {
            s.push_str("\n| transport | small request idle | beside the bulk transfer | ratio | beside bulk both ways | ratio |\n|---|---|---|---|---|---|\n");
            for m in &self.small {
                let both = match (m.beside_both_ms, m.both_ratio) {
                    (Some(ms), Some(r)) => format!("{ms:.0} ms | {r:.1}x"),
                    _ => "— | —".into(),
                };
                s.push_str(&format!(
                    "| {} | {:.0} ms | {:.0} ms | {:.1}x | {both} |\n",
                    m.transport.name(),
                    m.idle_ms,
                    m.beside_bulk_ms,
                    m.ratio
                ));
            }
        }
        s
    }
}

const QUIC_PORT: u16 = 4433;
const TCP_PORT: u16 = 4434;
/// TCP connections that carry one request after another (QUIC's do anyway).
const TCP_OPEN_PORT: u16 = 4435;

/// The sender's side: for each request (an 8-byte big-endian size), that many bytes.
async fn quic_sender(endpoint: quinn::Endpoint) {
    while let Some(incoming) = endpoint.accept().await {
        tokio::spawn(async move {
            let Ok(conn) = incoming.await else { return };
            // As the proxies' sessions do (a no-op with quinn's controllers): quinn's send
            // window at the controller's budget, and the streams' bytes handed to it in
            // priority order.
            webpep_transport::follow_send_budget(&conn);
            let order = Arc::new(WriteOrder::default());
            while let Ok((mut send, mut recv)) = conn.accept_bi().await {
                let order = order.clone();
                tokio::spawn(async move {
                    let mut size = [0u8; 8];
                    if recv.read_exact(&mut size).await.is_err() {
                        return;
                    }
                    // What follows the size is an upload, read and dropped as it comes.
                    tokio::spawn(async move {
                        let mut buf = vec![0u8; 16 * 1024];
                        while let Ok(Some(_)) = recv.read(&mut buf).await {}
                    });
                    let _ = send_bytes_quic(&order, &mut send, u64::from_be_bytes(size)).await;
                    let _ = send.finish();
                    // Keep the stream until the peer has everything.
                    let _ = send.stopped().await;
                });
            }
        });
    }
}

async fn send_bytes_quic(
    order: &WriteOrder,
    send: &mut quinn::SendStream,
    n: u64,
) -> std::io::Result<()> {
    let chunk = vec![0x5au8; 16 * 1024];
    let mut left = n;
    while left > 0 {
        let k = left.min(chunk.len() as u64) as usize;
        order
            .write_all(send, &chunk[..k])
            .await
            .map_err(std::io::Error::other)?;
        left -= k as u64;
    }
    Ok(())
}

/// TCP's sender: one request per connection, closed after it; or, with `open`, one request
/// after another until the peer closes.
async fn tcp_sender(listener: TcpListener, congestion: &'static str, open: bool) {
    loop {
        let Ok((mut s, _)) = listener.accept().await else {
            return;
        };
        set_tcp_congestion(&s, congestion);
        tokio::spawn(async move {
            let chunk = vec![0x5au8; 16 * 1024];
            loop {
                let mut size = [0u8; 8];
                if s.read_exact(&mut size).await.is_err() {
                    return;
                }
                let left = u64::from_be_bytes(size);
                if open {
                    if tcp_write_n(&mut s, &chunk, left).await.is_err() {
                        return;
                    }
                    continue;
                }
                // One request per connection: what follows its size is an upload, read and
                // dropped while the response goes out, until the peer closes.
                let (mut r, mut w) = s.into_split();
                let drain = async move {
                    let mut buf = vec![0u8; 16 * 1024];
                    while matches!(r.read(&mut buf).await, Ok(k) if k > 0) {}
                };
                let respond = async move {
                    if tcp_write_n(&mut w, &chunk, left).await.is_ok() {
                        let _ = w.shutdown().await;
                    }
                    w
                };
                let (_, _w) = tokio::join!(drain, respond);
                return;
            }
        });
    }
}

async fn tcp_write_n<W: tokio::io::AsyncWrite + Unpin>(
    w: &mut W,
    chunk: &[u8],
    n: u64,
) -> std::io::Result<()> {
    let mut left = n;
    while left > 0 {
        let k = left.min(chunk.len() as u64) as usize;
        w.write_all(&chunk[..k]).await?;
        left -= k as u64;
    }
    Ok(())
}

fn set_tcp_congestion(s: &TcpStream, name: &str) {
    use std::os::fd::AsRawFd;
    // SAFETY: a valid socket fd and a buffer of the given length.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            name.as_ptr().cast(),
            name.len() as libc::socklen_t,
        )
    };
    if rc != 0 {
        tracing::warn!("TCP_CONGESTION {name}: {}", std::io::Error::last_os_error());
    }
}

/// A new client endpoint and its connection to the sender.
async fn quic_connect(
    edge: SocketAddr,
    config: quinn::ClientConfig,
) -> std::result::Result<(quinn::Endpoint, quinn::Connection), String> {
    let endpoint =
        quinn::Endpoint::client((Ipv4Addr::UNSPECIFIED, 0).into()).map_err(|e| e.to_string())?;
    let conn = webpep_transport::connect(&endpoint, edge, config)
        .await
        .map_err(|e| e.to_string())?;
    webpep_transport::follow_send_budget(&conn);
    Ok((endpoint, conn))
}

/// The receiver's side of one request: connect (cold), ask for `n` bytes, read them all.
async fn quic_fetch(
    edge: SocketAddr,
    config: quinn::ClientConfig,
    n: u64,
) -> std::result::Result<Duration, String> {
    let t0 = Instant::now();
    let (endpoint, conn) = quic_connect(edge, config).await?;
    quic_get(&conn, n).await?;
    let took = t0.elapsed();
    conn.close(0u32.into(), b"done");
    endpoint.wait_idle().await;
    Ok(took)
}

async fn quic_get(conn: &quinn::Connection, n: u64) -> std::result::Result<(), String> {
    quic_get_in_order(conn, n, &WriteOrder::default()).await
}

/// [`quic_get`], the request written in `order` (the connection's other writers').
async fn quic_get_in_order(
    conn: &quinn::Connection,
    n: u64,
    order: &WriteOrder,
) -> std::result::Result<(), String> {
    let (mut send, mut recv) = conn.open_bi().await.map_err(|e| e.to_string())?;
    order
        .write_all(&mut send, &n.to_be_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let _ = send.finish();
    let mut got = 0u64;
    let mut buf = vec![0u8; 64 * 1024];
    while let Some(k) = recv.read(&mut buf).await.map_err(|e| e.to_string())? {
        got += k as u64;
    }
    if got != n {
        return Err(format!("received {got} of {n} bytes"));
    }
    Ok(())
}

async fn tcp_get(edge: SocketAddr, n: u64) -> std::result::Result<Duration, String> {
    let t0 = Instant::now();
    let mut s = TcpStream::connect(edge).await.map_err(|e| e.to_string())?;
    s.write_all(&n.to_be_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut got = 0u64;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let k = s.read(&mut buf).await.map_err(|e| e.to_string())?;
        if k == 0 {
            break;
        }
        got += k as u64;
    }
    if got != n {
        return Err(format!("received {got} of {n} bytes"));
    }
    Ok(t0.elapsed())
}

/// Reads exactly `n` bytes of a TCP connection that stays open.
async fn tcp_read_n(s: &mut TcpStream, n: u64) -> std::result::Result<(), String> {
    let mut buf = vec![0u8; 64 * 1024];
    let mut got = 0u64;
    while got < n {
        let want = (n - got).min(buf.len() as u64) as usize;
        let k = s.read(&mut buf[..want]).await.map_err(|e| e.to_string())?;
        if k == 0 {
            return Err(format!("received {got} of {n} bytes"));
        }
        got += k as u64;
    }
    Ok(())
}

/// One timed transfer on an open connection, with the link's counters around it.
struct Timed {
    took: Duration,
    before: LinkCounters,
    after: LinkCounters,
}

/// Each size on one open connection after it carried `warm_up` bytes: request to last byte.
/// `counters` snapshots the link (it is outside the namespace this runs in).
async fn open_connection_transfers(
    edge_quic: SocketAddr,
    edge_tcp_open: SocketAddr,
    config: Option<quinn::ClientConfig>,
    warm_up: u64,
    sizes: Vec<u64>,
    counters: impl Fn() -> LinkCounters,
) -> std::result::Result<Vec<Timed>, String> {
    let mut took = Vec::new();
    if let Some(config) = config {
        let (endpoint, conn) = quic_connect(edge_quic, config).await?;
        quic_get(&conn, warm_up).await?;
        for n in sizes {
            let before = counters();
            let t0 = Instant::now();
            quic_get(&conn, n).await?;
            let took_n = t0.elapsed();
            took.push(Timed {
                took: took_n,
                before,
                after: counters(),
            });
        }
        conn.close(0u32.into(), b"done");
        endpoint.wait_idle().await;
    } else {
        let mut s = TcpStream::connect(edge_tcp_open)
            .await
            .map_err(|e| e.to_string())?;
        for (i, n) in std::iter::once(warm_up).chain(sizes).enumerate() {
            let before = counters();
            let t0 = Instant::now();
            s.write_all(&n.to_be_bytes())
                .await
                .map_err(|e| e.to_string())?;
            tcp_read_n(&mut s, n).await?;
            let took_n = t0.elapsed();
            if i > 0 {
                took.push(Timed {
                    took: took_n,
                    before,
                    after: counters(),
                });
            }
        }
    }
    Ok(took)
}

/// The small request while a bulk transfer runs: issued once a quarter of the bulk arrived.
/// The bulk request also uploads `up` bytes (0: a download only).
async fn small_beside_bulk(
    edge_quic: SocketAddr,
    edge_tcp: SocketAddr,
    config: Option<quinn::ClientConfig>,
    bulk: u64,
    small: u64,
    up: u64,
) -> std::result::Result<(Duration, Duration), String> {
    let upload = vec![0xa5u8; 16 * 1024];
    if let Some(config) = config {
        let (endpoint, conn) = quic_connect(edge_quic, config).await?;
        // Idle: the connection is up and quiet.
        let t0 = Instant::now();
        quic_get(&conn, small).await?;
        let idle = t0.elapsed();
        let (mut send, mut recv) = conn.open_bi().await.map_err(|e| e.to_string())?;
        send.write_all(&bulk.to_be_bytes())
            .await
            .map_err(|e| e.to_string())?;
        // The client proxy's writers go through its session's order.
        let order = Arc::new(WriteOrder::default());
        let uploader = order.clone();
        tokio::spawn(async move {
            let mut left = up;
            while left > 0 {
                let k = left.min(upload.len() as u64) as usize;
                if uploader.write_all(&mut send, &upload[..k]).await.is_err() {
                    return;
                }
                left -= k as u64;
            }
            let _ = send.finish();
        });
        let mut got = 0u64;
        let mut buf = vec![0u8; 64 * 1024];
        while got < bulk / 4 {
            match recv.read(&mut buf).await.map_err(|e| e.to_string())? {
                Some(k) => got += k as u64,
                None => return Err("bulk transfer ended early".into()),
            }
        }
        let small_conn = conn.clone();
        let small_task = async move {
            let t1 = Instant::now();
            quic_get_in_order(&small_conn, small, &order)
                .await
                .map(|()| t1.elapsed())
        };
        let drain = async {
            while let Some(k) = recv.read(&mut buf).await.map_err(|e| e.to_string())? {
                got += k as u64;
            }
            Ok::<(), String>(())
        };
        let (beside, drained) = tokio::join!(small_task, drain);
        drained?;
        conn.close(0u32.into(), b"done");
        endpoint.wait_idle().await;
        Ok((idle, beside?))
    } else {
        // TCP: the small request on a connection of its own (what a browser does), idle first
        // on a warm path, then beside a bulk connection.
        let idle = tcp_get(edge_tcp, small).await?;
        let s = TcpStream::connect(edge_tcp)
            .await
            .map_err(|e| e.to_string())?;
        let (mut s, mut w) = s.into_split();
        w.write_all(&bulk.to_be_bytes())
            .await
            .map_err(|e| e.to_string())?;
        // The write half is kept until the response is read: closing it ends the request.
        let uploading = tokio::spawn(async move {
            let _ = tcp_write_n(&mut w, &upload, up).await;
            w
        });
        let mut got = 0u64;
        let mut buf = vec![0u8; 64 * 1024];
        while got < bulk / 4 {
            let k = s.read(&mut buf).await.map_err(|e| e.to_string())?;
            if k == 0 {
                return Err("bulk transfer ended early".into());
            }
            got += k as u64;
        }
        let drain = async {
            loop {
                let k = s.read(&mut buf).await.map_err(|e| e.to_string())?;
                if k == 0 {
                    return Ok::<(), String>(());
                }
            }
        };
        let (beside, drained) = tokio::join!(tcp_get(edge_tcp, small), drain);
        drained?;
        drop(uploading.await);
        Ok((idle, beside?))
    }
}

/// How long a test may take, in real (scaled) time: thirty times what its bytes take at the
/// link's mean rate, and two minutes more (a trace's rate falls tenfold for tens of seconds; a
/// handshake and an outage fit in the two minutes). Past it the bench stops with the test's
/// name instead of hanging.
fn deadline(bytes: u64, rate_bps: f64, k: f64) -> Duration {
    Duration::from_secs_f64((bytes as f64 * 8.0 / rate_bps * 30.0 + 120.0) / k)
}

async fn bounded<T>(
    limit: Duration,
    k: f64,
    test: impl std::future::Future<Output = std::result::Result<T, String>>,
) -> std::result::Result<T, String> {
    tokio::time::timeout(limit, test).await.unwrap_or_else(|_| {
        Err(format!(
            "not done after {:.0} s of link time",
            limit.as_secs_f64() * k
        ))
    })
}

/// A transfer's record from its size, time and the link's counters around it.
fn transfer(
    t: Transport,
    n: u64,
    open: bool,
    took: Duration,
    (before, after): (&LinkCounters, &LinkCounters),
    k: f64,
    rate_bps: f64,
) -> Transfer {
    let seconds = took.as_secs_f64() * k;
    let (queue_mean_ms, queue_max_ms, queue_mean_bytes, dropped) =
        queue_during(before, after, k, rate_bps);
    let air_down_bytes = after
        .down
        .delivered_bytes
        .saturating_sub(before.down.delivered_bytes);
    Transfer {
        transport: t,
        bytes: n,
        open,
        seconds,
        goodput_share: n as f64 * 8.0 / seconds / rate_bps,
        air_down_bytes,
        link_busy_share: air_down_bytes as f64 * 8.0 / seconds / rate_bps,
        queue_mean_ms,
        queue_max_ms,
        queue_mean_bytes,
        dropped_packets: dropped,
    }
}

fn queue_during(
    before: &LinkCounters,
    after: &LinkCounters,
    k: f64,
    rate_bps: f64,
) -> (f64, f64, f64, u64) {
    let (b, a) = (&before.down, &after.down);
    let samples = a.queue_delay_samples.saturating_sub(b.queue_delay_samples);
    let sum = a.queue_delay_sum_us.saturating_sub(b.queue_delay_sum_us);
    let mean_ms = if samples == 0 {
        0.0
    } else {
        sum as f64 / samples as f64 / 1000.0 * k
    };
    // The largest since the pump started (the counters keep no per-interval maximum).
    let max_ms = a.queue_delay_max_us as f64 / 1000.0 * k;
    let dropped = (a.dropped_queue_packets + a.lost_packets)
        .saturating_sub(b.dropped_queue_packets + b.lost_packets);
    (mean_ms, max_ms, mean_ms / 1000.0 * rate_bps / 8.0, dropped)
}

/// A fresh link (namespaces, and the link's clock: a trace from its start, the same seed's
/// schedule) with the sender in `edge`, for one test: every transport's test then meets the
/// same link, which on a trace whose rate swings tenfold within seconds it otherwise would
/// not (a transport slower on one test met the next one later in the trace).
struct Bed {
    // Stopped before the topology goes.
    _sender: NsService,
    topo: Topology,
}

impl Bed {
    fn start(
        opts: &TransportBenchOptions,
        k: f64,
        t: Transport,
        server_cfg: quinn::ServerConfig,
    ) -> Result<Bed> {
        let mut cfg = TopologyConfig::new(opts.profile.clone(), Vec::new());
        cfg.time_scale = k;
        cfg.seed = opts.seed;
        let topo = Topology::build(&cfg)?;
        let congestion = t.tcp_congestion();
        let sender = NsService::start(&topo.edge, &format!("sender-{}", t.name()), move || {
            let quic =
                quinn::Endpoint::server(server_cfg, (Ipv4Addr::UNSPECIFIED, QUIC_PORT).into())
                    .map_err(|e| format!("QUIC listen: {e}"))?;
            let listen = |port: u16| {
                std::net::TcpListener::bind((Ipv4Addr::UNSPECIFIED, port))
                    .and_then(|l| {
                        l.set_nonblocking(true)?;
                        TcpListener::from_std(l)
                    })
                    .map_err(|e| format!("TCP listen on {port}: {e}"))
            };
            let (tcp, tcp_open) = (listen(TCP_PORT)?, listen(TCP_OPEN_PORT)?);
            let congestion = congestion.unwrap_or("cubic");
            Ok(async move {
                tokio::join!(
                    quic_sender(quic),
                    tcp_sender(tcp, congestion, false),
                    tcp_sender(tcp_open, congestion, true)
                );
            })
        })?;
        Ok(Bed {
            _sender: sender,
            topo,
        })
    }

    fn addr(&self, port: u16) -> SocketAddr {
        SocketAddr::from((self.topo.edge_addr(), port))
    }
}

/// Runs the bench. Needs root (namespaces and TUN devices).
pub fn run(opts: &TransportBenchOptions) -> Result<TransportBenchReport> {
    let k = if opts.time_scale > 0.0 {
        opts.time_scale
    } else {
        1.0
    };
    let rate_bps = opts.profile.down_kbps() * 1000.0;
    let state = tempfile::tempdir().map_err(|e| LabError::Other(format!("temp dir: {e}")))?;
    let identity = EdgeIdentity::load_or_create(state.path())
        .map_err(|e| LabError::Other(format!("edge identity: {e}")))?;
    let credential = identity
        .enroll("bench")
        .map_err(|e| LabError::Other(format!("enroll: {e}")))?;
    let mut report = TransportBenchReport {
        profile: opts.profile.profile.name.clone(),
        down_kbps: opts.profile.down_kbps(),
        time_scale: k,
        transfers: Vec::new(),
        small: Vec::new(),
    };
    for &t in &opts.transports {
        let settings = TransportSettings {
            congestion: t
                .quic_controller()
                .unwrap_or_else(|| webpep_transport::Congestion::LinkAware(Default::default())),
            ..TransportSettings::default()
        };
        // One server configuration per transport: its controller's memory of the client's
        // link is the edge's, kept from one test to the next as a real edge keeps it.
        let server_cfg = server_config(&identity, identity.revocations(), &settings)
            .map_err(|e| LabError::Other(format!("server config: {e}")))?;
        let client_cfg = if t.quic_controller().is_some() {
            Some(
                client_config(&credential, &settings)
                    .map_err(|e| LabError::Other(format!("client config: {e}")))?,
            )
        } else {
            None
        };
        let bed = || Bed::start(opts, k, t, server_cfg.clone());
        for &n in &opts.sizes {
            let bed = bed()?;
            let before = bed.topo.air.counters_now();
            let cc = client_cfg.clone();
            let (edge_quic, edge_tcp) = (bed.addr(QUIC_PORT), bed.addr(TCP_PORT));
            let limit = deadline(n, rate_bps, k);
            let took = run_in(&bed.topo.ue, move || async move {
                bounded(limit, k, async move {
                    match cc {
                        Some(cc) => quic_fetch(edge_quic, cc, n).await,
                        None => tcp_get(edge_tcp, n).await,
                    }
                })
                .await
            })?
            .map_err(|e| LabError::Other(format!("{} {n} B: {e}", t.name())))?;
            let after = bed.topo.air.counters_now();
            let x = transfer(t, n, false, took, (&before, &after), k, rate_bps);
            eprintln!("{} {n} B: {:.1} s", t.name(), x.seconds);
            report.transfers.push(x);
        }
        if opts.warm_up_bytes > 0 {
            let bed = bed()?;
            let cc = client_cfg.clone();
            let (warm_up, sizes) = (opts.warm_up_bytes, opts.sizes.clone());
            let (edge_quic, edge_tcp_open) = (bed.addr(QUIC_PORT), bed.addr(TCP_OPEN_PORT));
            let air = &bed.topo.air;
            let limit = deadline(warm_up + sizes.iter().sum::<u64>(), rate_bps, k);
            let timed = run_in(&bed.topo.ue, move || async move {
                let counters = || air.counters_now();
                let test = open_connection_transfers(
                    edge_quic,
                    edge_tcp_open,
                    cc,
                    warm_up,
                    sizes,
                    counters,
                );
                bounded(limit, k, test).await
            })?
            .map_err(|e| LabError::Other(format!("{} on an open connection: {e}", t.name())))?;
            for (&n, m) in opts.sizes.iter().zip(timed) {
                let x = transfer(t, n, true, m.took, (&m.before, &m.after), k, rate_bps);
                eprintln!(
                    "{} {n} B on an open connection: {:.1} s",
                    t.name(),
                    x.seconds
                );
                report.transfers.push(x);
            }
        }
        if opts.bulk_bytes > 0 {
            let (bulk, small) = (opts.bulk_bytes, opts.small_bytes);
            // Each on a fresh link: beside a download, then beside a download and an upload.
            let mut beside_ms = Vec::new();
            let mut idle_ms = 0.0;
            for up in [0, opts.bulk_up_bytes] {
                if up == 0 && !beside_ms.is_empty() {
                    break;
                }
                let bed = bed()?;
                let cc = client_cfg.clone();
                let (edge_quic, edge_tcp) = (bed.addr(QUIC_PORT), bed.addr(TCP_PORT));
                // The upload's time at the downlink's rate, scaled by how much slower the
                // uplink is.
                let up_as_down = up as f64 * opts.profile.down_kbps() / opts.profile.up_kbps();
                let limit = deadline(bulk + 2 * small + up_as_down as u64, rate_bps, k);
                let (idle, beside) = run_in(&bed.topo.ue, move || async move {
                    bounded(
                        limit,
                        k,
                        small_beside_bulk(edge_quic, edge_tcp, cc, bulk, small, up),
                    )
                    .await
                })?
                .map_err(|e| {
                    let what = if up == 0 { "bulk" } else { "bulk both ways" };
                    LabError::Other(format!("{} small beside {what}: {e}", t.name()))
                })?;
                if up == 0 {
                    idle_ms = idle.as_secs_f64() * 1000.0 * k;
                }
                beside_ms.push(beside.as_secs_f64() * 1000.0 * k);
                eprintln!(
                    "{} small request: idle {:.0} ms, beside the bulk{} {:.0} ms",
                    t.name(),
                    idle.as_secs_f64() * 1000.0 * k,
                    if up == 0 { "" } else { " both ways" },
                    beside.as_secs_f64() * 1000.0 * k
                );
            }
            let both = beside_ms.get(1).copied();
            report.small.push(SmallBeside {
                transport: t,
                idle_ms,
                beside_bulk_ms: beside_ms[0],
                ratio: beside_ms[0] / idle_ms.max(1e-9),
                beside_both_ms: both,
                both_ratio: both.map(|b| b / idle_ms.max(1e-9)),
            });
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A test that never ends fails at its deadline, naming the link time it had; one that
    /// ends keeps its result.
    #[tokio::test(start_paused = true)]
    async fn a_test_that_never_ends_fails_at_its_deadline() {
        // 100 KB at 40 kbit/s takes 20 s: 30 × that and two minutes, at time scale 10.
        let limit = deadline(100_000, 40_000.0, 10.0);
        assert_eq!(limit, Duration::from_secs(72));
        let stuck = bounded(
            limit,
            10.0,
            std::future::pending::<std::result::Result<(), String>>(),
        );
        assert_eq!(stuck.await, Err("not done after 720 s of link time".into()));
        assert_eq!(
            bounded(limit, 10.0, async { Ok::<_, String>(7) }).await,
            Ok(7)
        );
    }
}
