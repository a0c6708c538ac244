//! Counters for the Prometheus `/metrics` endpoint (text format 0.0.4), lock-free.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};

use crate::auth::AuthFailure;
use crate::limits::Limit;

const MODES: [&str; 7] = [
    "explicit",
    "connect",
    "transparent",
    "url",
    "local",
    "tls",
    "intercept-tls",
];
const CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

/// The proxy's counters.
#[derive(Debug, Default)]
pub struct Metrics {
    requests: [[AtomicU64; 5]; MODES.len()],
    /// Requests answered before their mode was known (malformed, too slow, over a budget),
    /// by status class: a 503 is not a client error.
    rejected_requests: [AtomicU64; 5],
    /// Bytes read from clients.
    pub client_bytes_in: AtomicU64,
    /// Bytes written to clients.
    pub client_bytes_out: AtomicU64,
    /// Bytes of responses received from origins (heads and bodies), and tunnels' from their
    /// destinations.
    pub origin_bytes_in: AtomicU64,
    /// Bytes of requests sent to origins (heads and bodies), and tunnels' to their destinations.
    pub origin_bytes_out: AtomicU64,
    /// Served from cache without contacting the origin.
    pub cache_hits: AtomicU64,
    /// Not in cache.
    pub cache_misses: AtomicU64,
    /// Found stale.
    pub cache_stale: AtomicU64,
    /// Stale entries the origin confirmed with 304.
    pub cache_validated: AtomicU64,
    /// Client connections accepted.
    pub connections_total: AtomicU64,
    /// Client connections refused by the client ACL.
    pub connections_refused: AtomicU64,
    /// Connections and requests refused by per-client limits, indexed like [`Limit::ALL`].
    limit_refusals: [AtomicU64; Limit::ALL.len()],
    /// Idle connections closed to make room for a new client at `max-connections`.
    pub connections_evicted: AtomicU64,
    /// Requests cut off for a head or body sent too slowly (408).
    pub client_timeouts: AtomicU64,
    /// Transform jobs run (decode, transcode, rewrite, compress of one response).
    pub transforms_run: AtomicU64,
    /// Responses streamed before their end because they came too slowly to buffer whole
    /// (`buffer-timeout`), or streamed as they came (event streams).
    pub responses_streamed: AtomicU64,
    /// Requests refused by `[auth]`, indexed like [`AuthFailure::LABELS`].
    auth_failures: [AtomicU64; AuthFailure::LABELS.len()],
    /// Browsers' TLS connections ended by the edge's interception ([intercept]): handshakes
    /// completed with a minted leaf.
    pub intercepted_connections: AtomicU64,
    /// Slow password hashes computed (checks the credentials cache did not answer).
    pub auth_verifications: AtomicU64,
    active: AtomicI64,
    /// Per enrolled client proxy (the QUIC front end), by its enrolled name.
    quic_clients: std::sync::Mutex<std::collections::BTreeMap<String, QuicClient>>,
}

/// A per-client family: its name, its help, and its value from a client's counters.
type PerClientSeries = (&'static str, &'static str, fn(&QuicClient) -> u64);

/// What one enrolled client proxy did over QUIC.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct QuicClient {
    /// Connections it opened.
    pub connections: u64,
    /// Requests (and CONNECT tunnels) it sent.
    pub requests: u64,
    /// Request body bytes received from it (tunnels' bytes are not counted here).
    pub bytes_in: u64,
    /// Response body bytes sent to it (tunnels' bytes are not counted here).
    pub bytes_out: u64,
}

fn limit_index(limit: Limit) -> usize {
    Limit::ALL.iter().position(|l| *l == limit).unwrap_or(0)
}

/// Status class index of a status code.
fn class_index(status: u16) -> usize {
    ((status / 100).clamp(1, 5) - 1) as usize
}

impl Metrics {
    /// Adds to an enrolled client's counters (`f` changes them).
    pub fn quic_client(&self, name: &str, f: impl FnOnce(&mut QuicClient)) {
        let mut m = self.quic_clients.lock().unwrap_or_else(|e| e.into_inner());
        f(m.entry(name.to_string()).or_default());
    }

    /// An enrolled client's counters so far.
    pub fn quic_client_counts(&self, name: &str) -> QuicClient {
        let m = self.quic_clients.lock().unwrap_or_else(|e| e.into_inner());
        m.get(name).copied().unwrap_or_default()
    }

    /// Counts one answered request.
    pub fn request(&self, mode: &str, status: u16) {
        match MODES.iter().position(|m| *m == mode) {
            Some(i) => {
                self.requests[i][class_index(status)].fetch_add(1, Relaxed);
            }
            None => {
                self.rejected_requests[class_index(status)].fetch_add(1, Relaxed);
            }
        }
    }

    /// Requests counted for `mode` with status class `class` ("2xx"…).
    pub fn requests_of(&self, mode: &str, class: &str) -> u64 {
        match (
            MODES.iter().position(|m| *m == mode),
            CLASSES.iter().position(|c| *c == class),
        ) {
            (Some(m), Some(c)) => self.requests[m][c].load(Relaxed),
            _ => 0,
        }
    }

