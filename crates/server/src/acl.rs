//! Access control (DESIGN §9): which clients may use the proxy, which ports CONNECT may reach,
//! and which resolved destinations are refused (private, loopback, link-local, multicast…)
//! unless the operator allowed them. Pure functions over addresses.
//!
//! An IPv6 address that stands for an IPv4 address (mapped, IPv4-compatible, NAT64, 6to4) is
//! judged as that IPv4 address, against the restricted ranges and the allow list alike: the
//! v6 form must not be a way around the v4 rules (`[64:ff9b::a9fe:a9fe]` is the cloud
//! metadata address 169.254.169.254 through a NAT64 gateway).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

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

    /// True when the proxy may connect to `ip` (after resolution: the check that counts): it is
    /// not restricted, or it (or the IPv4 address it stands for) is in `allow_destinations`.
    pub fn destination_allowed(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        let listed = |ip: IpAddr| self.allow_destinations.iter().any(|n| n.contains(&ip));
        if listed(ip) {
            return true;
        }
        match ip {
            IpAddr::V4(v4) => !is_restricted_v4(v4),
            IpAddr::V6(v6) => match classify_v6(v6) {
                V6Class::Global => true,
                V6Class::Restricted => false,
                V6Class::Carries(v4) => !is_restricted_v4(v4) || listed(IpAddr::V4(v4)),
            },
        }
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
        IpAddr::V4(v4) => is_restricted_v4(v4),
        IpAddr::V6(v6) => match classify_v6(v6) {
            V6Class::Global => false,
            V6Class::Restricted => true,
            V6Class::Carries(v4) => is_restricted_v4(v4),
        },
    }
}

fn is_restricted_v4(v4: Ipv4Addr) -> bool {
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

/// How a destination IPv6 address (not IPv4-mapped) is judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum V6Class {
    /// Global unicast: allowed.
    Global,
    /// Refused unless listed.
    Restricted,
    /// A form that reaches (or stands for) this IPv4 address: judged as it.
    Carries(Ipv4Addr),
}

