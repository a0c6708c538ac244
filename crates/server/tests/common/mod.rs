//! Test helpers: a scriptable origin server on a raw TcpListener, a proxy started
//! in-process on loopback, and a small HTTP/1.1 client that reads responses off a socket.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch, Notify};
use webpep_server::stage::{BoxFuture, Registry, Section, Stage, StageCtx, StageFactory};
use webpep_server::{CancellationToken, Server, ServerConfig};

/// A request as the origin saw it.
#[derive(Debug, Clone)]
pub struct OriginRequest {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl OriginRequest {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// What the origin answers.
#[derive(Debug, Clone)]
pub struct OriginReply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub delay: Duration,
    /// Never answer (for timeouts).
    pub hang: bool,
    /// Instead of the above: write exactly these parts, in order.
    pub raw: Option<Vec<Part>>,
    /// Answer only once this gate is open (before `delay`).
    pub gate: Option<Gate>,
}

/// A gate an origin's answer waits at until the test opens it: slow work that ends when the
/// test says so, not after a time. Open for good once opened (answers that come later pass).
#[derive(Debug, Clone)]
pub struct Gate(Arc<watch::Sender<bool>>);

impl Default for Gate {
    fn default() -> Self {
        Gate::new()
    }
}

impl Gate {
    pub fn new() -> Gate {
        Gate(Arc::new(watch::channel(false).0))
    }
    pub fn open(&self) {
        self.0.send_replace(true);
    }
    pub fn is_open(&self) -> bool {
        *self.0.borrow()
    }
    pub async fn wait(&self) {
        let mut rx = self.0.subscribe();
        let _ = rx.wait_for(|open| *open).await;
    }
}

/// What happened at an origin, in order: a request arrived (parsed whole) or its answer was
/// written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    Arrived(String),
    Answered(String),
}

/// An origin's record of requests in flight (arrived, not yet answered), for assertions on
/// order and concurrency instead of elapsed times.
#[derive(Debug, Default)]
pub struct Activity {
    events: std::sync::Mutex<Vec<Event>>,
    in_flight: AtomicUsize,
    peak: AtomicUsize,
    changed: Notify,
}

impl Activity {
    fn arrived(self: &Arc<Self>, path: &str) -> InFlight {
        self.events
            .lock()
            .unwrap()
            .push(Event::Arrived(path.to_string()));
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
        self.changed.notify_waiters();
        InFlight {
            activity: self.clone(),
            path: path.to_string(),
            answered: false,
        }
    }
}

/// A request in flight at the origin; leaves the count when answered or dropped (the
/// connection ended first).
struct InFlight {
    activity: Arc<Activity>,
    path: String,
    answered: bool,
}

impl InFlight {
    fn answered(mut self) {
        self.answered = true;
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.answered {
            let path = std::mem::take(&mut self.path);
            self.activity
                .events
                .lock()
                .unwrap()
                .push(Event::Answered(path));
        }
        self.activity.in_flight.fetch_sub(1, Ordering::SeqCst);
        self.activity.changed.notify_waiters();
    }
}

/// The failure guard of [`Origin::wait_for`]: generous, never a latency bound.
pub const WAIT_GUARD: Duration = Duration::from_secs(10);

/// What a raw answer does, in order.
#[derive(Debug, Clone)]
pub enum Part {
    /// Write these bytes.
    Send(Vec<u8>),
    /// Wait for this to be notified.
    Wait(Arc<Notify>),
}

