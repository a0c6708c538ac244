//! `webpep demo`: the README's main job. Until the lab lands, it measures the emulated links
//! with real traffic (the probe) and sets the result beside the papers' numbers.

use anyhow::{Context, Result};
use clap::Args;
use webpep_link::enter_user_namespace_if_unprivileged;
use webpep_link::probe::{probe, ProbeOptions};
use webpep_link_model::presets;

#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Time-scale factor (rates ×k, delays ÷k); 10 finishes in about two minutes.
    #[arg(long, short = 'k', default_value_t = 10.0)]
    time_scale: f64,
    /// Seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

/// 000 Table 2: TCP throughput over GPRS by transfer size (bytes, kbps).
const PAPER_GPRS_TCP: &[(u64, f64)] = &[
    (1024, 13.2),
    (5120, 18.1),
    (10240, 18.8),
    (51200, 29.7),
    (102400, 30.5),
];

pub fn run(args: DemoArgs) -> Result<u8> {
    enter_user_namespace_if_unprivileged().context("entering a user namespace")?;
    for name in ["gprs", "cdma-1x"] {
        let profile = presets::resolve(name)?;
        eprintln!(
            "probing {name} at time scale {} (real traffic through the emulated link)...",
            args.time_scale
        );
        let r = probe(
            &profile,
            &ProbeOptions {
                time_scale: args.time_scale,
                seed: args.seed,
                ..ProbeOptions::default()
            },
        )?;
        print!("{}", r.to_text());
        if name == "gprs" {
            println!("  beside the papers (GPRS):");
            println!(
                "    ping RTT median {:.0} ms, max {:.0} ms   (003 §3: ~1 s, 761 ms to 4 s; 001: 0.7-1 s)",
                r.ping_rtt_ms.median, r.ping_rtt_ms.max
            );
            let short = r.idle_rtt.iter().find(|i| i.idle_s == 5.0);
            let long = r.idle_rtt.iter().find(|i| i.idle_s == 7.0);
            if let (Some(s), Some(l)) = (short, long) {
                println!(
                    "    RTT after 5 s idle {:.0} ms, after 7 s {:.0} ms   (003 Table 3: 1726 → 2551 ms across the 6 s release)",
                    s.median_rtt_ms, l.median_rtt_ms
                );
            }
            println!("    TCP download   measured   000 Table 2");
            for (bytes, paper) in PAPER_GPRS_TCP {
                if let Some(b) = r.tcp_bulk.iter().find(|b| b.bytes == *bytes) {
                    println!(
                        "    {:>7} B   {:>6.1} kbps   {:>6.1} kbps",
                        bytes, b.kbps, paper
                    );
                }
            }
        } else {
            println!("  beside the paper (002: average CDMA 1x cell, 78 kbps FTP, RTT ~400 ms)");
        }
        println!();
    }
    Ok(0)
}
