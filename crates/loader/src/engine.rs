//! The browser model's scheduler. One task polls everything (connection drivers and DNS
//! lookups live in a `FuturesUnordered` owned by the [`Loader`]), so every socket is created on
//! the caller's thread — in whatever network namespace that thread is in.
//!
//! Time: every scheduling decision (the page timeout, DNS answers' expiry, timings) reads
//! tokio's clock (`tokio::time::Instant`), so a runtime in paused time runs a load in virtual
//! time; the decisions that compare against "now" take it as an argument
//! ([`DnsState::cached`]). Only the page's start date (`PageLoad::started`) is wall-clock.

use std::collections::{HashMap, HashSet, VecDeque};
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use futures_util::future::{AbortHandle, Abortable};
use futures_util::stream::FuturesUnordered;
use futures_util::{FutureExt, StreamExt};
use tokio::sync::mpsc::{self, UnboundedReceiver, UnboundedSender};
use tokio::time::Instant;
use url::Url;

use crate::config::{LoaderConfig, Policy};
use crate::content_coding::{decode_all, StreamDecoder};
use crate::discover::{self, Discovered, Hint, HtmlScanner, Need, ResourceKind};
use crate::driver::{self, DriverCfg, Event, H1Mode, Job, Response, Sent};
use crate::error::FetchError;
use crate::net::{Origin, Protocol, Target};
use crate::result::{
    self, ConnectionInfo, DnsLookup, ObjectTiming, PageLoad, Phase, Timings, Unrequested,
    UnrequestedRef,
};
use crate::selectors::ElementInfo;
use crate::stylesheet::{scan_stylesheet, DocumentStyle, FontUse, SheetRefs};

/// A connection's setup: start, end, and the TLS part.
type Setup = (Instant, Instant, Option<(Instant, Instant)>);

/// A connection used in a load, with its setup span for the breakdown.
type ConnRecord = (u64, ConnectionInfo, Option<(Instant, Instant)>);

