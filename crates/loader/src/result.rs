//! What a page load produces: per-object timings (HAR 1.2 phases), connections, lookups, the
//! page load time and its breakdown (DESIGN §7.5).

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, SystemTime};

use crate::config::Policy;
use crate::discover::ResourceKind;
use crate::error::FetchError;

/// HAR 1.2 `timings` of one object. `None` is HAR's -1 ("does not apply"). `connect` includes
/// `ssl`, as in HAR. `blocked + dns + connect + send + wait + receive` is the object's time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Timings {
    /// Queued: waiting for a connection (or a stream slot, or a pipeline position).
    pub blocked: Option<Duration>,
    /// The lookup this request caused (the first request for a name, or after its TTL ran out).
    pub dns: Option<Duration>,
    /// Setting up the connection this request was the first on (TCP, CONNECT tunnel, TLS).
    pub connect: Option<Duration>,
    /// The TLS part of `connect`.
    pub ssl: Option<Duration>,
    pub send: Duration,
    /// From the request sent to the first byte of the response.
    pub wait: Duration,
    /// From the first byte of the response to the last.
    pub receive: Duration,
}

impl Timings {
    /// The object's total time (HAR `time`).
    pub fn total(&self) -> Duration {
        self.blocked.unwrap_or_default()
            + self.dns.unwrap_or_default()
            + self.connect.unwrap_or_default()
            + self.send
            + self.wait
            + self.receive
    }
}

/// One fetched (or failed) object.
#[derive(Debug, Clone, PartialEq)]
pub struct ObjectTiming {
    /// Index in [`PageLoad::objects`] (discovery order).
    pub id: usize,
    pub url: String,
    pub kind: ResourceKind,
    /// The object whose HTML or CSS referenced this one (or that redirected to it).
    pub initiator: Option<usize>,
    /// When the object was discovered (queued), from the start of the page load.
    pub start: Duration,
    /// When its last byte arrived (or it failed), from the start of the page load.
    pub end: Duration,
    pub timings: Timings,
    /// Response status; `None` when no response head arrived.
    pub status: Option<u16>,
    pub status_text: String,
    /// `HTTP/1.0`, `HTTP/1.1` or `HTTP/2` of the response (of the request when none came).
    pub http_version: String,
    pub request_headers: Vec<(String, String)>,
    /// Bytes of the request head; `None` for HTTP/2 (HPACK).
    pub request_headers_size: Option<u64>,
    pub response_headers: Vec<(String, String)>,
    /// Bytes of the response head as received; `None` for HTTP/2 or when none came.
    pub headers_size: Option<u64>,
    /// Body bytes as received (chunk framing included).
    pub body_size: u64,
    /// Decoded body bytes.
    pub content_size: u64,
    pub content_type: Option<String>,
    /// `Location` of a redirect response.
    pub redirect_url: Option<String>,
    /// The connection the request went on (ids are unique within a [`crate::Loader`]).
    pub connection_id: Option<u64>,
    /// The address the connection went to (the proxy's, through a proxy).
    pub server_addr: Option<SocketAddr>,
    /// A conditional request was sent (the object was in the client's cache).
    pub conditional: bool,
    /// The answer was 304 Not Modified: a cache hit.
    pub cache_hit: bool,
    /// Times the request was re-sent after its connection closed without answering.
    pub retries: u32,
    /// Network or protocol failure (4xx/5xx are not errors: see `status`).
    pub error: Option<FetchError>,
}

impl ObjectTiming {
    /// An object that got no response (yet): only what identifies it, every timing and
    /// response field empty.
    pub fn unanswered(id: usize, url: String, kind: ResourceKind) -> Self {
        ObjectTiming {
            id,
            url,
            kind,
            initiator: None,
            start: Duration::ZERO,
            end: Duration::ZERO,
            timings: Timings::default(),
            status: None,
            status_text: String::new(),
            http_version: String::new(),
            request_headers: Vec::new(),
            request_headers_size: None,
            response_headers: Vec::new(),
            headers_size: None,
            body_size: 0,
            content_size: 0,
            content_type: None,
            redirect_url: None,
            connection_id: None,
            server_addr: None,
            conditional: false,
            cache_hit: false,
            retries: 0,
            error: None,
        }
    }
}

