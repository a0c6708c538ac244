//! Which CONNECT destinations are intercepted and which are tunnelled untouched.

use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt;
use std::sync::Mutex;

use crate::host::{classify, valid_host_name, Host};

/// How many hosts learned at run time ([`Policy::pass_through`]) are remembered; beyond it the
/// oldest is forgotten (and learned again if it still needs tunnelling).
pub const PASS_THROUGH_LIMIT: usize = 10_000;

/// The ports intercepted unless [`Policy::with_ports`] says otherwise: HTTPS only, since a
/// CONNECT to another port may well carry something other than TLS.
pub const DEFAULT_PORTS: &[u16] = &[443];

/// What to do with a CONNECT destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Intercept,
    Tunnel(TunnelReason),
}

/// Why a destination is tunnelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TunnelReason {
    /// Interception is off.
    Disabled,
    /// The host matches the exclude list.
    Excluded,
    /// An include list is set and the host is not on it.
    NotIncluded,
    /// An IP literal or something that is not a valid host name: no certificate is minted.
    NotAHostName,
    /// The origin asked for a client certificate, which only the browser can present.
    ClientCertificate,
    /// A port that is not intercepted.
    Port,
}

impl fmt::Display for TunnelReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TunnelReason::Disabled => "interception disabled",
            TunnelReason::Excluded => "host excluded",
            TunnelReason::NotIncluded => "host not included",
            TunnelReason::NotAHostName => "not a host name",
            TunnelReason::ClientCertificate => "origin asks for a client certificate",
            TunnelReason::Port => "port not intercepted",
        })
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PolicyError {
    #[error(
        "{list} pattern {pattern:?} is not a host name pattern: use example.com (the host and \
         its subdomains), *.example.com (subdomains only) or =example.com (exactly that host)"
    )]
    InvalidPattern { list: &'static str, pattern: String },
}

/// A list of host patterns, each kind in a set of lower-case names without a trailing dot.
#[derive(Debug, Default)]
struct Patterns {
    /// `example.com`: that host and every subdomain.
    domains: HashSet<String>,
    /// `*.example.com`: subdomains only.
    subdomains: HashSet<String>,
    /// `=example.com`: exactly that host.
    exact: HashSet<String>,
}

impl Patterns {
    fn parse(list: &'static str, patterns: &[String]) -> Result<Patterns, PolicyError> {
        let mut parsed = Patterns::default();
        for pattern in patterns {
            let (set, name) = if let Some(name) = pattern.strip_prefix("*.") {
                (&mut parsed.subdomains, name)
            } else if let Some(name) = pattern.strip_prefix('=') {
                (&mut parsed.exact, name)
            } else {
                (&mut parsed.domains, pattern.as_str())
            };
            if !valid_host_name(name) {
                return Err(PolicyError::InvalidPattern {
                    list,
                    pattern: pattern.clone(),
                });
            }
            set.insert(name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase());
        }
        Ok(parsed)
    }

    fn is_empty(&self) -> bool {
        self.domains.is_empty() && self.subdomains.is_empty() && self.exact.is_empty()
    }

    /// Whether `host` (normalized) matches: one lookup per suffix of its labels.
    fn matches(&self, host: &str) -> bool {
        if self.exact.contains(host) || self.domains.contains(host) {
            return true;
        }
        let mut rest = host;
        while let Some((_, parent)) = rest.split_once('.') {
            if self.domains.contains(parent) || self.subdomains.contains(parent) {
                return true;
            }
            rest = parent;
        }
        false
    }
}

/// Hosts learned at run time, oldest first, bounded.
#[derive(Debug, Default)]
struct Learned {
    reasons: HashMap<String, TunnelReason>,
    order: VecDeque<String>,
}