impl OriginReply {
    pub fn ok(ct: &str, body: impl Into<Vec<u8>>) -> Self {
        OriginReply {
            status: 200,
            headers: vec![("Content-Type".into(), ct.into())],
            body: body.into(),
            delay: Duration::ZERO,
            hang: false,
            raw: None,
            gate: None,
        }
    }
    /// An answer written as `parts` exactly (any bytes, pauses between them).
    pub fn raw(parts: Vec<Part>) -> Self {
        OriginReply {
            raw: Some(parts),
            ..OriginReply::ok("", "")
        }
    }
    pub fn header(mut self, k: &str, v: &str) -> Self {
        self.headers.push((k.into(), v.into()));
        self
    }
    pub fn status(mut self, s: u16) -> Self {
        self.status = s;
        self
    }
    pub fn delay(mut self, d: Duration) -> Self {
        self.delay = d;
        self
    }
    /// Answers only once `g` is open.
    pub fn gate(mut self, g: &Gate) -> Self {
        self.gate = Some(g.clone());
        self
    }
}

/// An answer of `head` (status line and fields, ending in the blank line) and a 20-byte body
/// (`Content-Length: 20` is the caller's): "first half" at once, "other half" once `gate` is
/// notified.
pub fn halves(head: &str, gate: &Arc<Notify>) -> OriginReply {
    let mut first = head.as_bytes().to_vec();
    first.extend_from_slice(b"first half");
    OriginReply::raw(vec![
        Part::Send(first),
        Part::Wait(gate.clone()),
        Part::Send(b"other half".to_vec()),
    ])
}

