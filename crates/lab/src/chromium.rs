//! Real Chromium as a lab client (DESIGN §7.4: "Chromium, driven over CDP, is the real
//! browser"): started for each load inside `ue` with a fresh profile, its DNS taken from a
//! resolv.conf that names the lab's resolver (bind-mounted in a private mount namespace, so
//! the host's file is untouched), driven over a DevTools pipe ([`crate::cdp`]). A load's
//! network events become the same [`PageLoad`] record as the browser model's, so results, HARs
//! and the report treat both alike; its PLT is navigation start → `loadEventEnd`
//! (DESIGN §7.5).

use std::collections::{BTreeMap, HashMap};
use std::ffi::CString;
use std::fs::File;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use serde_json::{json, Value};
use webpep_link::NetNs;
use webpep_loader::{
    breakdown_of_objects, ConnectionInfo, DnsLookup, FetchError, ObjectTiming, PageLoad, Policy,
    ResourceKind, Timings,
};

use crate::cdp::{Cdp, CdpError};
use crate::{LabError, Result};

/// Where Debian's package puts the browser (`apt-get install chromium`).
pub const DEFAULT_BINARY: &str = "/usr/lib/chromium/chromium";

/// Chromium opens at most 6 connections per host (and per proxy).
pub const CONNECTIONS_PER_HOST: usize = 6;

