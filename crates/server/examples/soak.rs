//! A bounded soak and flood of a running `webpep server` with the hostile peers of the test
//! suite (issue 30; `tests/common/hostile.rs`, included below).
//!
//! Start a proxy separately, allowing loopback origins (the tool's own origins listen on
//! 127.0.0.1), with enough descriptors for a flood:
//!
//! ```text
//! cargo build --release
//! (ulimit -n 65536; target/release/webpep server --listen 127.0.0.1:3128 \
//!     --admin-listen 127.0.0.1:9128 --allow-destination 127.0.0.0/8 --no-cache) & PID=$!
//! cargo run --release -p webpep-server --example soak -- \
//!     --proxy 127.0.0.1:3128 --pid $PID --seconds 60 --good-clients 8 --hostile-clients 32
//! cargo run --release -p webpep-server --example soak -- --proxy 127.0.0.1:3128 --flood 5000
//! ```
//!
//! Soak: measures well-behaved latency against the idle proxy first (`--idle-seconds`,
//! 10 s), then for `--seconds` runs `--good-clients` well-behaved clients (a GET each on a
//! new connection, latency measured) beside `--hostile-clients` that cycle through the
//! hostile behaviours (slowloris heads, slow bodies, resets mid-upload, huge uploads, garbage
//! bytes, idle connections, and requests to slow, resetting, lying, oversized and hanging
//! origins), then stays idle for `--idle-seconds` more. VmRSS of `--pid` is sampled every
//! second throughout. Prints the RSS at baseline / max / end of load / after the idle time,
//! the well-behaved p50/p99/max and errors idle and under load, and what each hostile
//! behaviour got.
//!
//! Flood (`--flood N`): opens N connections from many loopback source addresses (at most 60
//! per address, under the default `max-client-connections` of 64), half idle after one
//! request (keep-alive), half slowloris (a partial head, one more byte every 2 s), then
//! times one well-behaved request on a new connection from 127.0.0.1 and prints its status
//! and time. Raises RLIMIT_NOFILE as needed.
//!
//! Everything is bounded: every step has a deadline, and the tool ends by itself.

#[path = "../tests/common/hostile.rs"]
mod hostile;

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hostile::*;

const USAGE: &str = "usage: soak --proxy ADDR [--pid PID] [--seconds N] [--good-clients N] \
[--hostile-clients N] [--idle-seconds N]\n       soak --proxy ADDR [--pid PID] --flood N";

#[derive(Debug)]
struct Args {
    proxy: SocketAddr,
    pid: Option<u32>,
    seconds: u64,
    good: usize,
    hostile: usize,
    idle_seconds: u64,
    flood: Option<usize>,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        proxy: "127.0.0.1:3128".parse().unwrap(),
        pid: None,
        seconds: 60,
        good: 8,
        hostile: 32,
        idle_seconds: 10,
        flood: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "-h" || flag == "--help" {
            println!("{USAGE}");
            std::process::exit(0);
        }
        let value = it
            .next()
            .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))?;
        let bad = |e: &dyn std::fmt::Display| format!("{flag} {value:?}: {e}");
        match flag.as_str() {
            "--proxy" => a.proxy = value.parse().map_err(|e| bad(&e))?,
            "--pid" => a.pid = Some(value.parse().map_err(|e| bad(&e))?),
            "--seconds" => a.seconds = value.parse().map_err(|e| bad(&e))?,
            "--good-clients" => a.good = value.parse().map_err(|e| bad(&e))?,
            "--hostile-clients" => a.hostile = value.parse().map_err(|e| bad(&e))?,
            "--idle-seconds" => a.idle_seconds = value.parse().map_err(|e| bad(&e))?,
            "--flood" => a.flood = Some(value.parse().map_err(|e| bad(&e))?),
            _ => return Err(format!("unknown flag {flag}\n{USAGE}")),
        }
    }
    if a.seconds > 24 * 3600 || a.idle_seconds > 3600 {
        return Err("--seconds at most a day, --idle-seconds at most an hour".into());
    }
    Ok(a)
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    if let Some(pid) = args.pid {
        if proc_status_kb(pid, "VmRSS").is_none() {
            eprintln!("no VmRSS in /proc/{pid}/status: is --pid the proxy's process id?");
            return ExitCode::from(2);
        }
    }
    // The proxy must be there before anything else.
    if let Err(e) = tokio::net::TcpStream::connect(args.proxy).await {
        eprintln!("cannot connect to the proxy at {}: {e}", args.proxy);
        return ExitCode::from(1);
    }
    match args.flood {
        Some(n) => flood(&args, n).await,
        None => soak(&args).await,
    }
}

