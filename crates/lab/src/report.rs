//! `report.html`: what a reader needs first comes first. A verdict (per page: the fastest
//! configuration, its change against the baseline with its interval, its efficiency and its
//! bytes; loads that lost objects marked), then three SVG charts (PLT with error bars, stacked
//! breakdown, air bytes), then the tables of `results.json`, and the key to the
//! configurations last.
//!
//! The charts are written by hand: plotters' text layout would need a font stack, and these
//! charts are bars and lines. Without a font at hand, text widths are estimated from widths
//! per character a little above DejaVu Sans's (the widest common default sans-serif), and the
//! layout grows the SVG around them: legends wrap onto rows inside the chart, labels wrap
//! inside their group, so nothing is drawn past the SVG's edge (`tests/report_chromium.rs`
//! checks it in a real browser).

use std::fmt::Write as _;

use crate::results::{order, LoadRecord, Results, SummaryRecord};

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
/// The stacked upstream part of the air bytes chart.
const UP_COLOR: &str = "#cccccc";

/// Text sizes (px) of the charts.
const FONT: f64 = 11.0;
const TITLE_FONT: f64 = 14.0;
const LINE_H: f64 = 14.0;
/// Bars, their step within a group, the gap between groups, and the least group width (so
/// that a page's name has room to wrap into a few lines even under one bar).
const BAR_W: f64 = 14.0;
const BAR_STEP: f64 = 18.0;
const GROUP_GAP: f64 = 24.0;
const MIN_GROUP_W: f64 = 96.0;
const PLOT_H: f64 = 240.0;
const PAD: f64 = 10.0;
const MIN_WIDTH: f64 = 560.0;
/// Titles and legend rows wrap within this width even in a wider chart (which scrolls
/// sideways), so that they are read without scrolling.
const VISIBLE_W: f64 = 1100.0;
/// A legend entry: the swatch, the space after it, and the gap to the next entry.
const SWATCH: f64 = 10.0;
const SWATCH_GAP: f64 = 4.0;
const LEGEND_GAP: f64 = 16.0;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The colour of the `i`-th configuration: the palette, then hues spread by the golden angle
/// (a run with more configurations than the palette has colours gets no repeats).
fn color(i: usize) -> String {
    match PALETTE.get(i) {
        Some(c) => c.to_string(),
        None => format!("hsl({:.0},55%,45%)", (i as f64 * 137.508) % 360.0),
    }
}

/// A width of `c` in ems at least DejaVu Sans's (Book; bold is ~8 % wider, see
/// [`text_width`]): an estimate that errs wide, so that text placed by it stays inside.
fn char_em(c: char) -> f64 {
    match c {
        'i' | 'j' | 'l' | '.' | ',' | ':' | ';' | '\'' | '!' | '|' | ' ' => 0.36,
        'f' | 't' | 'r' | 'I' | 'J' | '-' | '(' | ')' | '[' | ']' | '/' | '\\' => 0.46,
        'm' | 'w' | 'M' | 'W' | '@' | '%' => 1.05,
        'A'..='Z' | '#' | '&' | '+' | '=' | '<' | '>' | '~' | '?' => 0.86,
        // Lowercase and digits: DejaVu's widest are 0.636 em.
        c if c.is_ascii() => 0.66,
        // Non-ASCII (÷, ×, ±, other scripts): as wide as a full em.
        _ => 1.05,
    }
}

/// The estimated width (px) of `s` at `size` px.
fn text_width(s: &str, size: f64, bold: bool) -> f64 {
    let w: f64 = s.chars().map(char_em).sum::<f64>() * size;
    if bold {
        w * 1.1
    } else {
        w
    }
}

/// `s` in lines no wider than `max_w` (estimated), broken after spaces, hyphens, dots,
/// underscores and slashes, and inside a word only when the word alone is too wide. A line
/// that broke at a space keeps it at its end (see [`tspans`]); the width counts it.
fn wrap(s: &str, max_w: f64, size: f64, bold: bool) -> Vec<String> {
    let mut tokens: Vec<String> = Vec::new();
    let mut cur = String::new();
    for c in s.chars() {
        cur.push(c);
        if matches!(c, ' ' | '-' | '.' | '_' | '/') {
            tokens.push(std::mem::take(&mut cur));
        }
    }
    if !cur.is_empty() {
        tokens.push(cur);
    }
    let fits = |t: &str| text_width(t, size, bold) <= max_w;
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for t in tokens {
        if fits(&format!("{line}{t}")) {
            line.push_str(&t);
            continue;
        }
        if !line.is_empty() {
            lines.push(std::mem::take(&mut line));
        }
        if fits(&t) {
            line = t;
            continue;
        }
        // A word wider than the line: split it where it must be split.
        for c in t.chars() {
            let mut next = line.clone();
            next.push(c);
            if !line.is_empty() && !fits(&next) {
                lines.push(std::mem::take(&mut line));
                // A space at the break is dropped: it would only widen the line.
                next = if c == ' ' {
                    String::new()
                } else {
                    c.to_string()
                };
            }
            line = next;
        }
    }
    if !line.trim_end().is_empty() || lines.is_empty() {
        lines.push(line.trim_end().to_string());
    }
    lines
}

/// `lines` as the tspans of one text element, each restarting at `x`. A space a line broke
/// at stays between the tspans, so that the text reads and copies as written.
fn tspans(lines: &[String], x: f64, dy: f64) -> String {
    let mut t = String::new();
    for (i, line) in lines.iter().enumerate() {
        let body = line.trim_end();
        let _ = write!(
            t,
            r#"<tspan x="{x:.1}" dy="{d:.0}">{}</tspan>{}"#,
            esc(body),
            if body.len() < line.len() { " " } else { "" },
            d = if i == 0 { 0.0 } else { dy }
        );
    }
    t
}

/// A "nice" axis maximum above `v`.
fn nice_max(v: f64) -> f64 {
    if v.is_nan() || v <= 0.0 || v.is_infinite() {
        return 1.0;
    }
    let mag = 10f64.powf(v.log10().floor());
    for m in [1.0, 1.5, 2.0, 2.5, 5.0, 10.0] {
        if m * mag >= v {
            return m * mag;
        }
    }
    10.0 * mag
}

