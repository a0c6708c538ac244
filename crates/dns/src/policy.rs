//! Which names the DNS proxy rewrites, and with what (002 §3.2: "a pre-configured list of
//! domain names ... In addition DNS responses for any domain name that starts with a `www`
//! may also be rewritten").

use std::net::IpAddr;
use std::str::FromStr;

/// The TTL of the proxy's records unless configured: one day, as in 002 Fig. 3, so that the
/// client does not ask again over the air link.
pub const DEFAULT_PROXY_TTL: u32 = 86_400;

/// Which queried names get the proxy's address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NameMatch {
    /// Every name.
    All,
    /// Exact names (`www.foo.com`) or suffix patterns (`*.foo.com`: any name strictly below
    /// `foo.com`, not `foo.com` itself). Case-insensitive; a trailing dot is ignored.
    List(Vec<String>),
    /// Names whose first label is `www`.
    WwwPrefix,
}

/// Lowercase, without the final dot: the form names are compared in.
pub(crate) fn normalize(name: &str) -> String {
    name.trim().trim_end_matches('.').to_ascii_lowercase()
}

impl NameMatch {
    /// Whether `name` (any case, with or without the final dot) matches.
    pub fn matches(&self, name: &str) -> bool {
        let name = normalize(name);
        if name.is_empty() {
            // The root never names a web server.
            return false;
        }
        match self {
            NameMatch::All => true,
            NameMatch::WwwPrefix => name.split('.').next() == Some("www") && name.contains('.'),
            NameMatch::List(patterns) => patterns.iter().any(|p| pattern_matches(p, &name)),
        }
    }
}

fn pattern_matches(pattern: &str, name: &str) -> bool {
    let pattern = normalize(pattern);
    match pattern.strip_prefix("*.") {
        Some(suffix) => name
            .strip_suffix(suffix)
            .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
        None => pattern == name,
    }
}

/// Parses the `--rewrite` syntax: `all`, `www`, or a comma-separated list of names and
/// `*.suffix` patterns.
impl FromStr for NameMatch {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "" => Err("empty name list".into()),
            "all" => Ok(NameMatch::All),
            "www" => Ok(NameMatch::WwwPrefix),
            _ => {
                let mut names = Vec::new();
                for raw in s.split(',') {
                    let name = normalize(raw);
                    validate_pattern(&name)?;
                    names.push(name);
                }
                Ok(NameMatch::List(names))
            }
        }
    }
}

fn validate_pattern(pattern: &str) -> Result<(), String> {
    let body = pattern.strip_prefix("*.").unwrap_or(pattern);
    if body.is_empty() {
        return Err(format!("empty name in list: {pattern:?}"));
    }
    if body.len() > 253 {
        return Err(format!("name too long: {pattern:?}"));
    }
    for label in body.split('.') {
        let ok = !label.is_empty()
            && label.len() <= 63
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !ok {
            return Err(format!("not a DNS name: {pattern:?}"));
        }
    }
    Ok(())
}

/// How the proxy rewrites matching answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RewritePolicy {
    /// Which names are rewritten.
    pub names: NameMatch,
    /// The proxy's addresses: the IPv4 ones go into A answers, the IPv6 ones into AAAA answers.
    pub proxy_addrs: Vec<IpAddr>,
    /// TTL of the proxy's records: long, so that clients keep them (default one day).
    pub ttl: u32,
    /// Keep the original addresses after the proxy's, so that a client that cannot reach the
    /// proxy (it moved to another network, 002 §5) falls back to the origin.
    pub keep_original: bool,
    /// Keep the original records' own (short) TTLs, as 002 Fig. 3 draws the answer. Off (the
    /// default), every record of a rewritten answer carries `ttl`: an RRset has one TTL
    /// (RFC 2181 §5.2), and clients that cache an answer for its lowest TTL (browsers,
    /// systemd-resolved) would otherwise ask again over the air as soon as the origin's TTL
    /// runs out, which is what the long TTL is there to prevent. The price: a client that
    /// loses the proxy falls back to origin addresses up to `ttl` old.
    pub keep_origin_ttl: bool,
}

