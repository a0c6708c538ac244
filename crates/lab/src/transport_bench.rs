//! `webpep lab transport-bench`: the link transport against TCP over the emulated slow link
//! (issue 34 item 5). The edge (in `edge`) sends and the device (in `ue`) receives:
//!
//! - goodput of each size from a cold connection (connect to last byte), as a share of the
//!   link's downlink rate;
//! - the completion time of a small request on an idle connection (the idle RTT), and of the
//!   same request issued while a bulk transfer runs (on the same QUIC connection; a second TCP
//!   connection for TCP, as a browser would open, 001 Fig. 4);
//! - the downlink queue's mean and largest delay during each transfer, and its packets lost.
//!
//! Transports: QUIC with webpep's link-aware controller, QUIC with quinn's Cubic and BBR, and
//! TCP with the kernel's cubic and reno. All times are reported unscaled.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use webpep_link::LinkCounters;
use webpep_link_model::ResolvedProfile;
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
    pub transports: Vec<Transport>,
}

/// One transfer.
#[derive(Clone, Debug, Serialize)]
pub struct Transfer {
    pub transport: Transport,
    pub bytes: u64,
    /// Connect to last byte, unscaled seconds.
    pub seconds: f64,
    /// bytes ÷ seconds ÷ the link's downlink rate.
    pub goodput_share: f64,
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
            "transport bench over {} ({:.0} kbit/s down), time scale {}\n\n| transport | bytes | seconds | goodput (% of link) | queue mean | queue max | dropped |\n|---|---|---|---|---|---|---|\n",
            self.profile, self.down_kbps, self.time_scale
        );
        for t in &self.transfers {
            s.push_str(&format!(
                "| {} | {} | {:.1} | {:.1} % | {:.0} ms ({:.1} KB) | {:.0} ms | {} |\n",
                t.transport.name(),
                t.bytes,
                t.seconds,
                100.0 * t.goodput_share,
                t.queue_mean_ms,
                t.queue_mean_bytes / 1000.0,
                t.queue_max_ms,
                t.dropped_packets
            ));
        }
        if !self.small.is_empty() {
            s.push_str("\n| transport | small request idle | beside the bulk transfer | ratio |\n|---|---|---|---|\n");
            for m in &self.small {
                s.push_str(&format!(
                    "| {} | {:.0} ms | {:.0} ms | {:.1}x |\n",
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

/// The sender's side: for each request (an 8-byte big-endian size), that many bytes.
async fn quic_sender(endpoint: quinn::Endpoint) {
    while let Some(incoming) = endpoint.accept().await {
        tokio::spawn(async move {
            let Ok(conn) = incoming.await else { return };
            while let Ok((mut send, mut recv)) = conn.accept_bi().await {
                tokio::spawn(async move {
                    let mut size = [0u8; 8];
                    if recv.read_exact(&mut size).await.is_err() {
                        return;
                    }
                    let _ = send_bytes_quic(&mut send, u64::from_be_bytes(size)).await;
                    let _ = send.finish();
                    // Keep the stream until the peer has everything.
                    let _ = send.stopped().await;
                });
            }
        });
    }
}

async fn send_bytes_quic(send: &mut quinn::SendStream, n: u64) -> std::io::Result<()> {
    let chunk = vec![0x5au8; 16 * 1024];
    let mut left = n;
    while left > 0 {
        let k = left.min(chunk.len() as u64) as usize;
        send.write_all(&chunk[..k])
            .await
            .map_err(std::io::Error::other)?;
        left -= k as u64;
    }
    Ok(())
}

async fn tcp_sender(listener: TcpListener, congestion: &'static str) {
    loop {
        let Ok((mut s, _)) = listener.accept().await else {
            return;
        };
        set_tcp_congestion(&s, congestion);
        tokio::spawn(async move {
            let mut size = [0u8; 8];
            if s.read_exact(&mut size).await.is_err() {
                return;
            }
            let chunk = vec![0x5au8; 16 * 1024];
            let mut left = u64::from_be_bytes(size);
            while left > 0 {
                let k = left.min(chunk.len() as u64) as usize;
                if s.write_all(&chunk[..k]).await.is_err() {
                    return;
                }
                left -= k as u64;
            }
            let _ = s.shutdown().await;
        });
    }
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

/// The receiver's side of one request: connect (cold), ask for `n` bytes, read them all.
async fn quic_fetch(
    edge: SocketAddr,
    config: quinn::ClientConfig,
    n: u64,
) -> std::result::Result<Duration, String> {
    let t0 = Instant::now();
    let endpoint =
        quinn::Endpoint::client((Ipv4Addr::UNSPECIFIED, 0).into()).map_err(|e| e.to_string())?;
    let conn = webpep_transport::connect(&endpoint, edge, config)
        .await
        .map_err(|e| e.to_string())?;
    quic_get(&conn, n).await?;
    let took = t0.elapsed();
    conn.close(0u32.into(), b"done");
    endpoint.wait_idle().await;
    Ok(took)
}

async fn quic_get(conn: &quinn::Connection, n: u64) -> std::result::Result<(), String> {
    let (mut send, mut recv) = conn.open_bi().await.map_err(|e| e.to_string())?;
    send.write_all(&n.to_be_bytes())
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

/// The small request while a bulk transfer runs: issued once a quarter of the bulk arrived.
async fn small_beside_bulk(
    edge_quic: SocketAddr,
    edge_tcp: SocketAddr,
    config: Option<quinn::ClientConfig>,
    bulk: u64,
    small: u64,
) -> std::result::Result<(Duration, Duration), String> {
    if let Some(config) = config {
        let endpoint = quinn::Endpoint::client((Ipv4Addr::UNSPECIFIED, 0).into())
            .map_err(|e| e.to_string())?;
        let conn = webpep_transport::connect(&endpoint, edge_quic, config)
            .await
            .map_err(|e| e.to_string())?;
        // Idle: the connection is up and quiet.
        let t0 = Instant::now();
        quic_get(&conn, small).await?;
        let idle = t0.elapsed();
        let (mut send, mut recv) = conn.open_bi().await.map_err(|e| e.to_string())?;
        send.write_all(&bulk.to_be_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let _ = send.finish();
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
            quic_get(&small_conn, small).await.map(|()| t1.elapsed())
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
        let mut s = TcpStream::connect(edge_tcp)
            .await
            .map_err(|e| e.to_string())?;
        s.write_all(&bulk.to_be_bytes())
            .await
            .map_err(|e| e.to_string())?;
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
        Ok((idle, beside?))
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
        // A fresh link (and namespaces) per transport: no state carried between them.
        let mut cfg = TopologyConfig::new(opts.profile.clone(), Vec::new());
        cfg.time_scale = k;
        cfg.seed = opts.seed;
        let topo = Topology::build(&cfg)?;
        let edge_ip = topo.edge_addr();
        let edge_quic = SocketAddr::from((edge_ip, QUIC_PORT));
        let edge_tcp = SocketAddr::from((edge_ip, TCP_PORT));
        let settings = TransportSettings {
            congestion: t
                .quic_controller()
                .unwrap_or_else(|| webpep_transport::Congestion::LinkAware(Default::default())),
            ..TransportSettings::default()
        };
        let server_cfg = server_config(&identity, identity.revocations(), &settings)
            .map_err(|e| LabError::Other(format!("server config: {e}")))?;
        let congestion = t.tcp_congestion();
        let _sender = NsService::start(&topo.edge, &format!("sender-{}", t.name()), move || {
            let quic =
                quinn::Endpoint::server(server_cfg, (Ipv4Addr::UNSPECIFIED, QUIC_PORT).into())
                    .map_err(|e| format!("QUIC listen: {e}"))?;
            let tcp = std::net::TcpListener::bind((Ipv4Addr::UNSPECIFIED, TCP_PORT))
                .and_then(|l| {
                    l.set_nonblocking(true)?;
                    TcpListener::from_std(l)
                })
                .map_err(|e| format!("TCP listen: {e}"))?;
            Ok(async move {
                tokio::join!(
                    quic_sender(quic),
                    tcp_sender(tcp, congestion.unwrap_or("cubic"))
                );
            })
        })?;
        let client_cfg = if t.quic_controller().is_some() {
            Some(
                client_config(&credential, &settings)
                    .map_err(|e| LabError::Other(format!("client config: {e}")))?,
            )
        } else {
            None
        };
        for &n in &opts.sizes {
            let before = topo.air.counters_now();
            let cc = client_cfg.clone();
            let took = run_in(&topo.ue, move || async move {
                match cc {
                    Some(cc) => quic_fetch(edge_quic, cc, n).await,
                    None => tcp_get(edge_tcp, n).await,
                }
            })?
            .map_err(|e| LabError::Other(format!("{} {n} B: {e}", t.name())))?;
            let after = topo.air.counters_now();
            let seconds = took.as_secs_f64() * k;
            let (queue_mean_ms, queue_max_ms, queue_mean_bytes, dropped) =
                queue_during(&before, &after, k, rate_bps);
            report.transfers.push(Transfer {
                transport: t,
                bytes: n,
                seconds,
                goodput_share: n as f64 * 8.0 / seconds / rate_bps,
                queue_mean_ms,
                queue_max_ms,
                queue_mean_bytes,
                dropped_packets: dropped,
            });
            eprintln!("{} {n} B: {seconds:.1} s", t.name());
        }
        if opts.bulk_bytes > 0 {
            let cc = client_cfg.clone();
            let (bulk, small) = (opts.bulk_bytes, opts.small_bytes);
            let (idle, beside) = run_in(&topo.ue, move || async move {
                small_beside_bulk(edge_quic, edge_tcp, cc, bulk, small).await
            })?
            .map_err(|e| LabError::Other(format!("{} small beside bulk: {e}", t.name())))?;
            let (idle_ms, beside_ms) = (
                idle.as_secs_f64() * 1000.0 * k,
                beside.as_secs_f64() * 1000.0 * k,
            );
            report.small.push(SmallBeside {
                transport: t,
                idle_ms,
                beside_bulk_ms: beside_ms,
                ratio: beside_ms / idle_ms.max(1e-9),
            });
            eprintln!(
                "{} small request: idle {idle_ms:.0} ms, beside the bulk {beside_ms:.0} ms",
                t.name()
            );
        }
    }
    Ok(report)
}
