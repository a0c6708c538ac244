//! `webpep demo`: the README's main job. It builds the lab, loads paper-sites pages over the
//! emulated gprs link under the papers' browser policies, and prints the comparison with the
//! papers' numbers.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use crate::lab_cmd::{lab_run, RunArgs};
use crate::link_cmd::LinkOpts;
use webpep_lab::configs::Peer;

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

pub fn run(args: DemoArgs) -> Result<u8> {
    // Real Chromium joins when installed: the check of the browser model (DESIGN §7.4).
    let chromium = webpep_lab::chromium::find_binary(None).filter(|b| b.exists());
    let mut run = RunArgs {
        link: LinkOpts {
            profile: "gprs".into(),
            time_scale: args.time_scale,
            seed: args.seed,
        },
        corpus: "paper-sites".into(),
        configs: [
            "http11",
            "http11-6",
            "pipelining",
            "explicit",
            "transparent-dns",
            "transparent-url",
        ]
        .map(String::from)
        .to_vec(),
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
        chromium: None,
    };
    eprintln!(
        "webpep demo: paper-sites over gprs at time scale {} (http11 = 2 persistent connections per host, \
         the papers' browser; http11-6; pipelining depth 4; webpep's edge proxy: explicit, \
         transparent by DNS rewriting, transparent by URL rewriting — 6 connections, compression, \
         small stylesheets, scripts and images inlined, images transcoded `balanced`, cold caches)",
        args.time_scale
    );
    match &chromium {
        Some(b) => {
            run.configs
                .extend(["chromium", "chromium-explicit"].map(String::from));
            eprintln!(
                "webpep demo: real Chromium ({}) loads the pages too, direct and through the \
                 explicit proxy, beside the model's http11-6 (6 per host, as Chromium)",
                b.display()
            );
        }
        None => eprintln!(
            "webpep demo: no Chromium found (apt-get install chromium adds the real-browser \
             check to this run)"
        ),
    }
    // Stock Squid and Ziproxy join when they can run: what an operator could deploy instead.
    let mut peers: Vec<&str> = Vec::new();
    for p in [Peer::Squid, Peer::Ziproxy] {
        match webpep_lab::peers::cannot_run(p) {
            None => peers.push(p.name()),
            Some(why) => eprintln!("webpep demo: no {} in this run: {why}", p.name()),
        }
    }
    if !peers.is_empty() {
        run.configs.extend(peers.iter().map(|p| p.to_string()));
        eprintln!(
            "webpep demo: stock {} run as the explicit proxy too, in webpep's place",
            peers.join(" and ")
        );
    }
    let r = lab_run(&run)?;
    // The summary record of one page under one configuration.
    let cell = |page: &str, config: &str| {
        r.summary
            .iter()
            .find(|s| s.page == page && s.config == config)
    };
    // The PLT change against http11, as "-44 %".
    let cut = |page: &str, config: &str| {
        cell(page, config)
            .and_then(|s| s.plt_reduction)
            .map(|x| format!("{:+.0} %", -x * 100.0))
    };
    print!("{}", r.table());
    print!("\n{}", r.air_table());
    print!("\n{}", r.link_table());
    let tls = r.tls_upgrade_note();
    if !tls.is_empty() {
        print!("\n{tls}");
    }
    // What the papers measured for the same pages and configurations (000 Tables 1, 6, 7, 9).
    let paper = r.paper_table();
    if !paper.is_empty() {
        print!("\n{paper}");
    }
    if chromium.is_some() {
        println!("\nThe browser model beside real Chromium (6 connections per host both):");
        let mean = |page: &str, c: &str| cell(page, c).map(|s| s.plt_ms.mean / 1000.0);
        for page in &args.pages {
            if let (Some(m), Some(c)) = (mean(page, "http11-6"), mean(page, "chromium")) {
                println!(
                    "  {page:<8} model http11-6 {m:>6.1} s   chromium {c:>6.1} s   ({:+.0} %)",
                    (c / m - 1.0) * 100.0
                );
            }
        }
    }
    if !peers.is_empty() {
        println!(
            "\nwebpep's edge proxy beside stock peer proxies in the same place (change vs http11):"
        );
        for page in &args.pages {
            let cells: Vec<String> = std::iter::once("explicit")
                .chain(peers.iter().copied())
                .filter_map(|c| cut(page, c).map(|x| format!("  {c} {x}")))
                .collect();
            if !cells.is_empty() {
                println!("  {page:<8}{}", cells.concat());
            }
        }
    }
    println!("\nreport: {}", args.out.join("report.html").display());
    Ok(0)
}
