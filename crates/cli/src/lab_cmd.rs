//! `webpep lab ...`: experiments, corpora and importers.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use webpep_corpus::{import, paper_sites, Corpus};
use webpep_lab::configs;
use webpep_lab::runner::{run, RunOptions};
use webpep_lab::LabError;
use webpep_link::enter_user_namespace_if_unprivileged;

use crate::link_cmd::{resolve_profile, LinkOpts};
use crate::BadInput;

#[derive(Args, Debug)]
pub struct LabArgs {
    #[command(subcommand)]
    sub: LabSub,
}

impl LabArgs {
    /// Listings and importers only read files and print; runs and benches talk to peers.
    pub fn prints_only(&self) -> bool {
        matches!(
            self.sub,
            LabSub::Configs { .. } | LabSub::Corpus { .. } | LabSub::Import { .. }
        )
    }
}

#[derive(Subcommand, Debug)]
enum LabSub {
    /// Load every page under every configuration over the emulated link; write results.json,
    /// one HAR per load and report.html.
    Run(RunArgs),
    /// Corpora: list pages, or write the built-in corpus to a directory.
    Corpus {
        #[command(subcommand)]
        sub: CorpusSub,
    },
    /// Build a corpus from a HAR file, a WARC file or a static directory.
    Import {
        #[command(subcommand)]
        sub: ImportSub,
    },
    /// Cache-hit throughput of webpep's edge proxy, the dual proxy (client → QUIC → edge) and
    /// Squid side by side on loopback, and their resident memory with many idle keep-alive
    /// client connections.
    ProxyBench(ProxyBenchArgs),
    /// The link transport against TCP over the emulated link: goodput from a cold connection,
    /// a small request beside a bulk transfer, the link's queue (QUIC with webpep's
    /// controller, quinn's Cubic and BBR; TCP cubic and reno). Needs root.
    TransportBench(TransportBenchArgs),
    /// List the configurations (built-in plus --config-file) with what each runs.
    Configs {
        /// A TOML file of extra or replacing configurations.
        #[arg(long)]
        config_file: Option<PathBuf>,
    },
}

