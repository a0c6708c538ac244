//! Lab configurations: named blocks of a TOML file (browser policy, proxy mode, switches), so
//! later work adds webpep's modes and peer proxies without touching the runner.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use webpep_server::config::Congestion;

use crate::{LabError, Result};

/// The built-in configurations (`configs/builtin.toml`).
pub const BUILTIN: &str = include_str!("../configs/builtin.toml");

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PolicyName {
    Http10,
    Http11,
    Pipelining,
    H2,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProxyMode {
    /// Direct to the origins.
    #[default]
    None,
    /// The browser is configured with webpep's edge proxy (absolute-URI requests).
    Explicit,
    /// Paper 002's DNS rewriting: `webpep dns` in edge answers every web name with the proxy's
    /// address (the originals kept after it), so the browser talks to the proxy unawares.
    TransparentDns,
    /// Paper 002's URL rewriting: the page is opened as `http://<proxy>/<host>/<path>` and the
    /// proxy rewrites the embedded URLs of HTML and CSS to the same form.
    TransparentUrl,
    /// Interception: an nft redirect in edge sends the browser's port-80 traffic to the proxy,
    /// which finds the original destination with SO_ORIGINAL_DST.
    Intercept,
    /// The dual proxy: the browser in ue uses `webpep client` (in ue, on loopback) as its
    /// proxy, which carries every request and CONNECT over one QUIC connection to the edge's
    /// QUIC front end (the same pipeline as `explicit`).
    Dual,
}

impl ProxyMode {
    pub fn name(self) -> &'static str {
        match self {
            ProxyMode::None => "direct",
            ProxyMode::Explicit => "explicit proxy",
            ProxyMode::TransparentDns => "transparent proxy by DNS rewriting",
            ProxyMode::TransparentUrl => "transparent proxy by URL rewriting",
            ProxyMode::Intercept => "transparent proxy by interception (nft redirect)",
            ProxyMode::Dual => "dual proxy (webpep client in ue, QUIC over the air to the edge)",
        }
    }
}

/// The edge proxy's switches (ignored without a proxy); each can be turned off for an
/// ablation (000 Fig. 8).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProxySwitches {
    /// Lossless compression towards the browser (br, zstd, gzip by Accept-Encoding).
    pub compress: bool,
    /// Image transcoding preset: lossless | balanced | aggressive | off.
    pub transcode: String,
    /// The proxy's shared HTTP cache (cold at the start of every load).
    pub cache: bool,
    /// Air-side TCP tuning (003 §6.1): per-socket congestion control, a small unsent buffer,
    /// initial window 10 on the route to ue. Off: a 2003 stack (Reno, initial window 2).
    pub air_tuning: bool,
    /// With `air_tuning`: the congestion control of the proxy's client sockets (bbr, cubic,
    /// reno).
    pub air_congestion: Congestion,
    /// Keep-alive probes that hold the radio channel while the client is active (003 §6.4).
    pub keepalive_probes: bool,
    /// The proxy fetches a page's objects into its cache before the browser asks (000 §4.2.2;
    /// needs the cache).
    pub prefetch: bool,
    /// Small stylesheets and scripts (and, with `inline_images`, images) copied into the pages
    /// that use them (beyond the papers; `[inline]` of `webpep server`).
    pub inline: bool,
    /// With `inline`: tiny images too, as `data:` URIs (`[inline] images`).
    pub inline_images: bool,
    /// The proxy scales with the client's measured link (`[air] adapt`): inline sizes and
    /// wait, and whether a response waits for its transform (a transform not worth its time
    /// at the link's rate is made in the background for the next client instead). Off: the
    /// configured values, every transform waited for.
    #[serde(default = "yes")]
    pub adapt: bool,
    /// The proxy holds what it writes to each client to a budget over all the client's
    /// connections (`[air] budget`): bytes in flight within twice the client's measured
    /// rate × least RTT, so that its many connections do not fill the link's queue. Off by
    /// default, as in `webpep server`.
    #[serde(default)]
    pub air_budget: bool,
    /// With `air_budget`: its least size in bytes (`[air] budget-floor`); `None`: the
    /// server's default.
    #[serde(default)]
    pub air_budget_floor: Option<u64>,
    /// With `air_budget`: bytes in flight as a multiple of rate × least RTT (`[air]
    /// budget-gain`); `None`: the server's default.
    #[serde(default)]
    pub air_budget_gain: Option<f64>,
}

