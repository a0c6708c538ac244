//! The client proxy's configuration: a TOML file (every key optional) and flags over it.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

/// Everything `webpep client` needs. See docs/configuration.md (`webpep client`).
#[derive(Clone, Debug, PartialEq)]
pub struct ClientConfig {
    /// Where browsers reach the proxy (default 127.0.0.1:8118).
    pub listen: SocketAddr,
    /// The proxy's HTTPS port, if any: browsers reach the proxy over TLS (a certificate
    /// from the client's CA) and, with HTTP/2, send every request and CONNECT of a page over
    /// one connection (crate::tls_front).
    pub tls_listen: Option<SocketAddr>,
    /// The edge's QUIC address.
    pub server: Option<SocketAddr>,
    /// The credential `webpep server enroll` issued.
    pub credential: Option<PathBuf>,
    /// After this long without anything from the edge (its answers to other requests, its
    /// acknowledgements and keep-alives included), a browser waiting on it gets a "link
    /// down" page instead of waiting (its own timeouts are minutes). A busy link whose
    /// queue holds an answer longer is not down.
    pub link_down_after: Duration,
    /// A browser's connection with no request for this long is closed (HTTP/1: between
    /// requests, and a request head must arrive within it; HTTP/2: no stream open), so that
    /// connections a browser forgot do not hold the proxy's memory for ever.
    pub idle_timeout: Duration,
    /// A CONNECT's tunnel is given to the browser before the edge has connected, so its TLS
    /// handshake starts a round trip over the link earlier; a tunnel the edge then refuses is
    /// closed rather than answered with the edge's error page (see
    /// `QuicUpstream::fast_connect`).
    pub fast_connect: bool,
    /// Browsers allowed to use the proxy, by address: loopback only unless listed (a device
    /// proxy on a shared network must not carry strangers' traffic to the edge).
    pub allow_clients: Vec<IpAddr>,
    /// Largest request head accepted from a browser.
    pub max_header_bytes: usize,
    /// Largest request body carried (uploads above it get 413).
    pub max_request_body: usize,
    /// `[intercept]`: opt-in TLS interception of CONNECT tunnels (docs/interception.md).
    pub intercept: InterceptConfig,
}

/// `[intercept]`: which CONNECT tunnels the client opens (with its own CA) so that their
/// requests cross the link as ordinary requests and get every stage at the edge; the CA's
/// directory defaults to [`webpep_intercept::default_client_ca_dir`].
pub use webpep_intercept::InterceptConfig;

/// The client's CA directory in effect.
pub fn ca_dir(cfg: &InterceptConfig) -> PathBuf {
    cfg.ca_dir
        .clone()
        .unwrap_or_else(webpep_intercept::default_client_ca_dir)
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 8118)),
            tls_listen: None,
            server: None,
            credential: None,
            link_down_after: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(120),
            fast_connect: true,
            allow_clients: Vec::new(),
            max_header_bytes: 64 * 1024,
            max_request_body: 16 * 1024 * 1024,
            intercept: InterceptConfig::default(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("{source_name}: {message}")]
pub struct ConfigError {
    pub source_name: String,
    pub message: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct File {
    listen: Option<SocketAddr>,
    tls_listen: Option<SocketAddr>,
    server: Option<SocketAddr>,
    credential: Option<PathBuf>,
    link_down_after: Option<String>,
    idle_timeout: Option<String>,
    fast_connect: Option<bool>,
    allow_clients: Option<Vec<IpAddr>>,
    max_header_bytes: Option<usize>,
    max_request_body: Option<usize>,
    intercept: Option<InterceptConfig>,
}

impl ClientConfig {
    /// Reads a configuration file's text; `source_name` names it in errors (with the key).
    pub fn from_toml(text: &str, source_name: &str) -> Result<ClientConfig, ConfigError> {
        let err = |message: String| ConfigError {
            source_name: source_name.to_string(),
            message,
        };
        let f: File = toml::from_str(text).map_err(|e| err(e.to_string()))?;
        let mut c = ClientConfig::default();
        if let Some(v) = f.listen {
            c.listen = v;
        }
        c.tls_listen = f.tls_listen;
        c.server = f.server;
        c.credential = f.credential;
        if let Some(v) = f.link_down_after {
            c.link_down_after = parse_duration(&v)
                .ok_or_else(|| err(format!("link-down-after: not a duration: {v:?} (e.g. 30s)")))?;
        }
        if let Some(v) = f.idle_timeout {
            c.idle_timeout = parse_duration(&v).filter(|d| !d.is_zero()).ok_or_else(|| {
                err(format!(
                    "idle-timeout: not a positive duration: {v:?} (e.g. 120s)"
                ))
            })?;
        }
        if let Some(v) = f.fast_connect {
            c.fast_connect = v;
        }
        if let Some(v) = f.allow_clients {
            c.allow_clients = v;
        }
        if let Some(v) = f.max_header_bytes {
            c.max_header_bytes = v;
        }
        if let Some(v) = f.max_request_body {
            c.max_request_body = v;
        }
        if let Some(i) = f.intercept {
            i.validate()
                .map_err(|(key, m)| err(format!("{key}: {m}")))?;
            c.intercept = i;
        }
        Ok(c)
    }

