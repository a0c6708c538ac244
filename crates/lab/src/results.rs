//! `results.json` (DESIGN §7.5): one record per page load, and a summary per (page, config).
//! Every time is unscaled (what the real link would show).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::paper_refs::{self, PaperRow};

#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BreakdownMs {
    pub dns: f64,
    pub connect: f64,
    pub idle: f64,
    pub payload: f64,
}

/// One page load.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LoadRecord {
    pub page: String,
    pub config: String,
    pub profile: String,
    pub repeat: usize,
    pub plt_ms: f64,
    pub air_down_bytes: u64,
    pub air_up_bytes: u64,
    /// Objects the browser fetched.
    pub objects: usize,
    /// Stylesheets, scripts and images webpep's edge proxy copied into the load's pages
    /// (`[inline]`), which the browser did not fetch: `objects + inlined` is the page's count.
    #[serde(default)]
    pub inlined: usize,
    pub errors: usize,
    pub breakdown_ms: BreakdownMs,
    /// Response bodies as they arrived (content-coded sizes), summed over the objects: the
    /// payload that 000 Table 3 and 003 §7.1 compare, without headers and TCP/IP.
    #[serde(default)]
    pub body_bytes: u64,
    /// Response heads (status line and header fields), summed over the objects.
    #[serde(default)]
    pub head_bytes: u64,
    /// Air bits down ÷ (the link's down rate × PLT): how busy the link was (DESIGN §7.5;
    /// 000 Table 1's "T'put" over its 39.6 kbps).
    #[serde(default)]
    pub utilization: f64,
    /// The physical limit of this load: one RTT of an idle link plus its body bytes at the
    /// down rate (see [`LinkUse`]).
    #[serde(default)]
    pub bound_ms: f64,
    /// `bound_ms` ÷ PLT: how close the load came to the limit.
    #[serde(default)]
    pub efficiency: f64,
    /// The HAR file of this load, relative to the results directory.
    #[serde(default)]
    pub har: String,
    /// Hosts the browser fetched over https on its own although the page names them
    /// http:// (Chromium's HSTS preload list; never the model).
    #[serde(default)]
    pub tls_upgrades: Vec<String>,
}

/// How one load used the link (DESIGN §7.5). The bound counts the load's own response
/// bodies, as delivered: the least that must cross for what the browser received, so a
/// configuration that sends fewer bytes also has a lower bound, and efficiency measures
/// idle time and overhead, not compression.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinkUse {
    pub utilization: f64,
    pub bound_ms: f64,
    pub efficiency: f64,
}

