//! The RFC 9111 rules of a shared cache as pure functions: no I/O, no clock (every function
//! takes the times it needs), so each rule is tested with fixed values.
//!
//! Covered: storability (§3), freshness lifetime and heuristics (§4.2.1–4.2.2), age (§4.2.3),
//! request and response directives (§5.2), validation and freshening (§4.3), invalidation
//! (§4.4), the Vary secondary key (§4.1), and the client's own conditional request
//! (RFC 9110 §13.1–13.2) which the proxy answers from the cache.

use std::time::{Duration, SystemTime};

use http::header::{
    HeaderName, AGE, AUTHORIZATION, CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_RANGE, CONTENT_TYPE,
    DATE, ETAG, EXPIRES, HOST, IF_MODIFIED_SINCE, IF_NONE_MATCH, LAST_MODIFIED, SET_COOKIE, VARY,
};
use http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};

use crate::directives::{split_list, RequestDirectives, ResponseDirectives, Seconds};

/// Tunables of the freshness heuristic (§4.2.2).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HeuristicConfig {
    /// The fraction of (Date − Last-Modified) used as lifetime; 0.1 is the RFC's example.
    pub fraction: f64,
    /// The cap on a heuristic lifetime.
    pub max: Duration,
}

impl Default for HeuristicConfig {
    fn default() -> Self {
        HeuristicConfig {
            fraction: 0.1,
            max: Duration::from_secs(24 * 3600),
        }
    }
}

/// Why a response is not stored (§3), for logs and tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotStorable {
    /// Only GET responses are stored: a HEAD response has no body to serve a later GET.
    Method,
    /// 1xx, 206 (ranges are not cached), 304, or a status that is neither heuristically
    /// cacheable nor given explicit freshness.
    Status,
    /// `no-store` in the request or the response.
    NoStore,
    /// `private`: a shared cache must not store it.
    Private,
    /// The request carried `Authorization` and the response did not allow sharing (§3.5).
    Authorization,
    /// `Vary: *` can never be matched by a later request.
    VaryStar,
    /// `Set-Cookie` without an explicit `public`/`s-maxage`: replaying one user's cookie to
    /// others is what shared caches (Varnish's builtin policy) refuse to do.
    SetCookie,
    /// The URI has no authority (and the request no Host): no key can be formed.
    NoKey,
}

/// Status codes heuristically cacheable by default (RFC 9110 §15.1), minus 206: ranges are not
/// cached here.
pub fn heuristically_cacheable(status: StatusCode) -> bool {
    matches!(
        status.as_u16(),
        200 | 203 | 204 | 300 | 301 | 308 | 404 | 405 | 410 | 414 | 501
    )
}

/// Whether a response to `method` with these headers may be stored by a shared cache (§3).
pub fn storable(
    method: &Method,
    req_headers: &HeaderMap,
    status: StatusCode,
    resp_headers: &HeaderMap,
) -> Result<(), NotStorable> {
    if method != Method::GET {
        return Err(NotStorable::Method);
    }
    let code = status.as_u16();
    if !(200..600).contains(&code) || code == 206 || code == 304 {
        return Err(NotStorable::Status);
    }
    let req = RequestDirectives::parse(req_headers);
    let resp = ResponseDirectives::parse(resp_headers);
    if req.no_store || resp.no_store {
        return Err(NotStorable::NoStore);
    }
    if resp.private {
        return Err(NotStorable::Private);
    }
    if req_headers.contains_key(AUTHORIZATION)
        && !(resp.public || resp.s_maxage.is_some() || resp.must_revalidate)
    {
        return Err(NotStorable::Authorization);
    }
    if vary_names(resp_headers).is_none() {
        return Err(NotStorable::VaryStar);
    }
    if resp_headers.contains_key(SET_COOKIE) && !(resp.public || resp.s_maxage.is_some()) {
        return Err(NotStorable::SetCookie);
    }
    let explicit =
        resp.max_age.is_some() || resp.s_maxage.is_some() || resp_headers.contains_key(EXPIRES);
    if !(explicit || resp.public || heuristically_cacheable(status)) {
        return Err(NotStorable::Status);
    }
    Ok(())
}

/// Parse an HTTP-date header; `None` when absent or malformed.
pub fn header_date(headers: &HeaderMap, name: &HeaderName) -> Option<SystemTime> {
    let value = headers.get(name)?.to_str().ok()?;
    httpdate::parse_http_date(value.trim()).ok()
}

/// The response's Date, or the time it was received when Date is absent or bad (§4.2.1).
fn date_value(headers: &HeaderMap, response_time: SystemTime) -> SystemTime {
    header_date(headers, &DATE).unwrap_or(response_time)
}