/// Why the browser model did not request an object the page referred to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Unrequested {
    /// What a stylesheet uses that the page does not: a rule no element matches (or that can
    /// never match), a font face its text is not set in, anything under media that do not
    /// apply. A browser does not fetch it either.
    NotUsed,
    /// Found by a parser that had not got to it when the load ended (it waited behind a
    /// script, or for the document's layout).
    NotReached,
    /// The target of an embedded object's redirect: the model follows the page's own
    /// redirects only.
    RedirectNotFollowed,
    /// Past [`crate::LoaderConfig::max_objects`].
    OverMaxObjects,
    /// In a frame or stylesheet nested deeper than [`crate::LoaderConfig::max_nesting`].
    TooDeep,
}

impl Unrequested {
    /// Its name in records (`results.json`, HARs): `not used`, `not reached`, ...
    pub fn name(self) -> &'static str {
        match self {
            Unrequested::NotUsed => "not used",
            Unrequested::NotReached => "not reached",
            Unrequested::RedirectNotFollowed => "redirect not followed",
            Unrequested::OverMaxObjects => "over max objects",
            Unrequested::TooDeep => "nested too deep",
        }
    }
}

/// A reference the browser model did not request ([`PageLoad::unrequested`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnrequestedRef {
    /// As the browser would have requested it (no fragment; https where it upgrades).
    pub url: String,
    pub kind: ResourceKind,
    pub reason: Unrequested,
}

/// One connection used (or attempted) during the load.
#[derive(Debug, Clone, PartialEq)]
pub struct ConnectionInfo {
    pub id: u64,
    /// The address connected to (origin or proxy).
    pub remote: Option<SocketAddr>,
    /// The origin the connection is bound to (direct, a CONNECT tunnel, or a proxy connection
    /// pooled per origin); `None` for a plain proxy connection that carries requests for any
    /// http origin.
    pub origin: Option<String>,
    pub via_proxy: bool,
    /// `http/1.0`, `http/1.1` or `h2` once established.
    pub protocol: Option<String>,
    pub tls: bool,
    /// Opened during an earlier load of the same [`crate::Loader`] and kept alive.
    pub reused: bool,
    /// When setup started, from the start of the load (`None` when reused).
    pub opened: Option<Duration>,
    /// Setup time: TCP, tunnel and TLS.
    pub connect: Option<Duration>,
    pub ssl: Option<Duration>,
    /// Requests sent on it during this load.
    pub requests: u32,
    /// Why setup failed.
    pub error: Option<FetchError>,
}

/// One DNS lookup made during the load.
#[derive(Debug, Clone, PartialEq)]
pub struct DnsLookup {
    pub host: String,
    pub start: Duration,
    pub duration: Duration,
    pub addrs: Vec<IpAddr>,
    pub ttl: Option<u32>,
    pub error: Option<String>,
}

/// Where the page load time went (DESIGN §7.5, paper 000 Fig. 4): at each instant the page's
/// timeline is *payload* if any object is receiving bytes, else *dns* if a lookup is in
/// progress, else *connect* if a connection (TCP, tunnel, TLS) is being set up, else *idle*
/// (waiting for responses). The four add up to the PLT exactly.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Breakdown {
    pub dns: Duration,
    pub connect: Duration,
    pub idle: Duration,
    pub payload: Duration,
}

impl Breakdown {
    pub fn total(&self) -> Duration {
        self.dns + self.connect + self.idle + self.payload
    }

    fn scaled(&self, k: f64) -> Breakdown {
        Breakdown {
            dns: self.dns.mul_f64(k),
            connect: self.connect.mul_f64(k),
            idle: self.idle.mul_f64(k),
            payload: self.payload.mul_f64(k),
        }
    }
}