impl LinkUse {
    /// From a load's PLT, downstream air bytes and body bytes and the link's down rate
    /// (kbit/s) and idle RTT (ms). A load without a PLT or a link without a rate gives zeros.
    pub fn of(
        plt_ms: f64,
        air_down_bytes: u64,
        body_bytes: u64,
        down_kbps: f64,
        rtt_ms: f64,
    ) -> LinkUse {
        if !(plt_ms > 0.0 && down_kbps > 0.0) {
            return LinkUse {
                utilization: 0.0,
                bound_ms: 0.0,
                efficiency: 0.0,
            };
        }
        // kbit/s = bits per ms.
        let bound_ms = rtt_ms.max(0.0) + body_bytes as f64 * 8.0 / down_kbps;
        LinkUse {
            utilization: air_down_bytes as f64 * 8.0 / (down_kbps * plt_ms),
            bound_ms,
            efficiency: bound_ms / plt_ms,
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    pub mean: f64,
    pub sd: f64,
    pub median: f64,
    pub n: usize,
}

impl Stats {
    /// Mean, sample standard deviation and median.
    pub fn of(values: &[f64]) -> Stats {
        let n = values.len();
        if n == 0 {
            return Stats::default();
        }
        let mean = values.iter().sum::<f64>() / n as f64;
        let sd = if n > 1 {
            (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt()
        } else {
            0.0
        };
        let mut s = values.to_vec();
        s.sort_by(f64::total_cmp);
        let median = if n % 2 == 1 {
            s[n / 2]
        } else {
            (s[n / 2 - 1] + s[n / 2]) / 2.0
        };
        Stats {
            mean,
            sd,
            median,
            n,
        }
    }
}

/// A configuration's PLT against the baseline's, paired by repeat: load r of each
/// configuration met the same link (epoch r: the same trace start, outages and random
/// streams), so the per-repeat ratios vary less than the two means do.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct PairedChange {
    /// Mean over the repeats of PLT ÷ the baseline's PLT of the same repeat, minus 1
    /// (−0.45: 45 % faster).
    pub mean: f64,
    /// The 95 % confidence interval of that mean (Student's t), from 2 pairs on.
    pub ci95: Option<[f64; 2]>,
    /// Repeats with a load of both.
    pub n: usize,
}

impl PairedChange {
    /// From the per-repeat changes (ratio − 1).
    pub fn of(changes: &[f64]) -> Option<PairedChange> {
        let s = Stats::of(changes);
        if s.n == 0 {
            return None;
        }
        let ci95 = (s.n >= 2).then(|| {
            let half = t975(s.n - 1) * s.sd / (s.n as f64).sqrt();
            [s.mean - half, s.mean + half]
        });
        Some(PairedChange {
            mean: s.mean,
            ci95,
            n: s.n,
        })
    }

    /// `-45 % [-48, -42]` (the interval when there is one).
    pub fn text(&self) -> String {
        let pct = |x: f64| x * 100.0;
        match self.ci95 {
            Some([lo, hi]) => format!("{:+.0}% [{:+.0}, {:+.0}]", pct(self.mean), pct(lo), pct(hi)),
            None => format!("{:+.0}%", pct(self.mean)),
        }
    }
}

/// The 0.975 quantile of Student's t with `df` degrees of freedom (≥ 1).
fn t975(df: usize) -> f64 {
    const T: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042,
    ];
    match df {
        0 => f64::NAN,
        1..=30 => T[df - 1],
        // The normal quantile with the first term of t's expansion: within 0.002 above 30.
        _ => 1.959_964 * (1.0 + (1.0 + 1.959_964f64.powi(2)) / (4.0 * df as f64)),
    }
}

/// One (page, config) summary.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SummaryRecord {
    pub page: String,
    pub config: String,
    pub plt_ms: Stats,
    pub air_down_bytes: Stats,
    pub air_up_bytes: Stats,
    /// Response bodies and heads per load (see [`LoadRecord::body_bytes`]).
    #[serde(default)]
    pub body_bytes: Stats,
    #[serde(default)]
    pub head_bytes: Stats,
    /// Link utilization and efficiency per load (see [`LoadRecord::utilization`]).
    #[serde(default)]
    pub utilization: Stats,
    #[serde(default)]
    pub efficiency: Stats,
    pub breakdown_ms: BreakdownMs,
    pub errors: usize,
    /// Mean PLT ÷ the baseline configuration's mean PLT on the same page.
    pub plt_ratio_to_baseline: Option<f64>,
    /// 1 − ratio: the PLT cut, as the papers report it.
    pub plt_reduction: Option<f64>,
    /// The change against the baseline paired by repeat, with its confidence interval (not
    /// for the baseline itself).
    #[serde(default)]
    pub plt_change_paired: Option<PairedChange>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Results {
    pub profile: String,
    pub time_scale: f64,
    pub seed: u64,
    pub baseline: String,
    /// The profile's downlink rate (kbit/s; the mean for traces) and the RTT of an idle link
    /// (ms), which utilization and the bound use.
    #[serde(default)]
    pub link_down_kbps: f64,
    #[serde(default)]
    pub link_rtt_ms: f64,
    /// Configuration name → its description (browser policy, proxy mode, switches).
    pub configs: BTreeMap<String, String>,
    pub loads: Vec<LoadRecord>,
    pub summary: Vec<SummaryRecord>,
    /// Air bytes over all pages per configuration (filled by [`Results::finish`]).
    #[serde(default)]
    pub air_totals: Vec<AirTotal>,
    /// Ablation rows (configurations named `FULL-no-SWITCH`; filled by [`Results::finish`]).
    #[serde(default)]
    pub ablations: Vec<AblationRow>,
    /// The run beside what the papers measured for the same page and configuration (runs
    /// over `gprs` only; filled by [`Results::finish`]).
    #[serde(default)]
    pub paper: Vec<PaperRow>,
}

/// Summarizes loads per (page, config), in first-seen order.
pub fn summarize(loads: &[LoadRecord], baseline: &str) -> Vec<SummaryRecord> {
    let mut keys: Vec<(String, String)> = Vec::new();
    for l in loads {
        let k = (l.page.clone(), l.config.clone());
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    let stats = |page: &str, config: &str, f: &dyn Fn(&LoadRecord) -> f64| {
        let v: Vec<f64> = loads
            .iter()
            .filter(|l| l.page == page && l.config == config)
            .map(f)
            .collect();
        Stats::of(&v)
    };
    let mut out: Vec<SummaryRecord> = keys
        .iter()
        .map(|(page, config)| {
            let mine: Vec<&LoadRecord> = loads
                .iter()
                .filter(|l| &l.page == page && &l.config == config)
                .collect();
            let n = mine.len().max(1) as f64;
            let bd = |f: &dyn Fn(&BreakdownMs) -> f64| {
                mine.iter().map(|l| f(&l.breakdown_ms)).sum::<f64>() / n
            };
            SummaryRecord {
                page: page.clone(),
                config: config.clone(),
                plt_ms: stats(page, config, &|l| l.plt_ms),
                air_down_bytes: stats(page, config, &|l| l.air_down_bytes as f64),
                air_up_bytes: stats(page, config, &|l| l.air_up_bytes as f64),
                body_bytes: stats(page, config, &|l| l.body_bytes as f64),
                head_bytes: stats(page, config, &|l| l.head_bytes as f64),
                utilization: stats(page, config, &|l| l.utilization),
                efficiency: stats(page, config, &|l| l.efficiency),
                breakdown_ms: BreakdownMs {
                    dns: bd(&|b| b.dns),
                    connect: bd(&|b| b.connect),
                    idle: bd(&|b| b.idle),
                    payload: bd(&|b| b.payload),
                },
                errors: mine.iter().map(|l| l.errors).sum(),
                plt_ratio_to_baseline: None,
                plt_reduction: None,
                plt_change_paired: None,
            }
        })
        .collect();
    let base: BTreeMap<String, f64> = out
        .iter()
        .filter(|s| s.config == baseline)
        .map(|s| (s.page.clone(), s.plt_ms.mean))
        .collect();
    for s in &mut out {
        if let Some(b) = base.get(&s.page).filter(|b| **b > 0.0) {
            let r = s.plt_ms.mean / b;
            s.plt_ratio_to_baseline = Some(r);
            s.plt_reduction = Some(1.0 - r);
        }
        if s.config == baseline {
            continue;
        }
        let changes: Vec<f64> = loads
            .iter()
            .filter(|l| l.page == s.page && l.config == s.config)
            .filter_map(|l| {
                let b = loads
                    .iter()
                    .find(|b| b.page == l.page && b.config == baseline && b.repeat == l.repeat)?;
                (b.plt_ms > 0.0).then(|| l.plt_ms / b.plt_ms - 1.0)
            })
            .collect();
        s.plt_change_paired = PairedChange::of(&changes);
    }
    out
}

impl Results {
    /// A plain-text comparison table: mean PLT (s) per page × config, with the cut vs the
    /// baseline.
    pub fn table(&self) -> String {
        let configs = order(self.summary.iter().map(|s| &s.config));
        let head = format!(
            "Mean PLT in seconds (± sd; change vs {}), profile {}, unscaled",
            self.baseline, self.profile
        );
        self.grid(&head, &configs, |s| {
            let change = match s.plt_reduction {
                Some(r) if s.config != self.baseline => format!(" {:+.0}%", -r * 100.0),
                _ => String::new(),
            };
            Some(format!(
                "{:.1}±{:.1}{}",
                s.plt_ms.mean / 1000.0,
                s.plt_ms.sd / 1000.0,
                change
            ))
        })
    }

    /// The changes against the baseline paired by repeat, with 95 % confidence intervals;
    /// empty when no configuration has 2 repeats paired with the baseline's.
    pub fn paired_table(&self) -> String {
        if !self
            .summary
            .iter()
            .any(|s| s.plt_change_paired.is_some_and(|p| p.n >= 2))
        {
            return String::new();
        }
        let configs: Vec<&String> = order(self.summary.iter().map(|s| &s.config))
            .into_iter()
            .filter(|c| **c != self.baseline)
            .collect();
        let head = format!(
            "Change vs {} paired by repeat (load r of every configuration met the same link), \
             mean [95 % confidence interval], %",
            self.baseline
        );
        self.grid(&head, &configs, |s| s.plt_change_paired.map(|x| x.text()))
    }

    /// A page × configuration table under `head`, one cell per summary record ("-" for none).
    fn grid(
        &self,
        head: &str,
        configs: &[&String],
        cell: impl Fn(&SummaryRecord) -> Option<String>,
    ) -> String {
        let mut t = format!("{head}\n{:<22}", "page");
        for c in configs {
            t += &format!("{:>24}", c);
        }
        t.push('\n');
        for p in order(self.summary.iter().map(|s| &s.page)) {
            t += &format!("{:<22}", p);
            for c in configs {
                let text = self
                    .summary
                    .iter()
                    .find(|s| &s.page == p && &s.config == *c)
                    .and_then(&cell)
                    .unwrap_or_else(|| "-".into());
                t += &format!("{:>24}", text);
            }
            t.push('\n');
        }
        t
    }
}

/// Distinct values in first-seen order.
pub(crate) fn order<'a>(v: impl Iterator<Item = &'a String>) -> Vec<&'a String> {
    let mut out: Vec<&String> = Vec::new();
    for x in v {
        if !out.contains(&x) {
            out.push(x);
        }
    }
    out
}

