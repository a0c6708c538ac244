//! Table tests of the policy, one group per RFC 9111 section, with a fixed clock.

use super::*;
use std::time::UNIX_EPOCH;

/// A fixed "now" far from the epoch so subtractions never clamp by accident.
fn t(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_700_000_000 + secs)
}

fn date(secs: u64) -> String {
    httpdate::fmt_http_date(t(secs))
}

fn h(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut m = HeaderMap::new();
    for (n, v) in pairs {
        let name = HeaderName::from_bytes(n.as_bytes()).unwrap();
        m.append(name, HeaderValue::from_str(v).unwrap());
    }
    m
}

fn status(code: u16) -> StatusCode {
    StatusCode::from_u16(code).unwrap()
}

// ---- §3 storing responses ----

#[test]
fn rfc9111_3_storable_table() {
    let none: &[(&str, &str)] = &[];
    let auth: &[(&str, &str)] = &[("authorization", "Basic eDp5")];
    let req_no_store: &[(&str, &str)] = &[("cache-control", "no-store")];
    #[allow(clippy::type_complexity)]
    let cases: &[(
        &str,
        Method,
        &[(&str, &str)],
        u16,
        &[(&str, &str)],
        Result<(), NotStorable>,
    )] = &[
        ("plain 200", Method::GET, none, 200, none, Ok(())),
        (
            "HEAD not stored",
            Method::HEAD,
            none,
            200,
            none,
            Err(NotStorable::Method),
        ),
        (
            "POST not stored",
            Method::POST,
            none,
            200,
            &[("cache-control", "max-age=60")],
            Err(NotStorable::Method),
        ),
        ("404 heuristic", Method::GET, none, 404, none, Ok(())),
        ("301 heuristic", Method::GET, none, 301, none, Ok(())),
        ("308 heuristic", Method::GET, none, 308, none, Ok(())),
        ("410 heuristic", Method::GET, none, 410, none, Ok(())),
        ("501 heuristic", Method::GET, none, 501, none, Ok(())),
        (
            "206 never",
            Method::GET,
            none,
            206,
            &[("cache-control", "max-age=60")],
            Err(NotStorable::Status),
        ),
        (
            "304 never",
            Method::GET,
            none,
            304,
            none,
            Err(NotStorable::Status),
        ),
        (
            "302 without freshness",
            Method::GET,
            none,
            302,
            none,
            Err(NotStorable::Status),
        ),
        (
            "302 with max-age",
            Method::GET,
            none,
            302,
            &[("cache-control", "max-age=60")],
            Ok(()),
        ),
        (
            "500 with Expires",
            Method::GET,
            none,
            500,
            &[("expires", "Thu, 01 Jan 2099 00:00:00 GMT")],
            Ok(()),
        ),
        (
            "302 public",
            Method::GET,
            none,
            302,
            &[("cache-control", "public")],
            Ok(()),
        ),
        (
            "response no-store",
            Method::GET,
            none,
            200,
            &[("cache-control", "max-age=60, no-store")],
            Err(NotStorable::NoStore),
        ),
        (
            "request no-store",
            Method::GET,
            req_no_store,
            200,
            none,
            Err(NotStorable::NoStore),
        ),
        (
            "private",
            Method::GET,
            none,
            200,
            &[("cache-control", "private, max-age=60")],
            Err(NotStorable::Private),
        ),
        (
            "qualified private",
            Method::GET,
            none,
            200,
            &[("cache-control", "private=\"x-user\"")],
            Err(NotStorable::Private),
        ),
        (
            "no-cache is stored",
            Method::GET,
            none,
            200,
            &[("cache-control", "no-cache")],
            Ok(()),
        ),
        (
            "vary star",
            Method::GET,
            none,
            200,
            &[("vary", "accept, *")],
            Err(NotStorable::VaryStar),
        ),
        (
            "vary list",
            Method::GET,
            none,
            200,
            &[("vary", "Accept-Encoding")],
            Ok(()),
        ),
        (
            "set-cookie",
            Method::GET,
            none,
            200,
            &[("set-cookie", "a=b")],
            Err(NotStorable::SetCookie),
        ),
        (
            "authorization private-ish",
            Method::GET,
            auth,
            200,
            &[("cache-control", "max-age=60")],
            Err(NotStorable::Authorization),
        ),
        (
            "authorization public",
            Method::GET,
            auth,
            200,
            &[("cache-control", "public")],
            Ok(()),
        ),
        (
            "set-cookie public",
            Method::GET,
            none,
            200,
            &[("set-cookie", "a=b"), ("cache-control", "public")],
            Ok(()),
        ),
    ];
    for (name, method, req, code, resp, want) in cases {
        assert_eq!(
            storable(method, &h(req), status(*code), &h(resp)),
            *want,
            "{name}"
        );
    }
}