/// A tick's value with as many decimals as the ticks' `step` needs (0.03 is not "0.0").
fn format_tick(v: f64, step: f64) -> String {
    if v >= 100.0 || v == v.round() || step.is_nan() || step <= 0.0 {
        return format!("{v:.0}");
    }
    let decimals = (-step.log10()).ceil().clamp(1.0, 6.0) as usize;
    format!("{v:.decimals$}")
}

/// One part of a stacked bar (values in the chart's unit).
struct Segment {
    from: f64,
    to: f64,
    color: String,
    tip: String,
}

/// One bar: its label (drawn under it), its stack, and an error bar of ± `sd` around its
/// top when there is a spread.
struct Bar {
    label: String,
    segments: Vec<Segment>,
    sd: f64,
}

/// The bars of one page; `None` keeps the place of a configuration the page lacks.
struct Group {
    label: String,
    bars: Vec<Option<Bar>>,
}

/// A grouped bar chart, laid out when rendered.
struct BarChart {
    id: &'static str,
    title: String,
    unit: String,
    groups: Vec<Group>,
    legend: Vec<(String, String)>,
}

impl BarChart {
    /// The SVG. The width comes from the groups (and is at least the widest legend entry);
    /// the height grows with the title's lines, the bar labels, the group labels' lines and
    /// the legend's rows, so that all of them stay inside.
    fn render(&self) -> String {
        let per_group = self.groups.iter().map(|g| g.bars.len()).max().unwrap_or(0);
        let least_group_w = (per_group as f64 * BAR_STEP + GROUP_GAP).max(MIN_GROUP_W);
        let bars = || self.groups.iter().flat_map(|g| g.bars.iter().flatten());
        let top_of = |b: &Bar| {
            let t = b.segments.iter().map(|s| s.to).fold(0.0, f64::max);
            t + b.sd.max(0.0)
        };
        let max = nice_max(
            bars()
                .map(top_of)
                .filter(|v| v.is_finite())
                .fold(0.0, f64::max),
        );
        let ticks: Vec<(f64, String)> = (0..=5)
            .map(|i| {
                let v = max * i as f64 / 5.0;
                (v, format_tick(v, max / 5.0))
            })
            .collect();
        let tick_w = ticks
            .iter()
            .map(|(_, t)| text_width(t, FONT, false))
            .fold(0.0, f64::max);
        // The unit, rotated, then the tick labels, then the plot.
        let left = (PAD + LINE_H + 6.0 + tick_w + 6.0).ceil();
        let entry_w = |label: &str| SWATCH + SWATCH_GAP + text_width(label, FONT, false);
        let widest_entry = self
            .legend
            .iter()
            .map(|(l, _)| entry_w(l))
            .fold(0.0, f64::max);
        let n_groups = self.groups.len().max(1) as f64;
        let width = (left + n_groups * least_group_w + PAD)
            .max(MIN_WIDTH)
            .max(widest_entry + 2.0 * PAD)
            .ceil();
        // The groups share whatever width the legend or the least width left over.
        let group_w = (width - left - PAD) / n_groups;
        let plot_w = n_groups * group_w;
        // The title and the legend wrap within what shows without scrolling sideways.
        let visible_w = width.min(VISIBLE_W.max(widest_entry + 2.0 * PAD));

        let title = wrap(&self.title, visible_w - 2.0 * PAD, TITLE_FONT, true);
        let top = PAD + title.len() as f64 * (TITLE_FONT + 4.0) + 10.0;
        let axis_y = top + PLOT_H;
        let bar_label_h = bars()
            .map(|b| text_width(&b.label, FONT, false))
            .fold(0.0, f64::max);
        let bar_label_h = if bar_label_h > 0.0 {
            bar_label_h + 8.0
        } else {
            0.0
        };
        let group_lines: Vec<Vec<String>> = self
            .groups
            .iter()
            .map(|g| wrap(&g.label, group_w - 8.0, FONT, true))
            .collect();
        let group_label_top = axis_y + bar_label_h + 4.0;
        let group_label_h = group_lines.iter().map(Vec::len).max().unwrap_or(1) as f64 * LINE_H;
        // The legend: entries left to right, a new row when the next would pass the edge.
        let legend_top = group_label_top + group_label_h + 10.0;
        let mut places = Vec::new();
        let (mut x, mut row) = (PAD, 0usize);
        for (label, _) in &self.legend {
            let w = entry_w(label);
            if x > PAD && x + w > visible_w - PAD {
                row += 1;
                x = PAD;
            }
            places.push((x, legend_top + row as f64 * LINE_H));
            x += w + LEGEND_GAP;
        }
        let legend_rows = if self.legend.is_empty() { 0 } else { row + 1 };
        let height = (legend_top + legend_rows as f64 * LINE_H + PAD).ceil();

        let y = |v: f64| {
            let v = if v.is_finite() { v } else { 0.0 };
            axis_y - PLOT_H * (v / max).clamp(0.0, 1.0)
        };
        let mut svg = format!(
            r#"<svg xmlns="http://www.w3.org/2000/svg" id="{id}" class="chart" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="sans-serif" font-size="{FONT:.0}">"#,
            id = self.id
        );
        let _ = write!(
            svg,
            r#"<text class="title" x="{PAD}" y="{y:.0}" font-size="{TITLE_FONT:.0}" font-weight="bold">"#,
            y = PAD + TITLE_FONT
        );
        svg.push_str(&tspans(&title, PAD, TITLE_FONT + 4.0));
        svg.push_str("</text>");
        // The unit along the axis: rotated, its glyphs lie left of x (ascent ~0.76 em).
        let (ux, uy) = (PAD + FONT, top + PLOT_H / 2.0);
        let _ = write!(
            svg,
            r#"<text class="axis" x="{ux:.0}" y="{uy:.0}" transform="rotate(-90 {ux:.0} {uy:.0})" text-anchor="middle">{}</text>"#,
            esc(&self.unit)
        );
        for (v, t) in &ticks {
            let ty = y(*v);
            let _ = write!(
                svg,
                r##"<line x1="{left:.0}" x2="{x2:.0}" y1="{ty:.1}" y2="{ty:.1}" stroke="#ddd"/><text class="tick" x="{tx:.0}" y="{y4:.1}" text-anchor="end">{t}</text>"##,
                x2 = left + plot_w,
                tx = left - 6.0,
                y4 = ty + 4.0
            );
        }
        for (gi, g) in self.groups.iter().enumerate() {
            let gx = left + gi as f64 * group_w;
            let block = g.bars.len() as f64 * BAR_STEP - (BAR_STEP - BAR_W);
            let first = gx + (group_w - block) / 2.0;
            let _ = write!(
                svg,
                r#"<g class="bar-group" data-label="{}">"#,
                esc(&g.label)
            );
            for (bi, b) in g.bars.iter().enumerate() {
                let Some(b) = b else { continue };
                let bx = first + bi as f64 * BAR_STEP;
                let _ = write!(svg, r#"<g class="bar" data-label="{}">"#, esc(&b.label));
                for s in &b.segments {
                    let (y0, y1) = (y(s.to), y(s.from));
                    let _ = write!(
                        svg,
                        r#"<rect x="{bx:.1}" y="{y0:.1}" width="{BAR_W}" height="{h:.1}" fill="{c}"><title>{t}</title></rect>"#,
                        h = (y1 - y0).max(0.0),
                        c = s.color,
                        t = esc(&s.tip)
                    );
                }
                let top = b.segments.iter().map(|s| s.to).fold(0.0, f64::max);
                if b.sd > 0.0 && b.sd.is_finite() {
                    let (a, z) = (y(top + b.sd), y((top - b.sd).max(0.0)));
                    let cx = bx + BAR_W / 2.0;
                    let _ = write!(
                        svg,
                        r#"<path class="error" d="M{cx:.1} {a:.1}V{z:.1}M{l:.1} {a:.1}H{r:.1}M{l:.1} {z:.1}H{r:.1}" stroke="black" fill="none"/>"#,
                        l = cx - 4.0,
                        r = cx + 4.0
                    );
                }
                // Under the bar, reading upwards: the glyphs lie left of x, so x sits a little
                // right of the bar's centre.
                let (lx, ly) = (bx + BAR_W / 2.0 + 3.0, axis_y + 6.0);
                let _ = write!(
                    svg,
                    r#"<text class="bar-label" x="{lx:.1}" y="{ly:.1}" transform="rotate(-90 {lx:.1} {ly:.1})" text-anchor="end">{}</text></g>"#,
                    esc(&b.label)
                );
            }
            let cx = gx + group_w / 2.0;
            let _ = write!(
                svg,
                r#"<text class="group-label" x="{cx:.1}" y="{y:.1}" text-anchor="middle" font-weight="bold">"#,
                y = group_label_top + FONT
            );
            svg.push_str(&tspans(&group_lines[gi], cx, LINE_H));
            svg.push_str("</text></g>");
        }
        for ((label, c), (lx, ly)) in self.legend.iter().zip(&places) {
            let _ = write!(
                svg,
                r#"<g class="legend-item"><rect x="{lx:.1}" y="{ry:.1}" width="{SWATCH}" height="{SWATCH}" fill="{c}"/><text x="{tx:.1}" y="{ty:.1}">{}</text></g>"#,
                esc(label),
                ry = ly + 1.0,
                tx = lx + SWATCH + SWATCH_GAP,
                ty = ly + FONT - 1.0
            );
        }
        svg.push_str("</svg>");
        svg
    }
}

fn find<'a>(r: &'a Results, page: &str, config: &str) -> Option<&'a SummaryRecord> {
    r.summary
        .iter()
        .find(|s| s.page == page && s.config == config)
}