fn secs_between(later: SystemTime, earlier: SystemTime) -> Duration {
    later.duration_since(earlier).unwrap_or(Duration::ZERO)
}

/// The freshness lifetime of a stored response for a shared cache (§4.2.1): s-maxage, then
/// max-age, then Expires − Date, then the heuristic of §4.2.2.
pub fn freshness_lifetime(
    status: StatusCode,
    headers: &HeaderMap,
    response_time: SystemTime,
    heuristic: &HeuristicConfig,
) -> Duration {
    let d = ResponseDirectives::parse(headers);
    if let Some(s) = d.s_maxage {
        return Duration::from_secs(s.or_zero());
    }
    if let Some(s) = d.max_age {
        return Duration::from_secs(s.or_zero());
    }
    if headers.contains_key(EXPIRES) {
        // §5.3: an invalid Expires (e.g. "0") means "already expired".
        return match header_date(headers, &EXPIRES) {
            Some(expires) => secs_between(expires, date_value(headers, response_time)),
            None => Duration::ZERO,
        };
    }
    if !(heuristically_cacheable(status) || d.public) {
        return Duration::ZERO;
    }
    match header_date(headers, &LAST_MODIFIED) {
        Some(last_modified) => {
            let since = secs_between(date_value(headers, response_time), last_modified);
            let fraction = heuristic.fraction.clamp(0.0, 1.0);
            since.mul_f64(fraction).min(heuristic.max)
        }
        None => Duration::ZERO,
    }
}

/// The `Age` header's value in seconds; a malformed value is ignored (treated as 0).
pub fn age_value(headers: &HeaderMap) -> Duration {
    headers
        .get(AGE)
        .and_then(|v| v.to_str().ok())
        .and_then(|s| s.trim().parse::<u64>().ok())
        .map_or(Duration::ZERO, Duration::from_secs)
}

/// The corrected initial age of a response when it was received (§4.2.3).
pub fn initial_age(
    headers: &HeaderMap,
    request_time: SystemTime,
    response_time: SystemTime,
) -> Duration {
    let apparent_age = secs_between(response_time, date_value(headers, response_time));
    let response_delay = secs_between(response_time, request_time);
    let corrected_age_value = age_value(headers) + response_delay;
    apparent_age.max(corrected_age_value)
}

/// The current age of a stored response at `now` (§4.2.3).
pub fn current_age(
    headers: &HeaderMap,
    request_time: SystemTime,
    response_time: SystemTime,
    now: SystemTime,
) -> Duration {
    initial_age(headers, request_time, response_time) + secs_between(now, response_time)
}

/// What a stored response may be used for, given the request (§4.2, §5.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Usability {
    /// Serve it without contacting the origin.
    Fresh,
    /// It must be validated first (stale, or a directive forces validation).
    MustValidate,
}

/// Decide whether a stored response with `lifetime` and `age` can answer a request with
/// `req` directives (§4.2, §4.2.4, §5.2.1, §5.2.2).
pub fn usability(
    req: &RequestDirectives,
    resp: &ResponseDirectives,
    lifetime: Duration,
    age: Duration,
) -> Usability {
    use Usability::*;
    if req.no_cache || resp.no_cache {
        return MustValidate;
    }
    if let Some(max_age) = req.max_age {
        // §5.2.1.1: unwilling to accept a response whose age is greater than max-age.
        if age > Duration::from_secs(max_age.or_zero()) {
            return MustValidate;
        }
    }
    let fresh = lifetime > age;
    if fresh {
        let remaining = lifetime - age;
        return match req.min_fresh {
            Some(min) if remaining < Duration::from_secs(min.or_zero()) => MustValidate,
            _ => Fresh,
        };
    }
    // Stale: only max-stale lets it through, and never past must-revalidate & co (§4.2.4).
    if resp.forbids_stale() {
        return MustValidate;
    }
    let staleness = age - lifetime;
    match req.max_stale {
        Some(None) => Fresh,
        Some(Some(Seconds::Value(n))) if staleness <= Duration::from_secs(n) => Fresh,
        _ => MustValidate,
    }
}

/// Whether a stale stored response may be served because the origin failed (RFC 9111 §4.2.4
/// allows it when the cache is disconnected; RFC 5861 `stale-if-error` also covers 5xx answers).
/// Never past `must-revalidate`, `proxy-revalidate`, `s-maxage` or `no-cache`; with
/// `stale-if-error=N` only up to N seconds of staleness; without it only when the origin was
/// unreachable (`origin_unreachable`), not when it answered with an error.
pub fn stale_on_error_allowed(
    resp: &ResponseDirectives,
    lifetime: Duration,
    age: Duration,
    origin_unreachable: bool,
) -> bool {
    if resp.forbids_stale() || resp.no_cache {
        return false;
    }
    let staleness = age.saturating_sub(lifetime);
    match resp.stale_if_error {
        Some(Seconds::Value(n)) => staleness <= Duration::from_secs(n),
        Some(Seconds::Invalid) => false,
        None => origin_unreachable,
    }
}