    /// Adds to a counter.
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Relaxed);
    }

    /// A client connection opened; the guard closes it.
    pub fn connection_opened(&self) -> ActiveGuard<'_> {
        self.connections_total.fetch_add(1, Relaxed);
        self.active.fetch_add(1, Relaxed);
        ActiveGuard(self)
    }

    /// Counts a connection or request refused by `limit`.
    pub fn limit_refused(&self, limit: Limit) {
        self.limit_refusals[limit_index(limit)].fetch_add(1, Relaxed);
    }

    /// Refusals counted for `limit`.
    pub fn limit_refusals(&self, limit: Limit) -> u64 {
        self.limit_refusals[limit_index(limit)].load(Relaxed)
    }

    /// Counts a request refused by `[auth]`.
    pub fn auth_failed(&self, failure: &AuthFailure) {
        if let Some(i) = AuthFailure::LABELS
            .iter()
            .position(|l| *l == failure.label())
        {
            self.auth_failures[i].fetch_add(1, Relaxed);
        }
    }

    /// Refusals counted for the `[auth]` reason `label`.
    pub fn auth_failures(&self, label: &str) -> u64 {
        AuthFailure::LABELS
            .iter()
            .position(|l| *l == label)
            .map_or(0, |i| self.auth_failures[i].load(Relaxed))
    }

    /// Connections open now.
    pub fn active_connections(&self) -> i64 {
        self.active.load(Relaxed)
    }

    /// Prometheus text.
    pub fn render(&self) -> String {
        let mut s = String::new();
        s.push_str("# HELP webpep_requests_total Requests answered, by mode and status class.\n");
        s.push_str("# TYPE webpep_requests_total counter\n");
        for (i, m) in MODES.iter().enumerate() {
            for (j, c) in CLASSES.iter().enumerate() {
                let _ = writeln!(
                    s,
                    "webpep_requests_total{{mode=\"{m}\",class=\"{c}\"}} {}",
                    self.requests[i][j].load(Relaxed)
                );
            }
        }
        for (j, c) in CLASSES.iter().enumerate() {
            let _ = writeln!(
                s,
                "webpep_requests_total{{mode=\"none\",class=\"{c}\"}} {}",
                self.rejected_requests[j].load(Relaxed)
            );
        }
        let counters: [(&str, &str, &AtomicU64); 15] = [
            (
                "webpep_client_bytes_in_total",
                "Bytes read from clients.",
                &self.client_bytes_in,
            ),
            (
                "webpep_client_bytes_out_total",
                "Bytes written to clients.",
                &self.client_bytes_out,
            ),
            (
                "webpep_origin_bytes_in_total",
                "Bytes of responses received from origins (heads and bodies; chunked framing not included), and what tunnels and TLS relays carry back from their destinations.",
                &self.origin_bytes_in,
            ),
            (
                "webpep_origin_bytes_out_total",
                "Bytes of requests sent to origins (heads and bodies), and what tunnels and TLS relays carry to their destinations.",
                &self.origin_bytes_out,
            ),
            (
                "webpep_cache_hits_total",
                "Client requests answered from the cache without the origin (the proxy's own inline and prefetch lookups not counted).",
                &self.cache_hits,
            ),
            (
                "webpep_cache_misses_total",
                "Client requests not in the cache.",
                &self.cache_misses,
            ),
            (
                "webpep_cache_stale_total",
                "Client requests that found a stale entry (revalidated or fetched again).",
                &self.cache_stale,
            ),
            (
                "webpep_cache_validated_total",
                "Stale entries confirmed by a 304.",
                &self.cache_validated,
            ),
            (
                "webpep_connections_total",
                "Client connections accepted.",
                &self.connections_total,
            ),
            (
                "webpep_connections_refused_total",
                "Client connections refused by the ACL.",
                &self.connections_refused,
            ),
            (
                "webpep_connections_evicted_total",
                "Idle client connections closed to admit a new client at limits.max-connections.",
                &self.connections_evicted,
            ),
            (
                "webpep_client_timeouts_total",
                "Requests answered 408: a head over limits.header-timeout, or a body below limits.body-min-rate.",
                &self.client_timeouts,
            ),
            (
                "webpep_transforms_run_total",
                "Transform jobs run (one response decoded, transcoded, rewritten or compressed); cache hits of a stored result run none.",
                &self.transforms_run,
            ),
            (
                "webpep_responses_streamed_total",
                "Responses sent on as they came instead of whole: slower than limits.buffer-timeout, or event streams.",
                &self.responses_streamed,
            ),
            (
                "webpep_intercepted_connections_total",
                "CONNECTs on the explicit port whose TLS the edge ended itself ([intercept]): browser handshakes completed with a certificate from the edge's CA.",
                &self.intercepted_connections,
            ),
        ];
        for (name, help, c) in counters {
            let _ = writeln!(
                s,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}",
                c.load(Relaxed)
            );
        }
        s.push_str("# HELP webpep_client_limit_refusals_total Client connections (reason connections: per client, total: all clients busy) and requests (reason rate; buffer: the request body over the buffered-body budget) refused by [limits].\n");
        s.push_str("# TYPE webpep_client_limit_refusals_total counter\n");
        for l in Limit::ALL {
            let _ = writeln!(
                s,
                "webpep_client_limit_refusals_total{{reason=\"{}\"}} {}",
                l.label(),
                self.limit_refusals(l)
            );
        }
        s.push_str("# HELP webpep_auth_failures_total Requests refused by [auth]: 407 for missing (a browser's first try), scheme (not Basic), malformed or invalid (unknown user or wrong password) credentials; 403 for transparent requests with transparent = \"refuse\"; 429 for throttled (credentials not checked: the client address failed auth.max-failures times in a row and waits).\n");
        s.push_str("# TYPE webpep_auth_failures_total counter\n");
        for (i, l) in AuthFailure::LABELS.iter().enumerate() {
            let _ = writeln!(
                s,
                "webpep_auth_failures_total{{reason=\"{l}\"}} {}",
                self.auth_failures[i].load(Relaxed)
            );
        }
        let _ = writeln!(
            s,
            "# HELP webpep_auth_verifications_total Password hashes computed for [auth] (credentials not found in the cache of recent successes).\n# TYPE webpep_auth_verifications_total counter\nwebpep_auth_verifications_total {}",
            self.auth_verifications.load(Relaxed)
        );
        let _ = writeln!(
            s,
            "# HELP webpep_active_connections Client connections open now.\n# TYPE webpep_active_connections gauge\nwebpep_active_connections {}",
            self.active_connections()
        );
        let quic = self
            .quic_clients
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let per_client: [PerClientSeries; 4] = [
            (
                "webpep_quic_client_connections_total",
                "QUIC connections opened by each enrolled client proxy.",
                |c| c.connections,
            ),
            (
                "webpep_quic_client_requests_total",
                "Requests and CONNECT tunnels from each enrolled client proxy.",
                |c| c.requests,
            ),
            (
                "webpep_quic_client_bytes_in_total",
                "Request body bytes from each enrolled client proxy (not counting tunnels).",
                |c| c.bytes_in,
            ),
            (
                "webpep_quic_client_bytes_out_total",
                "Response body bytes to each enrolled client proxy (not counting tunnels).",
                |c| c.bytes_out,
            ),
        ];
        for (name, help, get) in per_client {
            let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} counter");
            for (client, c) in &quic {
                let _ = writeln!(s, "{name}{{client=\"{client}\"}} {}", get(c));
            }
        }
        s
    }
}

