//! `report.html` in a real browser (issue 31 item 3): headless Chromium, driven over the
//! lab's DevTools pipe, lays out the report of a small run with the fonts it really has, and
//! JavaScript checks that every chart element lies inside its SVG, that no two legend
//! entries or labels overlap, that every chart, bar group and bar carries its label, and that
//! the verdict comes first, the charts before the tables and the configurations' key last.
//!
//! The browser runs as a plain process on a file:// page: no namespace, no network. Without
//! Chromium the test prints why and passes, unless `WEBPEP_REQUIRE_CHROMIUM=1` (CI).

use std::collections::BTreeMap;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use webpep_lab::cdp::Cdp;
use webpep_lab::chromium::{available_for_test, find_binary};
use webpep_lab::report;
use webpep_lab::results::{BreakdownMs, LinkUse, LoadRecord, Results, RunInfo};

/// Every DevTools exchange and the page's load are bounded by this.
const STEP: Duration = Duration::from_secs(30);

/// gprs-like link facts, as the runner takes them from the profile.
const DOWN_KBPS: f64 = 39.6;
const RTT_MS: f64 = 1_600.0;

/// A directory removed when the guard goes (also when the test fails).
struct TestDir(PathBuf);

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One load as the runner records it: the breakdown adds up to the PLT, and utilization,
/// bound and efficiency come from [`LinkUse::of`] over the load's bytes.
fn load(
    page: &str,
    config: &str,
    repeat: usize,
    plt_ms: f64,
    down: u64,
    errors: usize,
) -> LoadRecord {
    let body_bytes = down * 8 / 10;
    let link = LinkUse::of(
        plt_ms,
        down,
        body_bytes,
        &webpep_link_model::profile::Rate::Kbps(DOWN_KBPS),
        RTT_MS,
    );
    let dns = 0.05 * plt_ms;
    let connect = 0.1 * plt_ms;
    let idle = 0.3 * plt_ms;
    LoadRecord {
        page: page.into(),
        config: config.into(),
        profile: "gprs".into(),
        repeat,
        plt_ms,
        air_down_bytes: down,
        air_up_bytes: down / 12,
        late_down_bytes: 0,
        late_up_bytes: 0,
        objects: 20 - errors,
        inlined: 0,
        errors,
        page_objects: 0,
        missing: 0,
        missing_why: Default::default(),
        breakdown_ms: BreakdownMs {
            dns,
            connect,
            idle,
            payload: plt_ms - dns - connect - idle,
        },
        body_bytes,
        head_bytes: down / 20,
        utilization: link.utilization,
        bound_ms: link.bound_ms,
        efficiency: link.efficiency,
        har: format!("har/{page}-{config}-{repeat}.har"),
        tls_upgrades: Vec::new(),
        client_proxy: None,
    }
}

/// Results the way the runner makes them: loads, their summary against the baseline, the
/// derived tables from `finish`.
fn results(loads: Vec<LoadRecord>, configs: &[&str]) -> Results {
    let configs = configs
        .iter()
        .map(|c| {
            (
                c.to_string(),
                format!("{c}: policy, proxy mode and switches"),
            )
        })
        .collect::<BTreeMap<_, _>>();
    let info = RunInfo {
        profile: "gprs".into(),
        time_scale: 10.0,
        seed: 1,
        baseline: "http11".into(),
        link_down_kbps: DOWN_KBPS,
        link_rtt_ms: RTT_MS,
        configs,
    };
    Results::from_loads(info, loads, Vec::new(), true)
}

/// Two pages (one with a long name), seven configurations with peers among them, two repeats
/// (so intervals and error bars), and ziproxy losing objects on one load.
fn small_run() -> Results {
    let configs = [
        "http11",
        "http11-6",
        "pipelining",
        "explicit",
        "explicit-no-compress",
        "squid",
        "ziproxy",
    ];
    let mut loads = Vec::new();
    for (page, base, bytes) in [
        ("mail", 36_000.0, 60_000u64),
        ("paper-sites-cnn-front-page", 130_000.0, 210_000),
    ] {
        for (ci, c) in configs.iter().enumerate() {
            for r in 0..2 {
                let f = 1.0 - 0.09 * ci as f64 + 0.03 * r as f64;
                let down = if c.starts_with("explicit") || *c == "ziproxy" {
                    bytes / 3
                } else {
                    bytes
                };
                let errors = usize::from(*c == "ziproxy" && r == 1);
                loads.push(load(page, c, r, base * f, down, errors));
            }
        }
    }
    results(loads, &configs)
}

