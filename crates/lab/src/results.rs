//! `results.json` (DESIGN §7.5): one record per page load, and a summary per (page, config).
//! Every time is unscaled (what the real link would show).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use webpep_link_model::profile::Rate;
use webpep_link_model::Trace;

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
    /// Air bytes of the load: from its start to its end (the last byte for the browser
    /// model, the load event for Chromium).
    pub air_down_bytes: u64,
    pub air_up_bytes: u64,
    /// Air bytes after the load's end, not part of it (Chromium's requests after its load
    /// event; 0 for the browser model, which requests nothing after its last byte).
    #[serde(default)]
    pub late_down_bytes: u64,
    #[serde(default)]
    pub late_up_bytes: u64,
    /// Objects the browser fetched.
    pub objects: usize,
    /// Stylesheets, scripts and images webpep's edge proxy copied into the load's pages
    /// (`[inline]`), which the browser did not fetch: `objects + inlined` is the page's count.
    #[serde(default)]
    pub inlined: usize,
    pub errors: usize,
    /// The page's objects (the corpus's, one per URL: an http:// and https:// twin count
    /// once), so that objects the browser requested + `inlined` + `missing` = this.
    #[serde(default)]
    pub page_objects: usize,
    /// The page's objects the browser did not request (issue 36: no silent losses), and
    /// their count by why: the browser model's reasons (`not used`, `not reached`, `redirect
    /// not followed`, `over max objects`, `nested too deep`), else `not referenced` (nothing
    /// the model parsed refers to it: a script makes that request), or `not requested by the
    /// browser` for
    /// real Chromium, which does not say.
    #[serde(default)]
    pub missing: usize,
    #[serde(default)]
    pub missing_why: BTreeMap<String, usize>,
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
    /// With the dual proxy: how the browser used webpep client during the load.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_proxy: Option<ClientProxyUse>,
}

/// How the browser used webpep client during one load (counted by the client).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ClientProxyUse {
    /// Connections the browser opened to the client.
    pub connections: u64,
    /// Of those, HTTP/2 connections (the client's HTTPS port).
    pub h2_connections: u64,
    /// The most requests the client had waiting on the edge at once.
    pub peak_in_flight: u64,
}

impl ClientProxyUse {
    /// Counted from `c`'s state before the load (`connections`, `h2_connections`) to now.
    pub fn since(c: &webpep_client::BrowserCounters, connections: u64, h2: u64) -> Self {
        ClientProxyUse {
            connections: c.connections() - connections,
            h2_connections: c.h2_connections() - h2,
            peak_in_flight: c.peak_in_flight(),
        }
    }
}

impl LoadRecord {
    /// The load lost objects (errors) or left some of the page's objects unrequested: its
    /// PLT and bytes are not those of the whole page.
    pub fn incomplete(&self) -> bool {
        self.errors > 0 || self.missing > 0
    }
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
    /// From a load's PLT, downstream air bytes and body bytes, the link's down rate and its
    /// idle RTT (ms). A constant rate gives capacity = rate × PLT and a bound of RTT + body
    /// bits ÷ rate. A trace is read as it was replayed from the load's start (the link
    /// restarts before each load): capacity is what the trace offered during the PLT, and the
    /// bound is the RTT plus the time the trace took to offer the body bytes, so a load that
    /// met a fast stretch of the trace is not measured against its mean. A load without a PLT
    /// or a link without a rate gives zeros.
    pub fn of(
        plt_ms: f64,
        air_down_bytes: u64,
        body_bytes: u64,
        down: &Rate,
        rtt_ms: f64,
    ) -> LinkUse {
        let zero = LinkUse {
            utilization: 0.0,
            bound_ms: 0.0,
            efficiency: 0.0,
        };
        if !(plt_ms > 0.0 && down.mean_kbps() > 0.0) {
            return zero;
        }
        let capacity_bits = match down {
            // kbit/s = bits per ms.
            Rate::Kbps(k) => k * plt_ms,
            Rate::Trace(t) => t.bytes_between(0, plt_ms.ceil() as u64) as f64 * 8.0,
        };
        if capacity_bits <= 0.0 {
            return zero;
        }
        // The bodies as the browser got them may be larger than what crossed the air (the
        // device's client undoes a coding the browser does not take): the bound is on the
        // bytes the link had to carry.
        let bound_ms = LinkUse::bound_ms(body_bytes.min(air_down_bytes), down, rtt_ms);
        LinkUse {
            utilization: air_down_bytes as f64 * 8.0 / capacity_bits,
            bound_ms,
            efficiency: bound_ms / plt_ms,
        }
    }
}

impl LinkUse {
    /// The physical bound (ms) for `bytes` of bodies over a link of `down` and idle RTT
    /// `rtt_ms`: the RTT plus the time the link takes to offer the bytes (at the rate, or as
    /// the trace offers them from its start). Infinite for a link without a rate.
    pub fn bound_ms(bytes: u64, down: &Rate, rtt_ms: f64) -> f64 {
        let transfer_ms = match down {
            Rate::Kbps(k) if *k > 0.0 => bytes as f64 * 8.0 / k,
            Rate::Kbps(_) => f64::INFINITY,
            Rate::Trace(t) => trace_time_to_offer(t, bytes),
        };
        rtt_ms.max(0.0) + transfer_ms
    }
}

