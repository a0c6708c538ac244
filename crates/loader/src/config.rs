//! What the page loader is told: the browser policy, where the resolver and proxy are, timeouts.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::ConfigError;
use crate::media::Viewport;
use crate::request_headers::{KindHeaders, RefererPolicy};

/// How the modelled browser uses connections (DESIGN §2, paper 000 Table 5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Policy {
    /// HTTP/1.0 without keep-alive: a new connection per object, at most
    /// [`Policy::HTTP10_MAX_CONNECTIONS`] at once per host (per proxy when proxied).
    Http10,
    /// HTTP/1.1 persistent connections, one request at a time on each, at most `per_host`
    /// connections per host (per proxy when proxied). `per_host: 2` is the papers' browser,
    /// `per_host: 6` is `http11-6`.
    Http11 { per_host: usize },
    /// HTTP/1.1 persistent connections with up to `depth` requests in flight on each (responses
    /// in order), at most `per_host` connections per host.
    Pipelining { per_host: usize, depth: usize },
    /// HTTP/2 over TLS (ALPN h2): one connection per origin, every request multiplexed on it.
    /// Plain `http://` origins (unless [`LoaderConfig::upgrade_insecure`]) fall back to HTTP/1.1
    /// with [`LoaderConfig::h2_fallback_per_host`] connections.
    H2,
}

impl Policy {
    /// Mozilla 1.4's HTTP/1.0 limit (paper 000 §3): up to 8 simultaneous connections per server.
    pub const HTTP10_MAX_CONNECTIONS: usize = 8;
    /// The pipelining depth used when a name gives none (Mozilla's default of 4 requests).
    pub const DEFAULT_PIPELINE_DEPTH: usize = 4;

    /// The papers' default browser: HTTP/1.1, 2 persistent connections per host.
    pub fn http11() -> Policy {
        Policy::Http11 { per_host: 2 }
    }

    /// HTTP/1.1 pipelining over 2 connections per host (000 Table 5) with the default depth.
    pub fn pipelining() -> Policy {
        Policy::Pipelining {
            per_host: 2,
            depth: Self::DEFAULT_PIPELINE_DEPTH,
        }
    }