/// Twelve configurations with long names on one page, one load each: the legend needs rows.
fn many_configs() -> Results {
    let configs: Vec<String> = (0..12)
        .map(|i| match i {
            0 => "http11".to_string(),
            _ => format!("explicit-compress-transcode-{i}-pipelined-rewrite-dns-url"),
        })
        .collect();
    let refs: Vec<&str> = configs.iter().map(String::as_str).collect();
    let loads = refs
        .iter()
        .enumerate()
        .map(|(i, c)| load("yahoo", c, 0, 47_000.0 - 2_500.0 * i as f64, 90_000, 0))
        .collect();
    results(loads, &refs)
}

/// A pipe end moved to a descriptor ≥ 10 (close-on-exec), so that placing the browser's ends
/// on fds 3 and 4 cannot overwrite one with the other.
fn high(fd: OwnedFd) -> OwnedFd {
    // SAFETY: F_DUPFD_CLOEXEC on a valid descriptor returns a new one that we then own.
    let n = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 10) };
    assert!(n >= 0, "fcntl: {}", std::io::Error::last_os_error());
    // SAFETY: `n` is a fresh descriptor owned by nobody else.
    unsafe { OwnedFd::from_raw_fd(n) }
}

/// Headless Chromium with one page attached over `--remote-debugging-pipe`; killed when
/// dropped if it has not exited.
struct Browser {
    child: Child,
    cdp: Option<Cdp>,
    session: String,
}

