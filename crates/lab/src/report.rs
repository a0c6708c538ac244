//! `report.html`: the tables of `results.json` and three SVG charts (PLT with error bars,
//! stacked breakdown, air bytes), written by hand: plotters' text layout would need a font
//! stack, and these charts are bars and lines.

use std::fmt::Write as _;

use crate::results::{order, Results, SummaryRecord};

const PALETTE: &[&str] = &[
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#bab0ac",
];
const BREAKDOWN: [(&str, &str); 4] = [
    ("dns", "#e15759"),
    ("connect", "#f28e2b"),
    ("idle", "#bab0ac"),
    ("payload", "#4e79a7"),
];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A "nice" axis maximum above `v`.
fn nice_max(v: f64) -> f64 {
    if v <= 0.0 {
        return 1.0;
    }
    let mag = 10f64.powf(v.log10().floor());
    for m in [1.0, 2.0, 2.5, 5.0, 10.0] {
        if m * mag >= v {
            return m * mag;
        }
    }
    10.0 * mag
}

struct Chart {
    svg: String,
    width: f64,
    height: f64,
    left: f64,
    top: f64,
    plot_h: f64,
    max: f64,
}

impl Chart {
    fn new(title: &str, groups: usize, per_group: usize, max: f64, unit: &str) -> Chart {
        let left = 70.0;
        let top = 40.0;
        let plot_h = 260.0;
        let width = left + 30.0 + (groups as f64) * ((per_group as f64) * 18.0 + 24.0);
        let height = top + plot_h + 110.0;
        let max = nice_max(max);
        let mut svg = format!(
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w:.0}" height="{h:.0}" font-family="sans-serif" font-size="11">"#,
            w = width.max(420.0),
            h = height
        );
        let _ = write!(
            svg,
            r#"<text x="{left}" y="20" font-size="14" font-weight="bold">{}</text>"#,
            esc(title)
        );
        for i in 0..=5 {
            let v = max * i as f64 / 5.0;
            let y = top + plot_h - plot_h * i as f64 / 5.0;
            let _ = write!(
                svg,
                r##"<line x1="{left}" x2="{x2:.0}" y1="{y:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{tx}" y="{ty:.1}" text-anchor="end">{v}</text>"##,
                x2 = width - 20.0,
                tx = left - 6.0,
                ty = y + 4.0,
                v = format_tick(v)
            );
        }
        let _ = write!(
            svg,
            r#"<text x="14" y="{y:.0}" transform="rotate(-90 14 {y:.0})" text-anchor="middle">{}</text>"#,
            esc(unit),
            y = top + plot_h / 2.0
        );
        Chart {
            svg,
            width,
            height,
            left,
            top,
            plot_h,
            max,
        }
    }

    fn y(&self, v: f64) -> f64 {
        self.top + self.plot_h - self.plot_h * (v / self.max).clamp(0.0, 1.0)
    }

    fn bar(&mut self, x: f64, from: f64, to: f64, color: &str, tip: &str) {
        let (y0, y1) = (self.y(to), self.y(from));
        let _ = write!(
            self.svg,
            r#"<rect x="{x:.1}" y="{y0:.1}" width="14" height="{h:.1}" fill="{color}"><title>{}</title></rect>"#,
            esc(tip),
            h = (y1 - y0).max(0.0)
        );
    }

    fn error_bar(&mut self, x: f64, mean: f64, sd: f64) {
        if sd <= 0.0 {
            return;
        }
        let (a, b) = (self.y(mean + sd), self.y((mean - sd).max(0.0)));
        let cx = x + 7.0;
        let _ = write!(
            self.svg,
            r#"<line x1="{cx:.1}" x2="{cx:.1}" y1="{a:.1}" y2="{b:.1}" stroke="black"/><line x1="{l:.1}" x2="{r:.1}" y1="{a:.1}" y2="{a:.1}" stroke="black"/><line x1="{l:.1}" x2="{r:.1}" y1="{b:.1}" y2="{b:.1}" stroke="black"/>"#,
            l = cx - 4.0,
            r = cx + 4.0
        );
    }

    fn group_label(&mut self, x: f64, label: &str) {
        let y = self.top + self.plot_h + 14.0;
        let _ = write!(
            self.svg,
            r#"<text x="{x:.1}" y="{y:.1}" transform="rotate(30 {x:.1} {y:.1})">{}</text>"#,
            esc(label)
        );
    }

    fn legend(&mut self, items: &[(String, String)]) {
        let mut x = self.left;
        let y = self.height - 16.0;
        for (label, color) in items {
            let _ = write!(
                self.svg,
                r#"<rect x="{x:.0}" y="{ry:.0}" width="10" height="10" fill="{color}"/><text x="{tx:.0}" y="{y:.0}">{}</text>"#,
                esc(label),
                ry = y - 9.0,
                tx = x + 14.0
            );
            x += 24.0 + 7.0 * label.len() as f64;
        }
    }

    fn finish(mut self) -> String {
        let _ = self.width;
        self.svg.push_str("</svg>");
        self.svg
    }
}

