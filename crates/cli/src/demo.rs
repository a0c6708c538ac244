//! `webpep demo`: the README's main job. It builds the lab, loads paper-sites pages over the
//! emulated gprs link under the papers' browser policies, and prints the comparison with the
//! papers' numbers.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use crate::lab_cmd::{lab_run, RunArgs};
use crate::link_cmd::LinkOpts;
use webpep_lab::configs::Peer;
use webpep_lab::results::{columns, wrap, Comparison, Results, CONSOLE_WIDTH};

#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Time-scale factor (rates ×k, delays ÷k); 10 finishes in a few minutes.
    #[arg(long, short = 'k', default_value_t = 10.0)]
    time_scale: f64,
    /// Seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Where the results and the report go (`webpep-demo/` is in the repository's
    /// .gitignore, so a demo run inside the checkout leaves `git status` clean).
    #[arg(long, default_value = "webpep-demo")]
    out: PathBuf,
    /// Pages (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "mail,yahoo,amazon,cnn")]
    pages: Vec<String>,
    /// Loads per page and configuration; from 2 on, the tables show the spread (± sd) and
    /// the paired changes with their 95 % intervals.
    #[arg(long, default_value_t = 1)]
    repeat: usize,
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
        repeat: args.repeat,
        out: args.out.clone(),
        baseline: "http11".into(),
        config_file: None,
        dns_ttl: 30,
        wired_rtt: 20.0,
        gap: 10.0,
        tcp: Default::default(),
        quiet: false,
        same_link: false,
        chromium: None,
    };
    let say = |text: String| eprint!("{}", wrap(&format!("webpep demo: {text}"), CONSOLE_WIDTH));
    say(format!(
        "paper-sites over gprs at time scale {} (http11 = 2 persistent connections per host, \
         the papers' browser; http11-6; pipelining depth 4; webpep's edge proxy: explicit, \
         transparent by DNS rewriting, transparent by URL rewriting — 6 connections, \
         compression, small stylesheets, scripts and images inlined, images transcoded \
         `balanced`, cold caches)",
        args.time_scale
    ));
    match &chromium {
        Some(b) => {
            run.configs
                .extend(["chromium", "chromium-explicit"].map(String::from));
            say(format!(
                "real Chromium ({}) loads the pages too, direct and through the explicit proxy, \
                 beside the model's http11-6 (6 per host, as Chromium)",
                b.display()
            ));
        }
        None => say(
            "no Chromium found (apt-get install chromium adds the real-browser check to this \
             run)"
                .into(),
        ),
    }
    // Stock Squid and Ziproxy join when they can run: what an operator could deploy instead.
    let mut peers: Vec<&str> = Vec::new();
    let mut absent: Vec<(&str, String)> = Vec::new();
    for p in [Peer::Squid, Peer::Ziproxy] {
        match webpep_lab::peers::cannot_run(p) {
            None => peers.push(p.name()),
            Some(why) => {
                say(format!("no {} in this run: {why}", p.name()));
                absent.push((p.name(), why));
            }
        }
    }
    if !peers.is_empty() {
        run.configs.extend(peers.iter().map(|p| p.to_string()));
        say(format!(
            "stock {} run as the explicit proxy too, in webpep's place",
            peers.join(" and ")
        ));
    }
    let total = args.pages.len() * run.configs.len() * args.repeat;
    say(format!(
        "{total} loads; progress below, the results on stdout when all are done"
    ));
    let r = lab_run(&run)?;
    print!("{}", demo_text(&r, &absent));
    // Last, so that it is what stays on the screen: where everything is.
    println!(
        "\nreport: {}  results: {}",
        args.out.join("report.html").display(),
        args.out.join("results.json").display()
    );
    Ok(0)
}

/// The demo's stdout before the output paths: the bottom line first, then one table per
/// question (PLT, paired changes with repeats, air bytes, link use, the papers, Chromium).
/// `absent`: the peer proxies that could not run, with the reason.
fn demo_text(r: &Results, absent: &[(&str, String)]) -> String {
    let mut parts = vec![bottom_line(r, absent), r.table()];
    parts.extend([
        r.paired_table(),
        r.air_table(),
        r.link_table(),
        r.tls_upgrade_note(),
        r.not_applicable_note(),
        // What the papers measured for the same pages and configurations (000 Tables 1, 6,
        // 7, 9).
        r.paper_table(),
        model_beside_chromium(r),
    ]);
    parts.retain(|p| !p.is_empty());
    parts.join("\n")
}

