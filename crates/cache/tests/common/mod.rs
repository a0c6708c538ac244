//! Helpers shared by the integration tests: request/response parts and a fixed clock.
#![allow(dead_code)]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::{Method, Request, Response, StatusCode};
use webpep_cache::{CacheConfig, HttpCache};

/// A fixed clock: `t(n)` is n seconds after an arbitrary recent instant.
pub fn t(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_700_000_000 + secs)
}

/// An HTTP-date `secs` after the fixed instant.
pub fn date(secs: u64) -> String {
    httpdate::fmt_http_date(t(secs))
}

/// Request parts for `method uri` with headers.
pub fn req_m(method: Method, uri: &str, headers: &[(&str, &str)]) -> http::request::Parts {
    let mut b = Request::builder().method(method).uri(uri);
    for (n, v) in headers {
        b = b.header(*n, *v);
    }
    b.body(()).unwrap().into_parts().0
}

/// GET request parts.
pub fn get(uri: &str, headers: &[(&str, &str)]) -> http::request::Parts {
    req_m(Method::GET, uri, headers)
}

/// Response parts.
pub fn resp(status: u16, headers: &[(&str, &str)]) -> http::response::Parts {
    let mut b = Response::builder().status(StatusCode::from_u16(status).unwrap());
    for (n, v) in headers {
        b = b.header(*n, *v);
    }
    b.body(()).unwrap().into_parts().0
}

/// A cache in a fresh temporary directory.
pub fn cache_in(dir: &std::path::Path, max_bytes: u64) -> HttpCache {
    let mut cfg = CacheConfig::new(dir);
    cfg.max_bytes = max_bytes;
    HttpCache::open(cfg).unwrap()
}
