//! The TOML configuration file of `webpep dns`: the same keys as its flags (flags override).
//!
//! ```toml
//! listen = "0.0.0.0:53"
//! upstream = "10.0.0.53:53"
//! rewrite = "www"            # all | www | name,*.suffix,...
//! proxy-addrs = ["10.0.0.12"]
//! ttl = 86400
//! fallback = true            # keep the original addresses after the proxy's
//! ```

use std::net::{IpAddr, SocketAddr};

use serde::Deserialize;

use crate::error::DnsError;

/// The keys of the configuration file; every one is optional. Unknown keys are an error.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct FileConfig {
    /// Address to answer on (UDP and TCP).
    pub listen: Option<SocketAddr>,
    /// The resolver queries are forwarded to.
    pub upstream: Option<SocketAddr>,
    /// Which names to rewrite: `all`, `www` or a comma-separated list.
    pub rewrite: Option<String>,
    /// The proxy's addresses put first in rewritten answers.
    pub proxy_addrs: Option<Vec<IpAddr>>,
    /// TTL of the proxy's records, in seconds.
    pub ttl: Option<u32>,
    /// Keep the original addresses after the proxy's (the mobility fallback).
    pub fallback: Option<bool>,
    /// Keep the original records' own TTLs instead of giving the answer the proxy's TTL.
    pub keep_origin_ttl: Option<bool>,
    /// Client networks served (others get REFUSED).
    pub allow_clients: Option<Vec<ipnet::IpNet>>,
}

/// Parses the text of a configuration file.
pub fn parse_config_file(text: &str) -> Result<FileConfig, DnsError> {
    toml::from_str(text).map_err(|e| DnsError::Config(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_keys() {
        let c = parse_config_file(
            "listen = \"127.0.0.1:5353\"\nupstream = \"10.0.0.53:53\"\nrewrite = \"www\"\n\
             proxy-addrs = [\"10.0.0.12\", \"fd00::12\"]\nttl = 600\nfallback = false\n\
             keep-origin-ttl = true\nallow-clients = [\"10.0.0.0/8\"]\n",
        )
        .unwrap();
        assert_eq!(c.listen, Some("127.0.0.1:5353".parse().unwrap()));
        assert_eq!(c.upstream, Some("10.0.0.53:53".parse().unwrap()));
        assert_eq!(c.rewrite.as_deref(), Some("www"));
        assert_eq!(c.proxy_addrs.as_ref().map(Vec::len), Some(2));
        assert_eq!(c.ttl, Some(600));
        assert_eq!(c.fallback, Some(false));
        assert_eq!(c.keep_origin_ttl, Some(true));
        assert_eq!(c.allow_clients, Some(vec!["10.0.0.0/8".parse().unwrap()]));
        assert_eq!(parse_config_file("").unwrap(), FileConfig::default());
    }

    #[test]
    fn unknown_keys_and_bad_values_are_errors() {
        let e = parse_config_file("upstrem = \"1.2.3.4:53\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("upstrem"), "{e}");
        assert!(parse_config_file("upstream = \"nowhere\"").is_err());
        assert!(parse_config_file("ttl = -1").is_err());
        assert!(parse_config_file("proxy-addrs = [\"10.0.0\"]").is_err());
    }
}
