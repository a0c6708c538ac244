//! `webpep lab run`: loads every page under every configuration over the emulated link and
//! writes `results.json`, one HAR per load and `report.html` (DESIGN §7.5).

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use webpep_corpus::Corpus;
use webpep_link_model::ResolvedProfile;
use webpep_loader::{Loader, LoaderConfig, PageLoad, Policy, ResourceKind};
use webpep_replay::{ReplayConfig, ReplayServer};

use crate::chromium::{self, Chromium, Launch};
use crate::configs::{Browser, LabConfig, PolicyName, ProxyMode};
use crate::edge_proxy::EdgeProxy;
use crate::hosting::Hosting;
use crate::missing;
use crate::nsrt::run_in;
use crate::report;
use crate::results::{
    BreakdownMs, ClientProxyUse, LinkUse, LoadRecord, NotApplicable, Results, RunInfo,
};
use crate::topology::{TcpEra, Topology, TopologyConfig};
use crate::{LabError, Result};
use webpep_link_model::profile::Rate;

/// Everything a run needs.
#[derive(Clone, Debug)]
pub struct RunOptions {
    pub profile: ResolvedProfile,
    pub corpus: Corpus,
    pub configs: Vec<(String, LabConfig)>,
    /// Page ids; empty: every page of the corpus.
    pub pages: Vec<String>,
    pub repeat: usize,
    pub seed: u64,
    pub time_scale: f64,
    pub out: PathBuf,
    pub baseline: String,
    /// Authoritative DNS TTL, seconds (unscaled).
    pub dns_ttl_s: u32,
    /// Wired edge–net RTT, ms (unscaled).
    pub wired_rtt_ms: f64,
    /// Idle time before each load, seconds (unscaled): lets queues drain and, longer than the
    /// radio's release timeout, gives every load the same cold channel.
    pub gap_s: f64,
    /// The end hosts' TCP.
    pub tcp: TcpEra,
    pub progress: bool,
    /// The Chromium binary for `browser = "chromium"` configurations; `None`: found by
    /// [`chromium::find_binary`].
    pub chromium: Option<PathBuf>,
    /// Every repeat meets the same link (epoch 0: the draws of repeat 1) instead of its own,
    /// so that what differs between repeats is what the link does not decide.
    pub same_link: bool,
}

impl RunOptions {
    pub fn new(profile: ResolvedProfile, corpus: Corpus, out: PathBuf) -> RunOptions {
        RunOptions {
            profile,
            corpus,
            configs: Vec::new(),
            pages: Vec::new(),
            repeat: 1,
            seed: 1,
            time_scale: 1.0,
            out,
            baseline: "http11".into(),
            dns_ttl_s: 30,
            wired_rtt_ms: 20.0,
            gap_s: 10.0,
            tcp: TcpEra::default(),
            progress: true,
            chromium: None,
            same_link: false,
        }
    }
}

/// What Mozilla 1.4 (2003, the papers' browser) sent with every request besides Host and
/// User-Agent: on a 12 kbit/s uplink these bytes are part of the cost of an object.
pub const MOZILLA_2003_HEADERS: &[(&str, &str)] = &[
    (
        "Accept",
        "text/xml,application/xml,application/xhtml+xml,text/html;q=0.9,text/plain;q=0.8,video/x-mng,image/png,image/jpeg,image/gif;q=0.2,*/*;q=0.1",
    ),
    ("Accept-Language", "en-us,en;q=0.5"),
    ("Accept-Encoding", "gzip,deflate"),
    ("Accept-Charset", "ISO-8859-1,utf-8;q=0.7,*;q=0.7"),
    ("Keep-Alive", "300"),
    ("Connection", "keep-alive"),
];
pub const MOZILLA_2003_UA: &str = "Mozilla/5.0 (X11; U; Linux i686; en-US; rv:1.4) Gecko/20030624";

/// What today's browser model sends, as the lab's Chromium does over HTTP/1.1 (read from its
/// HARs): these headers with every request, a `Referer` by `strict-origin-when-cross-origin`,
/// and [`modern_kind_headers`]. About 380 bytes a request, where a bare model sent 100.
pub const MODERN_HEADERS: &[(&str, &str)] = &[
    ("Connection", "keep-alive"),
    ("Accept-Encoding", "gzip, deflate"),
    ("Accept-Language", "en-US,en;q=0.9"),
];
/// Chromium's limit of connections to one proxy (`client_socket_pool_manager.cc`, 128 in
/// today's Chromium, 32 before). Through the edge proxy the lab's Chromium 156 kept about a
/// hundred connections for cnn.com 2017, each to one host, so it is the per-origin limit (6)
/// that binds there, not a limit of 6 to the proxy.
pub const CHROMIUM_SOCKETS_PER_PROXY: usize = 128;

pub const MODERN_UA: &str = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/156.0.0.0 Safari/537.36";

