//! Inlining of small stylesheets, scripts and images into pages: `[inline]`. A page filter:
//! when the pipeline holds a page's original bytes for a client, the stage fetches the page's
//! small stylesheets, scripts and images through the pipeline ([`SubRequests`]: so from the
//! cache when there, transformed as this client gets them), then the images of those
//! stylesheets, waits at most `timeout`, and copies those that qualify into the page
//! ([`crate::inline`] decides which). An inlined page, or one that got nothing because a
//! fetch was late, is not stored as the variant. The stage also gives the page's variant key
//! (with or without `data:` images).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use bytes::Bytes;
use http::header::{self, HeaderMap};
use http::Method;
use url::Url;
use webpep_optimize::compress;
use webpep_optimize::rewrite::InlineKind;

use crate::config::InlineConfig;
use crate::optimize::content_coding;
use crate::stage::{
    BoxFuture, Original, PageChange, Registry, Section, Stage, StageCtx, StageFactory, SubRequests,
};
use crate::subrequest::Budget;
use crate::transform_pool::Priority;

pub(super) struct Factory;

impl StageFactory for Factory {
    fn name(&self) -> &'static str {
        "inline"
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
        if cfg.inline.timeout.0.is_zero() {
            return Err(("inline.timeout".into(), "must be more than 0".into()));
        }
        if cfg.inline.concurrency == 0 {
            return Err(("inline.concurrency".into(), "must be at least 1".into()));
        }
        // Registered when off too: `/metrics` shows it at 0.
        let inlined = registry.counter(
            "webpep_inlined_objects_total",
            "Stylesheets, scripts and images inlined into pages.",
        );
        if !cfg.inline.enabled {
            return Ok(None);
        }
        Ok(Some(Arc::new(Inline {
            cfg: Arc::new(cfg.inline.clone()),
            max_per_page: cfg.prefetch.max_per_page,
            max_body: cfg.limits.max_body_transform,
            inlined,
        })))
    }
}

struct Inline {
    cfg: Arc<InlineConfig>,
    /// The allowance of what the fetches prefetch below them (`[prefetch] max-per-page`).
    max_per_page: usize,
    /// `[limits] max-body-transform`: the most a page is decoded to.
    max_body: usize,
    inlined: Arc<AtomicU64>,
}

impl Stage for Inline {
    fn name(&self) -> &'static str {
        "inline"
    }
    fn order(&self) -> i32 {
        // No body filter (the page filter runs before the body filters); after them, its
        // part of the variant key comes last, as before the stages, so stored keys still match.
        400
    }
    fn wants_original(&self, status: http::StatusCode, headers: &HeaderMap) -> bool {
        status == http::StatusCode::OK && crate::optimize::mime_is(headers, &["text/html"])
    }
    fn variant_part(&self, ctx: &StageCtx<'_>) -> Option<String> {
        // A page without data: images for one browser is not the page for another.
        let images = self.cfg.images && crate::inline::data_uri_images(ctx.client_headers);
        Some(if images { "inline+img" } else { "inline" }.into())
    }
    fn page_filter<'a>(
        &'a self,
        ctx: &'a StageCtx<'a>,
        original: Original<'a>,
        sub: &'a SubRequests,
    ) -> Option<BoxFuture<'a, PageChange>> {
        if ctx.background || *original.method != Method::GET || original.body.is_empty() {
            return None;
        }
        let mut page = crate::inline::page(original.status, original.headers, sub.now())?;
        page.images = self.cfg.images && crate::inline::data_uri_images(ctx.client_headers);
        if content_coding(original.headers).is_some() && !original.proxy_codings {
            // The page would go out uncompressed where the origin had compressed it.
            return None;
        }
        // The sizes and the wait for this client's link (the configured ones when it is not
        // measured).
        let plan = crate::adapt::inline_plan(ctx.link, ctx.srtt, &self.cfg);
        Some(Box::pin(async move {
            let late = Arc::new(AtomicBool::new(false));
            let replaced = self.inline(ctx, original, page, sub, plan, &late).await;
            // An inlined page depends on other responses, so it is put together again on
            // every request; one that got nothing because a candidate missed the deadline may
            // get it next time, and on a measured link what fits depends on the link. None
            // is stored as the variant.
            PageChange {
                uncacheable: replaced.is_some() || late.load(Relaxed),
                replaced,
            }
        }))
    }
}