/// What the list of [`Results::tls_upgrades`] says, in the text tables and the report.
pub const TLS_UPGRADES_HEAD: &str = "Fetched over https by the browser itself, though the page \
    names them http:// (Chromium's HSTS preload list); through a proxy these requests are \
    CONNECT tunnels the proxy passes on untouched";

/// Air bytes over all pages of a run, per configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AirTotal {
    pub config: String,
    pub down_bytes: f64,
    pub up_bytes: f64,
    /// Baseline's downstream bytes ÷ this configuration's (how many times fewer).
    pub down_reduction_factor: Option<f64>,
    /// The same factor per page, averaged over the pages both have (003 §7.1's "average
    /// compression factor": small pages count as much as big ones).
    #[serde(default)]
    pub mean_page_factor: Option<f64>,
    /// Response bodies and heads summed over the pages (means per page).
    #[serde(default)]
    pub body_bytes: f64,
    #[serde(default)]
    pub head_bytes: f64,
    /// The baseline's body bytes ÷ this configuration's, averaged over the pages: the payload
    /// compression factor as 000 Table 3 and 003 Fig. 7 count it (no headers, no TCP/IP).
    #[serde(default)]
    pub payload_page_factor: Option<f64>,
}

/// One row of the ablation table (000 Fig. 8): `full` with `switch` off.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AblationRow {
    pub full: String,
    pub switch: String,
    /// Mean PLT over the pages, seconds: baseline, full, and full without the switch.
    pub baseline_s: f64,
    pub full_s: f64,
    pub without_s: f64,
    /// (without − full) ÷ (baseline − full): the share of the full gain the switch carries.
    pub share_of_gain: f64,
}