fn format_tick(v: f64) -> String {
    if v >= 100.0 || v == v.round() {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

fn find<'a>(r: &'a Results, page: &str, config: &str) -> Option<&'a SummaryRecord> {
    r.summary
        .iter()
        .find(|s| s.page == page && s.config == config)
}

/// The three charts, as SVG strings.
pub fn charts(r: &Results) -> [String; 3] {
    let pages = order(r.summary.iter().map(|s| &s.page));
    let configs = order(r.summary.iter().map(|s| &s.config));
    let color = |i: usize| PALETTE[i % PALETTE.len()];
    let group_w = configs.len() as f64 * 18.0 + 24.0;

    // 1. PLT with error bars.
    let max = r
        .summary
        .iter()
        .map(|s| (s.plt_ms.mean + s.plt_ms.sd) / 1000.0)
        .fold(0.0, f64::max);
    let mut plt = Chart::new(
        "Page load time (mean ± sd)",
        pages.len(),
        configs.len(),
        max,
        "seconds",
    );
    for (gi, p) in pages.iter().enumerate() {
        let gx = plt.left + 12.0 + gi as f64 * group_w;
        for (ci, c) in configs.iter().enumerate() {
            if let Some(s) = find(r, p, c) {
                let x = gx + ci as f64 * 18.0;
                let (m, sd) = (s.plt_ms.mean / 1000.0, s.plt_ms.sd / 1000.0);
                plt.bar(
                    x,
                    0.0,
                    m,
                    color(ci),
                    &format!("{p} / {c}: {m:.1} s ± {sd:.1}"),
                );
                plt.error_bar(x, m, sd);
            }
        }
        plt.group_label(gx, p);
    }
    let legend: Vec<(String, String)> = configs
        .iter()
        .enumerate()
        .map(|(i, c)| (c.to_string(), color(i).to_string()))
        .collect();
    plt.legend(&legend);

    // 2. Breakdown, stacked.
    let max = r
        .summary
        .iter()
        .map(|s| {
            let b = s.breakdown_ms;
            (b.dns + b.connect + b.idle + b.payload) / 1000.0
        })
        .fold(0.0, f64::max);
    let mut bd = Chart::new(
        "Where the time goes (mean breakdown; bars per configuration, in legend order)",
        pages.len(),
        configs.len(),
        max,
        "seconds",
    );
    for (gi, p) in pages.iter().enumerate() {
        let gx = bd.left + 12.0 + gi as f64 * group_w;
        for (ci, c) in configs.iter().enumerate() {
            if let Some(s) = find(r, p, c) {
                let x = gx + ci as f64 * 18.0;
                let b = s.breakdown_ms;
                let mut from = 0.0;
                for (name, col) in BREAKDOWN {
                    let v = match name {
                        "dns" => b.dns,
                        "connect" => b.connect,
                        "idle" => b.idle,
                        _ => b.payload,
                    } / 1000.0;
                    bd.bar(
                        x,
                        from,
                        from + v,
                        col,
                        &format!("{p} / {c}: {name} {v:.1} s"),
                    );
                    from += v;
                }
            }
        }
        bd.group_label(gx, p);
    }
    let legend: Vec<(String, String)> = BREAKDOWN
        .iter()
        .map(|(n, c)| (n.to_string(), c.to_string()))
        .collect();
    bd.legend(&legend);

    // 3. Air bytes down (bar) and up (stacked on top, lighter).
    let max = r
        .summary
        .iter()
        .map(|s| (s.air_down_bytes.mean + s.air_up_bytes.mean) / 1024.0)
        .fold(0.0, f64::max);
    let mut air = Chart::new(
        "Bytes over the air (mean; down, with up stacked)",
        pages.len(),
        configs.len(),
        max,
        "KiB",
    );
    for (gi, p) in pages.iter().enumerate() {
        let gx = air.left + 12.0 + gi as f64 * group_w;
        for (ci, c) in configs.iter().enumerate() {
            if let Some(s) = find(r, p, c) {
                let x = gx + ci as f64 * 18.0;
                let d = s.air_down_bytes.mean / 1024.0;
                let u = s.air_up_bytes.mean / 1024.0;
                air.bar(x, 0.0, d, color(ci), &format!("{p} / {c}: down {d:.1} KiB"));
                air.bar(x, d, d + u, "#cccccc", &format!("{p} / {c}: up {u:.1} KiB"));
            }
        }
        air.group_label(gx, p);
    }
    let legend: Vec<(String, String)> = configs
        .iter()
        .enumerate()
        .map(|(i, c)| (c.to_string(), color(i).to_string()))
        .collect();
    air.legend(&legend);
    [plt.finish(), bd.finish(), air.finish()]
}