impl Inline {
    /// `page` (a client asked for it) with its small stylesheets, scripts and images in it,
    /// within `plan`'s sizes and wait, in identity coding without validators; `None` when
    /// nothing went in. Sets `late` when a fetch was still under way at the deadline, or the
    /// plan was scaled to a measured link and the page had candidates.
    async fn inline(
        &self,
        ctx: &StageCtx<'_>,
        original: Original<'_>,
        page: crate::inline::Page,
        sub: &SubRequests,
        plan: crate::adapt::InlinePlan,
        late: &Arc<AtomicBool>,
    ) -> Option<(HeaderMap, Bytes)> {
        let cfg = &Arc::new(InlineConfig {
            max_bytes: plan.max_bytes,
            image_max_bytes: plan.image_max_bytes,
            max_total: plan.max_total,
            timeout: crate::config::Secs(plan.wait),
            ..(*self.cfg).clone()
        });
        let headers = original.headers;
        let page_url = Url::parse(&original.uri.to_string()).ok()?;
        let limit = self.max_body;
        let (h, b, u) = (headers.clone(), original.body.clone(), page_url.clone());
        // Decoding and parsing are CPU work: they run where the transforms do.
        let (html, scan) = sub
            .run_blocking(Priority::Client, 0, move || {
                let html = match content_coding(&h) {
                    None => b,
                    Some(ce) => Bytes::from(compress::decode(&b, &ce, limit).ok()?),
                };
                let scan = webpep_optimize::rewrite::inline_candidates(&html, &u);
                Some((html, scan))
            })
            .await
            .ok()
            .flatten()?;
        if scan.csp || scan.candidates.is_empty() {
            return None;
        }
        // Every <img> of the page that could go in (a sheet's image that is also one stays out).
        let page_images: Vec<Url> = scan
            .candidates
            .iter()
            .filter(|(_, k)| *k == InlineKind::Image)
            .map(|(u, _)| u.clone())
            .collect();
        // Each kind within its own count, in document order.
        let (mut texts_left, mut images_left) = (cfg.max_count, cfg.image_max_count);
        let wanted: Vec<(Url, InlineKind)> = scan
            .candidates
            .into_iter()
            .filter(|(_, kind)| {
                let left = match kind {
                    InlineKind::Image if !page.images => return false,
                    InlineKind::Image => &mut images_left,
                    _ => &mut texts_left,
                };
                let go = *left > 0;
                *left = left.saturating_sub(1);
                go
            })
            .collect();
        if plan.scaled && !wanted.is_empty() {
            late.store(true, Relaxed);
        }
        let round = Round {
            plan,
            sub: sub.clone(),
            cfg: cfg.clone(),
            page,
            budget: Budget::new(self.max_per_page),
            // A page's fetches go to a few origin hosts: a browser-like number at a time.
            slots: Arc::new(tokio::sync::Semaphore::new(cfg.concurrency)),
            deadline: tokio::time::Instant::now() + cfg.timeout.0,
            late: late.clone(),
        };
        let first = wanted.len();
        let mut texts = round.fetch(wanted.into_iter().enumerate()).await;
        let sheet_images = if page.images {
            let proxy_authority = ctx.url_mode.map(|m| m.1);
            let more = (first, images_left, proxy_authority);
            stylesheet_image_round(&round, &mut texts, &page_images, more).await
        } else {
            HashMap::new()
        };
        let ready = crate::inline::select(
            texts.into_iter().map(|(_, u, k, t)| (u, k, t)).collect(),
            cfg.max_total,
        );
        if ready.is_empty() {
            return None;
        }
        // Images that went in inside the stylesheets chosen.
        let in_sheets: usize = ready.keys().filter_map(|u| sheet_images.get(u)).sum();
        let images = in_sheets > 0 || ready.values().any(|(k, _)| *k == InlineKind::Image);
        let (out, n) = sub
            .run_blocking(Priority::Client, 0, move || {
                webpep_optimize::rewrite::inline_resources(&html, &page_url, &ready)
            })
            .await
            .ok()?
            .ok()?;
        if n == 0 {
            return None;
        }
        self.inlined.fetch_add((n + in_sheets) as u64, Relaxed);
        let mut headers = headers.clone();
        for name in [
            header::CONTENT_ENCODING,
            header::CONTENT_LENGTH,
            header::ETAG,
            header::LAST_MODIFIED,
        ] {
            headers.remove(name);
        }
        headers.remove("content-md5");
        if images {
            // Which browsers get data: images depends on the User-Agent.
            compress::add_vary(&mut headers, "User-Agent");
        }
        Some((headers, Bytes::from(out)))
    }
}

/// What an inline fetch gives: its place in the page, URL, kind and usable text.
type Fetched = (usize, Url, InlineKind, Option<String>);