impl Default for ProxySwitches {
    fn default() -> Self {
        ProxySwitches {
            compress: true,
            transcode: "balanced".into(),
            cache: true,
            air_tuning: true,
            air_congestion: Congestion::Cubic,
            keepalive_probes: true,
            prefetch: true,
            inline: true,
            inline_images: true,
            adapt: true,
            air_budget: false,
            air_budget_floor: None,
            air_budget_gain: None,
        }
    }
}

impl ProxySwitches {
    pub fn summary(&self) -> String {
        let mut on = Vec::new();
        if self.compress {
            on.push("compress".to_string());
        }
        if self.transcode != "off" {
            on.push(format!("transcode {}", self.transcode));
        }
        if self.cache {
            on.push("cache".into());
        }
        if self.air_tuning {
            on.push(format!("air TCP tuning ({})", self.air_congestion.name()));
        }
        if self.keepalive_probes {
            on.push("keep-alive probes".into());
        }
        if self.prefetch && self.cache {
            on.push("prefetch".into());
        }
        if self.inline && self.inline_images {
            on.push("inline (with images)".into());
        } else if self.inline {
            on.push("inline".into());
        }
        if !self.adapt && !on.is_empty() {
            on.push("fixed (not scaled with the link)".into());
        }
        if self.air_budget && !on.is_empty() {
            on.push("per-client air budget".into());
        }
        if on.is_empty() {
            "no optimizations".into()
        } else {
            on.join(" + ")
        }
    }
}

/// A peer proxy run at the edge in place of webpep's (DESIGN §7.4: "Peers run as lab
/// configurations where installed"), as the explicit proxy, with its stock settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Peer {
    /// Squid (Debian's), a caching proxy: memory cache, no content changes.
    Squid,
    /// Ziproxy (Debian's), a compressing proxy: gzip for text, images recompressed as JPEG at
    /// its default qualities (30, 25, 25, 20 by image size).
    Ziproxy,
    /// The classic two-level cache hierarchy: a Squid child cache in ue (the browser's
    /// proxy, on its loopback) whose parent is a Squid at the edge; between them, plain
    /// HTTP/1.1 over TCP across the air.
    SquidHierarchy,
}

impl Peer {
    pub fn name(self) -> &'static str {
        match self {
            Peer::Squid => "squid",
            Peer::Ziproxy => "ziproxy",
            Peer::SquidHierarchy => "squid-hierarchy",
        }
    }

    /// What it does, for the report.
    pub fn summary(self) -> &'static str {
        match self {
            Peer::Squid => "Squid, stock: memory cache, no content changes",
            Peer::SquidHierarchy => {
                "a Squid child cache in ue whose parent is a Squid at the edge, stock: memory caches, no content changes"
            }
            Peer::Ziproxy => {
                "Ziproxy, stock: gzip, images recompressed as JPEG at quality 30/25/25/20 by size"
            }
        }
    }
}