/// The least time (ms) from the trace's start by which it has offered `bytes`.
fn trace_time_to_offer(t: &Trace, bytes: u64) -> f64 {
    if bytes == 0 {
        return 0.0;
    }
    // bytes_between(0, x) is non-decreasing in x; the trace loops, so some x suffices.
    let (mut lo, mut hi) = (0u64, 1u64);
    while t.bytes_between(0, hi) < bytes {
        lo = hi;
        hi = hi.saturating_mul(2);
        if hi == u64::MAX {
            return f64::INFINITY;
        }
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if t.bytes_between(0, mid) >= bytes {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    // Opportunities before `hi` ms suffice, so the last of them is at hi − 1 ms or earlier.
    (hi - 1) as f64
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
            // A load cannot take less than no time: a change below −100 % is impossible.
            [(s.mean - half).max(-1.0), s.mean + half]
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
    /// The page's objects its loads did not request, summed (see [`LoadRecord::missing`]).
    #[serde(default)]
    pub missing: usize,
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
    /// Pages a configuration could not load at all (e.g. URL rewriting of an https page),
    /// with why; the run went on without them.
    #[serde(default)]
    pub not_applicable: Vec<NotApplicable>,
    /// False while the run is still going (the file is rewritten after every load, so an
    /// interrupted run keeps what it measured).
    #[serde(default = "finished_run")]
    pub complete: bool,
    /// Every repeat met the same link (`--same-link`: the draws of repeat 1) instead of its
    /// own: the spread across repeats is then what the link did not decide.
    #[serde(default)]
    pub same_link: bool,
    /// How much the loads of one page and configuration differed across repeats (filled by
    /// [`Results::finish`]; none with one load per cell).
    #[serde(default)]
    pub repeat_spread: Option<RepeatSpread>,
}

/// How much repeats of one page and configuration differ: the PLT's coefficient of
/// variation (sd ÷ mean) over each cell's loads, its median over the cells and its largest.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RepeatSpread {
    /// Cells (page, configuration) with 2 loads or more.
    pub cells: usize,
    pub median_cv: f64,
    pub max_cv: f64,
    /// The cell of the largest.
    pub max_page: String,
    pub max_config: String,
}

fn finished_run() -> bool {
    true
}

/// What a run is, apart from its loads: the link, the time scale, the seed, the baseline and
/// the configurations (name → description).
#[derive(Clone, Debug, PartialEq)]
pub struct RunInfo {
    pub profile: String,
    pub time_scale: f64,
    pub seed: u64,
    pub baseline: String,
    pub link_down_kbps: f64,
    pub link_rtt_ms: f64,
    pub configs: BTreeMap<String, String>,
}

/// A page a configuration could not load, and why (its loads are not in `loads`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotApplicable {
    pub page: String,
    pub config: String,
    pub reason: String,
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
                missing: mine.iter().map(|l| l.missing).sum(),
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

impl SummaryRecord {
    /// A load of this cell lost objects or left some unrequested ([`LoadRecord::incomplete`]).
    pub fn incomplete(&self) -> bool {
        self.errors > 0 || self.missing > 0
    }
}

impl Results {
    /// The PLT table: mean PLT (s) per page and configuration with the change against the
    /// baseline; `± sd` only where a cell has 2 loads or more (one load has no spread), `!`
    /// on a cell whose loads lost objects, with a note under the table saying which.
    pub fn table(&self) -> String {
        let configs = order(self.summary.iter().map(|s| &s.config));
        let spread = self.summary.iter().any(|s| s.plt_ms.n >= 2);
        let head = format!(
            "PLT in seconds, {}; change vs {} (profile {}, link time unscaled)",
            if spread {
                "mean ± sd over the loads"
            } else {
                "one load per page and configuration"
            },
            self.baseline,
            self.profile
        );
        let mut t = self.grid(&head, &configs, |s| {
            let sd = if s.plt_ms.n >= 2 {
                format!("±{:.1}", s.plt_ms.sd / 1000.0)
            } else {
                String::new()
            };
            let change = match s.plt_reduction {
                Some(r) if s.config != self.baseline => format!(" {:+.0}%", -r * 100.0),
                _ => String::new(),
            };
            Some(format!(
                "{:.1}{sd}{}{change}",
                s.plt_ms.mean / 1000.0,
                error_mark(s)
            ))
        });
        t += &self.error_note();
        t += &self.spread_note();
        t
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
        let mut t = self.grid(&head, &configs, |s| {
            s.plt_change_paired
                .map(|x| format!("{}{}", x.text(), error_mark(s)))
        });
        if self
            .summary
            .iter()
            .any(|s| s.incomplete() && s.config != self.baseline)
        {
            t += ERROR_MARK_NOTE;
        }
        t
    }

    /// A page × configuration table under `head` within [`CONSOLE_WIDTH`]: pages as rows when
    /// the configurations fit across, else configurations as rows and pages across, else in
    /// blocks of columns (the orientation needing fewer), so that a run of many pages or
    /// configurations never wraps on a terminal. "-" where the run has no load.
    fn grid(
        &self,
        head: &str,
        configs: &[&String],
        cell: impl Fn(&SummaryRecord) -> Option<String>,
    ) -> String {
        let pages = order(self.summary.iter().map(|s| &s.page));
        let text = |p: &String, c: &String| {
            self.summary
                .iter()
                .find(|s| &s.page == p && &s.config == c)
                .and_then(&cell)
                .unwrap_or_else(|| "-".into())
        };
        let by_page: Vec<Vec<String>> = pages
            .iter()
            .map(|p| configs.iter().map(|c| text(p, c)).collect())
            .collect();
        let mut by_config: Vec<Vec<String>> = (0..configs.len())
            .map(|j| by_page.iter().map(|row| row[j].clone()).collect())
            .collect();
        // The last column: each row's loads that lost objects or left some unrequested.
        let errors = ERRORS_COLUMN.to_string();
        let by_page: Vec<Vec<String>> = pages
            .iter()
            .zip(by_page)
            .map(|(p, mut row)| {
                row.push(self.errors_cell(|l| &l.page == *p && configs.contains(&&l.config)));
                row
            })
            .collect();
        for (c, row) in configs.iter().zip(by_config.iter_mut()) {
            row.push(self.errors_cell(|l| &l.config == *c && pages.contains(&&l.page)));
        }
        let cols_across: Vec<&String> = configs.iter().copied().chain([&errors]).collect();
        let cols_down: Vec<&String> = pages.iter().copied().chain([&errors]).collect();
        let across = fit("page", &pages, &cols_across, &by_page);
        let down = fit("config", configs, &cols_down, &by_config);
        let blocks = if across.len() <= down.len() {
            across
        } else {
            down
        };
        wrap(head, CONSOLE_WIDTH) + &blocks.join("\n")
    }

    /// The error column's cell for the loads `mine` picks: those that lost objects or left
    /// some of the page's unrequested, of all (`1/4`), or `0` when none did.
    pub fn errors_cell(&self, mine: impl Fn(&LoadRecord) -> bool) -> String {
        let (bad, all) = self
            .loads
            .iter()
            .filter(|l| mine(l))
            .fold((0, 0), |(b, a), l| (b + usize::from(l.incomplete()), a + 1));
        if bad == 0 {
            "0".into()
        } else {
            format!("{bad}/{all}")
        }
    }

    /// [`Results::errors_cell`] for an ablation row's three configurations.
    pub fn ablation_errors(&self, r: &AblationRow) -> String {
        let without = if r.switch == "all" {
            format!("{}-plain", r.full)
        } else {
            format!("{}-no-{}", r.full, r.switch)
        };
        self.errors_cell(|l| [&self.baseline, &r.full, &without].contains(&&l.config))
    }

    /// Loads that lost objects (network or protocol failures, HTTP errors) or left some of
    /// the page's objects unrequested.
    fn error_loads(&self) -> Vec<&LoadRecord> {
        self.loads.iter().filter(|l| l.incomplete()).collect()
    }

    /// The note under the PLT table when loads lost objects: how many, and where; empty when
    /// none did.
    pub fn error_note(&self) -> String {
        let bad = self.error_loads();
        if bad.is_empty() {
            return String::new();
        }
        let mut cells: Vec<(String, usize)> = Vec::new();
        for l in &bad {
            let k = format!("{} {}", l.page, l.config);
            match cells.iter_mut().find(|(c, _)| *c == k) {
                Some((_, n)) => *n += 1,
                None => cells.push((k, 1)),
            }
        }
        const SHOWN: usize = 6;
        let mut list: Vec<String> = cells
            .iter()
            .take(SHOWN)
            .map(|(c, n)| {
                if *n > 1 {
                    format!("{c} ×{n}")
                } else {
                    c.clone()
                }
            })
            .collect();
        if cells.len() > SHOWN {
            list.push(format!("{} more", cells.len() - SHOWN));
        }
        let objects: usize = bad.iter().map(|l| l.errors).sum();
        let mut why: BTreeMap<&str, usize> = BTreeMap::new();
        for l in &bad {
            for (w, n) in &l.missing_why {
                *why.entry(w.as_str()).or_default() += n;
            }
        }
        let missing: usize = why.values().sum();
        let list = list.join(", ");
        let lost = if missing == 0 {
            format!("had errors ({objects} objects lost in all: {list})")
        } else {
            let why: Vec<String> = why.iter().map(|(w, n)| format!("{n} {w}")).collect();
            format!(
                "had errors or left objects of the page unrequested ({objects} lost; {missing} \
                 not requested, why: {}; in {list})",
                why.join(", ")
            )
        };
        wrap(
            &format!(
                "! {} of {} loads {lost}: their PLT and bytes are not those of the whole page; \
                 results.json and the HARs say which objects",
                bad.len(),
                self.loads.len(),
            ),
            CONSOLE_WIDTH,
        )
    }

    /// `subject` against `baseline` over the pages both loaded (with a PLT): the bottom line
    /// of a run. A page where a load of either lost objects or left some unrequested is left
    /// out of the factors (counted in `left_out`), unless every page is: then the factors
    /// count them and the caveats say so. None when they share no page.
    pub fn bottom_line(&self, baseline: &str, subject: &str) -> Option<Comparison> {
        let of = |p: &String, c: &str| {
            self.summary
                .iter()
                .find(|s| &s.page == p && s.config == c && s.plt_ms.mean > 0.0)
        };
        let run_pages = self.pages();
        let shared: Vec<(&SummaryRecord, &SummaryRecord)> = run_pages
            .iter()
            .filter_map(|p| Some((of(p, baseline)?, of(p, subject)?)))
            .collect();
        if shared.is_empty() {
            return None;
        }
        let whole: Vec<(&SummaryRecord, &SummaryRecord)> = shared
            .iter()
            .copied()
            .filter(|(b, s)| !b.incomplete() && !s.incomplete())
            .collect();
        let all_incomplete = whole.is_empty();
        let pairs = if all_incomplete {
            shared.clone()
        } else {
            whole
        };
        // The geometric mean of the per-page ratios: each page weighs the same whatever its
        // size, and a 2× gain on one page and a 2× loss on another cancel out.
        let log_sum: f64 = pairs
            .iter()
            .map(|(b, s)| (b.plt_ms.mean / s.plt_ms.mean).ln())
            .sum();
        let speedup = (log_sum / pairs.len() as f64).exp();
        let (b_air, s_air) = pairs.iter().fold((0.0, 0.0), |(b, s), (x, y)| {
            (b + x.air_down_bytes.mean, s + y.air_down_bytes.mean)
        });
        let loads: Vec<&LoadRecord> = self
            .loads
            .iter()
            .filter(|l| {
                (l.config == baseline || l.config == subject)
                    && shared.iter().any(|(b, _)| b.page == l.page)
            })
            .collect();
        Some(Comparison {
            baseline: baseline.to_string(),
            subject: subject.to_string(),
            left_out: shared.len() - pairs.len(),
            all_incomplete,
            pages: pairs.len(),
            run_pages: run_pages.len(),
            speedup,
            air_factor: (b_air > 0.0 && s_air > 0.0).then(|| b_air / s_air),
            error_loads: loads.iter().filter(|l| l.incomplete()).count(),
            loads: loads.len(),
            repeats: pairs
                .iter()
                .flat_map(|(b, s)| [b.plt_ms.n, s.plt_ms.n])
                .min()
                .unwrap_or(0),
        })
    }
}

/// One configuration against another over a run's pages ([`Results::bottom_line`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Comparison {
    pub baseline: String,
    pub subject: String,
    /// Pages the factors are over, and the pages of the run.
    pub pages: usize,
    /// Pages both loaded but left out of the factors, since a load of either lost objects or
    /// left some unrequested.
    pub left_out: usize,
    /// Every page both loaded had such a load: the factors count them (marked).
    pub all_incomplete: bool,
    pub run_pages: usize,
    /// The baseline's PLT ÷ the subject's: the geometric mean over the pages of the ratios
    /// of their mean PLTs (equal to the ratio of the geometric means); above 1, the subject
    /// is faster.
    pub speedup: f64,
    /// The baseline's air bytes down ÷ the subject's, each summed over those pages (means
    /// per page); above 1, the subject sent fewer. None when either measured none.
    pub air_factor: Option<f64>,
    /// Loads of either configuration on the pages both loaded that lost objects or left
    /// some unrequested, and all their loads there.
    pub error_loads: usize,
    pub loads: usize,
    /// The fewest loads behind one page's mean.
    pub repeats: usize,
}