/// Which CONNECT destinations are intercepted: off unless enabled; an include list (empty:
/// every host) minus an exclude list (which wins); hosts learned at run time; IP literals and
/// invalid names never (no certificate names them); port 443 only by default.
#[derive(Debug)]
pub struct Policy {
    enabled: bool,
    include: Patterns,
    exclude: Patterns,
    ports: Vec<u16>,
    learned: Mutex<Learned>,
}

impl Policy {
    /// `include` empty means every host. Patterns: `example.com` (that host and every
    /// subdomain), `*.example.com` (subdomains only), `=example.com` (exactly that host); any
    /// case, trailing dot ignored. An invalid pattern is an error naming it.
    pub fn new(
        enabled: bool,
        include: &[String],
        exclude: &[String],
    ) -> Result<Policy, PolicyError> {
        Ok(Policy {
            enabled,
            include: Patterns::parse("include", include)?,
            exclude: Patterns::parse("exclude", exclude)?,
            ports: DEFAULT_PORTS.to_vec(),
            learned: Mutex::new(Learned::default()),
        })
    }

    /// Intercepts only CONNECTs to these ports (instead of [`DEFAULT_PORTS`]).
    pub fn with_ports(mut self, ports: &[u16]) -> Policy {
        self.ports = ports.to_vec();
        self
    }

    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// The decision for a CONNECT to `host:port`.
    pub fn decide(&self, host: &str, port: u16) -> Decision {
        if !self.enabled {
            return Decision::Tunnel(TunnelReason::Disabled);
        }
        let host = match classify(host) {
            Some(Host::Name(name)) => name,
            Some(Host::Ip(_)) | None => return Decision::Tunnel(TunnelReason::NotAHostName),
        };
        if !self.ports.contains(&port) {
            return Decision::Tunnel(TunnelReason::Port);
        }
        if self.exclude.matches(&host) {
            return Decision::Tunnel(TunnelReason::Excluded);
        }
        if let Some(reason) = self.lock_learned().reasons.get(&host) {
            return Decision::Tunnel(*reason);
        }
        if !self.include.is_empty() && !self.include.matches(&host) {
            return Decision::Tunnel(TunnelReason::NotIncluded);
        }
        Decision::Intercept
    }

    /// Tunnels `host` from now on (an origin asked for a client certificate, say). Names that
    /// are not valid host names are never intercepted anyway and are not stored.
    pub fn pass_through(&self, host: &str, reason: TunnelReason) {
        let Some(Host::Name(host)) = classify(host) else {
            return;
        };
        let mut learned = self.lock_learned();
        if learned.reasons.insert(host.clone(), reason).is_some() {
            return;
        }
        learned.order.push_back(host);
        while learned.order.len() > PASS_THROUGH_LIMIT {
            if let Some(oldest) = learned.order.pop_front() {
                learned.reasons.remove(&oldest);
            }
        }
    }

    fn lock_learned(&self) -> std::sync::MutexGuard<'_, Learned> {
        self.learned.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Decision::{Intercept, Tunnel};
    use TunnelReason::*;

