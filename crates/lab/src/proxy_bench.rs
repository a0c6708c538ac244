//! `webpep lab proxy-bench`: cache-hit throughput and idle-connection memory of webpep's edge
//! proxy, of the dual proxy and of Squid side by side in one run, on loopback (issues 4, 34).
//!
//! A small origin serves N cacheable objects of a fixed size; each subject runs as its own
//! processes and is warmed with every object: `webpep` is `webpep server` (its HTTP/1 front
//! end), `webpep-dual` is `webpep client` in front of another `webpep server` with its QUIC
//! front end on (every request crosses QUIC and is a cache hit at the edge), `squid` is
//! Squid from Debian. A load generator then keeps `connections` keep-alive connections busy
//! for a fixed time with absolute-URI GETs (cache hits), alternating subjects round by round
//! so machine noise falls on all. Memory: resident set of the process the browsers connect to
//! (for the dual proxy, the client proxy; its edge's is reported beside it) before and while
//! it holds `idle` keep-alive client connections that have each made one request.

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::{LabError, Result};

/// What is measured: the proxy (or chain of proxies) the load generator talks to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Subject {
    /// `webpep server`, its HTTP/1 front end.
    Webpep,
    /// `webpep client` → QUIC → `webpep server --quic-listen`.
    WebpepDual,
    /// Squid, memory cache.
    Squid,
}

impl Subject {
    pub const ALL: [Subject; 3] = [Subject::Webpep, Subject::WebpepDual, Subject::Squid];

    pub fn name(self) -> &'static str {
        match self {
            Subject::Webpep => "webpep",
            Subject::WebpepDual => "webpep-dual",
            Subject::Squid => "squid",
        }
    }
}

impl fmt::Display for Subject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Subject {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match Subject::ALL.into_iter().find(|t| t.name() == s) {
            Some(t) => Ok(t),
            None => Err(format!(
                "unknown subject {s:?} (webpep, webpep-dual, squid)"
            )),
        }
    }
}

/// What to measure.
#[derive(Clone, Debug)]
pub struct BenchOptions {
    pub connections: usize,
    pub seconds: f64,
    pub object_bytes: usize,
    pub objects: usize,
    pub idle: usize,
    pub rounds: usize,
    /// The `webpep` binary (normally the running one).
    pub webpep: PathBuf,
    /// Squid's binary; needed when `subjects` names Squid.
    pub squid: Option<PathBuf>,
    /// The subjects, in the order they take turns within a round.
    pub subjects: Vec<Subject>,
    pub work_dir: PathBuf,
}

/// A process's resident memory before and while the idle client connections are held.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Memory {
    pub rss_base_kib: u64,
    pub rss_idle_kib: u64,
    /// Resident memory growth per idle keep-alive client connection.
    pub kib_per_idle_conn: f64,
}

/// One proxy's figures.
#[derive(Clone, Debug, Serialize)]
pub struct ProxyFigures {
    pub proxy: String,
    /// Requests per second of each round.
    pub rps: Vec<f64>,
    pub errors: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// The process the load generator connects to (for `webpep-dual`, the client proxy;
    /// for Squid, master and worker summed).
    #[serde(flatten)]
    pub memory: Memory,
    /// `webpep-dual`: the edge behind the client proxy, over the same idle period.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub edge_memory: Option<Memory>,
    pub idle_connections_held: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct BenchReport {
    pub connections: usize,
    pub seconds: f64,
    pub object_bytes: usize,
    pub objects: usize,
    pub proxies: Vec<ProxyFigures>,
}

impl BenchReport {
    pub fn table(&self) -> String {
        let mib = |k: u64| k as f64 / 1024.0;
        let mem = |m: &Memory| {
            format!(
                "{:>9.1} {:>9.1} {:>11.1}",
                mib(m.rss_base_kib),
                mib(m.rss_idle_kib),
                m.kib_per_idle_conn
            )
        };
        let mut t = format!(
            "Cache hits on loopback: {} connections, {} B objects ({} of them), {} s per round\n{:<12} {:>28} {:>8} {:>8} {:>8} {:>9} {:>9} {:>11}\n",
            self.connections, self.object_bytes, self.objects, self.seconds,
            "proxy", "requests/s per round", "p50 ms", "p99 ms", "errors", "RSS MiB", "idle MiB", "KiB/idle"
        );
        for p in &self.proxies {
            let r: Vec<String> = p.rps.iter().map(|r| format!("{r:.0}")).collect();
            t += &format!(
                "{:<12} {:>28} {:>8.2} {:>8.2} {:>8} {} ({} idle held)\n",
                p.proxy,
                r.join(" "),
                p.p50_ms,
                p.p99_ms,
                p.errors,
                mem(&p.memory),
                p.idle_connections_held
            );
            if let Some(e) = &p.edge_memory {
                t += &format!(
                    "{:<68} {}\n",
                    "  its edge (webpep server, QUIC front end)",
                    mem(e)
                );
            }
        }
        t += "RSS MiB: resident memory before the idle connections; idle MiB: while they are held (webpep-dual: the client proxy, its edge below it)\n";
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
        for (i, a) in self.proxies.iter().enumerate() {
            for b in &self.proxies[i + 1..] {
                t += &format!(
                    "{} / {} requests per second: {:.2}\n",
                    a.proxy,
                    b.proxy,
                    mean(&a.rps) / mean(&b.rps).max(1e-9)
                );
            }
        }
        t
    }
}

fn err(what: &str) -> impl Fn(std::io::Error) -> LabError + '_ {
    move |e| LabError::Other(format!("{what}: {e}"))
}