/// The images of the stylesheets in `texts` (fetched, in page order), fetched next within
/// the same deadline (places from `first` on, at most `max`), go into the sheets' `url()`s as
/// `data:` URIs; an `<img>` a sheet also references is taken out of `texts`. Returns how many
/// went into each sheet (by URL).
async fn stylesheet_image_round(
    round: &Round,
    texts: &mut [Fetched],
    page_images: &[Url],
    (first, max, proxy_authority): (usize, usize, Option<&str>),
) -> HashMap<String, usize> {
    let sheets: Vec<(Url, String)> = texts
        .iter()
        .filter(|t| t.2 == InlineKind::Stylesheet)
        .filter_map(|t| Some((t.1.clone(), t.3.clone()?)))
        .collect();
    let origin = |u: &Url| origin_url(u, proxy_authority);
    let (more, shared) = crate::inline::stylesheet_image_plan(&sheets, page_images, max, &origin);
    for t in texts.iter_mut() {
        if t.2 == InlineKind::Image && shared.contains(&t.1) {
            t.3 = None;
        }
    }
    let list = more.iter().map(|(_, at)| (at.clone(), InlineKind::Image));
    let ready: HashMap<String, String> = round
        .fetch((first..).zip(list))
        .await
        .into_iter()
        // Keyed as the sheets write them.
        .filter_map(|(i, _, _, t)| Some((more.get(i - first)?.0.to_string(), t?)))
        .collect();
    let mut used_by = HashMap::new();
    if ready.is_empty() {
        return used_by;
    }
    for t in texts.iter_mut().filter(|t| t.2 == InlineKind::Stylesheet) {
        let Some(text) = &t.3 else { continue };
        let (with, used) = webpep_optimize::rewrite::inline_stylesheet_images(text, &t.1, &ready);
        if used > 0 {
            t.3 = Some(with);
            used_by.insert(t.1.to_string(), used);
        }
    }
    used_by
}

/// Where an image a stylesheet references is at the origin: in the URL mode, a reference to
/// this proxy (`http://<proxy authority>/<host>/<path>`) is the origin URL it stands for.
fn origin_url(u: &Url, proxy_authority: Option<&str>) -> Url {
    let Some(authority) = proxy_authority else {
        return u.clone();
    };
    let host = u.host_str().unwrap_or("");
    let here = match u.port() {
        Some(p) => format!("{host}:{p}"),
        None => host.to_string(),
    };
    if !here.eq_ignore_ascii_case(authority) {
        return u.clone();
    }
    let target = match u.query() {
        Some(q) => format!("{}?{q}", u.path()),
        None => u.path().to_string(),
    };
    webpep_optimize::rewrite::from_proxy_path(&target)
        .and_then(|(host_port, path)| Url::parse(&format!("http://{host_port}{path}")).ok())
        .unwrap_or_else(|| u.clone())
}

/// One page's inline fetches: through the pipeline (so from the cache when there), as the
/// client's request for the page would have asked, within the page's allowance, `[inline]
/// concurrency` at a time, until the deadline.
struct Round {
    /// The sizes: a candidate its origin declares too big is given up at its head.
    plan: crate::adapt::InlinePlan,
    sub: SubRequests,
    cfg: Arc<InlineConfig>,
    page: crate::inline::Page,
    budget: Budget,
    slots: Arc<tokio::sync::Semaphore>,
    deadline: tokio::time::Instant,
    /// Set when a fetch was still under way at the deadline.
    late: Arc<AtomicBool>,
}

impl Round {
    /// Fetches `list` (place in the page, URL, kind) at once; what came back by the deadline,
    /// in page order. Those still under way finish into the cache for the browser's own
    /// request.
    async fn fetch(&self, list: impl Iterator<Item = (usize, (Url, InlineKind))>) -> Vec<Fetched> {
        let mut set = tokio::task::JoinSet::new();
        for (i, (url, kind)) in list {
            let Some(mut req) = self.sub.request(&url, self.budget.clone()) else {
                continue;
            };
            // The text itself is wanted, not a coding of it for this client.
            req.headers_mut().remove(header::ACCEPT_ENCODING);
            let mut head = req.watch_head();
            let fetch = self.sub.get(req);
            let (slots, page, cfg, plan) =
                (self.slots.clone(), self.page, self.cfg.clone(), self.plan);
            set.spawn(async move {
                let _slot = slots.acquire_owned().await;
                // Spawned: a fetch given up on here still finishes into the cache, for the
                // browser's own request.
                let mut fetch = tokio::spawn(fetch);
                let image = kind == InlineKind::Image;
                let reply = tokio::select! {
                    r = &mut fetch => r.ok(),
                    Ok(seen) = &mut head => {
                        let usable = seen.status == http::StatusCode::OK
                            && !crate::adapt::too_big_to_inline(image, seen.declared, &plan);
                        if usable { (&mut fetch).await.ok() } else { None }
                    }
                };
                let Some(reply) = reply else {
                    return (i, url, kind, None);
                };
                let text = reply.body.as_ref().and_then(|b| {
                    crate::inline::resource_text(
                        &page,
                        kind,
                        &url,
                        reply.status,
                        &reply.headers,
                        b,
                        &cfg,
                    )
                });
                (i, url, kind, text)
            });
        }
        let mut got = Vec::new();
        while let Ok(Some(done)) = tokio::time::timeout_at(self.deadline, set.join_next()).await {
            if let Ok(t) = done {
                got.push(t);
            }
        }
        if !set.is_empty() {
            self.late.store(true, Relaxed);
        }
        set.detach_all();
        got.sort_by_key(|t| t.0);
        got
    }
}