// ---------------------------------------------------------------------------------------
// Soak
// ---------------------------------------------------------------------------------------

/// Well-behaved latencies and errors.
#[derive(Default)]
struct Latencies {
    ok: Vec<Duration>,
    errors: BTreeMap<String, usize>,
}

impl Latencies {
    fn record(&mut self, r: Result<Duration, String>) {
        match r {
            Ok(d) => self.ok.push(d),
            Err(e) => *self.errors.entry(error_class(&e)).or_default() += 1,
        }
    }

    fn summary(&mut self) -> String {
        self.ok.sort();
        let q = |p: f64| -> String {
            if self.ok.is_empty() {
                return "-".into();
            }
            let i = ((self.ok.len() as f64 * p).ceil() as usize).clamp(1, self.ok.len()) - 1;
            ms(self.ok[i])
        };
        let errors: usize = self.errors.values().sum();
        let mut s = format!(
            "{} ok, p50 {}, p99 {}, max {}; {} errors",
            self.ok.len(),
            q(0.50),
            q(0.99),
            self.ok.last().map_or("-".into(), |d| ms(*d)),
            errors
        );
        if errors > 0 {
            let kinds: Vec<String> = self
                .errors
                .iter()
                .map(|(k, n)| format!("{k}: {n}"))
                .collect();
            s.push_str(&format!(" ({})", kinds.join(", ")));
        }
        s
    }
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

/// "status 503", "connect", "no response: Eof", … (the message without its details).
fn error_class(e: &str) -> String {
    if let Some(rest) = e.strip_prefix("status ") {
        return format!("status {}", rest.split_whitespace().next().unwrap_or("?"));
    }
    if e.starts_with("no response") {
        return e.to_string();
    }
    e.split(':').next().unwrap_or(e).to_string()
}

/// Well-behaved clients: a GET on a new connection, again and again, until `stop`.
async fn good_clients(n: usize, proxy: SocketAddr, good: SocketAddr, stop: Instant) -> Latencies {
    let lat = Arc::new(Mutex::new(Latencies::default()));
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let lat = lat.clone();
            tokio::spawn(async move {
                while Instant::now() < stop {
                    let r = well_behaved_get(proxy, good).await;
                    let failed = r.is_err();
                    lat.lock().unwrap().record(r);
                    // A pause as between a browser's requests (and no spinning on refusals).
                    let pause = if failed { 100 } else { 10 };
                    tokio::time::sleep(Duration::from_millis(pause)).await;
                }
            })
        })
        .collect();
    for t in tasks {
        let _ = t.await;
    }
    Arc::try_unwrap(lat)
        .ok()
        .map(|m| m.into_inner().unwrap())
        .unwrap_or_default()
}

/// The origins the hostile clients use.
struct Origins {
    good: HostileOrigin,
    slow: HostileOrigin,
    resetting: HostileOrigin,
    lying: HostileOrigin,
    short: HostileOrigin,
    oversized: HostileOrigin,
    fat_head: HostileOrigin,
    hanging: HostileOrigin,
}

impl Origins {
    async fn start() -> Origins {
        Origins {
            good: good_origin().await,
            // 100 bytes at 20 bytes/s.
            slow: trickle_origin(
                "text/plain",
                100,
                1,
                Duration::from_millis(50),
                Framing::Length,
            )
            .await,
            resetting: upload_resetting_origin().await,
            lying: two_lengths_origin().await,
            short: short_body_origin(2_000_000, 1_000_000, Then::Close).await,
            oversized: body_origin(
                &[("Content-Type", "application/octet-stream")],
                &vec![7u8; 32 << 20],
            )
            .await,
            fat_head: oversized_head_origin(1 << 20).await,
            hanging: hanging_origin().await,
        }
    }
}

/// The hostile behaviours, each bounded by about 10 s.
const BEHAVIOURS: &[&str] = &[
    "slowloris head",
    "slow body",
    "reset mid-upload",
    "huge upload",
    "garbage",
    "idle connection",
    "upload to resetting origin",
    "slow origin",
    "lying origin",
    "short-body origin",
    "oversized body, unread",
    "oversized head origin",
    "hanging origin",
];