#[derive(Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    pub link: LinkOpts,
    /// A corpus directory, or `paper-sites` (built in, generated on first use).
    #[arg(long, default_value = "paper-sites")]
    pub corpus: String,
    /// Configurations, comma-separated (see `webpep lab configs`).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "http11,http11-6,pipelining"
    )]
    pub configs: Vec<String>,
    /// Page ids, comma-separated; default: every page of the corpus.
    #[arg(long, value_delimiter = ',')]
    pub pages: Vec<String>,
    /// Loads per page and configuration.
    #[arg(long, default_value_t = 1)]
    pub repeat: usize,
    /// Output directory (results.json, har/, report.html, ca/).
    #[arg(long, default_value = "webpep-lab-out")]
    pub out: PathBuf,
    /// The configuration the others are compared with.
    #[arg(long, default_value = "http11")]
    pub baseline: String,
    /// A TOML file of extra or replacing configurations.
    #[arg(long)]
    pub config_file: Option<PathBuf>,
    /// TTL of the authoritative DNS answers, seconds (CDN-like short TTLs; 0 = no caching).
    #[arg(long, default_value_t = 30)]
    pub dns_ttl: u32,
    /// Round-trip time of the wired edge–net hop, ms.
    #[arg(long, default_value_t = 20.0)]
    pub wired_rtt: f64,
    /// Idle seconds before each load (longer than the radio release timeout: a cold channel).
    #[arg(long, default_value_t = 10.0)]
    pub gap: f64,
    /// The end hosts' TCP: `2003` (Reno, initial window 2, no RACK/TLP/F-RTO: what the
    /// papers measured) or `modern` (this kernel's defaults).
    #[arg(long, default_value = "2003")]
    pub tcp: webpep_lab::topology::TcpEra,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// Every repeat meets the same link (the draws of repeat 1) instead of its own: the
    /// spread across repeats is then what the link does not decide (host scheduling).
    #[arg(long)]
    pub same_link: bool,
    /// The Chromium binary for `browser = "chromium"` configurations (default:
    /// $WEBPEP_CHROMIUM, else /usr/lib/chromium/chromium or /usr/bin/chromium).
    #[arg(long, value_name = "PATH")]
    pub chromium: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct ProxyBenchArgs {
    /// Concurrent keep-alive connections of the load generator.
    #[arg(long, default_value_t = 64)]
    pub connections: usize,
    /// Seconds per round and proxy.
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
    /// Rounds (proxies alternate within each round).
    #[arg(long, default_value_t = 2)]
    pub rounds: usize,
    /// Size of each object, bytes.
    #[arg(long, default_value_t = 4096)]
    pub object_bytes: usize,
    /// Distinct objects requested (all cached before the measurement).
    #[arg(long, default_value_t = 100)]
    pub objects: usize,
    /// Idle keep-alive client connections held for the memory measurement.
    #[arg(long, default_value_t = 1000)]
    pub idle: usize,
    /// Squid's binary; `none` leaves Squid out.
    #[arg(long, default_value = "/usr/sbin/squid")]
    pub squid: String,
    /// Subjects, in turn within each round (comma-separated; default all: webpep (the edge's
    /// HTTP/1 front end), webpep-dual (webpep client → QUIC → the edge), squid).
    #[arg(long, value_name = "LIST", value_delimiter = ',', value_parser = |s: &str| s.parse::<webpep_lab::proxy_bench::Subject>())]
    pub subjects: Vec<webpep_lab::proxy_bench::Subject>,
    /// Working directory (proxy configurations and caches).
    #[arg(long, default_value = "webpep-proxy-bench")]
    pub out: PathBuf,
    /// Print JSON instead of the table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct TransportBenchArgs {
    #[command(flatten)]
    pub link: LinkOpts,
    /// Transfer sizes from a cold connection (bytes; k and m suffixes, comma-separated).
    #[arg(long, default_value = "10k,100k,1m", value_delimiter = ',')]
    pub sizes: Vec<String>,
    /// The bulk transfer the small request is issued beside (0: skip that test).
    #[arg(long, default_value = "1m")]
    pub bulk: String,
    /// The small request's size.
    #[arg(long, default_value = "1k")]
    pub small: String,
    /// Bytes the bulk request also uploads, for the small request beside a bulk transfer
    /// both ways (a page's ClientHellos going up while its responses come down; 0: skip that
    /// test).
    #[arg(long, default_value = "100k")]
    pub bulk_up: String,
    /// What one open connection carries before each size is timed on it again, request to
    /// last byte (0: skip the open-connection measurements).
    #[arg(long, default_value = "100k")]
    pub warm_up: String,
    /// Transports to measure (comma-separated; default all: quic-webpep, quic-cubic,
    /// quic-bbr, tcp-cubic, tcp-reno).
    #[arg(long, value_delimiter = ',')]
    pub transports: Vec<String>,
    /// Print JSON instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// "10k", "1m", "1200": bytes.
fn parse_bytes(flag: &str, s: &str) -> Result<u64> {
    let t = s.trim().to_ascii_lowercase();
    let (num, mul) = if let Some(n) = t.strip_suffix('k') {
        (n, 1000)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 1_000_000)
    } else {
        (t.as_str(), 1)
    };
    num.parse::<u64>()
        .map(|n| n * mul)
        .map_err(|_| BadInput(format!("{flag}: not a size: {s:?} (e.g. 100k, 1m)")).into())
}

