//! The proxy-facing API end to end on a real temporary directory: hits, staleness, Vary,
//! variants, validation and freshening, heuristics, invalidation, client conditionals.

mod common;

use common::*;
use http::Method;
use webpep_cache::{client_not_modified, only_if_cached, CachedResponse, Lookup};

fn fresh(l: Lookup) -> CachedResponse {
    match l {
        Lookup::Fresh(r) => r,
        other => panic!("expected Fresh, got {other:?}"),
    }
}

fn stale(l: Lookup) -> CachedResponse {
    match l {
        Lookup::Stale(r) => r,
        other => panic!("expected Stale, got {other:?}"),
    }
}

fn is_miss(l: &Lookup) -> bool {
    matches!(l, Lookup::Miss)
}

#[test]
fn rfc9111_4_2_fresh_then_stale_with_age_header() {
    let dir = tempfile::tempdir().unwrap();
    let cache = cache_in(dir.path(), 1 << 20);
    let rq = get("http://example.com/a.css", &[]);
    let rs = resp(
        200,
        &[
            ("date", &date(0)),
            ("cache-control", "max-age=100"),
            ("etag", "\"1\""),
        ],
    );
    assert!(cache.store(&rq, &rs, b"body{}", "", t(0), t(0)).unwrap());

    let hit = fresh(cache.lookup(&rq, "", t(40)));
    assert_eq!(hit.body.as_ref(), b"body{}");
    assert_eq!(hit.headers.get("age").unwrap(), "40");
    // Same URI spelled differently (host case, default port) is the same key.
    let alias = get("http://EXAMPLE.com:80/a.css", &[]);
    assert!(matches!(cache.lookup(&alias, "", t(40)), Lookup::Fresh(_)));
    // HEAD is served from the GET entry.
    let head = common::req_m(Method::HEAD, "http://example.com/a.css", &[]);
    assert!(matches!(cache.lookup(&head, "", t(40)), Lookup::Fresh(_)));

    let old = stale(cache.lookup(&rq, "", t(100)));
    assert_eq!(
        old.conditional_headers().get("if-none-match").unwrap(),
        "\"1\""
    );

    let s = cache.stats();
    assert_eq!((s.hits, s.stale, s.stores, s.entries), (3, 1, 1, 1));
    assert!(is_miss(&cache.lookup(
        &get("http://example.com/other", &[]),
        "",
        t(0)
    )));
    assert_eq!(cache.stats().misses, 1);
}

#[test]
fn rfc9111_5_2_1_request_directives_force_validation() {
    let dir = tempfile::tempdir().unwrap();
    let cache = cache_in(dir.path(), 1 << 20);
    let rq = get("http://example.com/x", &[]);
    let rs = resp(
        200,
        &[
            ("date", &date(0)),
            ("cache-control", "max-age=100"),
            ("etag", "\"1\""),
        ],
    );
    cache.store(&rq, &rs, b"x", "", t(0), t(0)).unwrap();

    for h in [
        ("cache-control", "no-cache"),
        ("cache-control", "max-age=0"),
        ("pragma", "no-cache"),
        ("cache-control", "min-fresh=90"),
    ] {
        let r = get("http://example.com/x", &[h]);
        stale(cache.lookup(&r, "", t(20)));
    }
    // max-stale lets a stale entry through.
    let r = get("http://example.com/x", &[("cache-control", "max-stale=60")]);
    fresh(cache.lookup(&r, "", t(150)));
    let r = get(
        "http://example.com/x",
        &[("cache-control", "only-if-cached")],
    );
    assert!(only_if_cached(&r));
    assert!(!only_if_cached(&rq));
}

