//! Which `host[:port]` strings may appear as the first segment of a proxy path.

use url::Host;

/// Last labels that are file extensions seen at a site's root, not top-level domains in
/// use: `/favicon.ico` or `/index.html` is a request for the proxy, not for a host.
const FILE_EXTENSIONS: &[&str] = &[
    "ico", "html", "htm", "shtml", "xhtml", "php", "asp", "aspx", "jsp", "cgi", "gif", "jpg",
    "jpeg", "png", "webp", "svg", "bmp", "css", "js", "mjs", "json", "xml", "txt", "map", "woff",
    "woff2", "ttf", "otf", "eot", "swf", "pdf", "gz", "tgz", "mp3", "mp4", "wasm", "rss", "atom",
    "cfm", "jar", "exe",
];

/// True for a DNS name webpep will route to: lowercase LDH (and `_`) labels of 1–63
/// characters, at most 253 in all, at least two labels (or `localhost`), and a last label
/// that is neither numeric nor a file extension.
fn is_routable_domain(d: &str) -> bool {
    if d.is_empty() || d.len() > 253 {
        return false;
    }
    if d == "localhost" {
        return true;
    }
    let labels: Vec<&str> = d.split('.').collect();
    if labels.len() < 2 {
        return false;
    }
    let label_ok = |l: &&str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
    };
    if !labels.iter().all(label_ok) {
        return false;
    }
    let tld = labels[labels.len() - 1];
    !tld.bytes().all(|b| b.is_ascii_digit()) && !FILE_EXTENSIONS.contains(&tld)
}

/// The canonical form of `host[:port]`, or `None` when it is not a host webpep routes to.
/// Canonical: lowercase, the form the WHATWG URL parser would print (so `1.2.3` or
/// `0x7f.1` are refused rather than reinterpreted), IPv6 in brackets, no `:80`.
pub(crate) fn canonical_host_port(s: &str) -> Option<String> {
    let lower = s.to_ascii_lowercase();
    let (host, port) = if lower.starts_with('[') {
        let close = lower.find(']')?;
        let (h, rest) = lower.split_at(close + 1);
        match rest {
            "" => (h, None),
            _ => (h, Some(rest.strip_prefix(':')?)),
        }
    } else {
        match lower.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (lower.as_str(), None),
        }
    };
    let port = match port {
        None => None,
        Some(p) => {
            if p.is_empty() || p.len() > 5 || !p.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            match p.parse::<u16>().ok()? {
                0 => return None,
                80 => None,
                n => Some(n),
            }
        }
    };
    let parsed = Host::parse(host).ok()?;
    let ok = match &parsed {
        Host::Domain(d) => is_routable_domain(d),
        Host::Ipv4(_) | Host::Ipv6(_) => true,
    };
    if !ok || parsed.to_string() != host {
        return None;
    }
    Some(match port {
        Some(p) => format!("{host}:{p}"),
        None => host.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::canonical_host_port as c;

    #[test]
    fn accepts_canonical_hosts() {
        assert_eq!(c("www.a.com").as_deref(), Some("www.a.com"));
        assert_eq!(c("WWW.A.COM").as_deref(), Some("www.a.com"));
        assert_eq!(c("www.a.com:8080").as_deref(), Some("www.a.com:8080"));
        assert_eq!(c("www.a.com:80").as_deref(), Some("www.a.com"));
        assert_eq!(c("10.0.0.12").as_deref(), Some("10.0.0.12"));
        assert_eq!(c("[::1]:8080").as_deref(), Some("[::1]:8080"));
        assert_eq!(c("[2001:db8::1]").as_deref(), Some("[2001:db8::1]"));
        assert_eq!(c("localhost:3000").as_deref(), Some("localhost:3000"));
        assert_eq!(
            c("xn--bcher-kva.example").as_deref(),
            Some("xn--bcher-kva.example")
        );
        assert_eq!(c("a_b.example.org").as_deref(), Some("a_b.example.org"));
    }

    #[test]
    fn refuses_non_hosts() {
        for bad in [
            "",
            "favicon.ico",
            "index.html",
            "robots.txt",
            "intranet",
            "www.a.com:",
            "www.a.com:0",
            "www.a.com:99999",
            "www.a.com:8x",
            "1.2.3",
            "0x7f.0.0.1",
            "[::1",
            "[::1]x",
            "::1",
            "a..com",
            "-a.com",
            "a-.com",
            "a.com.",
            "büch.example",
            "%41.com",
            "a b.com",
            "1.2.3.4.5",
            "www.a.com:80:80",
            "user@a.com",
        ] {
            assert_eq!(c(bad), None, "{bad:?}");
        }
    }
}
