//! HAR 1.2 output (<http://www.softwareishard.com/blog/har-12-spec/>).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use url::Url;

use crate::result::{ObjectTiming, PageLoad};

/// Milliseconds with microsecond precision.
fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1_000_000.0).round() / 1000.0
}

fn opt_ms(d: Option<Duration>) -> f64 {
    d.map(ms).unwrap_or(-1.0)
}

/// Days since 1970-01-01 to (year, month, day) (H. Hinnant's civil_from_days).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// ISO 8601 in UTC with milliseconds, as HAR wants.
pub fn iso8601(t: SystemTime) -> String {
    let (secs, millis) = match t.duration_since(UNIX_EPOCH) {
        Ok(d) => (d.as_secs() as i64, d.subsec_millis()),
        Err(_) => (0, 0),
    };
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, mo, d) = civil_from_days(days);
    format!(
        "{y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

fn headers(h: &[(String, String)]) -> Value {
    Value::Array(
        h.iter()
            .map(|(n, v)| json!({"name": n, "value": v}))
            .collect(),
    )
}

fn entry(page: &PageLoad, o: &ObjectTiming, page_id: &str) -> Value {
    let t = &o.timings;
    let blocked = opt_ms(t.blocked);
    let dns = opt_ms(t.dns);
    let connect = opt_ms(t.connect);
    let ssl = opt_ms(t.ssl);
    let send = ms(t.send);
    let wait = ms(t.wait);
    let receive = ms(t.receive);
    let time: f64 = [blocked, dns, connect, send, wait, receive]
        .iter()
        .filter(|v| **v >= 0.0)
        .sum();
    let query: Vec<Value> = Url::parse(&o.url)
        .map(|u| {
            u.query_pairs()
                .map(|(n, v)| json!({"name": n, "value": v}))
                .collect()
        })
        .unwrap_or_default();
    let version = if o.http_version.is_empty() {
        "HTTP/1.1".to_string()
    } else {
        o.http_version.clone()
    };
    let has_response = o.status.is_some();
    let body_size: i64 = if !has_response {
        -1
    } else {
        i64::try_from(o.body_size).unwrap_or(i64::MAX)
    };
    let mut response = json!({
        "status": o.status.unwrap_or(0),
        "statusText": o.status_text,
        "httpVersion": if has_response { version.clone() } else { String::new() },
        "cookies": [],
        "headers": headers(&o.response_headers),
        "content": {
            "size": o.content_size,
            "mimeType": o.content_type.clone().unwrap_or_else(|| "x-unknown".into()),
        },
        "redirectURL": o.redirect_url.clone().unwrap_or_default(),
        "headersSize": o.headers_size.map(|n| n as i64).unwrap_or(-1),
        "bodySize": body_size,
    });
    if let Some(e) = &o.error {
        response["_error"] = json!(e.to_string());
        response["_errorKind"] = json!(e.kind());
    }
    let started = page.started + o.start;
    let mut e = json!({
        "pageref": page_id,
        "startedDateTime": iso8601(started),
        "time": (time * 1000.0).round() / 1000.0,
        "request": {
            "method": "GET",
            "url": o.url,
            "httpVersion": version,
            "cookies": [],
            "headers": headers(&o.request_headers),
            "queryString": query,
            "headersSize": o.request_headers_size.map(|n| n as i64).unwrap_or(-1),
            "bodySize": 0,
        },
        "response": response,
        "cache": {},
        "timings": {
            "blocked": blocked,
            "dns": dns,
            "connect": connect,
            "send": send,
            "wait": wait,
            "receive": receive,
            "ssl": ssl,
        },
        "_resourceType": o.kind.har_type(),
        "_fromCache": if o.cache_hit { "revalidated" } else { "" },
        "_retries": o.retries,
    });
    if let Some(addr) = o.server_addr {
        e["serverIPAddress"] = json!(addr.ip().to_string());
    }
    if let Some(c) = o.connection_id {
        e["connection"] = json!(c.to_string());
    }
    if let Some(i) = o.initiator.and_then(|i| page.objects.get(i)) {
        e["_initiator"] = json!(i.url);
    }
    e
}

impl PageLoad {
    /// The load as a HAR 1.2 document: one page (`page_id`), one entry per object.
    pub fn to_har(&self, page_id: &str) -> Value {
        let on_content_load = self
            .objects
            .get(self.main)
            .map(|o| ms(o.end))
            .unwrap_or(-1.0);
        let b = &self.breakdown;
        json!({
            "log": {
                "version": "1.2",
                "creator": {"name": "webpep", "version": env!("CARGO_PKG_VERSION")},
                "pages": [{
                    "startedDateTime": iso8601(self.started),
                    "id": page_id,
                    "title": self.url,
                    "pageTimings": {
                        "onContentLoad": on_content_load,
                        "onLoad": ms(self.plt),
                    },
                    "_policy": self.policy.name(),
                    "_viaProxy": self.via_proxy,
                    "_breakdown": {
                        "dns": ms(b.dns),
                        "connect": ms(b.connect),
                        "idle": ms(b.idle),
                        "payload": ms(b.payload),
                    },
                    "_errors": self.errors(),
                    "_cacheHits": self.cache_hits(),
                    "_timedOut": self.timed_out,
                    "_tlsUpgrades": self.tls_upgrades,
                    "_unrequested": self.unrequested.iter().map(|u| json!({
                        "url": u.url,
                        "reason": u.reason.name(),
                    })).collect::<Vec<_>>(),
                }],
                "entries": self.objects.iter().map(|o| entry(self, o, page_id)).collect::<Vec<_>>(),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(iso8601(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = UNIX_EPOCH + Duration::from_millis(1_709_251_200_123); // 2024-03-01
        assert_eq!(iso8601(t), "2024-03-01T00:00:00.123Z");
        let t = UNIX_EPOCH + Duration::from_secs(951_825_600); // 2000-02-29 12:00
        assert_eq!(iso8601(t), "2000-02-29T12:00:00.000Z");
    }
}