impl Results {
    /// Fills the derived tables (air totals, ablations) from the summary.
    pub fn finish(mut self) -> Results {
        self.air_totals = self.air_totals();
        self.ablations = self.ablations();
        self.paper = self.paper_rows();
        self
    }

    /// Each (page, configuration) of the run that a paper measured too.
    fn paper_rows(&self) -> Vec<PaperRow> {
        self.summary
            .iter()
            .filter_map(|s| {
                let r = paper_refs::lookup(&self.profile, &s.page, &s.config)?;
                let http11 = self
                    .summary
                    .iter()
                    .find(|b| b.page == s.page && b.config == "http11");
                let measured_change = if s.config == "http11" {
                    http11.map(|_| 0.0)
                } else if self.baseline == "http11" && s.plt_change_paired.is_some() {
                    s.plt_change_paired.map(|p| p.mean)
                } else {
                    http11
                        .filter(|b| b.plt_ms.mean > 0.0)
                        .map(|b| s.plt_ms.mean / b.plt_ms.mean - 1.0)
                };
                Some(PaperRow {
                    page: s.page.clone(),
                    config: s.config.clone(),
                    measured_s: s.plt_ms.mean / 1000.0,
                    paper_s: r.plt_s,
                    measured_change,
                    paper_change: r.change,
                    source: r.source.to_string(),
                })
            })
            .collect()
    }

    /// The run beside the papers as text; empty when no page and configuration of the run
    /// has a reference.
    pub fn paper_table(&self) -> String {
        if self.paper.is_empty() {
            return String::new();
        }
        let mut t = format!(
            "Beside the papers (profile {}; change vs http11, the paper's against its own http11 load)\n\
             {:<20}{:<18}{:>10}{:>9}{:>9}{:>10}{:>8}  source\n",
            self.profile, "page", "config", "PLT s", "paper s", "÷ paper", "change", "paper"
        );
        for r in &self.paper {
            let [paper_s, ratio, change, paper_change] = r.cells("%");
            t += &format!(
                "{:<20}{:<18}{:>10.1}{:>9}{:>9}{:>10}{:>8}  {}\n",
                r.page, r.config, r.measured_s, paper_s, ratio, change, paper_change, r.source
            );
        }
        t
    }

    fn configs_in_order(&self) -> Vec<String> {
        let mut c: Vec<String> = Vec::new();
        for s in &self.summary {
            if !c.contains(&s.config) {
                c.push(s.config.clone());
            }
        }
        c
    }

    /// Mean of per-page mean PLTs (ms) of `config` over `pages`; None if a page is missing.
    fn mean_plt(&self, config: &str, pages: &[String]) -> Option<f64> {
        let v: Option<Vec<f64>> = pages
            .iter()
            .map(|p| {
                self.summary
                    .iter()
                    .find(|s| &s.page == p && s.config == config)
                    .map(|s| s.plt_ms.mean)
            })
            .collect();
        let v = v?;
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    }

