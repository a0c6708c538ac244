//! The proxy's configuration: a TOML file (kebab-case keys, unknown keys refused) whose
//! defaults are what an operator would expect of a cautious edge proxy.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

/// A configuration that cannot be used; the message names the file and the key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The TOML did not parse or a key is unknown or has the wrong type.
    #[error("{source_name}: {message}")]
    Parse {
        /// Where the text came from (usually a file name).
        source_name: String,
        /// The parser's message (names the key and the line).
        message: String,
    },
    /// A key parsed but its value cannot be used.
    #[error("{source_name}: key `{key}`: {message}")]
    Invalid {
        /// Where the text came from.
        source_name: String,
        /// The dotted key, e.g. `compress.gzip-level`.
        key: String,
        /// What is wrong with it.
        message: String,
    },
}

/// A duration written as seconds (`5`, `0.5`) or with a unit (`"500ms"`, `"4s"`, `"2m"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Secs(pub Duration);

impl Secs {
    /// A whole number of seconds.
    pub const fn from_secs(s: u64) -> Self {
        Secs(Duration::from_secs(s))
    }
}

impl Serialize for Secs {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let ms = self.0.as_millis();
        if (ms / 1000) * 1000 == ms {
            s.serialize_str(&format!("{}s", ms / 1000))
        } else {
            s.serialize_str(&format!("{ms}ms"))
        }
    }
}

impl<'de> Deserialize<'de> for Secs {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Int(u64),
            Float(f64),
            Text(String),
        }
        let secs = match Raw::deserialize(d)? {
            Raw::Int(n) => n as f64,
            Raw::Float(f) => f,
            Raw::Text(t) => parse_duration_text(&t).map_err(serde::de::Error::custom)?,
        };
        if !secs.is_finite() || !(0.0..=1e9).contains(&secs) {
            return Err(serde::de::Error::custom("duration out of range"));
        }
        Ok(Secs(Duration::from_secs_f64(secs)))
    }
}

/// Parses `"500ms"`, `"4s"`, `"2m"`, `"1h"` or a bare number of seconds.
pub fn parse_duration_text(t: &str) -> Result<f64, String> {
    let t = t.trim();
    let (num, mult) = if let Some(n) = t.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60.0)
    } else if let Some(n) = t.strip_suffix('h') {
        (n, 3600.0)
    } else {
        (t, 1.0)
    };
    num.trim()
        .parse::<f64>()
        .map(|v| v * mult)
        .map_err(|_| format!("not a duration: {t:?} (use e.g. 5, \"500ms\", \"4s\", \"2m\")"))
}

/// The whole configuration of `webpep server`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Addresses the CLI binds for proxy traffic (the library takes pre-bound listeners).
    pub listen: Vec<SocketAddr>,
    /// Address the CLI binds for `/metrics` (none by default).
    pub admin_listen: Option<SocketAddr>,
    /// Who may use the proxy and where it may connect.
    pub acl: AclConfig,
    /// How origins are reached.
    pub origin: OriginConfig,
    /// The shared HTTP cache.
    pub cache: CacheSection,
    /// Lossless compression towards the browser.
    pub compress: CompressSection,
    /// Lossy image transcoding.
    pub transcode: TranscodeSection,
    /// The URL-rewriting mode of paper 002.
    pub url_rewrite: UrlRewriteConfig,
    /// Fetching a page's objects before the browser asks (needs the cache).
    pub prefetch: PrefetchConfig,
    /// Small stylesheets and scripts copied into the pages that use them.
    pub inline: InlineConfig,
    /// Air-side TCP tuning of accepted client sockets (003 §6).
    pub air: AirConfig,
    /// Protocol limits.
    pub limits: LimitsConfig,
    /// Proxy authentication (off unless a users file is given).
    pub auth: AuthConfig,
    /// The QUIC front end for enrolled client proxies (off unless `listen` is set).
    pub quic: QuicConfig,
    /// Opt-in TLS interception of explicit CONNECTs with the edge's own CA (off by default).
    pub intercept: InterceptConfig,
    /// `[stages.NAME]`: the keys of stages other than the built-ins above (checked against
    /// each stage's declared keys when the stages are built, [`crate::stage`]).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub stages: BTreeMap<String, toml::Table>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: vec![SocketAddr::from(([0, 0, 0, 0], 3128))],
            admin_listen: None,
            acl: AclConfig::default(),
            origin: OriginConfig::default(),
            cache: CacheSection::default(),
            compress: CompressSection::default(),
            transcode: TranscodeSection::default(),
            url_rewrite: UrlRewriteConfig::default(),
            prefetch: PrefetchConfig::default(),
            inline: InlineConfig::default(),
            air: AirConfig::default(),
            limits: LimitsConfig::default(),
            auth: AuthConfig::default(),
            quic: QuicConfig::default(),
            intercept: InterceptConfig::default(),
            stages: BTreeMap::new(),
        }
    }
}

/// `[acl]`: client and destination access control (the proxy must not be an open proxy).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct AclConfig {
    /// Client networks allowed to use the proxy (default: loopback only).
    pub allow_clients: Vec<IpNet>,
    /// Ports CONNECT may reach (default: 443).
    pub connect_ports: Vec<u16>,
    /// Private/loopback networks that are nevertheless allowed as destinations.
    pub allow_destinations: Vec<IpNet>,
    /// Relay connections that open with a TLS ClientHello to the host it names (off: they
    /// get an `access_denied` alert).
    pub tls_relay: bool,
}

