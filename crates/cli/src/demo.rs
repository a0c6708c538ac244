//! `webpep demo`: the README's main job. It builds the lab, loads paper-sites pages over the
//! emulated gprs link under the papers' browser policies, and prints the comparison with the
//! papers' numbers.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use crate::lab_cmd::{lab_run, RunArgs};
use crate::link_cmd::LinkOpts;

#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Time-scale factor (rates ×k, delays ÷k); 10 finishes in a few minutes.
    #[arg(long, short = 'k', default_value_t = 10.0)]
    time_scale: f64,
    /// Seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Where the results and the report go.
    #[arg(long, default_value = "webpep-demo")]
    out: PathBuf,
    /// Pages (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "mail,yahoo,amazon,cnn")]
    pages: Vec<String>,
}

/// 000 Table 1: Mozilla HTTP/1.1 over GPRS, seconds.
const PAPER_PLT: &[(&str, f64)] = &[
    ("mail", 34.5),
    ("yahoo", 35.0),
    ("amazon", 76.4),
    ("cnn", 196.3),
];

pub fn run(args: DemoArgs) -> Result<u8> {
    let run = RunArgs {
        link: LinkOpts {
            profile: "gprs".into(),
            time_scale: args.time_scale,
            seed: args.seed,
        },
        corpus: "paper-sites".into(),
        configs: vec!["http11".into(), "http11-6".into(), "pipelining".into()],
        pages: args.pages.clone(),
        repeat: 1,
        out: args.out.clone(),
        baseline: "http11".into(),
        config_file: None,
        dns_ttl: 30,
        wired_rtt: 20.0,
        gap: 10.0,
        tcp: Default::default(),
        quiet: false,
    };
    eprintln!(
        "webpep demo: paper-sites over gprs at time scale {} (http11 = 2 persistent connections per host, \
         the papers' browser; http11-6; pipelining depth 4)",
        args.time_scale
    );
    let r = lab_run(&run)?;
    print!("{}", r.table());
    println!("\nBeside 000 Table 1 (Mozilla HTTP/1.1 over GPRS) and Table 6 (pipelining −35…56 %, 6 connections −31…43 %):");
    for (page, paper) in PAPER_PLT {
        if let Some(s) = r
            .summary
            .iter()
            .find(|s| s.page == *page && s.config == "http11")
        {
            println!(
                "  {page:<8} http11 {:>6.1} s   paper {paper:>6.1} s",
                s.plt_ms.mean / 1000.0
            );
        }
    }
    println!("\nreport: {}", args.out.join("report.html").display());
    Ok(0)
}