impl Browser {
    fn launch(binary: &Path, profile: &Path) -> Browser {
        std::fs::create_dir_all(profile).unwrap();
        let (cmd_r, cmd_w) = std::io::pipe().unwrap();
        let (ev_r, ev_w) = std::io::pipe().unwrap();
        let (cmd_r, ev_w) = (high(cmd_r.into()), high(ev_w.into()));
        let (cmd_fd, ev_fd) = (cmd_r.as_raw_fd(), ev_w.as_raw_fd());
        let mut cmd = Command::new(binary);
        cmd.args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            "--window-size=1366,768",
            "--remote-debugging-pipe",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("about:blank")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        // SAFETY: runs in the child before exec and makes only async-signal-safe calls on
        // descriptors opened before the fork.
        unsafe {
            cmd.pre_exec(move || {
                if libc::dup2(cmd_fd, 3) < 0 || libc::dup2(ev_fd, 4) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().expect("starting Chromium");
        // The browser holds its own copies; ours close so that its exit ends the pipe.
        drop((cmd_r, ev_w));
        let cdp = Cdp::new(
            File::from(OwnedFd::from(cmd_w)),
            File::from(OwnedFd::from(ev_r)),
        )
        .unwrap();
        let mut b = Browser {
            child,
            cdp: Some(cdp),
            session: String::new(),
        };
        let target = b.call(None, "Target.createTarget", json!({"url": "about:blank"}));
        let attached = b.call(
            None,
            "Target.attachToTarget",
            json!({"targetId": target["targetId"], "flatten": true}),
        );
        b.session = attached["sessionId"].as_str().unwrap().to_string();
        let session = b.session.clone();
        b.call(Some(&session), "Page.enable", json!({}));
        b
    }

    fn call(&mut self, session: Option<&str>, method: &str, params: Value) -> Value {
        self.cdp
            .as_mut()
            .unwrap()
            .call(session, method, params, STEP)
            .unwrap_or_else(|e| panic!("{method}: {e}"))
    }

    /// Opens `url` and waits for its load event.
    fn open(&mut self, url: &str) {
        let session = self.session.clone();
        let nav = self.call(Some(&session), "Page.navigate", json!({ "url": url }));
        assert!(nav["errorText"].as_str().unwrap_or("").is_empty(), "{nav}");
        let deadline = Instant::now() + STEP;
        let cdp = self.cdp.as_mut().unwrap();
        loop {
            let ev = cdp
                .next_event(deadline)
                .unwrap()
                .unwrap_or_else(|| panic!("{url}: no load event in {STEP:?}"));
            if ev["method"] == "Page.loadEventFired" && ev["sessionId"] == session.as_str() {
                return;
            }
        }
    }

    /// The value of a JavaScript expression (a promise is awaited).
    fn eval(&mut self, expr: &str) -> Value {
        let session = self.session.clone();
        let r = self.call(
            Some(&session),
            "Runtime.evaluate",
            json!({"expression": expr, "awaitPromise": true, "returnByValue": true}),
        );
        assert!(r.get("exceptionDetails").is_none(), "the check threw: {r}");
        r["result"]["value"].clone()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if let Some(mut cdp) = self.cdp.take() {
            let _ = cdp.call(None, "Browser.close", json!({}), Duration::from_secs(5));
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// Measures the laid-out report; returns a JSON string (see the fields at the end).
const CHECK: &str = r#"(async () => {
  await document.fonts.ready;
  const out = { charts: [], overflow: [], missing: [], overlaps: [] };
  const flat = s => (s || '').replace(/\s+/g, '');
  for (const svg of document.querySelectorAll('svg')) {
    const id = svg.id;
    const vb = svg.viewBox.baseVal;
    const W = vb.width, H = vb.height;
    if (svg.width.baseVal.value !== W || svg.height.baseVal.value !== H)
      out.missing.push(`${id}: width/height differ from the viewBox`);
    // An element's box in the SVG's own units, through every transform (rotated labels).
    const toSvg = svg.getScreenCTM().inverse();
    const box = el => {
      const b = el.getBBox();
      const m = toSvg.multiply(el.getScreenCTM());
      const p = [[b.x, b.y], [b.x + b.width, b.y], [b.x, b.y + b.height],
                 [b.x + b.width, b.y + b.height]].map(([x, y]) => new DOMPoint(x, y).matrixTransform(m));
      const xs = p.map(q => q.x), ys = p.map(q => q.y);
      return { x0: Math.min(...xs), x1: Math.max(...xs), y0: Math.min(...ys), y1: Math.max(...ys) };
    };
    for (const el of svg.querySelectorAll('*')) {
      if (!(el instanceof SVGGraphicsElement)) continue;
      const b = box(el);
      if (b.x0 < -0.5 || b.y0 < -0.5 || b.x1 > W + 0.5 || b.y1 > H + 0.5)
        out.overflow.push({ chart: id, tag: el.tagName, class: el.getAttribute('class'),
                            text: el.textContent.slice(0, 80), box: b, width: W, height: H });
    }
    const texts = sel => [...svg.querySelectorAll(sel)].map(e => e.textContent.trim());
    const title = texts('text.title').join(' ');
    const unit = texts('text.axis').join(' ');
    if (!title) out.missing.push(`${id}: no title`);
    if (!unit) out.missing.push(`${id}: no axis label`);
    if (texts('text.tick').filter(t => t).length < 2) out.missing.push(`${id}: no tick labels`);
    const groups = [...svg.querySelectorAll('g.bar-group')];
    if (groups.length === 0) out.missing.push(`${id}: no bar groups`);
    for (const g of groups) {
      const l = g.querySelector(':scope > text.group-label');
      if (!l || !flat(l.textContent) || flat(l.textContent) !== flat(g.dataset.label))
        out.missing.push(`${id}: group ${g.dataset.label} unlabelled`);
    }
    const bars = [...svg.querySelectorAll('g.bar')];
    for (const b of bars) {
      const l = b.querySelector('text.bar-label');
      if (!l || !l.textContent.trim() || l.textContent.trim() !== b.dataset.label)
        out.missing.push(`${id}: bar ${b.dataset.label} unlabelled`);
      if (!b.querySelector('rect')) out.missing.push(`${id}: bar ${b.dataset.label} has no rect`);
    }
    const legend = texts('g.legend-item text');
    if (legend.length === 0 || legend.some(t => !t)) out.missing.push(`${id}: legend`);
    // Labels of one kind must not run into each other.
    for (const sel of ['g.legend-item', 'text.group-label', 'text.bar-label']) {
      const bs = [...svg.querySelectorAll(sel)].map(e => [e.textContent, box(e)]);
      for (let i = 0; i < bs.length; i++)
        for (let j = i + 1; j < bs.length; j++) {
          const [a, p] = bs[i], [b, q] = bs[j];
          if (p.x0 < q.x1 - 0.5 && q.x0 < p.x1 - 0.5 && p.y0 < q.y1 - 0.5 && q.y0 < p.y1 - 0.5)
            out.overlaps.push(`${id}: ${sel} "${a}" and "${b}"`);
        }
    }
    out.charts.push({ id, width: W, height: H, title, unit, bars: bars.length,
                      groups: groups.map(g => g.dataset.label), legend });
  }
  // Document order: the verdict, the charts, the tables, the key.
  const before = (a, b) => !!(a && b && (a.compareDocumentPosition(b) & Node.DOCUMENT_POSITION_FOLLOWING));
  const svgs = [...document.querySelectorAll('svg')];
  const verdict = document.querySelector('#verdict');
  const tables = [...document.querySelectorAll('table')].filter(t => !t.closest('#verdict'));
  const key = document.querySelector('#configurations');
  out.order = {
    verdict_first: before(verdict, svgs[0]) && !!verdict
      && [...document.querySelectorAll('h2')][0] === verdict.querySelector('h2'),
    charts_before_tables: svgs.length > 0 && tables.length > 0 && before(svgs[svgs.length - 1], tables[0]),
    key_last: !!key && tables.every(t => t.closest('#configurations') || before(t, key))
      && !key.nextElementSibling,
  };
  out.verdict = verdict ? verdict.innerText : '';
  out.top_of_page = document.body.innerText.slice(0, 1200);
  return JSON.stringify(out);
})()"#;

/// Renders `r` in the browser and checks the layout; returns what the check found.
fn check(browser: &mut Browser, dir: &Path, name: &str, r: &Results) -> Value {
    let file = dir.join(format!("{name}.html"));
    std::fs::write(&file, report::html(r)).unwrap();
    browser.open(&format!("file://{}", file.display()));
    let got = browser.eval(CHECK);
    let v: Value = serde_json::from_str(got.as_str().expect("a JSON string")).unwrap();
    eprintln!(
        "{name}: charts {}",
        serde_json::to_string(&v["charts"]).unwrap()
    );
    assert_eq!(v["overflow"], json!([]), "{name}: drawn past the SVG");
    assert_eq!(v["missing"], json!([]), "{name}: labels missing");
    assert_eq!(v["overlaps"], json!([]), "{name}: labels overlap");
    assert_eq!(
        v["order"],
        json!({"verdict_first": true, "charts_before_tables": true, "key_last": true}),
        "{name}: section order"
    );
    let charts = v["charts"].as_array().unwrap();
    assert_eq!(charts.len(), 3, "{name}");
    let mut pages: Vec<&str> = Vec::new();
    for s in &r.summary {
        if !pages.contains(&s.page.as_str()) {
            pages.push(&s.page);
        }
    }
    for c in charts {
        assert_eq!(c["groups"], json!(pages), "{name}: a group per page");
        assert_eq!(
            c["bars"],
            r.summary.len(),
            "{name}: a bar per (page, config)"
        );
    }
    v
}

#[test]
fn the_report_lays_out_inside_its_charts_in_chromium() {
    let test = "the_report_lays_out_inside_its_charts_in_chromium";
    if !available_for_test(test) {
        return;
    }
    let binary = find_binary(None).unwrap();
    let dir = TestDir(
        std::env::temp_dir().join(format!("webpep-report-chromium-{}", std::process::id())),
    );
    let _ = std::fs::remove_dir_all(&dir.0);
    std::fs::create_dir_all(&dir.0).unwrap();
    let mut browser = Browser::launch(&binary, &dir.0.join("profile"));

    let small = small_run();
    let v = check(&mut browser, &dir.0, "small", &small);
    let legend = &v["charts"][0]["legend"];
    assert!(
        legend.as_array().unwrap().contains(&json!("ziproxy")),
        "{legend}"
    );
    // The verdict names the fastest configuration of each page with its interval (two
    // repeats), and marks ziproxy's lost object.
    let verdict = v["verdict"].as_str().unwrap();
    eprintln!("top of the page:\n{}", v["top_of_page"].as_str().unwrap());
    assert!(
        verdict.contains("Fastest over the 2 pages (the mean of each page's mean PLT): ziproxy"),
        "{verdict}"
    );
    assert!(
        verdict.contains("⚠ 1 object lost or not requested in 1 of 2 loads"),
        "{verdict}"
    );
    assert!(
        verdict.contains("fastest without losses: squid"),
        "{verdict}"
    );
    assert!(verdict.contains('['), "an interval: {verdict}");

    let many = many_configs();
    let v = check(&mut browser, &dir.0, "many", &many);
    assert_eq!(v["charts"][0]["legend"].as_array().unwrap().len(), 12);
}