/// The record of one page load.
#[derive(Debug, Clone, PartialEq)]
pub struct PageLoad {
    /// The URL asked for.
    pub url: String,
    pub policy: Policy,
    pub via_proxy: bool,
    /// Wall-clock time of the start.
    pub started: SystemTime,
    /// Page load time: first request start to the last byte of the last object.
    pub plt: Duration,
    pub breakdown: Breakdown,
    /// Every object, in discovery order; `objects[main]` is the final page document.
    pub objects: Vec<ObjectTiming>,
    /// Index of the final main document (after redirects).
    pub main: usize,
    pub connections: Vec<ConnectionInfo>,
    pub dns_lookups: Vec<DnsLookup>,
    /// The whole-page timeout expired.
    pub timed_out: bool,
    /// References not followed because the page hit `max_objects`.
    pub objects_dropped: usize,
    /// What the page referenced and the browser did not request, each URL once, with why
    /// (issue 36: no object goes missing silently). Empty for a real browser's record, which
    /// does not say.
    pub unrequested: Vec<UnrequestedRef>,
    /// Hosts whose http:// URLs the browser fetched over https on its own (Chromium's HSTS
    /// preload list); the model never does. Through a proxy such requests are CONNECT
    /// tunnels, out of the proxy's reach.
    pub tls_upgrades: Vec<String>,
}

impl PageLoad {
    /// Objects that failed (network or protocol errors).
    pub fn errors(&self) -> usize {
        self.objects.iter().filter(|o| o.error.is_some()).count()
    }

    /// 304 answers to conditional requests.
    pub fn cache_hits(&self) -> usize {
        self.objects.iter().filter(|o| o.cache_hit).count()
    }

    /// Response bytes received (heads and bodies as on the wire; HTTP/2 heads not counted).
    pub fn bytes_received(&self) -> u64 {
        self.objects
            .iter()
            .map(|o| o.headers_size.unwrap_or(0) + o.body_size)
            .sum()
    }

    /// Connections opened during this load (setup attempted, whether or not it worked).
    pub fn connections_opened(&self) -> usize {
        self.connections.iter().filter(|c| !c.reused).count()
    }

    /// Multiply every duration by `k`: a lab run at time scale k reports what the real link
    /// would show (DESIGN §7.5: times are unscaled).
    pub fn scale_times(&mut self, k: f64) {
        if !(k.is_finite() && k > 0.0) {
            return;
        }
        let s = |d: Duration| d.mul_f64(k);
        self.plt = s(self.plt);
        self.breakdown = self.breakdown.scaled(k);
        for o in &mut self.objects {
            o.start = s(o.start);
            o.end = s(o.end);
            let t = &mut o.timings;
            t.blocked = t.blocked.map(s);
            t.dns = t.dns.map(s);
            t.connect = t.connect.map(s);
            t.ssl = t.ssl.map(s);
            t.send = s(t.send);
            t.wait = s(t.wait);
            t.receive = s(t.receive);
        }
        for c in &mut self.connections {
            c.opened = c.opened.map(s);
            c.connect = c.connect.map(s);
            c.ssl = c.ssl.map(s);
        }
        for l in &mut self.dns_lookups {
            l.start = s(l.start);
            l.duration = s(l.duration);
        }
    }
}

/// The breakdown of `[0, plt]` from the objects' own timings alone: each object's lookup,
/// connection setup and receiving span (for records built from a real browser's events, which
/// carry no separate lookup and connection lists).
pub fn breakdown_of_objects(plt: Duration, objects: &[ObjectTiming]) -> Breakdown {
    let mut intervals = Vec::with_capacity(objects.len() * 3);
    for o in objects {
        let t = &o.timings;
        let mut at = o.start + t.blocked.unwrap_or_default();
        if let Some(d) = t.dns {
            intervals.push((Phase::Dns, at, at + d));
            at += d;
        }
        if let Some(c) = t.connect {
            intervals.push((Phase::Connect, at, at + c));
        }
        if o.status.is_some() {
            intervals.push((Phase::Payload, o.end.saturating_sub(t.receive), o.end));
        }
    }
    breakdown(plt, &intervals)
}

