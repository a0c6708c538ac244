//! `webpep lab proxy-bench`: cache-hit throughput and idle-connection memory of webpep's edge
//! proxy side by side with Squid in one run, on loopback (issue 4).
//!
//! A small origin serves N cacheable objects of a fixed size; each proxy runs as its own
//! process (webpep as `webpep server`, Squid from Debian) and is warmed with every object; a
//! load generator then keeps `connections` keep-alive connections busy for a fixed time with
//! absolute-URI GETs (cache hits), alternating proxies round by round so machine noise falls
//! on both. Memory: resident set growth of the proxy process while it holds `idle` keep-alive
//! client connections that have each made one request.

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
    /// Squid's binary; None: webpep alone.
    pub squid: Option<PathBuf>,
    pub work_dir: PathBuf,
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
    pub rss_base_kib: u64,
    pub rss_idle_kib: u64,
    /// Resident memory per idle keep-alive client connection.
    pub kib_per_idle_conn: f64,
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
        let mut t = format!(
            "Cache hits on loopback: {} connections, {} B objects ({} of them), {} s per round\n{:<8} {:>28} {:>8} {:>8} {:>8} {:>22}\n",
            self.connections, self.object_bytes, self.objects, self.seconds,
            "proxy", "requests/s per round", "p50 ms", "p99 ms", "errors", "KiB per idle conn"
        );
        for p in &self.proxies {
            let r: Vec<String> = p.rps.iter().map(|r| format!("{r:.0}")).collect();
            t += &format!(
                "{:<8} {:>28} {:>8.2} {:>8.2} {:>8} {:>13.1} ({} held)\n",
                p.proxy,
                r.join(" "),
                p.p50_ms,
                p.p99_ms,
                p.errors,
                p.kib_per_idle_conn,
                p.idle_connections_held
            );
        }
        if let [a, b] = &self.proxies[..] {
            let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
            t += &format!(
                "{} / {} requests per second: {:.2}\n",
                a.proxy,
                b.proxy,
                mean(&a.rps) / mean(&b.rps).max(1e-9)
            );
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
                    match read_response(&mut s, &mut buf).await {
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
        if read_response(&mut s, &mut buf).await.is_err() {
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

struct Proxy {
    name: String,
    child: Child,
    addr: SocketAddr,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        // SIGTERM first (Squid cleans up its pid file), then SIGKILL.
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

fn free_port() -> Result<SocketAddr> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(err("bind"))?;
    l.local_addr().map_err(err("bind"))
}

fn start_webpep(opts: &BenchOptions, dir: &Path) -> Result<Proxy> {
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
    let child = Command::new(&opts.webpep)
        .arg("server")
        .arg("--config")
        .arg(&conf)
        .arg("--listen")
        .arg(addr.to_string())
        // No access log, as Squid runs without one here: the bench measures the proxy.
        .env("WEBPEP_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(err("starting webpep server"))?;
    Ok(Proxy {
        name: "webpep".into(),
        child,
        addr,
    })
}

fn start_squid(squid: &Path, dir: &Path) -> Result<Proxy> {
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
    let child = Command::new(squid)
        .arg("-N")
        .arg("-f")
        .arg(&conf)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(err("starting squid"))?;
    Ok(Proxy {
        name: "squid".into(),
        child,
        addr,
    })
}

async fn wait_listening(p: &mut Proxy) -> Result<()> {
    for _ in 0..200 {
        if TcpStream::connect(p.addr).await.is_ok() {
            return Ok(());
        }
        if let Ok(Some(st)) = p.child.try_wait() {
            return Err(LabError::Other(format!("{} exited: {st}", p.name)));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err(LabError::Other(format!(
        "{} did not start listening",
        p.name
    )))
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

/// Runs the benchmark.
pub fn run(opts: &BenchOptions) -> Result<BenchReport> {
    if opts.connections == 0 || opts.objects == 0 || opts.seconds <= 0.0 || opts.rounds == 0 {
        return Err(LabError::BadInput(
            "connections, objects, rounds and seconds must be positive".into(),
        ));
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

        let mut proxies = vec![start_webpep(opts, &opts.work_dir)?];
        if let Some(sq) = &opts.squid {
            proxies.push(start_squid(sq, &opts.work_dir)?);
        }
        let mut figures = Vec::new();
        for p in proxies.iter_mut() {
            wait_listening(p).await?;
            // Warm: every object once (twice for Squid's refresh logic), then check hits.
            for _ in 0..2 {
                let mut s = TcpStream::connect(p.addr).await.map_err(err("warm"))?;
                let mut buf = Vec::new();
                for i in 0..opts.objects {
                    s.write_all(&request(origin_addr, i)).await.map_err(err("warm"))?;
                    let code = read_response(&mut s, &mut buf).await.map_err(err("warm"))?;
                    if code != 200 {
                        return Err(LabError::Other(format!(
                            "{}: warming /obj/{i} gave status {code}",
                            p.name
                        )));
                    }
                }
            }
            figures.push(ProxyFigures {
                proxy: p.name.clone(),
                rps: Vec::new(),
                errors: 0,
                p50_ms: 0.0,
                p99_ms: 0.0,
                rss_base_kib: 0,
                rss_idle_kib: 0,
                kib_per_idle_conn: 0.0,
                idle_connections_held: 0,
            });
        }
        let origin_before = served.load(Ordering::Relaxed);
        let mut lat_all: Vec<Vec<u32>> = vec![Vec::new(); proxies.len()];
        for _round in 0..opts.rounds {
            for (i, p) in proxies.iter().enumerate() {
                let (ok, bad, lat) =
                    hammer(p.addr, origin_addr, opts.connections, opts.objects, opts.seconds)
                        .await;
                figures[i].rps.push(ok as f64 / opts.seconds);
                figures[i].errors += bad;
                lat_all[i].extend(lat);
            }
        }
        let origin_during = served.load(Ordering::Relaxed) - origin_before;
        if origin_during > (opts.objects * proxies.len() * 2) as u64 {
            tracing::warn!("the origin served {origin_during} requests during the hit phase: not all were cache hits");
        }
        for (i, p) in proxies.iter().enumerate() {
            let l = &mut lat_all[i];
            l.sort_unstable();
            let q = |f: f64| {
                l.get(((l.len() as f64 - 1.0) * f) as usize)
                    .map(|v| *v as f64 / 1000.0)
                    .unwrap_or(0.0)
            };
            figures[i].p50_ms = q(0.5);
            figures[i].p99_ms = q(0.99);
            // Memory with idle keep-alive connections.
            tokio::time::sleep(Duration::from_millis(300)).await;
            let pid = p.child.id();
            let base = rss_tree_kib(pid);
            let held = hold_idle(p.addr, origin_addr, opts.idle).await;
            tokio::time::sleep(Duration::from_millis(500)).await;
            let with = rss_tree_kib(pid);
            figures[i].rss_base_kib = base;
            figures[i].rss_idle_kib = with;
            figures[i].idle_connections_held = held.len();
            figures[i].kib_per_idle_conn =
                with.saturating_sub(base) as f64 / held.len().max(1) as f64;
            drop(held);
        }
        drop(proxies);
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