    /// Whether a browser at `ip` may use the proxy.
    pub fn allows(&self, ip: IpAddr) -> bool {
        ip.is_loopback() || self.allow_clients.contains(&ip)
    }
}

/// "30s", "500ms", "2m", or plain seconds.
pub fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| c.is_ascii_alphabetic()) {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, "s"),
    };
    let n: f64 = num.trim().parse().ok()?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        _ => return None,
    };
    (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_errors() {
        let c = ClientConfig::from_toml(
            "listen = \"127.0.0.1:9000\"\nserver = \"10.0.0.1:4433\"\nlink-down-after = \"5s\"\nidle-timeout = \"2m\"\nfast-connect = false\nallow-clients = [\"192.168.1.7\"]\n",
            "client.toml",
        )
        .unwrap();
        assert_eq!(c.listen.port(), 9000);
        assert_eq!(c.link_down_after, Duration::from_secs(5));
        assert_eq!(c.idle_timeout, Duration::from_secs(120));
        assert!(!c.fast_connect);
        assert!(ClientConfig::default().fast_connect);
        assert!(c.allows("192.168.1.7".parse().unwrap()));
        assert!(c.allows("127.0.0.1".parse().unwrap()));
        assert!(!c.allows("192.168.1.8".parse().unwrap()));
        let e = ClientConfig::from_toml("lisen = \"x\"\n", "client.toml").unwrap_err();
        assert!(
            e.to_string().contains("client.toml") && e.to_string().contains("lisen"),
            "{e}"
        );
        let e = ClientConfig::from_toml("link-down-after = \"soon\"\n", "c.toml").unwrap_err();
        assert!(e.to_string().contains("link-down-after"), "{e}");
        let e = ClientConfig::from_toml("idle-timeout = \"0s\"\n", "c.toml").unwrap_err();
        assert!(e.to_string().contains("idle-timeout"), "{e}");
        assert!(!c.intercept.enabled, "interception is off unless asked for");
    }

    #[test]
    fn the_intercept_table() {
        let c = ClientConfig::from_toml(
            "[intercept]\nenabled = true\ninclude = [\"example.com\"]\nexclude = [\"=bank.example.com\"]\nca-dir = \"/tmp/ca\"\nleaf-cache = 10\nports = [443, 8443]\n",
            "c.toml",
        )
        .unwrap();
        assert!(c.intercept.enabled);
        assert_eq!(c.intercept.include, ["example.com"]);
        assert_eq!(c.intercept.exclude, ["=bank.example.com"]);
        assert_eq!(ca_dir(&c.intercept), PathBuf::from("/tmp/ca"));
        assert_eq!(c.intercept.leaf_cache, 10);
        assert_eq!(c.intercept.ports, [443, 8443]);
        let e = ClientConfig::from_toml("[intercept]\nenable = true\n", "c.toml").unwrap_err();
        assert!(e.to_string().contains("enable"), "{e}");
        let e = ClientConfig::from_toml("[intercept]\nleaf-cache = 0\n", "c.toml").unwrap_err();
        assert!(e.to_string().contains("leaf-cache"), "{e}");
    }
}