    fn pages(&self) -> Vec<String> {
        let mut p: Vec<String> = Vec::new();
        for s in &self.summary {
            if !p.contains(&s.page) {
                p.push(s.page.clone());
            }
        }
        p
    }

    /// Downstream and upstream air bytes summed over the pages (means per page), per config.
    pub fn air_totals(&self) -> Vec<AirTotal> {
        type Field = fn(&SummaryRecord) -> f64;
        let air_down: Field = |s| s.air_down_bytes.mean;
        let bodies: Field = |s| s.body_bytes.mean;
        let total = |c: &str, f: Field| -> f64 {
            self.summary.iter().filter(|s| s.config == c).map(f).sum()
        };
        let base_down = total(&self.baseline, air_down);
        let pages = self.pages();
        // The mean over the pages of baseline ÷ config (pages missing either are skipped).
        let mean_factor = |c: &str, f: Field| -> Option<f64> {
            let of = |p: &String, c: &str| {
                self.summary
                    .iter()
                    .find(|s| &s.page == p && s.config == c)
                    .map(f)
            };
            let factors: Vec<f64> = pages
                .iter()
                .filter_map(|p| match (of(p, &self.baseline), of(p, c)) {
                    (Some(b), Some(x)) if b > 0.0 && x > 0.0 => Some(b / x),
                    _ => None,
                })
                .collect();
            (!factors.is_empty()).then(|| factors.iter().sum::<f64>() / factors.len() as f64)
        };
        self.configs_in_order()
            .into_iter()
            .map(|c| {
                let d = total(&c, air_down);
                AirTotal {
                    mean_page_factor: mean_factor(&c, air_down),
                    payload_page_factor: mean_factor(&c, bodies),
                    down_reduction_factor: (d > 0.0 && base_down > 0.0).then(|| base_down / d),
                    down_bytes: d,
                    up_bytes: total(&c, |s| s.air_up_bytes.mean),
                    body_bytes: total(&c, bodies),
                    head_bytes: total(&c, |s| s.head_bytes.mean),
                    config: c,
                }
            })
            .collect()
    }

    /// Ablations: every configuration named `FULL-no-SWITCH` (or `FULL-plain`, everything
    /// off) whose `FULL` is in the run, against the baseline, over the pages all three share.
    pub fn ablations(&self) -> Vec<AblationRow> {
        let configs = self.configs_in_order();
        let pages = self.pages();
        let mut rows = Vec::new();
        for c in &configs {
            let (full, switch) = if let Some((f, s)) = c.rsplit_once("-no-") {
                (f.to_string(), s.to_string())
            } else if let Some(f) = c.strip_suffix("-plain") {
                (f.to_string(), "all".to_string())
            } else {
                continue;
            };
            if !configs.contains(&full) {
                continue;
            }
            let (Some(b), Some(f), Some(w)) = (
                self.mean_plt(&self.baseline, &pages),
                self.mean_plt(&full, &pages),
                self.mean_plt(c, &pages),
            ) else {
                continue;
            };
            let gain = b - f;
            rows.push(AblationRow {
                full,
                switch,
                baseline_s: b / 1000.0,
                full_s: f / 1000.0,
                without_s: w / 1000.0,
                share_of_gain: if gain.abs() > f64::EPSILON {
                    (w - f) / gain
                } else {
                    0.0
                },
            });
        }
        rows
    }

    /// Which pages' hosts the browser moved to https by itself, and under which
    /// configurations: `(page, hosts, configs)` in the order the loads ran. Through a proxy
    /// those requests are CONNECT tunnels, so a configuration's result on such a page is not
    /// the proxy's work.
    pub fn tls_upgrades(&self) -> Vec<(&str, Vec<&str>, Vec<&str>)> {
        let mut rows: Vec<(&str, Vec<&str>, Vec<&str>)> = Vec::new();
        for l in self.loads.iter().filter(|l| !l.tls_upgrades.is_empty()) {
            let i = match rows.iter().position(|r| r.0 == l.page) {
                Some(i) => i,
                None => {
                    rows.push((&l.page, Vec::new(), Vec::new()));
                    rows.len() - 1
                }
            };
            let (_, hosts, configs) = &mut rows[i];
            for h in &l.tls_upgrades {
                if !hosts.contains(&h.as_str()) {
                    hosts.push(h);
                }
            }
            if !configs.contains(&l.config.as_str()) {
                configs.push(&l.config);
            }
        }
        rows
    }

