//! `webpep link probe`: measures an emulated link with real traffic through it, and the small
//! traffic tools the namespace tests share (a UDP echo "ping", a TCP bulk server and client).
//!
//! Everything runs over real sockets in the link's two namespaces; times are measured on the
//! wall clock and multiplied by the time scale, so every figure is what the real link would
//! show.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use serde::Serialize;
use webpep_link_model::ResolvedProfile;

use crate::netns::NetNs;
use crate::shell::{LinkShell, RunningLink};
use crate::{Error, IoContext, Result};

/// UDP port of the echo server, TCP port of the bulk server (in the outer namespace).
pub const ECHO_PORT: u16 = 7007;
pub const BULK_PORT: u16 = 7008;
/// The bulk senders' congestion control unless told otherwise: Linux's usual default.
pub const DEFAULT_CONGESTION: &str = "cubic";
/// Payload of a ping datagram: 64 bytes, as `ping` sends (92 bytes on the wire).
pub const PING_PAYLOAD: usize = 64;

/// What to measure.
#[derive(Clone, Debug)]
pub struct ProbeOptions {
    pub time_scale: f64,
    pub seed: u64,
    /// Pings one (unscaled) second apart.
    pub ping_count: usize,
    /// Idle gaps (unscaled seconds) before a ping, for the idle-RTT curve.
    pub idle_gaps_s: Vec<f64>,
    pub idle_samples: usize,
    /// TCP download sizes, bytes.
    pub bulk_sizes: Vec<u64>,
    /// Congestion control of the bulk sender.
    pub congestion: String,
}