#[test]
fn rfc9111_3_5_authorization_needs_explicit_sharing() {
    let auth = h(&[("authorization", "Bearer x")]);
    let cases = [
        ("max-age=60", Err(NotStorable::Authorization)),
        ("public", Ok(())),
        ("s-maxage=60", Ok(())),
        ("must-revalidate, max-age=60", Ok(())),
    ];
    for (cc, want) in cases {
        let resp = h(&[("cache-control", cc)]);
        assert_eq!(
            storable(&Method::GET, &auth, StatusCode::OK, &resp),
            want,
            "{cc}"
        );
    }
}

// ---- §4.2.1 freshness lifetime ----

#[test]
#[allow(clippy::type_complexity)]
fn rfc9111_4_2_1_lifetime_precedence() {
    let hc = HeuristicConfig::default();
    let cases: &[(&str, Vec<(&str, String)>, u64)] = &[
        (
            "s-maxage wins",
            vec![
                ("cache-control", "max-age=10, s-maxage=20".into()),
                ("expires", date(1000)),
            ],
            20,
        ),
        (
            "max-age over expires",
            vec![
                ("cache-control", "max-age=10".into()),
                ("expires", date(1000)),
            ],
            10,
        ),
        (
            "expires minus date",
            vec![("date", date(0)), ("expires", date(300))],
            300,
        ),
        (
            "expires before date",
            vec![("date", date(300)), ("expires", date(0))],
            0,
        ),
        (
            "invalid expires is expired",
            vec![("expires", "0".into()), ("last-modified", date(0))],
            0,
        ),
        (
            "invalid max-age is stale",
            vec![("cache-control", "max-age=ten".into())],
            0,
        ),
        ("no info no heuristic", vec![("date", date(0))], 0),
    ];
    for (name, headers, want) in cases {
        let pairs: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
        let got = freshness_lifetime(StatusCode::OK, &h(&pairs), t(0), &hc);
        assert_eq!(got, Duration::from_secs(*want), "{name}");
    }
}

#[test]
fn rfc9111_4_2_1_missing_date_uses_response_time() {
    let hc = HeuristicConfig::default();
    let headers = h(&[("expires", &date(500))]);
    assert_eq!(
        freshness_lifetime(StatusCode::OK, &headers, t(100), &hc),
        Duration::from_secs(400)
    );
}

// ---- §4.2.2 heuristic freshness ----

#[test]
fn rfc9111_4_2_2_heuristic_is_ten_percent_capped() {
    let hc = HeuristicConfig::default();
    // Modified 1000 s before Date: 10 % = 100 s.
    let headers = h(&[("date", &date(10_000)), ("last-modified", &date(9_000))]);
    assert_eq!(
        freshness_lifetime(StatusCode::OK, &headers, t(10_000), &hc),
        Duration::from_secs(100)
    );
    // Modified a year ago: capped at 24 h.
    let year = 365 * 24 * 3600;
    let headers = h(&[("date", &date(year)), ("last-modified", &date(0))]);
    assert_eq!(
        freshness_lifetime(StatusCode::OK, &headers, t(year), &hc),
        Duration::from_secs(24 * 3600)
    );
    // A configured cap and fraction are honoured.
    let custom = HeuristicConfig {
        fraction: 0.5,
        max: Duration::from_secs(60),
    };
    let headers = h(&[("date", &date(100)), ("last-modified", &date(0))]);
    assert_eq!(
        freshness_lifetime(StatusCode::OK, &headers, t(100), &custom),
        Duration::from_secs(50)
    );
    let headers = h(&[("date", &date(1000)), ("last-modified", &date(0))]);
    assert_eq!(
        freshness_lifetime(StatusCode::OK, &headers, t(1000), &custom),
        Duration::from_secs(60)
    );
}

#[test]
fn rfc9111_4_2_2_heuristic_only_for_heuristically_cacheable_status() {
    let hc = HeuristicConfig::default();
    let headers = h(&[("date", &date(10_000)), ("last-modified", &date(0))]);
    assert_eq!(
        freshness_lifetime(status(302), &headers, t(10_000), &hc),
        Duration::ZERO
    );
    assert_eq!(
        freshness_lifetime(status(404), &headers, t(10_000), &hc),
        Duration::from_secs(1000)
    );
    let public = h(&[
        ("date", &date(10_000)),
        ("last-modified", &date(0)),
        ("cache-control", "public"),
    ]);
    assert_eq!(
        freshness_lifetime(status(302), &public, t(10_000), &hc),
        Duration::from_secs(1000)
    );
}

