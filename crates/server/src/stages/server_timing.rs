//! `Server-Timing` on responses to clients (W3C Server Timing): where the proxy's time on the
//! request went (`proxy` in all, `origin` waiting for the origin, `queue` waiting for a
//! transform worker, `transform` the body filters' work, and `hold;desc=held|deferred|skipped`
//! when the client's measured link decided whether the response waited for its transform), so a browser's developer tools and the lab can see it. `[stages.server-timing]`;
//! off by default, since every response head grows by about 60 bytes over the slow link.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use http::header::{HeaderMap, HeaderName, HeaderValue};

use crate::stage::{bool_key, KeyDoc, Registry, Section, Stage, StageCtx, StageFactory, Timing};

const KEYS: &[KeyDoc] = &[KeyDoc {
    key: "enabled",
    default: "false",
    help: "add a Server-Timing field (proxy, origin, queue and transform durations; the transform hold decision) to every response to a client",
}];

pub(super) struct Factory;

impl StageFactory for Factory {
    fn name(&self) -> &'static str {
        "server-timing"
    }
    fn keys(&self) -> &'static [KeyDoc] {
        KEYS
    }
    fn build(
        &self,
        section: Section<'_>,
        registry: &mut Registry,
    ) -> Result<Option<Arc<dyn Stage>>, (String, String)> {
        let Section::Table(table) = section else {
            return Ok(None);
        };
        if !bool_key(table, "enabled", false)? {
            return Ok(None);
        }
        Ok(Some(Arc::new(ServerTiming {
            responses: registry.counter(
                "webpep_server_timing_responses_total",
                "Responses to clients that carried a Server-Timing field.",
            ),
            proxy_micros: registry.counter(
                "webpep_server_timing_proxy_microseconds_total",
                "The proxy's time on those responses (the sum of their Server-Timing proxy durations), in microseconds.",
            ),
        })))
    }
}

struct ServerTiming {
    responses: Arc<AtomicU64>,
    proxy_micros: Arc<AtomicU64>,
}

/// A duration as Server-Timing's `dur`: milliseconds, to the microsecond (whole
/// microseconds, as the metric sums them).
fn ms(d: Duration) -> String {
    let us = d.as_micros();
    format!("{}.{:03}", us / 1000, us % 1000)
}

impl Stage for ServerTiming {
    fn name(&self) -> &'static str {
        "server-timing"
    }
    fn order(&self) -> i32 {
        1000
    }
    fn wants_original(&self, _status: http::StatusCode, _headers: &HeaderMap) -> bool {
        false
    }
    fn response_filter(&self, ctx: &StageCtx<'_>, headers: &mut HeaderMap, timing: &Timing) {
        if ctx.background {
            return;
        }
        let mut v = format!("proxy;dur={}", ms(timing.total));
        if let Some(o) = timing.origin {
            v.push_str(&format!(", origin;dur={}", ms(o)));
        }
        if let Some(q) = timing.queue {
            v.push_str(&format!(", queue;dur={}", ms(q)));
        }
        if let Some(t) = timing.transform {
            v.push_str(&format!(", transform;dur={}", ms(t)));
        }
        if let Some(h) = timing.hold {
            // Whether the response waited for its transform at the client's measured rate.
            v.push_str(&format!(", hold;desc={}", h.label()));
        }
        if let Ok(v) = HeaderValue::from_str(&v) {
            headers.append(HeaderName::from_static("server-timing"), v);
            self.responses.fetch_add(1, Relaxed);
            self.proxy_micros
                .fetch_add(timing.total.as_micros() as u64, Relaxed);
        }
    }
}