impl Default for ProbeOptions {
    fn default() -> Self {
        ProbeOptions {
            time_scale: 1.0,
            seed: 1,
            ping_count: 20,
            idle_gaps_s: (1..=10).map(|s| s as f64).collect(),
            idle_samples: 3,
            bulk_sizes: vec![1024, 5120, 10240, 51200, 102400, 1048576],
            congestion: DEFAULT_CONGESTION.into(),
        }
    }
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Percentiles {
    pub p10: f64,
    pub median: f64,
    pub p90: f64,
    pub max: f64,
}

impl Percentiles {
    /// Nearest-rank percentiles of `v` (empty → all NaN, serialized as null).
    pub fn of(v: &[f64]) -> Percentiles {
        let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
        s.sort_by(f64::total_cmp);
        let at = |q: f64| {
            if s.is_empty() {
                f64::NAN
            } else {
                s[((q * s.len() as f64).ceil() as usize).clamp(1, s.len()) - 1]
            }
        };
        Percentiles {
            p10: at(0.10),
            median: at(0.50),
            p90: at(0.90),
            max: s.last().copied().unwrap_or(f64::NAN),
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct IdleRtt {
    pub idle_s: f64,
    pub median_rtt_ms: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct BulkResult {
    pub bytes: u64,
    /// Application bytes ÷ (request sent → last byte received), kbit/s, unscaled.
    pub kbps: f64,
    /// IP bytes the emulator delivered downstream during the transfer ÷ the same time.
    pub wire_kbps: f64,
    pub seconds: f64,
}

/// The probe's JSON object.
#[derive(Clone, Debug, Serialize)]
pub struct ProbeReport {
    pub profile: String,
    pub time_scale: f64,
    pub seed: u64,
    pub down_kbps_configured: f64,
    pub up_kbps_configured: f64,
    pub rtt_ms_configured: f64,
    pub reacquire_rtt_ms_configured: f64,
    pub ping_rtt_ms: Percentiles,
    pub ping_lost: usize,
    pub idle_rtt: Vec<IdleRtt>,
    pub tcp_bulk: Vec<BulkResult>,
}

/// A UDP echo server in a namespace, stopped on drop.
pub struct EchoServer {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    pub addr: SocketAddr,
}

impl EchoServer {
    pub fn start(ns: &NetNs, addr: SocketAddr) -> Result<EchoServer> {
        let sock = ns
            .run(move || UdpSocket::bind(addr))?
            .ctx(|| format!("bind udp {addr}"))?;
        sock.set_read_timeout(Some(Duration::from_millis(50)))
            .ctx(|| "udp timeout")?;
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = thread::spawn(move || {
            let mut buf = [0u8; 2048];
            while !s.load(Ordering::Relaxed) {
                if let Ok((n, from)) = sock.recv_from(&mut buf) {
                    let _ = sock.send_to(&buf[..n], from);
                }
            }
        });
        Ok(EchoServer {
            stop,
            thread: Some(thread),
            addr,
        })
    }
}

impl Drop for EchoServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A TCP server that answers an 8-byte big-endian count N with N bytes, then closes.
pub struct BulkServer {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    pub addr: SocketAddr,
}

/// Sets the socket's congestion control (TCP_CONGESTION), e.g. "cubic", "reno", "bbr".
pub fn set_congestion_control(s: &TcpStream, name: &str) -> Result<()> {
    // SAFETY: a valid socket fd and a byte string of the given length.
    let r = unsafe {
        libc::setsockopt(
            std::os::fd::AsRawFd::as_raw_fd(s),
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            name.as_ptr().cast(),
            name.len() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(Error::io(
            format!("congestion control {name:?} (see net.ipv4.tcp_available_congestion_control)"),
            std::io::Error::last_os_error(),
        ));
    }
    Ok(())
}

fn serve_bulk(mut s: TcpStream, stop: &AtomicBool, congestion: &str) {
    if let Err(e) = set_congestion_control(&s, congestion) {
        tracing::warn!("bulk server: {e}");
    }
    let _ = s.set_read_timeout(Some(Duration::from_secs(600)));
    let mut req = [0u8; 8];
    if s.read_exact(&mut req).is_err() {
        return;
    }
    let mut left = u64::from_be_bytes(req);
    // Text-like but not trivially compressible content (nothing compresses on this path anyway).
    let chunk: Vec<u8> = (0..16384u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 24) as u8)
        .collect();
    while left > 0 && !stop.load(Ordering::Relaxed) {
        let n = left.min(chunk.len() as u64) as usize;
        if s.write_all(&chunk[..n]).is_err() {
            return;
        }
        left -= n as u64;
    }
    let _ = s.shutdown(std::net::Shutdown::Write);
    // Wait (briefly) for the client to close so the FIN is not followed by an RST.
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let mut sink = [0u8; 64];
    let _ = s.read(&mut sink);
}

impl BulkServer {
    /// `congestion`: the senders' congestion control (the kernel's choice of a new namespace
    /// may be BBR, which never fills a drop-tail queue; the papers' TCP was loss-based).
    pub fn start(ns: &NetNs, addr: SocketAddr, congestion: &str) -> Result<BulkServer> {
        let congestion: Arc<str> = congestion.into();
        let listener = ns
            .run(move || TcpListener::bind(addr))?
            .ctx(|| format!("bind tcp {addr}"))?;
        listener.set_nonblocking(true).ctx(|| "nonblocking")?;
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = thread::spawn(move || {
            let mut workers = Vec::new();
            while !s.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((conn, _)) => {
                        let _ = conn.set_nonblocking(false);
                        let s2 = s.clone();
                        let cc = congestion.clone();
                        workers.push(thread::spawn(move || serve_bulk(conn, &s2, &cc)));
                    }
                    Err(_) => thread::sleep(Duration::from_millis(5)),
                }
            }
            for w in workers {
                let _ = w.join();
            }
        });
        Ok(BulkServer {
            stop,
            thread: Some(thread),
            addr,
        })
    }
}

impl Drop for BulkServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A UDP "ping" client bound in a namespace.
pub struct Pinger {
    sock: UdpSocket,
    seq: u64,
}

impl Pinger {
    pub fn new(ns: &NetNs, server: SocketAddr) -> Result<Pinger> {
        let sock = ns
            .run(|| UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)))?
            .ctx(|| "bind ping socket")?;
        sock.connect(server).ctx(|| format!("connect {server}"))?;
        Ok(Pinger { sock, seq: 0 })
    }

