//! `webpep link ...`

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use webpep_link::probe::{probe_plan, probe_with_progress, ProbeOptions};
use webpep_link::{enter_user_namespace_if_unprivileged, LinkShell, LogOptions, NetNs};
use webpep_link_model::fec_sweep::{sweep, SweepConfig};
use webpep_link_model::{presets, ResolvedProfile};

use crate::BadInput;

#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct LinkArgs {
    #[command(subcommand)]
    sub: Option<LinkSub>,
    #[command(flatten)]
    run: RunArgs,
}

impl LinkArgs {
    /// `link profiles` and `link fec-sweep` only print; the rest runs traffic.
    pub fn prints_only(&self) -> bool {
        matches!(
            self.sub,
            Some(LinkSub::Profiles { .. } | LinkSub::FecSweep { .. })
        )
    }
}

/// Options shared by everything that builds a link.
#[derive(Args, Debug, Clone)]
pub struct LinkOpts {
    /// Link profile: a preset name (see `webpep link profiles`), `trace:DOWN_FILE,UP_FILE`
    /// (Mahimahi traces), or a TOML profile file (`*.toml`).
    #[arg(long, short, default_value = "gprs")]
    pub profile: String,
    /// Time-scale factor k: rates ×k, delays and timeouts ÷k (for fast runs).
    #[arg(
        long,
        short = 'k',
        default_value_t = 1.0,
        allow_negative_numbers = true
    )]
    pub time_scale: f64,
    /// Seed of every random process of the link (one seed, one schedule).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    link: LinkOpts,
    /// Write a CSV log: one line per packet event, or per interval with --log-interval.
    #[arg(long)]
    log: Option<std::path::PathBuf>,
    /// Aggregate the log per this many (unscaled) milliseconds instead of per packet.
    #[arg(long, requires = "log")]
    log_interval: Option<f64>,
    /// The command to run behind the link (after `--`); default: $SHELL or /bin/sh.
    #[arg(last = true)]
    command: Vec<String>,
}

#[derive(Subcommand, Debug)]
enum LinkSub {
    /// List the profiles with their parameters.
    Profiles {
        /// Print the profiles as JSON.
        #[arg(long, conflicts_with = "toml")]
        json: bool,
        /// Print one profile (a preset name, `trace:DOWN,UP` or a `.toml` file) as a TOML
        /// profile file, to save and edit into a custom profile.
        #[arg(long, value_name = "PROFILE")]
        toml: Option<String>,
    },
    /// Measure the emulated link with real traffic and print one JSON object (with --json).
    Probe {
        #[command(flatten)]
        link: LinkOpts,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Number of pings (one second apart).
        #[arg(long, default_value_t = 20)]
        pings: usize,
        /// Pings per idle gap (gaps are 1..10 s).
        #[arg(long, default_value_t = 3)]
        idle_samples: usize,
        /// Congestion control of the TCP sender (cubic, reno, bbr: see
        /// net.ipv4.tcp_available_congestion_control).
        #[arg(long, default_value = webpep_link::probe::DEFAULT_CONGESTION)]
        congestion: String,
    },
    /// Print normalized transfer time vs FEC share for several error rates (000 Fig. 6) and
    /// residual loss vs FEC share without ARQ (000 Fig. 7).
    FecSweep {
        /// Print JSON instead of tables.
        #[arg(long)]
        json: bool,
        /// Bytes of the simulated bulk transfer.
        #[arg(long, default_value_t = 1 << 20)]
        bytes: u64,
        /// Radio rate, kbit/s.
        #[arg(long, default_value_t = 40.0, allow_negative_numbers = true)]
        rate_kbps: f64,
        /// Seed.
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
}

/// Resolves a profile argument; failures are bad input (exit code 2).
pub fn resolve_profile(opts: &LinkOpts) -> Result<ResolvedProfile> {
    if !(opts.time_scale > 0.0 && opts.time_scale.is_finite()) {
        return Err(BadInput(format!(
            "--time-scale {} must be a positive number",
            opts.time_scale
        ))
        .into());
    }
    presets::resolve(&opts.profile).map_err(|e| {
        let msg = e.to_string();
        // A parameter error names the profile, not the file it came from: add the file.
        if opts.profile.ends_with(".toml") && !msg.contains(&opts.profile) {
            BadInput(format!("{}: {msg}", opts.profile)).into()
        } else {
            BadInput(msg).into()
        }
    })
}

pub fn run(args: LinkArgs) -> Result<u8> {
    match args.sub {
        Some(LinkSub::Profiles {
            toml: Some(spec), ..
        }) => profile_toml(&spec),
        Some(LinkSub::Profiles { json, toml: None }) => profiles(json),
        Some(LinkSub::Probe {
            link,
            json,
            pings,
            idle_samples,
            congestion,
        }) => {
            let profile = resolve_profile(&link)?;
            enter_user_namespace_if_unprivileged().context("entering a user namespace")?;
            let opts = ProbeOptions {
                time_scale: link.time_scale,
                seed: link.seed,
                ping_count: pings,
                idle_samples,
                congestion,
                ..ProbeOptions::default()
            };
            let total: f64 = probe_plan(&profile, &opts).iter().map(|(_, s)| s).sum();
            eprintln!(
                "probe of {}: about {:.0} s (an estimate from the profile; losses and outages add to it)",
                profile.profile.name, total
            );
            let report = probe_with_progress(&profile, &opts, &mut |p| {
                eprintln!(
                    "probe: step {}/{}: {} (about {:.0} s left)",
                    p.step, p.steps, p.what, p.left_s
                );
            })?;
            if json {
                println!("{}", serde_json::to_string(&report)?);
            } else {
                print!("{}", report.to_text());
            }
            Ok(0)
        }
        Some(LinkSub::FecSweep {
            json,
            bytes,
            rate_kbps,
            seed,
        }) => {
            if !(rate_kbps > 0.0 && rate_kbps.is_finite()) {
                return Err(
                    BadInput(format!("--rate-kbps {rate_kbps} must be a positive number")).into(),
                );
            }
            if bytes == 0 {
                return Err(BadInput("--bytes must be positive".into()).into());
            }
            let r = sweep(&SweepConfig {
                transfer_bytes: bytes,
                rate_kbps,
                seed,
                ..SweepConfig::default()
            });
            if json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                print!("{}", r.to_table());
            }
            Ok(0)
        }
        None => run_behind_link(args.run),
    }
}