impl Comparison {
    /// "2.9× faster" (or "1.3× slower", "about as fast").
    pub fn speed_words(&self) -> String {
        factor_words(self.speedup, "faster", "slower", "about as fast")
    }

    /// "2.6× fewer bytes over the air" (or "more", "about as many"); "no air bytes measured"
    /// without a factor.
    pub fn bytes_words(&self) -> String {
        match self.air_factor {
            Some(f) => factor_words(f, "fewer bytes", "more bytes", "about as many bytes")
                .replace("bytes", "bytes over the air"),
            None => "no air bytes measured".into(),
        }
    }

    /// What a reader must know besides the factors: pages missing, loads with errors; empty
    /// when nothing.
    pub fn caveats(&self) -> Vec<String> {
        let mut c = Vec::new();
        let shared = self.pages
            + if self.all_incomplete {
                0
            } else {
                self.left_out
            };
        if shared < self.run_pages {
            c.push(format!("on {} of the {} pages", shared, self.run_pages));
        }
        if self.all_incomplete {
            c.push(format!(
                "{} of its {} loads had errors, marked ! in the tables, on every page: these \
                 factors count them",
                self.error_loads, self.loads
            ));
        } else if self.left_out > 0 {
            c.push(format!(
                "{} page{} left out, where {} of its {} loads had errors, marked ! in the \
                 tables",
                self.left_out,
                if self.left_out == 1 { "" } else { "s" },
                self.error_loads,
                self.loads
            ));
        }
        c
    }
}