#[derive(Subcommand, Debug)]
enum CorpusSub {
    /// Print each page id with its objects, domains and bytes.
    List {
        /// A corpus directory, or `paper-sites`.
        corpus: String,
        /// Seed of the built-in corpus.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        #[arg(long)]
        json: bool,
    },
    /// Write the built-in `paper-sites` corpus to a directory.
    Generate {
        /// Output directory.
        #[arg(long)]
        out: PathBuf,
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
}

#[derive(Subcommand, Debug)]
enum ImportSub {
    /// A HAR 1.2 file: structure, domains, types and sizes; bodies when present, synthesized
    /// of the right type and size otherwise.
    Har {
        file: PathBuf,
        #[arg(long)]
        out: PathBuf,
        /// Corpus name (default: the file name).
        #[arg(long)]
        name: Option<String>,
        /// Fail (exit 2, naming the file and the reasons) instead of skipping, synthesizing,
        /// merging or changing anything the capture holds.
        #[arg(long)]
        strict: bool,
    },
    /// A WARC file (optionally gzip-compressed): one page per archived HTML response.
    Warc {
        file: PathBuf,
        #[arg(long)]
        out: PathBuf,
        #[arg(long)]
        name: Option<String>,
    },
    /// Static directories (for example /usr/share/doc/apache2-doc/manual) spread over
    /// several virtual domains.
    Dir {
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        #[arg(long)]
        out: PathBuf,
        #[arg(long)]
        name: Option<String>,
        /// Number of virtual domains to spread the files over.
        #[arg(long, default_value_t = 4)]
        domains: usize,
    },
}

/// Bump when the paper-sites bytes change (the generator, or an image encoder it uses), so
/// cached copies are regenerated. 2: after the image-codec dependency upgrades of the edge
/// proxy work, the generator writes different image bytes than the v1 copies hold. 5: yahoo
/// on 4 domains (000 §3) instead of Table 1's 6. 6: each stylesheet background image has an
/// `:nth-child` rule of its own, so real Chromium (which fetches only shown backgrounds)
/// fetches every object of the tables. 7: cnn on the hosts 000 Figure 3 shows (text with the
/// page, nearly every image on `i.cnn.net`).
const PAPER_SITES_CACHE_VERSION: u32 = 7;

fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("WEBPEP_CACHE_DIR") {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(d).join("webpep");
    }
    if let Some(h) = std::env::var_os("HOME") {
        return PathBuf::from(h).join(".cache").join("webpep");
    }
    std::env::temp_dir().join("webpep-cache")
}