/// The whole report page.
pub fn html(r: &Results) -> String {
    let [plt, bd, air] = charts(r);
    let mut h = String::new();
    let _ = write!(
        h,
        r#"<!doctype html><html><head><meta charset="utf-8"><title>webpep lab report: {p}</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:1200px}}table{{border-collapse:collapse;margin:1em 0}}td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}}th{{background:#f4f4f4}}td:first-child,th:first-child{{text-align:left}}</style>
</head><body><h1>webpep lab report</h1>
<p>Profile <b>{p}</b>, time scale {k}, seed {s}; baseline <b>{b}</b>. All times are unscaled (what the real link would show). Each load's HAR is beside this file.</p>
"#,
        p = esc(&r.profile),
        k = r.time_scale,
        s = r.seed,
        b = esc(&r.baseline)
    );
    h.push_str("<h2>Configurations</h2><table><tr><th>name</th><th>browser policy, proxy mode, switches</th></tr>");
    for (n, d) in &r.configs {
        let _ = write!(
            h,
            "<tr><td>{}</td><td style=\"text-align:left\">{}</td></tr>",
            esc(n),
            esc(d)
        );
    }
    h.push_str("</table><h2>Summary</h2><table><tr><th>page</th><th>config</th><th>loads</th><th>PLT mean s</th><th>sd</th><th>median</th><th>vs baseline</th><th>paired by repeat [95 % CI]</th><th>DNS s</th><th>connect s</th><th>idle s</th><th>payload s</th><th>air down KiB</th><th>air up KiB</th><th>utilization</th><th>efficiency</th><th>errors</th></tr>");
    for s in &r.summary {
        let b = s.breakdown_ms;
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{:.2}</td><td>{:.2}</td><td>{:.2}</td><td>{}</td><td>{}</td><td>{:.2}</td><td>{:.2}</td><td>{:.2}</td><td>{:.2}</td><td>{:.1}</td><td>{:.1}</td><td>{:.0} %</td><td>{:.0} %</td><td>{}</td></tr>",
            esc(&s.page),
            esc(&s.config),
            s.plt_ms.n,
            s.plt_ms.mean / 1000.0,
            s.plt_ms.sd / 1000.0,
            s.plt_ms.median / 1000.0,
            s.plt_reduction
                .map_or("-".into(), |r| format!("{:+.1} %", -r * 100.0)),
            s.plt_change_paired.map_or("-".into(), |p| p.text()),
            b.dns / 1000.0,
            b.connect / 1000.0,
            b.idle / 1000.0,
            b.payload / 1000.0,
            s.air_down_bytes.mean / 1024.0,
            s.air_up_bytes.mean / 1024.0,
            s.utilization.mean * 100.0,
            s.efficiency.mean * 100.0,
            s.errors
        );
    }
    h.push_str("</table><h2>Air bytes over all pages</h2><table><tr><th>config</th><th>down KiB</th><th>up KiB</th><th>down, baseline ÷ config</th><th>mean of the pages' ÷</th><th>bodies KiB</th><th>heads KiB</th><th>payload: mean of the pages' ÷ (000 Table 3, 003 Fig. 7)</th></tr>");
    for a in &r.air_totals {
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{:.1}</td><td>{:.1}</td><td>{}</td><td>{}</td><td>{:.1}</td><td>{:.1}</td><td>{}</td></tr>",
            esc(&a.config),
            a.down_bytes / 1024.0,
            a.up_bytes / 1024.0,
            a.down_reduction_factor
                .map_or("-".into(), |f| format!("×{f:.2}")),
            a.mean_page_factor
                .map_or("-".into(), |f| format!("×{f:.2}")),
            a.body_bytes / 1024.0,
            a.head_bytes / 1024.0,
            a.payload_page_factor
                .map_or("-".into(), |f| format!("×{f:.2}"))
        );
    }
    let _ = write!(
        h,
        "</table><h2>Link use</h2><p>Mean over the pages. Utilization = air bits down ÷ ({:.1} kbit/s × PLT); efficiency = bound ÷ PLT, where the bound is one idle RTT ({:.2} s) plus the load's response bodies at the down rate.</p><table><tr><th>config</th><th>utilization</th><th>efficiency</th></tr>",
        r.link_down_kbps,
        r.link_rtt_ms / 1000.0
    );
    for (c, u, e) in r.link_use() {
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{:.0} %</td><td>{:.0} %</td></tr>",
            esc(&c),
            u * 100.0,
            e * 100.0
        );
    }
    h.push_str("</table>");
    if !r.ablations.is_empty() {
        h.push_str("<h2>Ablation (000 Fig. 8)</h2><p>Mean PLT over the pages; share of the gain = (without − full) ÷ (baseline − full).</p><table><tr><th>full</th><th>switch off</th><th>baseline s</th><th>full s</th><th>without s</th><th>share of the gain</th></tr>");
        for a in &r.ablations {
            let _ = write!(
                h,
                "<tr><td>{}</td><td>{}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td><td>{:.0} %</td></tr>",
                esc(&a.full),
                esc(&a.switch),
                a.baseline_s,
                a.full_s,
                a.without_s,
                a.share_of_gain * 100.0
            );
        }
        h.push_str("</table>");
    }
    if !r.paper.is_empty() {
        let _ = write!(
            h,
            "<h2>Beside the papers</h2><p>Profile {}: the run's mean PLT and its change vs \
             http11 beside what the paper measured for the page, and the paper's change against \
             its own http11 load.</p><table><tr><th>page</th><th>config</th><th>PLT s</th>\
             <th>paper s</th><th>÷ paper</th><th>change</th><th>paper's change</th>\
             <th>source</th></tr>",
            esc(&r.profile)
        );
        for p in &r.paper {
            let [paper_s, ratio, change, paper_change] = p.cells(" %");
            let _ = write!(
                h,
                "<tr><td>{}</td><td>{}</td><td>{:.1}</td><td>{paper_s}</td><td>{ratio}</td><td>{change}</td><td>{paper_change}</td><td>{}</td></tr>",
                esc(&p.page),
                esc(&p.config),
                p.measured_s,
                esc(&p.source)
            );
        }
        h.push_str("</table>");
    }
    let tls = r.tls_upgrades();
    if !tls.is_empty() {
        let _ = write!(
            h,
            "<h2>Fetched over https by the browser</h2><p>{}.</p><ul>",
            esc(crate::results::TLS_UPGRADES_HEAD)
        );
        for (page, hosts, configs) in tls {
            let _ = write!(
                h,
                "<li>{}: {} ({})</li>",
                esc(page),
                esc(&hosts.join(", ")),
                esc(&configs.join(", "))
            );
        }
        h.push_str("</ul>");
    }
    h.push_str("<h2>Charts</h2>");
    for svg in [plt, bd, air] {
        h.push_str("<div>");
        h.push_str(&svg);
        h.push_str("</div>");
    }
    h.push_str("<h2>Loads</h2><table><tr><th>page</th><th>config</th><th>repeat</th><th>PLT s</th><th>objects</th><th>errors</th><th>air down B</th><th>air up B</th><th>HAR</th></tr>");
    for l in &r.loads {
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{:.2}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td><a href=\"{h}\">{h}</a></td></tr>",
            esc(&l.page),
            esc(&l.config),
            l.repeat,
            l.plt_ms / 1000.0,
            l.objects,
            l.errors,
            l.air_down_bytes,
            l.air_up_bytes,
            h = esc(&l.har)
        );
    }
    h.push_str("</table></body></html>\n");
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::{summarize, BreakdownMs, LoadRecord};
    use std::collections::BTreeMap;

    #[test]
    fn report_has_tables_and_three_charts() {
        let mut loads = Vec::new();
        for (c, plt) in [("http11", 100_000.0), ("pipelining<&>", 50_000.0)] {
            for r in 0..2 {
                loads.push(LoadRecord {
                    page: "cnn".into(),
                    config: c.into(),
                    profile: "gprs".into(),
                    repeat: r,
                    plt_ms: plt + r as f64 * 1000.0,
                    air_down_bytes: 200_000,
                    air_up_bytes: 20_000,
                    objects: 30,
                    inlined: 0,
                    errors: 0,
                    breakdown_ms: BreakdownMs {
                        dns: 1000.0,
                        connect: 2000.0,
                        idle: 3000.0,
                        payload: plt - 6000.0,
                    },
                    body_bytes: 150_000,
                    head_bytes: 9_000,
                    utilization: 0.4,
                    bound_ms: 33_600.0,
                    efficiency: 0.336,
                    har: format!("har/cnn-{c}-{r}.har"),
                    tls_upgrades: if c == "http11" {
                        Vec::new()
                    } else {
                        vec!["www.cnn.com".into()]
                    },
                });
            }
        }
        let summary = summarize(&loads, "http11");
        let mut r = Results {
            air_totals: Vec::new(),
            ablations: Vec::new(),
            paper: Vec::new(),
            profile: "gprs".into(),
            time_scale: 10.0,
            seed: 1,
            baseline: "http11".into(),
            link_down_kbps: 38.0,
            link_rtt_ms: 2_000.0,
            configs: BTreeMap::from([("http11".to_string(), "2 per host".to_string())]),
            loads,
            summary,
        };
        r.paper = vec![crate::paper_refs::PaperRow {
            page: "cnn".into(),
            config: "http11".into(),
            measured_s: 100.5,
            paper_s: Some(196.3),
            measured_change: Some(0.0),
            paper_change: 0.0,
            source: "000 Table 1 <WWAN>".into(),
        }];
        let h = html(&r);
        assert!(
            h.contains("<td>cnn</td><td>http11</td><td>100.5</td><td>196.3</td><td>×0.51</td>"),
            "the papers' table"
        );
        assert!(h.contains("000 Table 1 &lt;WWAN&gt;"), "escaped source");
        assert_eq!(h.matches("<svg").count(), 3);
        assert!(h.contains("pipelining&lt;&amp;&gt;"), "escaped");
        assert!(!h.contains("pipelining<&>"));
        assert!(
            h.contains("-49.5 %") || h.contains("-49.8 %"),
            "reduction shown"
        );
        assert!(
            h.contains("<li>cnn: www.cnn.com (pipelining&lt;&amp;&gt;)</li>"),
            "the pages the browser fetched over https, under which configuration"
        );
    }

    #[test]
    fn nice_axis() {
        assert_eq!(nice_max(0.0), 1.0);
        assert_eq!(nice_max(7.0), 10.0);
        assert_eq!(nice_max(196.3), 200.0);
        assert_eq!(nice_max(0.3), 0.5);
    }
}
