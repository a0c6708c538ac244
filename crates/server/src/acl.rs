//! Access control (DESIGN §9): which clients may use the proxy, which ports CONNECT may reach,
//! and which resolved destinations are refused (private, loopback, link-local, multicast…)
//! unless the operator allowed them. Pure functions over addresses.

use std::net::IpAddr;

use ipnet::IpNet;

use crate::config::AclConfig;

/// The compiled access rules.
#[derive(Debug, Clone)]
pub struct Acl {
    allow_clients: Vec<IpNet>,
    connect_ports: Vec<u16>,
    allow_destinations: Vec<IpNet>,
}

impl Acl {
    /// Builds the rules from `[acl]`.
    pub fn new(cfg: &AclConfig) -> Self {
        Acl {
            allow_clients: cfg.allow_clients.clone(),
            connect_ports: cfg.connect_ports.clone(),
            allow_destinations: cfg.allow_destinations.clone(),
        }
    }

    /// True when `client` may use the proxy.
    pub fn client_allowed(&self, client: IpAddr) -> bool {
        let c = canonical(client);
        self.allow_clients.iter().any(|n| n.contains(&c))
    }

    /// True when CONNECT may reach `port`.
    pub fn connect_port_allowed(&self, port: u16) -> bool {
        self.connect_ports.contains(&port)
    }

    /// True when the proxy may connect to `ip` (after resolution: the check that counts).
    pub fn destination_allowed(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        !is_restricted(ip) || self.allow_destinations.iter().any(|n| n.contains(&ip))
    }
}

/// An IPv4-mapped IPv6 address judged as the IPv4 address it carries.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    }
}

/// Addresses a public proxy must not reach on a client's behalf.
pub fn is_restricted(ip: IpAddr) -> bool {
    match canonical(ip) {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_multicast()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || o[0] == 0
                || (o[0] == 100 && (o[1] & 0xc0) == 64) // 100.64/10 carrier-grade NAT
        }
        IpAddr::V6(v6) => {
            let s = v6.segments();
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (s[0] & 0xfe00) == 0xfc00 // fc00::/7 unique local
                || (s[0] & 0xffc0) == 0xfe80 // fe80::/10 link local
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn restricted_ranges() {
        for r in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.1.1",
            "224.0.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "::1",
            "fc00::1",
            "fd12::1",
            "fe80::1",
            "ff02::1",
            "::",
            "::ffff:127.0.0.1",
            "100.64.0.1",
        ] {
            assert!(is_restricted(ip(r)), "{r}");
        }
        for ok in [
            "8.8.8.8",
            "172.32.0.1",
            "93.184.216.34",
            "2001:db8::1",
            "::ffff:8.8.8.8",
        ] {
            assert!(!is_restricted(ip(ok)), "{ok}");
        }
    }

    #[test]
    fn allow_list_overrides() {
        let cfg = AclConfig {
            allow_destinations: vec!["127.0.0.0/8".parse().unwrap()],
            ..AclConfig::default()
        };
        let acl = Acl::new(&cfg);
        assert!(acl.destination_allowed(ip("127.0.0.5")));
        assert!(!acl.destination_allowed(ip("10.0.0.1")));
        let default = Acl::new(&AclConfig::default());
        assert!(!default.destination_allowed(ip("127.0.0.1")));
        assert!(default.client_allowed(ip("127.0.0.1")));
        assert!(default.client_allowed(ip("::ffff:127.0.0.1")));
        assert!(!default.client_allowed(ip("192.0.2.1")));
        assert!(default.connect_port_allowed(443));
        assert!(!default.connect_port_allowed(25));
    }
}