    /// [`Results::tls_upgrades`] as text, empty when the browser upgraded nothing.
    pub fn tls_upgrade_note(&self) -> String {
        let rows = self.tls_upgrades();
        if rows.is_empty() {
            return String::new();
        }
        let mut t = format!("{TLS_UPGRADES_HEAD}:\n");
        for (page, hosts, configs) in rows {
            t += &format!("  {page}: {} ({})\n", hosts.join(", "), configs.join(", "));
        }
        t
    }

    /// Air bytes per configuration as text.
    pub fn air_table(&self) -> String {
        let mut t = format!(
            "Air bytes over all pages (sum of per-page means), vs {}; per page ÷: the mean of the pages' factors; \
             bodies and heads: HTTP response bodies (as coded) and heads inside the air bytes; \
             payload ÷: the bodies' factor per page, as 000 Table 3 and 003 count compression\n\
             {:<24}{:>12}{:>10}{:>10}{:>12}{:>12}{:>10}{:>12}\n",
            self.baseline,
            "config",
            "down KiB",
            "up KiB",
            "down ÷",
            "per page ÷",
            "bodies KiB",
            "heads KiB",
            "payload ÷"
        );
        let factor = |f: Option<f64>| f.map(|f| format!("×{f:.2}")).unwrap_or_else(|| "-".into());
        for a in self.air_totals() {
            t += &format!(
                "{:<24}{:>12.1}{:>10.1}{:>10}{:>12}{:>12.1}{:>10.1}{:>12}\n",
                a.config,
                a.down_bytes / 1024.0,
                a.up_bytes / 1024.0,
                factor(a.down_reduction_factor),
                factor(a.mean_page_factor),
                a.body_bytes / 1024.0,
                a.head_bytes / 1024.0,
                factor(a.payload_page_factor)
            );
        }
        t
    }

    /// Mean utilization and efficiency over the pages, per configuration (pages weigh
    /// equally, as in the PLT table).
    pub fn link_use(&self) -> Vec<(String, f64, f64)> {
        self.configs_in_order()
            .into_iter()
            .map(|c| {
                let mine: Vec<&SummaryRecord> =
                    self.summary.iter().filter(|s| s.config == c).collect();
                let n = mine.len().max(1) as f64;
                let u = mine.iter().map(|s| s.utilization.mean).sum::<f64>() / n;
                let e = mine.iter().map(|s| s.efficiency.mean).sum::<f64>() / n;
                (c, u, e)
            })
            .collect()
    }

    /// Link use per configuration as text.
    pub fn link_table(&self) -> String {
        let mut t = format!(
            "Link use, mean over the pages ({:.1} kbit/s down, idle RTT {:.2} s): utilization = air bits down ÷ (rate × PLT); \
             efficiency = (idle RTT + body bits ÷ rate) ÷ PLT\n{:<24}{:>13}{:>12}\n",
            self.link_down_kbps,
            self.link_rtt_ms / 1000.0,
            "config",
            "utilization",
            "efficiency"
        );
        for (c, u, e) in self.link_use() {
            t += &format!("{:<24}{:>12.0}%{:>11.0}%\n", c, u * 100.0, e * 100.0);
        }
        t
    }

