//! What the replay server answers: the corpus indexed by (host, path), bodies preloaded, and the
//! protocol-independent response logic (versions, validators, conditional requests, errors).
//! The HTTP/1.1 and HTTP/2 front ends both call [`Site::respond`].

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::SystemTime;

use bytes::Bytes;
use tracing::warn;
use webpep_corpus::{host_of, request_target, Corpus, Object};

/// A response, before it is put on the wire by one of the protocol front ends.
#[derive(Clone, Debug)]
pub struct Reply {
    pub status: u16,
    /// Header fields other than Content-Length and Connection, in order.
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
    /// The Content-Length to announce (`None` for statuses without a body, like 204 and 304).
    pub content_length: Option<u64>,
}

/// What a request asks for, whatever its protocol.
#[derive(Clone, Debug, Default)]
pub struct Ask<'a> {
    pub method: &'a str,
    /// Host as given (port allowed; case-insensitive).
    pub host: Option<&'a str>,
    /// Origin-form target (`/path?query`) or absolute-form (`http://host/path`).
    pub target: &'a str,
    /// The request came over TLS: an origin-form target names an https:// object.
    pub secure: bool,
    pub if_none_match: Option<&'a str>,
    pub if_modified_since: Option<&'a str>,
    /// The request's Accept-Encoding (all its fields joined), if any.
    pub accept_encoding: Option<&'a str>,
}

/// Response header fields the server sets itself, or that are hop-by-hop: dropped from an
/// object's extra headers (HTTP/2 forbids the connection-specific ones).
const OWN_HEADERS: &[&str] = &[
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "proxy-connection",
    "upgrade",
    "te",
    "trailer",
    "date",
    "etag",
    "last-modified",
    "content-type",
];

/// Header fields a 304 repeats from the 200 it stands for (RFC 9110 §15.4.5).
const NOT_MODIFIED_HEADERS: &[&str] = &["cache-control", "expires", "vary", "content-location"];

/// The corpus, ready to serve.
pub(crate) struct Site {
    objects: Vec<Object>,
    /// (https?, host, target) → object: a site may answer http:// and https:// differently
    /// (a capture's http:// page is often a redirect to its https:// one).
    index: HashMap<(bool, String, String), usize>,
    bodies: HashMap<String, Result<Bytes, String>>,
    domains: Vec<String>,
    /// Requests answered per object since the last [`Site::restart`]: the nth request for a
    /// URL gets the capture's nth response for it (the last one repeated).
    served: Mutex<HashMap<usize, usize>>,
}

/// Lowercase host without a port (`WWW.X.com:80` → `www.x.com`; `[::1]:80` → `::1`).
pub(crate) fn normalize_host(host: &str) -> String {
    let h = host.trim();
    let h = if let Some(rest) = h.strip_prefix('[') {
        rest.split(']').next().unwrap_or(rest)
    } else {
        match h.rsplit_once(':') {
            Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
            _ => h,
        }
    };
    h.trim_end_matches('.').to_ascii_lowercase()
}

impl Site {
    /// Indexes the corpus and reads every body once (so that no disk read or hash happens while
    /// a page load is being measured). A body that is missing or corrupt is remembered as such:
    /// requests for it get a 500 with the reason.
    pub(crate) fn load(corpus: &Corpus) -> Site {
        let mut objects = Vec::new();
        let mut index = HashMap::new();
        let mut bodies: HashMap<String, Result<Bytes, String>> = HashMap::new();
        let mut domains: Vec<String> = corpus
            .manifest
            .domains
            .iter()
            .map(|d| normalize_host(d))
            .collect();
        for page in &corpus.manifest.pages {
            for o in &page.objects {
                let Some(host) = host_of(&o.url) else {
                    warn!(url = %o.url, "replay: object URL has no host; not served");
                    continue;
                };
                let host = normalize_host(host);
                let key = (
                    o.url.starts_with("https://"),
                    host.clone(),
                    request_target(&o.url).into_owned(),
                );
                if index.contains_key(&key) {
                    continue; // the same URL in two pages is the same object
                }
                if !domains.contains(&host) {
                    domains.push(host);
                }
                let all = o
                    .versions
                    .iter()
                    .flat_map(|v| std::iter::once(v).chain(v.then.iter().map(|r| &r.version)));
                for v in all {
                    let encoded = v.encoded.as_ref().map(|e| (&e.body, e.size));
                    for (hash, size) in std::iter::once((&v.body, v.size)).chain(encoded) {
                        if bodies.contains_key(hash) {
                            continue;
                        }
                        let loaded = match corpus.body(hash) {
                            Ok(b) => {
                                if b.len() as u64 != size {
                                    warn!(url = %o.url, manifest = size, actual = b.len(),
                                        "replay: body size differs from the manifest; serving the body");
                                }
                                Ok(Bytes::from(b))
                            }
                            Err(e) => {
                                warn!(url = %o.url, error = %e, "replay: body cannot be served");
                                Err(e.to_string())
                            }
                        };
                        bodies.insert(hash.clone(), loaded);
                    }
                }
                index.insert(key, objects.len());
                objects.push(o.clone());
            }
        }
        domains.sort();
        domains.dedup();
        Site {
            objects,
            index,
            bodies,
            domains,
            served: Mutex::new(HashMap::new()),
        }
    }