/// Reads from `s` until what came ends with `end` (failing if the connection ends first);
/// what came.
pub async fn read_until(s: &mut TcpStream, end: &[u8]) -> Vec<u8> {
    let mut got = Vec::new();
    let mut tmp = [0u8; 1024];
    while !got.ends_with(end) {
        let n = s.read(&mut tmp).await.unwrap();
        assert!(n > 0, "closed early: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&tmp[..n]);
    }
    got
}

pub type Handler = Arc<dyn Fn(&OriginRequest) -> OriginReply + Send + Sync>;

/// A scriptable HTTP/1.1 origin (keep-alive, one request at a time per connection) that
/// counts the requests and every byte it reads and writes, and records when each request
/// arrived and was answered ([`Activity`]).
pub struct Origin {
    pub addr: SocketAddr,
    pub count: Arc<AtomicUsize>,
    pub log: Arc<std::sync::Mutex<Vec<OriginRequest>>>,
    pub bytes: Arc<ByteCounts>,
    pub activity: Arc<Activity>,
}

/// Bytes an origin read and wrote.
#[derive(Debug, Default)]
pub struct ByteCounts {
    pub read: AtomicU64,
    pub written: AtomicU64,
}

impl Origin {
    pub async fn start(
        handler: impl Fn(&OriginRequest) -> OriginReply + Send + Sync + 'static,
    ) -> Origin {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let count = Arc::new(AtomicUsize::new(0));
        let log = Arc::new(std::sync::Mutex::new(Vec::new()));
        let bytes = Arc::new(ByteCounts::default());
        let activity = Arc::new(Activity::default());
        let handler: Handler = Arc::new(handler);
        let (c, lg, b, a) = (count.clone(), log.clone(), bytes.clone(), activity.clone());
        tokio::spawn(async move {
            while let Ok((s, _)) = l.accept().await {
                let (h, c, lg, b, a) =
                    (handler.clone(), c.clone(), lg.clone(), b.clone(), a.clone());
                tokio::spawn(async move { serve_origin_conn(s, h, c, lg, b, a).await });
            }
        });
        Origin {
            addr,
            count,
            log,
            bytes,
            activity,
        }
    }

    /// Requests arrived and not yet answered, now.
    pub fn in_flight(&self) -> usize {
        self.activity.in_flight.load(Ordering::SeqCst)
    }

    /// The most requests in flight at once so far.
    pub fn peak(&self) -> usize {
        self.activity.peak.load(Ordering::SeqCst)
    }

    /// Arrivals and answers so far, in order.
    pub fn events(&self) -> Vec<Event> {
        self.activity.events.lock().unwrap().clone()
    }

    /// Waits until `cond` holds, checked at every arrival and answer (no polling); fails
    /// the test with `what` after [`WAIT_GUARD`].
    pub async fn wait_for(&self, what: &str, cond: impl Fn(&Origin) -> bool) {
        let waiting = async {
            loop {
                let changed = self.activity.changed.notified();
                tokio::pin!(changed);
                changed.as_mut().enable();
                if cond(self) {
                    return;
                }
                changed.await;
            }
        };
        if tokio::time::timeout(WAIT_GUARD, waiting).await.is_err() {
            panic!(
                "{what}: not within {WAIT_GUARD:?}; the origin saw {:?}",
                self.events()
            );
        }
    }

    /// Waits until the origin has seen `n` requests (see [`Origin::wait_for`]).
    pub async fn wait_requests(&self, n: usize) {
        self.wait_for(&format!("{n} requests at the origin"), |o| {
            o.requests() >= n
        })
        .await
    }

    pub fn requests(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }

    /// The requests seen so far, in order.
    pub fn seen(&self) -> Vec<OriginRequest> {
        self.log.lock().unwrap().clone()
    }

    /// Bytes read from the proxy so far.
    pub fn read(&self) -> u64 {
        self.bytes.read.load(Ordering::SeqCst)
    }

    /// Bytes written to the proxy so far.
    pub fn written(&self) -> u64 {
        self.bytes.written.load(Ordering::SeqCst)
    }

    pub fn last(&self) -> Option<OriginRequest> {
        self.log.lock().unwrap().last().cloned()
    }
}

/// Reads more of a request, counting the bytes; false when the connection ended.
async fn read_more(s: &mut TcpStream, buf: &mut Vec<u8>, read: &AtomicU64) -> bool {
    let mut tmp = [0u8; 16384];
    match s.read(&mut tmp).await {
        Ok(0) | Err(_) => false,
        Ok(n) => {
            read.fetch_add(n as u64, Ordering::SeqCst);
            buf.extend_from_slice(&tmp[..n]);
            true
        }
    }
}

/// Writes `b`, counted before it goes (the proxy may pass it on before this task runs on).
async fn write_counted(s: &mut TcpStream, b: &[u8], written: &AtomicU64) -> bool {
    written.fetch_add(b.len() as u64, Ordering::SeqCst);
    s.write_all(b).await.is_ok()
}

async fn serve_origin_conn(
    mut s: TcpStream,
    h: Handler,
    count: Arc<AtomicUsize>,
    log: Arc<std::sync::Mutex<Vec<OriginRequest>>>,
    bytes: Arc<ByteCounts>,
    activity: Arc<Activity>,
) {
    let mut buf = Vec::new();
    loop {
        let (req, used, body_len) = loop {
            let mut headers = [httparse::EMPTY_HEADER; 64];
            let mut r = httparse::Request::new(&mut headers);
            if let Ok(httparse::Status::Complete(n)) = r.parse(&buf) {
                let hs: Vec<(String, String)> = r
                    .headers
                    .iter()
                    .map(|h| {
                        (
                            h.name.to_ascii_lowercase(),
                            String::from_utf8_lossy(h.value).into_owned(),
                        )
                    })
                    .collect();
                let cl = hs
                    .iter()
                    .find(|(k, _)| k == "content-length")
                    .and_then(|(_, v)| v.parse::<usize>().ok())
                    .unwrap_or(0);
                break (
                    OriginRequest {
                        method: r.method.unwrap_or("").to_string(),
                        path: r.path.unwrap_or("").to_string(),
                        headers: hs,
                        body: Vec::new(),
                    },
                    n,
                    cl,
                );
            }
            if !read_more(&mut s, &mut buf, &bytes.read).await {
                return;
            }
        };
        while buf.len() < used + body_len {
            if !read_more(&mut s, &mut buf, &bytes.read).await {
                return;
            }
        }
        let req = OriginRequest {
            body: buf[used..used + body_len].to_vec(),
            ..req
        };
        buf.drain(..used + body_len);
        log.lock().unwrap().push(req.clone());
        count.fetch_add(1, Ordering::SeqCst);
        let in_flight = activity.arrived(&req.path);
        let reply = h(&req);
        if let Some(parts) = reply.raw {
            for part in parts {
                match part {
                    Part::Send(b) => {
                        if !write_counted(&mut s, &b, &bytes.written).await {
                            return;
                        }
                    }
                    Part::Wait(n) => n.notified().await,
                }
            }
            in_flight.answered();
            continue;
        }
        if reply.hang {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            return;
        }
        if let Some(g) = &reply.gate {
            g.wait().await;
        }
        tokio::time::sleep(reply.delay).await;
        let mut out = format!("HTTP/1.1 {} X\r\n", reply.status);
        for (k, v) in &reply.headers {
            out.push_str(&format!("{k}: {v}\r\n"));
        }
        let no_body = req.method == "HEAD" || reply.status == 304 || reply.status == 204;
        out.push_str(&format!("Content-Length: {}\r\n\r\n", reply.body.len()));
        let mut out = out.into_bytes();
        if !no_body {
            out.extend_from_slice(&reply.body);
        }
        if !write_counted(&mut s, &out, &bytes.written).await {
            return;
        }
        in_flight.answered();
    }
}

/// A proxy running in-process.
pub struct Proxy {
    pub addr: SocketAddr,
    pub admin: SocketAddr,
    pub server: Arc<Server>,
    pub cancel: CancellationToken,
    pub done: tokio::task::JoinHandle<std::io::Result<()>>,
    pub _cache_dir: Option<tempfile::TempDir>,
}

/// A config for tests: loopback origins allowed, no cache/transforms unless turned on.
pub fn test_config() -> ServerConfig {
    let mut cfg = ServerConfig::default();
    cfg.acl.allow_destinations = vec!["127.0.0.0/8".parse().unwrap()];
    cfg.cache.enabled = false;
    cfg.compress.enabled = false;
    cfg.transcode.enabled = false;
    cfg.inline.enabled = false;
    // A loopback client's measured link (gigabytes a second, microseconds) would shrink the
    // inline wait to nothing and send every original untransformed: the suites test the
    // configured behaviour (a link not measured); tests/adapt.rs gives the proxy links.
    cfg.air.adapt = false;
    cfg.origin.dns_upstream = Some("127.0.0.1:9".parse().unwrap());
    cfg.origin.connect_timeout = webpep_server::config::Secs(Duration::from_secs(2));
    cfg
}

/// `cfg` in the URL mode at `proxy.test:3128`, with `www.a.test` at 127.0.0.1.
pub fn url_mode(mut cfg: ServerConfig) -> ServerConfig {
    cfg.url_rewrite.enabled = true;
    cfg.url_rewrite.proxy_authority = Some("proxy.test:3128".into());
    cfg.origin
        .hosts
        .insert("www.a.test".into(), "127.0.0.1".parse().unwrap());
    cfg
}

pub async fn start_proxy(cfg: ServerConfig) -> Proxy {
    start_proxy_with(cfg, Vec::new()).await
}

/// [`start_proxy`] with these stages besides the built-in ones.
pub async fn start_proxy_with(cfg: ServerConfig, extra: Vec<Box<dyn StageFactory>>) -> Proxy {
    start_proxy_full(cfg, extra, None).await
}

/// [`start_proxy`] taking every client's link to be `link` (as if its connection had
/// measured it), with `[air] adapt` on.
pub async fn start_proxy_on_link(
    mut cfg: ServerConfig,
    link: webpep_server::client_link::ClientLink,
) -> Proxy {
    cfg.air.adapt = true;
    start_proxy_full(cfg, Vec::new(), Some(link)).await
}

async fn start_proxy_full(
    mut cfg: ServerConfig,
    extra: Vec<Box<dyn StageFactory>>,
    link: Option<webpep_server::client_link::ClientLink>,
) -> Proxy {
    let cache_dir = if cfg.cache.enabled && cfg.cache.dir.is_none() {
        let d = tempfile::tempdir().unwrap();
        cfg.cache.dir = Some(d.path().to_path_buf());
        Some(d)
    } else {
        None
    };
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let a = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let (addr, admin) = (l.local_addr().unwrap(), a.local_addr().unwrap());
    let mut factories = webpep_server::stages::default_stages();
    factories.extend(extra);
    let mut server = Server::with_stages(cfg, &factories).unwrap();
    if let Some(l) = link {
        server = server.with_fixed_link(l);
    }
    let cancel = CancellationToken::new();
    let done = tokio::spawn(server.clone().serve(vec![l], Some(a), cancel.clone()));
    Proxy {
        addr,
        admin,
        server,
        cancel,
        done,
        _cache_dir: cache_dir,
    }
}

/// A stage that reports the path of each client request (not the proxy's own fetches) as it
/// reaches the cache lookup, before every built-in stage's hook runs for it: once the test
/// has the report, the request is, on the test's (single-threaded) runtime, already waiting
/// in the built-in hooks (e.g. joining a prefetch of its URL) or past them.
pub fn lookup_probe() -> (Box<dyn StageFactory>, mpsc::UnboundedReceiver<String>) {
    let (tx, rx) = mpsc::unbounded_channel();
    (Box::new(LookupProbe(Arc::new(LookupProbeStage(tx)))), rx)
}

struct LookupProbe(Arc<LookupProbeStage>);

struct LookupProbeStage(mpsc::UnboundedSender<String>);

impl StageFactory for LookupProbe {
    fn name(&self) -> &'static str {
        "lookup-probe"
    }
    fn build(
        &self,
        _section: Section<'_>,
        _registry: &mut Registry,
    ) -> Result<Option<Arc<dyn Stage>>, (String, String)> {
        Ok(Some(self.0.clone()))
    }
}