/// The three charts, as SVG strings: PLT (mean ± sd), the breakdown, air bytes. Each groups
/// the bars by page, labels every bar with its configuration and every group with its page.
pub fn charts(r: &Results) -> [String; 3] {
    let pages = order(r.summary.iter().map(|s| &s.page));
    let configs = order(r.summary.iter().map(|s| &s.config));
    let groups = |bar: &dyn Fn(&SummaryRecord, usize) -> Bar| -> Vec<Group> {
        pages
            .iter()
            .map(|p| Group {
                label: p.to_string(),
                bars: configs
                    .iter()
                    .enumerate()
                    .map(|(ci, c)| find(r, p, c).map(|s| bar(s, ci)))
                    .collect(),
            })
            .collect()
    };
    let config_legend: Vec<(String, String)> = configs
        .iter()
        .enumerate()
        .map(|(i, c)| (c.to_string(), color(i)))
        .collect();

    let plt = BarChart {
        id: "chart-plt",
        title: "Page load time (mean ± sd over the loads)".into(),
        unit: "seconds".into(),
        groups: groups(&|s, ci| {
            let (m, sd) = (s.plt_ms.mean / 1000.0, s.plt_ms.sd / 1000.0);
            Bar {
                label: s.config.clone(),
                segments: vec![Segment {
                    from: 0.0,
                    to: m,
                    color: color(ci),
                    tip: format!("{} / {}: {m:.1} s ± {sd:.1}", s.page, s.config),
                }],
                sd,
            }
        }),
        legend: config_legend.clone(),
    };

    let breakdown = BarChart {
        id: "chart-breakdown",
        title: "Where the time goes (mean breakdown per configuration)".into(),
        unit: "seconds".into(),
        groups: groups(&|s, _| {
            let b = s.breakdown_ms;
            let mut from = 0.0;
            let segments = BREAKDOWN
                .iter()
                .zip([b.dns, b.connect, b.idle, b.payload])
                .map(|((name, col), v)| {
                    let v = v / 1000.0;
                    let seg = Segment {
                        from,
                        to: from + v,
                        color: col.to_string(),
                        tip: format!("{} / {}: {name} {v:.1} s", s.page, s.config),
                    };
                    from += v;
                    seg
                })
                .collect();
            Bar {
                label: s.config.clone(),
                segments,
                sd: 0.0,
            }
        }),
        legend: BREAKDOWN
            .iter()
            .map(|(n, c)| (n.to_string(), c.to_string()))
            .collect(),
    };

    let mut air_legend = config_legend;
    air_legend.push(("up (every configuration)".into(), UP_COLOR.into()));
    let air = BarChart {
        id: "chart-air",
        title: "Bytes over the air (mean; down, with up stacked on it)".into(),
        unit: "KiB".into(),
        groups: groups(&|s, ci| {
            let d = s.air_down_bytes.mean / 1024.0;
            let u = s.air_up_bytes.mean / 1024.0;
            let tip = |dir: &str, v: f64| format!("{} / {}: {dir} {v:.1} KiB", s.page, s.config);
            Bar {
                label: s.config.clone(),
                segments: vec![
                    Segment {
                        from: 0.0,
                        to: d,
                        color: color(ci),
                        tip: tip("down", d),
                    },
                    Segment {
                        from: d,
                        to: d + u,
                        color: UP_COLOR.into(),
                        tip: tip("up", u),
                    },
                ],
                sd: 0.0,
            }
        }),
        legend: air_legend,
    };
    [plt.render(), breakdown.render(), air.render()]
}