    /// Starts the per-URL response order again: the next request for each URL gets its first
    /// captured response (called when a visit is selected, before each page load).
    pub(crate) fn restart(&self) {
        self.served
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clear();
    }

    /// Which captured response (0-based) the request for object `i` gets now, counting it.
    fn next_response(&self, i: usize) -> usize {
        let mut served = self
            .served
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let n = served.entry(i).or_insert(0);
        let k = *n;
        *n += 1;
        k
    }

    pub(crate) fn domains(&self) -> &[String] {
        &self.domains
    }

    pub(crate) fn object_count(&self) -> usize {
        self.objects.len()
    }

    /// The object at `host` + `path` under the request's scheme, else under the other one: a
    /// corpus that names only http:// URLs (a 2003 page) is served over TLS too (h2, and
    /// names a browser upgrades to https itself), and an https:// capture over plain HTTP.
    fn find(&self, https: bool, host: &str, path: &str) -> Option<&usize> {
        let key = |s: bool| (s, host.to_string(), path.to_string());
        self.index
            .get(&key(https))
            .or_else(|| self.index.get(&key(!https)))
    }

    /// The response to `ask` at visit `visit`. `fallback_host` is used when the request names
    /// no host (the listener's domain, or the TLS SNI).
    pub(crate) fn respond(
        &self,
        ask: &Ask<'_>,
        fallback_host: Option<&str>,
        visit: usize,
    ) -> Reply {
        let method = ask.method;
        if method != "GET" && method != "HEAD" {
            let mut r = simple(
                405,
                "method not allowed: the replay server serves GET and HEAD\n",
            );
            r.headers.push(("Allow".into(), "GET, HEAD".into()));
            return r;
        }
        let absolute_target;
        let (host, path, https) =
            if ask.target.starts_with("http://") || ask.target.starts_with("https://") {
                absolute_target = request_target(ask.target);
                (
                    host_of(ask.target),
                    &*absolute_target,
                    ask.target.starts_with("https://"),
                )
            } else {
                (ask.host.or(fallback_host), ask.target, ask.secure)
            };
        let Some(host) = host else {
            return simple(400, "bad request: no Host\n");
        };
        let mut host = normalize_host(host);
        let mut found = self.find(https, &host, path);
        if found.is_none() && host.parse::<std::net::IpAddr>().is_ok() {
            // A client that connected by address: the listener's domain names the site.
            if let Some(domain) = fallback_host {
                host = normalize_host(domain);
                found = self.find(https, &host, path);
            }
        }
        let Some(&i) = found else {
            return simple(404, &format!("not in the corpus: {host}{path}\n"));
        };
        let object = &self.objects[i];
        let first = object.version(visit);
        // The nth request for the URL gets the capture's nth response for it.
        let nth = self.next_response(i).min(first.then.len());
        let (status, content_type, headers, version) = match nth {
            0 => (object.status, &object.content_type, &object.headers, first),
            k => {
                let r = &first.then[k - 1];
                (r.status, &r.content_type, &r.headers, &r.version)
            }
        };
        // The captured coding when the client accepts it, else identity.
        let coded = version
            .encoded
            .as_ref()
            .filter(|e| accepts(ask.accept_encoding, &e.coding));
        let (hash, etag) = match coded {
            Some(e) => (&e.body, &e.etag),
            None => (&version.body, &version.etag),
        };
        let negotiated = version.encoded.is_some();
        let body = match self.bodies.get(hash) {
            Some(Ok(b)) => b.clone(),
            Some(Err(reason)) => {
                warn!(url = %object.url, %reason, "replay: 500 for an object whose body cannot be served");
                return simple(500, &format!("cannot serve {}: {reason}\n", object.url));
            }
            None => {
                warn!(url = %object.url, "replay: 500 for an object whose body was never loaded");
                return simple(
                    500,
                    &format!("cannot serve {}: body not loaded\n", object.url),
                );
            }
        };
        let extra = headers.iter().filter(|(n, _)| {
            let n = n.to_ascii_lowercase();
            !OWN_HEADERS.contains(&n.as_str())
                && !(negotiated && (n == "content-encoding" || n == "vary"))
        });
        // A response negotiated by Accept-Encoding says so in Vary (kept with what the
        // capture's Vary named).
        let vary = negotiated.then(|| vary_with_accept_encoding(headers));

        if status == 200 && not_modified(ask, etag, &version.last_modified) {
            let mut headers = vec![("Date".to_string(), now())];
            if !etag.is_empty() {
                headers.push(("ETag".into(), etag.clone()));
            }
            headers.extend(
                extra
                    .filter(|(n, _)| {
                        NOT_MODIFIED_HEADERS.contains(&n.to_ascii_lowercase().as_str())
                    })
                    .cloned(),
            );
            headers.extend(vary.clone());
            return Reply {
                status: 304,
                headers,
                body: Bytes::new(),
                content_length: None,
            };
        }

        let mut out = vec![("Date".to_string(), now())];
        let bodiless = status_has_no_body(status);
        if !bodiless && !content_type.is_empty() {
            out.push(("Content-Type".into(), content_type.clone()));
        }
        if let Some(e) = coded {
            out.push(("Content-Encoding".into(), e.coding.clone()));
        }
        if !etag.is_empty() {
            out.push(("ETag".into(), etag.clone()));
        }
        if !version.last_modified.is_empty() {
            out.push(("Last-Modified".into(), version.last_modified.clone()));
        }
        out.extend(extra.cloned());
        out.extend(vary);
        let headers = out;
        if bodiless {
            return Reply {
                status,
                headers,
                body: Bytes::new(),
                content_length: None,
            };
        }
        Reply {
            status,
            headers,
            content_length: Some(body.len() as u64),
            body,
        }
    }
}