impl Default for AclConfig {
    fn default() -> Self {
        AclConfig {
            allow_clients: webpep_dns::loopback_only(),
            connect_ports: vec![443],
            allow_destinations: Vec::new(),
            tls_relay: true,
        }
    }
}

/// What `[auth]` does to requests that cannot carry proxy credentials.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "kebab-case")]
pub enum TransparentAuth {
    /// Transparent, intercepted and URL-rewritten requests (and relayed TLS) are allowed on
    /// the strength of `acl.allow-clients` alone. An operator's explicit choice.
    Network,
    /// They are refused (403; relayed TLS: an `access_denied` alert) while authentication is
    /// on. The default, so that turning authentication on means every client authenticates.
    #[default]
    Refuse,
}

/// `[auth]`: HTTP proxy authentication (RFC 9110 §11, Basic scheme of RFC 7617) for explicit
/// and CONNECT requests. Off (today's behaviour: clients are checked by network only) unless
/// `users-file` is set.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct AuthConfig {
    /// Users, one `name:HASH` a line (HASH: a `$pbkdf2-sha256$…` PHC string, see
    /// [`crate::auth::hash_password`]); read once at start. None: no authentication.
    pub users_file: Option<PathBuf>,
    /// The realm named in `Proxy-Authenticate` (browsers show it in the login prompt).
    pub realm: String,
    /// Transparent, intercepted and URL-rewritten requests: `refuse` (the default) or
    /// `network`.
    pub transparent: TransparentAuth,
    /// Failed logins in a row from one client address (IPv6: its /64) before its further
    /// logins wait (429); 0: no such throttle.
    pub max_failures: u32,
    /// The first wait; each further failure doubles it.
    pub failure_backoff: Secs,
    /// The longest wait.
    pub max_failure_backoff: Secs,
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            users_file: None,
            realm: "webpep".to_string(),
            transparent: TransparentAuth::Refuse,
            max_failures: 5,
            failure_backoff: Secs::from_secs(1),
            max_failure_backoff: Secs::from_secs(60),
        }
    }
}

/// `[origin]`: the wired side.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct OriginConfig {
    /// DNS server for origin names (default: the first nameserver of /etc/resolv.conf).
    pub dns_upstream: Option<SocketAddr>,
    /// Fixed addresses for names, consulted before DNS (like /etc/hosts).
    pub hosts: BTreeMap<String, IpAddr>,
    /// Time allowed for resolving and connecting to an origin.
    pub connect_timeout: Secs,
    /// Time allowed for an origin to start answering after the request was sent.
    pub response_timeout: Secs,
    /// Speak h2c (HTTP/2 with prior knowledge) to origins instead of HTTP/1.1.
    pub http2: bool,
    /// Idle pooled connections kept per origin.
    pub max_idle_per_host: usize,
    /// The roots `https://` origins' certificates are verified against.
    pub tls_roots: TlsRoots,
}

/// `[origin] tls-roots`: what the edge trusts when it speaks TLS to an origin.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum TlsRoots {
    /// `"system"`: the operating system's store; when that is empty or unreadable, the
    /// bundled roots (with a warning).
    #[default]
    System,
    /// `"bundled"`: the Mozilla roots built into webpep (`webpki-roots`).
    Bundled,
    /// `["ca.pem", ...]`: exactly the certificates in these PEM files (a lab's or a
    /// company's CA).
    Files(Vec<PathBuf>),
}

impl TlsRoots {
    /// From `--tls-roots` values: one `system` or `bundled`, or PEM files.
    pub fn from_flags(values: &[String]) -> Result<TlsRoots, String> {
        match values {
            [one] if one == "system" => Ok(TlsRoots::System),
            [one] if one == "bundled" => Ok(TlsRoots::Bundled),
            files if files.iter().any(|f| f == "system" || f == "bundled") => Err(
                "--tls-roots: \"system\" or \"bundled\" stand alone, not beside PEM files".into(),
            ),
            files => Ok(TlsRoots::Files(files.iter().map(PathBuf::from).collect())),
        }
    }
}

impl Serialize for TlsRoots {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            TlsRoots::System => s.serialize_str("system"),
            TlsRoots::Bundled => s.serialize_str("bundled"),
            TlsRoots::Files(f) => f.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for TlsRoots {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Name(String),
            Files(Vec<PathBuf>),
        }
        let expected = "\"system\", \"bundled\" or a list of PEM files";
        match Raw::deserialize(d)
            .map_err(|_| serde::de::Error::custom(format!("expected {expected}")))?
        {
            Raw::Name(n) if n == "system" => Ok(TlsRoots::System),
            Raw::Name(n) if n == "bundled" => Ok(TlsRoots::Bundled),
            Raw::Name(n) => Err(serde::de::Error::custom(format!(
                "{n:?}: expected {expected} (a single file is written [\"{n}\"])"
            ))),
            Raw::Files(f) if f.is_empty() => Err(serde::de::Error::custom(format!(
                "an empty list trusts nothing: expected {expected}"
            ))),
            Raw::Files(f) => Ok(TlsRoots::Files(f)),
        }
    }
}

impl Default for OriginConfig {
    fn default() -> Self {
        OriginConfig {
            dns_upstream: None,
            hosts: BTreeMap::new(),
            connect_timeout: Secs::from_secs(5),
            response_timeout: Secs::from_secs(30),
            http2: false,
            max_idle_per_host: 32,
            tls_roots: TlsRoots::System,
        }
    }
}