fn run_behind_link(args: RunArgs) -> Result<u8> {
    let profile = resolve_profile(&args.link)?;
    let log = match (&args.log, args.log_interval) {
        (Some(p), Some(ms)) if ms > 0.0 => Some(LogOptions::interval(p, ms)),
        (Some(_), Some(ms)) => {
            return Err(BadInput(format!("--log-interval {ms} must be positive")).into())
        }
        (Some(p), None) => Some(LogOptions::packets(p)),
        (None, _) => None,
    };
    if let Some(p) = &args.log {
        // Find an unwritable log path now, as bad input, not after the namespace is up.
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(p)
            .map_err(|e| BadInput(format!("--log {}: {e}", p.display())))?;
    }
    let argv = if args.command.is_empty() {
        vec![std::env::var("SHELL").unwrap_or_else(|_| "/bin/sh".into())]
    } else {
        args.command
    };
    enter_user_namespace_if_unprivileged().context("entering a user namespace")?;
    let outer = NetNs::current()?;
    let shell = LinkShell::new(profile)
        .time_scale(args.link.time_scale)
        .seed(args.link.seed)
        .log(log);
    let argv: Vec<std::ffi::OsString> = argv.into_iter().map(Into::into).collect();
    let code = webpep_link::run_command(&shell, outer, &argv)?;
    Ok(code.clamp(0, 255) as u8)
}

/// `webpep link profiles --toml PROFILE`: the profile as it would be written in a file.
fn profile_toml(spec: &str) -> Result<u8> {
    let opts = LinkOpts {
        profile: spec.to_string(),
        time_scale: 1.0,
        seed: 1,
    };
    let resolved = resolve_profile(&opts)?;
    print!(
        "{}",
        resolved
            .profile
            .to_toml()
            .map_err(|e| anyhow::anyhow!("{e}"))?
    );
    Ok(0)
}

fn profiles(json: bool) -> Result<u8> {
    let dir = presets::find_trace_dir();
    let mut list = Vec::new();
    for name in presets::PRESET_NAMES {
        match presets::preset(name, dir.as_deref()).and_then(|p| p.resolve(None)) {
            Ok(r) => list.push(Ok(r)),
            Err(e) => list.push(Err((name.to_string(), e.to_string()))),
        }
    }
    if json {
        let v: Vec<serde_json::Value> = list
            .iter()
            .map(|r| match r {
                Ok(r) => serde_json::json!({
                    "name": r.profile.name,
                    "description": r.profile.description,
                    "down_kbps": r.down_kbps(),
                    "up_kbps": r.up_kbps(),
                    "rtt_ms": r.rtt_ms(),
                    "parameters": r.profile,
                }),
                Err((n, e)) => serde_json::json!({"name": n, "unavailable": e}),
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(0);
    }
    println!(
        "{:<18} {:>10} {:>10} {:>8} {:>9} {:>11}  description",
        "profile", "down kbps", "up kbps", "RTT ms", "queue KB", "release s"
    );
    for r in &list {
        match r {
            Ok(r) => println!(
                "{:<18} {:>10.1} {:>10.1} {:>8.0} {:>9} {:>11}  {}",
                r.profile.name,
                r.down_kbps(),
                r.up_kbps(),
                r.rtt_ms(),
                r.profile.down.queue_bytes / 1024,
                r.release_after_idle_ms()
                    .map_or("-".to_string(), |m| format!("{:.0}", m / 1000.0)),
                r.profile.description
            ),
            Err((n, e)) => println!("{n:<18} (unavailable: {e})"),
        }
    }
    println!(
        "\nAlso: trace:DOWN_FILE,UP_FILE (Mahimahi traces) and FILE.toml (a custom profile; \
         `webpep link profiles --json` shows every parameter, `--toml NAME` writes one as a \
         profile file to edit)."
    );
    Ok(0)
}