/// Which browser the page loader imitates besides its fetch policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Browser {
    /// The papers' browser (Mozilla 1.4, 2003): its request headers with the whole referring
    /// URL as `Referer`, no preload scanner (a
    /// script blocks the parser until it has arrived), no `<link rel=preload>` (it came
    /// later), one DNS lookup at a time, plain-http
    /// names at one address sharing connections (002 §3.2, §4.2.1) and keeping them past the
    /// answer's TTL (a name is looked up only to open a connection), pipelining in batches
    /// handed to idle or new connections (`nsHttpConnectionMgr`'s `BuildPipeline`).
    Mozilla2003,
    /// Today's: Chromium's request headers (its Accept for each kind of object, a `Referer`
    /// by `strict-origin-when-cross-origin`), a preload scanner that requests everything as it
    /// is parsed, and Chromium's two loading phases: low-priority requests (most images) wait
    /// while the head's scripts load, and so does the layout (see
    /// `webpep_loader::LoaderConfig::tight_mode`).
    Modern,
    /// Real Chromium, driven over DevTools (DESIGN §7.4): its own headers, scheduling and
    /// 6 connections per host or proxy; `policy` and `per_host` do not apply. Runs in every
    /// proxy mode (under `transparent-dns`, edge redirects its port-53 queries to the
    /// rewriting DNS proxy, since resolv.conf names no port).
    Chromium,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LabConfig {
    #[serde(default)]
    pub description: String,
    pub policy: PolicyName,
    #[serde(default)]
    pub per_host: Option<usize>,
    #[serde(default)]
    pub pipeline_depth: Option<usize>,
    /// How pipelined requests are handed to connections: true, in batches as Mozilla 1.x did
    /// (a pipeline of up to `pipeline_depth` waiting requests goes to an idle or new
    /// connection, which takes nothing more until all are answered); false, a sliding window
    /// (a connection takes a new request whenever fewer than `pipeline_depth` are
    /// outstanding: "GETs issued without waiting for the previous responses", 000 §4.1.2).
    /// Default: the browser's (batches for `mozilla-2003`, a window for `modern`).
    #[serde(default)]
    pub pipeline_batches: Option<bool>,
    #[serde(default)]
    pub proxy: ProxyMode,
    /// The edge proxy's switches (with a proxy; see [`ProxySwitches`]).
    #[serde(default = "yes")]
    pub compress: bool,
    #[serde(default = "balanced")]
    pub transcode: String,
    #[serde(default = "yes")]
    pub cache: bool,
    #[serde(default = "yes")]
    pub air_tuning: bool,
    /// With `air_tuning`: congestion control of the proxy's client sockets.
    #[serde(default = "cubic")]
    pub air_congestion: Congestion,
    #[serde(default = "yes")]
    pub keepalive_probes: bool,
    #[serde(default = "yes")]
    pub prefetch: bool,
    #[serde(default = "yes")]
    pub inline: bool,
    #[serde(default = "yes")]
    pub inline_images: bool,
    /// See [`ProxySwitches::adapt`].
    #[serde(default = "yes")]
    pub adapt: bool,
    /// See [`ProxySwitches::air_budget`].
    #[serde(default)]
    pub air_budget: bool,
    /// See [`ProxySwitches::air_budget_floor`].
    #[serde(default)]
    pub air_budget_floor: Option<u64>,
    /// See [`ProxySwitches::air_budget_gain`].
    #[serde(default)]
    pub air_budget_gain: Option<f64>,
    #[serde(default)]
    pub warm: bool,
    /// With `warm`: false empties the browser's HTTP cache before the measured revisit,
    /// keeping its DNS cache and idle connections: a repeated download with the cache off, as
    /// 002 §4.2 measured its 20 downloads of each page.
    #[serde(default = "yes")]
    pub revisit_cache: bool,
    /// With `warm`: true keeps the browser's idle connections open into the revisit (as a
    /// browser keeps them for minutes), so only those the server closed meanwhile (see
    /// `origin_keepalive_s`) are opened again. Default false: every connection is closed
    /// between the loads.
    #[serde(default)]
    pub revisit_connections: bool,
    /// The origins (replay servers) close an HTTP/1.x connection idle this long (unscaled
    /// seconds; Apache's KeepAliveTimeout is 15). Default: 300 s of wall time, never in
    /// practice.
    #[serde(default)]
    pub origin_keepalive_s: Option<f64>,
    #[serde(default)]
    pub close_after: Option<u32>,
    /// Default: `mozilla-2003`, except `modern` for h2.
    #[serde(default)]
    pub browser: Option<Browser>,
    /// The 2003 browser model lists `image/webp` in its Accept header, as every browser has
    /// since 2020, so the edge proxy may answer images with WebP. Off by default: the papers'
    /// browser (2003) did not know WebP. The modern model and real Chromium always list it.
    #[serde(default)]
    pub accept_webp: bool,
    /// A peer proxy in place of webpep's (with `proxy = "explicit"`; the webpep switches
    /// except `air_tuning` do not apply to it).
    #[serde(default)]
    pub peer: Option<Peer>,
    /// With `proxy = "dual"`: the QUIC transport's congestion controller (an ablation of
    /// webpep's link-aware one against quinn's stock ones).
    #[serde(default)]
    pub quic_congestion: QuicCongestion,
    /// With `proxy = "dual"`: header compression across the QUIC connection (the client's
    /// requests); false to measure what it is worth.
    #[serde(default = "yes")]
    pub header_table: bool,
    /// With `proxy = "dual"`: text the edge sends with no content coding of its own crosses
    /// zstd-coded (`[quic] zstd`); false to measure what it is worth.
    #[serde(default = "yes")]
    pub quic_zstd: bool,
    /// With `proxy = "dual"`: the device's client has been connected to this edge before
    /// (it holds a session ticket; the connection has since closed), so the load's first
    /// request reconnects with 0-RTT, as on a device whose client proxy keeps running.
    /// Default false: the client's first connection ever, a full handshake.
    #[serde(default)]
    pub quic_resumed: bool,
    /// With `proxy = "dual"`: `webpep client` gives a CONNECT's tunnel to the browser before
    /// the edge has connected (its `fast-connect`, on by default); false to measure what it
    /// is worth.
    #[serde(default = "yes")]
    pub fast_connect: bool,
    /// HTTPS interception with the lab's per-run CA (the one the browsers trust): with
    /// `proxy = "dual"`, `webpep client`'s `[intercept]` opens the browser's CONNECT tunnels
    /// and their requests cross the link as ordinary ones; with `proxy = "explicit"`, the
    /// edge's `[intercept]` does; either way every stage applies at the edge. Default false:
    /// tunnels carry the browser's TLS untouched.
    #[serde(default)]
    pub tls_intercept: bool,
    /// With `proxy = "dual"` and real Chromium: the browser reaches `webpep client` on its
    /// HTTPS port (`tls-listen`, a certificate of the lab's CA) and speaks HTTP/2 to it, so
    /// every request and CONNECT of the page is a stream of one connection instead of one of
    /// at most 32 connections Chromium gives an HTTP/1.1 proxy. Default false.
    #[serde(default)]
    pub client_https: bool,
}