/// The field names listed in Vary, lower-cased, in order, without duplicates; `None` for
/// `Vary: *` (§4.1), which no request can match.
pub fn vary_names(headers: &HeaderMap) -> Option<Vec<String>> {
    let mut names: Vec<String> = Vec::new();
    for value in headers.get_all(VARY) {
        let text = value.to_str().ok()?;
        for name in split_list(text) {
            if name == "*" {
                return None;
            }
            let lower = name.to_ascii_lowercase();
            if !names.contains(&lower) {
                names.push(lower);
            }
        }
    }
    Some(names)
}

/// One request header's value normalised for Vary matching: field lines joined with ", ",
/// list members trimmed, runs of whitespace collapsed (§4.1 allows such normalisation).
fn normalised_value(headers: &HeaderMap, name: &str) -> Option<String> {
    let mut members: Vec<String> = Vec::new();
    let mut present = false;
    for value in headers.get_all(name) {
        present = true;
        let text = String::from_utf8_lossy(value.as_bytes());
        for member in text.split(',') {
            let collapsed = member.split_whitespace().collect::<Vec<_>>().join(" ");
            if !collapsed.is_empty() {
                members.push(collapsed);
            }
        }
    }
    present.then(|| members.join(", "))
}

/// The secondary cache key: the request's normalised values of the Vary fields (§4.1). An
/// absent field and an empty one are different keys.
pub fn secondary_key(vary: &[String], req_headers: &HeaderMap) -> String {
    let mut key = String::new();
    for name in vary {
        key.push_str(name);
        match normalised_value(req_headers, name) {
            Some(v) => {
                key.push('=');
                key.push_str(&v);
            }
            None => key.push('!'),
        }
        key.push('\n');
    }
    key
}

/// The primary cache key: scheme + authority + path-and-query, scheme and host lower-cased and
/// the default port dropped. Origin-form URIs fall back to `http` and the Host header.
pub fn primary_key(uri: &Uri, headers: &HeaderMap) -> Option<String> {
    let scheme = uri.scheme_str().unwrap_or("http").to_ascii_lowercase();
    let authority = match uri.authority() {
        Some(a) => a.as_str().to_string(),
        None => headers.get(HOST)?.to_str().ok()?.trim().to_string(),
    };
    // Userinfo is not part of the identity of a resource.
    let authority = authority
        .rsplit('@')
        .next()
        .unwrap_or("")
        .to_ascii_lowercase();
    if authority.is_empty() {
        return None;
    }
    let default_port = match scheme.as_str() {
        "https" => ":443",
        _ => ":80",
    };
    let authority = authority.strip_suffix(default_port).unwrap_or(&authority);
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let path = if path.is_empty() { "/" } else { path };
    Some(format!("{scheme}://{authority}{path}"))
}

/// Whether a request with this method invalidates the stored responses of its target (§4.4):
/// every method that is not safe.
pub fn invalidates(method: &Method) -> bool {
    !matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE
    )
}

/// Resolve a `Location`/`Content-Location` value against a primary key (`scheme://host/path`)
/// and return its primary key if it has the same origin (§4.4). Handles absolute URIs,
/// absolute paths and relative paths; anything else is `None`.
pub fn resolve_same_origin(target: &str, reference: &str) -> Option<String> {
    let (scheme, rest) = target.split_once("://")?;
    let origin_end = rest
        .find('/')
        .map_or(target.len(), |i| scheme.len() + 3 + i);
    let origin = &target[..origin_end];
    let candidate = if reference.contains("://") {
        reference.to_string()
    } else if reference.starts_with("//") {
        format!("{scheme}:{reference}")
    } else if reference.starts_with('/') {
        format!("{origin}{reference}")
    } else if reference.is_empty() {
        return None;
    } else {
        // Relative path: replace the last segment of the target's path (query dropped).
        let path = target[origin_end..].split('?').next().unwrap_or("/");
        let dir = path.rsplit_once('/').map_or("", |(d, _)| d);
        format!("{origin}{dir}/{reference}")
    };
    let uri: Uri = candidate.parse().ok()?;
    let key = primary_key(&uri, &HeaderMap::new())?;
    let same = key
        .strip_prefix(origin)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'));
    same.then_some(key)
}