// ---- §4.2.3 age ----

#[test]
fn rfc9111_4_2_3_current_age() {
    // Date 10 s before receipt; request took 2 s; Age header 5 → corrected age 7 < apparent 10.
    let headers = h(&[("date", &date(90)), ("age", "5")]);
    assert_eq!(
        initial_age(&headers, t(98), t(100)),
        Duration::from_secs(10)
    );
    assert_eq!(
        current_age(&headers, t(98), t(100), t(130)),
        Duration::from_secs(40)
    );
    // Age header dominates when larger.
    let headers = h(&[("date", &date(100)), ("age", "50")]);
    assert_eq!(
        initial_age(&headers, t(98), t(100)),
        Duration::from_secs(52)
    );
    // Origin clock ahead: apparent age clamps to 0.
    let headers = h(&[("date", &date(200))]);
    assert_eq!(initial_age(&headers, t(100), t(100)), Duration::ZERO);
    // Malformed Age is ignored.
    let headers = h(&[("date", &date(100)), ("age", "abc")]);
    assert_eq!(
        current_age(&headers, t(100), t(100), t(101)),
        Duration::from_secs(1)
    );
}

// ---- §4.2 / §5.2 using a stored response ----

#[test]
fn rfc9111_5_2_usability_table() {
    use Usability::*;
    let cases: &[(&str, &str, &str, u64, u64, Usability)] = &[
        // (name, request CC, response CC, lifetime, age, expected)
        ("fresh", "", "", 100, 10, Fresh),
        ("expired", "", "", 100, 100, MustValidate),
        ("response no-cache", "", "no-cache", 100, 0, MustValidate),
        ("request no-cache", "no-cache", "", 100, 0, MustValidate),
        ("request max-age=0", "max-age=0", "", 100, 1, MustValidate),
        ("request max-age ok", "max-age=50", "", 100, 10, Fresh),
        ("min-fresh unmet", "min-fresh=20", "", 100, 90, MustValidate),
        ("min-fresh met", "min-fresh=20", "", 100, 70, Fresh),
        ("max-stale any", "max-stale", "", 100, 1000, Fresh),
        ("max-stale bounded ok", "max-stale=30", "", 100, 120, Fresh),
        (
            "max-stale bounded over",
            "max-stale=30",
            "",
            100,
            131,
            MustValidate,
        ),
        (
            "must-revalidate beats max-stale",
            "max-stale",
            "must-revalidate",
            100,
            101,
            MustValidate,
        ),
        (
            "proxy-revalidate beats max-stale",
            "max-stale",
            "proxy-revalidate",
            100,
            101,
            MustValidate,
        ),
        (
            "s-maxage beats max-stale",
            "max-stale",
            "s-maxage=100",
            100,
            101,
            MustValidate,
        ),
        (
            "invalid max-stale",
            "max-stale=x",
            "",
            100,
            101,
            MustValidate,
        ),
    ];
    for (name, req_cc, resp_cc, lifetime, age, want) in cases {
        let req = RequestDirectives::parse(&h(&[("cache-control", req_cc)]));
        let resp = ResponseDirectives::parse(&h(&[("cache-control", resp_cc)]));
        let got = usability(
            &req,
            &resp,
            Duration::from_secs(*lifetime),
            Duration::from_secs(*age),
        );
        assert_eq!(got, *want, "{name}");
    }
}

#[test]
fn rfc9111_5_4_pragma_forces_validation() {
    let req = RequestDirectives::parse(&h(&[("pragma", "no-cache")]));
    let resp = ResponseDirectives::default();
    assert_eq!(
        usability(&req, &resp, Duration::from_secs(100), Duration::ZERO),
        Usability::MustValidate
    );
}