/// The flood's steps (connect, first request) and the hostile steps that end quickly.
const STEP: Duration = Duration::from_secs(10);

/// The longest a hostile behaviour holds on (past the proxy's default `header-timeout`,
/// 20 s, and `origin.response-timeout`, 30 s, so that their answers show), cut at the end of
/// the load.
const LONG: Duration = Duration::from_secs(40);

/// One hostile behaviour; what it got ("status 408", "Reset", …).
async fn hostile_once(
    which: usize,
    proxy: SocketAddr,
    o: &Origins,
    seed: u64,
    long: Duration,
) -> String {
    let label = |out: Outcome| match out.status() {
        Some(s) => format!("status {s}"),
        None => format!("{:?}", out.end),
    };
    match BEHAVIOURS[which] {
        "slowloris head" => label(
            slowloris_head(
                proxy,
                &o.good.url("/loris"),
                Duration::from_millis(500),
                long,
            )
            .await,
        ),
        "slow body" => label(
            slow_body(
                proxy,
                &o.good.url("/slow-upload"),
                100_000,
                1,
                Duration::from_millis(100),
                long,
            )
            .await,
        ),
        "reset mid-upload" => {
            reset_mid_upload(proxy, &o.good.url("/reset-upload"), 8 << 20, 1 << 20).await;
            "reset".into()
        }
        "huge upload" => label(upload(proxy, &o.good.url("/huge"), 1 << 30, STEP).await),
        "garbage" => {
            let mut g = garbage(4096, seed);
            g.extend_from_slice(b"\r\n\r\n");
            label(raw_request(proxy, &g, STEP).await)
        }
        "idle connection" => match RawClient::connect(proxy).await {
            Ok(mut c) => format!("{:?}", c.wait_closed(long).await),
            Err(e) => format!("connect: {}", e.kind()),
        },
        "upload to resetting origin" => {
            label(upload(proxy, &o.resetting.url("/upload"), 8 << 20, STEP).await)
        }
        "slow origin" => {
            label(raw_request(proxy, get_head(&o.slow.url("/slow")).as_bytes(), STEP).await)
        }
        "lying origin" => {
            label(raw_request(proxy, get_head(&o.lying.url("/lie")).as_bytes(), STEP).await)
        }
        "short-body origin" => {
            let out = raw_request(proxy, get_head(&o.short.url("/short")).as_bytes(), STEP).await;
            match &out.response {
                Some(r) => format!("status {} {:?}", r.status, r.end),
                None => format!("{:?}", out.end),
            }
        }
        "oversized body, unread" => {
            // Asks for 32 MB and reads 64 KiB of it, then sits on the connection a while:
            // the proxy must not buffer the rest for it.
            let Ok(mut c) = RawClient::connect(proxy).await else {
                return "connect failed".into();
            };
            if c.send(get_head(&o.oversized.url("/big")).as_bytes())
                .await
                .is_err()
            {
                return "send failed".into();
            }
            match c.read_head(STEP).await {
                Ok(h) => {
                    let _ = c.discard(64 * 1024, STEP).await;
                    tokio::time::sleep(Duration::from_secs(5)).await;
                    format!("status {}", h.status)
                }
                Err(e) => format!("{e:?}"),
            }
        }
        "oversized head origin" => {
            label(raw_request(proxy, get_head(&o.fat_head.url("/fat")).as_bytes(), STEP).await)
        }
        "hanging origin" => {
            label(raw_request(proxy, get_head(&o.hanging.url("/hang")).as_bytes(), long).await)
        }
        other => unreachable!("{other}"),
    }
}

type Tally = BTreeMap<&'static str, BTreeMap<String, usize>>;