/// The origin: `GET /obj/<i>` → `object_bytes` bytes, cacheable for an hour.
async fn origin(listener: TcpListener, object_bytes: usize, served: Arc<AtomicU64>) {
    let body: Arc<Vec<u8>> = Arc::new((0..object_bytes).map(|i| b'a' + (i % 26) as u8).collect());
    loop {
        let Ok((mut s, _)) = listener.accept().await else {
            return;
        };
        let (body, served) = (body.clone(), served.clone());
        tokio::spawn(async move {
            let mut buf = Vec::with_capacity(4096);
            let mut chunk = [0u8; 4096];
            loop {
                let end = loop {
                    if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        break p + 4;
                    }
                    match s.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                };
                let head = String::from_utf8_lossy(&buf[..end]).to_string();
                buf.drain(..end);
                served.fetch_add(1, Ordering::Relaxed);
                let path = head.split_whitespace().nth(1).unwrap_or("/").to_string();
                let resp = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: {}\r\nCache-Control: max-age=3600\r\nETag: \"{}\"\r\nDate: {}\r\n\r\n",
                    body.len(),
                    path.len(),
                    httpdate::fmt_http_date(std::time::SystemTime::now())
                );
                if s.write_all(resp.as_bytes()).await.is_err() || s.write_all(&body).await.is_err()
                {
                    return;
                }
            }
        });
    }
}

/// Reads one response (Content-Length framed) from `s`; `buf` keeps leftover bytes.
async fn read_response(s: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<u16> {
    let mut chunk = [0u8; 16384];
    loop {
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut resp = httparse::Response::new(&mut headers);
        match resp.parse(buf) {
            Ok(httparse::Status::Complete(n)) => {
                let code = resp.code.unwrap_or(0);
                let len = resp
                    .headers
                    .iter()
                    .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                    .and_then(|h| std::str::from_utf8(h.value).ok())
                    .and_then(|v| v.trim().parse::<usize>().ok())
                    .ok_or_else(|| {
                        std::io::Error::new(std::io::ErrorKind::InvalidData, "no Content-Length")
                    })?;
                while buf.len() < n + len {
                    let r = s.read(&mut chunk).await?;
                    if r == 0 {
                        return Err(std::io::ErrorKind::UnexpectedEof.into());
                    }
                    buf.extend_from_slice(&chunk[..r]);
                }
                buf.drain(..n + len);
                return Ok(code);
            }
            Ok(httparse::Status::Partial) => {}
            Err(e) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    e.to_string(),
                ))
            }
        }
        let r = s.read(&mut chunk).await?;
        if r == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..r]);
    }
}

/// How long the load generator waits for one response before it counts an error.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);

/// [`read_response`] within [`RESPONSE_TIMEOUT`].
async fn read_response_within(s: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<u16> {
    tokio::time::timeout(RESPONSE_TIMEOUT, read_response(s, buf))
        .await
        .unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into()))
}

fn request(origin: SocketAddr, i: usize) -> Vec<u8> {
    format!("GET http://{origin}/obj/{i} HTTP/1.1\r\nHost: {origin}\r\nAccept: */*\r\n\r\n")
        .into_bytes()
}