    /// One ping; the wall-clock RTT, or None when no answer came within `timeout`.
    pub fn ping(&mut self, timeout: Duration) -> Result<Option<Duration>> {
        self.seq += 1;
        let mut msg = [0u8; PING_PAYLOAD];
        msg[..8].copy_from_slice(&self.seq.to_be_bytes());
        let start = Instant::now();
        self.sock.send(&msg).ctx(|| "send ping")?;
        let mut buf = [0u8; 2048];
        loop {
            let left = timeout.saturating_sub(start.elapsed());
            if left.is_zero() {
                return Ok(None);
            }
            self.sock
                .set_read_timeout(Some(left))
                .ctx(|| "ping timeout")?;
            match self.sock.recv(&mut buf) {
                Ok(n) if n >= 8 && buf[..8] == self.seq.to_be_bytes() => {
                    return Ok(Some(start.elapsed()))
                }
                Ok(_) => continue, // a late answer to an earlier ping
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        || e.kind() == std::io::ErrorKind::TimedOut =>
                {
                    return Ok(None)
                }
                Err(e) => return Err(Error::io("receive ping", e)),
            }
        }
    }
}

/// Connects from `ns` to a [`BulkServer`] at `server`. With `rcvbuf`, the receive buffer is
/// fixed before the handshake (so the window scale allows it), which turns off the kernel's
/// receive-window autotuning: the sender is then limited by the network, not by the receiver
/// (as the bulk downloads of 001 §4 that fill the GPRS queue).
pub fn connect(
    ns: &NetNs,
    server: SocketAddr,
    timeout: Duration,
    rcvbuf: Option<usize>,
) -> Result<TcpStream> {
    ns.run(move || -> std::io::Result<TcpStream> {
        let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
        if let Some(n) = rcvbuf {
            // Root may exceed net.core.rmem_max; otherwise the kernel caps the value.
            let v = n.min(i32::MAX as usize) as libc::c_int;
            // SAFETY: a valid socket fd and a c_int option value of the right size.
            let forced = unsafe {
                libc::setsockopt(
                    std::os::fd::AsRawFd::as_raw_fd(&sock),
                    libc::SOL_SOCKET,
                    libc::SO_RCVBUFFORCE,
                    (&v as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                )
            };
            if forced != 0 {
                sock.set_recv_buffer_size(n)?;
            }
        }
        sock.connect_timeout(&server.into(), timeout)?;
        Ok(sock.into())
    })?
    .ctx(|| format!("connect {server}"))
}

/// Asks for `bytes` on a connected stream and reads them; returns the wall time from the
/// request to the last byte.
pub fn download(stream: &mut TcpStream, bytes: u64, timeout: Duration) -> Result<Duration> {
    stream.set_read_timeout(Some(timeout)).ctx(|| "timeout")?;
    let start = Instant::now();
    stream
        .write_all(&bytes.to_be_bytes())
        .ctx(|| "send request")?;
    let mut got = 0u64;
    let mut buf = vec![0u8; 65536];
    while got < bytes {
        let n = stream
            .read(&mut buf)
            .ctx(|| format!("download: {got} of {bytes} bytes received"))?;
        if n == 0 {
            return Err(Error::Other(format!(
                "download: connection closed after {got} of {bytes} bytes"
            )));
        }
        got += n as u64;
    }
    Ok(start.elapsed())
}

/// A link with an echo and a bulk server on its outer side: what the probe and the namespace
/// tests stand on.
pub struct ProbeBed {
    // Field order is drop order: the servers stop before the link they talk over.
    pub echo: EchoServer,
    pub bulk: BulkServer,
    pub link: RunningLink,
    pub time_scale: f64,
}

impl ProbeBed {
    /// Builds the link between two fresh namespaces and starts the servers (bulk senders use
    /// [`DEFAULT_CONGESTION`]).
    pub fn start(profile: &ResolvedProfile, time_scale: f64, seed: u64) -> Result<ProbeBed> {
        Self::start_with(profile, time_scale, seed, DEFAULT_CONGESTION)
    }

    pub fn start_with(
        profile: &ResolvedProfile,
        time_scale: f64,
        seed: u64,
        congestion: &str,
    ) -> Result<ProbeBed> {
        let outer = NetNs::new()?;
        let link = LinkShell::new(profile.clone())
            .time_scale(time_scale)
            .seed(seed)
            .start(outer)?;
        let ip = link.outer_addr();
        let echo = EchoServer::start(link.outer(), SocketAddr::from((ip, ECHO_PORT)))?;
        let bulk = BulkServer::start(link.outer(), SocketAddr::from((ip, BULK_PORT)), congestion)?;
        Ok(ProbeBed {
            link,
            echo,
            bulk,
            time_scale,
        })
    }

    /// Wall-clock duration of `unscaled_s` seconds of link time.
    pub fn scaled(&self, unscaled_s: f64) -> Duration {
        Duration::from_secs_f64(unscaled_s / self.time_scale)
    }

    /// Unscaled milliseconds of a wall-clock duration.
    pub fn unscaled_ms(&self, d: Duration) -> f64 {
        d.as_secs_f64() * 1000.0 * self.time_scale
    }

    pub fn pinger(&self) -> Result<Pinger> {
        Pinger::new(self.link.inner(), self.echo.addr)
    }

    /// Pings `count` times, `interval_s` (unscaled) apart; unscaled RTTs in ms and losses.
    pub fn ping_series(&self, count: usize, interval_s: f64) -> Result<(Vec<f64>, usize)> {
        let mut p = self.pinger()?;
        let timeout = self.scaled(15.0);
        // Acquire the channel first: the first packet of a run pays the re-acquisition.
        let _ = p.ping(timeout)?;
        let mut rtts = Vec::new();
        let mut lost = 0;
        for _ in 0..count {
            thread::sleep(self.scaled(interval_s));
            match p.ping(timeout)? {
                Some(d) => rtts.push(self.unscaled_ms(d)),
                None => lost += 1,
            }
        }
        Ok((rtts, lost))
    }

    /// Median RTT of pings sent after `idle_s` (unscaled) of silence.
    pub fn idle_rtt(&self, idle_s: f64, samples: usize) -> Result<f64> {
        let mut p = self.pinger()?;
        let timeout = self.scaled(15.0);
        let _ = p.ping(timeout)?;
        let mut rtts = Vec::new();
        for _ in 0..samples {
            thread::sleep(self.scaled(idle_s));
            if let Some(d) = p.ping(timeout)? {
                rtts.push(self.unscaled_ms(d));
            }
        }
        Ok(Percentiles::of(&rtts).median)
    }

    /// Downloads `bytes` over a fresh TCP connection (connection set-up not timed).
    pub fn bulk(&self, bytes: u64) -> Result<BulkResult> {
        self.bulk_with(bytes, None)
    }

    /// As [`bulk`](Self::bulk), with a fixed receive buffer (see [`connect`]).
    pub fn bulk_with(&self, bytes: u64, rcvbuf: Option<usize>) -> Result<BulkResult> {
        let mut s = connect(self.link.inner(), self.bulk.addr, self.scaled(60.0), rcvbuf)?;
        let before = self.link.counters().down.delivered_bytes;
        // Generous: 1 MB at 9.6 kbps is ~15 minutes of link time.
        let d = download(&mut s, bytes, self.scaled(3600.0))?;
        let after = self.link.counters_now().down.delivered_bytes;
        let secs = d.as_secs_f64() * self.time_scale;
        Ok(BulkResult {
            bytes,
            kbps: bytes as f64 * 8.0 / secs / 1000.0,
            wire_kbps: (after - before) as f64 * 8.0 / secs / 1000.0,
            seconds: secs,
        })
    }
}

/// Runs the whole probe.
/// What the probe is doing, for a progress display: step `step` of `steps`, and the
/// estimated seconds (wall clock) of the whole probe and of what is left.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeProgress {
    /// What this step measures.
    pub what: String,
    /// 1-based.
    pub step: usize,
    /// Steps in all.
    pub steps: usize,
    /// Estimated wall-clock seconds of the steps still to run, this one included.
    pub left_s: f64,
}

/// The steps of a probe and the estimated wall-clock seconds of each, from the profile alone:
/// pings one second apart, idle gaps with their pings, and downloads at the link's rate, all
/// divided by the time scale. An estimate (losses, outages and slow start make it longer),
/// not a bound.
pub fn probe_plan(profile: &ResolvedProfile, opts: &ProbeOptions) -> Vec<(String, f64)> {
    let rtt_s = profile.rtt_ms() / 1000.0;
    let reacquired_s = rtt_s + profile.reacquire_rtt_ms() / 1000.0;
    // The first ping of each step acquires the channel.
    let first = reacquired_s;
    let k = opts.time_scale;
    let mut plan = vec![(
        format!("{} pings", opts.ping_count),
        (first + opts.ping_count as f64 * (1.0 + rtt_s)) / k,
    )];
    for &g in &opts.idle_gaps_s {
        let released = profile
            .release_after_idle_ms()
            .is_some_and(|r| g * 1000.0 >= r);
        let rtt = if released { reacquired_s } else { rtt_s };
        plan.push((
            format!("RTT after {g} s idle"),
            (first + opts.idle_samples as f64 * (g + rtt)) / k,
        ));
    }
    for &b in &opts.bulk_sizes {
        let transfer = b as f64 * 8.0 / (profile.down_kbps() * 1000.0);
        // Connection set-up and slow start: a few round trips.
        plan.push((
            format!("TCP download of {b} B"),
            (transfer + 4.0 * rtt_s) / k,
        ));
    }
    plan
}

/// Runs the probe: pings, RTT after idle gaps, TCP downloads.
pub fn probe(profile: &ResolvedProfile, opts: &ProbeOptions) -> Result<ProbeReport> {
    probe_with_progress(profile, opts, &mut |_| {})
}

/// [`probe`], telling `progress` of each step as it starts.
pub fn probe_with_progress(
    profile: &ResolvedProfile,
    opts: &ProbeOptions,
    progress: &mut dyn FnMut(ProbeProgress),
) -> Result<ProbeReport> {
    let plan = probe_plan(profile, opts);
    let steps = plan.len();
    let mut step = 0;
    let mut tell = |progress: &mut dyn FnMut(ProbeProgress)| {
        let left_s = plan[step..].iter().map(|(_, s)| s).sum();
        progress(ProbeProgress {
            what: plan[step].0.clone(),
            step: step + 1,
            steps,
            left_s,
        });
        step += 1;
    };
    let bed = ProbeBed::start_with(profile, opts.time_scale, opts.seed, &opts.congestion)?;
    tell(progress);
    let (rtts, ping_lost) = bed.ping_series(opts.ping_count, 1.0)?;
    let mut idle_rtt = Vec::new();
    for &g in &opts.idle_gaps_s {
        tell(progress);
        idle_rtt.push(IdleRtt {
            idle_s: g,
            median_rtt_ms: bed.idle_rtt(g, opts.idle_samples)?,
        });
    }
    let mut tcp_bulk = Vec::new();
    for &b in &opts.bulk_sizes {
        tell(progress);
        tcp_bulk.push(bed.bulk(b)?);
    }
    Ok(ProbeReport {
        profile: profile.profile.name.clone(),
        time_scale: opts.time_scale,
        seed: opts.seed,
        down_kbps_configured: profile.down_kbps(),
        up_kbps_configured: profile.up_kbps(),
        rtt_ms_configured: profile.rtt_ms(),
        reacquire_rtt_ms_configured: profile.reacquire_rtt_ms(),
        ping_rtt_ms: Percentiles::of(&rtts),
        ping_lost,
        idle_rtt,
        tcp_bulk,
    })
}

impl ProbeReport {
    /// A human-readable rendering.
    pub fn to_text(&self) -> String {
        let mut s = format!(
            "profile {} (time scale {}, seed {})\n  configured: down {:.1} kbps, up {:.1} kbps, RTT {:.0} ms\n",
            self.profile,
            self.time_scale,
            self.seed,
            self.down_kbps_configured,
            self.up_kbps_configured,
            self.rtt_ms_configured
        );
        let p = &self.ping_rtt_ms;
        s += &format!(
            "  ping RTT ms: p10 {:.0}, median {:.0}, p90 {:.0}, max {:.0} ({} lost)\n  RTT after idle:",
            p.p10, p.median, p.p90, p.max, self.ping_lost
        );
        for i in &self.idle_rtt {
            s += &format!(" {}s→{:.0}ms", i.idle_s, i.median_rtt_ms);
        }
        s += "\n  TCP download:";
        for b in &self.tcp_bulk {
            s += &format!(" {}B→{:.1}kbps", b.bytes, b.kbps);
        }
        s.push('\n');
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_lists_every_step_and_scales_with_the_time_scale() {
        let gprs = webpep_link_model::presets::preset("gprs", None)
            .and_then(|p| p.resolve(None))
            .expect("gprs");
        let opts = ProbeOptions::default();
        let plan = probe_plan(&gprs, &opts);
        assert_eq!(
            plan.len(),
            1 + opts.idle_gaps_s.len() + opts.bulk_sizes.len()
        );
        let total: f64 = plan.iter().map(|(_, s)| s).sum();
        // 20 pings 1 s apart, 10 idle gaps of 1..10 s × 3 samples, 1.2 MB at ~40 kbit/s.
        assert!(total > 20.0 + 165.0 + 200.0, "{total}");
        let fast = probe_plan(
            &gprs,
            &ProbeOptions {
                time_scale: 10.0,
                ..ProbeOptions::default()
            },
        );
        let fast_total: f64 = fast.iter().map(|(_, s)| s).sum();
        assert!((fast_total * 10.0 - total).abs() < 1e-6);
    }
}