/// Hostile clients, each cycling through the behaviours, until `stop`.
async fn hostile_clients(n: usize, proxy: SocketAddr, o: Arc<Origins>, stop: Instant) -> Tally {
    let tally = Arc::new(Mutex::new(Tally::new()));
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let (o, tally) = (o.clone(), tally.clone());
            tokio::spawn(async move {
                let mut k = i;
                while Instant::now() < stop {
                    let which = k % BEHAVIOURS.len();
                    // Cut at the end of the load (at least a second to get anywhere).
                    let left = stop.saturating_duration_since(Instant::now());
                    let long = LONG.min(left).max(Duration::from_secs(1));
                    let got = tokio::time::timeout(
                        long.max(STEP) + Duration::from_secs(10),
                        hostile_once(which, proxy, &o, k as u64 + 1, long),
                    )
                    .await
                    .unwrap_or_else(|_| "tool timeout".into());
                    *tally
                        .lock()
                        .unwrap()
                        .entry(BEHAVIOURS[which])
                        .or_default()
                        .entry(got)
                        .or_default() += 1;
                    k += 1;
                }
            })
        })
        .collect();
    // Each behaviour ends by the end of the load, or within its quick steps (~10 s) after.
    let grace = stop + STEP + Duration::from_secs(5);
    for t in tasks {
        let abort = t.abort_handle();
        if tokio::time::timeout_at(grace.into(), t).await.is_err() {
            abort.abort();
        }
    }
    let t = tally.lock().unwrap().clone();
    t
}

/// VmRSS samples of the proxy, one a second, labelled with the phase.
struct RssSampler {
    samples: Arc<Mutex<Vec<(&'static str, u64)>>>,
    phase: Arc<Mutex<&'static str>>,
    done: Arc<AtomicBool>,
}

impl RssSampler {
    fn start(pid: Option<u32>) -> RssSampler {
        let s = RssSampler {
            samples: Arc::default(),
            phase: Arc::new(Mutex::new("baseline")),
            done: Arc::default(),
        };
        if let Some(pid) = pid {
            let (samples, phase, done) = (s.samples.clone(), s.phase.clone(), s.done.clone());
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_secs(1));
                while !done.load(Ordering::Relaxed) {
                    tick.tick().await;
                    if let Some(kb) = proc_status_kb(pid, "VmRSS") {
                        let p = *phase.lock().unwrap();
                        samples.lock().unwrap().push((p, kb));
                    }
                }
            });
        }
        s
    }

    fn set_phase(&self, p: &'static str) {
        *self.phase.lock().unwrap() = p;
    }

    /// Samples now (besides the ticks), in the current phase.
    fn sample_now(&self, pid: Option<u32>) {
        if let Some(kb) = pid.and_then(|p| proc_status_kb(p, "VmRSS")) {
            let p = *self.phase.lock().unwrap();
            self.samples.lock().unwrap().push((p, kb));
        }
    }

    fn max_in(&self, phases: &[&str]) -> Option<u64> {
        let s = self.samples.lock().unwrap();
        s.iter()
            .filter(|(p, _)| phases.contains(p))
            .map(|(_, kb)| *kb)
            .max()
    }

    fn last_in(&self, phase: &str) -> Option<u64> {
        let s = self.samples.lock().unwrap();
        s.iter().rev().find(|(p, _)| *p == phase).map(|(_, kb)| *kb)
    }

    fn first_in(&self, phase: &str) -> Option<u64> {
        let s = self.samples.lock().unwrap();
        s.iter().find(|(p, _)| *p == phase).map(|(_, kb)| *kb)
    }
}

fn mb(kb: Option<u64>) -> String {
    kb.map_or("-".into(), |kb| format!("{:.1} MB", kb as f64 / 1024.0))
}