type Task = Abortable<Pin<Box<dyn Future<Output = ()> + Send>>>;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Group {
    Origin(Origin),
    Proxy(SocketAddr),
    /// Plain-http origins sharing one server address (with `pool_by_address`).
    Addr(SocketAddr),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Room {
    Open,
    Full,
    Wait,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ConnState {
    Connecting { expected: usize },
    Ready { capacity: usize },
}

struct Conn {
    group: Group,
    /// `None`: a plain proxy connection, good for any http origin.
    affinity: Option<Origin>,
    tx: UnboundedSender<Job>,
    abort: AbortHandle,
    state: ConnState,
    outstanding: Vec<usize>,
    closing: bool,
    protocol: Option<Protocol>,
    peer: Option<SocketAddr>,
    tls: bool,
    via_proxy: bool,
    /// The load generation in which it was opened.
    gen: u64,
    setup: Option<Setup>,
    first_taken: bool,
    /// With `pipeline_batches`: this connection is taking the pipeline being built in the
    /// current `pump` (it was idle when the first request of the batch was assigned).
    batch_open: bool,
}

#[derive(Debug, Clone)]
enum DnsState {
    Pending {
        trigger: usize,
        gen: u64,
    },
    Resolved {
        addrs: Vec<IpAddr>,
        expires: Instant,
        fresh: bool,
    },
    Failed {
        reason: String,
        gen: u64,
    },
}

impl DnsState {
    /// The addresses an answer gives at `now`: while it is fresh (looked up in this load, whose
    /// connections keep using it) or its TTL has not run out. `None` when it must be asked.
    fn cached(&self, now: Instant) -> Option<&[IpAddr]> {
        match self {
            DnsState::Resolved {
                addrs,
                expires,
                fresh,
            } if *fresh || *expires > now => Some(addrs),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Default)]
struct CacheEntry {
    etag: Option<String>,
    last_modified: Option<String>,
    body: Option<Bytes>,
}

/// Client state kept between page loads: the DNS cache (TTLs honoured), the HTTP cache of
/// validators (revisits send conditional requests; a 304 is a cache hit), and, when
/// [`LoaderConfig::keep_connections`] is set, idle persistent connections.
pub struct Loader {
    cfg: LoaderConfig,
    /// With `serial_dns`: one lookup at a time, as Mozilla 1.x's single resolver thread.
    dns_gate: Option<Arc<tokio::sync::Semaphore>>,
    dcfg: Arc<DriverCfg>,
    tls_error: Option<String>,
    hosts: HashMap<String, IpAddr>,
    dns: HashMap<String, DnsState>,
    cache: HashMap<String, CacheEntry>,
    conns: HashMap<u64, Conn>,
    tasks: FuturesUnordered<Task>,
    ev_tx: UnboundedSender<Event>,
    ev_rx: UnboundedReceiver<Event>,
    next_conn: u64,
    gen: u64,
}

impl std::fmt::Debug for Loader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loader")
            .field("policy", &self.cfg.policy)
            .field("dns_entries", &self.dns.len())
            .field("cache_entries", &self.cache.len())
            .field("open_connections", &self.conns.len())
            .finish_non_exhaustive()
    }
}

struct Obj {
    url: Url,
    origin: Result<Origin, FetchError>,
    kind: ResourceKind,
    initiator: Option<usize>,
    is_main: bool,
    nesting: usize,
    redirects: usize,
    queued: Instant,
    done: bool,
    retries: u32,
    dns_span: Option<(Instant, Instant)>,
    conn_setup: Option<Setup>,
    conn: Option<u64>,
    server: Option<SocketAddr>,
    conditional: bool,
    sent: Sent,
    first_byte: Option<Instant>,
    end: Option<Instant>,
    response: Option<Response>,
    error: Option<FetchError>,
    redirect_url: Option<String>,
    scanner: Option<HtmlScanner>,
    /// Undoes the response's content coding before the scanner sees the bytes.
    decoder: Option<StreamDecoder>,
    /// HTML: references its current scanner has handed out so far.
    refs_seen: usize,
    /// HTML: the start of its body has been placed in its parser's steps.
    body_marked: bool,
    /// A stylesheet linked for media that do not apply: nothing its rules use is requested.
    style_unused: bool,
    /// With `tight_mode`: a low-priority request of this document, held while the document
    /// is in its tight phase.
    tight_doc: Option<usize>,
    /// Let through during its document's tight phase (it counts as in flight).
    released: bool,
}

struct LoadState {
    gen: u64,
    url: String,
    t0: Instant,
    wall0: SystemTime,
    objs: Vec<Obj>,
    queue: VecDeque<usize>,
    seen: HashSet<String>,
    main: usize,
    lookups: Vec<(String, Instant, Instant, Result<crate::dns::Answer, String>)>,
    /// Connections used in this load, with their setup span for the breakdown.
    conn_recs: Vec<ConnRecord>,
    conn_rec_idx: HashMap<u64, usize>,
    dropped: usize,
    /// References not requested for a reason known when they were found (over
    /// `max_objects`, nested too deep, never usable); the rest are collected in `build`.
    unrequested: Vec<(Url, ResourceKind, Unrequested)>,
    timed_out: bool,
    dns_aborts: Vec<AbortHandle>,
    /// Failed connection attempts per (group, affinity) in this load.
    connect_failures: HashMap<(Group, Option<Origin>), u32>,
    /// With `blocking_scripts`: per HTML document, what its parser has found but not yet
    /// reached because a script is still loading.
    held: HashMap<usize, Held>,
    /// Per HTML document: its layout, and what its stylesheets' rules use that it has not
    /// requested yet.
    layouts: HashMap<usize, Layout>,
    /// With `tight_mode`: per HTML document, how far its parser is from leaving the head.
    tight: HashMap<usize, Tight>,
}

/// One document's tight phase (Chromium's): it ends when the parser has reached the body,
/// which it does only once the scripts in the head have arrived, each after the stylesheets
/// before it.
#[derive(Default)]
struct Tight {
    /// The scanner has seen the body start (or the document ended without one).
    body_seen: bool,
    /// Head scripts that stop the parser, and the stylesheets before each.
    blockers: Vec<usize>,
    /// Stylesheets in the head not yet behind a script.
    sheets: Vec<usize>,
    /// Images given medium priority so far (Chromium boosts the first five).
    boosted: usize,
    over: bool,
}

/// One HTML document's layout.
#[derive(Default)]
struct Layout {
    /// Its parser has reached the body: the browser lays it out, and so requests what its
    /// stylesheets' rules use for the elements they match.
    laid_out: bool,
    /// Its elements so far and how its rules set text.
    style: DocumentStyle,
    /// Rule images and font faces not requested yet (reference, nesting, where found).
    pending: Vec<(Discovered, usize, usize)>,
}

/// What a document's scanner gave for the bytes it was fed: references, where the body
/// starts, and for the layout, elements and how text is set.
#[derive(Default)]
struct Scanned {
    found: Vec<Discovered>,
    body: Option<usize>,
    elements: Vec<ElementInfo>,
    font_uses: Vec<FontUse>,
}

impl Scanned {
    fn of(s: &mut HtmlScanner, found: Vec<Discovered>) -> Scanned {
        Scanned {
            found,
            body: s.body_start(),
            elements: s.take_elements(),
            font_uses: s.take_font_uses(),
        }
    }
}

/// References of one document waiting behind a blocking script.
#[derive(Default)]
struct Held {
    blocker: Option<usize>,
    items: VecDeque<Step>,
}

/// What an HTML parser comes to, in document order.
enum Step {
    /// A reference (with its nesting).
    Ref(Discovered, usize),
    /// The start of the body: from here the document is laid out.
    Body,
}

impl LoadState {
    fn all_done(&self) -> bool {
        self.objs.iter().all(|o| o.done) && self.held.values().all(|h| h.items.is_empty())
    }
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

fn is_html_type(ct: Option<&str>) -> bool {
    match ct {
        None => true,
        Some(ct) => {
            let ct = ct.to_ascii_lowercase();
            ct.contains("html") || ct.contains("xml")
        }
    }
}

impl Loader {
    /// A loader with empty client state.
    pub fn new(cfg: LoaderConfig) -> Loader {
        let (tls, tls_error) = match &cfg.ca_pem {
            Some(pem) => match crate::net::tls_config(pem) {
                Ok(t) => (Some(t), None),
                Err(e) => (None, Some(e)),
            },
            None => (None, None),
        };
        let dcfg = Arc::new(DriverCfg {
            progress: crate::driver::Progress::new(),
            user_agent: cfg.user_agent.clone(),
            request_headers: cfg.request_headers.clone(),
            accept_encoding: cfg.accept_encoding.clone(),
            response_timeout: cfg.response_timeout,
            setup_timeouts: crate::net::SetupTimeouts {
                connect: cfg.connect_timeout,
                tls_handshake: cfg.tls_handshake_timeout,
            },
            max_body_bytes: cfg.max_body_bytes,
            max_header_bytes: cfg.max_header_bytes,
            tls,
        });
        let hosts = cfg
            .hosts
            .iter()
            .map(|(h, ip)| (h.trim_end_matches('.').to_ascii_lowercase(), *ip))
            .collect();
        let (ev_tx, ev_rx) = mpsc::unbounded_channel();
        Loader {
            dns_gate: cfg
                .serial_dns
                .then(|| Arc::new(tokio::sync::Semaphore::new(1))),
            cfg,
            dcfg,
            tls_error,
            hosts,
            dns: HashMap::new(),
            cache: HashMap::new(),
            conns: HashMap::new(),
            tasks: FuturesUnordered::new(),
            ev_tx,
            ev_rx,
            next_conn: 1,
            gen: 0,
        }
    }

    pub fn config(&self) -> &LoaderConfig {
        &self.cfg
    }

    /// Why the CA PEM could not be used, if it could not (https objects then fail).
    pub fn tls_error(&self) -> Option<&str> {
        self.tls_error.as_deref()
    }

    /// Forget cached DNS answers.
    pub fn clear_dns_cache(&mut self) {
        self.dns.clear();
    }

    /// Forget cached validators and bodies.
    pub fn clear_http_cache(&mut self) {
        self.cache.clear();
    }

    /// Close every kept connection.
    pub fn close_connections(&mut self) {
        for c in self.conns.values() {
            c.abort.abort();
        }
        self.conns.clear();
        self.tasks = FuturesUnordered::new();
    }

    /// Number of objects in the HTTP cache.
    pub fn cached_objects(&self) -> usize {
        self.cache.len()
    }

    /// Idle connections kept for the next load.
    pub fn open_connections(&self) -> usize {
        self.conns.len()
    }

    fn spawn(&mut self, fut: Pin<Box<dyn Future<Output = ()> + Send>>) -> AbortHandle {
        let (handle, reg) = AbortHandle::new_pair();
        self.tasks.push(Abortable::new(fut, reg));
        handle
    }

    /// Load one page: fetch it, discover and fetch its objects under the configured policy.
    /// Never fails as a whole: every problem is recorded in the objects' entries.
    pub async fn load(&mut self, url: &str) -> PageLoad {
        self.gen += 1;
        // Events left from the previous load (connections that closed while idle).
        while let Ok(ev) = self.ev_rx.try_recv() {
            if let Event::Closed { conn } = ev {
                self.conns.remove(&conn);
            }
        }
        let t0 = Instant::now();
        let mut st = LoadState {
            gen: self.gen,
            url: url.to_string(),
            t0,
            wall0: SystemTime::now(),
            objs: Vec::new(),
            queue: VecDeque::new(),
            seen: HashSet::new(),
            main: 0,
            lookups: Vec::new(),
            conn_recs: Vec::new(),
            conn_rec_idx: HashMap::new(),
            dropped: 0,
            unrequested: Vec::new(),
            timed_out: false,
            dns_aborts: Vec::new(),
            connect_failures: HashMap::new(),
            held: HashMap::new(),
            layouts: HashMap::new(),
            tight: HashMap::new(),
        };
        let parsed = Url::parse(url.trim());
        let parsed = match parsed {
            Ok(u) => u,
            Err(e) => return self.invalid_page(st, e.to_string()),
        };
        match self.add_object(&mut st, parsed, ResourceKind::Document, None, 0, true) {
            Some(id) => st.main = id,
            None => return self.invalid_page(st, "not loadable".into()),
        }
        let deadline = t0 + self.cfg.page_timeout;
        loop {
            let done_before = st.objs.iter().filter(|o| o.done).count();
            self.pump(&mut st);
            // An object can fail inside the pump with no event to follow (its host's lookup
            // had failed): the parser it held, or the tight phase it was part of, goes on now,
            // as a browser's does past a script that failed to load.
            if st.objs.iter().filter(|o| o.done).count() != done_before {
                continue;
            }
            if st.all_done() {
                // Nothing is in flight, so no parser will get further: lay out what waits.
                if self.lay_out_all(&mut st) {
                    continue;
                }
                break;
            }
            tokio::select! {
                ev = self.ev_rx.recv() => {
                    if let Some(ev) = ev {
                        self.handle(&mut st, ev);
                    }
                }
                Some(_) = self.tasks.next(), if !self.tasks.is_empty() => {}
                _ = tokio::time::sleep_until(deadline) => {
                    st.timed_out = true;
                    let now = Instant::now();
                    for o in st.objs.iter_mut().filter(|o| !o.done) {
                        o.error = Some(FetchError::PageTimeout(self.cfg.page_timeout));
                        finish_failed(o, now);
                    }
                    break;
                }
            }
        }
        self.end_load(&mut st);
        self.build(st)
    }

    fn invalid_page(&mut self, st: LoadState, reason: String) -> PageLoad {
        let error = FetchError::InvalidUrl {
            url: st.url.clone(),
            reason,
        };
        let mut page = self.build(st);
        page.objects = vec![ObjectTiming {
            timings: Timings {
                blocked: Some(Duration::ZERO),
                ..Timings::default()
            },
            error: Some(error),
            ..ObjectTiming::unanswered(0, page.url.clone(), ResourceKind::Document)
        }];
        page
    }

    fn end_load(&mut self, st: &mut LoadState) {
        for h in st.dns_aborts.drain(..) {
            h.abort();
        }
        self.dns.retain(|_, s| match s {
            DnsState::Resolved { fresh, .. } => {
                *fresh = false;
                true
            }
            _ => false,
        });
        if !self.cfg.keep_connections {
            self.close_connections();
            return;
        }
        let mut drop_ids = Vec::new();
        for (id, c) in &self.conns {
            let busy = !c.outstanding.is_empty();
            let connecting = matches!(c.state, ConnState::Connecting { .. });
            if busy || connecting || c.closing {
                c.abort.abort();
                drop_ids.push(*id);
            }
        }
        for id in drop_ids {
            self.conns.remove(&id);
        }
        // Let aborted futures finish now so their sockets close.
        while let Some(Some(_)) = self.tasks.next().now_or_never() {}
    }

    #[allow(clippy::too_many_arguments)]
    fn new_obj(
        &self,
        url: Url,
        origin: Result<Origin, FetchError>,
        kind: ResourceKind,
        initiator: Option<usize>,
        nesting: usize,
        is_main: bool,
        now: Instant,
    ) -> Obj {
        Obj {
            url,
            origin,
            kind,
            initiator,
            is_main,
            nesting,
            redirects: 0,
            queued: now,
            done: false,
            retries: 0,
            dns_span: None,
            conn_setup: None,
            conn: None,
            server: None,
            conditional: false,
            sent: Sent::default(),
            first_byte: None,
            end: None,
            response: None,
            error: None,
            redirect_url: None,
            scanner: None,
            decoder: None,
            refs_seen: 0,
            body_marked: false,
            style_unused: false,
            tight_doc: None,
            released: false,
        }
    }

    /// `url` as the browser requests it: without its fragment, and over https where it
    /// upgrades.
    fn as_requested(&self, mut url: Url) -> Url {
        url.set_fragment(None);
        if self.cfg.upgrade_insecure && url.scheme() == "http" {
            let default_port = url.port().is_none();
            if url.set_scheme("https").is_ok() && default_port {
                let _ = url.set_port(None);
            }
        }
        url
    }

    /// Add a discovered object (once per URL); returns its id if added.
    fn add_object(
        &mut self,
        st: &mut LoadState,
        url: Url,
        kind: ResourceKind,
        initiator: Option<usize>,
        nesting: usize,
        is_main: bool,
    ) -> Option<usize> {
        let url = self.as_requested(url);
        if !st.seen.insert(url.as_str().to_string()) {
            return None;
        }
        if st.objs.len() >= self.cfg.max_objects {
            st.dropped += 1;
            st.unrequested
                .push((url, kind, Unrequested::OverMaxObjects));
            return None;
        }
        let origin = Origin::of(&url);
        let now = Instant::now();
        let id = st.objs.len();
        let mut obj = self.new_obj(url, origin, kind, initiator, nesting, is_main, now);
        if let Err(e) = &obj.origin {
            obj.error = Some(e.clone());
            finish_failed(&mut obj, now);
        } else if obj.origin.as_ref().is_ok_and(|o| o.https) && self.dcfg.tls.is_none() {
            let why = self
                .tls_error
                .clone()
                .unwrap_or_else(|| "no CA configured for https".into());
            obj.error = Some(FetchError::Tls(why));
            finish_failed(&mut obj, now);
        } else {
            st.queue.push_back(id);
        }
        st.objs.push(obj);
        Some(id)
    }

    /// References found in a stylesheet (or in a response scanned as CSS). The images and
    /// fonts of a stylesheet that an HTML document uses wait for that document's layout
    /// ([`Loader::release_styles`]).
    fn discover(&mut self, st: &mut LoadState, parent: usize, sheet: SheetRefs) {
        let nesting = st.objs[parent].nesting;
        let doc = owner_document(&st.objs, parent);
        if let Some(doc) = doc {
            let layout = st.layouts.entry(doc).or_default();
            for u in sheet.font_uses {
                layout.style.add_font_use(u);
            }
        }
        for (url, kind) in sheet.unused {
            st.unrequested.push((url, kind, Unrequested::NotUsed));
        }
        for d in sheet.refs {
            let n = nesting_below(d.kind, nesting);
            if n <= self.cfg.max_nesting {
                self.add_found(st, d, parent, n, doc);
            } else {
                st.unrequested.push((d.url, d.kind, Unrequested::TooDeep));
            }
        }
        if let Some(doc) = doc {
            self.release_styles(st, doc);
        }
    }

    /// A reference `d` found in `from` (at nesting `n`): requested now, or, when it is what a
    /// rule of document `doc` uses, put with that document's layout. Returns its id if
    /// requested.
    fn add_found(
        &mut self,
        st: &mut LoadState,
        d: Discovered,
        from: usize,
        n: usize,
        doc: Option<usize>,
    ) -> Option<usize> {
        match (&d.need, doc) {
            (Need::Rule(_) | Need::FontFace(_), Some(doc)) => {
                st.layouts
                    .entry(doc)
                    .or_default()
                    .pending
                    .push((d, n, from));
                None
            }
            _ => {
                let unused = d.need == Need::Unused;
                let tight_doc = self.low_priority_in(st, &d, from);
                let id = self.add_object(st, d.url, d.kind, Some(from), n, false);
                if let Some(id) = id {
                    st.objs[id].style_unused = unused;
                    st.objs[id].tight_doc = tight_doc;
                }
                id
            }
        }
    }

    /// With `tight_mode`: the document whose tight phase holds reference `d` found in `from`,
    /// if `d` is a low-priority request (see [`LoaderConfig::tight_mode`]).
    fn low_priority_in(&self, st: &mut LoadState, d: &Discovered, from: usize) -> Option<usize> {
        if !self.cfg.tight_mode || self.cfg.blocking_scripts {
            return None;
        }
        let doc = referring_document(&st.objs, from)?;
        let low = match (d.kind, d.hint) {
            (ResourceKind::Image, Hint::LargeImage) => {
                let t = st.tight.entry(doc).or_default();
                t.boosted += 1;
                t.boosted > 5
            }
            (ResourceKind::Image | ResourceKind::Other, _) => true,
            (ResourceKind::Script, Hint::AsyncScript) => true,
            _ => false,
        };
        low.then_some(doc)
    }

    /// With `tight_mode`: ends `doc`'s tight phase if its parser can now reach the body, and
    /// lays it out.
    fn end_tight(&mut self, st: &mut LoadState, doc: usize) {
        let Some(t) = st.tight.get(&doc) else {
            return;
        };
        let doc_done = st.objs.get(doc).is_some_and(|o| o.done);
        if t.over
            || !(t.body_seen || doc_done)
            || !t
                .blockers
                .iter()
                .all(|&b| st.objs.get(b).is_some_and(|o| o.done))
        {
            return;
        }
        if let Some(t) = st.tight.get_mut(&doc) {
            t.over = true;
        }
        self.lay_out(st, doc);
    }

    fn in_tight_phase(st: &LoadState, doc: usize) -> bool {
        st.tight.get(&doc).is_some_and(|t| !t.over)
    }

    /// Requests what `doc`'s rules use now that they can: once it is laid out (at once
    /// without `css_images_at_layout`), a rule's images when an element matches the rule and
    /// the font faces its text is set in (all of them without `match_style_rules`).
    fn release_styles(&mut self, st: &mut LoadState, doc: usize) {
        let Some(l) = st.layouts.get_mut(&doc) else {
            return;
        };
        if (self.cfg.css_images_at_layout && !l.laid_out) || l.pending.is_empty() {
            return;
        }
        let ready = if self.cfg.match_style_rules {
            l.style.take_needed(&mut l.pending, |p| &p.0.need)
        } else {
            std::mem::take(&mut l.pending)
        };
        for (d, n, from) in ready {
            self.add_object(st, d.url, d.kind, Some(from), n, false);
        }
    }

    /// References found in an HTML document's next bytes; `body_start` is where its scanner
    /// has seen the body begin so far ([`HtmlScanner::body_start`]).
    fn discover_html(&mut self, st: &mut LoadState, parent: usize, scanned: Scanned) {
        let Scanned {
            found,
            body: body_start,
            elements,
            font_uses,
        } = scanned;
        let layout = st.layouts.entry(parent).or_default();
        for e in elements {
            layout.style.elements.add(e);
        }
        for u in font_uses {
            layout.style.add_font_use(u);
        }
        let o = &mut st.objs[parent];
        let first = o.refs_seen;
        o.refs_seen += found.len();
        let body_at = match body_start {
            Some(b) if !o.body_marked => {
                o.body_marked = true;
                Some(b.saturating_sub(first).min(found.len()))
            }
            _ => None,
        };
        let nesting = o.nesting;
        let len = found.len();
        let mut steps = Vec::with_capacity(len + 1);
        for (i, d) in found.into_iter().enumerate() {
            if body_at == Some(i) {
                steps.push(Step::Body);
            }
            let n = nesting_below(d.kind, nesting);
            if n <= self.cfg.max_nesting {
                steps.push(Step::Ref(d, n));
            } else {
                st.unrequested.push((d.url, d.kind, Unrequested::TooDeep));
            }
        }
        if body_at == Some(len) {
            steps.push(Step::Body);
        }
        if self.cfg.blocking_scripts {
            st.held.entry(parent).or_default().items.extend(steps);
            self.release_held(st, parent);
            return;
        }
        if self.cfg.tight_mode {
            self.discover_tight(st, parent, steps);
            return;
        }
        for step in steps {
            match step {
                Step::Ref(d, n) => {
                    self.add_found(st, d, parent, n, Some(parent));
                }
                Step::Body => self.lay_out(st, parent),
            }
        }
        self.release_styles(st, parent);
    }

    /// [`Loader::discover_html`] in Chromium's two phases: everything found is requested
    /// (low priority held, see [`Loader::pump`]), but the document is laid out only once its
    /// parser has got past the head's scripts.
    fn discover_tight(&mut self, st: &mut LoadState, parent: usize, steps: Vec<Step>) {
        st.tight.entry(parent).or_default();
        for step in steps {
            match step {
                Step::Ref(d, n) => {
                    let (kind, hint, unused) = (d.kind, d.hint, d.need == Need::Unused);
                    let id = self.add_found(st, d, parent, n, Some(parent));
                    let Some(t) = st.tight.get_mut(&parent) else {
                        continue;
                    };
                    match (id, t.body_seen, kind) {
                        (Some(id), false, ResourceKind::Stylesheet) if !unused => t.sheets.push(id),
                        (Some(id), false, ResourceKind::Script) if hint != Hint::AsyncScript => {
                            let sheets = std::mem::take(&mut t.sheets);
                            t.blockers.extend(sheets);
                            t.blockers.push(id);
                        }
                        _ => {}
                    }
                }
                Step::Body => {
                    if let Some(t) = st.tight.get_mut(&parent) {
                        t.body_seen = true;
                    }
                }
            }
        }
        self.end_tight(st, parent);
        self.release_styles(st, parent);
    }

    /// Lets `parent`'s parser go on: adds its held references in document order until the
    /// next script, which blocks it again until that script has arrived (or failed).
    fn release_held(&mut self, st: &mut LoadState, parent: usize) {
        while let Some(h) = st.held.get_mut(&parent) {
            if let Some(b) = h.blocker {
                if !st.objs.get(b).is_some_and(|o| o.done) {
                    break;
                }
                h.blocker = None;
            }
            let Some(step) = h.items.pop_front() else {
                break;
            };
            let (d, n) = match step {
                Step::Ref(d, n) => (d, n),
                Step::Body => {
                    self.lay_out(st, parent);
                    continue;
                }
            };
            let is_script = d.kind == ResourceKind::Script;
            let id = self.add_found(st, d, parent, n, Some(parent));
            if let (true, Some(id)) = (is_script, id) {
                if let Some(h) = st.held.get_mut(&parent) {
                    h.blocker = Some(id);
                }
            }
        }
        self.release_styles(st, parent);
    }

    /// `doc` is laid out: request what its stylesheets' rules use.
    fn lay_out(&mut self, st: &mut LoadState, doc: usize) {
        st.layouts.entry(doc).or_default().laid_out = true;
        self.release_styles(st, doc);
    }

    /// Lays out every document still waiting; whether that requested anything.
    fn lay_out_all(&mut self, st: &mut LoadState) -> bool {
        let docs: Vec<usize> = st.layouts.keys().copied().collect();
        let before = st.objs.len();
        for doc in docs {
            self.lay_out(st, doc);
        }
        st.objs.len() > before
    }

    // -----------------------------------------------------------------------------------------
    // Connection policy

    fn group_of(&self, origin: &Origin) -> Group {
        match (self.cfg.proxy, self.shared_addr(origin)) {
            (Some(p), _) => Group::Proxy(p),
            (None, Some(a)) => Group::Addr(a),
            (None, None) => Group::Origin(origin.clone()),
        }
    }

    /// With `pool_by_address`: the server address of a plain-http origin whose name is
    /// resolved (the first address of the answer), which every name at that address shares
    /// connections to. `None` until the name is resolved. An answer past its TTL still
    /// counts: a browser reuses its open connections without asking again, and looks the name
    /// up only to open a new one (`target_for`).
    fn shared_addr(&self, origin: &Origin) -> Option<SocketAddr> {
        if !self.cfg.pool_by_address || origin.https {
            return None;
        }
        let ip = origin
            .ip()
            .or_else(|| self.hosts.get(&origin.host).copied())
            .or_else(|| match self.dns.get(&origin.host) {
                Some(DnsState::Resolved { addrs, .. }) => addrs.first().copied(),
                _ => None,
            })?;
        Some(SocketAddr::new(ip, origin.port))
    }

    fn affinity_of(&self, origin: &Origin) -> Option<Origin> {
        let proxy_shared = self.cfg.proxy.is_some() && self.cfg.proxy_pool_per_origin.is_none();
        let shared = proxy_shared || self.shared_addr(origin).is_some();
        if shared && !origin.https {
            None
        } else {
            Some(origin.clone())
        }
    }

    fn uses_h2(&self, origin: &Origin) -> bool {
        self.cfg.policy == Policy::H2 && origin.https
    }

    /// Requests a connection of this policy carries at once.
    fn capacity(&self, origin: &Origin) -> usize {
        match self.cfg.policy {
            Policy::Http10 | Policy::Http11 { .. } => 1,
            Policy::Pipelining { depth, .. } => depth.max(1),
            Policy::H2 => {
                if origin.https {
                    usize::MAX
                } else {
                    1
                }
            }
        }
    }

    /// The pipeline depth when Mozilla 1.x pipelining (`pipeline_batches`) is in force.
    fn batch_depth(&self) -> Option<usize> {
        match self.cfg.policy {
            Policy::Pipelining { depth, .. } if self.cfg.pipeline_batches => Some(depth.max(1)),
            _ => None,
        }
    }

    fn batches(&self) -> bool {
        self.batch_depth().is_some()
    }

    /// Requests a new connection carries before its first response: one when pipelining in
    /// batches (the server is not yet known to keep connections alive), else its capacity.
    fn first_capacity(&self, capacity: usize) -> usize {
        if self.batches() {
            1
        } else {
            capacity
        }
    }

    fn group_limit(&self, origin: &Origin) -> usize {
        match self.cfg.policy {
            Policy::Http10 => Policy::HTTP10_MAX_CONNECTIONS,
            Policy::Http11 { per_host } | Policy::Pipelining { per_host, .. } => per_host.max(1),
            Policy::H2 => {
                if origin.https {
                    usize::MAX
                } else {
                    self.cfg.h2_fallback_per_host.max(1)
                }
            }
        }
    }

    /// Whether a new connection for `origin` may be opened now.
    fn room(&self, st: &LoadState, group: &Group, origin: &Origin) -> Room {
        let aff = self.affinity_of(origin);
        let live = self
            .conns
            .values()
            .any(|c| &c.group == group && c.affinity == aff);
        if live
            && st
                .connect_failures
                .contains_key(&(group.clone(), aff.clone()))
        {
            // This origin (or proxy) already failed a connection: make do with those open.
            return Room::Wait;
        }
        if let (Some(most), Group::Proxy(_)) = (self.cfg.proxy_pool_per_origin, group) {
            // Chromium's pools through a proxy: the origin's own limit first (waiting for its
            // connections), then the proxy's, where an idle connection of another origin
            // makes room.
            let own = self
                .conns
                .values()
                .filter(|c| &c.group == group && c.affinity == aff)
                .count();
            let own_limit = if self.uses_h2(origin) {
                1
            } else {
                self.group_limit(origin)
            };
            if own >= own_limit {
                return Room::Wait;
            }
            let all = self.conns.values().filter(|c| &c.group == group).count();
            return if all < most { Room::Open } else { Room::Full };
        }
        if self.uses_h2(origin) {
            return if live { Room::Wait } else { Room::Open };
        }
        let in_group = self
            .conns
            .values()
            .filter(|c| &c.group == group && !self.uses_h2_conn(c))
            .count();
        if in_group < self.group_limit(origin) {
            Room::Open
        } else {
            Room::Full
        }
    }

    fn uses_h2_conn(&self, c: &Conn) -> bool {
        c.affinity.as_ref().is_some_and(|o| self.uses_h2(o))
    }

    fn matches(&self, c: &Conn, group: &Group, aff: &Option<Origin>) -> bool {
        &c.group == group && &c.affinity == aff && !c.closing
    }

    /// The least loaded ready connection with room; `idle_only` asks for one with nothing in
    /// flight (a re-sent request goes first on its connection, so a server that closes after
    /// N responses cannot cut it off again).
    fn best_ready(&self, group: &Group, aff: &Option<Origin>, idle_only: bool) -> Option<u64> {
        self.conns
            .iter()
            .filter(|(_, c)| self.matches(c, group, aff))
            .filter(|(_, c)| !idle_only || c.outstanding.is_empty())
            .filter(|(_, c)| !self.batches() || c.outstanding.is_empty() || c.batch_open)
            .filter_map(|(id, c)| match c.state {
                ConnState::Ready { capacity } if c.outstanding.len() < capacity => {
                    Some((c.outstanding.len(), *id))
                }
                _ => None,
            })
            .min()
            .map(|(_, id)| id)
    }

    /// Where a new connection for `origin` goes, or why it cannot be opened yet.
    fn target_for(
        &mut self,
        st: &mut LoadState,
        origin: &Origin,
        oid: usize,
    ) -> Result<Option<Target>, FetchError> {
        let alpn: Vec<Vec<u8>> = if self.uses_h2(origin) {
            vec![b"h2".to_vec(), b"http/1.1".to_vec()]
        } else {
            vec![b"http/1.1".to_vec()]
        };
        let tls_for = origin.https.then(|| origin.clone());
        if let Some(proxy) = self.cfg.proxy {
            return Ok(Some(Target {
                addrs: vec![proxy],
                tunnel_to: origin.https.then(|| origin.clone()),
                tls_for,
                alpn,
            }));
        }
        let with = |ips: &[IpAddr]| Target {
            addrs: ips
                .iter()
                .map(|ip| SocketAddr::new(*ip, origin.port))
                .collect(),
            tunnel_to: None,
            tls_for: tls_for.clone(),
            alpn: alpn.clone(),
        };
        if let Some(ip) = origin.ip() {
            return Ok(Some(with(&[ip])));
        }
        if let Some(ip) = self.hosts.get(&origin.host) {
            return Ok(Some(with(&[*ip])));
        }
        let state = self.dns.get(&origin.host);
        if let Some(addrs) = state.and_then(|s| s.cached(Instant::now())) {
            return Ok(Some(with(addrs)));
        }
        match state {
            Some(DnsState::Pending { gen, .. }) if *gen == st.gen => return Ok(None),
            Some(DnsState::Failed { reason, gen }) if *gen == st.gen => {
                return Err(FetchError::Dns {
                    host: origin.host.clone(),
                    reason: reason.clone(),
                })
            }
            _ => {}
        }
        // Look it up.
        self.dns.insert(
            origin.host.clone(),
            DnsState::Pending {
                trigger: oid,
                gen: st.gen,
            },
        );
        let fut = driver::dns_task(
            st.gen,
            origin.host.clone(),
            self.cfg.resolver,
            self.cfg.dns_timeout,
            self.cfg.dns_attempts,
            self.ev_tx.clone(),
        );
        let gate = self.dns_gate.clone();
        let fut = async move {
            // Waiting for the gate is not lookup time (the lookup's clock starts inside).
            let _permit = match &gate {
                Some(g) => g.acquire().await.ok(),
                None => None,
            };
            fut.await
        };
        let h = self.spawn(Box::pin(fut));
        st.dns_aborts.push(h);
        Ok(None)
    }

    fn open(&mut self, st: &mut LoadState, group: Group, origin: &Origin, target: Target) -> u64 {
        let id = self.next_conn;
        self.next_conn += 1;
        let (tx, rx) = mpsc::unbounded_channel();
        let via_proxy = self.cfg.proxy.is_some();
        let mode = H1Mode {
            http10: self.cfg.policy == Policy::Http10,
            absolute: via_proxy && !origin.https,
        };
        let tls = target.tls_for.is_some();
        let fut = driver::run(id, target, mode, self.dcfg.clone(), rx, self.ev_tx.clone());
        let abort = self.spawn(Box::pin(fut));
        let affinity = self.affinity_of(origin);
        let rec = ConnectionInfo {
            id,
            remote: None,
            origin: affinity.as_ref().map(|o| o.to_string()),
            via_proxy,
            protocol: None,
            tls,
            reused: false,
            opened: Some(Instant::now().saturating_duration_since(st.t0)),
            connect: None,
            ssl: None,
            requests: 0,
            error: None,
        };
        st.conn_rec_idx.insert(id, st.conn_recs.len());
        st.conn_recs.push((id, rec, None));
        self.conns.insert(
            id,
            Conn {
                group,
                affinity,
                tx,
                abort,
                state: ConnState::Connecting {
                    expected: self.first_capacity(self.capacity(origin)),
                },
                outstanding: Vec::new(),
                closing: false,
                protocol: None,
                peer: None,
                tls,
                via_proxy,
                gen: st.gen,
                setup: None,
                first_taken: false,
                batch_open: false,
            },
        );
        id
    }

    fn close_conn(&mut self, id: u64) {
        if let Some(c) = self.conns.remove(&id) {
            c.abort.abort();
        }
    }

    fn conn_record<'a>(&self, st: &'a mut LoadState, id: u64) -> Option<&'a mut ConnectionInfo> {
        if !st.conn_rec_idx.contains_key(&id) {
            // A connection kept from an earlier load, first used in this one.
            let c = self.conns.get(&id)?;
            st.conn_rec_idx.insert(id, st.conn_recs.len());
            st.conn_recs.push((
                id,
                ConnectionInfo {
                    id,
                    remote: c.peer,
                    origin: c.affinity.as_ref().map(|o| o.to_string()),
                    via_proxy: c.via_proxy,
                    protocol: c.protocol.map(|p| p.name().to_string()),
                    tls: c.tls,
                    reused: true,
                    opened: None,
                    connect: None,
                    ssl: None,
                    requests: 0,
                    error: None,
                },
                None,
            ));
        }
        let idx = *st.conn_rec_idx.get(&id)?;
        st.conn_recs.get_mut(idx).map(|(_, r, _)| r)
    }

    fn assign(&mut self, st: &mut LoadState, cid: u64, oid: usize) {
        let Ok(origin) = st.objs[oid].origin.clone() else {
            return;
        };
        let url = st.objs[oid].url.clone();
        let kind = st.objs[oid].kind;
        let mut extra: Vec<(String, String)> = self.cfg.kind_headers.for_kind(kind).collect();
        // The document or stylesheet that referenced the object (the page itself has none,
        // nor have the targets of its redirects).
        let referrer = st.objs[oid]
            .initiator
            .filter(|_| !st.objs[oid].is_main)
            .and_then(|i| st.objs.get(i));
        if let Some(r) = referrer.and_then(|r| self.cfg.referer.referer(&r.url, &url)) {
            extra.push(("Referer".to_string(), r));
        }
        let mut conditional = false;
        if let Some(entry) = self.cache.get(url.as_str()) {
            if let Some(etag) = &entry.etag {
                extra.push(("If-None-Match".to_string(), etag.clone()));
            }
            if let Some(lm) = &entry.last_modified {
                extra.push(("If-Modified-Since".to_string(), lm.clone()));
            }
            conditional = entry.etag.is_some() || entry.last_modified.is_some();
        }
        let job = Job {
            gen: st.gen,
            obj: oid,
            url,
            origin,
            extra_headers: extra,
            stream_body: kind.is_html(),
            keep_body: kind.is_html() || kind == ResourceKind::Stylesheet,
        };
        let batches = self.batches();
        let Some(conn) = self.conns.get_mut(&cid) else {
            st.queue.push_front(oid);
            return;
        };
        if conn.tx.send(job).is_err() {
            // The driver is gone; forget the connection and queue the object again.
            self.conns.remove(&cid);
            st.queue.push_front(oid);
            return;
        }
        conn.outstanding.push(oid);
        conn.batch_open = batches;
        let setup = if !conn.first_taken && conn.gen == st.gen {
            conn.setup
        } else {
            None
        };
        conn.first_taken = true;
        let peer = conn.peer;
        let o = &mut st.objs[oid];
        o.conditional = conditional;
        o.conn = Some(cid);
        o.server = peer;
        if setup.is_some() {
            o.conn_setup = setup;
        }
        if let Some(r) = self.conn_record(st, cid) {
            r.requests += 1;
        }
    }

    /// Give queued objects to connections, opening connections and starting lookups as the
    /// policy allows.
    fn pump(&mut self, st: &mut LoadState) {
        if !st.held.is_empty() {
            let parents: Vec<usize> = st.held.keys().copied().collect();
            for p in parents {
                self.release_held(st, p);
            }
        }
        let tight: Vec<usize> = st
            .tight
            .iter()
            .filter(|(_, t)| !t.over)
            .map(|(d, _)| *d)
            .collect();
        for doc in tight {
            self.end_tight(st, doc);
        }
        // Chromium lets a low-priority request of a document in its tight phase through
        // only while fewer than two of the document's requests are in flight.
        let mut in_flight: HashMap<usize, usize> = HashMap::new();
        if st.tight.values().any(|t| !t.over) {
            for o in &st.objs {
                // A frame's or the page's own document is a navigation, not one of the
                // document's requests.
                if o.done || o.kind.is_html() || (o.tight_doc.is_some() && !o.released) {
                    continue;
                }
                let doc = o
                    .tight_doc
                    .or_else(|| referring_document(&st.objs, o.initiator?));
                if let Some(d) = doc.filter(|&d| Self::in_tight_phase(st, d)) {
                    *in_flight.entry(d).or_default() += 1;
                }
            }
        }
        let mut spare: HashMap<u64, usize> = self
            .conns
            .iter()
            .filter_map(|(id, c)| match c.state {
                ConnState::Connecting { expected } if !c.closing => Some((*id, expected)),
                _ => None,
            })
            .collect();
        let mut i = 0;
        let mut guard = 0usize;
        while i < st.queue.len() {
            guard += 1;
            if guard > 100_000 {
                break;
            }
            let oid = st.queue[i];
            if let Some(doc) = st.objs[oid].tight_doc {
                if !st.objs[oid].released && Self::in_tight_phase(st, doc) {
                    let n = in_flight.entry(doc).or_default();
                    if *n >= 2 {
                        i += 1;
                        continue;
                    }
                    *n += 1;
                    st.objs[oid].released = true;
                }
            }
            let origin = match &st.objs[oid].origin {
                Ok(o) => o.clone(),
                Err(_) => {
                    st.queue.remove(i);
                    continue;
                }
            };
            let group = self.group_of(&origin);
            let aff = self.affinity_of(&origin);
            let resent = st.objs[oid].retries > 0 && !self.uses_h2(&origin);
            if let Some(cid) = self.best_ready(&group, &aff, resent) {
                st.queue.remove(i);
                self.assign(st, cid, oid);
                continue;
            }
            let waiting = self
                .conns
                .iter()
                .filter(|(_, c)| self.matches(c, &group, &aff))
                .map(|(id, _)| *id)
                .find(|id| spare.get(id).is_some_and(|n| *n > 0));
            if let Some(cid) = waiting {
                if let Some(n) = spare.get_mut(&cid) {
                    *n -= 1;
                }
                i += 1;
                continue;
            }
            match self.room(st, &group, &origin) {
                Room::Wait => {
                    i += 1;
                    continue;
                }
                Room::Open => {
                    match self.target_for(st, &origin, oid) {
                        Ok(Some(target)) => {
                            let cid = self.open(st, group, &origin, target);
                            let expected = self.first_capacity(self.capacity(&origin));
                            spare.insert(cid, expected.saturating_sub(1));
                            i += 1;
                        }
                        Ok(None) => i += 1,
                        Err(e) => {
                            st.queue.remove(i);
                            let o = &mut st.objs[oid];
                            o.error = Some(e);
                            finish_failed(o, Instant::now());
                        }
                    }
                    continue;
                }
                Room::Full => {}
            }
            // At the limit: an idle connection bound elsewhere (a tunnel to another origin, or
            // a plain proxy connection when a tunnel is needed) makes room, as browsers do.
            let idle_other = self
                .conns
                .iter()
                .filter(|(_, c)| {
                    c.group == group
                        && c.affinity != aff
                        && c.outstanding.is_empty()
                        && !c.closing
                        && matches!(c.state, ConnState::Ready { .. })
                })
                .map(|(id, _)| *id)
                .min();
            if let Some(cid) = idle_other {
                self.close_conn(cid);
                continue;
            }
            i += 1;
        }
        for s in self.dns.values_mut() {
            if let DnsState::Resolved { fresh, .. } = s {
                *fresh = false;
            }
        }
        // A pipeline is built in one hand-out; later requests wait for the connection to idle.
        for c in self.conns.values_mut() {
            c.batch_open = false;
        }
    }

    // -----------------------------------------------------------------------------------------
    // Events

    fn handle(&mut self, st: &mut LoadState, ev: Event) {
        match ev {
            Event::Dns {
                gen,
                host,
                start,
                end,
                result,
            } => {
                if gen != st.gen {
                    return;
                }
                if let Some(DnsState::Pending { trigger, .. }) = self.dns.get(&host) {
                    if let Some(o) = st.objs.get_mut(*trigger) {
                        o.dns_span = Some((start, end));
                    }
                }
                let state = match &result {
                    Ok(a) => {
                        let ttl = Duration::from_secs(u64::from(a.ttl)).max(self.cfg.dns_min_ttl);
                        DnsState::Resolved {
                            addrs: a.addrs.clone(),
                            expires: end + ttl,
                            fresh: true,
                        }
                    }
                    Err(e) => DnsState::Failed {
                        // The wait per query, in the record's (unscaled) time.
                        reason: if e.starts_with("no answer") || e.starts_with("no TCP answer") {
                            format!(
                                "{e}, each waited {:?}",
                                self.cfg.dns_timeout.mul_f64(self.cfg.time_scale.max(0.0))
                            )
                        } else {
                            e.clone()
                        },
                        gen,
                    },
                };
                self.dns.insert(host.clone(), state);
                st.lookups.push((host, start, end, result));
            }
            Event::Connected {
                conn,
                peer,
                protocol,
                tcp_start,
                end,
                tls,
            } => {
                let capacity = match self.conns.get(&conn) {
                    None => return,
                    Some(c) => match (protocol, c.affinity.as_ref()) {
                        (Protocol::H2, _) => usize::MAX,
                        (_, Some(o)) if self.cfg.policy == Policy::H2 && o.https => 1,
                        (_, Some(o)) => self.first_capacity(self.capacity(o)),
                        (_, None) => self.first_capacity(self.capacity_plain()),
                    },
                };
                let Some(c) = self.conns.get_mut(&conn) else {
                    return;
                };
                c.state = ConnState::Ready { capacity };
                c.protocol = Some(protocol);
                c.peer = Some(peer);
                c.setup = Some((tcp_start, end, tls));
                let t0 = st.t0;
                if let Some(idx) = st.conn_rec_idx.get(&conn).copied() {
                    if let Some((_, r, span)) = st.conn_recs.get_mut(idx) {
                        r.remote = Some(peer);
                        r.protocol = Some(protocol.name().to_string());
                        r.opened = Some(tcp_start.saturating_duration_since(t0));
                        r.connect = Some(end.saturating_duration_since(tcp_start));
                        r.ssl = tls.map(|(a, b)| b.saturating_duration_since(a));
                        *span = Some((tcp_start, end));
                    }
                }
            }
            Event::ConnectFailed {
                conn,
                error,
                start,
                end,
            } => {
                let Some(c) = self.conns.remove(&conn) else {
                    return;
                };
                if let Some(idx) = st.conn_rec_idx.get(&conn).copied() {
                    if let Some((_, r, span)) = st.conn_recs.get_mut(idx) {
                        r.error = Some(error.clone());
                        r.connect = Some(end.saturating_duration_since(start));
                        *span = Some((start, end));
                    }
                }
                // With no other connection to fall back on, every object waiting for this
                // origin (or proxy) fails with the reason; later ones try again.
                let key = (c.group.clone(), c.affinity.clone());
                *st.connect_failures.entry(key).or_insert(0) += 1;
                let live = self
                    .conns
                    .values()
                    .any(|o| o.group == c.group && o.affinity == c.affinity);
                if !live {
                    let mut i = 0;
                    while i < st.queue.len() {
                        let oid = st.queue[i];
                        let hit = st.objs[oid].origin.as_ref().is_ok_and(|o| {
                            self.group_of(o) == c.group && self.affinity_of(o) == c.affinity
                        });
                        if !hit {
                            i += 1;
                            continue;
                        }
                        st.queue.remove(i);
                        let o = &mut st.objs[oid];
                        o.conn = Some(conn);
                        o.conn_setup = Some((start, end, None));
                        o.error = Some(error.clone());
                        finish_failed(o, end);
                    }
                }
            }
            Event::Head {
                gen,
                obj,
                status,
                headers,
            } => {
                if gen != st.gen {
                    return;
                }
                let Some(o) = st.objs.get_mut(obj) else {
                    return;
                };
                if o.kind.is_html()
                    && (200..300).contains(&status)
                    && is_html_type(header(&headers, "content-type"))
                {
                    o.scanner = Some(HtmlScanner::for_browser(
                        o.url.clone(),
                        self.cfg.link_preload,
                        self.cfg.viewport,
                    ));
                    o.refs_seen = 0;
                    o.decoder = StreamDecoder::for_coding(header(&headers, "content-encoding"));
                } else {
                    o.scanner = None;
                    o.decoder = None;
                }
            }
            Event::Chunk { gen, obj, data } => {
                if gen != st.gen {
                    return;
                }
                let Some(o) = st.objs.get_mut(obj) else {
                    return;
                };
                let scanned = match (o.scanner.as_mut(), o.decoder.as_mut()) {
                    (Some(s), Some(d)) => {
                        let found = s.feed(&d.feed(&data));
                        Scanned::of(s, found)
                    }
                    (Some(s), None) => {
                        let found = s.feed(&data);
                        Scanned::of(s, found)
                    }
                    (None, _) => return,
                };
                self.discover_html(st, obj, scanned);
            }
            Event::Done {
                conn,
                gen,
                obj,
                sent,
                first_byte,
                end,
                outcome,
                retryable,
                reusable,
            } => {
                let batch_depth = self.batch_depth();
                if let Some(c) = self.conns.get_mut(&conn) {
                    if gen == st.gen {
                        c.outstanding.retain(|&o| o != obj);
                    }
                    if !reusable {
                        c.closing = true;
                    }
                    // Mozilla 1.x pipelines on a connection once a response showed an
                    // HTTP/1.1 keep-alive server (`nsHttpConnection::OnHeadersAvailable`).
                    if let (true, Some(depth), ConnState::Ready { capacity }) =
                        (reusable, batch_depth, &mut c.state)
                    {
                        *capacity = (*capacity).max(depth);
                    }
                    if c.closing && c.outstanding.is_empty() {
                        self.conns.remove(&conn);
                    }
                }
                if gen != st.gen {
                    return;
                }
                self.done(st, conn, obj, sent, first_byte, end, outcome, retryable);
            }
            Event::Closed { conn } => {
                if let Some(c) = self.conns.remove(&conn) {
                    for oid in c.outstanding {
                        if let Some(o) = st.objs.get_mut(oid) {
                            if !o.done {
                                st.queue.push_front(oid);
                            }
                        }
                    }
                }
            }
        }
    }

    fn capacity_plain(&self) -> usize {
        match self.cfg.policy {
            Policy::Pipelining { depth, .. } => depth.max(1),
            _ => 1,
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn done(
        &mut self,
        st: &mut LoadState,
        conn: u64,
        oid: usize,
        sent: Sent,
        first_byte: Option<Instant>,
        end: Instant,
        outcome: Result<Response, FetchError>,
        retryable: bool,
    ) {
        let max_retries = self.cfg.max_retries;
        let Some(o) = st.objs.get_mut(oid) else {
            return;
        };
        if o.done {
            return;
        }
        if let Err(e) = &outcome {
            if retryable {
                if o.retries < max_retries {
                    o.retries += 1;
                    o.conn = None;
                    o.conn_setup = None;
                    o.scanner = None;
                    st.queue.push_front(oid);
                    return;
                }
                let _ = e;
            }
        }
        o.conn = Some(conn);
        if o.server.is_none() {
            o.server = self.conns.get(&conn).and_then(|c| c.peer);
        }
        o.sent = sent;
        o.first_byte = first_byte;
        o.end = Some(end);
        o.done = true;
        let resp = match outcome {
            Err(e) => {
                o.error = Some(if retryable {
                    FetchError::ConnectionClosed { retries: o.retries }
                } else {
                    e
                });
                o.scanner = None;
                return;
            }
            Ok(r) => r,
        };
        let status = resp.status;
        let key = o.url.as_str().to_string();
        // The HTTP cache keeps (and discovery reads) the decoded body.
        let mut body_for_discovery = match (&resp.body, header(&resp.headers, "content-encoding")) {
            (Some(b), Some(ce)) => decode_all(Some(ce), b)
                .map(Bytes::from)
                .or(resp.body.clone()),
            _ => resp.body.clone(),
        };
        if status == 304 && o.conditional {
            if let Some(entry) = self.cache.get(&key) {
                body_for_discovery = entry.body.clone();
            }
        } else if status == 200 {
            let etag = header(&resp.headers, "etag").map(str::to_string);
            let lm = header(&resp.headers, "last-modified").map(str::to_string);
            if etag.is_some() || lm.is_some() {
                self.cache.insert(
                    key,
                    CacheEntry {
                        etag,
                        last_modified: lm,
                        body: body_for_discovery.clone(),
                    },
                );
            } else {
                self.cache.remove(&key);
            }
        }
        // Redirects: followed for the main page only.
        let location = if (300..400).contains(&status) && status != 304 {
            header(&resp.headers, "location").and_then(|l| discover::resolve(&o.url, l))
        } else {
            None
        };
        o.redirect_url = location.as_ref().map(|u| u.to_string());
        let kind = o.kind;
        let is_main = o.is_main;
        let redirects = o.redirects;
        let ok = (200..300).contains(&status) || (status == 304 && o.conditional);
        let css_type = header(&resp.headers, "content-type")
            .is_some_and(|ct| ct.to_ascii_lowercase().contains("text/css"));
        let html_ok = is_html_type(header(&resp.headers, "content-type"));
        let base = o.url.clone();
        let mut scanner = o.scanner.take();
        o.decoder = None;
        o.response = Some(Response { body: None, ..resp });
        if let (true, Some(loc)) = (is_main, location) {
            // A page that never arrives is an error on its last redirect, as a browser's
            // ERR_TOO_MANY_REDIRECTS is.
            let failed = if redirects >= self.cfg.max_redirects {
                Some(format!("more than {} redirects", self.cfg.max_redirects))
            } else {
                let at = loc.to_string();
                match self.add_object(st, loc, ResourceKind::Document, Some(oid), 0, true) {
                    Some(id) => {
                        st.objs[id].redirects = redirects + 1;
                        st.main = id;
                        None
                    }
                    // Not added: over max_objects (counted as dropped), or already fetched.
                    None if st.objs.len() >= self.cfg.max_objects => None,
                    None => Some(format!("redirect loop: {at} was already fetched")),
                }
            };
            if let Some(why) = failed {
                st.objs[oid].error = Some(FetchError::Redirects(why));
            }
            return;
        }
        if !ok {
            return;
        }
        if kind.is_html() {
            let scanned = match scanner.as_mut() {
                Some(s) if status != 304 => {
                    let found = s.finish();
                    Scanned::of(s, found)
                }
                _ => match (&body_for_discovery, html_ok) {
                    (Some(b), true) => {
                        let mut s = HtmlScanner::for_browser(
                            base,
                            self.cfg.link_preload,
                            self.cfg.viewport,
                        );
                        let mut found = s.feed(b);
                        found.extend(s.finish());
                        Scanned::of(&mut s, found)
                    }
                    _ => Scanned::default(),
                },
            };
            self.discover_html(st, oid, scanned);
        } else if kind == ResourceKind::Stylesheet || css_type {
            if let Some(b) = body_for_discovery {
                let css = String::from_utf8_lossy(&b);
                let applies = !st.objs[oid].style_unused;
                let sheet = scan_stylesheet(&css, &base, applies, &self.cfg.viewport);
                self.discover(st, oid, sheet);
            }
        }
    }

    // -----------------------------------------------------------------------------------------
    // The record

    fn build(&self, st: LoadState) -> PageLoad {
        let t0 = st.t0;
        let off = |t: Instant| t.saturating_duration_since(t0);
        let last = st.objs.iter().filter_map(|o| o.end).max().unwrap_or(t0);
        let plt = off(last);
        let mut intervals: Vec<(Phase, Duration, Duration)> = Vec::new();
        for (_, a, b, _) in &st.lookups {
            intervals.push((Phase::Dns, off(*a), off(*b)));
        }
        for (_, _, span) in &st.conn_recs {
            if let Some((a, b)) = span {
                intervals.push((Phase::Connect, off(*a), off(*b)));
            }
        }
        for o in &st.objs {
            if let (Some(fb), Some(end)) = (o.first_byte, o.end) {
                intervals.push((Phase::Payload, off(fb), off(end)));
            }
        }
        let breakdown = result::breakdown(plt, &intervals);
        let objects = st
            .objs
            .iter()
            .enumerate()
            .map(|(id, o)| object_timing(id, o, t0, self.cfg.time_scale))
            .collect();
        let dns_lookups = st
            .lookups
            .iter()
            .map(|(host, a, b, r)| DnsLookup {
                host: host.clone(),
                start: off(*a),
                duration: b.saturating_duration_since(*a),
                addrs: r.as_ref().map(|x| x.addrs.clone()).unwrap_or_default(),
                ttl: r.as_ref().ok().map(|x| x.ttl),
                error: r.as_ref().err().cloned(),
            })
            .collect();
        let unrequested = self.unrequested_of(&st);
        PageLoad {
            unrequested,
            url: st.url,
            policy: self.cfg.policy,
            via_proxy: self.cfg.proxy.is_some(),
            started: st.wall0,
            plt,
            breakdown,
            objects,
            main: st.main,
            connections: st.conn_recs.into_iter().map(|(_, r, _)| r).collect(),
            dns_lookups,
            timed_out: st.timed_out,
            objects_dropped: st.dropped,
            tls_upgrades: Vec::new(),
        }
    }
}

impl Loader {
    /// What the page referred to and was not requested, each URL once (none that was
    /// requested after all), with why: besides what was noted when found, a stylesheet's
    /// images and fonts the layout did not use (or that waited for a layout that never came),
    /// what parsers held when the load ended, and redirect targets not followed (an embedded
    /// object's, or the page's past `max_redirects`).
    fn unrequested_of(&self, st: &LoadState) -> Vec<UnrequestedRef> {
        let mut all: Vec<(Url, ResourceKind, Unrequested)> = st.unrequested.clone();
        for l in st.layouts.values() {
            let why = if l.laid_out {
                Unrequested::NotUsed
            } else {
                Unrequested::NotReached
            };
            all.extend(
                l.pending
                    .iter()
                    .map(|(d, _, _)| (d.url.clone(), d.kind, why)),
            );
        }
        for h in st.held.values() {
            for step in &h.items {
                if let Step::Ref(d, _) = step {
                    all.push((d.url.clone(), d.kind, Unrequested::NotReached));
                }
            }
        }
        for o in &st.objs {
            if let Some(to) = o.redirect_url.as_deref().and_then(|u| Url::parse(u).ok()) {
                all.push((to, o.kind, Unrequested::RedirectNotFollowed));
            }
        }
        let mut out: Vec<UnrequestedRef> = Vec::new();
        let mut listed: HashSet<String> = HashSet::new();
        for (url, kind, reason) in all {
            let url = self.as_requested(url);
            if !matches!(url.scheme(), "http" | "https") || st.seen.contains(url.as_str()) {
                continue;
            }
            if listed.insert(url.as_str().to_string()) {
                out.push(UnrequestedRef {
                    url: url.into(),
                    kind,
                    reason,
                });
            }
        }
        out
    }
}

/// The nesting of a reference found at `nesting`: frames and stylesheets go one level deeper.
fn nesting_below(kind: ResourceKind, nesting: usize) -> usize {
    match kind {
        ResourceKind::Iframe | ResourceKind::Stylesheet => nesting + 1,
        _ => nesting,
    }
}

/// The HTML document whose request is whatever `from` references: `from` itself, or the
/// document that uses stylesheet `from`.
fn referring_document(objs: &[Obj], from: usize) -> Option<usize> {
    if objs.get(from)?.kind.is_html() {
        Some(from)
    } else {
        owner_document(objs, from)
    }
}

/// The HTML document whose layout uses stylesheet `sheet` (through `@import`s), if any.
fn owner_document(objs: &[Obj], sheet: usize) -> Option<usize> {
    let mut at = sheet;
    while objs.get(at)?.kind == ResourceKind::Stylesheet {
        at = objs[at].initiator?;
    }
    objs[at]
        .kind
        .is_html()
        .then_some(at)
        .filter(|&d| d != sheet)
}

fn finish_failed(o: &mut Obj, now: Instant) {
    o.done = true;
    if o.end.is_none() {
        o.end = Some(now);
    }
    o.scanner = None;
}

fn object_timing(id: usize, o: &Obj, t0: Instant, time_scale: f64) -> ObjectTiming {
    let end = o.end.unwrap_or(o.queued);
    let send_start = o.sent.send_start.unwrap_or(end).max(o.queued);
    let send_end = o
        .sent
        .send_end
        .unwrap_or(send_start)
        .max(send_start)
        .min(end.max(send_start));
    let first = o
        .first_byte
        .unwrap_or(end)
        .clamp(send_end, end.max(send_end));
    let pre = send_start.saturating_duration_since(o.queued);
    let dns = o
        .dns_span
        .map(|(a, b)| b.saturating_duration_since(a).min(pre));
    let connect = o.conn_setup.map(|(a, b, _)| {
        b.saturating_duration_since(a)
            .min(pre - dns.unwrap_or_default())
    });
    let ssl = match (o.conn_setup, connect) {
        (Some((_, _, Some((a, b)))), Some(c)) => Some(b.saturating_duration_since(a).min(c)),
        _ => None,
    };
    let blocked = pre - dns.unwrap_or_default() - connect.unwrap_or_default();
    let timings = Timings {
        blocked: Some(blocked),
        dns,
        connect,
        ssl,
        send: send_end.saturating_duration_since(send_start),
        wait: first.saturating_duration_since(send_end),
        receive: end.saturating_duration_since(first),
    };
    let resp = o.response.as_ref();
    ObjectTiming {
        id,
        url: o.url.to_string(),
        kind: o.kind,
        initiator: o.initiator,
        start: o.queued.saturating_duration_since(t0),
        end: end.saturating_duration_since(t0),
        timings,
        status: resp.map(|r| r.status),
        status_text: resp.map(|r| r.reason.clone()).unwrap_or_default(),
        http_version: resp
            .map(|r| r.version.to_string())
            .unwrap_or_else(|| o.sent.version.to_string()),
        request_headers: o.sent.headers.clone(),
        request_headers_size: o.sent.headers_size,
        response_headers: resp.map(|r| r.headers.clone()).unwrap_or_default(),
        headers_size: resp.and_then(|r| r.headers_size),
        body_size: resp.map(|r| r.body_size).unwrap_or(0),
        content_size: resp.map(|r| r.content_size).unwrap_or(0),
        content_type: resp.and_then(|r| header(&r.headers, "content-type").map(str::to_string)),
        redirect_url: o.redirect_url.clone(),
        connection_id: o.conn,
        server_addr: o.server,
        conditional: o.conditional,
        cache_hit: o.conditional && resp.is_some_and(|r| r.status == 304),
        retries: o.retries,
        error: o.error.clone().map(|e| e.scaled(time_scale)),
    }
}

/// Load one page with fresh client state (empty DNS and HTTP caches, no open connections).
pub async fn load_page(url: &str, cfg: &LoaderConfig) -> PageLoad {
    let mut loader = Loader::new(cfg.clone());
    let page = loader.load(url).await;
    loader.close_connections();
    page
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(expires: Instant, fresh: bool) -> DnsState {
        DnsState::Resolved {
            addrs: vec![IpAddr::from([192, 0, 2, 1])],
            expires,
            fresh,
        }
    }

    #[test]
    fn a_dns_answer_is_used_until_its_expiry_or_while_fresh() {
        let t = Instant::now();
        let ttl = Duration::from_secs(30);
        let stale = answer(t + ttl, false);
        assert!(stale.cached(t).is_some());
        assert!(stale.cached(t + ttl - Duration::from_millis(1)).is_some());
        assert!(stale.cached(t + ttl).is_none(), "expired at its TTL");
        // Looked up in this load: used by its connections whatever the TTL.
        assert!(answer(t + ttl, true).cached(t + ttl * 10).is_some());
        let pending = DnsState::Pending { trigger: 0, gen: 1 };
        assert!(pending.cached(t).is_none());
    }

    /// The scheduler's clock is tokio's: in paused time a cached answer runs out when virtual
    /// time passes its TTL, with no waiting.
    #[tokio::test(start_paused = true)]
    async fn dns_answers_expire_in_virtual_time() {
        let mut loader = Loader::new(LoaderConfig::default());
        loader.dns.insert(
            "www.test".into(),
            answer(Instant::now() + Duration::from_secs(30), false),
        );
        let cached = |l: &Loader| l.dns["www.test"].cached(Instant::now()).is_some();
        tokio::time::advance(Duration::from_secs(29)).await;
        assert!(cached(&loader));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(!cached(&loader));
    }

    /// The page timeout is decided in virtual time: a page whose server never answers ends at
    /// exactly `page_timeout` on tokio's paused clock (ten minutes here, taken at once).
    #[tokio::test(start_paused = true)]
    async fn the_page_timeout_fires_in_virtual_time() {
        // Connections complete in the kernel's backlog; nothing is ever read or answered.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/", silent.local_addr().unwrap());
        let cfg = LoaderConfig {
            page_timeout: Duration::from_secs(600),
            connect_timeout: Duration::from_secs(3600),
            response_timeout: Duration::from_secs(3600),
            ..LoaderConfig::default()
        };
        let t0 = Instant::now();
        let page = load_page(&url, &cfg).await;
        assert_eq!(t0.elapsed(), Duration::from_secs(600));
        assert!(page.timed_out);
        assert_eq!(page.objects.len(), 1);
        assert!(
            matches!(page.objects[0].error, Some(FetchError::PageTimeout(_))),
            "{:?}",
            page.objects[0].error
        );
    }
}
