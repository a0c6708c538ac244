//! Tests of the proxy URL mapping: `to_proxy_url` and its inverse `from_proxy_path`.

use proptest::prelude::*;
use url::Url;
use webpep_optimize::rewrite::{from_proxy_path, to_proxy_url};

const PROXY: &str = "10.0.0.12";

fn to_proxy(u: &str) -> Option<String> {
    to_proxy_url(&Url::parse(u).expect("test URL parses"), PROXY)
}

#[test]
fn to_proxy_url_table() {
    let cases: &[(&str, Option<&str>)] = &[
        (
            "http://www.a.com/x/y.gif?q=1",
            Some("http://10.0.0.12/www.a.com/x/y.gif?q=1"),
        ),
        ("http://www.a.com", Some("http://10.0.0.12/www.a.com/")),
        (
            "http://WWW.A.COM/Path",
            Some("http://10.0.0.12/www.a.com/Path"),
        ),
        (
            "http://www.a.com:8080/x",
            Some("http://10.0.0.12/www.a.com:8080/x"),
        ),
        (
            "http://www.a.com:80/x",
            Some("http://10.0.0.12/www.a.com/x"),
        ),
        (
            "http://www.a.com/x#frag",
            Some("http://10.0.0.12/www.a.com/x#frag"),
        ),
        (
            "http://www.a.com/x?a=1&b=2#f",
            Some("http://10.0.0.12/www.a.com/x?a=1&b=2#f"),
        ),
        (
            "http://i.cnn.net/images/plane.jpg",
            Some("http://10.0.0.12/i.cnn.net/images/plane.jpg"),
        ),
        ("http://192.0.2.7/a", Some("http://10.0.0.12/192.0.2.7/a")),
        (
            "http://[2001:db8::1]:8080/a",
            Some("http://10.0.0.12/[2001:db8::1]:8080/a"),
        ),
        (
            "http://bücher.example/a",
            Some("http://10.0.0.12/xn--bcher-kva.example/a"),
        ),
        (
            "http://www.a.com/a b",
            Some("http://10.0.0.12/www.a.com/a%20b"),
        ),
        ("https://www.a.com/x", None),
        ("data:image/gif;base64,R0lGOD", None),
        ("javascript:alert(1)", None),
        ("mailto:a@b.com", None),
        ("ftp://ftp.a.com/x", None),
        ("http://user:pw@www.a.com/", None),
        ("http://intranet/x", None),
        ("http://10.0.0.12/www.a.com/x", None), // already at the proxy
    ];
    for (input, want) in cases {
        assert_eq!(to_proxy(input).as_deref(), *want, "{input}");
    }
    // The proxy authority is used verbatim, port and all.
    let u = Url::parse("http://www.a.com/x").unwrap();
    assert_eq!(
        to_proxy_url(&u, "proxy.example:3128").as_deref(),
        Some("http://proxy.example:3128/www.a.com/x")
    );
    let at_proxy = Url::parse("http://proxy.example:3128/www.a.com/x").unwrap();
    assert_eq!(to_proxy_url(&at_proxy, "proxy.example:3128"), None);
}

#[test]
fn from_proxy_path_table() {
    let cases: &[(&str, Option<(&str, &str)>)] = &[
        (
            "/www.a.com/x/y.gif?q=1",
            Some(("www.a.com", "/x/y.gif?q=1")),
        ),
        ("/www.a.com", Some(("www.a.com", "/"))),
        ("/www.a.com/", Some(("www.a.com", "/"))),
        ("/www.a.com?x=1", Some(("www.a.com", "/?x=1"))),
        ("/WWW.A.Com/Case", Some(("www.a.com", "/Case"))),
        ("/www.a.com:8080/x", Some(("www.a.com:8080", "/x"))),
        ("/www.a.com:80/x", Some(("www.a.com", "/x"))),
        ("/192.0.2.7/a", Some(("192.0.2.7", "/a"))),
        ("/[::1]:8080/a", Some(("[::1]:8080", "/a"))),
        ("/localhost:3000/", Some(("localhost:3000", "/"))),
        ("/www.a.com//double", Some(("www.a.com", "//double"))),
        ("/www.a.com/x#frag", Some(("www.a.com", "/x"))),
        ("/favicon.ico", None),
        ("/index.html", None),
        ("/robots.txt", None),
        ("/", None),
        ("", None),
        ("www.a.com/x", None),
        ("/metrics", None),
        ("/www.a.com:99999/", None),
        ("/www.a.com:/", None),
        ("/1.2.3/x", None),
        ("/%77ww.a.com/x", None),
        ("/user@www.a.com/x", None),
    ];
    for (input, want) in cases {
        let got = from_proxy_path(input);
        let want = want.map(|(h, p)| (h.to_string(), p.to_string()));
        assert_eq!(got, want, "{input}");
    }
}

/// Hosts: DNS names (with ports sometimes), IPv4 literals.
fn arb_host() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z][a-z0-9-]{0,10}[a-z0-9](\\.[a-z0-9]{1,8}){0,2}\\.(com|net|org|de|co|io)",
        (1u8..=223, any::<u8>(), any::<u8>(), 1u8..=254)
            .prop_map(|(a, b, c, d)| format!("{a}.{b}.{c}.{d}")),
    ]
}

proptest! {
    #[test]
    fn round_trip(
        host in arb_host(),
        port in prop_oneof![Just(None), (1u16..=65535).prop_map(Some)],
        path in "(/[a-zA-Z0-9._~%!$&'()*+,;=:@ -]{0,12}){0,4}",
        query in proptest::option::of("[a-zA-Z0-9=&%/?:@ ._-]{0,20}"),
        fragment in proptest::option::of("[a-z0-9]{0,5}"),
    ) {
        let mut s = format!("http://{host}");
        if let Some(p) = port { s.push_str(&format!(":{p}")); }
        s.push_str(&path);
        if let Some(q) = &query { s.push('?'); s.push_str(q); }
        if let Some(f) = &fragment { s.push('#'); s.push_str(f); }
        let u = Url::parse(&s).expect("generated URL parses");
        let proxied = to_proxy_url(&u, "proxy.lab:8080").expect("http URLs with real hosts are proxyable");
        let p = Url::parse(&proxied).expect("proxy URL parses");
        prop_assert_eq!(p.host_str(), Some("proxy.lab"));
        prop_assert_eq!(p.port(), Some(8080));
        prop_assert_eq!(p.fragment(), u.fragment());
        let mut pq = p.path().to_string();
        if let Some(q) = p.query() { pq.push('?'); pq.push_str(q); }
        let (h, origin_pq) = from_proxy_path(&pq).expect("proxy path maps back");
        let want_host = match u.port() { Some(p) => format!("{}:{p}", u.host_str().unwrap_or("")), None => u.host_str().unwrap_or("").to_string() };
        prop_assert_eq!(h, want_host);
        let mut want_pq = u.path().to_string();
        if let Some(q) = u.query() { want_pq.push('?'); want_pq.push_str(q); }
        prop_assert_eq!(origin_pq, want_pq);
    }

    #[test]
    fn from_proxy_path_never_panics(s in "\\PC{0,40}") {
        if let Some((h, p)) = from_proxy_path(&s) {
            prop_assert!(p.starts_with('/'));
            prop_assert_eq!(h.to_ascii_lowercase(), h);
        }
    }
}
