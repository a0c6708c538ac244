//! One stored response's metadata: the in-memory form used on lookups (with the freshness
//! figures precomputed) and the JSON form kept in the index.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use serde::{Deserialize, Serialize};

use crate::directives::ResponseDirectives;
use crate::policy::{self, HeuristicConfig};

/// A body's SHA-256: bodies are stored once each and addressable by it.
pub type BodyHash = [u8; 32];

/// A stored response without its body: what a [`crate::Storage`] keeps per key. Built by
/// [`crate::HttpCache`] (freshness figures precomputed); a store only keeps it, or persists it
/// with [`Entry::encode`] and [`Entry::decode`].
#[derive(Clone, Debug)]
pub struct Entry {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) request_time: SystemTime,
    pub(crate) response_time: SystemTime,
    pub(crate) body_hash: BodyHash,
    pub(crate) body_len: u64,
    /// The Vary field names this entry was keyed with.
    pub(crate) vary: Vec<String>,
    /// Precomputed so a hit does not re-parse headers: freshness lifetime (§4.2.1).
    pub(crate) lifetime: Duration,
    /// Precomputed corrected initial age (§4.2.3).
    pub(crate) initial_age: Duration,
    /// Precomputed response directives.
    pub(crate) directives: ResponseDirectives,
    /// When the certificate the response came under expires ([`ValidUntil`]).
    pub(crate) valid_until: Option<SystemTime>,
}

/// A response extension: the response may be reused only before this time, because the
/// certificate the origin proved its identity with expires then. A cache that served it
/// fresh after that would show content the origin can no longer be verified for; capped,
/// the entry goes stale then and revalidating it meets the expired certificate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ValidUntil(pub SystemTime);

impl Entry {
    /// Build an entry and its derived freshness figures.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        status: StatusCode,
        headers: HeaderMap,
        request_time: SystemTime,
        response_time: SystemTime,
        body_hash: BodyHash,
        body_len: u64,
        vary: Vec<String>,
        heuristic: &HeuristicConfig,
        valid_until: Option<SystemTime>,
    ) -> Self {
        let mut lifetime = policy::freshness_lifetime(status, &headers, response_time, heuristic);
        let initial_age = policy::initial_age(&headers, request_time, response_time);
        // Fresh while the current age is below the lifetime, that is until
        // response_time + lifetime − initial_age: never past `valid_until`.
        if let Some(until) = valid_until {
            let left = until
                .duration_since(response_time)
                .unwrap_or(Duration::ZERO);
            lifetime = lifetime.min(initial_age + left);
        }
        let directives = ResponseDirectives::parse(&headers);
        Entry {
            status,
            headers,
            request_time,
            response_time,
            body_hash,
            body_len,
            vary,
            lifetime,
            initial_age,
            directives,
            valid_until,
        }
    }

    /// The stored status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The stored headers (without `Age`).
    pub fn headers(&self) -> &HeaderMap {
        &self.headers
    }

    /// The SHA-256 of the body.
    pub fn body_hash(&self) -> &BodyHash {
        &self.body_hash
    }

    /// The body's length in bytes.
    pub fn body_len(&self) -> u64 {
        self.body_len
    }

    /// The Vary field names the entry was keyed with.
    pub fn vary(&self) -> &[String] {
        &self.vary
    }

    /// The freshness lifetime (§4.2.1).
    pub fn lifetime(&self) -> Duration {
        self.lifetime
    }

    /// The current age at `now` (§4.2.3).
    pub fn age_at(&self, now: SystemTime) -> Duration {
        self.initial_age
            + now
                .duration_since(self.response_time)
                .unwrap_or(Duration::ZERO)
    }

    /// The JSON form stored in the index.
    pub fn encode(&self) -> Vec<u8> {
        let persisted = Persisted {
            status: self.status.as_u16(),
            headers: self
                .headers
                .iter()
                .map(|(n, v)| {
                    let value = match v.to_str() {
                        Ok(s) => PersistedValue::Text(s.to_string()),
                        Err(_) => PersistedValue::Bytes(v.as_bytes().to_vec()),
                    };
                    (n.as_str().to_string(), value)
                })
                .collect(),
            request_time_ms: millis(self.request_time),
            response_time_ms: millis(self.response_time),
            body_sha256: hex::encode(self.body_hash),
            body_len: self.body_len,
            vary: self.vary.clone(),
            valid_until_ms: self.valid_until.map(millis),
        };
        // Serialising plain strings and numbers to JSON cannot fail.
        serde_json::to_vec(&persisted).unwrap_or_default()
    }

    /// Parse the index form, deriving freshness with `heuristic`; `None` when it is damaged
    /// (the entry is then dropped).
    pub fn decode(bytes: &[u8], heuristic: &HeuristicConfig) -> Option<Entry> {
        let p: Persisted = serde_json::from_slice(bytes).ok()?;
        let status = StatusCode::from_u16(p.status).ok()?;
        let mut headers = HeaderMap::with_capacity(p.headers.len());
        for (name, value) in p.headers {
            let name = HeaderName::from_bytes(name.as_bytes()).ok()?;
            let value = match value {
                PersistedValue::Text(s) => HeaderValue::from_str(&s).ok()?,
                PersistedValue::Bytes(b) => HeaderValue::from_bytes(&b).ok()?,
            };
            headers.append(name, value);
        }
        let hash: BodyHash = hex::decode(&p.body_sha256).ok()?.try_into().ok()?;
        Some(Entry::new(
            status,
            headers,
            UNIX_EPOCH + Duration::from_millis(p.request_time_ms),
            UNIX_EPOCH + Duration::from_millis(p.response_time_ms),
            hash,
            p.body_len,
            p.vary,
            heuristic,
            p.valid_until_ms
                .map(|ms| UNIX_EPOCH + Duration::from_millis(ms)),
        ))
    }
}