#[test]
fn rfc9111_3_not_storable_returns_false() {
    let dir = tempfile::tempdir().unwrap();
    let cache = cache_in(dir.path(), 1 << 20);
    let rq = get("http://example.com/p", &[]);
    let cases = [
        resp(200, &[("cache-control", "private, max-age=60")]),
        resp(200, &[("cache-control", "no-store")]),
        resp(200, &[("vary", "*"), ("cache-control", "max-age=60")]),
        resp(206, &[("cache-control", "max-age=60")]),
        // Storable in principle, but never fresh and without validators: useless.
        resp(200, &[("date", &date(0))]),
    ];
    for rs in &cases {
        assert!(
            !cache.store(&rq, rs, b"p", "", t(0), t(0)).unwrap(),
            "{:?}",
            rs.headers
        );
    }
    let post = common::req_m(Method::POST, "http://example.com/p", &[]);
    assert!(!cache
        .store(
            &post,
            &resp(200, &[("cache-control", "max-age=60")]),
            b"p",
            "",
            t(0),
            t(0)
        )
        .unwrap());
    assert_eq!(cache.stats().entries, 0);
}

#[test]
fn rfc9111_4_1_vary_two_variants() {
    let dir = tempfile::tempdir().unwrap();
    let cache = cache_in(dir.path(), 1 << 20);
    let rs = resp(
        200,
        &[
            ("cache-control", "max-age=100"),
            ("vary", "Accept-Encoding"),
            ("date", &date(0)),
        ],
    );
    let gz = get("http://example.com/v", &[("accept-encoding", "gzip")]);
    let br = get("http://example.com/v", &[("accept-encoding", "br, gzip")]);
    cache.store(&gz, &rs, b"gzip-body", "", t(0), t(0)).unwrap();
    cache.store(&br, &rs, b"br-body", "", t(0), t(0)).unwrap();
    assert_eq!(cache.stats().entries, 2);

    assert_eq!(
        fresh(cache.lookup(&gz, "", t(1))).body.as_ref(),
        b"gzip-body"
    );
    assert_eq!(fresh(cache.lookup(&br, "", t(1))).body.as_ref(), b"br-body");
    // Normalised: whitespace and field-name case do not matter.
    let br2 = get("http://example.com/v", &[("Accept-Encoding", "br ,  gzip")]);
    assert_eq!(
        fresh(cache.lookup(&br2, "", t(1))).body.as_ref(),
        b"br-body"
    );
    let none = get("http://example.com/v", &[]);
    assert!(is_miss(&cache.lookup(&none, "", t(1))));

    // The origin changes its Vary: old secondary keys are dropped.
    let rs2 = resp(
        200,
        &[
            ("cache-control", "max-age=100"),
            ("vary", "Accept-Language"),
        ],
    );
    cache.store(&gz, &rs2, b"by-lang", "", t(2), t(2)).unwrap();
    assert_eq!(cache.stats().entries, 1);
    assert_eq!(fresh(cache.lookup(&br, "", t(3))).body.as_ref(), b"by-lang");
}

#[test]
fn variants_are_part_of_the_key_and_invalidate_together() {
    let dir = tempfile::tempdir().unwrap();
    let cache = cache_in(dir.path(), 1 << 20);
    let rq = get("http://example.com/img.png", &[]);
    let rs = resp(200, &[("cache-control", "max-age=100")]);
    cache
        .store(&rq, &rs, b"original png", "", t(0), t(0))
        .unwrap();
    cache
        .store(&rq, &rs, b"webp", "img=balanced;webp", t(0), t(0))
        .unwrap();
    let other = get("http://example.com/img.png?x=1", &[]);
    cache.store(&other, &rs, b"other", "", t(0), t(0)).unwrap();

    assert_eq!(
        fresh(cache.lookup(&rq, "", t(1))).body.as_ref(),
        b"original png"
    );
    assert_eq!(
        fresh(cache.lookup(&rq, "img=balanced;webp", t(1)))
            .body
            .as_ref(),
        b"webp"
    );
    assert!(is_miss(&cache.lookup(&rq, "ce=br", t(1))));

    // §4.4: an unsafe request invalidates every variant of the URI, not its neighbours.
    cache.invalidate(&common::req_m(
        Method::POST,
        "http://example.com/img.png",
        &[],
    ));
    assert!(is_miss(&cache.lookup(&rq, "", t(1))));
    assert!(is_miss(&cache.lookup(&rq, "img=balanced;webp", t(1))));
    assert!(matches!(cache.lookup(&other, "", t(1)), Lookup::Fresh(_)));
    assert_eq!(cache.stats().entries, 1);
}