/// `paper-sites` (generated once into the cache) or a corpus directory. A corpus that cannot
/// be opened is bad input.
pub fn open_corpus(spec: &str, seed: u64) -> Result<Corpus> {
    if spec == "paper-sites" {
        let dir = cache_dir().join("corpora").join(format!(
            "paper-sites-v{}-seed{seed}",
            PAPER_SITES_CACHE_VERSION
        ));
        if let Ok(c) = Corpus::open(&dir) {
            return Ok(c);
        }
        eprintln!("generating the paper-sites corpus in {} ...", dir.display());
        let tmp = dir.with_extension(format!("tmp{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        paper_sites::generate(&tmp, seed).context("generating paper-sites")?;
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::rename(&tmp, &dir).with_context(|| format!("{}", dir.display()))?;
        return Ok(Corpus::open(&dir)?);
    }
    Corpus::open(Path::new(spec)).map_err(|e| BadInput(e.to_string()).into())
}

fn lab_err(e: LabError) -> anyhow::Error {
    match e {
        LabError::BadInput(m) => BadInput(m).into(),
        other => other.into(),
    }
}

pub fn run_cmd(args: LabArgs) -> Result<u8> {
    match args.sub {
        LabSub::ProxyBench(a) => {
            use webpep_lab::proxy_bench::Subject;
            let subjects: Vec<Subject> = if a.subjects.is_empty() {
                Subject::ALL
                    .into_iter()
                    .filter(|s| *s != Subject::Squid || a.squid != "none")
                    .collect()
            } else {
                a.subjects
            };
            let squid = if !subjects.contains(&Subject::Squid) {
                None
            } else if a.squid == "none" {
                return Err(BadInput("--subjects names squid but --squid is none".into()).into());
            } else {
                let p = PathBuf::from(&a.squid);
                if !p.exists() {
                    return Err(BadInput(format!(
                        "{}: no such file (apt-get install squid, or --squid none)",
                        p.display()
                    ))
                    .into());
                }
                Some(p)
            };
            let opts = webpep_lab::proxy_bench::BenchOptions {
                connections: a.connections,
                seconds: a.seconds,
                object_bytes: a.object_bytes,
                objects: a.objects,
                idle: a.idle,
                rounds: a.rounds,
                webpep: std::env::current_exe().context("locating the webpep binary")?,
                squid,
                subjects,
                work_dir: a.out.clone(),
            };
            let report = webpep_lab::proxy_bench::run(&opts).map_err(lab_err)?;
            if a.json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{}", report.table());
            }
            Ok(0)
        }
        LabSub::TransportBench(a) => {
            let profile = resolve_profile(&a.link)?;
            let sizes = a
                .sizes
                .iter()
                .map(|s| parse_bytes("--sizes", s))
                .collect::<Result<Vec<u64>>>()?;
            let transports = if a.transports.is_empty() {
                webpep_lab::transport_bench::Transport::ALL.to_vec()
            } else {
                a.transports
                    .iter()
                    .map(|t| {
                        t.parse()
                            .map_err(|e: String| BadInput(format!("--transports: {e}")))
                    })
                    .collect::<std::result::Result<Vec<_>, _>>()?
            };
            let opts = webpep_lab::transport_bench::TransportBenchOptions {
                profile,
                time_scale: a.link.time_scale,
                seed: a.link.seed,
                sizes,
                bulk_bytes: parse_bytes("--bulk", &a.bulk)?,
                small_bytes: parse_bytes("--small", &a.small)?,
                bulk_up_bytes: parse_bytes("--bulk-up", &a.bulk_up)?,
                warm_up_bytes: parse_bytes("--warm-up", &a.warm_up)?,
                transports,
            };
            let report = webpep_lab::transport_bench::run(&opts).map_err(lab_err)?;
            if a.json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{}", report.table());
            }
            Ok(0)
        }
        LabSub::Run(a) => {
            let results = lab_run(&a)?;
            print!("{}", results.table());
            let paired = results.paired_table();
            if !paired.is_empty() {
                print!("\n{paired}");
            }
            print!("\n{}", results.air_table());
            print!("\n{}", results.link_table());
            let tls = results.tls_upgrade_note();
            if !tls.is_empty() {
                print!("\n{tls}");
            }
            let na = results.not_applicable_note();
            if !na.is_empty() {
                print!("\n{na}");
            }
            let ab = results.ablation_table();
            if !ab.is_empty() {
                print!("\n{ab}");
            }
            let paper = results.paper_table();
            if !paper.is_empty() {
                print!("\n{paper}");
            }
            // Last, so that it is what stays on the screen: where everything is.
            println!(
                "\nreport: {}  results: {}",
                a.out.join("report.html").display(),
                a.out.join("results.json").display()
            );
            Ok(0)
        }
        LabSub::Configs { config_file } => {
            let all = configs::load(config_file.as_deref()).map_err(lab_err)?;
            for (n, c) in &all {
                println!("{n:<16} {}", c.summary());
            }
            Ok(0)
        }
        LabSub::Corpus { sub } => match sub {
            CorpusSub::List { corpus, seed, json } => {
                let c = open_corpus(&corpus, seed)?;
                let list = webpep_corpus::list(&c);
                if json {
                    println!("{}", serde_json::to_string_pretty(&list)?);
                } else {
                    println!(
                        "{:<24} {:>8} {:>8} {:>10} {:>8}",
                        "page", "objects", "domains", "bytes", "versions"
                    );
                    for p in list {
                        println!(
                            "{:<24} {:>8} {:>8} {:>10} {:>8}",
                            p.id, p.objects, p.domains, p.bytes, p.versions
                        );
                    }
                }
                Ok(0)
            }
            CorpusSub::Generate { out, seed } => {
                let c = paper_sites::generate(&out, seed)?;
                println!(
                    "paper-sites ({} pages) written to {}",
                    c.manifest.pages.len(),
                    out.display()
                );
                Ok(0)
            }
        },
        LabSub::Import { sub } => {
            let name_of = |f: &Path, n: Option<String>| {
                n.unwrap_or_else(|| {
                    f.file_stem()
                        .map(|s| s.to_string_lossy().to_string())
                        .unwrap_or_else(|| "imported".into())
                })
            };
            // A failed import leaves nothing behind in a directory it created.
            let fresh = match &sub {
                ImportSub::Har { out, .. }
                | ImportSub::Warc { out, .. }
                | ImportSub::Dir { out, .. } => !out.exists(),
            };
            let mut summary = None;
            let (c, out) = match sub {
                ImportSub::Har {
                    file,
                    out,
                    name,
                    strict,
                } => {
                    let n = name_of(&file, name);
                    let r =
                        import::import_har_with(&file, &out, &n, import::ImportOptions { strict })
                            .map(|(c, s)| {
                                summary = Some(s);
                                c
                            });
                    (r, out)
                }
                ImportSub::Warc { file, out, name } => {
                    let n = name_of(&file, name);
                    (import::import_warc(&file, &out, &n), out)
                }
                ImportSub::Dir {
                    paths,
                    out,
                    name,
                    domains,
                } => {
                    let n = name.unwrap_or_else(|| "dir".into());
                    (import::import_dir(&paths, &out, &n, domains.max(1)), out)
                }
            };
            let c = c.map_err(|e| {
                if fresh {
                    let _ = std::fs::remove_dir_all(&out);
                }
                BadInput(e.to_string())
            })?;
            println!(
                "corpus {} ({} pages) written to {}",
                c.manifest.name,
                c.manifest.pages.len(),
                out.display()
            );
            // What the import made of the input (skipped entries, runs merged as visits).
            println!("{}", c.manifest.description);
            if let Some(s) = summary {
                if s.is_clean() {
                    println!("summary: nothing skipped, synthesized, merged or changed");
                } else {
                    println!("summary (--strict makes these errors):");
                    for line in s.render().lines() {
                        println!("  {line}");
                    }
                }
            }
            Ok(0)
        }
    }
}