impl Stage for LookupProbeStage {
    fn name(&self) -> &'static str {
        "lookup-probe"
    }
    fn order(&self) -> i32 {
        i32::MIN
    }
    fn before_lookup<'a>(
        &'a self,
        ctx: &StageCtx<'_>,
        uri: &'a http::Uri,
    ) -> Option<BoxFuture<'a, ()>> {
        if !ctx.background {
            let _ = self.0.send(uri.path().to_string());
        }
        None
    }
}

/// A counter's value at the proxy's `/metrics` (without labels).
pub fn metric(p: &Proxy, name: &str) -> u64 {
    p.server
        .metrics_text()
        .lines()
        .find_map(|l| {
            l.strip_prefix(&format!("{name} "))
                .map(|v| v.trim().parse().unwrap())
        })
        .unwrap_or_else(|| panic!("no {name}"))
}

/// A response as the client read it.
#[derive(Debug, Clone)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// A client connection to the proxy.
pub struct Client {
    pub s: TcpStream,
    buf: Vec<u8>,
}

impl Client {
    pub async fn connect(addr: SocketAddr) -> Client {
        Client {
            s: TcpStream::connect(addr).await.unwrap(),
            buf: Vec::new(),
        }
    }

    pub async fn send(&mut self, raw: &str) {
        self.s.write_all(raw.as_bytes()).await.unwrap();
    }