/// The dual proxy's QUIC congestion controller.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum QuicCongestion {
    /// webpep's (a window of rate × queue-free RTT; docs/transport.md).
    #[default]
    LinkAware,
    /// quinn's Cubic.
    Cubic,
    /// quinn's BBR.
    Bbr,
}

impl QuicCongestion {
    pub fn name(self) -> &'static str {
        match self {
            QuicCongestion::LinkAware => "link-aware",
            QuicCongestion::Cubic => "cubic",
            QuicCongestion::Bbr => "bbr",
        }
    }

    /// The transport's controller.
    pub fn factory(self) -> webpep_transport::Congestion {
        use webpep_transport::Congestion;
        match self {
            QuicCongestion::LinkAware => {
                Congestion::LinkAware(webpep_transport::ControllerFactory::default())
            }
            QuicCongestion::Cubic => {
                Congestion::Quinn(Arc::new(quinn::congestion::CubicConfig::default()))
            }
            QuicCongestion::Bbr => {
                Congestion::Quinn(Arc::new(quinn::congestion::BbrConfig::default()))
            }
        }
    }
}

fn yes() -> bool {
    true
}
fn balanced() -> String {
    "balanced".into()
}
fn cubic() -> Congestion {
    Congestion::Cubic
}

impl LabConfig {
    /// The edge proxy's switches.
    pub fn switches(&self) -> ProxySwitches {
        ProxySwitches {
            compress: self.compress,
            transcode: self.transcode.clone(),
            cache: self.cache,
            air_tuning: self.air_tuning,
            air_congestion: self.air_congestion,
            keepalive_probes: self.keepalive_probes,
            prefetch: self.prefetch,
            inline: self.inline,
            inline_images: self.inline_images,
            adapt: self.adapt,
            air_budget: self.air_budget,
            air_budget_floor: self.air_budget_floor,
            air_budget_gain: self.air_budget_gain,
        }
    }

    pub fn per_host(&self) -> usize {
        self.per_host.unwrap_or(match self.policy {
            PolicyName::Http10 => 8,
            // Modern browsers open 6 connections to a proxy (the papers' optimum, 000 §4.2.1).
            _ if self.proxy != ProxyMode::None && self.policy != PolicyName::H2 => 6,
            PolicyName::Http11 | PolicyName::Pipelining => 2,
            PolicyName::H2 => 1,
        })
    }