/// Which phase an interval of the timeline belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    Dns,
    Connect,
    Payload,
}

/// Compute the breakdown of `[0, plt]` from phase intervals (offsets from the page start).
pub(crate) fn breakdown(plt: Duration, intervals: &[(Phase, Duration, Duration)]) -> Breakdown {
    let end = plt.as_nanos();
    // (time, phase index, +1/-1)
    let mut edges: Vec<(u128, usize, i32)> = Vec::with_capacity(intervals.len() * 2);
    for &(p, a, b) in intervals {
        let (a, b) = (a.as_nanos().min(end), b.as_nanos().min(end));
        if b <= a {
            continue;
        }
        let i = match p {
            Phase::Payload => 0,
            Phase::Dns => 1,
            Phase::Connect => 2,
        };
        edges.push((a, i, 1));
        edges.push((b, i, -1));
    }
    edges.sort_unstable();
    let mut active = [0i32; 3];
    let mut acc = [0u128; 4]; // payload, dns, connect, idle
    let mut t = 0u128;
    for (at, i, d) in edges {
        if at > t {
            let slot = if active[0] > 0 {
                0
            } else if active[1] > 0 {
                1
            } else if active[2] > 0 {
                2
            } else {
                3
            };
            acc[slot] += at - t;
            t = at;
        }
        active[i] += d;
    }
    acc[3] += end.saturating_sub(t);
    let d = |n: u128| Duration::from_nanos(u64::try_from(n).unwrap_or(u64::MAX));
    Breakdown {
        payload: d(acc[0]),
        dns: d(acc[1]),
        connect: d(acc[2]),
        idle: d(acc[3]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn breakdown_priorities_and_sum() {
        let iv = [
            (Phase::Dns, ms(0), ms(100)),
            (Phase::Connect, ms(100), ms(200)),
            (Phase::Payload, ms(300), ms(400)),
            (Phase::Dns, ms(350), ms(500)), // hidden by payload until 400
            (Phase::Connect, ms(450), ms(600)), // hidden by dns until 500
            (Phase::Payload, ms(900), ms(2000)), // clipped at plt
        ];
        let b = breakdown(ms(1000), &iv);
        assert_eq!(b.payload, ms(200));
        assert_eq!(b.dns, ms(200));
        assert_eq!(b.connect, ms(200));
        assert_eq!(b.idle, ms(400));
        assert_eq!(b.total(), ms(1000));
        assert_eq!(breakdown(ms(0), &iv).total(), ms(0));
        assert_eq!(breakdown(ms(10), &[]).idle, ms(10));
    }

    #[test]
    fn breakdown_from_object_timings_places_each_phase() {
        let obj = |start: u64,
                   blocked: u64,
                   dns: Option<u64>,
                   connect: Option<u64>,
                   end: u64,
                   receive: u64| ObjectTiming {
            start: ms(start),
            end: ms(end),
            timings: Timings {
                blocked: Some(ms(blocked)),
                dns: dns.map(ms),
                connect: connect.map(ms),
                ssl: None,
                send: ms(0),
                wait: ms(0),
                receive: ms(receive),
            },
            status: Some(200),
            status_text: "OK".into(),
            http_version: "HTTP/1.1".into(),
            ..ObjectTiming::unanswered(0, "http://a.test/".into(), ResourceKind::Image)
        };
        // 0–100 dns, 100–300 connect, 300–500 waiting, 500–600 receiving; a second object
        // queued 50 ms at 200 and receiving 700–900.
        let objects = [
            obj(0, 0, Some(100), Some(200), 600, 100),
            obj(200, 50, None, None, 900, 200),
        ];
        let b = breakdown_of_objects(ms(1000), &objects);
        assert_eq!((b.dns, b.connect, b.payload), (ms(100), ms(200), ms(300)));
        assert_eq!(b.idle, ms(400));
        assert_eq!(b.total(), ms(1000));
    }
}