    pub async fn get(&mut self, url: &str, extra: &str) -> Resp {
        self.send(&format!("GET {url} HTTP/1.1\r\nHost: x\r\n{extra}\r\n"))
            .await;
        self.read(false).await.expect("response")
    }

    async fn fill(&mut self) -> bool {
        let mut tmp = [0u8; 16384];
        match tokio::time::timeout(Duration::from_secs(20), self.s.read(&mut tmp)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => false,
            Ok(Ok(n)) => {
                self.buf.extend_from_slice(&tmp[..n]);
                true
            }
        }
    }

    /// Reads one response (`head`: the request was HEAD); None when the connection closed.
    pub async fn read(&mut self, head: bool) -> Option<Resp> {
        let (status, headers, used) = loop {
            let mut hs = [httparse::EMPTY_HEADER; 64];
            let mut r = httparse::Response::new(&mut hs);
            if let Ok(httparse::Status::Complete(n)) = r.parse(&self.buf) {
                let headers: Vec<(String, String)> = r
                    .headers
                    .iter()
                    .map(|h| {
                        (
                            h.name.to_ascii_lowercase(),
                            String::from_utf8_lossy(h.value).into_owned(),
                        )
                    })
                    .collect();
                break (r.code.unwrap_or(0), headers, n);
            }
            if !self.fill().await {
                return None;
            }
        };
        self.buf.drain(..used);
        let get = |k: &str| headers.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        let mut body = Vec::new();
        if head || status == 304 || status == 204 {
        } else if get("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
            let mut dec = webpep_server::http1::ChunkedDecoder::new(1 << 30);
            loop {
                let n = dec.decode(&self.buf, &mut body).unwrap();
                self.buf.drain(..n);
                if dec.is_done() {
                    break;
                }
                if !self.fill().await {
                    break;
                }
            }
        } else if let Some(n) = get("content-length").and_then(|v| v.parse::<usize>().ok()) {
            while self.buf.len() < n {
                if !self.fill().await {
                    break;
                }
            }
            let n = n.min(self.buf.len());
            body = self.buf.drain(..n).collect();
        } else {
            while self.fill().await {}
            body = std::mem::take(&mut self.buf);
        }
        Some(Resp {
            status,
            headers,
            body,
        })
    }

