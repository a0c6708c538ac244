//! What the papers measured for the paper-sites pages, so a run can be read beside them: the
//! page-load times of 000 (Mozilla 1.4 over the GPRS network of its Table 1) and the W-PEP
//! speed-ups of 003 Table 7, keyed by the lab configuration that does what the paper's column
//! did. Only runs over the `gprs` profile are compared: the other profiles are other links.

use serde::{Deserialize, Serialize};

/// One measured value of a paper, for a page under a lab configuration.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PaperRef {
    pub page: &'static str,
    pub config: &'static str,
    /// The paper's mean page-load time, seconds (None where it printed only a speed-up).
    pub plt_s: Option<f64>,
    /// Its change against its own `http11` load of the page (−0.45: 45 % shorter).
    pub change: f64,
    /// Table and column.
    pub source: &'static str,
}

/// The profile the references were measured over.
pub const PROFILE: &str = "gprs";

const TABLE1: &str = "000 Table 1 (WWAN-Virtual)";
const TABLE6_OPT: &str = "000 Table 6, Opt. (6 conn.)";
const TABLE6_PIPE: &str = "000 Table 6, Pipel.";
/// Full compression, 6 connections and DNS boosting or URL rewriting: no client set-up.
const TABLE7: &str = "000 Table 7, 1.1-Opt + DNS-b/URL-r";
/// The same plus TCP-WWAN (a tuned TCP at the edge), as the explicit proxy's air tuning.
const TABLE9: &str = "000 Table 9, No-reconf.-I";
/// A transparent compressing proxy (interception at layer 4).
const W_PEP: &str = "003 Table 7, W-PEP speed-up";

/// 000 Table 1, WWAN-Virtual: Mozilla/HTTP-1.1 over GPRS, seconds.
const HTTP11: &[(&str, f64)] = &[
    ("altavista", 13.3),
    ("mail", 34.5),
    ("yahoo", 35.0),
    ("go", 69.2),
    ("bbc", 72.6),
    ("amazon", 76.4),
    ("aol", 80.0),
    ("sourceforge", 92.1),
    ("fortunecity", 114.4),
    ("cnn", 196.3),
];

/// Later tables of 000 for its four example sites: (config, source, mail, yahoo, amazon, cnn).
const FOUR_SITES: &[(&str, &str, [f64; 4])] = &[
    ("http11-6", TABLE6_OPT, [21.5, 24.2, 43.5, 123.0]),
    ("pipelining", TABLE6_PIPE, [15.2, 22.7, 39.2, 89.1]),
    ("transparent-url", TABLE7, [16.5, 13.4, 33.8, 101.1]),
    ("transparent-dns", TABLE7, [16.5, 13.4, 33.8, 101.1]),
    ("explicit", TABLE9, [15.7, 11.6, 30.8, 96.2]),
];
const FOUR: [&str; 4] = ["mail", "yahoo", "amazon", "cnn"];

/// 003 Table 7: download time without W-PEP ÷ with it, for the Top 10 pages (003 Table 6).
const TOP10_SPEEDUP: &[(&str, f64)] = &[
    ("top10-altavista", 1.51),
    ("top10-chek", 1.67),
    ("top10-cnn", 2.8),
    ("top10-excite", 2.43),
    ("top10-fortunecity", 1.97),
    ("top10-go", 1.72),
    ("top10-google", 1.76),
    ("top10-lycos", 1.76),
    ("top10-ms", 2.37),
    ("top10-yahoo", 3.18),
];