/// `[cache]`: the shared HTTP cache (RFC 9111 subset).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct CacheSection {
    /// Use the cache at all.
    pub enabled: bool,
    /// Directory of the disk store (default: a `webpep-cache` directory in the temp dir).
    pub dir: Option<PathBuf>,
    /// Bytes on disk.
    pub max_bytes: u64,
    /// Bytes of hot bodies kept in memory.
    pub memory_bytes: u64,
}

impl Default for CacheSection {
    fn default() -> Self {
        CacheSection {
            enabled: true,
            dir: None,
            max_bytes: 1 << 30,
            memory_bytes: 64 << 20,
        }
    }
}

/// `[compress]`: `enabled` plus the keys of `webpep_optimize::compress::CompressConfig`
/// (codings, brotli-quality, gzip-level, zstd-level, min-size), checked when loaded.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", default)]
pub struct CompressSection {
    /// Compress responses by the client's Accept-Encoding.
    pub enabled: bool,
    /// The optimize crate's keys, as written.
    #[serde(flatten)]
    pub options: toml::Table,
}

impl Default for CompressSection {
    fn default() -> Self {
        CompressSection {
            enabled: true,
            options: toml::Table::new(),
        }
    }
}

/// `[transcode]`: `enabled` plus the keys of `webpep_optimize::transcode::TranscodeConfig`
/// (preset, keep-animations, max-pixels, max-input-bytes, min-ssim), checked when loaded.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", default)]
pub struct TranscodeSection {
    /// Transcode images.
    pub enabled: bool,
    /// The optimize crate's keys, as written.
    #[serde(flatten)]
    pub options: toml::Table,
}

impl Default for TranscodeSection {
    fn default() -> Self {
        TranscodeSection {
            enabled: true,
            options: toml::Table::new(),
        }
    }
}

/// `[url-rewrite]`: serving origins at `http://<proxy-authority>/<host>/<path>` (002 §3.1).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Default)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct UrlRewriteConfig {
    /// Serve and rewrite in URL mode.
    pub enabled: bool,
    /// The `host[:port]` browsers use to reach the proxy; also the Host that means "for me".
    pub proxy_authority: Option<String>,
}

/// `[prefetch]`: when the proxy passes a page or stylesheet to a client, it fetches the
/// objects the browser will ask for next into the cache, transformed for that client, while
/// the page crosses the air (000 §4.2.2). Works only with `[cache] enabled`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct PrefetchConfig {
    /// Prefetch the objects of pages and stylesheets served to clients.
    pub enabled: bool,
    /// Objects prefetched for a page a client asked for, its stylesheets', imports' and
    /// frames' objects included, in document order; the rest are not.
    pub max_per_page: usize,
    /// Prefetches fetching at once, for all clients together.
    pub concurrency: usize,
    /// Prefetches queued or running at once, for all clients together; past it, a page's
    /// objects are not prefetched.
    pub max_queued: usize,
}

impl Default for PrefetchConfig {
    fn default() -> Self {
        PrefetchConfig {
            enabled: true,
            max_per_page: 96,
            concurrency: 8,
            max_queued: 512,
        }
    }
}

/// `[inline]`: the text of small external stylesheets and scripts is copied into the HTML
/// pages that reference them, and tiny images go into their `<img src>` as `data:` URIs, so a
/// browser does not spend a round trip over the air on each
/// (`webpep_optimize::rewrite::inline` lists what qualifies). The page waits for them at most
/// `timeout`; what is not there by then stays external.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct InlineConfig {
    /// Inline small stylesheets and scripts into pages served to clients.
    pub enabled: bool,
    /// The largest stylesheet or script inlined, in bytes of its text (uncompressed).
    pub max_bytes: usize,
    /// Bytes inlined into one page at most, its stylesheets, scripts and `data:` URIs
    /// together.
    pub max_total: usize,
    /// Stylesheets and scripts a page is scanned for, in document order; the rest stay
    /// external.
    pub max_count: usize,
    /// Also put tiny images into the page as `data:` URIs (for browsers that show them: not
    /// Internet Explorer before 8).
    pub images: bool,
    /// The largest image inlined, in bytes as the client would get it (after transcoding),
    /// before base64 adds a third.
    pub image_max_bytes: usize,
    /// Images a page is scanned for, in document order; the rest stay external.
    pub image_max_count: usize,
    /// A page's candidates fetched at once (the rest wait for a slot, within `timeout`).
    pub concurrency: usize,
    /// How long a page waits for its candidates to be fetched.
    pub timeout: Secs,
}

impl Default for InlineConfig {
    fn default() -> Self {
        InlineConfig {
            enabled: true,
            // PageSpeed's default is 2 KB for broadband; over GPRS one round trip (~2.5 s)
            // costs what ~11 KB of transfer does, so twice that is still cautious.
            max_bytes: 4096,
            max_total: 32768,
            max_count: 8,
            images: true,
            // An image that fits in one TCP segment gains nothing from compression or
            // transcoding; its request and round trip are what it costs (000 §4.1.1).
            image_max_bytes: 1024,
            image_max_count: 64,
            // Like a browser's 6 per host, over the two or three hosts a page's small
            // objects come from.
            concurrency: 16,
            timeout: Secs(Duration::from_secs(1)),
        }
    }
}