    /// The configuration name: `http10`, `http11`, `http11-6`, `pipelining`, `pipelining-8`,
    /// `pipelining-6x8`, `h2`. [`Policy::from_str`] reads it back.
    pub fn name(&self) -> String {
        match *self {
            Policy::Http10 => "http10".into(),
            Policy::Http11 { per_host: 2 } => "http11".into(),
            Policy::Http11 { per_host } => format!("http11-{per_host}"),
            Policy::Pipelining {
                per_host: 2,
                depth: Self::DEFAULT_PIPELINE_DEPTH,
            } => "pipelining".into(),
            Policy::Pipelining { per_host: 2, depth } => format!("pipelining-{depth}"),
            Policy::Pipelining { per_host, depth } => format!("pipelining-{per_host}x{depth}"),
            Policy::H2 => "h2".into(),
        }
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

fn small_number(s: &str, whole: &str) -> Result<usize, ConfigError> {
    match s.parse::<usize>() {
        Ok(n) if (1..=64).contains(&n) => Ok(n),
        _ => Err(ConfigError::BadPolicyParameter(whole.to_string())),
    }
}

impl FromStr for Policy {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Policy, ConfigError> {
        let t = s.trim().to_ascii_lowercase();
        match t.as_str() {
            "http10" | "http1.0" | "http-1.0" => return Ok(Policy::Http10),
            "http11" | "http1.1" => return Ok(Policy::http11()),
            "pipelining" | "pipeline" => return Ok(Policy::pipelining()),
            "h2" | "http2" => return Ok(Policy::H2),
            _ => {}
        }
        if let Some(n) = t.strip_prefix("http11-") {
            return Ok(Policy::Http11 {
                per_host: small_number(n, s)?,
            });
        }
        if let Some(rest) = t.strip_prefix("pipelining-") {
            if let Some((n, d)) = rest.split_once('x') {
                return Ok(Policy::Pipelining {
                    per_host: small_number(n, s)?,
                    depth: small_number(d, s)?,
                });
            }
            return Ok(Policy::Pipelining {
                per_host: 2,
                depth: small_number(rest, s)?,
            });
        }
        Err(ConfigError::UnknownPolicy(s.to_string()))
    }
}

/// Everything the page loader needs to know. `LoaderConfig::default()` is the papers' browser
/// (`http11`) with a resolver on 127.0.0.1:53 and generous timeouts.
#[derive(Debug, Clone)]
pub struct LoaderConfig {
    /// The browser model.
    pub policy: Policy,
    /// Where DNS queries go (UDP, TCP on truncation). The system resolver is never used.
    pub resolver: SocketAddr,
    /// Names answered without a query (like a hosts file given explicitly). Checked first.
    pub hosts: Vec<(String, IpAddr)>,
    /// An explicit HTTP proxy: absolute-URI requests for http, `CONNECT host:port` tunnels for
    /// https. No DNS lookups are made when a proxy is set (the proxy resolves). The per-host
    /// connection limit applies to the proxy, unless [`LoaderConfig::proxy_pool_per_origin`].
    pub proxy: Option<SocketAddr>,
    /// Through the proxy, pool plain-http connections as Chromium does: each connection is
    /// bound to one origin (never reused for another host), the per-host limit applies per
    /// origin, and at most this many connections go to the proxy in all, tunnels included.
    /// `None` (Mozilla 1.x): the proxy's connections carry every plain-http origin, the
    /// per-host limit applying to the proxy.
    pub proxy_pool_per_origin: Option<usize>,
    /// PEM of the CA certificate(s) trusted for https (the lab's CA). Without one, https
    /// objects fail with a TLS error.
    pub ca_pem: Option<Vec<u8>>,
    /// Fetch `http://` URLs as `https://` (port 80 becomes 443, other ports are kept), as a
    /// browser with HSTS would. Meant for the `h2` configurations of the lab.
    pub upgrade_insecure: bool,
    /// Connections per host for plain-http origins under [`Policy::H2`] (today's browsers: 6).
    pub h2_fallback_per_host: usize,
    /// TCP connect plus proxy tunnel, plus the TLS handshake unless
    /// `tls_handshake_timeout` gives it a limit of its own.
    pub connect_timeout: Duration,
    /// The TLS handshake's own limit from its start (today's Chromium: 30 s); `None`: it
    /// shares `connect_timeout`.
    pub tls_handshake_timeout: Option<Duration>,
    /// Longest wait for response progress (first byte, or the next bytes) on a request.
    pub response_timeout: Duration,
    /// The whole page load; objects unfinished then are recorded as errors.
    pub page_timeout: Duration,
    /// How many times faster than the real link the load runs (the lab's time scale k):
    /// durations in recorded errors are multiplied by it, so they read in the same unscaled
    /// link time as the rest of the record. 1 outside the lab.
    pub time_scale: f64,
    /// Wait for one DNS answer before retrying.
    pub dns_timeout: Duration,
    /// DNS queries sent per lookup before giving up (at least 1).
    pub dns_attempts: u32,
    /// Answers are cached for max(TTL, this). Zero honours TTLs exactly.
    pub dns_min_ttl: Duration,
    /// Emulate a browser without a preload scanner (as in 2003): a `<script src>` stops the
    /// HTML parser until the script has arrived, so references after it are found later.
    pub blocking_scripts: bool,
    /// Follow `<link rel=preload|modulepreload>` (today's browsers). Off: such links are
    /// ignored, as by browsers from before they existed (Mozilla 1.x).
    pub link_preload: bool,
    /// Request a stylesheet's images and fonts only once the document that uses it is laid
    /// out, that is once its parser has reached the body (after any script blocking it), as
    /// browsers do: a rule's `url()` is fetched for the elements the rule matches. Off: as
    /// soon as the stylesheet has arrived. (A `<style>` in the head is part of the page: its
    /// parser hands its images out where the body starts, either way.)
    pub css_images_at_layout: bool,
    /// Request a stylesheet's images and fonts only for what the page uses, as browsers do:
    /// a rule's images once some element matches the rule (user-driven pseudo-classes such as
    /// `:hover` never do at load), a font face once a matched rule sets text in its family,
    /// weight and style (its first source in a format browsers read, if it covers Latin
    /// text), nothing under media that do not apply on [`LoaderConfig::viewport`]. Off: every
    /// `url()` of every stylesheet.
    pub match_style_rules: bool,
    /// The screen media queries are evaluated for (today's laptop: 1366 × 768 at 1 dppx).
    pub viewport: Viewport,
    /// Chromium's two loading phases ("tight mode"). Until a document's parser has passed the
    /// scripts in its head (each waits for the stylesheets before it) and reached the body,
    /// the document is not laid out, and its low-priority requests wait unless fewer than two
    /// of its requests are in flight. Low priority: images other than the first five not
    /// declared small (width × height ≤ 10,000 px², which get medium priority), `async`,
    /// `defer` and module scripts, and what has no kind of its own (icons, embeds).
    /// Stylesheets, fonts, parser-blocking scripts and frames go at once. Off: everything
    /// found goes at once and a document is laid out when its scanner reaches the body. Not
    /// used with `blocking_scripts`, whose parser already waits.
    pub tight_mode: bool,
    /// One DNS lookup at a time (Mozilla 1.x on Unix resolved names on a single thread).
    pub serial_dns: bool,
    /// Plain-http names that resolve to the same address share one set of persistent
    /// connections (and its per-host limit), as 002 §3.2 and §4.2.1 measured their Mozilla
    /// doing under DNS rewriting: every name answered with the proxy's address, about two
    /// connections per page. Off: connections are per name (today's browsers for HTTP/1.1).
    pub pool_by_address: bool,
    /// Pipelining as Mozilla 1.x did it (`nsHttpConnectionMgr`): requests go only to an idle
    /// connection or a new one (up to the per-host limit), never onto a busy one; a pipeline
    /// of up to `depth` waiting requests is built when a connection is handed out, and the
    /// connection takes nothing more until all of them are answered; a new connection carries
    /// one request until its first response shows an HTTP/1.1 keep-alive server. Off: each
    /// connection is a sliding window of `depth` requests, filled before a new one is opened.
    pub pipeline_batches: bool,
    /// Extra headers sent with every request (after Host and User-Agent; an `Accept` here
    /// replaces the default `*/*`), e.g. to send what a period browser sent.
    pub request_headers: Vec<(String, String)>,
    /// Headers sent only with requests for some kinds of object (a stylesheet's Accept, a
    /// document's Upgrade-Insecure-Requests); one named like a common header replaces it.
    pub kind_headers: KindHeaders,
    /// Which `Referer` requests carry (default: today's browsers').
    pub referer: RefererPolicy,
    /// User-Agent header.
    pub user_agent: String,
    /// Accept-Encoding header; none is sent when `None` (bodies are not decoded either way).
    pub accept_encoding: Option<String>,
    /// [`crate::Loader`] keeps idle persistent connections open between page loads.
    pub keep_connections: bool,
    /// Redirects followed for the main page (embedded objects' redirects are recorded only).
    pub max_redirects: usize,
    /// Objects fetched per page at most (guards against pathological pages).
    pub max_objects: usize,
    /// Largest response body accepted.
    pub max_body_bytes: u64,
    /// Largest response head accepted.
    pub max_header_bytes: usize,
    /// Times a request is re-sent after its connection closed before any response byte.
    pub max_retries: u32,
    /// Nesting of iframes and of CSS @import that is still followed.
    pub max_nesting: usize,
}

impl Default for LoaderConfig {
    fn default() -> Self {
        LoaderConfig {
            policy: Policy::http11(),
            resolver: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 53),
            hosts: Vec::new(),
            proxy: None,
            proxy_pool_per_origin: None,
            ca_pem: None,
            upgrade_insecure: false,
            h2_fallback_per_host: 6,
            connect_timeout: Duration::from_secs(30),
            tls_handshake_timeout: None,
            response_timeout: Duration::from_secs(60),
            page_timeout: Duration::from_secs(600),
            time_scale: 1.0,
            dns_timeout: Duration::from_secs(5),
            dns_attempts: 2,
            dns_min_ttl: Duration::ZERO,
            request_headers: Vec::new(),
            kind_headers: KindHeaders::default(),
            referer: RefererPolicy::default(),
            blocking_scripts: false,
            link_preload: true,
            css_images_at_layout: true,
            match_style_rules: true,
            viewport: Viewport::default(),
            tight_mode: false,
            serial_dns: false,
            pool_by_address: false,
            pipeline_batches: false,
            user_agent: concat!("webpep-loader/", env!("CARGO_PKG_VERSION")).to_string(),
            accept_encoding: None,
            keep_connections: false,
            max_redirects: 10,
            max_objects: 2000,
            max_body_bytes: 64 << 20,
            max_header_bytes: 64 << 10,
            max_retries: 3,
            max_nesting: 8,
        }
    }
}

impl LoaderConfig {
    /// The default configuration with this policy and resolver.
    pub fn new(policy: Policy, resolver: SocketAddr) -> LoaderConfig {
        LoaderConfig {
            policy,
            resolver,
            ..LoaderConfig::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_names_round_trip() {
        for p in [
            Policy::Http10,
            Policy::http11(),
            Policy::Http11 { per_host: 6 },
            Policy::pipelining(),
            Policy::Pipelining {
                per_host: 2,
                depth: 8,
            },
            Policy::Pipelining {
                per_host: 6,
                depth: 3,
            },
            Policy::H2,
        ] {
            assert_eq!(p.name().parse::<Policy>(), Ok(p));
        }
        assert_eq!(
            "http11-6".parse::<Policy>(),
            Ok(Policy::Http11 { per_host: 6 })
        );
        assert!("http11-0".parse::<Policy>().is_err());
        assert!("http11-x".parse::<Policy>().is_err());
        assert!("spdy".parse::<Policy>().is_err());
    }
}