/// The Vary of a response negotiated by Accept-Encoding: the captured Vary with
/// `Accept-Encoding` added when it lacks it.
fn vary_with_accept_encoding(headers: &[(String, String)]) -> (String, String) {
    let mut names: Vec<String> = headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("vary"))
        .flat_map(|(_, v)| v.split(','))
        .map(|x| x.trim().to_string())
        .filter(|x| !x.is_empty())
        .collect();
    if !names
        .iter()
        .any(|x| x == "*" || x.eq_ignore_ascii_case("accept-encoding"))
    {
        names.push("Accept-Encoding".into());
    }
    ("Vary".into(), names.join(", "))
}

/// Whether a request's Accept-Encoding accepts `coding` (RFC 9110 §12.5.3: listed, or
/// matched by `*`, with a q above 0; `x-gzip` is `gzip`). No Accept-Encoding: identity only,
/// as HTTP clients that do not decode (curl without `--compressed`) send none.
pub(crate) fn accepts(accept_encoding: Option<&str>, coding: &str) -> bool {
    let Some(ae) = accept_encoding else {
        return false;
    };
    let canon = |c: &str| {
        let c = c.trim().to_ascii_lowercase();
        if c == "x-gzip" {
            "gzip".to_string()
        } else {
            c
        }
    };
    let want = canon(coding);
    let mut star = None;
    for item in ae.split(',') {
        let mut parts = item.split(';');
        let name = canon(parts.next().unwrap_or(""));
        let q = parts
            .filter_map(|p| {
                let (k, v) = p.split_once('=')?;
                k.trim()
                    .eq_ignore_ascii_case("q")
                    .then(|| v.trim().parse::<f32>().ok())
                    .flatten()
            })
            .next()
            .unwrap_or(1.0);
        if name == want {
            return q > 0.0;
        }
        if name == "*" {
            star = Some(q > 0.0);
        }
    }
    star.unwrap_or(false)
}

/// 1xx, 204 and 304 responses carry no body and no Content-Length.
pub(crate) fn status_has_no_body(status: u16) -> bool {
    (100..200).contains(&status) || status == 204 || status == 304
}