/// Congestion control for air-side sockets.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Congestion {
    /// BBR (rate-based; no collapse on radio losses).
    Bbr,
    /// CUBIC (the Linux default).
    Cubic,
    /// Reno.
    Reno,
}

impl Congestion {
    /// The name the kernel knows it by.
    pub fn name(self) -> &'static str {
        match self {
            Congestion::Bbr => "bbr",
            Congestion::Cubic => "cubic",
            Congestion::Reno => "reno",
        }
    }
}

/// `[air]`: TCP tuning of accepted client sockets (003 §6).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct AirConfig {
    /// TCP_CONGESTION for client sockets (unset: the system default).
    pub congestion: Option<Congestion>,
    /// TCP_NOTSENT_LOWAT in bytes: keep little unsent data in the kernel so a new response is
    /// not stuck behind a large one. Unset or 0: the system default.
    pub notsent_lowat: Option<u32>,
    /// Send keep-alive probes to active clients so the radio channel is not released.
    pub keepalive_probes: bool,
    /// Probe interval (under the 6 s GPRS radio release of 003 Table 3).
    pub probe_interval: Secs,
    /// Stop probing after this long without requests (an idle phone is left alone).
    pub probe_stop: Secs,
    /// The initial retransmission timeout of the listening ports' connections (SYN-ACK and
    /// first data before an RTT sample), set through a BPF `sock_ops` program; unset: the
    /// kernel's 1 s, which over GPRS (1–3 s to a first packet) sends SYN-ACKs twice. 003 §6.1
    /// tuned 7 s.
    pub initial_rto: Option<Secs>,
    /// Scale with each client's measured link (rate × RTT from `TCP_INFO`): the inline sizes
    /// and wait, and whether a response is held for a transform (issue 33; `adapt.rs`).
    /// Off: the configured values for every client, every transform held for.
    pub adapt: bool,
    /// The measured links run this many times faster than the links they stand for (the
    /// lab's time scale k: rates ×k, delays ÷k): a measured rate is divided by it and its
    /// RTTs multiplied, so that the decisions compare a transform's cost with what its bytes
    /// take on the real link. 1 everywhere but in the lab.
    pub link_time_scale: f64,
    /// Hold what is written to each client to a budget over all its connections: bytes
    /// unacknowledged at most `budget-gain` × its measured delivery rate × its least RTT,
    /// and at least `budget-floor` (issue 33; `air_budget.rs`). A browser's dozens of
    /// connections, each growing its own window, otherwise fill a slow link's queue, and a
    /// fresh connection's handshake or small response is dropped there and waits out long
    /// timers. Clients under 5 ms away are never held. Off by default: over gprs it made one
    /// large page 6–14 % slower (docs/results.md), where another page and cdma-1x gained.
    pub budget: bool,
    /// The budget as a multiple of rate × least RTT (at least 1).
    pub budget_gain: f64,
    /// The least budget in bytes (a new client's; a slow link's, where rate × RTT is a few
    /// packets).
    pub budget_floor: u64,
}

impl AirConfig {
    /// The per-client budget's parameters, or `None` when it is off.
    pub fn budget_config(&self) -> Option<crate::air_budget::BudgetConfig> {
        self.budget.then(|| crate::air_budget::BudgetConfig {
            gain: self.budget_gain,
            floor: self.budget_floor,
            ..Default::default()
        })
    }
}

impl Default for AirConfig {
    fn default() -> Self {
        AirConfig {
            congestion: None,
            notsent_lowat: None,
            keepalive_probes: false,
            probe_interval: Secs::from_secs(4),
            probe_stop: Secs::from_secs(20),
            initial_rto: None,
            adapt: true,
            link_time_scale: 1.0,
            budget: false,
            budget_gain: crate::air_budget::BudgetConfig::default().gain,
            budget_floor: crate::air_budget::BudgetConfig::default().floor,
        }
    }
}

/// `[quic]`: the front end for `webpep client` (the dual proxy): enrolled client proxies
/// send their browsers' requests over one QUIC connection each (docs/transport.md).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct QuicConfig {
    /// Text responses with no content coding of their own cross to the client proxy
    /// zstd-coded (docs/protocol.md "Bodies"); the client decodes them for the browser.
    pub zstd: bool,
    /// UDP address to accept client proxies on; unset: no QUIC front end.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen: Option<SocketAddr>,
    /// The edge's transport state (its CA, server certificate, enrolled and revoked clients),
    /// as `webpep server enroll --state-dir`; unset: /var/lib/webpep/edge as root, else
    /// ~/.local/state/webpep/edge.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state_dir: Option<std::path::PathBuf>,
}

impl Default for QuicConfig {
    fn default() -> Self {
        QuicConfig {
            zstd: true,
            listen: None,
            state_dir: None,
        }
    }
}

/// `[intercept]`: which CONNECTs on the explicit port the edge opens itself, ending the
/// browser's TLS with a certificate its own CA mints, so that the requests inside get every
/// stage (docs/server.md, "HTTPS interception"). Off unless an operator turns it on, and only
/// for browsers that trust the edge's CA; the edge has no default CA directory.
pub use webpep_intercept::InterceptConfig;