    pub fn browser(&self) -> Browser {
        self.browser.unwrap_or(match self.policy {
            PolicyName::H2 => Browser::Modern,
            _ => Browser::Mozilla2003,
        })
    }

    pub fn pipeline_depth(&self) -> usize {
        self.pipeline_depth.unwrap_or(4)
    }

    /// Whether pipelines are handed out in batches (see the `pipeline_batches` key).
    pub fn pipeline_batches(&self) -> bool {
        self.pipeline_batches
            .unwrap_or(self.browser() == Browser::Mozilla2003)
    }

    /// One line for the report: the policy and switches as they will run.
    pub fn summary(&self) -> String {
        let chromium = self.browser() == Browser::Chromium;
        let mut s = match self.policy {
            _ if chromium => "Chromium's own policy (6 per host or proxy)".to_string(),
            PolicyName::Http10 => format!("http10, ≤{} connections", self.per_host()),
            PolicyName::Http11 => format!("http11, {} per host", self.per_host()),
            PolicyName::Pipelining => format!(
                "pipelining depth {}{}, {} per host",
                self.pipeline_depth(),
                if self.pipeline_batches() {
                    " in batches"
                } else {
                    " as a sliding window"
                },
                self.per_host()
            ),
            PolicyName::H2 => "h2 over TLS, 1 per origin".to_string(),
        };
        s += ", ";
        s += self.proxy.name();
        if self.proxy == ProxyMode::Dual {
            s += &format!(", QUIC congestion control {}", self.quic_congestion.name());
            if !self.header_table {
                s += ", no header compression";
            }
            if !self.quic_zstd {
                s += ", no zstd between the proxies";
            }
            if self.quic_resumed {
                s += ", the client resumes an earlier session (0-RTT)";
            }
            if !self.fast_connect {
                s += ", tunnels wait for the edge's answer";
            }
            if self.client_https {
                s += ", the browser speaks HTTP/2 to the client's HTTPS port";
            }
        }
        if self.tls_intercept {
            s += if self.proxy == ProxyMode::Dual {
                ", HTTPS intercepted by the client"
            } else {
                ", HTTPS intercepted by the edge"
            };
        }
        match self.peer {
            Some(p) => s += &format!(" ({})", p.summary()),
            None if self.proxy != ProxyMode::None => {
                s += &format!(" ({})", self.switches().summary())
            }
            None => {}
        }
        s += match self.browser() {
            Browser::Mozilla2003 => {
                ", Mozilla 2003 (headers, scripts block the parser, one DNS lookup at a time, connections shared by names at one address)"
            }
            Browser::Modern => ", modern browser (preload scanner)",
            Browser::Chromium => ", real Chromium (headless, fresh profile, over DevTools)",
        };
        if self.accept_webp && self.browser() == Browser::Mozilla2003 {
            s += ", accepts WebP";
        }
        if self.warm {
            s += match (self.revisit_cache, self.revisit_connections) {
                (true, false) => ", warm revisit",
                (true, true) => ", warm revisit over the kept connections",
                (false, false) => ", revisit with the DNS cache kept, HTTP cache emptied",
                (false, true) => {
                    ", revisit with the DNS cache and idle connections kept, HTTP cache emptied"
                }
            };
        }
        if let Some(t) = self.origin_keepalive_s {
            s += &format!(", origins close connections idle {t} s");
        }
        if let Some(n) = self.close_after {
            s += &format!(", server closes after {n} requests");
        }
        if !self.description.is_empty() {
            s = format!("{} ({s})", self.description);
        }
        s
    }
}