/// Loads of (`page`, `config`) that lost objects or left some of the page unrequested: (such
/// loads, all loads, objects lost or not requested).
fn losses(r: &Results, page: &str, config: &str) -> (usize, usize, usize) {
    let mine = r
        .loads
        .iter()
        .filter(|l| l.page == page && l.config == config);
    mine.fold((0, 0, 0), |(bad, all, lost), l| {
        (
            bad + usize::from(l.incomplete()),
            all + 1,
            lost + l.errors + l.missing,
        )
    })
}

/// `3 (2 not used, 1 not referenced)`, or `0`.
fn missing_text(l: &LoadRecord) -> String {
    if l.missing == 0 {
        return "0".into();
    }
    let why: Vec<String> = l
        .missing_why
        .iter()
        .map(|(w, n)| format!("{n} {}", esc(w)))
        .collect();
    format!("{} ({})", l.missing, why.join(", "))
}

fn losses_text((bad, all, lost): (usize, usize, usize)) -> String {
    format!(
        "{lost} object{} lost or not requested in {bad} of {all} load{}",
        if lost == 1 { "" } else { "s" },
        if all == 1 { "" } else { "s" }
    )
}

/// Whether a summary record has a PLT to compare.
fn measured(s: &SummaryRecord) -> bool {
    s.plt_ms.n > 0 && s.plt_ms.mean > 0.0 && s.plt_ms.mean.is_finite()
}

/// `12.3 ± 0.4 s (3 loads)`; without the spread for one load.
fn plt_text(s: &SummaryRecord) -> String {
    let m = s.plt_ms.mean / 1000.0;
    if s.plt_ms.n >= 2 {
        format!(
            "{m:.1} ± {:.1} s ({} loads)",
            s.plt_ms.sd / 1000.0,
            s.plt_ms.n
        )
    } else {
        format!("{m:.1} s (1 load)")
    }
}

/// The change against the baseline: paired by repeat with its 95 % interval when there are
/// two pairs or more, else the change of the means.
fn change_text(r: &Results, s: &SummaryRecord) -> String {
    if s.config == r.baseline {
        return "— (the baseline)".into();
    }
    match (s.plt_change_paired, s.plt_reduction) {
        (Some(p), _) => esc(&p.text()),
        (None, Some(cut)) => format!("{:+.0}% (means, unpaired)", -cut * 100.0),
        (None, None) => format!("- (no {} load of this page)", esc(&r.baseline)),
    }
}