/// Keeps `conns` connections busy for `secs`; returns (requests, errors, latencies in µs).
async fn hammer(
    proxy: SocketAddr,
    origin: SocketAddr,
    conns: usize,
    objects: usize,
    secs: f64,
) -> (u64, u64, Vec<u32>) {
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let mut tasks = Vec::new();
    for c in 0..conns {
        tasks.push(tokio::spawn(async move {
            let (mut ok, mut bad, mut lat) = (0u64, 0u64, Vec::new());
            let mut i = c;
            'outer: while Instant::now() < deadline {
                let Ok(mut s) = TcpStream::connect(proxy).await else {
                    bad += 1;
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                let _ = s.set_nodelay(true);
                let mut buf = Vec::new();
                while Instant::now() < deadline {
                    i = (i + 7) % objects;
                    let t = Instant::now();
                    if s.write_all(&request(origin, i)).await.is_err() {
                        bad += 1;
                        continue 'outer;
                    }
                    match read_response_within(&mut s, &mut buf).await {
                        Ok(200) => {
                            ok += 1;
                            lat.push(t.elapsed().as_micros().min(u32::MAX as u128) as u32);
                        }
                        Ok(_) => bad += 1,
                        Err(_) => {
                            bad += 1;
                            continue 'outer;
                        }
                    }
                }
            }
            (ok, bad, lat)
        }));
    }
    let (mut ok, mut bad, mut lat) = (0, 0, Vec::new());
    for t in tasks {
        if let Ok((o, b, l)) = t.await {
            ok += o;
            bad += b;
            lat.extend(l);
        }
    }
    (ok, bad, lat)
}