/// The browser to run: `explicit`, else `$WEBPEP_CHROMIUM`, else [`DEFAULT_BINARY`] or
/// `/usr/bin/chromium` when present.
pub fn find_binary(explicit: Option<&Path>) -> Option<PathBuf> {
    if let Some(p) = explicit {
        return Some(p.to_path_buf());
    }
    if let Some(p) = std::env::var_os("WEBPEP_CHROMIUM") {
        return Some(PathBuf::from(p));
    }
    [DEFAULT_BINARY, "/usr/bin/chromium"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

/// Where and how to start one browser.
pub struct Launch<'a> {
    /// The namespace the browser's sockets live in (`ue`).
    pub ns: &'a NetNs,
    pub binary: &'a Path,
    /// A directory for the profile, resolv.conf and the browser's log; removed on close.
    pub dir: PathBuf,
    /// The DNS server the browser uses (port 53: resolv.conf names no port).
    pub resolver: SocketAddr,
    /// The lab's per-run CA (PEM file), trusted through an NSS database in the browser's own
    /// fresh home: every https origin of the lab, and a proxy that intercepts with this CA,
    /// present certificates it signed. Certificate errors are then real errors.
    pub ca_pem: &'a Path,
    /// An explicit proxy as `--proxy-server` takes it (`http://ADDR`, or `https://ADDR` for
    /// one reached over TLS); `None`: direct.
    pub proxy: Option<String>,
}

/// What the recorder notes for a request the page timeout cut off.
const PAGE_TIMED_OUT: &str = "page load timed out";

/// A running browser with one page attached.
pub struct Chromium {
    child: Child,
    cdp: Option<Cdp>,
    session: String,
    dir: PathBuf,
    product: String,
    via_proxy: bool,
}

/// For tests that need Chromium: true when it is installed; otherwise prints `SKIP:` and
/// returns false, or fails the test when `WEBPEP_REQUIRE_CHROMIUM=1` (CI).
pub fn available_for_test(test: &str) -> bool {
    find_binary(None).is_some_and(|b| b.exists())
        || webpep_link::testing::skip_unless_required(
            test,
            "WEBPEP_REQUIRE_CHROMIUM",
            "no Chromium (apt-get install chromium, or set WEBPEP_CHROMIUM)",
        )
}

/// The flags of a quiet, reproducible headless browser: no sandbox (the lab runs as root),
/// no GPU, no QUIC (the lab serves TCP), nothing fetched in the background, no HTTPS upgrade
/// attempts on the corpus's http:// pages (they would cost a TLS handshake over the air);
/// the window is the browser model's screen (`Viewport::default()`), so that both evaluate a
/// page's media queries alike.
fn flags(profile: &Path, proxy: Option<&str>) -> Vec<String> {
    let mut f: Vec<String> = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--window-size=1366,768",
        "--disable-quic",
        "--no-first-run",
        "--no-default-browser-check",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-extensions",
        "--disable-default-apps",
        "--disable-domain-reliability",
        "--disable-client-side-phishing-detection",
        "--metrics-recording-only",
        "--mute-audio",
        // Such a page's http:// scripts and stylesheets (a 2003 page's) would then be blocked
        // as mixed content, and the browser would load less than the page: they load, so
        // every configuration loads the same objects.
        "--allow-running-insecure-content",
        // NetworkTimeServiceQuerying: the secure-time query to clients2.google.com, which
        // --disable-background-networking leaves on.
        "--disable-features=AutoupgradeMixedContent,HttpsUpgrades,HttpsFirstBalancedModeAutoEnable,HttpsFirstModeV2ForEngagedSites,OptimizationHints,Translate,MediaRouter,AutofillServerCommunication,NetworkTimeServiceQuerying",
        // Chromium 156 still asks the component updater (update.googleapis.com) and Gaia
        // (accounts.google.com) at start and during the load despite the flags above: each
        // ask crossed the air (a lookup, or a request the edge proxy answered 502) and took
        // uplink from the page. Pointed at a closed loopback port, they fail on the device.
        "--component-updater=url-source=http://127.0.0.1:9/",
        "--gaia-url=http://127.0.0.1:9",
        "--remote-debugging-pipe",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    f.push(format!("--user-data-dir={}", profile.display()));
    match proxy {
        Some(p) => f.push(format!("--proxy-server={p}")),
        None => f.push("--no-proxy-server".into()),
    }
    f.push("about:blank".into());
    f
}

static LAUNCHES: AtomicU64 = AtomicU64::new(0);

/// A new NSS database at `db` that trusts `ca_pem` to identify web sites (`certutil` of
/// Debian's libnss3-tools, as a user would run it: docs/interception.md).
pub fn trust_ca_in_nss(db: &Path, ca_pem: &Path) -> Result<()> {
    std::fs::create_dir_all(db).map_err(io("NSS database directory"))?;
    let sql = format!("sql:{}", db.display());
    let run = |args: &[&str]| -> Result<()> {
        let out = Command::new("certutil").args(args).output().map_err(|e| {
            LabError::Other(format!(
                "Chromium: certutil: {e} (the lab's CA is given to Chromium through an NSS \
                 database: apt-get install libnss3-tools)"
            ))
        })?;
        if !out.status.success() {
            return Err(LabError::Other(format!(
                "Chromium: certutil {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(())
    };
    run(&["-d", &sql, "-N", "--empty-password"])?;
    let pem = ca_pem.to_string_lossy();
    run(&[
        "-d",
        &sql,
        "-A",
        "-t",
        "C,,",
        "-n",
        "webpep-lab",
        "-i",
        &pem,
    ])
}

/// A pipe end moved to a descriptor ≥ 10 (close-on-exec), so that placing the browser's ends
/// on fds 3 and 4 in the child cannot overwrite one with the other.
fn high(fd: OwnedFd) -> std::io::Result<OwnedFd> {
    // SAFETY: F_DUPFD_CLOEXEC on a valid descriptor returns a new one we then own.
    let n = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 10) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `n` is a fresh descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(n) })
}

fn io(what: &'static str) -> impl Fn(std::io::Error) -> LabError {
    move |e| LabError::Other(format!("Chromium: {what}: {e}"))
}

fn cdp_err(e: CdpError) -> LabError {
    LabError::Other(format!("Chromium: {e}"))
}

impl Chromium {
    /// Starts the browser in `l.ns` and attaches to a blank page. Call from a thread that
    /// outlives the browser (it is killed when the spawning thread exits).
    pub fn launch(l: Launch<'_>) -> Result<Chromium> {
        if l.resolver.port() != 53 {
            return Err(LabError::BadInput(format!(
                "Chromium takes DNS from resolv.conf, which names no port: the resolver {} must \
                 listen on port 53",
                l.resolver
            )));
        }
        if !Path::new("/etc/resolv.conf").is_file() {
            return Err(LabError::Other(
                "Chromium: /etc/resolv.conf is missing: there is nothing to bind the lab's \
                 resolver over"
                    .into(),
            ));
        }
        let dir = l.dir.join(format!(
            "chromium-{}-{}",
            std::process::id(),
            LAUNCHES.fetch_add(1, Ordering::Relaxed)
        ));
        let profile = dir.join("profile");
        std::fs::create_dir_all(&profile).map_err(io("profile directory"))?;
        let resolv = dir.join("resolv.conf");
        std::fs::write(&resolv, format!("nameserver {}\n", l.resolver.ip()))
            .map_err(io("resolv.conf"))?;
        let log = File::create(dir.join("chromium.log")).map_err(io("log file"))?;
        // Chromium on Linux reads its trust anchors from $HOME/.pki/nssdb.
        let home = dir.join("home");
        trust_ca_in_nss(&home.join(".pki").join("nssdb"), l.ca_pem)?;

        let (cmd_r, cmd_w) = std::io::pipe().map_err(io("pipe"))?;
        let (ev_r, ev_w) = std::io::pipe().map_err(io("pipe"))?;
        let cmd_r = high(cmd_r.into()).map_err(io("pipe"))?;
        let ev_w = high(ev_w.into()).map_err(io("pipe"))?;
        let (cmd_fd, ev_fd) = (cmd_r.as_raw_fd(), ev_w.as_raw_fd());
        let resolv_c = CString::new(resolv.as_os_str().as_bytes())
            .map_err(|_| LabError::Other("Chromium: a NUL in the work directory's path".into()))?;

        let mut cmd = l.ns.command(l.binary);
        cmd.env("HOME", &home)
            .args(flags(&profile, l.proxy.as_deref()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log));
        // SAFETY: runs in the child before exec and makes only async-signal-safe syscalls on
        // values prepared before the fork (no allocation).
        unsafe {
            cmd.pre_exec(move || {
                let fail = || Err(std::io::Error::last_os_error());
                crate::nsrt::own_resolv_conf(&resolv_c)?;
                // The DevTools pipe: commands in on fd 3, answers and events out on fd 4
                // (dup2 clears close-on-exec on the copies).
                if libc::dup2(cmd_fd, 3) < 0 || libc::dup2(ev_fd, 4) < 0 {
                    return fail();
                }
                Ok(())
            });
        }
        let child = cmd.spawn().map_err(|e| {
            LabError::Other(format!(
                "Chromium: starting {}: {e} (install it with `apt-get install chromium` or \
                 name it with --chromium)",
                l.binary.display()
            ))
        })?;
        // The browser holds its own copies; ours must close so that its exit ends the pipe.
        drop(cmd_r);
        drop(ev_w);
        let cdp = Cdp::new(
            File::from(OwnedFd::from(cmd_w)),
            File::from(OwnedFd::from(ev_r)),
        )
        .map_err(io("DevTools reader"))?;
        let mut browser = Chromium {
            child,
            cdp: Some(cdp),
            session: String::new(),
            dir,
            product: String::new(),
            via_proxy: l.proxy.is_some(),
        };
        browser.attach().map_err(|e| {
            let tail = browser.log_tail();
            LabError::Other(format!("{e}; the browser's log ends: {tail}"))
        })?;
        Ok(browser)
    }

    fn cdp(&mut self) -> Result<&mut Cdp> {
        self.cdp
            .as_mut()
            .ok_or_else(|| LabError::Other("Chromium: closed".into()))
    }

    fn attach(&mut self) -> Result<()> {
        let t = Duration::from_secs(60);
        let cdp = self.cdp()?;
        let v = cdp
            .call(None, "Browser.getVersion", json!({}), t)
            .map_err(cdp_err)?;
        let product = v["product"].as_str().unwrap_or("Chromium").to_string();
        let target = cdp
            .call(
                None,
                "Target.createTarget",
                json!({"url": "about:blank"}),
                t,
            )
            .map_err(cdp_err)?;
        let id = target["targetId"].as_str().unwrap_or_default().to_string();
        let attached = cdp
            .call(
                None,
                "Target.attachToTarget",
                json!({"targetId": id, "flatten": true}),
                t,
            )
            .map_err(cdp_err)?;
        let session = attached["sessionId"]
            .as_str()
            .ok_or_else(|| LabError::Other("Chromium: attaching gave no session".into()))?
            .to_string();
        for m in ["Network.enable", "Page.enable"] {
            cdp.call(Some(&session), m, json!({}), t).map_err(cdp_err)?;
        }
        // A cross-site iframe (an http:// ad frame in a page Chromium fetched over https,
        // any third-party frame of an imported page) runs in its own process, a target of
        // its own whose requests this session never sees: attach to each as it starts.
        cdp.call(Some(&session), "Target.setAutoAttach", auto_attach(), t)
            .map_err(cdp_err)?;
        self.session = session;
        self.product = product;
        Ok(())
    }

    /// The browser's name and version (`Chrome/156.0…`).
    pub fn product(&self) -> &str {
        &self.product
    }

    /// Loads `url` and waits for its load event (or `timeout`, the error of every request it
    /// cuts off); the record has wall-clock
    /// times (the caller unscales them).
    ///
    /// `at_load` is called as the load event arrives (not when the load timed out), so that
    /// the caller can read the air counters at the load's end: what the page does after it
    /// (Chromium's late requests) is not part of the load.
    pub fn load(
        &mut self,
        url: &str,
        timeout: Duration,
        at_load: &mut dyn FnMut(),
    ) -> Result<PageLoad> {
        let session = self.session.clone();
        let via_proxy = self.via_proxy;
        let wall0 = SystemTime::now();
        let deadline = Instant::now() + timeout;
        let cdp = self.cdp()?;
        let mut rec = Recorder::default();
        let nav = cdp
            .call(
                Some(&session),
                "Page.navigate",
                json!({"url": url}),
                timeout,
            )
            .map_err(cdp_err)?;
        let nav_error = nav["errorText"].as_str().filter(|s| !s.is_empty());
        let mut loaded = false;
        if nav_error.is_none() {
            while let Some(ev) = cdp.next_event(deadline).map_err(cdp_err)? {
                if ev["method"] == "Page.loadEventFired" && ev["sessionId"] == session.as_str() {
                    at_load();
                    loaded = true;
                    break;
                }
                follow_child(cdp, &ev);
                rec.event(&ev);
            }
        }
        let plt = if loaded {
            let expr = "new Promise(done => { const check = () => { \
                const n = performance.getEntriesByType('navigation')[0]; \
                if (n && n.loadEventEnd > 0) done(n.loadEventEnd); else setTimeout(check, 5); }; \
                check(); })";
            let r = cdp
                .call(
                    Some(&session),
                    "Runtime.evaluate",
                    json!({"expression": expr, "awaitPromise": true, "returnByValue": true}),
                    Duration::from_secs(30),
                )
                .map_err(cdp_err)?;
            let ms = r["result"]["value"].as_f64().unwrap_or(0.0);
            Some(secs(ms / 1000.0))
        } else {
            None
        };
        // Events already on their way (the last objects' loadingFinished).
        let settle = Instant::now() + Duration::from_millis(20);
        while let Some(ev) = cdp.next_event(settle).map_err(cdp_err)? {
            follow_child(cdp, &ev);
            rec.event(&ev);
        }
        let mut load = rec.build(url, wall0, plt, via_proxy);
        // The requests the page timeout cut off name it (in wall time here: the caller
        // scales the record, errors too).
        for o in &mut load.objects {
            if o.error == Some(FetchError::Browser(PAGE_TIMED_OUT.into())) {
                o.error = Some(FetchError::PageTimeout(timeout));
            }
        }
        if let (Some(e), Some(main)) = (nav_error, load.objects.first_mut()) {
            if main.error.is_none() {
                main.error = Some(FetchError::Browser(e.to_string()));
            }
        }
        if load.objects.is_empty() {
            return Err(LabError::Other(format!(
                "Chromium requested nothing for {url}{}",
                nav_error.map(|e| format!(": {e}")).unwrap_or_default()
            )));
        }
        Ok(load)
    }

    /// Empties the browser's HTTP cache (a revisit with `revisit_cache = false`); its DNS
    /// cache and connections stay as Chromium keeps them.
    pub fn clear_cache(&mut self) -> Result<()> {
        let session = self.session.clone();
        clear_http_cache(self.cdp()?, &session)
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.dir.join("chromium.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().rev().take(5).collect();
        lines.into_iter().rev().collect::<Vec<_>>().join(" | ")
    }

    /// Closes the browser (politely, then by force) and removes its directory.
    pub fn close(&mut self) {
        if let Some(mut cdp) = self.cdp.take() {
            let _ = cdp.call(None, "Browser.close", json!({}), Duration::from_secs(5));
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            match self.child.try_wait() {
                Ok(Some(_)) | Err(_) => break,
                Ok(None) if Instant::now() >= deadline => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    break;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
        if !self.dir.as_os_str().is_empty() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

impl Drop for Chromium {
    fn drop(&mut self) {
        self.close();
    }
}

/// What the network events said about one request.
#[derive(Default)]
struct Entry {
    url: String,
    kind: Option<String>,
    initiator: Option<String>,
    /// Monotonic seconds (the DevTools clock).
    sent: f64,
    request_headers: Vec<(String, String)>,
    method: String,
    response: Option<Value>,
    decoded: u64,
    /// When the last byte arrived or the request failed.
    end: Option<f64>,
    encoded_total: Option<u64>,
    error: Option<String>,
    redirect_url: Option<String>,
    /// The browser redirected this request itself (HSTS: `Non-Authoritative-Reason`):
    /// nothing crossed the network for it.
    internal: bool,
}

/// Auto-attach to the targets a page starts (out-of-process iframes, workers), paused until
/// [`follow_child`] has turned their network events on, so none of their requests is missed.
fn auto_attach() -> Value {
    json!({"autoAttach": true, "waitForDebuggerOnStart": true, "flatten": true})
}

/// On `Target.attachedToTarget`: turns on the new target's network events (and the same
/// auto-attach for its own frames), then lets it run. A target that is already gone is no
/// error: its requests, if any, were not part of the load.
fn follow_child(cdp: &mut Cdp, ev: &Value) {
    if ev["method"] != "Target.attachedToTarget" {
        return;
    }
    let Some(child) = ev["params"]["sessionId"].as_str() else {
        return;
    };
    let t = Duration::from_secs(10);
    let _ = cdp.call(Some(child), "Network.enable", json!({}), t);
    let _ = cdp.call(Some(child), "Target.setAutoAttach", auto_attach(), t);
    let _ = cdp.call(Some(child), "Runtime.runIfWaitingForDebugger", json!({}), t);
}

/// Builds a [`PageLoad`] from a page's `Network.*` events.
#[derive(Default)]
struct Recorder {
    entries: Vec<Entry>,
    /// requestId → the entry it names now (a redirect starts a new entry with the same id).
    by_id: HashMap<String, usize>,
    extra_request: HashMap<String, Vec<(String, String)>>,
    extra_response: HashMap<String, u64>,
}

fn headers_of(v: &Value) -> Vec<(String, String)> {
    v.as_object()
        .map(|m| {
            m.iter()
                .flat_map(|(k, v)| {
                    // DevTools joins repeated headers with newlines.
                    v.as_str()
                        .unwrap_or_default()
                        .split('\n')
                        .map(|one| (k.clone(), one.to_string()))
                        .collect::<Vec<_>>()
                })
                .collect()
        })
        .unwrap_or_default()
}

impl Recorder {
    fn event(&mut self, ev: &Value) {
        let p = &ev["params"];
        let id = p["requestId"].as_str().unwrap_or_default().to_string();
        let current = self.by_id.get(&id).copied();
        match ev["method"].as_str().unwrap_or_default() {
            "Network.requestWillBeSent" => {
                let url = p["request"]["url"].as_str().unwrap_or_default();
                let ts = p["timestamp"].as_f64().unwrap_or(0.0);
                if let (Some(i), Some(redirect)) = (current, p.get("redirectResponse")) {
                    let e = &mut self.entries[i];
                    e.response = Some(redirect.clone());
                    e.end = Some(ts);
                    e.redirect_url = Some(url.to_string());
                    e.encoded_total = redirect["encodedDataLength"].as_u64();
                    e.internal = redirect["headers"].as_object().is_some_and(|h| {
                        h.keys()
                            .any(|k| k.eq_ignore_ascii_case("non-authoritative-reason"))
                    });
                }
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    self.by_id.remove(&id);
                    return;
                }
                self.by_id.insert(id, self.entries.len());
                self.entries.push(Entry {
                    url: url.to_string(),
                    kind: p["type"].as_str().map(str::to_string),
                    initiator: p["initiator"]["url"].as_str().map(str::to_string),
                    sent: ts,
                    request_headers: headers_of(&p["request"]["headers"]),
                    method: p["request"]["method"].as_str().unwrap_or("GET").to_string(),
                    ..Entry::default()
                });
            }
            "Network.requestWillBeSentExtraInfo" => {
                self.extra_request.insert(id, headers_of(&p["headers"]));
            }
            "Network.responseReceivedExtraInfo" => {
                if let Some(t) = p["headersText"].as_str() {
                    self.extra_response.insert(id, t.len() as u64);
                }
            }
            "Network.responseReceived" => {
                if let Some(i) = current {
                    self.entries[i].response = Some(p["response"].clone());
                }
            }
            // After a failure the browser may show its own error page under the same id;
            // those bytes are not the object's.
            "Network.dataReceived" => {
                if let Some(i) = current.filter(|&i| self.entries[i].error.is_none()) {
                    self.entries[i].decoded += p["dataLength"].as_u64().unwrap_or(0);
                }
            }
            "Network.loadingFinished" => {
                if let Some(i) = current.filter(|&i| self.entries[i].error.is_none()) {
                    let e = &mut self.entries[i];
                    e.end = p["timestamp"].as_f64();
                    e.encoded_total = p["encodedDataLength"].as_f64().map(|x| x as u64);
                }
            }
            "Network.loadingFailed" => {
                if let Some(i) = current {
                    let e = &mut self.entries[i];
                    e.end = p["timestamp"].as_f64();
                    e.error = Some(failure_text(p));
                }
            }
            _ => {}
        }
    }

    /// The record: objects finished by the load event (requests still open then are the
    /// page's later activity, not part of its load; after a timeout they are errors).
    fn build(
        mut self,
        url: &str,
        wall0: SystemTime,
        plt: Option<Duration>,
        proxy: bool,
    ) -> PageLoad {
        let timed_out = plt.is_none();
        let t0 = self.entries.first().map(|e| e.sent).unwrap_or(0.0);
        let at = |t: f64| secs(t - t0);
        let last_end = self.entries.iter().filter_map(|e| e.end).fold(t0, f64::max);
        let plt = plt.unwrap_or_else(|| at(last_end));
        // The request ids are gone from `by_id` order; keep each entry's raw headers by id.
        let mut raw_req: HashMap<usize, Vec<(String, String)>> = HashMap::new();
        let mut head_len: HashMap<usize, u64> = HashMap::new();
        for (id, i) in &self.by_id {
            if let Some(h) = self.extra_request.remove(id) {
                raw_req.insert(*i, h);
            }
            if let Some(n) = self.extra_response.get(id) {
                head_len.insert(*i, *n);
            }
        }
        let mut objects: Vec<ObjectTiming> = Vec::new();
        let mut index_of_url: HashMap<String, usize> = HashMap::new();
        let mut conns: BTreeMap<u64, ConnectionInfo> = BTreeMap::new();
        let mut lookups = Vec::new();
        let mut documents = 0;
        let mut tls_upgrades: Vec<String> = Vec::new();
        for (i, e) in self.entries.iter_mut().enumerate() {
            if e.internal {
                // Not an object: the browser's own step from http:// to https:// (its HSTS
                // preload list). The host is reported, the request that follows is the object.
                let host = |u: &str| {
                    url::Url::parse(u).ok().map(|u| {
                        (
                            u.scheme().to_string(),
                            u.host_str().unwrap_or_default().to_string(),
                        )
                    })
                };
                if let (Some((from, h)), Some((to, _))) =
                    (host(&e.url), e.redirect_url.as_deref().and_then(host))
                {
                    if from == "http" && to == "https" && !tls_upgrades.contains(&h) {
                        tls_upgrades.push(h);
                    }
                }
                continue;
            }
            if e.end.is_none() {
                if !timed_out {
                    continue;
                }
                e.error = Some(PAGE_TIMED_OUT.into());
                e.end = Some(last_end);
            }
            let id = objects.len();
            let kind = match e.kind.as_deref() {
                Some("Document") => {
                    documents += 1;
                    if documents == 1 {
                        ResourceKind::Document
                    } else {
                        ResourceKind::Iframe
                    }
                }
                Some("Stylesheet") => ResourceKind::Stylesheet,
                Some("Script") => ResourceKind::Script,
                Some("Image") => ResourceKind::Image,
                Some("Font") => ResourceKind::Font,
                _ => ResourceKind::Other,
            };
            let start = at(e.sent);
            let end = at(e.end.unwrap_or(e.sent));
            let resp = e.response.as_ref();
            let mut timings = resp
                .map(|r| timings_of(&r["timing"], e.sent, e.end.unwrap_or(e.sent)))
                .unwrap_or(Timings {
                    blocked: Some(end.saturating_sub(start)),
                    ..Timings::default()
                });
            // Chromium times the "resolution" of an address literal too; no lookup happened.
            let literal = url::Url::parse(&e.url)
                .is_ok_and(|u| matches!(u.host(), Some(url::Host::Ipv4(_) | url::Host::Ipv6(_))));
            if literal {
                if let Some(d) = timings.dns.take() {
                    timings.blocked = Some(timings.blocked.unwrap_or_default() + d);
                }
            }
            let protocol = resp
                .and_then(|r| r["protocol"].as_str())
                .unwrap_or("http/1.1");
            let h1 = protocol.starts_with("http/1");
            let headers_size = resp.filter(|_| h1).map(|r| {
                head_len
                    .get(&i)
                    .copied()
                    .unwrap_or_else(|| r["encodedDataLength"].as_f64().unwrap_or(0.0) as u64)
            });
            let body_size = e
                .encoded_total
                .unwrap_or(0)
                .saturating_sub(headers_size.unwrap_or(0));
            let request_headers = raw_req
                .remove(&i)
                .unwrap_or_else(|| e.request_headers.clone());
            let target = if proxy {
                e.url.clone()
            } else {
                url::Url::parse(&e.url)
                    .map(|u| {
                        let mut t = u.path().to_string();
                        if let Some(q) = u.query() {
                            t = format!("{t}?{q}");
                        }
                        t
                    })
                    .unwrap_or_default()
            };
            let request_headers_size = h1.then(|| {
                let line = e.method.len() + 1 + target.len() + " HTTP/1.1\r\n".len();
                let fields: usize = request_headers
                    .iter()
                    .map(|(k, v)| k.len() + 2 + v.len() + 2)
                    .sum();
                (line + fields + 2) as u64
            });
            let server_addr = resp.and_then(|r| {
                let ip: IpAddr = r["remoteIPAddress"]
                    .as_str()?
                    .trim_matches(|c| c == '[' || c == ']')
                    .parse()
                    .ok()?;
                Some(SocketAddr::new(ip, r["remotePort"].as_u64()? as u16))
            });
            let connection_id = resp
                .and_then(|r| r["connectionId"].as_f64())
                .map(|c| c as u64)
                .filter(|&c| c != 0);
            if let Some(c) = connection_id {
                let info = conns.entry(c).or_insert_with(|| ConnectionInfo {
                    id: c,
                    remote: server_addr,
                    origin: None,
                    via_proxy: proxy,
                    protocol: Some(protocol.to_string()),
                    tls: false,
                    reused: false,
                    opened: None,
                    connect: None,
                    ssl: None,
                    requests: 0,
                    error: None,
                });
                info.requests += 1;
                if let Some(c) = timings.connect {
                    info.opened = Some(
                        start
                            + timings.blocked.unwrap_or_default()
                            + timings.dns.unwrap_or_default(),
                    );
                    info.connect = Some(c);
                    info.ssl = timings.ssl;
                    info.tls = timings.ssl.is_some();
                }
            }
            if let Some(d) = timings.dns {
                lookups.push(DnsLookup {
                    host: url::Url::parse(&e.url)
                        .ok()
                        .and_then(|u| u.host_str().map(str::to_string))
                        .unwrap_or_default(),
                    start: start + timings.blocked.unwrap_or_default(),
                    duration: d,
                    addrs: server_addr
                        .filter(|_| !proxy)
                        .map(|a| vec![a.ip()])
                        .unwrap_or_default(),
                    ttl: None,
                    error: None,
                });
            }
            let header = |n: &str| {
                resp.and_then(|r| r["headers"].as_object()).and_then(|m| {
                    m.iter()
                        .find(|(k, _)| k.eq_ignore_ascii_case(n))
                        .and_then(|(_, v)| v.as_str().map(str::to_string))
                })
            };
            objects.push(ObjectTiming {
                id,
                url: e.url.clone(),
                kind,
                initiator: e
                    .initiator
                    .as_ref()
                    .and_then(|u| index_of_url.get(u).copied()),
                start,
                end,
                timings,
                status: resp.and_then(|r| r["status"].as_f64()).map(|s| s as u16),
                status_text: resp
                    .and_then(|r| r["statusText"].as_str())
                    .unwrap_or_default()
                    .to_string(),
                http_version: match protocol {
                    "h2" => "HTTP/2".into(),
                    p => p.to_ascii_uppercase(),
                },
                request_headers,
                request_headers_size,
                response_headers: resp.map(|r| headers_of(&r["headers"])).unwrap_or_default(),
                headers_size,
                body_size,
                content_size: e.decoded,
                content_type: header("content-type")
                    .or_else(|| resp.and_then(|r| r["mimeType"].as_str().map(str::to_string))),
                redirect_url: e.redirect_url.clone(),
                connection_id,
                server_addr,
                conditional: false,
                cache_hit: resp.is_some_and(|r| r["fromDiskCache"] == true),
                retries: 0,
                error: e.error.clone().map(FetchError::Browser),
            });
            index_of_url.entry(e.url.clone()).or_insert(id);
        }
        let breakdown = breakdown_of_objects(plt, &objects);
        PageLoad {
            url: url.to_string(),
            policy: Policy::Http11 {
                per_host: CONNECTIONS_PER_HOST,
            },
            via_proxy: proxy,
            started: wall0,
            plt,
            breakdown,
            main: 0,
            objects,
            connections: conns.into_values().collect(),
            dns_lookups: lookups,
            timed_out,
            objects_dropped: 0,
            unrequested: Vec::new(),
            tls_upgrades,
        }
    }
}

/// Why a request failed, from `Network.loadingFailed`: the network error, what blocked it
/// (`mixed-content`, …) or that the browser cancelled it.
fn failure_text(p: &Value) -> String {
    let mut parts: Vec<String> = Vec::new();
    if let Some(t) = p["errorText"].as_str().filter(|t| !t.is_empty()) {
        parts.push(t.to_string());
    }
    if let Some(b) = p["blockedReason"].as_str() {
        parts.push(format!("blocked: {b}"));
    }
    if p["canceled"] == true {
        parts.push("cancelled".into());
    }
    if parts.is_empty() {
        "failed".into()
    } else {
        parts.join(", ")
    }
}

/// Seconds from the browser's numbers as a duration: negative or not a number is zero, and
/// anything past a day is a day (the browser's clock is trusted only so far).
fn secs(x: f64) -> Duration {
    const DAY: f64 = 86_400.0;
    if x.is_nan() || x <= 0.0 {
        Duration::ZERO
    } else {
        Duration::from_secs_f64(x.min(DAY))
    }
}

/// Asks the page's session to drop every cached response (`Network.clearBrowserCache`).
fn clear_http_cache(cdp: &mut Cdp, session: &str) -> Result<()> {
    cdp.call(
        Some(session),
        "Network.clearBrowserCache",
        json!({}),
        Duration::from_secs(30),
    )
    .map(|_| ())
    .map_err(cdp_err)
}

/// The load record Chromium's `Network.*` events make (for tests and the fuzz target):
/// `plt` is the load event's time, `None` when the load timed out.
pub fn load_from_events<I: IntoIterator<Item = Value>>(
    url: &str,
    events: I,
    plt: Option<Duration>,
    via_proxy: bool,
) -> PageLoad {
    let mut r = Recorder::default();
    for e in events {
        r.event(&e);
    }
    r.build(url, SystemTime::UNIX_EPOCH, plt, via_proxy)
}

/// HAR phases from DevTools' `ResourceTiming` (milliseconds after `requestTime`, -1 for a
/// phase that did not happen), the request's queueing time (`sent`) and its end, all in the
/// DevTools clock's seconds.
fn timings_of(t: &Value, sent: f64, end: f64) -> Timings {
    let Some(base) = t["requestTime"].as_f64() else {
        return Timings::default();
    };
    let f = |k: &str| t[k].as_f64().filter(|v| *v >= 0.0);
    let span = |a: &str, b: &str| match (f(a), f(b)) {
        (Some(x), Some(y)) if y >= x => Some(secs((y - x) / 1000.0)),
        _ => None,
    };
    let ms = |v: f64| secs(v / 1000.0);
    let queued = (base - sent).max(0.0) * 1000.0;
    let first = f("dnsStart")
        .or_else(|| f("connectStart"))
        .or_else(|| f("sendStart"))
        .unwrap_or(0.0);
    let send_end = f("sendEnd").unwrap_or(first);
    let headers_at = f("receiveHeadersStart")
        .filter(|v| *v > 0.0)
        .or_else(|| f("receiveHeadersEnd"))
        .unwrap_or(send_end);
    Timings {
        blocked: Some(ms(queued + first)),
        dns: span("dnsStart", "dnsEnd"),
        connect: span("connectStart", "connectEnd"),
        ssl: span("sslStart", "sslEnd"),
        send: span("sendStart", "sendEnd").unwrap_or_default(),
        wait: ms(headers_at - send_end),
        receive: ms((end - base) * 1000.0 - headers_at),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(method: &str, params: Value) -> Value {
        json!({"method": method, "params": params, "sessionId": "S"})
    }

    /// A page on Chromium's HSTS preload list: the browser turns http:// into https:// with
    /// a redirect of its own that never crossed the network. It is no object; its host is
    /// reported.
    #[test]
    fn an_hsts_upgrade_is_reported_not_counted() {
        let mut r = Recorder::default();
        let doc = |id: &str, url: &str, t: f64| {
            json!({"requestId": id, "timestamp": t, "type": "Document",
                   "request": {"url": url, "method": "GET", "headers": {}}})
        };
        r.event(&ev(
            "Network.requestWillBeSent",
            doc("1", "http://www.a.test/", 10.0),
        ));
        let mut up = doc("1", "https://www.a.test/", 10.001);
        up["redirectResponse"] = json!({"status": 307, "statusText": "Internal Redirect",
            "headers": {"Location": "https://www.a.test/", "Non-Authoritative-Reason": "HSTS"},
            "encodedDataLength": 0, "timing": {}});
        r.event(&ev("Network.requestWillBeSent", up));
        r.event(&ev(
            "Network.responseReceived",
            json!({"requestId": "1", "response": {"url": "https://www.a.test/", "status": 200,
                   "headers": {}, "protocol": "http/1.1", "encodedDataLength": 50}}),
        ));
        r.event(&ev(
            "Network.loadingFinished",
            json!({"requestId": "1", "timestamp": 11.0, "encodedDataLength": 1050}),
        ));
        let load = r.build("http://www.a.test/", SystemTime::now(), None, false);
        assert_eq!(load.objects.len(), 1, "{:?}", load.objects);
        assert_eq!(load.objects[0].url, "https://www.a.test/");
        assert_eq!(load.objects[0].status, Some(200));
        assert_eq!(load.objects[0].kind, ResourceKind::Document);
        assert_eq!(load.tls_upgrades, vec!["www.a.test".to_string()]);
    }

    /// A revisit with the cache off asks the page's session to clear the browser cache.
    #[test]
    fn the_cache_is_cleared_through_the_page_session() {
        let (mut cdp, fake) =
            crate::cdp::fake_browser(|m| vec![json!({"id": m["id"], "result": {}})]);
        clear_http_cache(&mut cdp, "P1").expect("cleared");
        drop(cdp);
        let seen = fake.join().expect("fake browser");
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0]["method"], "Network.clearBrowserCache");
        assert_eq!(seen[0]["sessionId"], "P1");
    }

    /// An out-of-process iframe's target is made to report its requests before it runs.
    #[test]
    fn a_new_frame_target_gets_network_events_then_runs() {
        let (mut cdp, fake) =
            crate::cdp::fake_browser(|m| vec![json!({"id": m["id"], "result": {}})]);
        follow_child(
            &mut cdp,
            &ev("Network.dataReceived", json!({"requestId": "1"})),
        );
        follow_child(
            &mut cdp,
            &ev(
                "Target.attachedToTarget",
                json!({"sessionId": "F1", "targetInfo": {"type": "iframe"},
                       "waitingForDebugger": true}),
            ),
        );
        drop(cdp);
        let seen: Vec<String> = fake
            .join()
            .expect("fake browser")
            .iter()
            .map(|m| {
                format!(
                    "{} {}",
                    m["sessionId"].as_str().unwrap_or("-"),
                    m["method"].as_str().unwrap_or("")
                )
            })
            .collect();
        assert_eq!(
            seen,
            [
                "F1 Network.enable",
                "F1 Target.setAutoAttach",
                "F1 Runtime.runIfWaitingForDebugger"
            ]
        );
    }

    /// A page of a document, a redirected image and a data: URL, as Chromium reports them.
    #[test]
    fn network_events_become_a_page_load_record() {
        let mut r = Recorder::default();
        let timing = |req: f64| {
            json!({"requestTime": req, "proxyStart": -1, "proxyEnd": -1, "dnsStart": 0.0,
                   "dnsEnd": 100.0, "connectStart": 100.0, "connectEnd": 300.0,
                   "sslStart": -1, "sslEnd": -1, "sendStart": 300.0, "sendEnd": 301.0,
                   "receiveHeadersStart": 500.0, "receiveHeadersEnd": 501.0})
        };
        r.event(&ev(
            "Network.requestWillBeSent",
            json!({"requestId": "1", "timestamp": 10.0,
            "type": "Document", "request": {"url": "http://www.a.test/", "method": "GET",
            "headers": {"User-Agent": "x"}}, "initiator": {"type": "other"}}),
        ));
        r.event(&ev(
            "Network.requestWillBeSentExtraInfo",
            json!({"requestId": "1",
            "headers": {"Host": "www.a.test", "User-Agent": "x", "Connection": "keep-alive"}}),
        ));
        r.event(&ev(
            "Network.responseReceived",
            json!({"requestId": "1", "type": "Document",
            "response": {"url": "http://www.a.test/", "status": 200, "statusText": "OK",
            "headers": {"Content-Type": "text/html"}, "mimeType": "text/html",
            "connectionId": 7, "remoteIPAddress": "10.2.0.1", "remotePort": 80,
            "encodedDataLength": 120, "protocol": "http/1.1", "timing": timing(10.0)}}),
        ));
        r.event(&ev(
            "Network.responseReceivedExtraInfo",
            json!({"requestId": "1",
            "headersText": "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\r\n"}),
        ));
        r.event(&ev(
            "Network.dataReceived",
            json!({"requestId": "1", "dataLength": 5000}),
        ));
        r.event(&ev(
            "Network.loadingFinished",
            json!({"requestId": "1", "timestamp": 11.0,
            "encodedDataLength": 2044}),
        ));
        r.event(&ev(
            "Network.requestWillBeSent",
            json!({"requestId": "2", "timestamp": 10.9,
            "type": "Image", "request": {"url": "http://img.a.test/old.gif", "method": "GET",
            "headers": {}}, "initiator": {"type": "parser", "url": "http://www.a.test/"}}),
        ));
        r.event(&ev(
            "Network.requestWillBeSent",
            json!({"requestId": "2", "timestamp": 11.2,
            "type": "Image", "request": {"url": "http://img.a.test/new.gif", "method": "GET",
            "headers": {}}, "redirectResponse": {"status": 302, "statusText": "Found",
            "headers": {"Location": "/new.gif"}, "protocol": "http/1.1",
            "encodedDataLength": 90, "connectionId": 8, "timing": timing(10.9)},
            "initiator": {"type": "parser", "url": "http://www.a.test/"}}),
        ));
        r.event(&ev(
            "Network.requestWillBeSent",
            json!({"requestId": "3", "timestamp": 11.0,
            "type": "Image", "request": {"url": "data:image/gif;base64,R0lG", "method": "GET",
            "headers": {}}}),
        ));
        r.event(&ev(
            "Network.loadingFailed",
            json!({"requestId": "2", "timestamp": 12.0,
            "errorText": "net::ERR_CONNECTION_REFUSED"}),
        ));
        // The browser's own error page under the failed request's id.
        r.event(&ev(
            "Network.dataReceived",
            json!({"requestId": "2", "dataLength": 140000}),
        ));
        r.event(&ev(
            "Network.loadingFinished",
            json!({"requestId": "2", "timestamp": 12.1, "encodedDataLength": 140000}),
        ));
        // Still open at the load event: later activity, not part of the load.
        r.event(&ev(
            "Network.requestWillBeSent",
            json!({"requestId": "4", "timestamp": 12.5,
            "type": "XHR", "request": {"url": "http://www.a.test/poll", "method": "GET",
            "headers": {}}}),
        ));

        let load = r.build(
            "http://www.a.test/",
            SystemTime::now(),
            Some(Duration::from_secs(2)),
            false,
        );
        assert_eq!(load.plt, Duration::from_secs(2));
        assert!(!load.timed_out);
        assert_eq!(load.objects.len(), 3, "{:?}", load.objects);
        let doc = &load.objects[0];
        assert_eq!(doc.kind, ResourceKind::Document);
        assert_eq!(doc.status, Some(200));
        assert_eq!(doc.headers_size, Some(44));
        assert_eq!(doc.body_size, 2000);
        assert_eq!(doc.content_size, 5000);
        assert_eq!(doc.timings.dns, Some(Duration::from_millis(100)));
        assert_eq!(doc.timings.connect, Some(Duration::from_millis(200)));
        assert_eq!(doc.timings.wait, Duration::from_millis(199));
        assert_eq!(doc.timings.receive, Duration::from_millis(500));
        assert_eq!(doc.end, Duration::from_secs(1));
        assert_eq!(doc.http_version, "HTTP/1.1");
        assert_eq!(doc.server_addr, Some("10.2.0.1:80".parse().unwrap()));
        // The raw headers as sent, and the request head's size computed from them.
        assert!(doc.request_headers.iter().any(|(k, _)| k == "Host"));
        assert_eq!(
            doc.request_headers_size,
            Some(
                ("GET / HTTP/1.1\r\n".len()
                    + "Host: www.a.test\r\nUser-Agent: x\r\nConnection: keep-alive\r\n\r\n".len())
                    as u64
            )
        );
        let redirect = &load.objects[1];
        assert_eq!(redirect.status, Some(302));
        assert_eq!(
            redirect.redirect_url.as_deref(),
            Some("http://img.a.test/new.gif")
        );
        assert_eq!(redirect.initiator, Some(0));
        let failed = &load.objects[2];
        assert_eq!(failed.url, "http://img.a.test/new.gif");
        assert_eq!(failed.status, None);
        assert_eq!(
            failed.error,
            Some(FetchError::Browser("net::ERR_CONNECTION_REFUSED".into()))
        );
        assert_eq!((failed.body_size, failed.content_size), (0, 0));
        assert_eq!(failed.end, Duration::from_secs(2));
        assert_eq!(load.connections.len(), 2);
        assert_eq!(load.dns_lookups.len(), 2);
        assert_eq!(load.breakdown.total(), load.plt);
    }

    #[test]
    fn a_failure_says_what_the_browser_said() {
        let t = |v: Value| failure_text(&v);
        assert_eq!(
            t(json!({"errorText": "net::ERR_FAILED"})),
            "net::ERR_FAILED"
        );
        assert_eq!(
            t(json!({"errorText": "", "blockedReason": "mixed-content", "canceled": false})),
            "blocked: mixed-content"
        );
        assert_eq!(t(json!({"errorText": "", "canceled": true})), "cancelled");
        assert_eq!(t(json!({})), "failed");
    }

    #[test]
    fn a_timed_out_load_keeps_its_open_requests_as_errors() {
        let mut r = Recorder::default();
        r.event(&ev(
            "Network.requestWillBeSent",
            json!({"requestId": "1", "timestamp": 5.0,
            "type": "Document", "request": {"url": "http://www.a.test/", "method": "GET",
            "headers": {}}}),
        ));
        let load = r.build("http://www.a.test/", SystemTime::now(), None, true);
        assert!(load.timed_out);
        assert_eq!(load.objects.len(), 1);
        assert!(load.objects[0].error.is_some());
    }

    #[test]
    fn flags_name_the_proxy_or_none() {
        let f = flags(Path::new("/tmp/p"), Some("http://10.1.0.1:3128"));
        assert!(f.contains(&"--proxy-server=http://10.1.0.1:3128".to_string()));
        assert!(f.contains(&"--remote-debugging-pipe".to_string()));
        assert!(f.contains(&"--user-data-dir=/tmp/p".to_string()));
        assert!(flags(Path::new("/tmp/p"), None).contains(&"--no-proxy-server".to_string()));
        // Chromium's own background requests go nowhere near the air link.
        assert!(f.iter().any(|a| a.contains("NetworkTimeServiceQuerying")));
        assert!(f.contains(&"--gaia-url=http://127.0.0.1:9".to_string()));
        assert!(f.contains(&"--component-updater=url-source=http://127.0.0.1:9/".to_string()));
    }
}