/// Runs `webpep lab run` (also the demo's engine).
pub fn lab_run(a: &RunArgs) -> Result<webpep_lab::results::Results> {
    let profile = resolve_profile(&a.link)?;
    if a.repeat == 0 {
        return Err(BadInput("--repeat must be at least 1".into()).into());
    }
    let all = configs::load(a.config_file.as_deref()).map_err(lab_err)?;
    let selected = configs::select(&all, &a.configs).map_err(lab_err)?;
    if !a.configs.contains(&a.baseline) {
        return Err(BadInput(format!(
            "the baseline {:?} is not among --configs",
            a.baseline
        ))
        .into());
    }
    // Before any thread exists (the user namespace needs a single-threaded process).
    enter_user_namespace_if_unprivileged().context("entering a user namespace")?;
    let corpus = open_corpus(&a.corpus, a.link.seed)?;
    let mut opts = RunOptions::new(profile, corpus, a.out.clone());
    opts.configs = selected;
    opts.pages = a.pages.clone();
    opts.repeat = a.repeat;
    opts.seed = a.link.seed;
    opts.time_scale = a.link.time_scale;
    opts.baseline = a.baseline.clone();
    opts.dns_ttl_s = a.dns_ttl;
    opts.wired_rtt_ms = a.wired_rtt;
    opts.gap_s = a.gap;
    opts.tcp = a.tcp;
    opts.progress = !a.quiet;
    opts.chromium = a.chromium.clone();
    opts.same_link = a.same_link;
    run(&opts).map_err(lab_err)
}