/// Decrements the active-connection gauge when dropped.
#[derive(Debug)]
pub struct ActiveGuard<'a>(&'a Metrics);

impl Drop for ActiveGuard<'_> {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counts() {
        let m = Metrics::default();
        m.request("explicit", 200);
        m.request("explicit", 204);
        m.request("url", 504);
        m.request("bogus", 400);
        Metrics::add(&m.cache_hits, 3);
        {
            let _g = m.connection_opened();
            assert_eq!(m.active_connections(), 1);
        }
        assert_eq!(m.active_connections(), 0);
        let t = m.render();
        assert!(
            t.contains("webpep_requests_total{mode=\"explicit\",class=\"2xx\"} 2\n"),
            "{t}"
        );
        assert!(t.contains("webpep_requests_total{mode=\"url\",class=\"5xx\"} 1\n"));
        assert!(t.contains("webpep_requests_total{mode=\"none\",class=\"4xx\"} 1\n"));
        assert!(t.contains("webpep_cache_hits_total 3\n"));
        assert!(t.contains("webpep_active_connections 0\n"));
        m.limit_refused(Limit::Rate);
        m.limit_refused(Limit::Rate);
        m.limit_refused(Limit::Connections);
        let t = m.render();
        assert!(t.contains("webpep_client_limit_refusals_total{reason=\"rate\"} 2\n"));
        assert!(t.contains("webpep_client_limit_refusals_total{reason=\"total\"} 1\n"));
        assert!(t.contains("webpep_client_limit_refusals_total{reason=\"connections\"} 0\n"));
        m.auth_failed(&AuthFailure::Missing);
        m.auth_failed(&AuthFailure::Malformed("x"));
        m.auth_failed(&AuthFailure::Malformed("y"));
        Metrics::add(&m.auth_verifications, 4);
        let t = m.render();
        assert!(
            t.contains("webpep_auth_failures_total{reason=\"missing\"} 1\n"),
            "{t}"
        );
        assert!(t.contains("webpep_auth_failures_total{reason=\"malformed\"} 2\n"));
        assert!(t.contains("webpep_auth_failures_total{reason=\"invalid\"} 0\n"));
        assert!(t.contains("webpep_auth_failures_total{reason=\"transparent\"} 0\n"));
        assert!(t.contains("webpep_auth_verifications_total 4\n"));
        assert_eq!(m.auth_failures("malformed"), 2);
    }
}
