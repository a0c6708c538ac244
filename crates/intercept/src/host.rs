//! Host names as CONNECT requests and ClientHellos carry them.

use std::net::IpAddr;

/// Whether `s` is a host name by RFC 1123: dot-separated labels of 1 to 63 letters, digits and
/// hyphens, no label starting or ending with a hyphen, at most 253 characters (an optional
/// trailing dot aside), and a last label that is not all digits (so that an IPv4 address is
/// not a name). No wildcards and no underscores: a certificate is minted for what this accepts.
pub fn valid_host_name(s: &str) -> bool {
    let name = s.strip_suffix('.').unwrap_or(s);
    if name.is_empty() || name.len() > 253 {
        return false;
    }
    let labels_ok = name.split('.').all(|label| {
        !label.is_empty()
            && label.len() <= 63
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !label.starts_with('-')
            && !label.ends_with('-')
    });
    let last = name.rsplit('.').next().unwrap_or(name);
    labels_ok && !last.bytes().all(|b| b.is_ascii_digit())
}

/// What a CONNECT destination's host is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Host {
    /// A valid host name, lower-case, without a trailing dot.
    Name(String),
    Ip(IpAddr),
}

/// Classifies `host` (as in a CONNECT request: a name, an IPv4 literal or an IPv6 literal with
/// or without brackets). `None` for anything else.
pub(crate) fn classify(host: &str) -> Option<Host> {
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if let Ok(ip) = bare.parse::<IpAddr>() {
        return Some(Host::Ip(ip));
    }
    if !valid_host_name(host) {
        return None;
    }
    let name = host.strip_suffix('.').unwrap_or(host);
    Some(Host::Name(name.to_ascii_lowercase()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_names() {
        let long_label = "a".repeat(63);
        let too_long_label = "a".repeat(64);
        // 4 labels of 63 plus 3 dots: 255 characters.
        let too_long_name = [long_label.as_str(); 4].join(".");
        let max_name = format!("{}.{}", [long_label.as_str(); 3].join("."), "a".repeat(61));
        assert_eq!(max_name.len(), 253);
        let table: &[(&str, bool)] = &[
            ("www.cnn.com", true),
            ("WWW.CNN.COM", true),
            ("www.cnn.com.", true),
            ("a-b.example", true),
            ("xn--bcher-kva.example", true),
            ("localhost", true),
            ("3com.com", true),
            ("1.example", true),
            ("a", true),
            (&long_label, true),
            (&max_name, true),
            (&too_long_label, false),
            (&too_long_name, false),
            ("", false),
            (".", false),
            ("..", false),
            (".example.com", false),
            ("example..com", false),
            ("example.com..", false),
            ("-a.example", false),
            ("a-.example", false),
            ("*.example.com", false),
            ("_dmarc.example.com", false),
            ("a_b.example", false),
            ("exa mple.com", false),
            ("example.com:443", false),
            ("b\u{fc}cher.example", false),
            ("1.2.3.4", false),
            ("1.2.3.4.", false),
            ("123", false),
            ("::1", false),
            ("[::1]", false),
        ];
        for (name, valid) in table {
            assert_eq!(valid_host_name(name), *valid, "{name:?}");
        }
    }

    #[test]
    fn classification() {
        assert_eq!(
            classify("WWW.Example.COM."),
            Some(Host::Name("www.example.com".into()))
        );
        assert_eq!(
            classify("10.0.0.1"),
            Some(Host::Ip("10.0.0.1".parse().unwrap()))
        );
        assert_eq!(
            classify("[2001:db8::1]"),
            Some(Host::Ip("2001:db8::1".parse().unwrap()))
        );
        assert_eq!(classify("::1"), Some(Host::Ip("::1".parse().unwrap())));
        assert_eq!(classify("*.example.com"), None);
        assert_eq!(classify("[example.com]"), None);
    }
}