/// Parses a configuration file; errors name it.
pub fn parse(text: &str, source: &str) -> Result<BTreeMap<String, LabConfig>> {
    let map: BTreeMap<String, LabConfig> = toml::from_str(text)
        .map_err(|e| LabError::BadInput(format!("{source}: invalid configuration file: {e}")))?;
    for (name, c) in &map {
        if c.per_host == Some(0) || c.pipeline_depth == Some(0) || c.close_after == Some(0) {
            return Err(LabError::BadInput(format!(
                "{source}: [{name}]: per_host, pipeline_depth and close_after must be ≥ 1"
            )));
        }
        if (!c.revisit_cache || c.revisit_connections) && !c.warm {
            return Err(LabError::BadInput(format!(
                "{source}: [{name}]: revisit_cache and revisit_connections apply to a warm \
                 revisit: set warm = true"
            )));
        }
        if c.revisit_connections && c.browser() == Browser::Chromium {
            return Err(LabError::BadInput(format!(
                "{source}: [{name}]: revisit_connections is for the browser model: Chromium \
                 keeps or closes its connections by its own policy"
            )));
        }
        if c.origin_keepalive_s
            .is_some_and(|t| !(t > 0.0 && t.is_finite()))
        {
            return Err(LabError::BadInput(format!(
                "{source}: [{name}]: origin_keepalive_s must be a positive number of seconds"
            )));
        }
        if c.client_https && (c.proxy != ProxyMode::Dual || c.browser() != Browser::Chromium) {
            return Err(LabError::BadInput(format!(
                "{source}: [{name}]: client_https is for real Chromium through webpep client: \
                 set proxy = \"dual\" and browser = \"chromium\" (the browser model speaks \
                 HTTP/1.1 to a proxy)"
            )));
        }
        if c.peer.is_some() && c.proxy != ProxyMode::Explicit {
            return Err(LabError::BadInput(format!(
                "{source}: [{name}]: a peer proxy runs as the explicit proxy: set proxy = \"explicit\""
            )));
        }
    }
    Ok(map)
}

/// The built-in configurations, with `file`'s blocks added or replacing them.
pub fn load(file: Option<&Path>) -> Result<BTreeMap<String, LabConfig>> {
    let mut all = parse(BUILTIN, "built-in configurations")?;
    if let Some(f) = file {
        let text = std::fs::read_to_string(f)
            .map_err(|e| LabError::BadInput(format!("{}: {e}", f.display())))?;
        all.extend(parse(&text, &f.display().to_string())?);
    }
    Ok(all)
}

