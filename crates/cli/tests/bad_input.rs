//! Bad input (issue 2, "Bad input"): an unknown profile, a malformed trace or TOML profile, an
//! impossible parameter → a clear error naming the file (and line), exit code 2, and nothing
//! else happens. Every error here is found before any namespace is made, so these tests need
//! neither root nor user namespaces; they also pass without ../shared (the trace presets are
//! pointed at an empty directory).
//!
//! Also the happy paths that need no root: `link profiles`, `link fec-sweep`, and a custom TOML
//! profile resolving in-process.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

use webpep_link_model::presets::preset;
use webpep_link_model::{Profile, PRESET_NAMES};

const BIN: &str = env!("CARGO_BIN_EXE_webpep");

/// A directory under the system temp dir, unique to this process and test, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("webpep-bad-input-{}-{tag}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create temp dir");
        TempDir(dir)
    }

    fn path(&self) -> &Path {
        &self.0
    }

    /// Writes `contents` to `name` inside the directory; returns its path.
    fn file(&self, name: &str, contents: &str) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, contents).expect("write temp file");
        p
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs the binary with `WEBPEP_TRACE_DIR` set to an empty directory, so the trace presets
/// never depend on ../shared.
fn webpep(args: &[&str]) -> Output {
    let empty = TempDir::new("traces");
    Command::new(BIN)
        .args(args)
        .env("WEBPEP_TRACE_DIR", empty.path())
        .env_remove("WEBPEP_LOG")
        .output()
        .expect("run webpep")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Asserts exit code 2, an error on stderr containing every one of `needles`, and nothing on
/// stdout (no child ran). Returns stderr.
fn expect_bad_input(args: &[&str], needles: &[&str]) -> String {
    let o = webpep(args);
    let err = stderr(&o);
    assert_eq!(
        o.status.code(),
        Some(2),
        "webpep {args:?}: expected exit code 2, got {:?}\nstderr: {err}\nstdout: {}",
        o.status,
        stdout(&o)
    );
    assert!(
        err.starts_with("webpep: error: "),
        "webpep {args:?}: stderr should be our error, not a usage message:\n{err}"
    );
    for n in needles {
        assert!(
            err.contains(n),
            "webpep {args:?}: stderr should mention {n:?}:\n{err}"
        );
    }
    assert!(
        o.stdout.is_empty(),
        "webpep {args:?}: nothing should be printed on stdout, got:\n{}",
        stdout(&o)
    );
    err
}

/// `trace:DOWN,UP` for two paths.
fn trace_spec(down: &Path, up: &Path) -> String {
    format!("trace:{},{}", down.display(), up.display())
}

/// Runs a trace profile with a bad downlink file, and the same file as the uplink, through both
/// `link -- true` and `link probe`; the error must name the file and `line`.
fn expect_bad_trace(dir: &TempDir, bad: &Path, line: &str, what: &str) {
    let good = dir.file("good.trace", "1\n2\n2\n5\n");
    let bad_s = bad.display().to_string();
    for spec in [trace_spec(bad, &good), trace_spec(&good, bad)] {
        expect_bad_input(
            &["link", "--profile", &spec, "--", "true"],
            &[&bad_s, line, what],
        );
        expect_bad_input(
            &["link", "probe", "--profile", &spec],
            &[&bad_s, line, what],
        );
    }
}

/// A valid custom profile (gprs under another name), as TOML text.
fn custom_toml(name: &str) -> String {
    let mut p = preset("gprs", None).expect("gprs preset");
    p.name = name.into();
    p.description = "a custom profile for the tests".into();
    p.to_toml().expect("serialize profile")
}

/// `custom_toml` with the first line starting with `key = ` (after `[section]`) replaced.
fn custom_toml_with(section: &str, key: &str, new_line: &str) -> String {
    let text = custom_toml("custom");
    let mut out = Vec::new();
    let mut current = String::new();
    let mut done = false;
    for line in text.lines() {
        if line.starts_with('[') {
            current = line.trim_matches(|c| c == '[' || c == ']').to_string();
        }
        if !done && current == section && line.starts_with(&format!("{key} = ")) {
            out.push(new_line.to_string());
            done = true;
        } else {
            out.push(line.to_string());
        }
    }
    assert!(done, "no {key} in [{section}] of:\n{text}");
    out.join("\n") + "\n"
}

fn expect_bad_toml(dir: &TempDir, name: &str, text: &str, needles: &[&str]) -> String {
    let path = dir.file(name, text);
    let p = path.display().to_string();
    let mut all = vec![p.as_str()];
    all.extend_from_slice(needles);
    expect_bad_input(&["link", "probe", "--profile", &p], &all);
    expect_bad_input(&["link", "--profile", &p, "--", "true"], &all)
}

// ---- unknown profile ----

#[test]
fn unknown_profile_is_bad_input() {
    let err = expect_bad_input(
        &["link", "--profile", "nope", "--", "true"],
        &["nope", "unknown profile", "gprs"],
    );
    // The message lists the known profiles.
    for name in PRESET_NAMES {
        assert!(err.contains(name), "{name} missing from: {err}");
    }
    expect_bad_input(
        &["link", "probe", "--profile", "nope"],
        &["nope", "unknown profile"],
    );
}

#[test]
fn trace_preset_without_traces_is_bad_input() {
    // WEBPEP_TRACE_DIR is an empty directory: the evdo traces are not there.
    expect_bad_input(
        &["link", "probe", "--profile", "evdo"],
        &["Verizon-EVDO-driving.down"],
    );
}

#[test]
fn trace_spec_without_two_files_is_bad_input() {
    expect_bad_input(
        &["link", "--profile", "trace:only-one-file", "--", "true"],
        &["trace:only-one-file", "DOWNLINK_FILE,UPLINK_FILE"],
    );
}

// ---- malformed traces ----

#[test]
fn trace_with_non_numeric_line() {
    let dir = TempDir::new("nonnum");
    let bad = dir.file("nonnum.down", "0\n12\n12\nfast\n30\n");
    expect_bad_trace(&dir, &bad, "line 4", "\"fast\"");
    // A negative or fractional timestamp is not a millisecond count either.
    let neg = dir.file("neg.down", "0\n-5\n");
    expect_bad_trace(&dir, &neg, "line 2", "\"-5\"");
    let frac = dir.file("frac.down", "1.5\n");
    expect_bad_trace(&dir, &frac, "line 1", "\"1.5\"");
}

#[test]
fn trace_with_decreasing_timestamps() {
    let dir = TempDir::new("decr");
    // Blank lines count for the line number.
    let bad = dir.file("decr.down", "1\n5\n\n9\n7\n12\n");
    expect_bad_trace(&dir, &bad, "line 5", "decrease");
}

#[test]
fn empty_trace() {
    let dir = TempDir::new("empty");
    let bad = dir.file("empty.down", "");
    expect_bad_trace(&dir, &bad, "line 1", "empty");
    let blank = dir.file("blank.down", "\n  \n\n");
    expect_bad_trace(&dir, &blank, "line 1", "empty");
}

#[test]
fn missing_trace_file() {
    let dir = TempDir::new("missing");
    let good = dir.file("good.trace", "1\n2\n");
    let missing = dir.path().join("no-such.down");
    let m = missing.display().to_string();
    let spec = trace_spec(&good, &missing);
    expect_bad_input(&["link", "--profile", &spec, "--", "true"], &[&m]);
    expect_bad_input(&["link", "probe", "--profile", &spec], &[&m]);
}

// ---- TOML profiles ----

#[test]
fn toml_with_negative_rate() {
    let dir = TempDir::new("negrate");
    let text = custom_toml_with("down.rate", "kbps", "kbps = -38.0");
    expect_bad_toml(
        &dir,
        "negrate.toml",
        &text,
        &["down.rate", "-38", "positive"],
    );
}

#[test]
fn toml_with_probability_above_one() {
    let dir = TempDir::new("prob");
    let text = custom_toml_with("up.loss", "random", "random = 1.5");
    expect_bad_toml(
        &dir,
        "prob.toml",
        &text,
        &["up.loss.random", "1.5", "probability"],
    );
    let text = custom_toml_with("down.jitter", "tail_prob", "tail_prob = 2.0");
    expect_bad_toml(
        &dir,
        "tail.toml",
        &text,
        &["down.jitter.tail_prob", "probability"],
    );
}

#[test]
fn toml_with_unknown_key() {
    let dir = TempDir::new("unknown");
    let text = custom_toml_with(
        "down",
        "base_delay_ms",
        "base_delay_ms = 200.0\nbase_dealy = 5",
    );
    let line = text
        .lines()
        .position(|l| l.starts_with("base_dealy"))
        .expect("typo line")
        + 1;
    expect_bad_toml(
        &dir,
        "unknown.toml",
        &text,
        &["base_dealy", "unknown field", &format!("line {line}")],
    );
}

#[test]
fn toml_with_syntax_errors() {
    let dir = TempDir::new("syntax");
    // An unterminated string on line 2.
    expect_bad_toml(
        &dir,
        "string.toml",
        "name = \"x\"\ndescription = \"oops\n",
        &["line 2"],
    );
    // A key without a value on line 3 of an otherwise valid profile.
    let mut text = custom_toml("custom");
    text.insert_str(
        text.find('\n').expect("first line") + 1,
        "# a comment\nqueue_bytes =\n",
    );
    expect_bad_toml(&dir, "novalue.toml", &text, &["line 3"]);
    // A missing field.
    expect_bad_toml(
        &dir,
        "short.toml",
        "name = \"x\"\n",
        &["missing field", "down"],
    );
    // Not TOML at all.
    expect_bad_toml(&dir, "binary.toml", "\u{1}\u{2}[[[ ]", &["line 1"]);
}

#[test]
fn missing_toml_file() {
    let dir = TempDir::new("notoml");
    let p = dir.path().join("absent.toml").display().to_string();
    expect_bad_input(&["link", "probe", "--profile", &p], &[&p]);
}

#[test]
fn toml_with_a_bad_trace_names_the_trace_file() {
    // A TOML profile whose downlink is a trace (relative to the profile file) that is broken.
    let dir = TempDir::new("tomltrace");
    let trace = dir.file("bad.down", "3\n2\n");
    let mut p: Profile = preset("gprs", None).unwrap();
    p.name = "traced".into();
    p.down.rate = webpep_link_model::profile::RateSpec::Trace("bad.down".into());
    let path = dir.file("traced.toml", &toml::to_string(&p).unwrap());
    let t = trace.display().to_string();
    expect_bad_input(
        &["link", "probe", "--profile", &path.display().to_string()],
        &[&t, "line 2", "decrease"],
    );
}

// ---- impossible parameters ----

#[test]
fn time_scale_must_be_positive() {
    for (k, shown) in [
        ("0", "0"),
        ("-3", "-3"),
        ("-0.5", "-0.5"),
        ("nan", "NaN"),
        ("inf", "inf"),
    ] {
        let msg = format!("--time-scale {shown} must be a positive number");
        expect_bad_input(&["link", "--time-scale", k, "--", "true"], &[&msg]);
        expect_bad_input(&["link", "probe", "--time-scale", k], &[&msg]);
    }
    expect_bad_input(&["link", "-k", "-3", "--", "true"], &["--time-scale -3"]);
    expect_bad_input(
        &["link", "--time-scale=-3", "--", "true"],
        &["--time-scale -3"],
    );
}

#[test]
fn fec_sweep_rate_must_be_positive() {
    expect_bad_input(
        &["link", "fec-sweep", "--rate-kbps", "-1"],
        &["--rate-kbps", "-1", "positive"],
    );
    expect_bad_input(
        &["link", "fec-sweep", "--rate-kbps", "0"],
        &["--rate-kbps", "positive"],
    );
    expect_bad_input(
        &["link", "fec-sweep", "--bytes", "0"],
        &["--bytes", "positive"],
    );
}

#[test]
fn log_interval_must_be_positive() {
    let dir = TempDir::new("log");
    let log = dir.path().join("x.csv").display().to_string();
    expect_bad_input(
        &["link", "--log", &log, "--log-interval", "0", "--", "true"],
        &["--log-interval", "positive"],
    );
    assert!(!Path::new(&log).exists(), "no log is written on bad input");
}

#[test]
fn unwritable_log_is_bad_input() {
    let dir = TempDir::new("nolog");
    let log = dir.path().join("no-such-dir").join("x.csv");
    let l = log.display().to_string();
    expect_bad_input(&["link", "--log", &l, "--", "true"], &["--log", &l]);
}

#[test]
fn malformed_command_line_is_exit_code_2() {
    // clap's own usage errors also exit with 2.
    let o = webpep(&["link", "--time-scale", "fast", "--", "true"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("fast"), "{}", stderr(&o));
}

// ---- happy paths that need no root ----

#[test]
fn profiles_lists_every_preset_in_order() {
    let o = webpep(&["link", "profiles"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let firsts: Vec<&str> = out
        .lines()
        .skip(1) // header
        .take_while(|l| !l.trim().is_empty())
        .map(|l| l.split_whitespace().next().unwrap_or(""))
        .collect();
    assert_eq!(firsts, PRESET_NAMES, "\n{out}");
    // Without traces, the trace presets say so.
    for name in ["evdo", "umts", "lte"] {
        let line = out
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap();
        assert!(line.contains("unavailable"), "{line}");
    }
    assert!(out.contains("trace:DOWN_FILE,UP_FILE"), "{out}");
}

#[test]
fn profiles_json_parses() {
    let o = webpep(&["link", "profiles", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("valid JSON");
    let list = v.as_array().expect("a JSON array");
    let names: Vec<&str> = list.iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, PRESET_NAMES);
    for p in list {
        let name = p["name"].as_str().unwrap();
        if ["evdo", "umts", "lte"].contains(&name) {
            assert!(p["unavailable"].is_string(), "{p}");
        } else {
            assert!(p["down_kbps"].as_f64().unwrap() > 0.0, "{p}");
            assert!(p["up_kbps"].as_f64().unwrap() > 0.0, "{p}");
            assert!(p["rtt_ms"].as_f64().unwrap() > 0.0, "{p}");
            // Every parameter is there, and they form a valid profile again.
            let back: Profile = serde_json::from_value(p["parameters"].clone()).unwrap();
            assert_eq!(back.name, name);
            back.resolve(None).unwrap();
        }
    }
    let gprs = list.iter().find(|p| p["name"] == "gprs").unwrap();
    assert_eq!(gprs["down_kbps"].as_f64(), Some(38.0));
}

#[test]
fn profiles_toml_writes_a_file_that_reads_back_the_same() {
    let o = webpep(&["link", "profiles", "--toml", "cdma-1x"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    let parsed = Profile::from_toml(&text, "stdout").unwrap();
    assert_eq!(parsed, preset("cdma-1x", None).unwrap());
    // Saved as a file, the profile is accepted wherever a profile is, and prints the same.
    let dir = TempDir::new("profiles-toml");
    let file = dir.file("mine.toml", &text);
    let o = webpep(&["link", "profiles", "--toml", file.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), text);
    expect_bad_input(
        &["link", "profiles", "--toml", "gprs-9000"],
        &["gprs-9000", "known profiles"],
    );
}

#[test]
fn profiles_with_traces_present() {
    // Tiny traces under the evdo/umts/lte file names make those presets available.
    let dir = TempDir::new("tracedir");
    for f in [
        "Verizon-EVDO-driving",
        "TMobile-UMTS-driving",
        "ATT-LTE-driving-2016",
    ] {
        dir.file(&format!("{f}.down"), "1\n2\n3\n4\n");
        dir.file(&format!("{f}.up"), "4\n");
    }
    let o = Command::new(BIN)
        .args(["link", "profiles"])
        .env("WEBPEP_TRACE_DIR", dir.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(!out.contains("unavailable"), "{out}");
    // 4 × 1500 bytes in 4 ms = 12000 kbps.
    let evdo = out.lines().find(|l| l.starts_with("evdo ")).unwrap();
    assert!(evdo.contains("12000.0"), "{evdo}");
}

#[test]
fn fec_sweep_prints_both_tables_and_the_optimum() {
    let o = webpep(&["link", "fec-sweep", "--bytes", "100000"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("Normalized transfer time with ARQ"), "{out}");
    assert!(out.contains("Residual data loss without ARQ"), "{out}");
    let opt = out
        .lines()
        .find(|l| l.starts_with("Optimum FEC share per error rate:"))
        .unwrap_or_else(|| panic!("no optimum line in:\n{out}"));
    // One optimum per error rate (five by default).
    assert_eq!(opt.matches('→').count(), 5, "{opt}");
    assert!(out.contains('*'), "the optimum is marked:\n{out}");
}

/// Each table has one row per FEC share (0..=20 %), not one per (error rate, share) point.
#[test]
fn fec_sweep_tables_have_one_row_per_share() {
    let o = webpep(&["link", "fec-sweep", "--bytes", "100000"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let rows = out
        .lines()
        .filter(|l| {
            let t = l.trim_start();
            t.split_whitespace()
                .next()
                .is_some_and(|w| w.parse::<u32>().is_ok())
        })
        .count();
    assert_eq!(rows, 2 * 21, "two tables of 21 rows:\n{out}");
}

#[test]
fn fec_sweep_json_parses() {
    let o = webpep(&["link", "fec-sweep", "--json", "--bytes", "100000"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("valid JSON");
    let points = v["points"].as_array().expect("points");
    assert_eq!(points.len(), 5 * 21);
    for p in points {
        for k in [
            "error_rate",
            "fec_share",
            "normalized_time",
            "residual_block_loss",
            "packet_loss_no_arq",
        ] {
            assert!(p[k].is_number(), "{k} in {p}");
        }
    }
    let optimum = v["optimum"].as_array().expect("optimum");
    assert_eq!(optimum.len(), 5);
    // The optimum FEC share does not shrink as the error rate grows (000 Fig. 6).
    let shares: Vec<f64> = optimum.iter().map(|o| o[1].as_f64().unwrap()).collect();
    assert!(shares.windows(2).all(|w| w[0] <= w[1]), "{shares:?}");
}

#[test]
fn custom_toml_profile_resolves() {
    let dir = TempDir::new("custom");
    let path = dir.file("mine.toml", &custom_toml("my-gprs"));
    let r = webpep_link_model::resolve(&path.display().to_string()).expect("valid profile");
    assert_eq!(r.profile.name, "my-gprs");
    assert_eq!(r.down_kbps(), 38.0);
    let gprs = webpep_link_model::resolve("gprs").unwrap();
    assert_eq!(r.rtt_ms(), gprs.rtt_ms());

    // A relative trace path is relative to the profile file.
    dir.file("t.down", "0\n1\n2\n");
    let mut p = preset("gprs", None).unwrap();
    p.name = "traced".into();
    p.up.rate = webpep_link_model::profile::RateSpec::Trace("t.down".into());
    let path = dir.file("traced.toml", &toml::to_string(&p).unwrap());
    let r = webpep_link_model::resolve(&path.display().to_string()).expect("valid profile");
    // 3 × 1500 bytes every 2 ms = 18000 kbps.
    assert_eq!(r.up_kbps(), 18000.0);
}

// ---- webpep lab ----------------------------------------------------------------------------

/// A corrupt corpus manifest, a broken configuration file, unknown names: exit 2 naming the
/// file or the name, before any namespace is made.
#[test]
fn lab_run_bad_corpus_and_configuration_files() {
    let dir = TempDir::new("lab");
    let corpus = dir.path().join("corpus");
    std::fs::create_dir_all(&corpus).unwrap();
    dir.file("corpus/manifest.json", "{\"format_version\": 1, \"name\": ");
    let c = corpus.display().to_string();
    expect_bad_input(
        &["lab", "run", "--corpus", &c, "--quiet"],
        &["manifest.json", "corrupt"],
    );
    expect_bad_input(
        &["lab", "corpus", "list", &c],
        &["manifest.json", "corrupt"],
    );
    let missing = dir.path().join("nowhere").display().to_string();
    expect_bad_input(&["lab", "corpus", "list", &missing], &["nowhere"]);
    let cfg = dir.file("configs.toml", "[fast]\npolicy = \"spdy\"\n");
    let cfg_s = cfg.display().to_string();
    expect_bad_input(
        &[
            "lab",
            "run",
            "--config-file",
            &cfg_s,
            "--corpus",
            &c,
            "--quiet",
        ],
        &["configs.toml"],
    );
    expect_bad_input(
        &["lab", "configs", "--config-file", &cfg_s],
        &["configs.toml"],
    );
    expect_bad_input(
        &["lab", "run", "--configs", "http11,warp", "--quiet"],
        &["warp", "http11-6"],
    );
    expect_bad_input(
        &["lab", "run", "--configs", "pipelining", "--quiet"],
        &["baseline", "http11"],
    );
    expect_bad_input(&["lab", "run", "--repeat", "0", "--quiet"], &["--repeat"]);
    let har = dir.file("broken.har", "{\"log\": ");
    let out = dir.path().join("imported").display().to_string();
    expect_bad_input(
        &[
            "lab",
            "import",
            "har",
            &har.display().to_string(),
            "--out",
            &out,
        ],
        &["broken.har"],
    );
    // A HAR that parses but holds no importable page: the error names it, and the output
    // directory the import created is removed.
    let empty = dir.file(
        "empty.har",
        r#"{"log": {"version": "1.2", "creator": {"name": "t", "version": "1"}, "entries": [
            {"startedDateTime": "2015-08-20T14:50:21.123Z", "time": 1,
             "request": {"method": "GET", "url": "data:text/html,x", "headers": []},
             "response": {"status": 200, "headers": [], "content": {"size": 1, "mimeType": "text/html"}},
             "timings": {"send": 0, "wait": 1, "receive": 1}}]}}"#,
    );
    expect_bad_input(
        &[
            "lab",
            "import",
            "har",
            &empty.display().to_string(),
            "--out",
            &out,
        ],
        &["empty.har"],
    );
    assert!(
        !std::path::Path::new(&out).exists(),
        "{out} left behind by a failed import"
    );
}

#[test]
fn lab_configs_lists_the_built_in_configurations() {
    let o = webpep(&["lab", "configs"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    for name in [
        "http10",
        "http11",
        "http11-6",
        "pipelining",
        "h2",
        "http11-warm",
    ] {
        assert!(out.lines().any(|l| l.starts_with(name)), "{name} in\n{out}");
    }
}