impl RewritePolicy {
    /// A policy with the defaults: one-day TTL, original addresses kept.
    pub fn new(names: NameMatch, proxy_addrs: Vec<IpAddr>) -> Self {
        RewritePolicy {
            names,
            proxy_addrs,
            ttl: DEFAULT_PROXY_TTL,
            keep_original: true,
            keep_origin_ttl: false,
        }
    }

    /// The proxy's IPv4 addresses (for A answers).
    pub fn v4_addrs(&self) -> impl Iterator<Item = std::net::Ipv4Addr> + '_ {
        self.proxy_addrs.iter().filter_map(|a| match a {
            IpAddr::V4(v4) => Some(*v4),
            IpAddr::V6(_) => None,
        })
    }

    /// The proxy's IPv6 addresses (for AAAA answers).
    pub fn v6_addrs(&self) -> impl Iterator<Item = std::net::Ipv6Addr> + '_ {
        self.proxy_addrs.iter().filter_map(|a| match a {
            IpAddr::V6(v6) => Some(*v6),
            IpAddr::V4(_) => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_matches_every_name_but_the_root() {
        assert!(NameMatch::All.matches("foo.com"));
        assert!(NameMatch::All.matches("localhost"));
        assert!(!NameMatch::All.matches("."));
    }

    #[test]
    fn www_prefix_needs_a_first_label_www() {
        let m = NameMatch::WwwPrefix;
        assert!(m.matches("www.foo.com"));
        assert!(m.matches("WWW.Foo.COM."));
        assert!(!m.matches("www2.foo.com"));
        assert!(!m.matches("img.www.foo.com"));
        assert!(!m.matches("foo.com"));
        assert!(!m.matches("www"));
    }

    #[test]
    fn list_matches_exact_names_and_suffixes() {
        let m: NameMatch = "i.cnn.net,*.akamai.net, Yahoo.com.".parse().unwrap();
        assert_eq!(
            m,
            NameMatch::List(vec![
                "i.cnn.net".into(),
                "*.akamai.net".into(),
                "yahoo.com".into()
            ])
        );
        assert!(m.matches("I.CNN.net."));
        assert!(!m.matches("x.i.cnn.net"));
        assert!(m.matches("a1.akamai.net"));
        assert!(m.matches("b.a1.akamai.net"));
        assert!(!m.matches("akamai.net"));
        assert!(!m.matches("notakamai.net"));
        assert!(!m.matches("xakamai.net"));
        assert!(m.matches("yahoo.com"));
        assert!(!m.matches("www.yahoo.com"));
    }

    #[test]
    fn keywords_and_bad_lists() {
        assert_eq!("ALL".parse::<NameMatch>(), Ok(NameMatch::All));
        assert_eq!("www".parse::<NameMatch>(), Ok(NameMatch::WwwPrefix));
        assert!("".parse::<NameMatch>().is_err());
        assert!("a.com,,b.com".parse::<NameMatch>().is_err());
        assert!("a b.com".parse::<NameMatch>().is_err());
        assert!("*.".parse::<NameMatch>().is_err());
        assert!("a..com".parse::<NameMatch>().is_err());
    }

    #[test]
    fn families_split() {
        let p = RewritePolicy::new(
            NameMatch::All,
            vec!["10.0.0.12".parse().unwrap(), "fd00::12".parse().unwrap()],
        );
        assert_eq!(
            p.v4_addrs().collect::<Vec<_>>(),
            vec![std::net::Ipv4Addr::new(10, 0, 0, 12)]
        );
        assert_eq!(p.v6_addrs().count(), 1);
        assert_eq!(p.ttl, 86_400);
        assert!(p.keep_original);
    }
}