/// The sentence the demo exists for: webpep's edge proxy against the papers' browser,
/// then the stock peers and real Chromium when they ran, with how the factors are
/// computed and what to distrust.
fn bottom_line(r: &Results, absent: &[(&str, String)]) -> String {
    let pages = r.pages().len();
    let these = if pages == 1 {
        "this page".to_string()
    } else {
        format!("these {pages} pages")
    };
    // "(on 3 of the 4 pages; 1 page left out, where 2 of its 8 loads had errors, marked ! in
    // the tables)"
    let caveats = |c: &Comparison| {
        let v = c.caveats();
        if v.is_empty() {
            String::new()
        } else {
            format!(" ({})", v.join("; "))
        }
    };
    let short = |c: &Comparison| {
        format!(
            "{}, {}{}",
            c.speed_words(),
            c.bytes_words().replace(" over the air", ""),
            caveats(c)
        )
    };
    let mut s = match r.bottom_line(&r.baseline, "explicit") {
        Some(c) => format!(
            "Bottom line: webpep's edge proxy (explicit) loaded {these} {} the 2003 browser \
             alone ({}), with {}{}",
            match c.speed_words().as_str() {
                w if w.starts_with("about") => format!("{w} as"),
                w => format!("{w} than"),
            },
            r.baseline,
            c.bytes_words(),
            caveats(&c)
        ),
        None => format!(
            "Bottom line: none: webpep's edge proxy (explicit) and the 2003 browser ({}) have \
             no page loaded by both",
            r.baseline
        ),
    };
    let peers: Vec<String> = [("squid", "Squid"), ("ziproxy", "Ziproxy")]
        .iter()
        .filter_map(|(config, name)| {
            let c = r.bottom_line(&r.baseline, config)?;
            Some(format!("{name} {}", short(&c)))
        })
        .collect();
    if !peers.is_empty() {
        s += &format!("; stock proxies in its place: {}", peers.join("; "));
    }
    s.push('.');
    if let Some(c) = r.bottom_line("chromium", "chromium-explicit") {
        s += &format!(
            " Real Chromium through the proxy against Chromium direct: {}.",
            short(&c)
        );
    }
    for (name, why) in absent {
        s += &format!(" {name} did not run: {why}.");
    }
    let loads = match r.summary.iter().map(|x| x.plt_ms.n).max().unwrap_or(0) {
        1 => "one load per page and configuration".to_string(),
        n => format!("{n} loads per page and configuration"),
    };
    s += &format!(
        " (Speed: the geometric mean of the per-page PLT ratios; bytes: air bytes down, summed \
         over the pages; {loads}.)"
    );
    wrap(&s, CONSOLE_WIDTH)
}