async fn soak(args: &Args) -> ExitCode {
    let origins = Arc::new(Origins::start().await);
    let good = origins.good.addr;
    let rss = RssSampler::start(args.pid);
    rss.sample_now(args.pid);
    let idle = Duration::from_secs(args.idle_seconds);

    eprintln!(
        "baseline: {} well-behaved clients against the idle proxy for {idle:?}",
        args.good
    );
    let mut base = good_clients(args.good.max(1), args.proxy, good, Instant::now() + idle).await;

    rss.set_phase("load");
    rss.sample_now(args.pid);
    let load = Duration::from_secs(args.seconds);
    eprintln!(
        "load: {} well-behaved and {} hostile clients for {load:?}",
        args.good, args.hostile
    );
    let stop = Instant::now() + load;
    let (mut under, tally) = tokio::join!(
        good_clients(args.good, args.proxy, good, stop),
        hostile_clients(args.hostile, args.proxy, origins.clone(), stop),
    );
    rss.sample_now(args.pid);
    let end_of_load = rss.last_in("load");

    rss.set_phase("after");
    eprintln!("after: idle for {idle:?}");
    tokio::time::sleep(idle).await;
    rss.sample_now(args.pid);
    // One more well-behaved request to show the proxy still serves.
    let last = well_behaved_get(args.proxy, good).await;
    rss.done.store(true, Ordering::Relaxed);

    println!("== webpep soak: proxy {} ==", args.proxy);
    match args.pid {
        Some(pid) => println!(
            "RSS (VmRSS of pid {pid}): baseline {} (before load), max {} (during load), end of load {}, after {idle:?} idle {}; max overall {}",
            mb(rss.first_in("baseline")),
            mb(rss.max_in(&["load"])),
            mb(end_of_load),
            mb(rss.last_in("after")),
            mb(rss.max_in(&["baseline", "load", "after"])),
        ),
        None => println!("RSS: not sampled (no --pid)"),
    }
    println!(
        "well-behaved, idle proxy ({idle:?}, {} clients): {}",
        args.good.max(1),
        base.summary()
    );
    println!(
        "well-behaved, under load ({load:?}, {} clients beside {} hostile): {}",
        args.good,
        args.hostile,
        under.summary()
    );
    println!("hostile behaviours (what they got):");
    for (name, outcomes) in &tally {
        let n: usize = outcomes.values().sum();
        let list: Vec<String> = outcomes.iter().map(|(k, v)| format!("{k}: {v}")).collect();
        println!("  {name:28} {n:6}  {}", list.join(", "));
    }
    match last {
        Ok(d) => {
            println!("after the soak: a well-behaved request served in {}", ms(d));
            ExitCode::SUCCESS
        }
        Err(e) => {
            println!("after the soak: the proxy no longer serves: {e}");
            ExitCode::from(1)
        }
    }
}

// ---------------------------------------------------------------------------------------
// Flood
// ---------------------------------------------------------------------------------------

/// Raises the soft RLIMIT_NOFILE to `want` (at most the hard limit); the limit now.
fn raise_nofile(want: u64) -> u64 {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid resource and a pointer to a live rlimit.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) != 0 {
            return 0;
        }
        if r.rlim_cur < want {
            let old = r.rlim_cur;
            r.rlim_cur = want.min(r.rlim_max);
            if libc::setrlimit(libc::RLIMIT_NOFILE, &r) != 0 {
                return old;
            }
        }
    }
    r.rlim_cur
}

/// The loopback source address of flood connection `i` (60 per address).
fn flood_source(i: usize) -> IpAddr {
    let k = i / 60;
    IpAddr::V4(Ipv4Addr::new(
        127,
        1 + (k / 254) as u8,
        1 + (k % 254) as u8,
        1,
    ))
}

#[derive(Default)]
struct FloodCounts {
    idle: AtomicUsize,
    slowloris: AtomicUsize,
    failed: AtomicUsize,
    refused: AtomicUsize,
    closed: AtomicUsize,
}