/// Chromium's Accept for each kind of object (scripts, fonts and the rest: `*/*`), and its
/// Upgrade-Insecure-Requests on documents.
pub fn modern_kind_headers() -> webpep_loader::KindHeaders {
    use ResourceKind::*;
    let h =
        |kinds: &[ResourceKind], n: &str, v: &str| (kinds.to_vec(), n.to_string(), v.to_string());
    webpep_loader::KindHeaders(vec![
        h(&[Document, Iframe], "Upgrade-Insecure-Requests", "1"),
        h(
            &[Document, Iframe],
            "Accept",
            "text/html,application/xhtml+xml,application/xml;q=0.9,image/jxl,image/avif,image/webp,image/apng,*/*;q=0.8,application/signed-exchange;v=b3;q=0.7",
        ),
        h(&[Stylesheet], "Accept", "text/css,*/*;q=0.1"),
        h(
            &[Image],
            "Accept",
            "image/jxl,image/avif,image/webp,image/apng,image/svg+xml,image/*,*/*;q=0.8",
        ),
    ])
}

/// Lists `image/webp` first in the Accept header (a modern browser's `*/*` when there is
/// none), the way browsers that decode WebP announce it.
fn with_webp_accept(headers: &mut Vec<(String, String)>) {
    match headers
        .iter_mut()
        .find(|(n, _)| n.eq_ignore_ascii_case("accept"))
    {
        Some((_, v)) => *v = format!("image/webp,{v}"),
        None => headers.push(("Accept".into(), "image/webp,*/*".into())),
    }
}

fn policy(c: &LabConfig) -> Policy {
    match c.policy {
        PolicyName::Http10 => Policy::Http10,
        PolicyName::Http11 => Policy::Http11 {
            per_host: c.per_host(),
        },
        PolicyName::Pipelining => Policy::Pipelining {
            per_host: c.per_host(),
            depth: c.pipeline_depth(),
        },
        PolicyName::H2 => Policy::H2,
    }
}

/// Loader settings for one configuration; timeouts are unscaled link time turned into wall
/// time.
fn loader_config(c: &LabConfig, hosting: &Hosting, k: f64) -> LoaderConfig {
    let mut lc = LoaderConfig::new(policy(c), hosting.resolver_addr);
    if c.browser() == Browser::Mozilla2003 {
        lc.blocking_scripts = true;
        lc.link_preload = false;
        lc.serial_dns = true;
        lc.pool_by_address = true;
        lc.user_agent = MOZILLA_2003_UA.into();
        lc.referer = webpep_loader::RefererPolicy::Full;
        // The papers' laptop (000 §3) had the XGA screen of its day.
        lc.viewport = webpep_loader::Viewport {
            width: 1024,
            height: 768,
            dppx: 1.0,
        };
        lc.request_headers = MOZILLA_2003_HEADERS
            .iter()
            .filter(|(n, _)| {
                c.policy != PolicyName::Http10 || *n != "Connection" && *n != "Keep-Alive"
            })
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
    }
    if c.browser() == Browser::Modern {
        lc.proxy_pool_per_origin = Some(CHROMIUM_SOCKETS_PER_PROXY);
        lc.user_agent = MODERN_UA.into();
        lc.request_headers = MODERN_HEADERS
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        lc.kind_headers = modern_kind_headers();
        lc.tight_mode = true;
    }
    lc.pipeline_batches = c.pipeline_batches();
    // Today's browser lists WebP in its image Accept already.
    if c.accept_webp && c.browser() == Browser::Mozilla2003 {
        with_webp_accept(&mut lc.request_headers);
    }
    lc.keep_connections = c.warm && c.revisit_connections;
    lc.ca_pem = Some(hosting.ca_pem.as_bytes().to_vec());
    let scaled = |s: f64| Duration::from_secs_f64(s / k);
    (lc.connect_timeout, lc.tls_handshake_timeout) = setup_timeouts(c.browser(), k);
    lc.response_timeout = scaled(120.0);
    lc.page_timeout = scaled(PAGE_TIMEOUT_MIN_S);
    lc.dns_timeout = scaled(10.0);
    // Timeouts in recorded errors read in link time, as every other time of the record.
    lc.time_scale = k;
    lc
}

/// Whether the browser model moves the page's `http://` URLs to `https://`: on HTTP/2, for a
/// generated page, whose `http://` is only a convention (a browser on h2 would use https). A
/// captured page keeps the schemes its browser used, as the lab's Chromium does: the model's
/// `h2` is then the same page as `chromium`, and through the proxy its `http://` objects
/// reach the proxy's stages instead of a tunnel.
fn upgrades_insecure(c: &LabConfig, page: &webpep_corpus::Page) -> bool {
    c.policy == PolicyName::H2 && !page.captured_schemes
}

/// How long the browser model waits for a connection (in wall time at time scale `k`): TCP
/// gives up as its system's does, 75 s for the 2003 browser (BSD's and Windows' classic
/// connect timeout), 127 s for today's, which leaves it to Linux's 6 SYN retries (over gprs
/// a modern page's dozens of parallel connections can hold a handshake in the queue longer
/// than 75 s). Today's browser then gives the TLS handshake 30 s of its own (Chromium's
/// SSLConnectJob restarts its timer for it); the 2003 browser's handshake shares the
/// connect timeout.
fn setup_timeouts(browser: Browser, k: f64) -> (Duration, Option<Duration>) {
    let scaled = |s: f64| Duration::from_secs_f64(s / k);
    if browser == Browser::Mozilla2003 {
        (scaled(75.0), None)
    } else {
        (scaled(127.0), Some(scaled(MODERN_TLS_HANDSHAKE_S)))
    }
}

/// Today's browser's limit on a TLS handshake (unscaled s), from its start: Chromium's
/// `kSSLHandshakeTimeout`.
const MODERN_TLS_HANDSHAKE_S: f64 = 30.0;