/// Picks `names` (comma-separated on the command line) from `all`, in order.
pub fn select(
    all: &BTreeMap<String, LabConfig>,
    names: &[String],
) -> Result<Vec<(String, LabConfig)>> {
    names
        .iter()
        .map(|n| {
            all.get(n).map(|c| (n.clone(), c.clone())).ok_or_else(|| {
                LabError::BadInput(format!(
                    "unknown configuration {n:?}; known: {}",
                    all.keys().cloned().collect::<Vec<_>>().join(", ")
                ))
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_parses_with_the_papers_defaults() {
        let all = load(None).unwrap();
        assert_eq!(all["http11"].per_host(), 2);
        assert_eq!(all["http11-6"].per_host(), 6);
        assert_eq!(all["http10"].per_host(), 8);
        assert_eq!(all["pipelining"].pipeline_depth(), 4);
        // Mozilla 1.x hands out pipelines in batches; a window is asked for by name.
        assert!(all["pipelining"].pipeline_batches());
        assert!(all["pipelining"].summary().contains("depth 4 in batches"));
        let window = &parse(
            "[w]\npolicy = \"pipelining\"\npipeline_batches = false\n\
             [m]\npolicy = \"pipelining\"\nbrowser = \"modern\"\n",
            "test",
        )
        .unwrap();
        for n in ["w", "m"] {
            assert!(!window[n].pipeline_batches(), "{n}");
            assert!(window[n].summary().contains("as a sliding window"), "{n}");
        }
        // The proxy's air sockets: cubic unless a configuration names another.
        assert_eq!(all["explicit"].switches().air_congestion, Congestion::Cubic);
        assert!(all["explicit"].summary().contains("air TCP tuning (cubic)"));
        let bbr = &parse(
            "[b]\npolicy = \"http11\"\nproxy = \"explicit\"\nair_congestion = \"bbr\"\n",
            "test",
        )
        .unwrap()["b"];
        assert_eq!(bbr.switches().air_congestion, Congestion::Bbr);
        assert!(all["http11-warm"].warm);
        assert!(all["transparent-dns-warm"].warm);
        // 002's repeated downloads: cache off, DNS and connections kept, Apache's keep-alive.
        for n in [
            "http11-repeat",
            "transparent-url-002",
            "transparent-dns-002",
        ] {
            let c = &all[n];
            assert!(c.warm && !c.revisit_cache && c.revisit_connections, "{n}");
            assert_eq!((c.per_host(), c.origin_keepalive_s), (2, Some(15.0)), "{n}");
        }
        assert!(all["transparent-url-002"]
            .summary()
            .contains("HTTP cache emptied"));
        assert_eq!(
            all["transparent-dns-warm"].proxy,
            all["transparent-dns"].proxy
        );
        assert_eq!(all["chromium-explicit"].browser(), Browser::Chromium);
        // explicit-modern: explicit's proxy and switches, today's browser model, which speaks
        // HTTP/2 to https:// origins inside its CONNECT tunnels.
        assert_eq!(all["explicit-modern"].browser(), Browser::Modern);
        assert_eq!(all["explicit-modern"].proxy, ProxyMode::Explicit);
        assert_eq!(all["explicit-modern"].policy, PolicyName::H2);
        assert_eq!(
            all["explicit-modern"].switches(),
            all["explicit"].switches()
        );
        assert!(all["chromium"].summary().contains("real Chromium"));
        // Peers run as the explicit proxy with the same browser policy as `explicit`.
        assert_eq!(all["squid"].peer, Some(Peer::Squid));
        assert_eq!(all["ziproxy"].per_host(), all["explicit"].per_host());
        assert!(all["ziproxy"].summary().contains("Ziproxy, stock"));
        // WebP only for the browser that says it decodes it.
        assert!(!all["explicit"].accept_webp);
        assert!(all["explicit-webp"].accept_webp);
        assert!(all["explicit-webp"].summary().contains("accepts WebP"));
        assert_eq!(
            all["explicit-webp"].switches(),
            all["explicit"].switches(),
            "explicit-webp differs from explicit only in the browser's Accept"
        );
    }

    #[test]
    fn bad_files_are_clear_errors() {
        let e = parse("[x]\npolicy = \"spdy\"\n", "c.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("c.toml"), "{e}");
        let e = parse("[x]\npolicy = \"http11\"\nper_host = 0\n", "c.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("[x]"), "{e}");
        for bad in [
            "revisit_cache = false",
            "revisit_connections = true",
            "warm = true\nrevisit_connections = true\nbrowser = \"chromium\"",
        ] {
            let e = parse(&format!("[x]\npolicy = \"http11\"\n{bad}\n"), "c.toml")
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("[x]") && e.contains("revisit_connections"),
                "{e}"
            );
        }
        let e = parse(
            "[x]\npolicy = \"http11\"\nproxy = \"explicit\"\nair_congestion = \"vegas\"\n",
            "c.toml",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("c.toml") && e.contains("vegas") && e.contains("bbr"),
            "{e}"
        );
        for bad in ["0", "-3", "nan"] {
            let e = parse(
                &format!("[x]\npolicy = \"http11\"\norigin_keepalive_s = {bad}\n"),
                "c.toml",
            )
            .unwrap_err()
            .to_string();
            assert!(e.contains("origin_keepalive_s"), "{e}");
        }
        // Chromium empties its cache for a revisit on request.
        let ok = "[x]\npolicy = \"http11\"\nbrowser = \"chromium\"\nwarm = true\nrevisit_cache = false\n";
        assert!(!parse(ok, "c.toml").unwrap()["x"].revisit_cache);
        let e = parse("[x]\npolicy = \"http11\"\ncolour = 1\n", "c.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("colour"), "{e}");
        let e = parse("[x]\npolicy = \"http11\"\npeer = \"squid\"\n", "c.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("[x]") && e.contains("explicit"), "{e}");
        let e = parse(
            "[x]\npolicy = \"http11\"\nproxy = \"explicit\"\npeer = \"varnish\"\n",
            "c.toml",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("varnish"), "{e}");

        let all = load(None).unwrap();
        let e = select(&all, &["nope".into()]).unwrap_err().to_string();
        assert!(e.contains("nope") && e.contains("http11"), "{e}");
    }
}