/// `f` as a factor in words: "2.9× faster" above 1, "1.3× slower" below (the inverse), and
/// `same` when it rounds to 1.0× either way.
fn factor_words(f: f64, up: &str, down: &str, same: &str) -> String {
    if !f.is_finite() || f <= 0.0 {
        return "not measured".into();
    }
    let (x, word) = if f >= 1.0 { (f, up) } else { (1.0 / f, down) };
    if x < 1.05 {
        same.into()
    } else {
        format!("{x:.1}× {word}")
    }
}

/// The widest line of the console tables: they must read on a terminal of 100 columns.
pub const CONSOLE_WIDTH: usize = 100;

/// The heading of the tables' error column: loads that lost objects or left some of the
/// page unrequested, of the row's loads.
const ERRORS_COLUMN: &str = "errors";

/// The note under a table whose cells carry `!`.
const ERROR_MARK_NOTE: &str =
    "! a load of this cell lost objects (see the note under the PLT table)\n";

/// `!` when the summary's loads lost objects, so that no figure of an incomplete page reads
/// as a clean result.
fn error_mark(s: &SummaryRecord) -> &'static str {
    if s.incomplete() {
        "!"
    } else {
        ""
    }
}

/// Word-wraps each line of `text` to `width` characters (a continuation of an indented line
/// is indented 2 more); every line ends with a newline. A word longer than `width` keeps its
/// own line.
pub fn wrap(text: &str, width: usize) -> String {
    let mut out = String::new();
    for para in text.trim_end_matches('\n').split('\n') {
        let lead = para.chars().take_while(|c| *c == ' ').count();
        let indent = " ".repeat(lead);
        let more = if lead > 0 {
            " ".repeat(lead + 2)
        } else {
            String::new()
        };
        let mut line = indent.clone();
        let mut empty = true;
        for word in para.split_whitespace() {
            let len = line.chars().count();
            if !empty && len + 1 + word.chars().count() > width {
                out += &line;
                out.push('\n');
                line = more.clone();
                empty = true;
            }
            if !empty {
                line.push(' ');
            }
            line += word;
            empty = false;
        }
        out += line.trim_end();
        out.push('\n');
    }
    out
}

/// `s` cut to `max` characters with `…` in the middle, keeping both ends: names of a corpus
/// often differ only at the end (`manual-page-01`, `manual-page-02`).
fn clip(s: &str, max: usize) -> String {
    let n = s.chars().count();
    if n <= max || max < 3 {
        return s.to_string();
    }
    let tail = (max - 1) / 2;
    let head = max - 1 - tail;
    let mut c: String = s.chars().take(head).collect();
    c.push('…');
    c.extend(s.chars().skip(n - tail));
    c
}

/// Rows as aligned text: the first column left-aligned, the others right-aligned, two spaces
/// apart (widths in characters, not bytes: `±` and `×` are 2 bytes).
pub fn columns(rows: &[Vec<String>]) -> String {
    aligned(rows, |j| j == 0)
}