/// A short text/plain response made by the server itself.
pub(crate) fn simple(status: u16, text: &str) -> Reply {
    Reply {
        status,
        headers: vec![
            ("Date".into(), now()),
            ("Content-Type".into(), "text/plain; charset=utf-8".into()),
        ],
        body: Bytes::copy_from_slice(text.as_bytes()),
        content_length: Some(text.len() as u64),
    }
}

fn now() -> String {
    httpdate::fmt_http_date(SystemTime::now())
}

/// Whether a conditional GET/HEAD is answered with 304: If-None-Match (weak comparison) when
/// present, otherwise If-Modified-Since against the version's Last-Modified.
fn not_modified(ask: &Ask<'_>, etag: &str, last_modified: &str) -> bool {
    if let Some(inm) = ask.if_none_match {
        let inm = inm.trim();
        if inm == "*" {
            return true;
        }
        if etag.is_empty() {
            return false;
        }
        let mine = opaque(etag);
        return inm.split(',').any(|t| opaque(t.trim()) == mine);
    }
    if let Some(ims) = ask.if_modified_since {
        if last_modified.is_empty() {
            return false;
        }
        return match (
            httpdate::parse_http_date(ims.trim()),
            httpdate::parse_http_date(last_modified.trim()),
        ) {
            (Ok(since), Ok(modified)) => modified <= since,
            _ => false,
        };
    }
    false
}

fn opaque(tag: &str) -> &str {
    tag.strip_prefix("W/").unwrap_or(tag)
}

/// The reason phrase of a status code.
pub(crate) fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        203 => "Non-Authoritative Information",
        204 => "No Content",
        206 => "Partial Content",
        300 => "Multiple Choices",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        410 => "Gone",
        411 => "Length Required",
        413 => "Content Too Large",
        414 => "URI Too Long",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Status",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_normalized() {
        assert_eq!(normalize_host("WWW.Example.test:80"), "www.example.test");
        assert_eq!(normalize_host("www.example.test."), "www.example.test");
        assert_eq!(normalize_host("[::1]:8080"), "::1");
        assert_eq!(normalize_host("127.0.0.2"), "127.0.0.2");
    }

    #[test]
    fn accept_encoding() {
        assert!(accepts(Some("gzip, deflate, br"), "gzip"));
        assert!(accepts(Some("x-gzip"), "gzip"));
        assert!(accepts(Some("GZIP;q=0.5"), "gzip"));
        assert!(!accepts(Some("gzip;q=0"), "gzip"));
        assert!(!accepts(Some("deflate, br"), "gzip"));
        assert!(accepts(Some("*"), "gzip"));
        assert!(!accepts(Some("*, gzip;q=0"), "gzip"));
        assert!(!accepts(Some("identity"), "gzip"));
        assert!(!accepts(None, "gzip"));
        assert_eq!(
            vary_with_accept_encoding(&[("Vary".into(), "Cookie".into())]).1,
            "Cookie, Accept-Encoding"
        );
        assert_eq!(
            vary_with_accept_encoding(&[("vary".into(), "accept-encoding".into())]).1,
            "accept-encoding"
        );
    }

    #[test]
    fn conditionals() {
        let lm = "Mon, 01 Jan 2024 00:00:00 GMT";
        let ask = |inm, ims| Ask {
            method: "GET",
            host: None,
            target: "/",
            secure: false,
            if_none_match: inm,
            if_modified_since: ims,
            accept_encoding: None,
        };
        assert!(not_modified(&ask(Some("\"a\""), None), "\"a\"", lm));
        assert!(not_modified(
            &ask(Some("W/\"a\", \"b\""), None),
            "\"a\"",
            lm
        ));
        assert!(not_modified(&ask(Some("*"), None), "\"a\"", lm));
        assert!(!not_modified(&ask(Some("\"b\""), None), "\"a\"", lm));
        // If-None-Match wins over If-Modified-Since.
        assert!(!not_modified(&ask(Some("\"b\""), Some(lm)), "\"a\"", lm));
        assert!(not_modified(&ask(None, Some(lm)), "\"a\"", lm));
        assert!(not_modified(
            &ask(None, Some("Tue, 02 Jan 2024 00:00:00 GMT")),
            "\"a\"",
            lm
        ));
        assert!(!not_modified(
            &ask(None, Some("Sun, 31 Dec 2023 00:00:00 GMT")),
            "\"a\"",
            lm
        ));
        assert!(!not_modified(&ask(None, Some("garbage")), "\"a\"", lm));
        assert!(!not_modified(&ask(None, None), "\"a\"", lm));
    }
}