#[test]
fn rfc9111_4_2_4_and_rfc5861_stale_on_error() {
    let cases: &[(&str, u64, bool, bool)] = &[
        // (response CC, age with lifetime 100, origin unreachable, allowed)
        ("", 500, true, true),
        ("", 500, false, false),
        ("stale-if-error=60", 150, false, true),
        ("stale-if-error=60", 161, true, false),
        ("must-revalidate", 101, true, false),
        ("s-maxage=100", 101, true, false),
        ("no-cache", 50, true, false),
    ];
    for (cc, age, unreachable, want) in cases {
        let resp = ResponseDirectives::parse(&h(&[("cache-control", cc)]));
        let got = stale_on_error_allowed(
            &resp,
            Duration::from_secs(100),
            Duration::from_secs(*age),
            *unreachable,
        );
        assert_eq!(got, *want, "{cc} age {age} unreachable {unreachable}");
    }
}

// ---- §4.1 Vary ----

#[test]
fn rfc9111_4_1_vary_names_and_secondary_key() {
    let resp = h(&[
        ("vary", "Accept-Encoding, accept-encoding"),
        ("vary", "User-Agent"),
    ]);
    let names = vary_names(&resp).unwrap();
    assert_eq!(names, vec!["accept-encoding", "user-agent"]);

    let a = secondary_key(
        &names,
        &h(&[("accept-encoding", "gzip,  br"), ("user-agent", "x")]),
    );
    let b = secondary_key(
        &names,
        &h(&[("Accept-Encoding", " gzip , br "), ("user-agent", "x")]),
    );
    assert_eq!(a, b, "whitespace and field-name case are normalised");
    let split = secondary_key(
        &names,
        &h(&[
            ("accept-encoding", "gzip"),
            ("accept-encoding", "br"),
            ("user-agent", "x"),
        ]),
    );
    assert_eq!(a, split, "field lines are combined");
    let c = secondary_key(
        &names,
        &h(&[("accept-encoding", "gzip"), ("user-agent", "x")]),
    );
    assert_ne!(a, c);
    let absent = secondary_key(&names, &h(&[("user-agent", "x")]));
    let empty = secondary_key(&names, &h(&[("accept-encoding", ""), ("user-agent", "x")]));
    assert_ne!(absent, empty, "absent and empty differ");
    assert_eq!(secondary_key(&[], &h(&[("accept", "x")])), "");
}

// ---- keys ----

#[test]
fn primary_key_normalises_scheme_host_and_default_port() {
    let none = HeaderMap::new();
    let k = |u: &str| primary_key(&u.parse::<Uri>().unwrap(), &none);
    assert_eq!(
        k("http://Example.COM:80/a?b=1"),
        Some("http://example.com/a?b=1".into())
    );
    assert_eq!(k("HTTP://example.com"), Some("http://example.com/".into()));
    assert_eq!(
        k("https://example.com:443/x"),
        Some("https://example.com/x".into())
    );
    assert_eq!(
        k("http://example.com:8080/x"),
        Some("http://example.com:8080/x".into())
    );
    assert_eq!(k("/relative"), None);
    let host = h(&[("host", "Example.com")]);
    assert_eq!(
        primary_key(&"/p".parse().unwrap(), &host),
        Some("http://example.com/p".into())
    );
}

// ---- §4.4 invalidation ----

#[test]
fn rfc9111_4_4_unsafe_methods_invalidate() {
    for m in [Method::POST, Method::PUT, Method::DELETE, Method::PATCH] {
        assert!(invalidates(&m), "{m}");
    }
    for m in [Method::GET, Method::HEAD, Method::OPTIONS, Method::TRACE] {
        assert!(!invalidates(&m), "{m}");
    }
}

#[test]
fn rfc9111_4_4_location_resolution_same_origin_only() {
    let target = "http://example.com/a/b?x=1";
    let cases = [
        ("http://Example.com/c", Some("http://example.com/c")),
        ("/c?q", Some("http://example.com/c?q")),
        ("c", Some("http://example.com/a/c")),
        ("//example.com/d", Some("http://example.com/d")),
        ("http://example.com.evil/c", None),
        ("http://other.com/c", None),
        ("https://example.com/c", None),
        ("", None),
    ];
    for (reference, want) in cases {
        assert_eq!(
            resolve_same_origin(target, reference).as_deref(),
            want,
            "{reference}"
        );
    }
}

// ---- §3.1 hop-by-hop ----

#[test]
fn rfc9111_3_1_hop_by_hop_not_stored() {
    let headers = h(&[
        ("connection", "close, X-Hop"),
        ("x-hop", "1"),
        ("keep-alive", "timeout=5"),
        ("transfer-encoding", "chunked"),
        ("content-type", "text/html"),
    ]);
    let kept = strip_hop_by_hop(&headers);
    assert_eq!(kept.len(), 1);
    assert!(kept.contains_key("content-type"));
}