/// The browser model's http11-6 beside real Chromium (6 connections per host both), when
/// Chromium ran; empty otherwise.
fn model_beside_chromium(r: &Results) -> String {
    let cell = |page: &str, c: &str| {
        r.summary
            .iter()
            .find(|s| s.page == page && s.config == c && s.plt_ms.n > 0)
    };
    let mut rows = vec![[
        "page",
        "model http11-6 s",
        "chromium s",
        "chromium vs model",
        "errors",
    ]
    .map(String::from)
    .to_vec()];
    let mut marked = false;
    for page in webpep_lab::results::order(r.summary.iter().map(|s| &s.page)) {
        if let (Some(m), Some(c)) = (cell(page, "http11-6"), cell(page, "chromium")) {
            let mark =
                |s: &webpep_lab::results::SummaryRecord| if s.incomplete() { "!" } else { "" };
            marked |= m.incomplete() || c.incomplete();
            let (ms, cs) = (m.plt_ms.mean / 1000.0, c.plt_ms.mean / 1000.0);
            rows.push(vec![
                page.clone(),
                format!("{ms:.1}{}", mark(m)),
                format!("{cs:.1}{}", mark(c)),
                format!("{:+.0}%", (cs / ms - 1.0) * 100.0),
                r.errors_cell(|l| {
                    &l.page == page && (l.config == "http11-6" || l.config == "chromium")
                }),
            ]);
        }
    }
    if rows.len() == 1 {
        return String::new();
    }
    let mut t =
        "The browser model beside real Chromium (6 connections per host both)\n".to_string();
    t += &columns(&rows);
    if marked {
        t += "! a load of this cell lost objects (see the note under the PLT table)\n";
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use webpep_lab::results::{summarize, BreakdownMs, LoadRecord, RunInfo};

    /// A run as the runner records it (LoadRecords, then `summarize` and `finish`): PLTs and
    /// air bytes in the proportions of a gprs demo run, one squid load with lost objects.
    fn run_of(pages: &[String], configs: &[&str], repeats: usize) -> Results {
        let mut loads = Vec::new();
        for (i, page) in pages.iter().enumerate() {
            let plt = [36_300.0, 47_100.0, 72_700.0, 130_200.0][i % 4];
            for config in configs {
                let (speed, bytes) = match *config {
                    "http11" => (1.0, 1.0),
                    "http11-6" => (0.62, 1.0),
                    "pipelining" => (0.55, 1.0),
                    "explicit" => (0.34, 0.38),
                    "transparent-dns" | "transparent-url" => (0.4, 0.4),
                    "chromium" => (0.6, 1.1),
                    "chromium-explicit" => (0.33, 0.4),
                    "squid" => (0.7, 0.98),
                    _ => (0.75, 0.5),
                };
                for r in 0..repeats {
                    let plt_ms = plt * speed * (1.0 + 0.04 * r as f64);
                    let down = (420_000.0 * bytes) as u64;
                    loads.push(LoadRecord {
                        page: page.clone(),
                        config: config.to_string(),
                        profile: "gprs".into(),
                        repeat: r,
                        plt_ms,
                        air_down_bytes: down,
                        air_up_bytes: down / 12,
                        late_down_bytes: 0,
                        late_up_bytes: 0,
                        objects: 61,
                        inlined: 0,
                        errors: usize::from(*config == "squid" && i == 1 && r == 0) * 2,
                        page_objects: 0,
                        missing: 0,
                        missing_why: Default::default(),
                        breakdown_ms: BreakdownMs::default(),
                        body_bytes: down * 9 / 10,
                        head_bytes: 20_000,
                        utilization: 0.7,
                        bound_ms: plt_ms * 0.5,
                        efficiency: 0.5,
                        har: String::new(),
                        tls_upgrades: Vec::new(),
                        client_proxy: None,
                    });
                }
            }
        }
        let info = RunInfo {
            profile: "gprs".into(),
            time_scale: 10.0,
            seed: 1,
            baseline: "http11".into(),
            link_down_kbps: 39.6,
            link_rtt_ms: 1_800.0,
            configs: Default::default(),
        };
        Results::from_loads(info, loads, Vec::new(), true)
    }

    const DEMO: [&str; 10] = [
        "http11",
        "http11-6",
        "pipelining",
        "explicit",
        "transparent-dns",
        "transparent-url",
        "chromium",
        "chromium-explicit",
        "squid",
        "ziproxy",
    ];

    #[test]
    fn demo_output_fits_100_columns_with_the_bottom_line_first() {
        let four: Vec<String> = ["mail", "yahoo", "amazon", "cnn"]
            .map(String::from)
            .to_vec();
        let many: Vec<String> = (1..=27).map(|i| format!("session-page-{i:02}")).collect();
        for (pages, configs) in [(&four, &DEMO[..]), (&many, &DEMO[..3])] {
            for repeats in [1, 3] {
                let r = run_of(pages, configs, repeats);
                let t = demo_text(&r, &[]);
                for l in t.lines() {
                    assert!(
                        l.chars().count() <= 100,
                        "{} wide: {l}\n{t}",
                        l.chars().count()
                    );
                }
                assert_eq!(t.contains('±'), repeats > 1, "{t}");
                assert!(t.starts_with("Bottom line: "), "{t}");
            }
        }
        let r = run_of(&four, &DEMO, 1);
        let t = demo_text(&r, &[]);
        eprintln!("{t}");
        // The sentences, unwrapped.
        let flat = t.replace('\n', " ");
        // explicit: 1 ÷ 0.34 on every page; 1 ÷ 0.38 of the bytes.
        assert!(
            flat.starts_with(
                "Bottom line: webpep's edge proxy (explicit) loaded these 4 pages 2.9× faster \
                 than the 2003 browser alone (http11), with 2.6× fewer bytes over the air;"
            ),
            "{t}"
        );
        // Squid lost objects on one load: that page is left out of its factors, the bottom
        // line says so, the tables mark it.
        assert!(
            flat.contains(
                "Squid 1.4× faster, about as many bytes (1 page left out, where 1 of its 8 loads \
                 had errors, marked ! in the tables); Ziproxy 1.3× faster, 2.0× fewer bytes."
            ),
            "{t}"
        );
        assert!(
            flat.contains("Real Chromium through the proxy against Chromium direct: 1.8×"),
            "{t}"
        );
        assert!(t.contains("33.0! -30%"), "{t}");
        assert!(t.contains("1 of 40 loads had errors"), "{t}");
        assert!(t.contains("The browser model beside real Chromium"), "{t}");
    }

    #[test]
    fn the_bottom_line_says_what_did_not_run() {
        let four: Vec<String> = ["mail", "yahoo", "amazon", "cnn"]
            .map(String::from)
            .to_vec();
        let r = run_of(&four, &DEMO[..6], 3);
        let t = bottom_line(
            &r,
            &[(
                "squid",
                "squid is not installed (apt-get install squid)".into(),
            )],
        )
        .replace('\n', " ");
        assert!(
            !t.contains("stock proxies") && !t.contains("Chromium"),
            "{t}"
        );
        assert!(
            t.contains("squid did not run: squid is not installed"),
            "{t}"
        );
        assert!(t.contains("3 loads per page and configuration"), "{t}");
        // As fast as http11 within 5 %: said so, not "1.0× faster".
        let mut r = run_of(&four, &["http11", "explicit"], 1);
        for l in r.loads.iter_mut().filter(|l| l.config == "explicit") {
            l.plt_ms = r
                .summary
                .iter()
                .find(|s| s.page == l.page)
                .unwrap()
                .plt_ms
                .mean
                * 1.02;
        }
        r.summary = summarize(&r.loads, "http11");
        let t = bottom_line(&r, &[]).replace('\n', " ");
        assert!(
            t.contains("loaded these 4 pages about as fast as the 2003 browser alone (http11)"),
            "{t}"
        );
        // No explicit load at all: no factor, said plainly.
        let r = run_of(&four, &["http11", "pipelining"], 1);
        assert!(bottom_line(&r, &[]).starts_with("Bottom line: none:"));
    }
}