async fn flood(args: &Args, n: usize) -> ExitCode {
    let limit = raise_nofile(n as u64 + 1024);
    let n = if limit < n as u64 + 256 {
        let m = limit.saturating_sub(256) as usize;
        eprintln!("RLIMIT_NOFILE is {limit}: flooding with {m} connections instead of {n}");
        m
    } else {
        n
    };
    if n / 60 >= 254 * 254 {
        eprintln!("--flood {n}: too many for 127.1-254.x.1 at 60 each");
        return ExitCode::from(2);
    }
    let good = good_origin().await;
    let proxy = args.proxy;
    let rss_before = args.pid.and_then(|p| proc_status_kb(p, "VmRSS"));
    let counts = Arc::new(FloodCounts::default());
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let opening = Arc::new(tokio::sync::Semaphore::new(256));
    let t0 = Instant::now();
    let open_deadline = Instant::now() + Duration::from_secs(120);
    eprintln!("flood: opening {n} connections (half idle keep-alive, half slowloris)");
    let mut tasks = Vec::with_capacity(n);
    for i in 0..n {
        if Instant::now() > open_deadline {
            eprintln!("flood: stopped opening at {i} after 120 s");
            break;
        }
        let permit = opening.clone().acquire_owned().await.expect("semaphore");
        let (counts, mut stop) = (counts.clone(), stop_rx.clone());
        let url = good.url(&format!("/flood/{i}"));
        tasks.push(tokio::spawn(async move {
            let c =
                tokio::time::timeout(STEP, RawClient::connect_from(flood_source(i), proxy)).await;
            let Ok(Ok(mut c)) = c else {
                counts.failed.fetch_add(1, Ordering::Relaxed);
                return;
            };
            let until = tokio::time::Instant::now() + Duration::from_secs(600);
            if i % 2 == 0 {
                // Idle keep-alive after one request.
                if c.send(get_head(&url).as_bytes()).await.is_err() {
                    counts.failed.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                match c.read_response(STEP).await {
                    Ok(r) if r.status == 200 => {}
                    Ok(_) => {
                        counts.refused.fetch_add(1, Ordering::Relaxed);
                        return;
                    }
                    Err(_) => {
                        counts.failed.fetch_add(1, Ordering::Relaxed);
                        return;
                    }
                }
                counts.idle.fetch_add(1, Ordering::Relaxed);
                drop(permit);
                tokio::select! {
                    end = c.wait_closed(Duration::from_secs(600)) => {
                        if end.closed() {
                            counts.closed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    _ = stop.changed() => {}
                }
            } else {
                // Slowloris: a partial head, a byte every 2 s.
                let head = format!("GET {url} HTTP/1.1\r\nHost: flood\r\nX-Slow: ");
                if c.send(head.as_bytes()).await.is_err() {
                    counts.failed.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                counts.slowloris.fetch_add(1, Ordering::Relaxed);
                drop(permit);
                let mut wr = c.take_writer();
                let mut tick = tokio::time::interval(Duration::from_secs(2));
                tick.tick().await;
                loop {
                    tokio::select! {
                        end = c.wait_closed(until - tokio::time::Instant::now()) => {
                            if end.closed() {
                                counts.closed.fetch_add(1, Ordering::Relaxed);
                            }
                            break;
                        }
                        _ = tick.tick() => {
                            use tokio::io::AsyncWriteExt;
                            if wr.write_all(b"a").await.is_err() {
                                counts.closed.fetch_add(1, Ordering::Relaxed);
                                break;
                            }
                        }
                        _ = stop.changed() => break,
                    }
                }
            }
        }));
        if i > 0 && i % 1000 == 0 {
            eprintln!("flood: {i} started in {:.1} s", t0.elapsed().as_secs_f64());
        }
    }
    // Every connection through its opening step.
    let _ = tokio::time::timeout(Duration::from_secs(30), opening.acquire_many(256)).await;
    let opened = t0.elapsed();
    let c = &counts;
    let load = |a: &AtomicUsize| a.load(Ordering::Relaxed);
    eprintln!(
        "flood: {} idle, {} slowloris, {} refused, {} failed in {:.1} s",
        load(&c.idle),
        load(&c.slowloris),
        load(&c.refused),
        load(&c.failed),
        opened.as_secs_f64()
    );
    tokio::time::sleep(Duration::from_secs(1)).await;

    // The well-behaved request, on a new connection from an address of its own.
    let t = Instant::now();
    let result = tokio::time::timeout(Duration::from_secs(30), async {
        let mut c = RawClient::connect(proxy)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        c.send(get_head(&good.url("/well-behaved")).as_bytes())
            .await
            .map_err(|e| format!("send: {e}"))?;
        c.read_response(Duration::from_secs(30))
            .await
            .map_err(|e| format!("no response: {e:?}"))
    })
    .await;
    let took = t.elapsed();
    let rss_after = args.pid.and_then(|p| proc_status_kb(p, "VmRSS"));

    println!("== webpep flood: proxy {proxy}, {n} connections ==");
    println!(
        "opened in {:.1} s: {} idle keep-alive, {} slowloris, {} refused (non-200), {} failed",
        opened.as_secs_f64(),
        load(&c.idle),
        load(&c.slowloris),
        load(&c.refused),
        load(&c.failed)
    );
    println!(
        "flood connections closed by the proxy so far: {}",
        load(&c.closed)
    );
    if args.pid.is_some() {
        println!(
            "RSS: before {}, with the flood open {}",
            mb(rss_before),
            mb(rss_after)
        );
    }
    let code = match result {
        Ok(Ok(r)) => {
            println!(
                "well-behaved request: status {} in {} ({:?}{})",
                r.status,
                ms(took),
                r.end,
                if r.status == 200 { "" } else { ", not served" }
            );
            if r.status == 200 {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Ok(Err(e)) => {
            println!("well-behaved request: failed after {}: {e}", ms(took));
            ExitCode::from(1)
        }
        Err(_) => {
            println!("well-behaved request: no answer within 30 s");
            ExitCode::from(1)
        }
    };
    let _ = stop_tx.send(true);
    for t in &tasks {
        t.abort();
    }
    code
}