/// Opens `n` keep-alive connections that each make one request, and holds them.
async fn hold_idle(proxy: SocketAddr, origin: SocketAddr, n: usize) -> Vec<TcpStream> {
    let mut held = Vec::new();
    for i in 0..n {
        let Ok(mut s) = TcpStream::connect(proxy).await else {
            break;
        };
        let mut buf = Vec::new();
        if s.write_all(&request(origin, i % 16)).await.is_err() {
            break;
        }
        if read_response_within(&mut s, &mut buf).await.is_err() {
            break;
        }
        held.push(s);
    }
    held
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// Squid's resident set: the sum over its processes (a master and a worker).
fn rss_tree_kib(root: u32) -> u64 {
    let mut total = rss_kib(root);
    if let Ok(children) = std::fs::read_to_string(format!("/proc/{root}/task/{root}/children")) {
        for c in children
            .split_whitespace()
            .filter_map(|c| c.parse::<u32>().ok())
        {
            total += rss_tree_kib(c);
        }
    }
    total
}

/// A process the bench started; dropped: SIGTERM (Squid cleans up its pid file), then
/// SIGKILL after 5 s.
struct Proc {
    name: String,
    child: Child,
}

impl Proc {
    fn spawn(name: &str, cmd: &mut Command) -> Result<Proc> {
        let child = cmd
            .spawn()
            .map_err(|e| LabError::Other(format!("starting {name}: {e}")))?;
        Ok(Proc {
            name: name.into(),
            child,
        })
    }

    /// Waits until `addr` accepts TCP connections (10 s at most).
    async fn wait_listening(&mut self, addr: SocketAddr) -> Result<()> {
        for _ in 0..200 {
            if TcpStream::connect(addr).await.is_ok() {
                return Ok(());
            }
            if let Ok(Some(st)) = self.child.try_wait() {
                return Err(LabError::Other(format!("{} exited: {st}", self.name)));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(LabError::Other(format!(
            "{} did not start listening",
            self.name
        )))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        // SAFETY: a signal to our own child.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        for _ in 0..50 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A subject, running: where the load generator connects, the process there, and for the
/// dual proxy the edge behind it (dropped after the client proxy).
struct Running {
    subject: Subject,
    addr: SocketAddr,
    front: Proc,
    edge: Option<Proc>,
}

fn free_port() -> Result<SocketAddr> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(err("bind"))?;
    l.local_addr().map_err(err("bind"))
}

fn free_udp_port() -> Result<SocketAddr> {
    let s = std::net::UdpSocket::bind("127.0.0.1:0").map_err(err("bind"))?;
    s.local_addr().map_err(err("bind"))
}

/// `webpep` with the bench's environment: no access log, as Squid runs without one here (the
/// bench measures the proxy), warnings to our stderr.
fn webpep_cmd(opts: &BenchOptions) -> Command {
    let mut c = Command::new(&opts.webpep);
    c.env("WEBPEP_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    c
}

/// `webpep server` with the cache only, its cache and configuration in `dir`; with `quic`
/// (UDP address, state directory), its QUIC front end for client proxies too.
fn start_webpep(
    opts: &BenchOptions,
    dir: &Path,
    name: &str,
    quic: Option<(SocketAddr, &Path)>,
) -> Result<(Proc, SocketAddr)> {
    let addr = free_port()?;
    let cache = dir.join("webpep-cache");
    let _ = std::fs::remove_dir_all(&cache);
    let conf = dir.join("webpep-server.toml");
    std::fs::write(
        &conf,
        format!(
            "[acl]\nallow-clients = [\"127.0.0.0/8\"]\nallow-destinations = [\"127.0.0.0/8\"]\n\n[cache]\nenabled = true\ndir = \"{}\"\nmax-bytes = 268435456\n\n[compress]\nenabled = false\n\n[transcode]\nenabled = false\n\n# The benchmark is one client holding thousands of connections.\n[limits]\nmax-client-connections = 100000\nmax-connections = 100000\n",
            cache.display()
        ),
    )
    .map_err(err("webpep-server.toml"))?;
    let mut cmd = webpep_cmd(opts);
    cmd.arg("server")
        .arg("--config")
        .arg(&conf)
        .arg("--listen")
        .arg(addr.to_string());
    if let Some((udp, state)) = quic {
        cmd.arg("--quic-listen")
            .arg(udp.to_string())
            .arg("--quic-state-dir")
            .arg(state);
    }
    Ok((Proc::spawn(name, &mut cmd)?, addr))
}

/// The dual proxy: an edge with its QUIC front end, a credential enrolled there, and
/// `webpep client` with it; the load generator talks to the client's HTTP port.
async fn start_dual(opts: &BenchOptions, dir: &Path) -> Result<Running> {
    let ddir = dir.join("webpep-dual");
    let _ = std::fs::remove_dir_all(&ddir);
    std::fs::create_dir_all(&ddir).map_err(err("webpep-dual dir"))?;
    let state = ddir.join("edge-state");
    let cred = ddir.join("bench.credential");
    let enrolled = webpep_cmd(opts)
        .args(["server", "enroll", "bench", "--state-dir"])
        .arg(&state)
        .arg("--out")
        .arg(&cred)
        .status()
        .map_err(err("webpep server enroll"))?;
    if !enrolled.success() {
        return Err(LabError::Other(format!("webpep server enroll: {enrolled}")));
    }
    let quic = free_udp_port()?;
    let (mut edge, edge_addr) = start_webpep(
        opts,
        &ddir,
        "webpep server (dual edge)",
        Some((quic, &state)),
    )?;
    edge.wait_listening(edge_addr).await?;
    let addr = free_port()?;
    let mut cmd = webpep_cmd(opts);
    cmd.arg("client")
        .arg("--listen")
        .arg(addr.to_string())
        .arg("--server")
        .arg(quic.to_string())
        .arg("--credential")
        .arg(&cred);
    let front = Proc::spawn("webpep client", &mut cmd)?;
    Ok(Running {
        subject: Subject::WebpepDual,
        addr,
        front,
        edge: Some(edge),
    })
}

fn start_squid(squid: &Path, dir: &Path) -> Result<Running> {
    let addr = free_port()?;
    let sdir = dir.join("squid");
    let _ = std::fs::remove_dir_all(&sdir);
    std::fs::create_dir_all(&sdir).map_err(err("squid dir"))?;
    // Squid drops privileges to `proxy` when started as root: its files must be writable.
    let _ = Command::new("chown")
        .arg("-R")
        .arg("proxy")
        .arg(&sdir)
        .status();
    let conf = sdir.join("squid.conf");
    std::fs::write(
        &conf,
        format!(
            "http_port {addr}\n\
             http_access allow all\n\
             cache_mem 256 MB\n\
             maximum_object_size_in_memory 1 MB\n\
             memory_cache_mode always\n\
             refresh_pattern . 0 20% 4320\n\
             access_log none\n\
             cache_log {log}\n\
             cache_store_log none\n\
             pid_filename {pid}\n\
             coredump_dir {dir}\n\
             max_filedescriptors 8192\n\
             shutdown_lifetime 0 seconds\n\
             dns_v4_first on\n",
            log = sdir.join("cache.log").display(),
            pid = sdir.join("squid.pid").display(),
            dir = sdir.display(),
        ),
    )
    .map_err(err("squid.conf"))?;
    let mut cmd = Command::new(squid);
    cmd.arg("-N")
        .arg("-f")
        .arg(&conf)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    Ok(Running {
        subject: Subject::Squid,
        addr,
        front: Proc::spawn("squid", &mut cmd)?,
        edge: None,
    })
}

fn raise_fd_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain syscalls on a local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

/// Waits until `addr` answers a cache-able GET with 200 (10 s at most: the dual proxy's
/// first request waits for the QUIC handshake, and its edge may bind UDP a moment after TCP),
/// then warms it with every object twice (for Squid's refresh logic), checking each answer.
async fn warm(r: &Running, origin: SocketAddr, objects: usize) -> Result<()> {
    let name = r.subject.name();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let got = async {
            let mut s = TcpStream::connect(r.addr).await?;
            s.write_all(&request(origin, 0)).await?;
            read_response_within(&mut s, &mut Vec::new()).await
        };
        match got.await {
            Ok(200) => break,
            other if Instant::now() >= deadline => {
                return Err(LabError::Other(format!(
                    "{name}: no 200 for /obj/0 within 10 s (last: {other:?})"
                )))
            }
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    for _ in 0..2 {
        let mut s = TcpStream::connect(r.addr).await.map_err(err("warm"))?;
        let mut buf = Vec::new();
        for i in 0..objects {
            s.write_all(&request(origin, i))
                .await
                .map_err(err("warm"))?;
            let code = read_response_within(&mut s, &mut buf)
                .await
                .map_err(err("warm"))?;
            if code != 200 {
                return Err(LabError::Other(format!(
                    "{name}: warming /obj/{i} gave status {code}"
                )));
            }
        }
    }
    Ok(())
}

/// Resident memory of each process of `r` (front, then edge) before and while `idle`
/// keep-alive client connections are held at `r.addr`; returns them and how many were held.
async fn idle_memory(
    r: &Running,
    origin: SocketAddr,
    idle: usize,
) -> (Memory, Option<Memory>, usize) {
    tokio::time::sleep(Duration::from_millis(300)).await;
    let pids: Vec<u32> = std::iter::once(&r.front)
        .chain(&r.edge)
        .map(|p| p.child.id())
        .collect();
    let base: Vec<u64> = pids.iter().map(|&p| rss_tree_kib(p)).collect();
    let held = hold_idle(r.addr, origin, idle).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut mem = pids.iter().zip(base).map(|(&pid, base)| {
        let with = rss_tree_kib(pid);
        Memory {
            rss_base_kib: base,
            rss_idle_kib: with,
            kib_per_idle_conn: with.saturating_sub(base) as f64 / held.len().max(1) as f64,
        }
    });
    let front = mem.next().unwrap_or_default();
    (front, mem.next(), held.len())
}

/// Runs the benchmark.
pub fn run(opts: &BenchOptions) -> Result<BenchReport> {
    if opts.connections == 0 || opts.objects == 0 || opts.seconds <= 0.0 || opts.rounds == 0 {
        return Err(LabError::BadInput(
            "connections, objects, rounds and seconds must be positive".into(),
        ));
    }
    if opts.subjects.is_empty() {
        return Err(LabError::BadInput("no subject to measure".into()));
    }
    raise_fd_limit();
    std::fs::create_dir_all(&opts.work_dir).map_err(err("work dir"))?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(err("runtime"))?;
    rt.block_on(async {
        let listener = TcpListener::bind("127.0.0.1:0").await.map_err(err("origin"))?;
        let origin_addr = listener.local_addr().map_err(err("origin"))?;
        let served = Arc::new(AtomicU64::new(0));
        let origin_task = tokio::spawn(origin(listener, opts.object_bytes, served.clone()));

        // Every subject runs from the start, so that each is measured beside the others'
        // idle processes; dropping `running` ends them all, on an error too.
        let mut running: Vec<Running> = Vec::new();
        for &subject in &opts.subjects {
            let r = match subject {
                Subject::Webpep => {
                    let (front, addr) = start_webpep(opts, &opts.work_dir, "webpep server", None)?;
                    Running {
                        subject,
                        addr,
                        front,
                        edge: None,
                    }
                }
                Subject::WebpepDual => start_dual(opts, &opts.work_dir).await?,
                Subject::Squid => {
                    let squid = opts.squid.as_deref().ok_or_else(|| {
                        LabError::BadInput("the squid subject needs Squid's binary".into())
                    })?;
                    start_squid(squid, &opts.work_dir)?
                }
            };
            running.push(r);
        }
        let mut figures = Vec::new();
        for r in running.iter_mut() {
            r.front.wait_listening(r.addr).await?;
            warm(r, origin_addr, opts.objects).await?;
            figures.push(ProxyFigures {
                proxy: r.subject.name().into(),
                rps: Vec::new(),
                errors: 0,
                p50_ms: 0.0,
                p99_ms: 0.0,
                memory: Memory::default(),
                edge_memory: None,
                idle_connections_held: 0,
            });
        }
        let origin_before = served.load(Ordering::Relaxed);
        let mut lat_all: Vec<Vec<u32>> = vec![Vec::new(); running.len()];
        for _round in 0..opts.rounds {
            for (i, r) in running.iter().enumerate() {
                let (ok, bad, lat) =
                    hammer(r.addr, origin_addr, opts.connections, opts.objects, opts.seconds)
                        .await;
                figures[i].rps.push(ok as f64 / opts.seconds);
                figures[i].errors += bad;
                lat_all[i].extend(lat);
            }
        }
        let origin_during = served.load(Ordering::Relaxed) - origin_before;
        if origin_during > (opts.objects * running.len() * 2) as u64 {
            tracing::warn!("the origin served {origin_during} requests during the hit phase: not all were cache hits");
        }
        for (i, r) in running.iter().enumerate() {
            let l = &mut lat_all[i];
            l.sort_unstable();
            let q = |f: f64| {
                l.get(((l.len() as f64 - 1.0) * f) as usize)
                    .map(|v| *v as f64 / 1000.0)
                    .unwrap_or(0.0)
            };
            figures[i].p50_ms = q(0.5);
            figures[i].p99_ms = q(0.99);
            let (front, edge, held) = idle_memory(r, origin_addr, opts.idle).await;
            figures[i].memory = front;
            figures[i].edge_memory = edge;
            figures[i].idle_connections_held = held;
        }
        drop(running);
        origin_task.abort();
        Ok(BenchReport {
            connections: opts.connections,
            seconds: opts.seconds,
            object_bytes: opts.object_bytes,
            objects: opts.objects,
            proxies: figures,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_parse_by_name() {
        for s in Subject::ALL {
            assert_eq!(s.name().parse::<Subject>(), Ok(s));
        }
        assert!("dual"
            .parse::<Subject>()
            .unwrap_err()
            .contains("webpep-dual"));
    }

    #[test]
    fn the_table_shows_the_dual_proxys_edge_and_every_ratio() {
        let fig = |proxy: &str, rps: f64, edge: Option<Memory>| ProxyFigures {
            proxy: proxy.into(),
            rps: vec![rps],
            errors: 0,
            p50_ms: 1.0,
            p99_ms: 2.0,
            memory: Memory {
                rss_base_kib: 10240,
                rss_idle_kib: 20480,
                kib_per_idle_conn: 10.24,
            },
            edge_memory: edge,
            idle_connections_held: 1000,
        };
        let report = BenchReport {
            connections: 64,
            seconds: 1.0,
            object_bytes: 4096,
            objects: 100,
            proxies: vec![
                fig("webpep", 4000.0, None),
                fig("webpep-dual", 1000.0, Some(Memory::default())),
                fig("squid", 8000.0, None),
            ],
        };
        let t = report.table();
        assert!(t.contains("its edge"), "{t}");
        assert!(
            t.contains("webpep / webpep-dual requests per second: 4.00"),
            "{t}"
        );
        assert!(
            t.contains("webpep-dual / squid requests per second: 0.12"),
            "{t}"
        );
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["proxies"][0]["rss_idle_kib"], 20480);
        assert!(json["proxies"][0].get("edge_memory").is_none());
        assert!(json["proxies"][1]["edge_memory"].is_object());
    }
}