#[test]
fn rfc9111_4_3_4_freshening_on_304() {
    let dir = tempfile::tempdir().unwrap();
    let cache = cache_in(dir.path(), 1 << 20);
    let rq = get("http://example.com/f", &[]);
    let rs = resp(
        200,
        &[
            ("date", &date(0)),
            ("cache-control", "max-age=10"),
            ("etag", "\"v1\""),
            ("content-type", "text/plain"),
            ("x-origin", "first"),
        ],
    );
    cache.store(&rq, &rs, b"content", "", t(0), t(0)).unwrap();
    let old = stale(cache.lookup(&rq, "", t(50)));
    let cond = old.conditional_headers();
    assert_eq!(cond.get("if-none-match").unwrap(), "\"v1\"");

    // A 304 for a different strong ETag does not apply.
    let wrong = resp(304, &[("etag", "\"v2\""), ("date", &date(50))]);
    assert!(cache.freshen(&old, &wrong, t(50), t(51)).is_none());

    let nm = resp(
        304,
        &[
            ("date", &date(51)),
            ("cache-control", "max-age=100"),
            ("etag", "\"v1\""),
            ("x-origin", "second"),
        ],
    );
    let renewed = cache.freshen(&old, &nm, t(50), t(51)).unwrap();
    assert_eq!(renewed.body.as_ref(), b"content");
    assert_eq!(renewed.headers.get("x-origin").unwrap(), "second");
    assert_eq!(renewed.headers.get("content-type").unwrap(), "text/plain");
    assert_eq!(
        renewed.headers.get("age").unwrap(),
        "1",
        "response delay of 1 s"
    );

    // The stored entry is updated: fresh for 100 s after the 304.
    let hit = fresh(cache.lookup(&rq, "", t(120)));
    assert_eq!(hit.headers.get("x-origin").unwrap(), "second");
    stale(cache.lookup(&rq, "", t(160)));

    // A 304 after the entry was invalidated re-stores it from the body at hand.
    let old = stale(cache.lookup(&rq, "", t(160)));
    cache.invalidate(&common::req_m(Method::DELETE, "http://example.com/f", &[]));
    let nm = resp(304, &[("date", &date(160)), ("etag", "\"v1\"")]);
    assert!(cache.freshen(&old, &nm, t(160), t(160)).is_some());
    assert_eq!(
        fresh(cache.lookup(&rq, "", t(170))).body.as_ref(),
        b"content"
    );
}

#[test]
fn rfc9111_4_2_2_heuristic_freshness_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let cache = cache_in(dir.path(), 1 << 20);
    let rq = get("http://example.com/h", &[]);
    // Last modified 1000 s before Date: fresh for 100 s.
    let rs = resp(200, &[("date", &date(1000)), ("last-modified", &date(0))]);
    assert!(cache.store(&rq, &rs, b"h", "", t(1000), t(1000)).unwrap());
    let hit = fresh(cache.lookup(&rq, "", t(1099)));
    assert_eq!(hit.freshness_lifetime().as_secs(), 100);
    let old = stale(cache.lookup(&rq, "", t(1100)));
    assert!(old.conditional_headers().contains_key("if-modified-since"));
    // A status that is not heuristically cacheable gets no heuristic lifetime, and a 302
    // without explicit freshness is not even stored.
    let r302 = resp(302, &[("date", &date(1000)), ("last-modified", &date(0))]);
    assert!(!cache
        .store(
            &get("http://example.com/r", &[]),
            &r302,
            b"",
            "",
            t(1000),
            t(1000)
        )
        .unwrap());
}

#[test]
fn rfc9110_13_client_conditional_answered_from_cache() {
    let dir = tempfile::tempdir().unwrap();
    let cache = cache_in(dir.path(), 1 << 20);
    let rq = get("http://example.com/c", &[]);
    let rs = resp(
        200,
        &[("cache-control", "max-age=100"), ("etag", "\"abc\"")],
    );
    cache.store(&rq, &rs, b"c", "", t(0), t(0)).unwrap();
    let cond = get("http://example.com/c", &[("if-none-match", "\"abc\"")]);
    let hit = fresh(cache.lookup(&cond, "", t(1)));
    assert!(client_not_modified(&cond, &hit));
    let other = get("http://example.com/c", &[("if-none-match", "\"zzz\"")]);
    assert!(!client_not_modified(&other, &hit));
}