// ---- §4.3 validation ----

#[test]
fn rfc9111_4_3_1_conditional_headers_from_validators() {
    let stored = h(&[("etag", "\"v1\""), ("last-modified", &date(0))]);
    let c = conditional_headers(&stored);
    assert_eq!(c.get(IF_NONE_MATCH).unwrap(), "\"v1\"");
    assert_eq!(c.get(IF_MODIFIED_SINCE).unwrap().to_str().unwrap(), date(0));
    assert!(conditional_headers(&h(&[("last-modified", "yesterday")])).is_empty());
}

#[test]
fn rfc9111_4_3_4_selecting_the_response_to_update() {
    let stored = h(&[("etag", "\"v1\""), ("last-modified", &date(0))]);
    assert!(not_modified_applies(&stored, &h(&[("etag", "\"v1\"")])));
    assert!(!not_modified_applies(&stored, &h(&[("etag", "\"v2\"")])));
    assert!(not_modified_applies(
        &stored,
        &h(&[("last-modified", &date(0))])
    ));
    assert!(!not_modified_applies(
        &stored,
        &h(&[("last-modified", &date(5))])
    ));
    assert!(not_modified_applies(&stored, &h(&[])));
    let weak = h(&[("etag", "W/\"v1\"")]);
    assert!(not_modified_applies(&weak, &h(&[("etag", "W/\"v1\"")])));
    assert!(
        !not_modified_applies(&weak, &h(&[("etag", "\"v1\"")])),
        "strong 304 tag vs weak stored"
    );
}

#[test]
fn rfc9111_4_3_4_freshening_updates_headers() {
    let stored = h(&[
        ("date", &date(0)),
        ("age", "30"),
        ("cache-control", "max-age=60"),
        ("etag", "\"v1\""),
        ("content-type", "image/webp"),
        ("content-length", "10"),
        ("x-old", "kept"),
    ]);
    let not_modified = h(&[
        ("cache-control", "max-age=600"),
        ("content-type", "image/png"),
        ("connection", "close"),
        ("etag", "\"v1\""),
    ]);
    let out = freshen_headers(&stored, &not_modified, t(1000));
    assert_eq!(out.get("cache-control").unwrap(), "max-age=600");
    assert_eq!(
        out.get("content-type").unwrap(),
        "image/webp",
        "representation metadata kept"
    );
    assert_eq!(out.get("content-length").unwrap(), "10");
    assert_eq!(out.get("x-old").unwrap(), "kept");
    assert!(out.get("age").is_none());
    assert!(out.get("connection").is_none());
    assert_eq!(
        out.get("date").unwrap().to_str().unwrap(),
        date(1000),
        "missing Date → receipt time"
    );
}

// ---- RFC 9110 §13: the client's conditional request ----

#[test]
fn rfc9110_13_client_conditionals() {
    let stored = h(&[
        ("etag", "\"v1\""),
        ("last-modified", &date(100)),
        ("date", &date(200)),
    ]);
    let get = Method::GET;
    let ok = StatusCode::OK;
    assert!(client_not_modified(
        &get,
        &h(&[("if-none-match", "\"v0\", \"v1\"")]),
        ok,
        &stored
    ));
    assert!(
        client_not_modified(&get, &h(&[("if-none-match", "W/\"v1\"")]), ok, &stored),
        "weak comparison"
    );
    assert!(client_not_modified(
        &get,
        &h(&[("if-none-match", "*")]),
        ok,
        &stored
    ));
    assert!(!client_not_modified(
        &get,
        &h(&[("if-none-match", "\"v2\"")]),
        ok,
        &stored
    ));
    // If-None-Match takes precedence over If-Modified-Since.
    assert!(!client_not_modified(
        &get,
        &h(&[
            ("if-none-match", "\"v2\""),
            ("if-modified-since", &date(500))
        ]),
        ok,
        &stored
    ));
    assert!(client_not_modified(
        &get,
        &h(&[("if-modified-since", &date(100))]),
        ok,
        &stored
    ));
    assert!(!client_not_modified(
        &get,
        &h(&[("if-modified-since", &date(99))]),
        ok,
        &stored
    ));
    assert!(!client_not_modified(
        &Method::POST,
        &h(&[("if-none-match", "*")]),
        ok,
        &stored
    ));
    assert!(!client_not_modified(
        &get,
        &h(&[("if-none-match", "\"v1\"")]),
        status(404),
        &stored
    ));
    assert!(!client_not_modified(&get, &h(&[]), ok, &stored));
}