    /// The ablation table as text; empty when the run has no ablations.
    pub fn ablation_table(&self) -> String {
        let rows = self.ablations();
        if rows.is_empty() {
            return String::new();
        }
        let mut t = format!(
            "Ablation (mean PLT over the pages, s; share = (without − full) ÷ ({} − full))\n{:<14}{:<16}{:>10}{:>10}{:>10}{:>10}\n",
            self.baseline, "full", "switch off", "baseline", "full", "without", "share"
        );
        for r in rows {
            t += &format!(
                "{:<14}{:<16}{:>10.1}{:>10.1}{:>10.1}{:>9.0}%\n",
                r.full,
                r.switch,
                r.baseline_s,
                r.full_s,
                r.without_s,
                r.share_of_gain * 100.0
            );
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(page: &str, config: &str, plt: f64) -> LoadRecord {
        LoadRecord {
            page: page.into(),
            config: config.into(),
            profile: "gprs".into(),
            repeat: 0,
            plt_ms: plt,
            air_down_bytes: 1000,
            air_up_bytes: 100,
            objects: 3,
            inlined: 0,
            errors: 0,
            breakdown_ms: BreakdownMs {
                dns: 1.0,
                connect: 2.0,
                idle: 3.0,
                payload: plt - 6.0,
            },
            body_bytes: 800,
            head_bytes: 150,
            utilization: 0.0,
            bound_ms: 0.0,
            efficiency: 0.0,
            har: String::new(),
            tls_upgrades: Vec::new(),
        }
    }

    /// A run over gprs-like facts (38 kbit/s, 2 s idle RTT) with `http11` as baseline.
    fn results_of(loads: Vec<LoadRecord>) -> Results {
        Results {
            profile: "gprs".into(),
            time_scale: 1.0,
            seed: 1,
            baseline: "http11".into(),
            link_down_kbps: 38.0,
            link_rtt_ms: 2_000.0,
            configs: BTreeMap::new(),
            summary: summarize(&loads, "http11"),
            loads,
            air_totals: Vec::new(),
            ablations: Vec::new(),
            paper: Vec::new(),
        }
    }

    #[test]
    fn link_use_is_air_over_capacity_and_bound_over_plt() {
        // 38 kbit/s for 10 s carries 47,500 bytes; 23,750 of them is half the capacity.
        let u = LinkUse::of(10_000.0, 23_750, 19_000, 38.0, 2_000.0);
        assert!((u.utilization - 0.5).abs() < 1e-9, "{u:?}");
        // 19,000 bytes take 4 s at 38 kbit/s; with the 2 s RTT the bound is 6 s of 10.
        assert!((u.bound_ms - 6_000.0).abs() < 1e-9, "{u:?}");
        assert!((u.efficiency - 0.6).abs() < 1e-9, "{u:?}");
        // No PLT or no rate: zeros, not infinities.
        assert_eq!(LinkUse::of(0.0, 1, 1, 38.0, 1.0).efficiency, 0.0);
        assert_eq!(LinkUse::of(1.0, 1, 1, 0.0, 1.0).utilization, 0.0);
    }

    #[test]
    fn link_use_is_summarized_and_tabled_per_config() {
        let mut loads = vec![
            load("a", "http11", 10_000.0),
            load("a", "http11", 10_000.0),
            load("b", "http11", 10_000.0),
            load("a", "explicit", 5_000.0),
        ];
        for (l, (u, e)) in loads
            .iter_mut()
            .zip([(0.2, 0.3), (0.4, 0.5), (0.6, 0.1), (0.5, 0.9)])
        {
            l.utilization = u;
            l.efficiency = e;
        }
        let r = results_of(loads);
        let a = r
            .summary
            .iter()
            .find(|s| s.page == "a" && s.config == "http11")
            .unwrap();
        assert!((a.utilization.mean - 0.3).abs() < 1e-9);
        assert!((a.efficiency.mean - 0.4).abs() < 1e-9);
        // Pages weigh equally: http11 is (0.3 + 0.6) / 2 and (0.4 + 0.1) / 2.
        let lu = r.link_use();
        assert_eq!(lu[0].0, "http11");
        assert!(
            (lu[0].1 - 0.45).abs() < 1e-9 && (lu[0].2 - 0.25).abs() < 1e-9,
            "{lu:?}"
        );
        assert!(
            (lu[1].1 - 0.5).abs() < 1e-9 && (lu[1].2 - 0.9).abs() < 1e-9,
            "{lu:?}"
        );
        let t = r.link_table();
        assert!(
            t.contains("38.0 kbit/s") && t.contains("idle RTT 2.00 s"),
            "{t}"
        );
        assert!(
            t.lines()
                .any(|l| l.starts_with("explicit") && l.contains("50%") && l.contains("90%")),
            "{t}"
        );
    }

    #[test]
    fn stats_are_right() {
        let s = Stats::of(&[1.0, 2.0, 3.0, 4.0]);
        assert_eq!(s.mean, 2.5);
        assert_eq!(s.median, 2.5);
        assert!((s.sd - 1.2909944).abs() < 1e-6);
        assert_eq!(Stats::of(&[5.0]).sd, 0.0);
    }

    #[test]
    fn summary_ratios_to_baseline() {
        let loads = vec![
            load("cnn", "http11", 100.0),
            load("cnn", "http11", 120.0),
            load("cnn", "pipelining", 55.0),
            load("cnn", "pipelining", 55.0),
        ];
        let s = summarize(&loads, "http11");
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].plt_ratio_to_baseline, Some(1.0));
        assert!((s[1].plt_reduction.unwrap() - 0.5).abs() < 1e-9);
        let t = results_of(loads).table();
        assert!(t.contains("cnn") && t.contains("-50%"), "{t}");
    }