/// Every reference, in table order.
pub fn all() -> Vec<PaperRef> {
    let mut v: Vec<PaperRef> = HTTP11
        .iter()
        .map(|&(page, s)| PaperRef {
            page,
            config: "http11",
            plt_s: Some(s),
            change: 0.0,
            source: TABLE1,
        })
        .collect();
    for &(config, source, times) in FOUR_SITES {
        for (page, s) in FOUR.iter().zip(times) {
            let base = HTTP11.iter().find(|(p, _)| p == page).map(|(_, b)| *b);
            v.push(PaperRef {
                page,
                config,
                plt_s: Some(s),
                change: base.map_or(0.0, |b| s / b - 1.0),
                source,
            });
        }
    }
    // W-PEP intercepted the browser's traffic (a transparent proxy at layer 4).
    for &(page, speedup) in TOP10_SPEEDUP {
        v.push(PaperRef {
            page,
            config: "intercept",
            plt_s: None,
            change: 1.0 / speedup - 1.0,
            source: W_PEP,
        });
    }
    v
}

/// The reference for a page under a configuration in a run over `profile`, if a paper has one.
pub fn lookup(profile: &str, page: &str, config: &str) -> Option<PaperRef> {
    if profile != PROFILE {
        return None;
    }
    all()
        .into_iter()
        .find(|r| r.page == page && r.config == config)
}

/// One row of the comparison with the papers, as `results.json` carries it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PaperRow {
    pub page: String,
    pub config: String,
    /// The run's mean PLT, seconds.
    pub measured_s: f64,
    /// The paper's, seconds (absent where it printed only a speed-up).
    pub paper_s: Option<f64>,
    /// The run's change against `http11` for the page (paired by repeat when `http11` is the
    /// baseline, else the ratio of the means); absent when the run has no `http11` load of it.
    pub measured_change: Option<f64>,
    /// The paper's change against its own `http11` load (0 for the `http11` row itself).
    pub paper_change: f64,
    pub source: String,
}

impl PaperRow {
    /// The row's paper PLT, measured ÷ paper, change and paper's change as shown in tables
    /// ("-" where there is none; no change on the `http11` row, which is the reference);
    /// `percent` is the unit after a change ("%" or " %").
    pub fn cells(&self, percent: &str) -> [String; 4] {
        let own = self.config == "http11";
        let pct = |c: Option<f64>| match c {
            Some(c) if !own => format!("{:+.0}{percent}", c * 100.0),
            _ => "-".to_string(),
        };
        let (paper_s, ratio) = match self.paper_s {
            Some(p) => (format!("{p:.1}"), format!("×{:.2}", self.measured_s / p)),
            None => ("-".into(), "-".into()),
        };
        [
            paper_s,
            ratio,
            pct(self.measured_change),
            pct(Some(self.paper_change)),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_follow_the_papers_own_percentages() {
        // 000 prints the improvements beside the times: Table 6 pipelining 55.9 % on mail and
        // 54.6 % on cnn, Table 9 No-reconf.-I 54.4 % on mail and 50.9 % on cnn.
        let c = |page, config| lookup("gprs", page, config).unwrap().change;
        assert!((c("mail", "pipelining") + 0.559).abs() < 0.001);
        assert!((c("cnn", "pipelining") + 0.546).abs() < 0.001);
        assert!((c("mail", "explicit") + 0.544).abs() < 0.001);
        assert!((c("cnn", "explicit") + 0.509).abs() < 0.001);
        assert_eq!(c("cnn", "http11"), 0.0);
        // 003: the speed-up of 3.18 on yahoo is a 69 % shorter load.
        assert!((c("top10-yahoo", "intercept") + 0.686).abs() < 0.001);
        assert_eq!(
            lookup("gprs", "top10-yahoo", "intercept").unwrap().plt_s,
            None
        );
    }

    #[test]
    fn only_gprs_runs_and_known_pairs_have_references() {
        assert!(lookup("cdma-1x", "mail", "http11").is_none());
        assert!(lookup("gprs", "mail", "h2").is_none());
        assert!(lookup("gprs", "session-cnn", "http11").is_none());
        assert_eq!(all().len(), 10 + 5 * 4 + 10);
        // Every page named is one of the paper-sites corpus.
        let corpus = webpep_corpus::paper_sites::specs();
        for r in all() {
            assert!(corpus.iter().any(|p| p.id == r.page), "{}", r.page);
        }
    }
}
