//! Prefetch of the objects of pages and stylesheets served (000 §4.2.2): `[prefetch]`, with
//! the cache only. After the pipeline has made the response to a page or stylesheet whose
//! original bytes it held, the stage lists the objects a browser fetches next and fetches
//! them through the pipeline in the background ([`SubRequests`]: as the browser would ask,
//! so each lands in the cache transformed for this client), within the page's allowance and
//! the shared bounds ([`crate::prefetch`]). Before the cache lookup of a client's request, a
//! prefetch of its URL under way finishes first, so the request hits.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header;
use http::{Method, StatusCode, Uri};
use url::Url;
use webpep_optimize::compress;

use crate::optimize::content_coding;
use crate::prefetch::{is_document, objects_of, Prefetcher, MAX_DEPTH};
use crate::stage::{
    BoxFuture, Original, Registry, Section, Stage, StageCtx, StageFactory, SubRequests,
};
use crate::transform_pool::Priority;

pub(super) struct Factory;

impl StageFactory for Factory {
    fn name(&self) -> &'static str {
        "prefetch"
    }
    fn built_in(&self) -> bool {
        true
    }
    fn build(
        &self,
        section: Section<'_>,
        registry: &mut Registry,
    ) -> Result<Option<Arc<dyn Stage>>, (String, String)> {
        let Section::BuiltIn(cfg) = section else {
            return Ok(None);
        };
        if cfg.prefetch.concurrency == 0 {
            return Err(("prefetch.concurrency".into(), "must be at least 1".into()));
        }
        // Registered when off too: `/metrics` shows them at 0.
        let started = registry.counter(
            "webpep_prefetch_started_total",
            "Objects prefetched for pages and stylesheets served.",
        );
        let skipped = registry.counter(
            "webpep_prefetch_skipped_total",
            "Objects of pages not prefetched (over max-per-page or max-queued).",
        );
        let joined = registry.counter(
            "webpep_prefetch_joined_total",
            "Client requests that waited for a prefetch of their URL under way.",
        );
        if !(cfg.prefetch.enabled && cfg.cache.enabled) {
            return Ok(None);
        }
        let o = &cfg.origin;
        Ok(Some(Arc::new(Prefetch {
            prefetcher: Arc::new(Prefetcher::new(&cfg.prefetch)),
            max_per_page: cfg.prefetch.max_per_page,
            join_limit: o.connect_timeout.0 + o.response_timeout.0,
            max_body: cfg.limits.max_body_transform,
            started,
            skipped,
            joined,
        })))
    }
}

struct Prefetch {
    prefetcher: Arc<Prefetcher>,
    max_per_page: usize,
    /// How long a client's request waits for a prefetch of its URL at most.
    join_limit: Duration,
    /// `[limits] max-body-transform`: the most a document is decoded to.
    max_body: usize,
    started: Arc<AtomicU64>,
    skipped: Arc<AtomicU64>,
    joined: Arc<AtomicU64>,
}

impl Stage for Prefetch {
    fn name(&self) -> &'static str {
        "prefetch"
    }
    fn order(&self) -> i32 {
        // No body filter; its hooks run after the inline stage's.
        500
    }
    fn wants_original(&self, status: StatusCode, headers: &http::HeaderMap) -> bool {
        status == StatusCode::OK
            && is_document(
                headers
                    .get(header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok()),
            )
    }
    fn before_lookup<'a>(&'a self, ctx: &StageCtx<'_>, uri: &'a Uri) -> Option<BoxFuture<'a, ()>> {
        // Nothing under way (the common case) costs one load.
        if ctx.background || self.prefetcher.queued() == 0 {
            return None;
        }
        Some(Box::pin(async move {
            let key = crate::prefetch::key(uri);
            if self.prefetcher.join(&key, self.join_limit).await {
                self.joined.fetch_add(1, Relaxed);
            }
        }))
    }
    fn after_response(&self, _ctx: &StageCtx<'_>, original: Original<'_>, sub: &SubRequests) {
        let depth = sub.depth();
        let content_type = original
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok());
        if depth >= MAX_DEPTH
            || original.status != StatusCode::OK
            || *original.method != Method::GET
            || !is_document(content_type)
        {
            return;
        }
        let Ok(page) = Url::parse(&original.uri.to_string()) else {
            return;
        };
        let (headers, body) = (original.headers.clone(), original.body.clone());
        let budget = sub.allowance(self.max_per_page);
        let (sub, prefetcher, limit) = (sub.clone(), self.prefetcher.clone(), self.max_body);
        let (started, skipped) = (self.started.clone(), self.skipped.clone());
        tokio::spawn(async move {
            // Parsing is CPU work: it runs where the transforms do.
            let urls = sub
                .run_blocking(Priority::Background, 0, move || {
                    let body = match content_coding(&headers) {
                        None => body,
                        Some(ce) => match compress::decode(&body, &ce, limit) {
                            Ok(d) => Bytes::from(d),
                            Err(_) => return Vec::new(),
                        },
                    };
                    let ct = headers
                        .get(header::CONTENT_TYPE)
                        .and_then(|v| v.to_str().ok());
                    objects_of(ct, &body, &page)
                })
                .await
                .unwrap_or_default();
            let (claims, left_out) = prefetcher.claim(urls, &budget);
            started.fetch_add(claims.len() as u64, Relaxed);
            skipped.fetch_add(left_out as u64, Relaxed);
            for claim in claims {
                let req = Url::parse(claim.url())
                    .ok()
                    .and_then(|u| sub.request(&u, budget.clone()))
                    .map(|r| r.unattended());
                let Some(req) = req else { continue };
                // Nothing runs until it is polled, after the slot and the claim's start.
                let fetch = sub.get(req);
                let prefetcher = prefetcher.clone();
                tokio::spawn(async move {
                    let Some(_slot) = prefetcher.slot().await else {
                        return;
                    };
                    if !claim.start() {
                        // A client asked for it first and fetches it itself.
                        return;
                    }
                    let started = std::time::Instant::now();
                    let reply = fetch.await;
                    crate::prefetch::log_done(
                        claim.url(),
                        reply.status.as_u16(),
                        reply.cache,
                        started,
                    );
                });
            }
        });
    }
}