    #[test]
    fn changes_are_paired_by_repeat_with_an_interval() {
        let mut loads = Vec::new();
        // The baseline swings with the link (an outage in repeat 1); the proxy halves each.
        for (r, (base, cfg)) in [(100.0, 50.0), (200.0, 110.0), (120.0, 57.0)]
            .into_iter()
            .enumerate()
        {
            let mut b = load("cnn", "http11", base);
            b.repeat = r;
            let mut c = load("cnn", "explicit", cfg);
            c.repeat = r;
            loads.extend([b, c]);
        }
        let s = summarize(&loads, "http11");
        assert_eq!(s[0].plt_change_paired, None);
        let p = s[1].plt_change_paired.unwrap();
        assert_eq!(p.n, 3);
        // Ratios 0.5, 0.55, 0.475: mean change −49.17 %, sd 3.82 %, t(2) = 4.303.
        assert!((p.mean + 0.491_667).abs() < 1e-5, "{p:?}");
        let [lo, hi] = p.ci95.unwrap();
        let half = 4.303 * 0.038_188 / 3f64.sqrt();
        assert!((lo - (p.mean - half)).abs() < 1e-4 && (hi - (p.mean + half)).abs() < 1e-4);
        // The unpaired means' spread is far wider than the paired one.
        assert!(s[0].plt_ms.sd / s[0].plt_ms.mean > 0.3);
        let r = results_of(loads);
        let t = r.paired_table();
        assert!(t.contains("-49% [-59, -40]"), "{t}");
        // One repeat: a change, no interval, and no paired table.
        let one = vec![load("a", "http11", 100.0), load("a", "explicit", 60.0)];
        let s = summarize(&one, "http11");
        assert_eq!(s[1].plt_change_paired.unwrap().ci95, None);
        assert_eq!(results_of(one).paired_table(), "");
        assert!((t975(1) - 12.706).abs() < 1e-9 && (t975(100) - 1.984).abs() < 0.002);
    }

    #[test]
    fn ablation_shares_and_air_factors() {
        let mut loads = vec![
            load("a", "http11", 100.0),
            load("a", "explicit", 40.0),
            load("a", "explicit-no-compress", 70.0),
            load("a", "explicit-plain", 90.0),
        ];
        loads[1].air_down_bytes = 250;
        loads[1].body_bytes = 100;
        let r = results_of(loads).finish();
        let ab = r.ablations();
        assert_eq!(ab.len(), 2);
        assert_eq!(ab[0].switch, "compress");
        assert!((ab[0].share_of_gain - 0.5).abs() < 1e-9);
        assert_eq!(ab[1].switch, "all");
        assert!((ab[1].share_of_gain - 50.0 / 60.0).abs() < 1e-9);
        let air = r.air_totals();
        assert_eq!(air[1].config, "explicit");
        assert_eq!(air[1].down_reduction_factor, Some(4.0));
        assert_eq!(air[1].mean_page_factor, Some(4.0));
        // Bodies shrank 8×, the air bytes 4× (heads and TCP/IP are not compressed).
        assert_eq!(air[1].payload_page_factor, Some(8.0));
        assert_eq!(air[1].body_bytes, 100.0);
        assert_eq!(air[1].head_bytes, 150.0);
        assert!(r.air_table().contains("×8.00"), "{}", r.air_table());
        assert!(r.ablation_table().contains("compress"));
    }

    #[test]
    fn runs_over_gprs_are_set_beside_the_papers() {
        let mut loads = Vec::new();
        for (r, (base, pipe)) in [(34_000.0, 17_000.0), (36_000.0, 27_000.0)]
            .into_iter()
            .enumerate()
        {
            for (config, plt) in [("http11", base), ("pipelining", pipe)] {
                let mut l = load("mail", config, plt);
                l.repeat = r;
                loads.push(l);
            }
            // No paper measured these.
            let mut l = load("session-cnn", "http11", base);
            l.repeat = r;
            loads.push(l);
        }
        let r = results_of(loads.clone()).finish();
        assert_eq!(r.paper.len(), 2, "{:?}", r.paper);
        let (own, pipe) = (&r.paper[0], &r.paper[1]);
        assert_eq!((own.config.as_str(), own.paper_s), ("http11", Some(34.5)));
        assert_eq!(own.measured_s, 35.0);
        assert_eq!(pipe.source, "000 Table 6, Pipel.");
        // Paired by repeat: (17/34 − 1 + 27/36 − 1) ÷ 2 = −0.375; the paper's is 15.2/34.5 − 1.
        assert!((pipe.measured_change.unwrap() + 0.375).abs() < 1e-9);
        assert!((pipe.paper_change - (15.2 / 34.5 - 1.0)).abs() < 1e-9);
        let t = r.paper_table();
        assert!(
            t.contains("pipelining") && t.contains("-38%") && t.contains("-56%"),
            "{t}"
        );
        assert!(!t.contains("session-cnn"), "{t}");
        // Another link is not the papers' link.
        let mut other = results_of(loads);
        other.profile = "cdma-1x".into();
        let other = other.finish();
        assert!(other.paper.is_empty());
        assert_eq!(other.paper_table(), "");
    }
}