/// [`columns`] with the columns `left` says left-aligned.
fn aligned(rows: &[Vec<String>], left: impl Fn(usize) -> bool) -> String {
    let n = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..n)
        .map(|j| {
            rows.iter()
                .filter_map(|r| r.get(j))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut t = String::new();
    for r in rows {
        let mut line = String::new();
        for (j, c) in r.iter().enumerate() {
            let pad = " ".repeat(widths[j] - c.chars().count());
            if j > 0 {
                line += "  ";
            }
            if left(j) {
                line += c;
                line += &pad;
            } else {
                line += &pad;
                line += c;
            }
        }
        t += line.trim_end();
        t.push('\n');
    }
    t
}

/// Row labels × column labels of `cells` as text blocks that each fit [`CONSOLE_WIDTH`]: as
/// many columns per block as fit beside the row labels (long labels clipped).
fn fit(corner: &str, rows: &[&String], cols: &[&String], cells: &[Vec<String>]) -> Vec<String> {
    let labels: Vec<String> = rows.iter().map(|r| clip(r, 32)).collect();
    let label_w = labels
        .iter()
        .map(|l| l.chars().count())
        .chain([corner.chars().count()])
        .max()
        .unwrap_or(0);
    let heads: Vec<String> = cols
        .iter()
        .enumerate()
        .map(|(j, c)| {
            let cell_w = cells
                .iter()
                .map(|r| r[j].chars().count())
                .max()
                .unwrap_or(0);
            clip(c, cell_w.max(18))
        })
        .collect();
    let col_w: Vec<usize> = (0..cols.len())
        .map(|j| {
            cells
                .iter()
                .map(|r| r[j].chars().count())
                .chain([heads[j].chars().count()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    // Greedy: a new block when the next column would cross the width.
    let mut spans: Vec<(usize, usize)> = Vec::new();
    let mut start = 0;
    let mut used = label_w;
    for (j, w) in col_w.iter().enumerate() {
        if j > start && used + 2 + w > CONSOLE_WIDTH {
            spans.push((start, j));
            start = j;
            used = label_w;
        }
        used += 2 + w;
    }
    spans.push((start, cols.len()));
    spans
        .into_iter()
        .map(|(a, b)| {
            let mut t: Vec<Vec<String>> = vec![std::iter::once(corner.to_string())
                .chain(heads[a..b].iter().cloned())
                .collect()];
            for (label, row) in labels.iter().zip(cells) {
                t.push(
                    std::iter::once(label.clone())
                        .chain(row[a..b].iter().cloned())
                        .collect(),
                );
            }
            columns(&t)
        })
        .collect()
}

/// Distinct values in first-seen order.
pub fn order<'a>(v: impl Iterator<Item = &'a String>) -> Vec<&'a String> {
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
    /// The results of a run's loads: the summary against the baseline and the derived tables
    /// ([`Results::finish`]). The runner makes its results this way, as tests do theirs.
    pub fn from_loads(
        info: RunInfo,
        loads: Vec<LoadRecord>,
        not_applicable: Vec<NotApplicable>,
        complete: bool,
    ) -> Results {
        Results {
            summary: summarize(&loads, &info.baseline),
            profile: info.profile,
            time_scale: info.time_scale,
            seed: info.seed,
            baseline: info.baseline,
            link_down_kbps: info.link_down_kbps,
            link_rtt_ms: info.link_rtt_ms,
            configs: info.configs,
            loads,
            air_totals: Vec::new(),
            ablations: Vec::new(),
            paper: Vec::new(),
            not_applicable,
            complete,
            same_link: false,
            repeat_spread: None,
        }
        .finish()
    }

    pub fn finish(mut self) -> Results {
        self.air_totals = self.air_totals();
        self.ablations = self.ablations();
        self.paper = self.paper_rows();
        self.repeat_spread = self.spread();
        self
    }

    /// [`RepeatSpread`] over the summary's cells with 2 loads or more.
    fn spread(&self) -> Option<RepeatSpread> {
        let mut cells: Vec<(f64, &SummaryRecord)> = self
            .summary
            .iter()
            .filter(|s| s.plt_ms.n >= 2 && s.plt_ms.mean > 0.0)
            .map(|s| (s.plt_ms.sd / s.plt_ms.mean, s))
            .collect();
        if cells.is_empty() {
            return None;
        }
        cells.sort_by(|a, b| a.0.total_cmp(&b.0));
        let n = cells.len();
        let median_cv = if n % 2 == 1 {
            cells[n / 2].0
        } else {
            (cells[n / 2 - 1].0 + cells[n / 2].0) / 2.0
        };
        let (max_cv, max) = cells[n - 1];
        Some(RepeatSpread {
            cells: n,
            median_cv,
            max_cv,
            max_page: max.page.clone(),
            max_config: max.config.clone(),
        })
    }

    /// The note on how much repeats differed (under the PLT table); empty with one load per
    /// cell.
    pub fn spread_note(&self) -> String {
        let Some(s) = &self.repeat_spread else {
            return String::new();
        };
        let why = if self.same_link {
            "every repeat met the same link (--same-link), so this is what the link did not \
             decide: the hosts' scheduling and the packets' timing"
        } else {
            "each repeat meets its own link draws (repeat r of every configuration the same); \
             --same-link gives every repeat the same link, to see what the link does not decide"
        };
        wrap(
            &format!(
                "Repeats differ: the PLT of a page and configuration by a median {:.1} % (sd ÷ \
                 mean over its loads, {} cells), at most {:.1} % ({} {}); {why}",
                s.median_cv * 100.0,
                s.cells,
                s.max_cv * 100.0,
                s.max_page,
                s.max_config
            ),
            CONSOLE_WIDTH,
        )
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
        let mut rows = vec![[
            "page",
            "config",
            "PLT s",
            "paper s",
            "÷ paper",
            "change",
            "paper",
            ERRORS_COLUMN,
            "source",
        ]
        .map(String::from)
        .to_vec()];
        let mut marked = false;
        // Sources as numbered notes under the table: the table stays within the width.
        let mut sources: Vec<&str> = Vec::new();
        for r in &self.paper {
            let n = match sources.iter().position(|s| *s == r.source) {
                Some(i) => i + 1,
                None => {
                    sources.push(&r.source);
                    sources.len()
                }
            };
            let [paper_s, ratio, change, paper_change] = r.cells("%");
            let mark = self
                .summary
                .iter()
                .find(|s| s.page == r.page && s.config == r.config)
                .map_or("", error_mark);
            marked |= !mark.is_empty();
            rows.push(vec![
                r.page.clone(),
                r.config.clone(),
                format!("{:.1}{mark}", r.measured_s),
                paper_s,
                ratio,
                change,
                paper_change,
                self.errors_cell(|l| l.page == r.page && l.config == r.config),
                format!("[{n}]"),
            ]);
        }
        let mut t = wrap(
            &format!(
                "Beside the papers (profile {}; change vs http11, the paper's against its own \
                 http11 load)",
                self.profile
            ),
            CONSOLE_WIDTH,
        );
        t += &aligned(&rows, |j| j < 2 || j == 8);
        for (i, s) in sources.iter().enumerate() {
            t += &format!("[{}] {s}\n", i + 1);
        }
        if marked {
            t += ERROR_MARK_NOTE;
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

    /// The run's pages in the order they ran.
    pub fn pages(&self) -> Vec<String> {
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
        wrap(&t, CONSOLE_WIDTH)
    }

    /// The pages configurations could not load, with why (empty when there are none).
    pub fn not_applicable_note(&self) -> String {
        if self.not_applicable.is_empty() {
            return String::new();
        }
        let mut t =
            String::from("Not applicable (not loaded, and left out of every table above):\n");
        for n in &self.not_applicable {
            t += &format!("  {} {}: {}\n", n.page, n.config, n.reason);
        }
        wrap(&t, CONSOLE_WIDTH)
    }

    /// Configurations whose loads lost objects, for the `!` of the per-configuration tables.
    fn config_label(&self, config: &str) -> String {
        let bad = self
            .summary
            .iter()
            .any(|s| s.config == config && s.incomplete());
        format!("{config}{}", if bad { "!" } else { "" })
    }

    /// The note under a per-configuration table when a row has a `!`; empty without.
    fn config_error_note(&self, rows: &[Vec<String>]) -> &'static str {
        if rows.iter().skip(1).any(|r| r[0].ends_with('!')) {
            "! a load of this configuration lost objects (see the note under the PLT table)\n"
        } else {
            ""
        }
    }

    /// Air bytes per configuration as text.
    pub fn air_table(&self) -> String {
        let mut t = wrap(
            &format!(
                "Air bytes over all pages (sum of per-page means), vs {}; per page ÷: the mean \
                 of the pages' factors; bodies and heads: HTTP response bodies (as coded) and \
                 heads inside the air bytes; payload ÷: the bodies' factor per page, as 000 \
                 Table 3 and 003 count compression",
                self.baseline
            ),
            CONSOLE_WIDTH,
        );
        let mut rows = vec![[
            "config",
            "down KiB",
            "up KiB",
            "down ÷",
            "per page ÷",
            "bodies KiB",
            "heads KiB",
            "payload ÷",
            ERRORS_COLUMN,
        ]
        .map(String::from)
        .to_vec()];
        let factor = |f: Option<f64>| f.map(|f| format!("×{f:.2}")).unwrap_or_else(|| "-".into());
        let kib = |b: f64| format!("{:.1}", b / 1024.0);
        for a in self.air_totals() {
            rows.push(vec![
                self.config_label(&a.config),
                kib(a.down_bytes),
                kib(a.up_bytes),
                factor(a.down_reduction_factor),
                factor(a.mean_page_factor),
                kib(a.body_bytes),
                kib(a.head_bytes),
                factor(a.payload_page_factor),
                self.errors_cell(|l| l.config == a.config),
            ]);
        }
        t += &columns(&rows);
        t += self.config_error_note(&rows);
        t += &self.late_note();
        t
    }

    /// The note under the air table when loads had air bytes after their end (Chromium's
    /// late requests): per configuration, the mean per load, which the table leaves out.
    pub fn late_note(&self) -> String {
        let late: Vec<String> = self
            .configs_in_order()
            .into_iter()
            .filter_map(|c| {
                let mine: Vec<&LoadRecord> = self.loads.iter().filter(|l| l.config == c).collect();
                let n = mine.len().max(1) as f64;
                let down = mine.iter().map(|l| l.late_down_bytes).sum::<u64>() as f64 / n;
                let up = mine.iter().map(|l| l.late_up_bytes).sum::<u64>() as f64 / n;
                (down + up > 0.0).then(|| format!("{c} {:.1}/{:.1}", down / 1024.0, up / 1024.0))
            })
            .collect();
        if late.is_empty() {
            return String::new();
        }
        wrap(
            &format!(
                "Late: air bytes after the load event, not in the figures above (the page's \
                 requests after its load), mean KiB down/up per load: {}",
                late.join(", ")
            ),
            CONSOLE_WIDTH,
        )
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
            "Link use, mean over the pages ({:.1} kbit/s down, idle RTT {:.2} s)\n",
            self.link_down_kbps,
            self.link_rtt_ms / 1000.0,
        );
        t += &wrap(
            "utilization = air bits down ÷ (rate × PLT); efficiency = (idle RTT + body bits ÷ \
             rate) ÷ PLT; over a trace, the trace's own offer from the load's start",
            CONSOLE_WIDTH,
        );
        let mut rows = vec![["config", "utilization", "efficiency", ERRORS_COLUMN]
            .map(String::from)
            .to_vec()];
        for (c, u, e) in self.link_use() {
            rows.push(vec![
                self.config_label(&c),
                format!("{:.0}%", u * 100.0),
                format!("{:.0}%", e * 100.0),
                self.errors_cell(|l| l.config == c),
            ]);
        }
        t += &columns(&rows);
        t += self.config_error_note(&rows);
        t
    }

    /// The ablation table as text; empty when the run has no ablations.
    pub fn ablation_table(&self) -> String {
        let ab = self.ablations();
        if ab.is_empty() {
            return String::new();
        }
        let mut t = wrap(
            &format!(
                "Ablation (mean PLT over the pages, s; share = (without − full) ÷ ({} − full))",
                self.baseline
            ),
            CONSOLE_WIDTH,
        );
        let mut rows = vec![[
            "full",
            "switch off",
            "baseline",
            "full",
            "without",
            "share",
            ERRORS_COLUMN,
        ]
        .map(String::from)
        .to_vec()];
        for r in ab {
            rows.push(vec![
                self.config_label(&r.full),
                r.switch.clone(),
                format!("{:.1}", r.baseline_s),
                format!("{:.1}", r.full_s),
                format!("{:.1}", r.without_s),
                format!("{:.0}%", r.share_of_gain * 100.0),
                self.ablation_errors(&r),
            ]);
        }
        t += &columns(&rows);
        t += self.config_error_note(&rows);
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_stop_at_what_is_possible() {
        // Two loads, −95 % and −5 %: Student's interval would reach below −100 %.
        let p = PairedChange::of(&[-0.95, -0.05]).unwrap();
        let [lo, hi] = p.ci95.unwrap();
        assert_eq!(lo, -1.0);
        assert!(hi > 1.0, "{hi}");
        assert!(p.text().starts_with("-50% [-100, +"), "{}", p.text());
    }

    #[test]
    fn a_results_file_without_the_new_fields_reads_as_a_whole_run() {
        let r = Results {
            profile: "gprs".into(),
            time_scale: 1.0,
            seed: 1,
            baseline: "http11".into(),
            link_down_kbps: 38.0,
            link_rtt_ms: 600.0,
            configs: BTreeMap::new(),
            loads: Vec::new(),
            summary: Vec::new(),
            air_totals: Vec::new(),
            ablations: Vec::new(),
            paper: Vec::new(),
            not_applicable: vec![NotApplicable {
                page: "secure".into(),
                config: "transparent-url".into(),
                reason: "page URL https://x/ cannot be URL-rewritten".into(),
            }],
            complete: false,
            same_link: false,
            repeat_spread: None,
        };
        let mut v = serde_json::to_value(&r).unwrap();
        let back: Results = serde_json::from_value(v.clone()).unwrap();
        assert_eq!((back.complete, back.not_applicable.len()), (false, 1));
        let note = r.not_applicable_note();
        assert!(note.starts_with("Not applicable"), "{note}");
        assert!(
            note.contains("secure transparent-url: page URL https://x/ cannot be"),
            "{note}"
        );
        // A file from before these fields: a whole run with nothing left out.
        let o = v.as_object_mut().unwrap();
        o.remove("complete");
        o.remove("not_applicable");
        let old: Results = serde_json::from_value(v).unwrap();
        assert!(old.complete && old.not_applicable.is_empty());
        assert_eq!(old.not_applicable_note(), "");
    }

    fn load(page: &str, config: &str, plt: f64) -> LoadRecord {
        LoadRecord {
            page: page.into(),
            config: config.into(),
            profile: "gprs".into(),
            repeat: 0,
            plt_ms: plt,
            air_down_bytes: 1000,
            air_up_bytes: 100,
            late_down_bytes: 0,
            late_up_bytes: 0,
            objects: 3,
            inlined: 0,
            errors: 0,
            page_objects: 0,
            missing: 0,
            missing_why: Default::default(),
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
            client_proxy: None,
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
            not_applicable: Vec::new(),
            complete: true,
            same_link: false,
            repeat_spread: None,
        }
        .finish()
    }

    #[test]
    fn link_use_is_air_over_capacity_and_bound_over_plt() {
        // 38 kbit/s for 10 s carries 47,500 bytes; 23,750 of them is half the capacity.
        let u = LinkUse::of(10_000.0, 23_750, 19_000, &Rate::Kbps(38.0), 2_000.0);
        assert!((u.utilization - 0.5).abs() < 1e-9, "{u:?}");
        // 19,000 bytes take 4 s at 38 kbit/s; with the 2 s RTT the bound is 6 s of 10.
        assert!((u.bound_ms - 6_000.0).abs() < 1e-9, "{u:?}");
        assert!((u.efficiency - 0.6).abs() < 1e-9, "{u:?}");
        // No PLT or no rate: zeros, not infinities.
        assert_eq!(
            LinkUse::of(0.0, 1, 1, &Rate::Kbps(38.0), 1.0).efficiency,
            0.0
        );
        assert_eq!(
            LinkUse::of(1.0, 1, 1, &Rate::Kbps(0.0), 1.0).utilization,
            0.0
        );
    }

    /// Over a trace the capacity and the bound are the trace's own from the load's start, so
    /// no load can beat its bound: a load that met a fast stretch is not measured against the
    /// trace's mean (which gave efficiencies above 1 over the LTE trace).
    #[test]
    fn trace_bounds_follow_the_trace_and_never_exceed_one() {
        // 10 opportunities (15,000 bytes) in the first 10 ms, then one per 100 ms up to 1 s.
        let mut text: Vec<String> = (1..=10).map(|t| t.to_string()).collect();
        text.extend((1..=9).map(|i| (100 * i + 10).to_string()));
        text.push("1000".into());
        let trace = std::sync::Arc::new(Trace::parse(&text.join("\n"), "t").unwrap());
        let rate = Rate::Trace(trace.clone());
        // 15,000 body bytes were on offer by 10 ms (the 10th opportunity is at 10 ms).
        let u = LinkUse::of(60.0, 15_000, 15_000, &rate, 50.0);
        assert!((u.bound_ms - 60.0).abs() < 1e-9, "{u:?}");
        assert!((u.efficiency - 1.0).abs() < 1e-9, "{u:?}");
        assert!((u.utilization - 1.0).abs() < 1e-9, "{u:?}");
        // The trace's mean (20 × 1,500 bytes per second = 240 kbit/s) would have put the bound
        // at 50 + 500 ms: an efficiency of 9.2 for the same load.
        assert!(rate.mean_kbps() < 250.0);
        // Any load: a PLT no shorter than RTT + the time to receive its bytes is within 1.
        for body in [1u64, 1_500, 15_001, 20_000, 100_000] {
            let need = trace_time_to_offer(&trace, body);
            assert!(trace.bytes_between(0, need as u64 + 1) >= body, "{body}");
            assert!(
                need < 1.0 || trace.bytes_between(0, need as u64) < body,
                "{body}"
            );
            let u = LinkUse::of(50.0 + need.max(1.0), body, body, &rate, 50.0);
            assert!(u.efficiency <= 1.0 + 1e-9, "{body}: {u:?}");
        }
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

    /// Issue 36 item 2: a load that left objects of the page unrequested is marked like one
    /// that lost objects, and the note says how many and why.
    #[test]
    fn objects_not_requested_are_marked_and_counted_by_why() {
        let mut l = load("a", "explicit", 1000.0);
        l.missing = 3;
        l.missing_why = BTreeMap::from([
            ("not referenced".to_string(), 2),
            ("not used".to_string(), 1),
        ]);
        let r = results_of(vec![load("a", "http11", 2000.0), l]);
        let t = r.table();
        assert!(t.contains("1.0!"), "{t}");
        assert!(
            t.replace('\n', " ").contains(
                "! 1 of 2 loads had errors or left objects of the page unrequested (0 lost; 3 \
                 not requested, why: 2 not referenced, 1 not used; in a explicit): their PLT"
            ),
            "{t}"
        );
        assert!(t.contains("1/2"), "the errors column: {t}");
    }

    /// Issue 36 item 6: how much repeats differ is stated, with the cell that differs most.
    #[test]
    fn the_spread_across_repeats_is_reported() {
        let mut loads = Vec::new();
        for (r, plt) in [90.0, 100.0, 110.0].into_iter().enumerate() {
            let mut l = load("a", "http11", plt * 1000.0);
            l.repeat = r;
            loads.push(l);
        }
        for r in 0..2 {
            let mut l = load("b", "http11", 50_000.0);
            l.repeat = r;
            loads.push(l);
        }
        let mut r = results_of(loads);
        let s = r
            .repeat_spread
            .clone()
            .expect("a spread from 2 loads a cell");
        assert_eq!((s.cells, s.max_page.as_str()), (2, "a"));
        assert!(
            (s.max_cv - 0.1).abs() < 1e-9 && (s.median_cv - 0.05).abs() < 1e-9,
            "{s:?}"
        );
        let note = r.spread_note().replace('\n', " ");
        assert!(
            note.starts_with(
                "Repeats differ: the PLT of a page and configuration by a median 5.0 %"
            ),
            "{note}"
        );
        assert!(note.contains("at most 10.0 % (a http11)"), "{note}");
        assert!(r.table().contains("Repeats differ"));
        r.same_link = true;
        assert!(r.spread_note().contains("every repeat met the same link"));
        // One load a cell: nothing to say.
        let one = results_of(vec![load("a", "http11", 1000.0)]);
        assert_eq!(
            (one.spread_note(), one.repeat_spread),
            (String::new(), None)
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
    /// A run as the runner records it: every page under every configuration `repeats`
    /// times, PLTs and bytes in the proportions of a gprs run, one load with lost objects.
    fn run_of(pages: &[String], configs: &[&str], repeats: usize) -> Results {
        let mut loads = Vec::new();
        for (i, page) in pages.iter().enumerate() {
            let base = 30_000.0 + 9_000.0 * (i % 7) as f64;
            for (j, config) in configs.iter().enumerate() {
                let (speed, bytes) = match *config {
                    "http11" => (1.0, 1.0),
                    "explicit" => (0.35, 0.38),
                    "squid" => (0.7, 0.95),
                    "ziproxy" => (0.75, 0.5),
                    "chromium-explicit" => (0.3, 0.35),
                    _ => (0.6 + 0.04 * j as f64, 0.9),
                };
                for r in 0..repeats {
                    let mut l = load(page, config, base * speed * (1.0 + 0.03 * r as f64));
                    l.repeat = r;
                    l.air_down_bytes = (400_000.0 * bytes * (1.0 + i as f64 / 10.0)) as u64;
                    l.body_bytes = l.air_down_bytes * 9 / 10;
                    l.utilization = 0.4;
                    l.efficiency = 0.3;
                    loads.push(l);
                }
            }
        }
        loads[1].errors = 3;
        results_of(loads).finish()
    }

    /// Every console table of `r`, as `webpep lab run` prints them.
    fn console(r: &Results) -> String {
        [
            r.table(),
            r.paired_table(),
            r.air_table(),
            r.link_table(),
            r.tls_upgrade_note(),
            r.ablation_table(),
            r.paper_table(),
        ]
        .join("\n")
    }

    fn widest(t: &str) -> usize {
        t.lines().map(|l| l.chars().count()).max().unwrap_or(0)
    }

    #[test]
    fn tables_fit_100_columns_and_show_spread_only_with_repeats() {
        let four: Vec<String> = ["mail", "yahoo", "amazon", "cnn"]
            .map(String::from)
            .to_vec();
        let many: Vec<String> = (1..=27)
            .map(|i| format!("manual-mod_rewrite-howto-{i:02}"))
            .collect();
        let demo = [
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
        let wide = [
            "http11",
            "http11-6",
            "pipelining",
            "explicit",
            "explicit-no-compress",
            "explicit-plain",
            "squid",
            "ziproxy",
            "transparent-url",
        ];
        for (pages, configs) in [
            (&four, &demo[..]),
            (&many, &["http11", "explicit", "explicit-no-compress"][..]),
            (&many, &wide[..]),
        ] {
            for repeats in [1, 3] {
                let r = run_of(pages, configs, repeats);
                let t = console(&r);
                assert!(widest(&t) <= CONSOLE_WIDTH, "{} wide:\n{t}", widest(&t));
                // One load has no spread and no interval.
                assert_eq!(t.contains('±'), repeats > 1, "{t}");
                assert_eq!(t.contains("confidence interval"), repeats > 1, "{t}");
                // Late bytes are noted apart from the air table's figures, only when there are.
                assert!(!r.air_table().contains("Late:"));
                let mut late = r.clone();
                late.loads[0].late_down_bytes = 2048;
                let air = late.air_table();
                assert!(
                    air.contains("Late: air bytes after the load event"),
                    "{air}"
                );
                assert!(air.contains(&format!("{} ", late.loads[0].config)), "{air}");
                assert!(widest(&air) <= CONSOLE_WIDTH, "{air}");
                // Every table has its error column (issue 36 item 4).
                for t in [r.table(), r.air_table(), r.link_table(), r.paper_table()] {
                    assert!(t.is_empty() || t.contains(ERRORS_COLUMN), "{t}");
                }
                if repeats > 1 {
                    assert!(r.paired_table().contains(ERRORS_COLUMN));
                }
                // The load that lost objects is marked, and the note says so.
                let plt = r.table();
                assert!(plt.contains('!'), "{plt}");
                assert!(plt.contains("! 1 of"), "{plt}");
                // Every page and configuration is in the PLT table (clipped names keep
                // their ends).
                for c in configs {
                    assert!(plt.contains(&clip(c, 18)), "{c}:\n{plt}");
                }
                for p in pages {
                    assert!(plt.contains(p.as_str()), "{p}:\n{plt}");
                }
            }
        }
        let r = run_of(&four, &demo, 1);
        eprintln!("{}", console(&r));
        // Four pages under ten configurations: configurations as rows, one block.
        let plt = r.table();
        assert!(plt.lines().any(|l| l.starts_with("config ")), "{plt}");
        assert_eq!(plt.matches("config ").count(), 1, "{plt}");
        let r = run_of(&many, &wide, 3);
        eprintln!("{}", console(&r));
    }

    #[test]
    fn a_clean_table_has_no_marks() {
        let mut r = run_of(&["a".to_string()], &["http11", "explicit"], 1);
        r.loads.iter_mut().for_each(|l| l.errors = 0);
        r.summary = summarize(&r.loads, "http11");
        let t = console(&r);
        assert!(!t.contains('!'), "{t}");
        assert_eq!(r.error_note(), "");
    }

    #[test]
    fn the_bound_is_on_what_crossed_the_air_when_the_device_decoded_more() {
        // 8 kbit/s = 1 byte/ms: 100,000 bytes of bodies at the browser, 1,000 on the air.
        let l = LinkUse::of(10_000.0, 1_000, 100_000, &Rate::Kbps(8.0), 100.0);
        assert_eq!(l.bound_ms, 1_100.0);
        assert!(l.efficiency <= 1.0, "{}", l.efficiency);
    }

    #[test]
    fn wrap_and_clip() {
        assert_eq!(wrap("a bb ccc dd", 6), "a bb\nccc dd\n");
        assert_eq!(wrap("  x: aa bb cc", 9), "  x: aa\n    bb cc\n");
        assert_eq!(wrap("one\ntwo\n", 100), "one\ntwo\n");
        assert_eq!(
            clip("apache-manual-07-mod_rewrite", 18),
            "apache-ma…_rewrite"
        );
        assert_eq!(clip("cnn", 18), "cnn");
        assert_eq!(
            columns(&[
                vec!["a".into(), "±1".into()],
                vec!["bbb".into(), "2".into()]
            ]),
            "a    ±1\nbbb   2\n"
        );
    }

    #[test]
    fn the_bottom_line_is_a_geometric_mean_of_plt_ratios() {
        let mut loads = Vec::new();
        // Page a: 4× faster, page b: as fast; the geometric mean is 2×. Air: 300 vs 100 bytes
        // in all, 3× fewer.
        for (page, base, fast, b_air, f_air) in
            [("a", 40.0, 10.0, 200, 50), ("b", 20.0, 20.0, 100, 50)]
        {
            let mut b = load(page, "http11", base);
            b.air_down_bytes = b_air;
            let mut f = load(page, "explicit", fast);
            f.air_down_bytes = f_air;
            loads.extend([b, f]);
        }
        // Squid ran on page a only, and lost objects there; ziproxy lost objects on page a and
        // loaded b whole, 2× slower.
        let mut sq = load("a", "squid", 80.0);
        sq.errors = 2;
        sq.air_down_bytes = 195;
        loads.push(sq);
        let mut zi = load("a", "ziproxy", 5.0);
        zi.missing = 3;
        zi.missing_why.insert("not referenced".into(), 3);
        loads.push(zi);
        let mut zi = load("b", "ziproxy", 40.0);
        zi.air_down_bytes = 100;
        loads.push(zi);
        let r = results_of(loads);
        let c = r.bottom_line("http11", "explicit").unwrap();
        assert!((c.speedup - 2.0).abs() < 1e-9, "{c:?}");
        assert!((c.air_factor.unwrap() - 3.0).abs() < 1e-9, "{c:?}");
        assert_eq!(
            (c.pages, c.run_pages, c.error_loads, c.loads, c.repeats),
            (2, 2, 0, 4, 1)
        );
        assert_eq!((c.left_out, c.all_incomplete), (0, false));
        assert_eq!(c.speed_words(), "2.0× faster");
        assert_eq!(c.bytes_words(), "3.0× fewer bytes over the air");
        assert!(c.caveats().is_empty());
        let s = r.bottom_line("http11", "squid").unwrap();
        assert_eq!(s.speed_words(), "2.0× slower");
        assert_eq!(s.bytes_words(), "about as many bytes over the air");
        assert_eq!(
            s.caveats(),
            [
                "on 1 of the 2 pages",
                "1 of its 2 loads had errors, marked ! in the tables, on every page: these \
                 factors count them"
            ]
        );
        // Ziproxy's bottom line leaves page a out: its fast load there was not a whole page.
        let z = r.bottom_line("http11", "ziproxy").unwrap();
        assert_eq!((z.pages, z.left_out, z.all_incomplete), (1, 1, false));
        assert_eq!(z.speed_words(), "2.0× slower");
        assert_eq!(
            z.caveats(),
            ["1 page left out, where 1 of its 4 loads had errors, marked ! in the tables"]
        );
        // A configuration that did not run has no bottom line.
        assert_eq!(r.bottom_line("http11", "intercept"), None);
    }
}