/// The shortest page timeout (unscaled s): half an hour, as before the timeout followed the
/// page's size.
const PAGE_TIMEOUT_MIN_S: f64 = 1800.0;

/// The page timeout (unscaled s) for a page of `bytes` in `objects` objects over a link of
/// `down` and idle RTT `rtt_ms`: four times the page's physical bound on the link (the bound
/// of the link-use table, [`LinkUse::bound_ms`]: over a trace, the time the trace takes to
/// offer the bytes from its start, not its mean rate) with a round trip more for each object,
/// and never under half an hour. A fixed half hour cut large real pages over gprs short of
/// what the link itself needs.
fn page_timeout_s(bytes: u64, objects: usize, down: &Rate, rtt_ms: f64) -> f64 {
    let serial_ms = LinkUse::bound_ms(bytes, down, rtt_ms) + objects as f64 * rtt_ms;
    if !serial_ms.is_finite() {
        return PAGE_TIMEOUT_MIN_S;
    }
    (PAGE_TIMEOUT_BOUNDS * serial_ms / 1000.0).max(PAGE_TIMEOUT_MIN_S)
}

/// The page timeout in bounds of the page ([`page_timeout_s`]).
pub const PAGE_TIMEOUT_BOUNDS: f64 = 4.0;

fn safe(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn write(path: &Path, bytes: &[u8]) -> Result<()> {
    std::fs::write(path, bytes).map_err(|e| LabError::Other(format!("{}: {e}", path.display())))
}

/// Runs the experiment and writes its files; returns the results.
pub fn run(opts: &RunOptions) -> Result<Results> {
    if opts.configs.is_empty() {
        return Err(LabError::BadInput("no configurations to run".into()));
    }
    let pages: Vec<&webpep_corpus::Page> = if opts.pages.is_empty() {
        opts.corpus.manifest.pages.iter().collect()
    } else {
        opts.pages
            .iter()
            .map(|id| {
                opts.corpus.manifest.page(id).ok_or_else(|| {
                    LabError::BadInput(format!(
                        "page {id:?} is not in corpus {} (see `webpep lab corpus list`)",
                        opts.corpus.manifest.name
                    ))
                })
            })
            .collect::<Result<_>>()?
    };
    let chromium_binary = if opts
        .configs
        .iter()
        .any(|(_, c)| c.browser() == Browser::Chromium)
    {
        let b = chromium::find_binary(opts.chromium.as_deref())
            .filter(|b| b.exists())
            .ok_or_else(|| {
                LabError::BadInput(format!(
                    "a browser = \"chromium\" configuration needs Chromium, and none is at {} \
                     (install it with `apt-get install chromium`, or name it with --chromium)",
                    opts.chromium
                        .as_deref()
                        .unwrap_or(Path::new(chromium::DEFAULT_BINARY))
                        .display()
                ))
            })?;
        Some(b)
    } else {
        None
    };
    let har_dir = opts.out.join("har");
    std::fs::create_dir_all(&har_dir)
        .map_err(|e| LabError::Other(format!("{}: {e}", har_dir.display())))?;
    let k = opts.time_scale;

    let replay = ReplayServer::new(&opts.corpus, ReplayConfig::default());
    let mut tcfg = TopologyConfig::new(opts.profile.clone(), replay.domains().to_vec());
    tcfg.time_scale = k;
    tcfg.seed = opts.seed;
    tcfg.wired_rtt_ms = opts.wired_rtt_ms;
    tcfg.tcp = opts.tcp;
    let topo = Topology::build(&tcfg)?;
    let topo_edge = topo.edge_addr();
    let hosting = Hosting::start(&topo, replay, opts.dns_ttl_s, k, &opts.out.join("ca"))?;

    let total = pages.len() * opts.configs.len() * opts.repeat;
    let mut progress = if opts.progress {
        Progress::stderr(total, opts.repeat)
    } else {
        Progress::off(total, opts.repeat)
    };

    let mut loads = Vec::new();
    let mut not_applicable: Vec<NotApplicable> = Vec::new();
    for page in &pages {
        for (cname, cfg) in &opts.configs {
            for r in 0..opts.repeat {
                progress.starting(&page.id, cname, r);
                let measured = match &chromium_binary {
                    Some(b) if cfg.browser() == Browser::Chromium => {
                        measure_chromium(&topo, &hosting, page, cfg, opts, r, b)
                    }
                    _ => measure(&topo, &hosting, page, cfg, opts, r),
                };
                let Measured {
                    load,
                    down,
                    up,
                    late_down,
                    late_up,
                    inlined,
                    client_proxy,
                } = match measured {
                    Ok(m) => m,
                    Err(e) => {
                        // This configuration cannot load this page (URL rewriting of an https
                        // page, a peer or tool missing): noted with why, its other repeats
                        // skipped, and the run goes on with the rest.
                        let na = NotApplicable {
                            page: page.id.clone(),
                            config: cname.clone(),
                            reason: e.to_string(),
                        };
                        progress.not_applicable(&na, opts.repeat - r);
                        not_applicable.push(na);
                        break;
                    }
                };
                let rewritten = (cfg.proxy == ProxyMode::TransparentUrl)
                    .then(|| format!("http://{}/", topo_edge));
                let missing = missing::of(
                    page,
                    &load,
                    inlined as usize,
                    rewritten.as_deref(),
                    cfg.browser() != Browser::Chromium,
                );
                let har_name = format!("{}-{}-{r}.har", safe(&page.id), safe(cname));
                let har = load.to_har(&page.id);
                let text = serde_json::to_vec_pretty(&har)
                    .map_err(|e| LabError::Other(format!("HAR: {e}")))?;
                write(&har_dir.join(&har_name), &text)?;
                let ms = |d: Duration| d.as_secs_f64() * 1000.0;
                let body_bytes = load.objects.iter().map(|o| o.body_size).sum();
                let link = LinkUse::of(
                    ms(load.plt),
                    down,
                    body_bytes,
                    &opts.profile.down_rate,
                    opts.profile.rtt_ms(),
                );
                loads.push(LoadRecord {
                    page: page.id.clone(),
                    config: cname.clone(),
                    profile: opts.profile.profile.name.clone(),
                    repeat: r,
                    plt_ms: ms(load.plt),
                    air_down_bytes: down,
                    air_up_bytes: up,
                    late_down_bytes: late_down,
                    late_up_bytes: late_up,
                    objects: load.objects.len(),
                    inlined: inlined as usize,
                    errors: failed_objects(&load),
                    page_objects: missing.page_objects,
                    missing: missing.missing,
                    missing_why: missing.why,
                    breakdown_ms: BreakdownMs {
                        dns: ms(load.breakdown.dns),
                        connect: ms(load.breakdown.connect),
                        idle: ms(load.breakdown.idle),
                        payload: ms(load.breakdown.payload),
                    },
                    body_bytes,
                    head_bytes: load.objects.iter().filter_map(|o| o.headers_size).sum(),
                    utilization: link.utilization,
                    bound_ms: link.bound_ms,
                    efficiency: link.efficiency,
                    har: format!("har/{har_name}"),
                    tls_upgrades: load.tls_upgrades.clone(),
                    client_proxy,
                });
                if let Some(l) = loads.last() {
                    progress.loaded(l);
                }
                // Rewritten after every load: an interrupted run keeps what it measured.
                let partial = results_of(opts, &loads, &not_applicable, false);
                write_results(opts, &partial, false)?;
            }
        }
    }
    progress.finish();
    drop(hosting);
    drop(topo);

    if loads.is_empty() && !not_applicable.is_empty() {
        let why: Vec<String> = not_applicable
            .iter()
            .map(|n| format!("{} {}: {}", n.page, n.config, n.reason))
            .collect();
        return Err(LabError::BadInput(format!(
            "no configuration could load any page: {}",
            why.join("; ")
        )));
    }
    let results = results_of(opts, &loads, &not_applicable, true);
    write_results(opts, &results, true)?;
    Ok(results)
}

/// The run's results from the loads so far.
fn results_of(
    opts: &RunOptions,
    loads: &[LoadRecord],
    not_applicable: &[NotApplicable],
    complete: bool,
) -> Results {
    let info = RunInfo {
        profile: opts.profile.profile.name.clone(),
        time_scale: opts.time_scale,
        seed: opts.seed,
        baseline: opts.baseline.clone(),
        link_down_kbps: opts.profile.down_kbps(),
        link_rtt_ms: opts.profile.rtt_ms(),
        configs: opts
            .configs
            .iter()
            .map(|(n, c)| (n.clone(), c.summary()))
            .collect(),
    };
    let mut r = Results::from_loads(info, loads.to_vec(), not_applicable.to_vec(), complete);
    r.same_link = opts.same_link;
    r
}

/// Writes `results.json` (through a temporary file, so a reader never sees half of it) and,
/// with `report`, `report.html`.
fn write_results(opts: &RunOptions, results: &Results, report: bool) -> Result<()> {
    let json = serde_json::to_vec_pretty(results)
        .map_err(|e| LabError::Other(format!("results.json: {e}")))?;
    let tmp = opts.out.join("results.json.tmp");
    write(&tmp, &json)?;
    std::fs::rename(&tmp, opts.out.join("results.json"))
        .map_err(|e| LabError::Other(format!("results.json: {e}")))?;
    if report {
        write(
            &opts.out.join("report.html"),
            report::html(results).as_bytes(),
        )?;
    }
    Ok(())
}

/// A run's progress on stderr, so that a run of minutes is never silent: a bar on a
/// terminal, one line per load anywhere else (a log file, CI, a pipe), where a bar would
/// draw nothing.
pub struct Progress {
    out: ProgressOut,
    total: usize,
    repeats: usize,
    done: usize,
    started: Instant,
}

enum ProgressOut {
    Bar(indicatif::ProgressBar),
    Lines(Box<dyn Write + Send>),
    Off,
}

impl Progress {
    /// On stderr: a bar when it is a terminal, lines otherwise. `total` loads in all,
    /// `repeats` per page and configuration.
    pub fn stderr(total: usize, repeats: usize) -> Progress {
        if std::io::stderr().is_terminal() {
            let b = indicatif::ProgressBar::new(total as u64);
            b.set_style(
                indicatif::ProgressStyle::with_template(
                    "{elapsed_precise} [{bar:30}] {pos}/{len} (about {eta} left) {msg}",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            Progress::with(ProgressOut::Bar(b), total, repeats)
        } else {
            Progress::lines(total, repeats, Box::new(std::io::stderr()))
        }
    }

    /// One line per load to `out`.
    pub fn lines(total: usize, repeats: usize, out: Box<dyn Write + Send>) -> Progress {
        Progress::with(ProgressOut::Lines(out), total, repeats)
    }

    /// Nothing (`--quiet`).
    pub fn off(total: usize, repeats: usize) -> Progress {
        Progress::with(ProgressOut::Off, total, repeats)
    }

    fn with(out: ProgressOut, total: usize, repeats: usize) -> Progress {
        Progress {
            out,
            total,
            repeats,
            done: 0,
            started: Instant::now(),
        }
    }

    /// A load begins (the bar names it; lines wait for its result).
    pub fn starting(&mut self, page: &str, config: &str, repeat: usize) {
        if let ProgressOut::Bar(b) = &self.out {
            // Numbered from 1, as the lines number them.
            b.set_message(format!("{page} {config} #{}/{}", repeat + 1, self.repeats));
        }
    }

    /// A load ended with `record`.
    pub fn loaded(&mut self, record: &LoadRecord) {
        self.done += 1;
        match &mut self.out {
            ProgressOut::Bar(b) => b.inc(1),
            ProgressOut::Lines(w) => {
                let line = progress_line(
                    self.done,
                    self.total,
                    self.repeats,
                    record,
                    self.started.elapsed(),
                );
                // Progress is best effort: a closed stderr must not stop the run.
                let _ = writeln!(w, "{line}");
                let _ = w.flush();
            }
            ProgressOut::Off => {}
        }
    }

    /// A configuration could not load a page: `skipped` loads (this one and its later
    /// repeats) will not be made.
    pub fn not_applicable(&mut self, na: &NotApplicable, skipped: usize) {
        self.done += skipped;
        let line = format!(
            "[{}/{}] {} {}: not applicable: {}",
            self.done, self.total, na.page, na.config, na.reason
        );
        match &mut self.out {
            ProgressOut::Bar(b) => {
                b.inc(skipped as u64);
                b.println(line);
            }
            ProgressOut::Lines(w) => {
                let _ = writeln!(w, "{line}");
                let _ = w.flush();
            }
            ProgressOut::Off => {}
        }
    }

    pub fn finish(self) {
        if let ProgressOut::Bar(b) = &self.out {
            b.finish_and_clear();
        }
    }
}

/// The progress line of load `done` of `total`, which took `elapsed` of wall time since the
/// run began: `[3/24] cnn explicit: PLT 38.2 s, 61 objects, 0 errors (elapsed 1:12, about
/// 2:40 left)`. The PLT is link time (unscaled); elapsed and left are wall time, left
/// estimated from the mean time per load so far.
pub fn progress_line(
    done: usize,
    total: usize,
    repeats: usize,
    r: &LoadRecord,
    elapsed: Duration,
) -> String {
    let which = if repeats > 1 {
        format!(" #{}/{repeats}", r.repeat + 1)
    } else {
        String::new()
    };
    let inlined = if r.inlined > 0 {
        format!(" (+{} inlined)", r.inlined)
    } else {
        String::new()
    };
    let errors = match r.errors {
        1 => "1 error".to_string(),
        n => format!("{n} errors"),
    };
    let errors = if r.missing > 0 {
        format!("{errors}, {} not requested", r.missing)
    } else {
        errors
    };
    let left = if done > 0 && done < total {
        let per = elapsed.as_secs_f64() / done as f64;
        format!(
            ", about {} left",
            clock(Duration::from_secs_f64(per * (total - done) as f64))
        )
    } else {
        String::new()
    };
    format!(
        "[{done}/{total}] {} {}{which}: PLT {:.1} s, {} objects{inlined}, {errors} (elapsed {}{left})",
        r.page,
        r.config,
        r.plt_ms / 1000.0,
        r.objects,
        clock(elapsed)
    )
}

/// `1:12` (minutes and seconds), `1:02:03` from an hour on.
fn clock(d: Duration) -> String {
    let s = d.as_secs_f64().round() as u64;
    if s >= 3600 {
        format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
    } else {
        format!("{}:{:02}", s / 60, s % 60)
    }
}

/// Objects that did not arrive: network or protocol failures, and HTTP errors (≥ 400).
fn failed_objects(load: &PageLoad) -> usize {
    load.objects
        .iter()
        .filter(|o| o.error.is_some() || o.status.is_some_and(|s| s >= 400))
        .count()
}

/// What every load starts from: fresh hosting state (resolver cache, close-after, visit 0),
/// the loader's settings, webpep's edge proxy (cold) when the configuration has one, and the
/// URL this mode's browser opens.
fn prepare(
    topo: &Topology,
    hosting: &Hosting,
    page: &webpep_corpus::Page,
    cfg: &LabConfig,
    opts: &RunOptions,
) -> Result<(LoaderConfig, Option<EdgeProxy>, String)> {
    let k = opts.time_scale;
    hosting.resolver.flush();
    hosting.replay.set_close_after(cfg.close_after);
    // Unless the configuration says otherwise, the replay server's own default (wall time,
    // longer than any load).
    hosting.replay.set_idle_timeout(
        cfg.origin_keepalive_s
            .map(|t| Duration::from_secs_f64(t / k))
            .or(ReplayConfig::default().idle_timeout),
    );
    hosting.replay.set_visit(0);
    let mut lc = loader_config(cfg, hosting, k);
    lc.upgrade_insecure = upgrades_insecure(cfg, page);
    let bytes: u64 = page
        .objects
        .iter()
        .filter_map(|o| o.versions.first())
        .map(|v| v.size)
        .sum();
    let limit = page_timeout_s(
        bytes,
        page.objects.len(),
        &opts.profile.down_rate,
        opts.profile.rtt_ms(),
    );
    lc.page_timeout = Duration::from_secs_f64(limit / k);
    if cfg.browser() == Browser::Modern {
        // Chromium gives a response no deadline of its own (TCP's retries decide): with a
        // captured page's plain-http hosts at 6 connections each, a response over gprs can
        // rightly wait longer than 120 s for its turn on the link.
        lc.response_timeout = lc.page_timeout;
    }
    let proxy = match cfg.proxy {
        ProxyMode::None => None,
        _ => Some(EdgeProxy::start(
            topo,
            cfg,
            opts.tcp,
            &opts.out,
            k,
            Some(&hosting.ca_dir),
        )?),
    };
    let url = match &proxy {
        Some(p) => p.adjust_loader(&mut lc, &page.url)?,
        None => page.url.clone(),
    };
    Ok((lc, proxy, url))
}

/// [`measure`] with real Chromium in `ue` instead of the browser model: a fresh browser and
/// profile per load, pointed at the proxy as this mode's browser would be.
fn measure_chromium(
    topo: &Topology,
    hosting: &Hosting,
    page: &webpep_corpus::Page,
    cfg: &LabConfig,
    opts: &RunOptions,
    repeat: usize,
    binary: &Path,
) -> Result<Measured> {
    let k = opts.time_scale;
    // The loader's settings say where this mode's browser sends its requests and lookups.
    let (lc, proxy, url) = prepare(topo, hosting, page, cfg, opts)?;
    let resolver = proxy
        .as_ref()
        .map_or(lc.resolver, |p| p.chromium_resolver(&lc));
    let mut browser = Chromium::launch(Launch {
        ns: &topo.ue,
        binary,
        dir: opts.out.clone(),
        resolver,
        proxy: lc.proxy.map(|addr| match &proxy {
            Some(p) => p.chromium_proxy(addr),
            None => format!("http://{addr}"),
        }),
        ca_pem: &hosting.ca_dir.join("ca.pem"),
    })?;
    let gap = Duration::from_secs_f64(opts.gap_s / k);
    if cfg.warm {
        std::thread::sleep(gap);
        browser.load(&url, lc.page_timeout, &mut || {})?;
        hosting.replay.set_visit(1);
        if !cfg.revisit_cache {
            browser.clear_cache()?;
        }
    }
    std::thread::sleep(gap);
    let server = proxy.as_ref().and_then(|p| p.server());
    let inlined_before = server.as_ref().map_or(0, |s| s.inlined_objects());
    let client = proxy.as_ref().and_then(|p| p.client_counters()).cloned();
    let client_before = client.as_ref().map(|c| {
        c.reset_peak();
        (c.connections(), c.h2_connections())
    });
    // Each load meets a link started over (see `measure`).
    let before = topo.air.restart(epoch(opts, repeat));
    // The air bytes of the load are those up to its load event; what crosses after it
    // (Chromium's late requests) is counted apart.
    let mut at_load = None;
    let mut load = browser.load(&url, lc.page_timeout, &mut || {
        at_load = Some(topo.air.counters_now())
    })?;
    // What the page does within LATE_WINDOW_S of its load event is counted as late.
    std::thread::sleep(Duration::from_secs_f64(LATE_WINDOW_S / k).max(Duration::from_millis(50)));
    let after = topo.air.counters_now();
    let end = at_load.unwrap_or_else(|| after.clone());
    let inlined = server.as_ref().map_or(0, |s| s.inlined_objects()) - inlined_before;
    let client_proxy = client
        .zip(client_before)
        .map(|(c, (n, h2))| ClientProxyUse::since(&c, n, h2));
    browser.close();
    drop(proxy);
    load.scale_times(k);
    // Chromium's record names its timeouts in wall time; the model's already in link time.
    for o in &mut load.objects {
        o.error = o.error.take().map(|e| e.scaled(k));
    }
    Ok(Measured {
        load,
        down: end.down.delivered_bytes - before.down.delivered_bytes,
        up: end.up.delivered_bytes - before.up.delivered_bytes,
        late_down: after.down.delivered_bytes - end.down.delivered_bytes,
        late_up: after.up.delivered_bytes - end.up.delivered_bytes,
        inlined,
        client_proxy,
    })
}

/// The link epoch of load `repeat`: its repeat number, or 0 for every load with
/// `same_link`.
fn epoch(opts: &RunOptions, repeat: usize) -> u64 {
    if opts.same_link {
        0
    } else {
        repeat as u64
    }
}

/// How long (unscaled s) after Chromium's load event the air bytes of the page's late
/// requests are counted (apart from the load's).
pub const LATE_WINDOW_S: f64 = 10.0;

/// One measured load: the load (times unscaled), the air bytes down and up it caused, and
/// the stylesheets, scripts and images webpep's edge proxy copied into its pages (`[inline]`), which
/// the browser then did not fetch.
struct Measured {
    load: PageLoad,
    down: u64,
    up: u64,
    /// Air bytes after the load's end (Chromium's late requests after its load event): not
    /// the load's, reported apart. The browser model requests nothing after its last byte.
    late_down: u64,
    late_up: u64,
    inlined: u64,
    /// With the dual proxy: how the browser used webpep client.
    client_proxy: Option<ClientProxyUse>,
}

/// One measured load (after a warm-up load for warm configurations): the load with unscaled
/// times, and the air bytes down and up it caused. The load meets the link started over in
/// epoch `repeat` (traces from their start, outages counted from the load's start, the
/// epoch's random streams), so every configuration's load r meets the same link.
fn measure(
    topo: &Topology,
    hosting: &Hosting,
    page: &webpep_corpus::Page,
    cfg: &LabConfig,
    opts: &RunOptions,
    repeat: usize,
) -> Result<Measured> {
    let k = opts.time_scale;
    let (lc, proxy, url) = prepare(topo, hosting, page, cfg, opts)?;
    let link_epoch = epoch(opts, repeat);
    let server = proxy.as_ref().and_then(|p| p.server());
    let inlined = move || server.as_ref().map_or(0, |s| s.inlined_objects());
    let client = proxy.as_ref().and_then(|p| p.client_counters()).cloned();
    let gap = Duration::from_secs_f64(opts.gap_s / k);
    let warm = cfg.warm;
    let revisit_cache = cfg.revisit_cache;
    let replay = hosting.replay.clone();
    let air = &topo.air;
    let (mut load, down, up, inlined, client_proxy) = run_in(&topo.ue, move || async move {
        let mut loader = Loader::new(lc);
        if warm {
            tokio::time::sleep(gap).await;
            let _ = loader.load(&url).await;
            replay.set_visit(1);
            if !revisit_cache {
                loader.clear_http_cache();
            }
        }
        tokio::time::sleep(gap).await;
        let inlined_before = inlined();
        let client_before = client.as_ref().map(|c| {
            c.reset_peak();
            (c.connections(), c.h2_connections())
        });
        let before = air.restart(link_epoch);
        let load = loader.load(&url).await;
        // Let the last ACKs cross before reading the counters.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let after = air.counters_now();
        (
            load,
            after.down.delivered_bytes - before.down.delivered_bytes,
            after.up.delivered_bytes - before.up.delivered_bytes,
            inlined() - inlined_before,
            client
                .zip(client_before)
                .map(|(c, (n, h2))| ClientProxyUse::since(&c, n, h2)),
        )
    })?;
    drop(proxy);
    load.scale_times(k);
    Ok(Measured {
        load,
        down,
        up,
        late_down: 0,
        late_up: 0,
        inlined,
        client_proxy,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_timeout_follows_the_page_over_the_link() {
        let gprs = Rate::Kbps(38.0);
        // Small pages keep half an hour.
        assert_eq!(page_timeout_s(60_000, 10, &gprs, 2800.0), 1800.0);
        // 8.27 MB in 244 objects over gprs: 1741 s at the full rate and 683 s of round trips,
        // so four times that, not half an hour.
        let t = page_timeout_s(8_270_000, 244, &gprs, 2800.0);
        assert!(
            (t - 4.0 * (2.8 + 8_270_000.0 * 8.0 / 38_000.0 + 244.0 * 2.8)).abs() < 1e-6,
            "{t}"
        );
        assert!(t > 9000.0);
        // At least four times the page's physical bound, whatever the link.
        for (bytes, objects) in [(8_270_000u64, 244usize), (60_000, 10), (50_000_000, 10)] {
            let bound_s = LinkUse::bound_ms(bytes, &gprs, 2800.0) / 1000.0;
            assert!(page_timeout_s(bytes, objects, &gprs, 2800.0) >= 4.0 * bound_s);
        }
        // Over a trace, the bound is the time the trace takes to offer the bytes from its
        // start: one 1,500-byte opportunity every 100 ms offers 8.27 MB in 551 s.
        let trace = webpep_link_model::Trace::parse("100", "t").unwrap();
        let trace = Rate::Trace(std::sync::Arc::new(trace));
        let bound_s = LinkUse::bound_ms(8_270_000, &trace, 300.0) / 1000.0;
        assert!(
            (bound_s - (0.3 + 5514.0 * 0.1 - 0.001)).abs() < 0.2,
            "{bound_s}"
        );
        let t = page_timeout_s(8_270_000, 244, &trace, 300.0);
        assert!((t - 4.0 * (bound_s + 244.0 * 0.3)).abs() < 1e-6, "{t}");
    }

    #[test]
    fn the_modern_browser_gives_tls_its_own_limit_and_the_2003_one_does_not() {
        assert_eq!(
            setup_timeouts(Browser::Mozilla2003, 10.0),
            (Duration::from_millis(7500), None)
        );
        assert_eq!(
            setup_timeouts(Browser::Modern, 10.0),
            (Duration::from_millis(12_700), Some(Duration::from_secs(3)))
        );
        let all = crate::configs::load(None).unwrap();
        assert_eq!(all["h2"].browser(), Browser::Modern);
        assert_eq!(all["explicit-modern"].browser(), Browser::Modern);
        assert_eq!(all["http11"].browser(), Browser::Mozilla2003);
    }

    #[test]
    fn only_a_generated_page_moves_to_https_on_h2() {
        let all = crate::configs::load(None).unwrap();
        let mut page = webpep_corpus::Page {
            id: "p".into(),
            url: "http://www.example.test/".into(),
            source: String::new(),
            captured_schemes: false,
            objects: Vec::new(),
        };
        assert!(upgrades_insecure(&all["h2"], &page));
        assert!(upgrades_insecure(&all["explicit-modern"], &page));
        assert!(!upgrades_insecure(&all["http11"], &page));
        // A capture's http:// objects stay http://, as the lab's Chromium loads them.
        page.captured_schemes = true;
        assert!(!upgrades_insecure(&all["h2"], &page));
        assert!(!upgrades_insecure(&all["explicit-modern"], &page));
    }

    #[test]
    fn with_same_link_every_repeat_meets_the_link_of_the_first() {
        let corpus = webpep_corpus::Corpus {
            dir: PathBuf::from("/nonexistent"),
            manifest: webpep_corpus::Manifest {
                format_version: webpep_corpus::FORMAT_VERSION,
                name: "none".into(),
                description: String::new(),
                domains: Vec::new(),
                pages: Vec::new(),
            },
        };
        let profile = webpep_link_model::resolve("gprs").unwrap();
        let mut opts = RunOptions::new(profile, corpus, PathBuf::from("/nonexistent"));
        assert_eq!([0, 1, 2].map(|r| epoch(&opts, r)), [0, 1, 2]);
        opts.same_link = true;
        assert_eq!([0, 1, 2].map(|r| epoch(&opts, r)), [0, 0, 0]);
    }

    #[test]
    fn webp_goes_first_in_the_accept_header() {
        let mut h: Vec<(String, String)> = MOZILLA_2003_HEADERS
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        with_webp_accept(&mut h);
        assert_eq!(h.len(), MOZILLA_2003_HEADERS.len());
        assert!(h[0].1.starts_with("image/webp,text/xml,"), "{}", h[0].1);
        assert!(webpep_optimize::transcode::accepts_webp(Some(&h[0].1)));
        // Headers without an Accept (a bare loader's): WebP and anything else.
        let mut none = Vec::new();
        with_webp_accept(&mut none);
        assert_eq!(none, [("Accept".to_string(), "image/webp,*/*".to_string())]);
        // Today's model lists WebP for images itself, as Chromium does, and not for scripts.
        let accept = |kind| {
            modern_kind_headers()
                .for_kind(kind)
                .find(|(n, _)| n == "Accept")
                .map(|(_, v)| v)
        };
        let image = accept(ResourceKind::Image);
        assert!(webpep_optimize::transcode::accepts_webp(image.as_deref()));
        assert_eq!(accept(ResourceKind::Script), None);
    }

    fn record(page: &str, config: &str, repeat: usize, plt_ms: f64, errors: usize) -> LoadRecord {
        LoadRecord {
            page: page.into(),
            config: config.into(),
            profile: "gprs".into(),
            repeat,
            plt_ms,
            air_down_bytes: 0,
            air_up_bytes: 0,
            late_down_bytes: 0,
            late_up_bytes: 0,
            objects: 61,
            inlined: 0,
            errors,
            page_objects: 0,
            missing: 0,
            missing_why: Default::default(),
            breakdown_ms: BreakdownMs::default(),
            body_bytes: 0,
            head_bytes: 0,
            utilization: 0.0,
            bound_ms: 0.0,
            efficiency: 0.0,
            har: String::new(),
            tls_upgrades: Vec::new(),
            client_proxy: None,
        }
    }

    #[test]
    fn a_progress_line_names_the_load_and_the_time_left() {
        let r = record("cnn", "explicit", 0, 38_210.0, 0);
        // 3 loads in 72 s: 24 s each, 21 to go.
        assert_eq!(
            progress_line(3, 24, 1, &r, Duration::from_secs(72)),
            "[3/24] cnn explicit: PLT 38.2 s, 61 objects, 0 errors (elapsed 1:12, about 8:24 left)"
        );
        // Repeats are numbered from 1; the last load has nothing left; inlined objects shown.
        let mut r = record("mail", "squid", 2, 1_000.0, 1);
        r.inlined = 4;
        assert_eq!(
            progress_line(6, 6, 3, &r, Duration::from_secs(3725)),
            "[6/6] mail squid #3/3: PLT 1.0 s, 61 objects (+4 inlined), 1 error (elapsed 1:02:05)"
        );
    }

    /// A writer the test can read after the reporter had it.
    #[derive(Clone, Default)]
    struct Shared(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn off_a_terminal_progress_is_one_line_per_load() {
        let out = Shared::default();
        let mut p = Progress::lines(2, 1, Box::new(out.clone()));
        p.starting("mail", "http11", 0);
        // Nothing before the load ends: a line per load, with its result.
        assert!(out.0.lock().unwrap().is_empty());
        p.loaded(&record("mail", "http11", 0, 36_300.0, 0));
        p.starting("mail", "explicit", 0);
        p.loaded(&record("mail", "explicit", 0, 12_000.0, 2));
        p.finish();
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(
            lines[0].starts_with("[1/2] mail http11: PLT 36.3 s"),
            "{text}"
        );
        assert!(lines[0].contains("left)"), "{text}");
        assert!(
            lines[1].starts_with("[2/2] mail explicit: PLT 12.0 s"),
            "{text}"
        );
        assert!(
            lines[1].contains("2 errors") && !lines[1].contains("left"),
            "{text}"
        );
        // --quiet: nothing at all.
        let mut q = Progress::off(1, 1);
        q.loaded(&record("mail", "http11", 0, 1.0, 0));
        q.finish();
    }
}