/// Hop-by-hop fields (RFC 9110 §7.6.1) including those named in Connection: never stored
/// (§3.1). The others keep their order. The rule is the proxy's own (`webpep_http1`).
pub fn strip_hop_by_hop(headers: &HeaderMap) -> HeaderMap {
    webpep_http1::without_hop_by_hop(headers)
}

/// The validators of a stored response as request headers for the origin (§4.3.1).
pub fn conditional_headers(stored: &HeaderMap) -> HeaderMap {
    let mut out = HeaderMap::new();
    if let Some(etag) = stored.get(ETAG) {
        out.insert(IF_NONE_MATCH, etag.clone());
    }
    if let Some(lm) = stored.get(LAST_MODIFIED) {
        // Only a well-formed date is worth sending.
        if header_date(stored, &LAST_MODIFIED).is_some() {
            out.insert(IF_MODIFIED_SINCE, lm.clone());
        }
    }
    out
}

fn is_weak(tag: &str) -> bool {
    tag.starts_with("W/")
}

fn opaque(tag: &str) -> &str {
    tag.strip_prefix("W/").unwrap_or(tag)
}

/// Whether a 304 applies to the stored response (§4.3.4): a strong ETag in the 304 must equal
/// the stored one; otherwise a Last-Modified in the 304 must equal the stored one; a 304 with
/// neither validator applies when the stored response has no strong ETag to contradict it.
pub fn not_modified_applies(stored: &HeaderMap, not_modified: &HeaderMap) -> bool {
    let stored_etag = stored.get(ETAG).and_then(|v| v.to_str().ok());
    let new_etag = not_modified.get(ETAG).and_then(|v| v.to_str().ok());
    if let Some(new) = new_etag {
        return match stored_etag {
            Some(old) if !is_weak(new) => !is_weak(old) && old.trim() == new.trim(),
            // Weak tags match weakly: the 304 answered our own If-None-Match.
            Some(old) => opaque(old.trim()) == opaque(new.trim()),
            None => false,
        };
    }
    if let Some(new_lm) = header_date(not_modified, &LAST_MODIFIED) {
        return header_date(stored, &LAST_MODIFIED) == Some(new_lm);
    }
    true
}

/// Header fields a 304 must not change in the stored response: the representation's own
/// metadata (the proxy may have transformed it: compressed, transcoded) and framing (§3.2).
fn kept_on_freshen(name: &HeaderName) -> bool {
    name == CONTENT_LENGTH
        || name == CONTENT_ENCODING
        || name == CONTENT_TYPE
        || name == CONTENT_RANGE
        || name == VARY
}

/// Freshen stored headers with a 304's (§4.3.4): the 304's fields replace the stored ones,
/// except the ones above; Age is dropped (the age restarts at this validation) and a missing
/// Date is set to the time the 304 arrived so the apparent age is right.
pub fn freshen_headers(
    stored: &HeaderMap,
    not_modified: &HeaderMap,
    response_time: SystemTime,
) -> HeaderMap {
    let update = strip_hop_by_hop(not_modified);
    let mut out = stored.clone();
    out.remove(AGE);
    for name in update.keys() {
        if kept_on_freshen(name) {
            continue;
        }
        out.remove(name);
        for value in update.get_all(name) {
            out.append(name.clone(), value.clone());
        }
    }
    if !update.contains_key(DATE) {
        if let Ok(v) = HeaderValue::from_str(&httpdate::fmt_http_date(response_time)) {
            out.insert(DATE, v);
        }
    }
    out
}

/// Whether the client's own conditional GET/HEAD is satisfied by the cached response, so the
/// proxy answers 304 (RFC 9110 §13.1.2, §13.1.3, precedence §13.2.2).
pub fn client_not_modified(
    method: &Method,
    req_headers: &HeaderMap,
    status: StatusCode,
    stored: &HeaderMap,
) -> bool {
    if !(method == Method::GET || method == Method::HEAD) || status != StatusCode::OK {
        return false;
    }
    if req_headers.contains_key(IF_NONE_MATCH) {
        let Some(etag) = stored.get(ETAG).and_then(|v| v.to_str().ok()) else {
            return false;
        };
        let etag = opaque(etag.trim());
        return req_headers.get_all(IF_NONE_MATCH).iter().any(|v| {
            v.to_str().is_ok_and(|text| {
                split_list(text)
                    .iter()
                    .any(|tag| *tag == "*" || opaque(tag) == etag)
            })
        });
    }
    let Some(since) = header_date(req_headers, &IF_MODIFIED_SINCE) else {
        return false;
    };
    // §13.1.3: compare with Last-Modified, or the Date when there is none.
    match header_date(stored, &LAST_MODIFIED).or_else(|| header_date(stored, &DATE)) {
        Some(modified) => modified <= since,
        None => false,
    }
}

#[cfg(test)]
mod tests;