    fn strings(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    fn policy(include: &[&str], exclude: &[&str]) -> Policy {
        Policy::new(true, &strings(include), &strings(exclude)).expect("valid patterns")
    }

    #[test]
    fn include_exclude_exact_and_wildcard() {
        let p = policy(
            &["example.com", "*.cdn.test", "=only.test", "UPPER.test."],
            &["secure.example.com", "=bank.cdn.test"],
        );
        let table: &[(&str, Decision)] = &[
            ("example.com", Intercept),
            ("www.example.com", Intercept),
            ("a.b.example.com", Intercept),
            ("WWW.EXAMPLE.COM.", Intercept),
            ("notexample.com", Tunnel(NotIncluded)),
            ("example.com.evil.test", Tunnel(NotIncluded)),
            ("secure.example.com", Tunnel(Excluded)),
            ("login.secure.example.com", Tunnel(Excluded)),
            ("cdn.test", Tunnel(NotIncluded)),
            ("img.cdn.test", Intercept),
            ("a.img.cdn.test", Intercept),
            ("bank.cdn.test", Tunnel(Excluded)),
            ("x.bank.cdn.test", Intercept),
            ("only.test", Intercept),
            ("www.only.test", Tunnel(NotIncluded)),
            ("upper.test", Intercept),
            ("sub.upper.test", Intercept),
        ];
        for (host, expected) in table {
            assert_eq!(p.decide(host, 443), *expected, "{host}");
        }
    }

    #[test]
    fn empty_include_means_every_host_and_exclude_wins() {
        let p = policy(&[], &["*.internal.test"]);
        assert_eq!(p.decide("www.cnn.com", 443), Intercept);
        assert_eq!(p.decide("internal.test", 443), Intercept);
        assert_eq!(p.decide("git.internal.test", 443), Tunnel(Excluded));
        let both = policy(&["example.com"], &["example.com"]);
        assert_eq!(both.decide("www.example.com", 443), Tunnel(Excluded));
    }

    #[test]
    fn ip_literals_invalid_names_ports_and_disabled() {
        let p = policy(&[], &[]);
        for host in [
            "10.0.0.1",
            "[2001:db8::1]",
            "::1",
            "_srv.example.com",
            "",
            "a..b",
        ] {
            assert_eq!(p.decide(host, 443), Tunnel(NotAHostName), "{host:?}");
        }
        assert_eq!(p.decide("example.com", 8443), Tunnel(Port));
        let p = policy(&[], &[]).with_ports(&[443, 8443]);
        assert_eq!(p.decide("example.com", 8443), Intercept);
        let off = Policy::new(false, &strings(&["example.com"]), &[]).unwrap();
        assert!(!off.enabled());
        assert_eq!(off.decide("example.com", 443), Tunnel(Disabled));
        assert_eq!(off.decide("10.0.0.1", 443), Tunnel(Disabled));
    }

    #[test]
    fn learned_pass_through() {
        let p = policy(&[], &[]);
        assert_eq!(p.decide("mtls.example", 443), Intercept);
        p.pass_through("MTLS.example.", ClientCertificate);
        assert_eq!(p.decide("mtls.example", 443), Tunnel(ClientCertificate));
        assert_eq!(p.decide("other.mtls.example", 443), Intercept);
        // Bounded: the oldest learned host is forgotten first.
        for i in 0..PASS_THROUGH_LIMIT {
            p.pass_through(&format!("h{i}.example"), ClientCertificate);
        }
        assert_eq!(p.decide("mtls.example", 443), Intercept);
        assert_eq!(p.decide("h0.example", 443), Tunnel(ClientCertificate));
        assert_eq!(
            p.decide(&format!("h{}.example", PASS_THROUGH_LIMIT - 1), 443),
            Tunnel(ClientCertificate)
        );
        p.pass_through("10.0.0.1", ClientCertificate);
        assert_eq!(p.lock_learned().reasons.len(), PASS_THROUGH_LIMIT);
    }

    #[test]
    fn invalid_patterns_are_named() {
        for bad in [
            "",
            "*",
            "*.",
            "=",
            "**.example.com",
            "exa mple.com",
            "10.0.0.1",
            "a.*.b",
        ] {
            let err = Policy::new(true, &strings(&[bad]), &[]).unwrap_err();
            assert_eq!(
                err,
                PolicyError::InvalidPattern {
                    list: "include",
                    pattern: bad.to_string()
                }
            );
            assert!(err.to_string().contains(&format!("{bad:?}")), "{err}");
        }
        let err = Policy::new(true, &[], &strings(&["bad_name.test"])).unwrap_err();
        assert!(err.to_string().starts_with("exclude pattern"), "{err}");
    }

    #[test]
    fn reasons_read_as_phrases() {
        assert_eq!(
            ClientCertificate.to_string(),
            "origin asks for a client certificate"
        );
        assert_eq!(Tunnel(Excluded), Decision::Tunnel(TunnelReason::Excluded));
    }
}