/// `[limits]`: protocol limits.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// Largest request header block (larger → 431).
    pub max_header_bytes: usize,
    /// Largest request body accepted (larger → 413).
    pub max_request_body: usize,
    /// Largest response body buffered for transformation; larger ones stream through untouched.
    pub max_body_transform: usize,
    /// Requests of one connection processed concurrently (pipelining).
    pub max_pipeline: usize,
    /// Close client connections idle this long.
    pub client_idle_timeout: Secs,
    /// Time a request head may take from its first byte to its blank line (longer → 408).
    pub header_timeout: Secs,
    /// Slowest average rate, bytes per second, at which a request body may arrive once
    /// `header-timeout` has passed since it began (slower → 408). 0: no minimum.
    pub body_min_rate: u64,
    /// Time the proxy waits for a whole response body before it sends what it has and streams
    /// the rest untransformed (a slow or endless response is never held back for long).
    pub buffer_timeout: Secs,
    /// Bytes of request and response bodies held in memory at once, over all clients; a
    /// request body that does not fit → 503, a response that does not fit streams through.
    pub max_buffered_bytes: u64,
    /// The same for one client address (IPv6: one /64).
    pub max_client_buffered_bytes: u64,
    /// Time in-flight requests get to finish at shutdown.
    pub shutdown_grace: Secs,
    /// Concurrent connections of one client address (IPv6: one /64); more → 503 and close.
    pub max_client_connections: usize,
    /// Concurrent client connections in total; more → 503 and close.
    pub max_connections: usize,
    /// Requests per second of one client address over all its connections (token bucket);
    /// more → 429 with Retry-After. 0: unlimited.
    pub client_rate: f64,
    /// Requests one client may make at once before `client-rate` applies (bucket size).
    pub client_burst: u32,
    /// Transforms (image transcoding, compression) run at once; more wait their turn. 0: one
    /// per available core. Bounds their memory: about 40 bytes per pixel each.
    pub transform_workers: usize,
    /// Memory transforms may reserve at once, in bytes (a transcode about 40 bytes per
    /// declared pixel); others wait their turn, and one needing more than this runs alone.
    /// 0: bounded by `transform-workers` alone.
    pub transform_memory: u64,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            max_header_bytes: 64 * 1024,
            max_request_body: 16 << 20,
            max_body_transform: 8 << 20,
            max_pipeline: 8,
            client_idle_timeout: Secs::from_secs(120),
            // A head is a few hundred bytes: seconds even up a GPRS link after an outage.
            header_timeout: Secs::from_secs(20),
            // Well under a GPRS uplink's ~1.5 KB/s, far above a trickle.
            body_min_rate: 256,
            buffer_timeout: Secs::from_secs(2),
            max_buffered_bytes: 256 << 20,
            max_client_buffered_bytes: 64 << 20,
            shutdown_grace: Secs::from_secs(5),
            // A browser opens at most a few dozen connections; 64 leaves room for a few
            // devices behind one NAT address.
            max_client_connections: 64,
            max_connections: 10_000,
            client_rate: 0.0,
            client_burst: 100,
            transform_workers: 0,
            transform_memory: 1 << 30,
        }
    }
}

impl ServerConfig {
    /// Parses and checks a TOML configuration; `source` (a file name) is named in errors.
    pub fn from_toml(text: &str, source: &str) -> Result<Self, ConfigError> {
        let cfg: ServerConfig = toml::from_str(text).map_err(|e| ConfigError::Parse {
            source_name: source.to_string(),
            message: e.to_string().trim_end().to_string(),
        })?;
        cfg.validate(source)?;
        Ok(cfg)
    }