fn millis(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[derive(Serialize, Deserialize)]
struct Persisted {
    status: u16,
    headers: Vec<(String, PersistedValue)>,
    request_time_ms: u64,
    response_time_ms: u64,
    body_sha256: String,
    body_len: u64,
    vary: Vec<String>,
    /// Absent in entries stored before it was kept, and for plain-HTTP responses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    valid_until_ms: Option<u64>,
}

/// Header values are text almost always; raw bytes are kept exactly when not.
#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum PersistedValue {
    Text(String),
    Bytes(Vec<u8>),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_decode_round_trip_keeps_binary_values() {
        let mut headers = HeaderMap::new();
        headers.append("content-type", HeaderValue::from_static("text/html"));
        headers.append("x-bin", HeaderValue::from_bytes(&[0xff, 0x41]).unwrap());
        headers.append("x-bin", HeaderValue::from_static("second"));
        let t = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let hc = HeuristicConfig::default();
        let e = Entry::new(
            StatusCode::OK,
            headers,
            t,
            t,
            [7; 32],
            12,
            vec!["accept".into()],
            &hc,
            None,
        );
        let back = Entry::decode(&e.encode(), &hc).unwrap();
        assert_eq!(back.headers, e.headers);
        assert_eq!(back.body_hash, e.body_hash);
        assert_eq!(back.response_time, t);
        assert_eq!(back.vary, e.vary);
        assert!(Entry::decode(b"{not json", &hc).is_none());
    }

    #[test]
    fn a_response_is_fresh_no_longer_than_the_certificate_it_came_under() {
        let t = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let hc = HeuristicConfig::default();
        let mut headers = HeaderMap::new();
        headers.insert("cache-control", HeaderValue::from_static("max-age=86400"));
        headers.insert("age", HeaderValue::from_static("100"));
        let entry = |until| {
            Entry::new(
                StatusCode::OK,
                headers.clone(),
                t,
                t,
                [1; 32],
                1,
                vec![],
                &hc,
                until,
            )
        };
        assert_eq!(entry(None).lifetime(), Duration::from_secs(86400));
        // The certificate expires an hour after the response came: fresh until then, however
        // old the response already was.
        let capped = entry(Some(t + Duration::from_secs(3600)));
        assert_eq!(capped.lifetime(), Duration::from_secs(3700));
        assert!(capped.age_at(t + Duration::from_secs(3599)) < capped.lifetime());
        assert!(capped.age_at(t + Duration::from_secs(3600)) >= capped.lifetime());
        // A certificate that has already expired: never fresh.
        let expired = entry(Some(t - Duration::from_secs(1)));
        assert!(expired.age_at(t) >= expired.lifetime());
        // A later expiry changes nothing, and the cap survives the index.
        assert_eq!(
            entry(Some(t + Duration::from_secs(1 << 30))).lifetime(),
            Duration::from_secs(86400)
        );
        let back = Entry::decode(&capped.encode(), &hc).unwrap();
        assert_eq!(back.lifetime(), capped.lifetime());
    }
}