    /// True when the proxy closed the connection (EOF within the timeout).
    pub async fn closed(&mut self) -> bool {
        let mut tmp = [0u8; 1];
        matches!(
            tokio::time::timeout(Duration::from_secs(5), self.s.read(&mut tmp)).await,
            Ok(Ok(0)) | Ok(Err(_))
        )
    }
}

/// One request on a fresh connection.
pub async fn get_once(proxy: SocketAddr, url: &str, extra: &str) -> Resp {
    let mut c = Client::connect(proxy).await;
    c.get(url, extra).await
}

/// An origin that answers every path with `hello <path>`.
pub fn hello() -> impl Fn(&OriginRequest) -> OriginReply + Send + Sync + 'static {
    |r: &OriginRequest| OriginReply::ok("text/plain", format!("hello {}", r.path))
}

/// Runs one step of a test, failing it after a few seconds.
pub async fn step<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(5), f)
        .await
        .expect("step timed out")
}

/// A photo-like JPEG (gradients and noise) at high quality: room for the proxy to save.
pub fn photo_jpeg() -> Vec<u8> {
    let (w, h) = (320u32, 240u32);
    let mut seed = 12345u32;
    let img = image::RgbImage::from_fn(w, h, |x, y| {
        seed = seed.wrapping_mul(1103515245).wrapping_add(12345);
        let n = ((seed >> 16) % 6) as i32 - 3;
        let c = |v: i32| (v + n).clamp(0, 255) as u8;
        image::Rgb([
            c((x * 255 / w) as i32),
            c((y * 255 / h) as i32),
            c(((x + y) % 256) as i32),
        ])
    });
    let mut out = Vec::new();
    let enc =
        image::codecs::jpeg::JpegEncoder::new_with_quality(std::io::Cursor::new(&mut out), 95);
    img.write_with_encoder(enc).unwrap();
    out
}

/// A TCP echo server on loopback (a CONNECT tunnel's destination); its address.
pub async fn echo_server() -> SocketAddr {
    let echo = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = echo.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = echo.accept().await {
            tokio::spawn(async move {
                let mut b = [0u8; 1024];
                while let Ok(n) = s.read(&mut b).await {
                    if n == 0 || s.write_all(&b[..n]).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    addr
}