    /// Checks values that parse but cannot work, and the optimize crate's keys.
    pub fn validate(&self, source: &str) -> Result<(), ConfigError> {
        let invalid = |key: &str, message: String| ConfigError::Invalid {
            source_name: source.to_string(),
            key: key.to_string(),
            message,
        };
        if !(self.air.link_time_scale.is_finite() && self.air.link_time_scale > 0.0) {
            return Err(invalid(
                "air.link-time-scale",
                "must be a positive number".into(),
            ));
        }
        if self.limits.header_timeout.0.is_zero() {
            return Err(invalid(
                "limits.header-timeout",
                "must be more than 0".into(),
            ));
        }
        if self.limits.buffer_timeout.0.is_zero() {
            return Err(invalid(
                "limits.buffer-timeout",
                "must be more than 0".into(),
            ));
        }
        if self.limits.max_client_buffered_bytes < self.limits.max_request_body as u64 {
            return Err(invalid(
                "limits.max-client-buffered-bytes",
                format!(
                    "must be at least max-request-body ({}), or no request body of that size could be accepted",
                    self.limits.max_request_body
                ),
            ));
        }
        if self.limits.max_buffered_bytes < self.limits.max_client_buffered_bytes {
            return Err(invalid(
                "limits.max-buffered-bytes",
                "must be at least max-client-buffered-bytes".into(),
            ));
        }
        if self.limits.max_pipeline == 0 {
            return Err(invalid("limits.max-pipeline", "must be at least 1".into()));
        }
        if self.limits.max_header_bytes < 256 {
            return Err(invalid(
                "limits.max-header-bytes",
                "must be at least 256".into(),
            ));
        }
        if self.limits.max_client_connections == 0 {
            return Err(invalid(
                "limits.max-client-connections",
                "must be at least 1".into(),
            ));
        }
        if self.limits.max_connections == 0 {
            return Err(invalid(
                "limits.max-connections",
                "must be at least 1".into(),
            ));
        }
        if !self.limits.client_rate.is_finite() || self.limits.client_rate < 0.0 {
            return Err(invalid(
                "limits.client-rate",
                "must be a number of requests per second, 0 or more (0: unlimited)".into(),
            ));
        }
        if self.limits.client_burst == 0 {
            return Err(invalid("limits.client-burst", "must be at least 1".into()));
        }
        if let Some(t) = &self.air.initial_rto {
            if t.0.is_zero() || t.0 > crate::initial_rto::RTO_MAX {
                return Err(invalid(
                    "air.initial-rto",
                    "must be more than 0 and at most 120s (the kernel's largest RTO)".into(),
                ));
            }
        }
        if !(self.air.budget_gain.is_finite() && self.air.budget_gain >= 1.0) {
            return Err(invalid(
                "air.budget-gain",
                "must be a number of at least 1 (the link's rate × RTT)".into(),
            ));
        }
        if self.air.budget_floor < 4096 {
            return Err(invalid(
                "air.budget-floor",
                "must be at least 4096 bytes (a few packets)".into(),
            ));
        }
        if self.air.probe_interval.0 < Duration::from_secs(1) {
            return Err(invalid("air.probe-interval", "must be at least 1s".into()));
        }
        if self.url_rewrite.enabled && self.url_rewrite.proxy_authority.is_none() {
            return Err(invalid(
                "url-rewrite.proxy-authority",
                "required when url-rewrite is enabled".into(),
            ));
        }
        if let Some(a) = &self.url_rewrite.proxy_authority {
            if a.parse::<http::uri::Authority>().is_err() || a.contains('@') {
                return Err(invalid(
                    "url-rewrite.proxy-authority",
                    format!("not a host[:port]: {a:?}"),
                ));
            }
        }
        if self
            .auth
            .users_file
            .as_ref()
            .is_some_and(|p| p.as_os_str().is_empty())
        {
            return Err(invalid("auth.users-file", "must not be empty".into()));
        }
        check_realm(&self.auth.realm).map_err(|m| invalid("auth.realm", m))?;
        let (backoff, max_backoff) = (self.auth.failure_backoff.0, self.auth.max_failure_backoff.0);
        if backoff.is_zero() || backoff > MAX_FAILURE_BACKOFF {
            return Err(invalid(
                "auth.failure-backoff",
                "must be more than 0 and at most 24h".into(),
            ));
        }
        if max_backoff < backoff || max_backoff > MAX_FAILURE_BACKOFF {
            return Err(invalid(
                "auth.max-failure-backoff",
                "must be at least auth.failure-backoff and at most 24h".into(),
            ));
        }
        self.intercept
            .validate()
            .map_err(|(key, m)| invalid(key, m))?;
        if self.intercept.enabled
            && self
                .intercept
                .ca_dir
                .as_ref()
                .is_none_or(|d| d.as_os_str().is_empty())
        {
            return Err(invalid(
                "intercept.ca-dir",
                "required when interception is enabled: the directory of `webpep server ca init --dir DIR`".into(),
            ));
        }
        crate::optimize::compress_config(&self.compress.options)
            .map_err(|m| invalid("compress", m))?;
        crate::optimize::transcode_config(&self.transcode.options)
            .map_err(|m| invalid("transcode", m))?;
        Ok(())
    }

    /// The effective configuration as TOML (for `--print-config`).
    pub fn to_toml(&self) -> String {
        toml::to_string(self).unwrap_or_else(|e| format!("# cannot print the configuration: {e}\n"))
    }
}

/// The longest `auth.failure-backoff` and `auth.max-failure-backoff` accepted.
pub const MAX_FAILURE_BACKOFF: Duration = Duration::from_secs(24 * 3600);

/// Checks `auth.realm`: it goes into a quoted string of `Proxy-Authenticate`.
pub fn check_realm(realm: &str) -> Result<(), String> {
    if realm.is_empty() {
        return Err("must not be empty".into());
    }
    if realm
        .chars()
        .any(|c| c == '"' || c == '\\' || c.is_control() || !c.is_ascii())
    {
        return Err("printable ASCII without `\"` or `\\`, please".into());
    }
    Ok(())
}