fn classify_v6(v6: Ipv6Addr) -> V6Class {
    let s = v6.segments();
    let o = v6.octets();
    let last32 = Ipv4Addr::new(o[12], o[13], o[14], o[15]);
    match s {
        // Unspecified and loopback, not IPv4-compatible forms of 0.0.0.0 and 0.0.0.1.
        [0, 0, 0, 0, 0, 0, 0, 0 | 1] => V6Class::Restricted,
        // IPv4-compatible ::/96 (RFC 4291 §2.5.5.1, deprecated).
        [0, 0, 0, 0, 0, 0, _, _] => V6Class::Carries(last32),
        // NAT64 well-known prefix 64:ff9b::/96 (RFC 6052): the gateway connects to the IPv4
        // address, which IPv6-only networks need for IPv4-only origins.
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => V6Class::Carries(last32),
        // 6to4 2002::/16 (RFC 3056): the IPv4 address of the site's router in bits 16..48.
        [0x2002, ..] => V6Class::Carries(Ipv4Addr::new(o[2], o[3], o[4], o[5])),
        // Local-use NAT64 64:ff9b:1::/48 (RFC 8215): where the IPv4 address sits depends on
        // the prefix length the network chose, so it cannot be judged.
        [0x64, 0xff9b, 1, ..] => V6Class::Restricted,
        // Teredo 2001::/32 (RFC 4380): it carries its server's and (inverted) the client's NAT
        // IPv4 addresses, and a host with a Teredo interface sends UDP straight to the
        // latter; no origin serves from it.
        [0x2001, 0, ..] => V6Class::Restricted,
        // Everything outside global unicast 2000::/3 (RFC 4291 §2.4): the rest of ::/8 and
        // 64:ff9b::/32, discard-only 100::/64, unique local fc00::/7, link local fe80::/10,
        // site local fec0::/10 (deprecated), multicast ff00::/8, SRv6 SIDs 5f00::/16 and the
        // unassigned space.
        _ if s[0] & 0xe000 != 0x2000 => V6Class::Restricted,
        _ => V6Class::Global,
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
    fn ipv6_forms_carrying_ipv4_are_judged_by_it() {
        for (r, why) in [
            ("::127.0.0.1", "IPv4-compatible loopback"),
            ("::10.0.0.1", "IPv4-compatible private"),
            ("::169.254.169.254", "IPv4-compatible link local"),
            ("64:ff9b::a9fe:a9fe", "NAT64 to the metadata address"),
            ("64:ff9b::127.0.0.1", "NAT64 to loopback"),
            ("64:ff9b::192.168.0.1", "NAT64 to private"),
            ("64:ff9b::100.64.0.1", "NAT64 to carrier-grade NAT"),
            ("2002:7f00:1::1", "6to4 of 127.0.0.1"),
            ("2002:a9fe:a9fe::1", "6to4 of 169.254.169.254"),
            ("2002:c0a8:101:1::1", "6to4 of 192.168.1.1"),
            ("2002::1", "6to4 of 0.0.0.0"),
        ] {
            assert!(is_restricted(ip(r)), "{r}: {why}");
        }
        for ok in [
            "64:ff9b::8.8.8.8",
            "64:ff9b::5db8:d822",
            "2002:808:808::1",
            "::8.8.8.8",
        ] {
            assert!(!is_restricted(ip(ok)), "{ok}");
            assert!(
                Acl::new(&AclConfig::default()).destination_allowed(ip(ok)),
                "{ok}"
            );
        }
    }

    #[test]
    fn ipv6_forms_whose_ipv4_cannot_be_judged_are_restricted() {
        for r in [
            // Local-use NAT64 (RFC 8215), public or not.
            "64:ff9b:1::a00:1",
            "64:ff9b:1::808:808",
            "64:ff9b:1:ffff::1",
            // Teredo: the RFC 4380 example (server 65.54.227.120, client 192.0.2.45), and one
            // whose client is 127.0.0.1 (stored inverted: 80ff:fffe).
            "2001:0:4136:e378:8000:63bf:3fff:fdd2",
            "2001:0:4136:e378:8000:0:80ff:fffe",
            // Elsewhere in 64:ff9b::/32 and ::/8 (SIIT's ::ffff:0:0:0/96).
            "64:ff9b:2::1",
            "::ffff:0:7f00:1",
            "::1:0:0:1",
        ] {
            assert!(is_restricted(ip(r)), "{r}");
        }
    }

    #[test]
    fn other_special_ipv6_ranges_are_restricted() {
        for r in [
            "fec0::1", // site local (deprecated)
            "feff::1", // site local
            "100::1",  // discard only
            "100::ffff:ffff:ffff:ffff",
            "5f00::1", // SRv6 SIDs
            "4000::1", // unassigned
            "e000::1", // unassigned
            "1::",     // reserved ::/8
        ] {
            assert!(is_restricted(ip(r)), "{r}");
        }
        for ok in [
            "2001:db8::1",     // documentation, as before
            "3fff::1",         // documentation (RFC 9637)
            "2606:4700::1111", // global unicast
            "2001:4860:4860::8888",
            "2001:1:0:1::1", // next to Teredo, not in it
            "3fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
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

    #[test]
    fn allow_list_applies_to_the_ipv4_an_ipv6_form_carries() {
        let loopback = Acl::new(&AclConfig {
            allow_destinations: vec!["127.0.0.0/8".parse().unwrap()],
            ..AclConfig::default()
        });
        let default = Acl::new(&AclConfig::default());
        for listed in [
            "::ffff:127.0.0.1",
            "::127.0.0.1",
            "64:ff9b::127.0.0.1",
            "2002:7f00:1::1",
        ] {
            assert!(loopback.destination_allowed(ip(listed)), "{listed}");
            assert!(!default.destination_allowed(ip(listed)), "{listed}");
        }
        for still_refused in [
            "::1",                         // IPv6 loopback is not 127.0.0.0/8
            "64:ff9b::a9fe:a9fe",          // another IPv4 address
            "64:ff9b:1::7f00:1",           // local-use NAT64: no IPv4 to judge
            "2001:0:7f00:1:0:0:80ff:fffe", // Teredo, server and client 127.0.0.1
        ] {
            assert!(
                !loopback.destination_allowed(ip(still_refused)),
                "{still_refused}"
            );
        }
        // Listing the IPv6 range itself is what lets those through.
        let nat64 = Acl::new(&AclConfig {
            allow_destinations: vec![
                "64:ff9b:1::/48".parse().unwrap(),
                "2001::/32".parse().unwrap(),
            ],
            ..AclConfig::default()
        });
        assert!(nat64.destination_allowed(ip("64:ff9b:1::a00:1")));
        assert!(nat64.destination_allowed(ip("2001:0:4136:e378:8000:63bf:3fff:fdd2")));
        assert!(!nat64.destination_allowed(ip("64:ff9b::a9fe:a9fe")));
        // The metadata address is allowed through NAT64 only when it is allowed itself.
        let metadata = Acl::new(&AclConfig {
            allow_destinations: vec!["169.254.169.254/32".parse().unwrap()],
            ..AclConfig::default()
        });
        assert!(metadata.destination_allowed(ip("64:ff9b::a9fe:a9fe")));
        assert!(!metadata.destination_allowed(ip("64:ff9b::a9fe:a9fd")));
    }
}