/// The verdict section: an overall line, then one row per page.
fn verdict(r: &Results) -> String {
    let pages = order(r.summary.iter().map(|s| &s.page));
    let configs = order(r.summary.iter().map(|s| &s.config));
    let b = esc(&r.baseline);
    let mut h = String::from(r#"<section id="verdict"><h2>Verdict</h2>"#);
    if pages.is_empty() {
        h.push_str("<p>The run has no loads.</p></section>");
        return h;
    }

    // Overall: the configuration with the least mean PLT over the pages (each page weighs
    // the same), among those measured on every page.
    let over_pages = |c: &str| -> Option<f64> {
        let v: Option<Vec<f64>> = pages
            .iter()
            .map(|p| find(r, p, c).filter(|s| measured(s)).map(|s| s.plt_ms.mean))
            .collect();
        v.map(|v| v.iter().sum::<f64>() / v.len() as f64)
    };
    let mut ranked: Vec<(&String, f64)> = configs
        .iter()
        .filter_map(|c| over_pages(c).map(|m| (*c, m)))
        .collect();
    ranked.sort_by(|a, b| a.1.total_cmp(&b.1));
    let per_page: Vec<Option<&SummaryRecord>> = pages
        .iter()
        .map(|p| {
            r.summary
                .iter()
                .filter(|s| s.page == **p && measured(s))
                .min_by(|a, b| a.plt_ms.mean.total_cmp(&b.plt_ms.mean))
        })
        .collect();
    h.push_str("<p class=\"overall\">");
    match ranked.first() {
        Some((c, m)) => {
            let wins = per_page
                .iter()
                .filter(|s| s.is_some_and(|s| &&s.config == c))
                .count();
            let n = pages.len();
            if n == 1 {
                let _ = write!(
                    h,
                    "Fastest: <b>{}</b>, mean PLT {:.1} s",
                    esc(c),
                    m / 1000.0
                );
            } else {
                let _ = write!(
                    h,
                    "Fastest over the {n} pages (the mean of each page's mean PLT): <b>{}</b>, \
                     {:.1} s",
                    esc(c),
                    m / 1000.0
                );
            }
            match over_pages(&r.baseline) {
                Some(base) if c.as_str() != r.baseline => {
                    let _ = write!(
                        h,
                        " against {:.1} s for {b} ({:+.0}%)",
                        base / 1000.0,
                        (m / base - 1.0) * 100.0
                    );
                }
                Some(_) => h.push_str(" (it is the baseline)"),
                None => {}
            }
            if n > 1 {
                let _ = write!(h, "; fastest on {wins} of the {n} pages");
            }
            h.push('.');
            let lost: usize = pages.iter().map(|p| losses(r, p, c).2).sum();
            if lost > 0 {
                let _ = write!(
                    h,
                    " <span class=\"warn\">⚠ Its loads lost {lost} object{}: not every load of \
                     it is a whole page.</span>",
                    if lost == 1 { "" } else { "s" }
                );
            }
        }
        None => h.push_str("No configuration was measured on every page."),
    }
    let bad: Vec<String> = configs
        .iter()
        .filter_map(|c| {
            let (bad, all, lost) = pages
                .iter()
                .map(|p| losses(r, p, c))
                .fold((0, 0, 0), |(a, b, c), (x, y, z)| (a + x, b + y, c + z));
            (bad > 0).then(|| format!("{} ({})", esc(c), losses_text((bad, all, lost))))
        })
        .collect();
    if bad.is_empty() {
        h.push_str(" Every load fetched every object.");
    } else {
        let _ = write!(
            h,
            " <span class=\"warn\">Loads that lost objects (network failures or HTTP errors) or \
             did not request some of the page's (see <i>not requested</i> under Loads; their \
             PLT is not a whole page's): {}.</span>",
            bad.join("; ")
        );
    }
    if !r.tls_upgrades().is_empty() {
        h.push_str(
            " On some pages the browser fetched hosts over https by itself: see \
             <a href=\"#https\">below</a>.",
        );
    }
    h.push_str("</p>");
    if !r.not_applicable.is_empty() {
        // Configurations that could not load a page at all: named with why, never silent.
        let rows: Vec<String> = r
            .not_applicable
            .iter()
            .map(|n| {
                format!(
                    "<li>{} {}: {}</li>",
                    esc(&n.page),
                    esc(&n.config),
                    esc(&n.reason)
                )
            })
            .collect();
        let _ = write!(
            h,
            "<p class=\"warn\">Not applicable (not loaded, left out of every figure):</p><ul>{}</ul>",
            rows.concat()
        );
    }
    if !r.complete {
        h.push_str("<p class=\"warn\">This run did not finish: the figures are those of the loads made so far.</p>");
    }

    let _ = write!(
        h,
        "<table class=\"verdict\"><tr><th>page</th><th>fastest configuration</th>\
         <th>its PLT, mean ± sd</th><th>change vs {b}, paired by repeat [95 % interval]</th>\
         <th>efficiency</th><th>air down KiB</th><th>air down ÷ {b}'s</th>\
         <th>loads that lost objects</th></tr>"
    );
    for (p, best) in pages.iter().zip(&per_page) {
        let _ = write!(h, "<tr><td>{}</td>", esc(p));
        let Some(s) = best else {
            h.push_str("<td colspan=\"7\">no configuration has a PLT on this page</td></tr>");
            continue;
        };
        let lost = losses(r, p, &s.config);
        let _ = write!(h, "<td><b>{}</b>", esc(&s.config));
        if lost.2 > 0 {
            let _ = write!(h, " <span class=\"warn\">⚠ {}</span>", losses_text(lost));
            // The fastest that loaded the whole page, so that no loss buys the verdict.
            let clean = r
                .summary
                .iter()
                .filter(|x| x.page == **p && measured(x) && losses(r, p, &x.config).2 == 0)
                .min_by(|a, b| a.plt_ms.mean.total_cmp(&b.plt_ms.mean));
            match clean {
                Some(c) => {
                    let _ = write!(
                        h,
                        "<br>fastest without losses: <b>{}</b>, {:.1} s, {}",
                        esc(&c.config),
                        c.plt_ms.mean / 1000.0,
                        change_text(r, c)
                    );
                }
                None => h.push_str("<br>no configuration loaded this page without losses"),
            }
        }
        let base = find(r, p, &r.baseline);
        let air = s.air_down_bytes.mean;
        let air_ratio = match base.map(|b| b.air_down_bytes.mean) {
            Some(ba) if ba > 0.0 => format!("×{:.2}", air / ba),
            _ => "-".into(),
        };
        let lossy: Vec<String> = configs
            .iter()
            .filter_map(|c| {
                let l = losses(r, p, c);
                (l.2 > 0).then(|| format!("{}: {}", esc(c), losses_text(l)))
            })
            .collect();
        let _ = write!(
            h,
            "</td><td>{}</td><td>{}</td><td>{:.0} %</td><td>{:.1}</td><td>{air_ratio}</td><td>{}</td></tr>",
            plt_text(s),
            change_text(r, s),
            s.efficiency.mean * 100.0,
            air / 1024.0,
            if lossy.is_empty() {
                "none".to_string()
            } else {
                format!("<span class=\"warn\">{}</span>", lossy.join("<br>"))
            }
        );
    }
    h.push_str(
        "</table><p class=\"note\">Efficiency: the load's bound (one idle RTT plus its response \
         bodies at the down rate) ÷ its PLT. The interval is Student's t over the per-repeat \
         ratios, from two repeats on; a single load gives the change alone.</p></section>",
    );
    h
}

/// The whole report page: the verdict, the charts, the tables, the configurations' key.
pub fn html(r: &Results) -> String {
    let [plt, bd, air] = charts(r);
    let mut h = String::new();
    let _ = write!(
        h,
        r##"<!doctype html><html><head><meta charset="utf-8"><title>webpep lab report: {p}</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:1200px}}table{{border-collapse:collapse;margin:1em 0}}td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}}th{{background:#f4f4f4}}td:first-child,th:first-child{{text-align:left}}table.verdict td,table.verdict th{{text-align:left}}.warn{{color:#b00020}}.note{{color:#555;font-size:90%}}figure{{margin:1em 0;overflow-x:auto}}nav a{{margin-right:1em}}</style>
</head><body><h1>webpep lab report: {p}</h1>
<p>Profile <b>{p}</b>, time scale {k}, seed {s}; baseline <b>{b}</b>. All times are unscaled (what the real link would show). Each load's HAR is beside this file.</p>
<nav><a href="#verdict">Verdict</a><a href="#charts">Charts</a><a href="#tables">Tables</a><a href="#configurations">Configurations</a></nav>
"##,
        p = esc(&r.profile),
        k = r.time_scale,
        s = r.seed,
        b = esc(&r.baseline)
    );
    h.push_str(&verdict(r));
    h.push_str(r#"<section id="charts"><h2>Charts</h2>"#);
    for svg in [plt, bd, air] {
        h.push_str("<figure>");
        h.push_str(&svg);
        h.push_str("</figure>");
    }
    h.push_str(r#"</section><section id="tables"><h2>Tables</h2>"#);
    let spread = r.spread_note();
    if !spread.is_empty() {
        let _ = write!(
            h,
            "<p class=\"note\">{}</p>",
            esc(&spread.replace('\n', " "))
        );
    }
    h.push_str("<h3>Summary</h3><table><tr><th>page</th><th>config</th><th>loads</th><th>PLT mean s</th><th>sd</th><th>median</th><th>vs baseline</th><th>paired by repeat [95 % CI]</th><th>DNS s</th><th>connect s</th><th>idle s</th><th>payload s</th><th>air down KiB</th><th>air up KiB</th><th>utilization</th><th>efficiency</th><th>errors</th><th>not requested</th></tr>");
    for s in &r.summary {
        let b = s.breakdown_ms;
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{:.2}</td><td>{:.2}</td><td>{:.2}</td><td>{}</td><td>{}</td><td>{:.2}</td><td>{:.2}</td><td>{:.2}</td><td>{:.2}</td><td>{:.1}</td><td>{:.1}</td><td>{:.0} %</td><td>{:.0} %</td><td>{}</td><td>{}</td></tr>",
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
            s.errors,
            s.missing
        );
    }
    h.push_str("</table><h3>Air bytes over all pages</h3><table><tr><th>config</th><th>down KiB</th><th>up KiB</th><th>down, baseline ÷ config</th><th>mean of the pages' ÷</th><th>bodies KiB</th><th>heads KiB</th><th>payload: mean of the pages' ÷ (000 Table 3, 003 Fig. 7)</th><th>errors</th></tr>");
    for a in &r.air_totals {
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{:.1}</td><td>{:.1}</td><td>{}</td><td>{}</td><td>{:.1}</td><td>{:.1}</td><td>{}</td><td>{}</td></tr>",
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
                .map_or("-".into(), |f| format!("×{f:.2}")),
            r.errors_cell(|l| l.config == a.config)
        );
    }
    let _ = write!(
        h,
        "</table><h3>Link use</h3><p>Mean over the pages. Utilization = air bits down ÷ ({:.1} kbit/s × PLT); efficiency = bound ÷ PLT, where the bound is one idle RTT ({:.2} s) plus the load's response bodies at the down rate (over a trace: what the trace offered from the load's start).</p><table><tr><th>config</th><th>utilization</th><th>efficiency</th><th>errors</th></tr>",
        r.link_down_kbps,
        r.link_rtt_ms / 1000.0
    );
    for (c, u, e) in r.link_use() {
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{:.0} %</td><td>{:.0} %</td><td>{}</td></tr>",
            esc(&c),
            u * 100.0,
            e * 100.0,
            r.errors_cell(|l| l.config == c)
        );
    }
    h.push_str("</table>");
    if !r.ablations.is_empty() {
        h.push_str("<h3>Ablation (000 Fig. 8)</h3><p>Mean PLT over the pages; share of the gain = (without − full) ÷ (baseline − full).</p><table><tr><th>full</th><th>switch off</th><th>baseline s</th><th>full s</th><th>without s</th><th>share of the gain</th><th>errors</th></tr>");
        for a in &r.ablations {
            let _ = write!(
                h,
                "<tr><td>{}</td><td>{}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td><td>{:.0} %</td><td>{}</td></tr>",
                esc(&a.full),
                esc(&a.switch),
                a.baseline_s,
                a.full_s,
                a.without_s,
                a.share_of_gain * 100.0,
                r.ablation_errors(a)
            );
        }
        h.push_str("</table>");
    }
    if !r.paper.is_empty() {
        let _ = write!(
            h,
            "<h3>Beside the papers</h3><p>Profile {}: the run's mean PLT and its change vs \
             http11 beside what the paper measured for the page, and the paper's change against \
             its own http11 load.</p><table><tr><th>page</th><th>config</th><th>PLT s</th>\
             <th>paper s</th><th>÷ paper</th><th>change</th><th>paper's change</th>\
             <th>errors</th><th>source</th></tr>",
            esc(&r.profile)
        );
        for p in &r.paper {
            let [paper_s, ratio, change, paper_change] = p.cells(" %");
            let _ = write!(
                h,
                "<tr><td>{}</td><td>{}</td><td>{:.1}</td><td>{paper_s}</td><td>{ratio}</td><td>{change}</td><td>{paper_change}</td><td>{}</td><td>{}</td></tr>",
                esc(&p.page),
                esc(&p.config),
                p.measured_s,
                r.errors_cell(|l| l.page == p.page && l.config == p.config),
                esc(&p.source)
            );
        }
        h.push_str("</table>");
    }
    let tls = r.tls_upgrades();
    if !tls.is_empty() {
        let _ = write!(
            h,
            "<h3 id=\"https\">Fetched over https by the browser</h3><p>{}.</p><ul>",
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
    h.push_str("<h3>Loads</h3><table><tr><th>page</th><th>config</th><th>repeat</th><th>PLT s</th><th>objects</th><th>errors</th><th>not requested (why)</th><th>air down B</th><th>air up B</th><th>late down B (after the load)</th><th>HAR</th></tr>");
    for l in &r.loads {
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{:.2}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td><a href=\"{h}\">{h}</a></td></tr>",
            esc(&l.page),
            esc(&l.config),
            l.repeat,
            l.plt_ms / 1000.0,
            l.objects,
            l.errors,
            missing_text(l),
            l.air_down_bytes,
            l.air_up_bytes,
            l.late_down_bytes,
            h = esc(&l.har)
        );
    }
    // The key last: it is looked up, not read first.
    h.push_str("</table></section><section id=\"configurations\"><h2>Configurations</h2><table class=\"key\"><tr><th>name</th><th>browser policy, proxy mode, switches</th></tr>");
    for (n, d) in &r.configs {
        let _ = write!(
            h,
            "<tr><td>{}</td><td style=\"text-align:left\">{}</td></tr>",
            esc(n),
            esc(d)
        );
    }
    h.push_str("</table></section></body></html>\n");
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::{summarize, BreakdownMs, LinkUse, LoadRecord, RunInfo};
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
                    late_down_bytes: 0,
                    late_up_bytes: 0,
                    objects: 30,
                    inlined: 0,
                    errors: 0,
                    page_objects: 0,
                    missing: 0,
                    missing_why: Default::default(),
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
                    client_proxy: None,
                });
            }
        }
        let summary = summarize(&loads, "http11");
        let mut r = Results {
            air_totals: Vec::new(),
            ablations: Vec::new(),
            paper: Vec::new(),
            not_applicable: Vec::new(),
            complete: true,
            same_link: false,
            repeat_spread: None,
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

    /// One load as the runner records it: the breakdown adds up to the PLT, the link use
    /// comes from its bytes over a 38 kbit/s link with a 2 s RTT.
    fn load(page: &str, config: &str, repeat: usize, plt_ms: f64, errors: usize) -> LoadRecord {
        let link = LinkUse::of(
            plt_ms,
            100_000,
            80_000,
            &webpep_link_model::profile::Rate::Kbps(38.0),
            2_000.0,
        );
        LoadRecord {
            page: page.into(),
            config: config.into(),
            profile: "gprs".into(),
            repeat,
            plt_ms,
            air_down_bytes: 100_000,
            air_up_bytes: 8_000,
            late_down_bytes: 0,
            late_up_bytes: 0,
            objects: 20 - errors,
            inlined: 0,
            errors,
            page_objects: 0,
            missing: 0,
            missing_why: Default::default(),
            breakdown_ms: BreakdownMs {
                dns: 0.1 * plt_ms,
                connect: 0.2 * plt_ms,
                idle: 0.3 * plt_ms,
                payload: 0.4 * plt_ms,
            },
            body_bytes: 80_000,
            head_bytes: 5_000,
            utilization: link.utilization,
            bound_ms: link.bound_ms,
            efficiency: link.efficiency,
            har: String::new(),
            tls_upgrades: Vec::new(),
            client_proxy: None,
        }
    }

    fn results_of(loads: Vec<LoadRecord>) -> Results {
        let configs = order(loads.iter().map(|l| &l.config))
            .into_iter()
            .map(|c| (c.clone(), format!("what {c} does")))
            .collect();
        let info = RunInfo {
            profile: "gprs".into(),
            time_scale: 10.0,
            seed: 1,
            baseline: "http11".into(),
            link_down_kbps: 38.0,
            link_rtt_ms: 2_000.0,
            configs,
        };
        Results::from_loads(info, loads, Vec::new(), true)
    }

    /// The verdict section of a report page.
    fn verdict_of(h: &str) -> &str {
        &h[h.find("id=\"verdict\"").unwrap()..h.find("id=\"charts\"").unwrap()]
    }

    /// The value of attribute `name` in the first tag of `s`.
    fn attr(s: &str, name: &str) -> f64 {
        let at = s.find(&format!(" {name}=\"")).unwrap() + name.len() + 3;
        s[at..at + s[at..].find('"').unwrap()].parse().unwrap()
    }

    #[test]
    fn legends_and_labels_stay_inside_with_twelve_long_configurations() {
        let configs: Vec<String> = (0..12)
            .map(|i| match i {
                0 => "http11".to_string(),
                _ => format!("explicit-compress-transcode-{i}-pipelined-rewrite-dns-url"),
            })
            .collect();
        let mut loads = Vec::new();
        for page in ["yahoo", "paper-sites-cnn-front-page-with-a-long-name"] {
            for (i, c) in configs.iter().enumerate() {
                loads.push(load(page, c, 0, 40_000.0 - 1_000.0 * i as f64, 0));
            }
        }
        let r = results_of(loads);
        for svg in charts(&r) {
            let (w, h) = (attr(&svg, "width"), attr(&svg, "height"));
            assert!(svg.contains(&format!(r#"viewBox="0 0 {w} {h}""#)), "{svg}");
            // Every legend entry: its text's estimated end within the width, its row within
            // the height.
            let items: Vec<&str> = svg.split(r#"<g class="legend-item">"#).skip(1).collect();
            assert!(!items.is_empty());
            for item in &items {
                let text = &item[item.find("<text").unwrap()..];
                let label = &text[text.find('>').unwrap() + 1..text.find("</text>").unwrap()];
                let (x, y) = (attr(text, "x"), attr(text, "y"));
                let end = x + text_width(label, FONT, false);
                assert!(end <= w - PAD + 1e-9, "{label}: ends at {end} of {w}");
                assert!(y + 4.0 <= h, "{label}: row at {y} of {h}");
            }
            // Group labels: every line within its group's share of the width.
            let groups: Vec<&str> = svg.split(r#"<text class="group-label""#).skip(1).collect();
            assert_eq!(groups.len(), 2);
            for g in groups {
                let g = &g[..g.find("</text>").unwrap()];
                for line in g.split("<tspan").skip(1) {
                    let cx = attr(line, "x");
                    let text = &line[line.find('>').unwrap() + 1..line.find("</tspan>").unwrap()];
                    let half = text_width(text, FONT, true) / 2.0;
                    assert!(cx - half >= 0.0 && cx + half <= w, "{text}");
                }
            }
            // Every bar of every configuration carries its name.
            for c in &configs {
                assert_eq!(
                    svg.matches(&format!(r#"text-anchor="end">{c}</text></g>"#))
                        .count(),
                    2,
                    "{c}"
                );
            }
        }
        // Twelve configurations, twelve colours.
        let colors: Vec<String> = (0..12).map(color).collect();
        assert!(
            (1..12).all(|i| !colors[..i].contains(&colors[i])),
            "{colors:?}"
        );
    }

    #[test]
    fn wrapped_lines_fit_and_keep_every_character() {
        for (s, w) in [
            ("paper-sites-cnn-front-page", 60.0),
            (
                "Where the time goes (mean breakdown per configuration)",
                200.0,
            ),
            ("averyveryverylongwordwithoutanybreak", 50.0),
        ] {
            let lines = wrap(s, w, FONT, true);
            assert!(lines.len() > 1, "{s}: {lines:?}");
            assert_eq!(lines.concat(), s, "{lines:?}");
            for l in &lines {
                assert!(text_width(l, FONT, true) <= w, "{l:?} of {lines:?}");
            }
        }
        assert_eq!(wrap("mail", 200.0, FONT, false), vec!["mail"]);
        // A space a line broke at stays between the tspans.
        let t = tspans(
            &wrap("a b", text_width("a ", FONT, false), FONT, false),
            5.0,
            14.0,
        );
        assert!(t.contains(r#">a</tspan> <tspan"#), "{t}");
    }

    #[test]
    fn the_verdict_comes_first_then_the_charts_then_the_tables_and_the_key_last() {
        let r = results_of(vec![
            load("mail", "http11", 0, 60_000.0, 0),
            load("mail", "explicit", 0, 30_000.0, 0),
        ]);
        let h = html(&r);
        let at = |s: &str| h.find(s).unwrap_or_else(|| panic!("no {s}"));
        let first_svg = at("<svg");
        let last_svg = h.rfind("</svg>").unwrap();
        assert!(at("<h2>Verdict</h2>") < first_svg);
        assert_eq!(
            h.find("<h2>"),
            Some(at("<h2>Verdict</h2>")),
            "the first section"
        );
        // The only table above the charts is the verdict's.
        assert_eq!(h[..last_svg].matches("<table").count(), 1);
        assert!(h[..first_svg].contains(r#"<table class="verdict">"#));
        assert!(last_svg < at("<h3>Summary</h3>"));
        // The key is the last table and the last section.
        let key = at(r#"<table class="key">"#);
        assert_eq!(h.rfind("<table"), Some(key));
        assert!(at(r#"id="configurations""#) > h.rfind("<h3>").unwrap());
        assert!(h[key..]
            .contains("<td>explicit</td><td style=\"text-align:left\">what explicit does</td>"));
    }

    #[test]
    fn the_verdict_names_the_fastest_and_its_interval_only_with_repeats() {
        // One load each: the change alone, no spread.
        let one = results_of(vec![
            load("mail", "http11", 0, 60_000.0, 0),
            load("mail", "explicit", 0, 30_000.0, 0),
        ]);
        let h = html(&one);
        let v = verdict_of(&h);
        assert!(
            v.contains(
                "Fastest: <b>explicit</b>, mean PLT 30.0 s against 60.0 s for http11 (-50%)."
            ),
            "{v}"
        );
        // Efficiency: (2 s + 80,000 B at 38 kbit/s) ÷ 30 s = 63 %; bytes as the baseline's.
        assert!(
            v.contains("<td>30.0 s (1 load)</td><td>-50%</td><td>63 %</td><td>97.7</td><td>×1.00</td><td>none</td>"),
            "{v}"
        );
        assert!(v.contains("Every load fetched every object."), "{v}");
        let rows = &v[v.find("</th></tr>").unwrap()..];
        assert!(!rows.contains('±') && !rows.contains('['), "{rows}");
        // Three repeats: mean ± sd and the paired interval.
        let mut loads = Vec::new();
        for (r, (b, e)) in [
            (60_000.0, 30_000.0),
            (80_000.0, 44_000.0),
            (70_000.0, 32_000.0),
        ]
        .into_iter()
        .enumerate()
        {
            loads.push(load("mail", "http11", r, b, 0));
            loads.push(load("mail", "explicit", r, e, 0));
        }
        let r = results_of(loads);
        let paired = r.summary[1].plt_change_paired.unwrap();
        let h = html(&r);
        let v = verdict_of(&h);
        assert!(v.contains("(3 loads)") && v.contains('±'), "{v}");
        assert!(v.contains(&format!("<td>{}</td>", paired.text())), "{v}");
        assert!(paired.text().contains('['));
    }

    #[test]
    fn a_fastest_configuration_that_lost_objects_is_marked() {
        let mut loads = Vec::new();
        for r in 0..2 {
            loads.push(load("mail", "http11", r, 60_000.0, 0));
            loads.push(load("mail", "explicit", r, 40_000.0, 0));
            // The fastest, because an image never came.
            loads.push(load("mail", "ziproxy", r, 24_000.0, usize::from(r == 1)));
        }
        let h = html(&results_of(loads));
        let v = verdict_of(&h);
        assert!(
            v.contains(
                "<b>ziproxy</b> <span class=\"warn\">⚠ 1 object lost or not requested in 1 of 2 loads</span>"
            ),
            "{v}"
        );
        assert!(
            v.contains("fastest without losses: <b>explicit</b>, 40.0 s"),
            "{v}"
        );
        assert!(v.contains("⚠ Its loads lost 1 object"), "{v}");
        assert!(
            v.contains("ziproxy (1 object lost or not requested in 1 of 2 loads)"),
            "{v}"
        );
        assert!(!v.contains("Every load fetched every object."), "{v}");
    }

    #[test]
    fn nice_axis() {
        assert_eq!(nice_max(0.0), 1.0);
        assert_eq!(nice_max(7.0), 10.0);
        assert_eq!(nice_max(196.3), 200.0);
        assert_eq!(nice_max(134.0), 150.0);
        assert_eq!(nice_max(f64::NAN), 1.0);
        assert_eq!(nice_max(0.3), 0.5);
        assert_eq!(format_tick(0.03, 0.03), "0.03");
        assert_eq!(format_tick(0.5, 0.1), "0.5");
        assert_eq!(format_tick(120.0, 30.0), "120");
    }
}