/// The first `nameserver` of a resolv.conf text, on port 53.
pub fn first_nameserver(resolv_conf: &str) -> Option<SocketAddr> {
    resolv_conf.lines().find_map(|l| {
        let mut it = l.split_whitespace();
        if it.next()? != "nameserver" {
            return None;
        }
        let ip: IpAddr = it.next()?.split('%').next()?.parse().ok()?;
        Some(SocketAddr::new(ip, 53))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_round_trip_through_toml() {
        let cfg = ServerConfig::default();
        let text = cfg.to_toml();
        let back = ServerConfig::from_toml(&text, "printed").unwrap();
        assert_eq!(cfg, back);
    }

    #[test]
    fn tls_roots_forms() {
        let roots = |t: &str| ServerConfig::from_toml(&format!("[origin]\ntls-roots = {t}\n"), "a");
        assert_eq!(
            roots("\"bundled\"").unwrap().origin.tls_roots,
            TlsRoots::Bundled
        );
        assert_eq!(
            roots("\"system\"").unwrap().origin.tls_roots,
            TlsRoots::System
        );
        let files = roots("[\"/lab/ca.pem\", \"b.pem\"]").unwrap();
        assert_eq!(
            files.origin.tls_roots,
            TlsRoots::Files(vec!["/lab/ca.pem".into(), "b.pem".into()])
        );
        assert_eq!(
            ServerConfig::from_toml(&files.to_toml(), "printed").unwrap(),
            files
        );
        for bad in ["\"ca.pem\"", "[]", "3"] {
            let m = roots(bad).unwrap_err().to_string();
            assert!(m.contains("tls-roots") && m.contains("PEM"), "{bad}: {m}");
        }
        assert_eq!(
            TlsRoots::from_flags(&["a.pem".into(), "b.pem".into()]).unwrap(),
            TlsRoots::Files(vec!["a.pem".into(), "b.pem".into()])
        );
        assert_eq!(
            TlsRoots::from_flags(&["bundled".into()]).unwrap(),
            TlsRoots::Bundled
        );
        assert!(TlsRoots::from_flags(&["system".into(), "a.pem".into()]).is_err());
    }

    #[test]
    fn intercept_is_off_by_default_and_checked_when_on() {
        let cfg = ServerConfig::default();
        assert!(!cfg.intercept.enabled);
        assert_eq!(cfg.intercept.ports, vec![443]);
        let on = ServerConfig::from_toml(
            "[intercept]\nenabled = true\nca-dir = \"/etc/webpep/ca\"\nexclude = [\"=bank.example\"]\nports = [443, 8443]\nleaf-cache = 10\n",
            "a.toml",
        )
        .unwrap();
        assert_eq!(on.intercept.ca_dir, Some(PathBuf::from("/etc/webpep/ca")));
        assert_eq!(
            ServerConfig::from_toml(&on.to_toml(), "printed").unwrap(),
            on
        );
        for (text, key) in [
            ("enabled = true", "intercept.ca-dir"),
            ("include = [\"a..b\"]", "intercept.include"),
            ("exclude = [\"*.\"]", "intercept.exclude"),
            ("leaf-cache = 0", "intercept.leaf-cache"),
            ("ports = [0]", "intercept.ports"),
            (
                "enabled = true\nca-dir = \"/x\"\nports = []",
                "intercept.ports",
            ),
        ] {
            let e = ServerConfig::from_toml(&format!("[intercept]\n{text}\n"), "a.toml")
                .unwrap_err()
                .to_string();
            assert!(e.contains(key), "{text}: {e}");
        }
    }

    #[test]
    fn unknown_key_names_file_and_key() {
        let e =
            ServerConfig::from_toml("[limits]\nmax-pipelin = 3\n", "/etc/webpep.toml").unwrap_err();
        let m = e.to_string();
        assert!(m.contains("/etc/webpep.toml"), "{m}");
        assert!(m.contains("max-pipelin"), "{m}");
    }

    #[test]
    fn wrong_type_names_key() {
        let e = ServerConfig::from_toml("[origin]\nconnect-timeout = \"soon\"\n", "a.toml")
            .unwrap_err();
        let m = e.to_string();
        assert!(m.contains("a.toml") && m.contains("connect-timeout"), "{m}");
    }

    #[test]
    fn durations_in_several_forms() {
        let c = ServerConfig::from_toml(
            "[origin]\nconnect-timeout = \"250ms\"\nresponse-timeout = 2.5\n[air]\nprobe-stop = \"1m\"\n",
            "x",
        )
        .unwrap();
        assert_eq!(c.origin.connect_timeout.0, Duration::from_millis(250));
        assert_eq!(c.origin.response_timeout.0, Duration::from_millis(2500));
        assert_eq!(c.air.probe_stop.0, Duration::from_secs(60));
    }

    #[test]
    fn the_air_budget_is_opt_in_and_bounded() {
        let d = ServerConfig::default().air;
        assert!(!d.budget);
        assert_eq!(d.budget_config(), None);
        let c = ServerConfig::from_toml("[air]\nbudget = true\n", "x").unwrap();
        assert_eq!(
            c.air.budget_config().map(|b| (b.gain, b.floor)),
            Some((2.0, 16384))
        );
        let c = ServerConfig::from_toml(
            "[air]\nbudget = true\nbudget-gain = 3\nbudget-floor = 65536\n",
            "x",
        )
        .unwrap();
        assert_eq!(
            c.air.budget_config().map(|b| (b.gain, b.floor)),
            Some((3.0, 65536))
        );
        for (bad, key) in [
            ("budget-gain = 0.5", "air.budget-gain"),
            ("budget-floor = 100", "air.budget-floor"),
        ] {
            let e = ServerConfig::from_toml(&format!("[air]\n{bad}\n"), "a.toml")
                .unwrap_err()
                .to_string();
            assert!(e.contains(key), "{bad}: {e}");
        }
    }

    #[test]
    fn initial_rto_is_optional_and_bounded() {
        assert_eq!(ServerConfig::default().air.initial_rto, None);
        let c = ServerConfig::from_toml("[air]\ninitial-rto = \"7s\"\n", "x").unwrap();
        assert_eq!(c.air.initial_rto.map(|t| t.0), Some(Duration::from_secs(7)));
        for bad in ["0", "\"121s\""] {
            let e = ServerConfig::from_toml(&format!("[air]\ninitial-rto = {bad}\n"), "a.toml")
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("a.toml") && e.contains("air.initial-rto"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn url_rewrite_needs_authority() {
        let e = ServerConfig::from_toml("[url-rewrite]\nenabled = true\n", "x").unwrap_err();
        assert!(e.to_string().contains("proxy-authority"));
    }

    #[test]
    fn nameserver_from_resolv_conf() {
        let t = "# c\nsearch lan\nnameserver 10.0.0.53\nnameserver 1.1.1.1\n";
        assert_eq!(first_nameserver(t), Some("10.0.0.53:53".parse().unwrap()));
        assert_eq!(
            first_nameserver("nameserver fe80::1%eth0\n"),
            Some("[fe80::1]:53".parse().unwrap())
        );
        assert_eq!(first_nameserver(""), None);
    }

    #[test]
    fn client_limits_parse() {
        let c = ServerConfig::from_toml(
            "[limits]\nmax-client-connections = 2\nmax-connections = 500\nclient-rate = 0.5\nclient-burst = 3\ntransform-workers = 4\ntransform-memory = 536870912\n",
            "x",
        )
        .unwrap();
        assert_eq!(c.limits.max_client_connections, 2);
        assert_eq!(c.limits.max_connections, 500);
        assert_eq!(c.limits.client_rate, 0.5);
        assert_eq!(c.limits.client_burst, 3);
        assert_eq!(c.limits.transform_workers, 4);
        assert_eq!(c.limits.transform_memory, 512 << 20);
        // A whole number is a rate too.
        let c = ServerConfig::from_toml("[limits]\nclient-rate = 10\n", "x").unwrap();
        assert_eq!(c.limits.client_rate, 10.0);
        let d = LimitsConfig::default();
        assert_eq!(
            (
                d.max_client_connections,
                d.max_connections,
                d.client_rate,
                d.client_burst,
                d.transform_workers,
                d.transform_memory
            ),
            (64, 10_000, 0.0, 100, 0, 1 << 30)
        );
    }

    #[test]
    fn zero_connection_limits_and_bad_rates_are_refused_with_key() {
        for (text, key) in [
            (
                "max-client-connections = 0",
                "limits.max-client-connections",
            ),
            ("max-connections = 0", "limits.max-connections"),
            ("client-burst = 0", "limits.client-burst"),
            ("client-rate = -1", "limits.client-rate"),
            ("client-rate = nan", "limits.client-rate"),
        ] {
            let e = ServerConfig::from_toml(&format!("[limits]\n{text}\n"), "w.toml").unwrap_err();
            let m = e.to_string();
            assert!(m.contains("w.toml") && m.contains(key), "{text}: {m}");
        }
    }

    #[test]
    fn auth_is_off_by_default_and_parses() {
        let d = ServerConfig::default();
        assert_eq!(d.auth.users_file, None);
        assert_eq!(d.auth.realm, "webpep");
        // Secure defaults once a users file is given: transparent requests refused, guessing
        // throttled.
        assert_eq!(d.auth.transparent, TransparentAuth::Refuse);
        assert_eq!(d.auth.max_failures, 5);
        assert_eq!(d.auth.failure_backoff, Secs::from_secs(1));
        assert_eq!(d.auth.max_failure_backoff, Secs::from_secs(60));
        let c =
            ServerConfig::from_toml("[auth]\nusers-file = \"/etc/webpep/users\"\n", "x").unwrap();
        assert_eq!(c.auth.transparent, TransparentAuth::Refuse);
        let c = ServerConfig::from_toml(
            "[auth]\nusers-file = \"/etc/webpep/users\"\nrealm = \"edge proxy\"\ntransparent = \"network\"\nmax-failures = 0\nfailure-backoff = \"500ms\"\nmax-failure-backoff = \"10m\"\n",
            "x",
        )
        .unwrap();
        assert_eq!(
            c.auth.users_file.as_deref(),
            Some(std::path::Path::new("/etc/webpep/users"))
        );
        assert_eq!(c.auth.realm, "edge proxy");
        assert_eq!(c.auth.transparent, TransparentAuth::Network);
        assert_eq!(c.auth.max_failures, 0);
        assert_eq!(c.auth.failure_backoff, Secs(Duration::from_millis(500)));
        assert_eq!(c.auth.max_failure_backoff, Secs::from_secs(600));
        let back = ServerConfig::from_toml(&c.to_toml(), "printed").unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn bad_auth_keys_are_refused_with_key() {
        for (text, key) in [
            ("transparent = \"allow\"", "transparent"),
            ("realm = \"a\\\"b\"", "auth.realm"),
            ("realm = \"\"", "auth.realm"),
            ("users-file = \"\"", "auth.users-file"),
            ("user-file = \"/x\"", "user-file"),
            ("max-failures = -1", "max-failures"),
            ("failure-backoff = 0", "auth.failure-backoff"),
            ("failure-backoff = \"25h\"", "auth.failure-backoff"),
            (
                "failure-backoff = \"2s\"\nmax-failure-backoff = \"1s\"",
                "auth.max-failure-backoff",
            ),
            ("max-failure-backoff = \"25h\"", "auth.max-failure-backoff"),
        ] {
            let e = ServerConfig::from_toml(&format!("[auth]\n{text}\n"), "w.toml").unwrap_err();
            let m = e.to_string();
            assert!(m.contains("w.toml") && m.contains(key), "{text}: {m}");
        }
    }

    #[test]
    fn default_acl_is_loopback_only() {
        let a = AclConfig::default();
        assert!(a
            .allow_clients
            .iter()
            .any(|n| n.contains(&"127.0.0.1".parse::<IpAddr>().unwrap())));
        assert!(!a
            .allow_clients
            .iter()
            .any(|n| n.contains(&"10.0.0.1".parse::<IpAddr>().unwrap())));
    }
}
