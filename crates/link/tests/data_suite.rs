//! The data suite: tests on the real files in ../shared/data (run by `.ci/run` with
//! `cargo test -p webpep-link --features data-suite --test data_suite`; plain `cargo test`
//! does not build it). A missing data directory is a failure here, not a skip.

mod common;

use std::path::PathBuf;

use common::{can_run, trace_rate_matches};
use webpep_link_model::presets::{find_trace_dir, preset, PRESET_NAMES};
use webpep_link_model::{resolve, Trace};

fn trace_dir() -> PathBuf {
    find_trace_dir().expect(
        "the data suite needs ../shared/data/traces (or WEBPEP_TRACE_DIR) beside the project",
    )
}

#[test]
fn every_real_trace_parses_and_has_the_documented_rate() {
    let dir = trace_dir();
    // ../shared/data/README.md: mean rates in Mbps.
    let documented = [
        ("Verizon-EVDO-driving.down", 0.52),
        ("Verizon-EVDO-driving.up", 0.84),
        ("TMobile-UMTS-driving.down", 2.0),
        ("TMobile-UMTS-driving.up", 0.94),
        ("ATT-LTE-driving-2016.down", 4.6),
        ("ATT-LTE-driving-2016.up", 1.9),
        ("TMobile-LTE-short.down", 16.7),
        ("TMobile-LTE-short.up", 13.3),
    ];
    for (file, mbps) in documented {
        let t = Trace::load(&dir.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        let got = t.mean_kbps() / 1000.0;
        assert!(
            (got - mbps).abs() / mbps < 0.05,
            "{file}: {got:.2} Mbps vs {mbps}"
        );
    }
}

#[test]
fn trace_presets_resolve_from_the_data_directory() {
    let dir = trace_dir();
    for name in ["evdo", "umts", "lte"] {
        assert!(PRESET_NAMES.contains(&name));
        let p = preset(name, Some(&dir)).and_then(|p| p.resolve(None));
        let p = p.unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(p.down_kbps() > 100.0, "{name}");
    }
}

#[test]
fn evdo_delivers_its_trace_rate_over_30_seconds() {
    if !can_run("evdo_delivers_its_trace_rate_over_30_seconds") {
        return;
    }
    let dir = trace_dir();
    let p = resolve("evdo").expect("evdo resolves");
    let trace = Trace::load(&dir.join("Verizon-EVDO-driving.down")).expect("trace");
    trace_rate_matches(&p, &trace, 2.0);
}

#[test]
fn umts_delivers_its_trace_rate_over_30_seconds() {
    if !can_run("umts_delivers_its_trace_rate_over_30_seconds") {
        return;
    }
    let dir = trace_dir();
    let p = resolve("umts").expect("umts resolves");
    let trace = Trace::load(&dir.join("TMobile-UMTS-driving.down")).expect("trace");
    trace_rate_matches(&p, &trace, 1.0);
}