#[test]
fn authorization_response_stored_only_when_shared_explicitly() {
    let dir = tempfile::tempdir().unwrap();
    let cache = cache_in(dir.path(), 1 << 20);
    let rq = get(
        "http://example.com/auth",
        &[("authorization", "Basic eDp5")],
    );
    let plain = resp(200, &[("cache-control", "max-age=60")]);
    assert!(!cache.store(&rq, &plain, b"a", "", t(0), t(0)).unwrap());
    let public = resp(200, &[("cache-control", "public, max-age=60")]);
    assert!(cache.store(&rq, &public, b"a", "", t(0), t(0)).unwrap());
}

#[test]
fn hop_by_hop_fields_are_not_stored_and_content_length_is_truthful() {
    let dir = tempfile::tempdir().unwrap();
    let cache = cache_in(dir.path(), 1 << 20);
    let rq = get("http://example.com/hop", &[]);
    let rs = resp(
        200,
        &[
            ("cache-control", "max-age=60"),
            ("connection", "keep-alive"),
            ("keep-alive", "timeout=5"),
            ("content-length", "999"),
        ],
    );
    cache.store(&rq, &rs, b"four", "", t(0), t(0)).unwrap();
    let hit = fresh(cache.lookup(&rq, "", t(1)));
    assert!(hit.headers.get("connection").is_none());
    assert!(hit.headers.get("keep-alive").is_none());
    assert_eq!(hit.headers.get("content-length").unwrap(), "4");
}

#[test]
fn rfc9111_4_4_invalidate_after_covers_location_headers() {
    let dir = tempfile::tempdir().unwrap();
    let cache = cache_in(dir.path(), 1 << 20);
    let rs = resp(200, &[("cache-control", "max-age=100")]);
    for u in [
        "http://example.com/list",
        "http://example.com/item/7",
        "http://other.com/x",
    ] {
        cache
            .store(&get(u, &[]), &rs, u.as_bytes(), "", t(0), t(0))
            .unwrap();
    }
    let post = common::req_m(Method::POST, "http://example.com/list", &[]);
    // An error response invalidates nothing.
    cache.invalidate_after(&post, &resp(500, &[]));
    assert_eq!(cache.stats().entries, 3);
    let created = resp(
        201,
        &[
            ("location", "/item/7"),
            ("content-location", "http://other.com/x"),
        ],
    );
    cache.invalidate_after(&post, &created);
    assert!(is_miss(&cache.lookup(
        &get("http://example.com/list", &[]),
        "",
        t(1)
    )));
    assert!(is_miss(&cache.lookup(
        &get("http://example.com/item/7", &[]),
        "",
        t(1)
    )));
    // Another origin named in Content-Location is left alone.
    assert!(matches!(
        cache.lookup(&get("http://other.com/x", &[]), "", t(1)),
        Lookup::Fresh(_)
    ));
    // A GET never invalidates.
    cache.invalidate_after(&get("http://other.com/x", &[]), &created);
    assert_eq!(cache.stats().entries, 1);
}

#[test]
fn stale_served_on_origin_failure_only_when_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let cache = cache_in(dir.path(), 1 << 20);
    let plain = get("http://example.com/s1", &[]);
    let strict = get("http://example.com/s2", &[]);
    cache
        .store(
            &plain,
            &resp(200, &[("cache-control", "max-age=10, stale-if-error=100")]),
            b"1",
            "",
            t(0),
            t(0),
        )
        .unwrap();
    cache
        .store(
            &strict,
            &resp(200, &[("cache-control", "max-age=10, must-revalidate")]),
            b"2",
            "",
            t(0),
            t(0),
        )
        .unwrap();
    let old = stale(cache.lookup(&plain, "", t(50)));
    assert!(old.usable_on_origin_error(t(50), false));
    assert!(
        !old.usable_on_origin_error(t(200), true),
        "past stale-if-error"
    );
    let old = stale(cache.lookup(&strict, "", t(50)));
    assert!(!old.usable_on_origin_error(t(50), true));
}
