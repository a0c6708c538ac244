//! Prefetch: when the proxy passes a page or a stylesheet to a client, it fetches the objects
//! the browser will ask for next (000 §4.2.2: the proxy "(pre-)fetches these objects from the
//! other servers"; 001's server proxy parses the page) through the normal pipeline, so they
//! are in the cache, already transformed for that kind of client, while the page is still
//! crossing the air. The browser's own requests then hit the cache, or join a prefetch still
//! under way, instead of paying the origin round trip, the lookup at the edge and the
//! transcoding on the page's critical path.
//!
//! Bounds, so a page cannot make the proxy an amplifier: at most `max-per-page` objects for a
//! page a client asked for, its stylesheets', imports' and frames' objects included;
//! `concurrency` fetches at once and `max-queued` waiting for all clients together; three
//! levels of nesting at most. Only `http` GETs; the client's credentials (Cookie,
//! Authorization) are not sent, and the destinations pass the same access rules as every
//! request. A response the shared cache may not store is fetched and dropped: the browser's
//! own request then goes to the origin as it would have.
//!
//! The stage (`stages/prefetch.rs`) lists a page's objects when the pipeline has served it
//! and fetches them through its sub-request handle; this module keeps the claims, the joins
//! and the bounds it uses.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{watch, Semaphore};
use url::Url;

use crate::config::PrefetchConfig;
use crate::subrequest::Budget;

/// Nesting below a document a client asked for: its objects (1), the objects of those that
/// are documents themselves (2: a stylesheet's images and imports, a frame's objects), and
/// theirs (3: an imported stylesheet's images, a frame's stylesheets' images).
pub const MAX_DEPTH: u8 = 3;

/// The prefetches under way (by URL) and their bounds.
#[derive(Debug)]
pub struct Prefetcher {
    cfg: PrefetchConfig,
    slots: Arc<Semaphore>,
    inflight: Mutex<HashMap<String, Entry>>,
    queued: AtomicUsize,
}

/// A prefetch under way: its end, and whether it has started fetching.
#[derive(Debug, Clone)]
struct Entry {
    done: watch::Receiver<bool>,
    state: Arc<AtomicU8>,
}

/// Waiting for a fetch slot.
const QUEUED: u8 = 0;
/// Fetching: a request for its URL waits for it.
const RUNNING: u8 = 1;
/// A client asked for the URL before the prefetch started: the client fetches it itself and
/// the prefetch does nothing (no request waits behind the prefetch queue).
const TAKEN: u8 = 2;

/// Removes a prefetch from the in-flight map and wakes the requests waiting on it when
/// dropped: when the prefetch ends, fails, panics or is cancelled.
pub struct InFlight {
    prefetcher: Arc<Prefetcher>,
    url: String,
    done: watch::Sender<bool>,
    state: Arc<AtomicU8>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Ok(mut m) = self.prefetcher.inflight.lock() {
            m.remove(&self.url);
        }
        self.prefetcher.queued.fetch_sub(1, Relaxed);
        let _ = self.done.send(true);
    }
}

impl InFlight {
    /// The URL being prefetched.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Marks the prefetch as fetching, once it has a slot; false when a client has taken
    /// its URL meanwhile (then there is nothing to do).
    pub fn start(&self) -> bool {
        self.state
            .compare_exchange(QUEUED, RUNNING, Relaxed, Relaxed)
            .is_ok()
    }
}

impl Prefetcher {
    /// A prefetcher with these bounds.
    pub fn new(cfg: &PrefetchConfig) -> Prefetcher {
        Prefetcher {
            slots: Arc::new(Semaphore::new(cfg.concurrency.max(1))),
            cfg: cfg.clone(),
            inflight: Mutex::new(HashMap::new()),
            queued: AtomicUsize::new(0),
        }
    }

    /// Prefetches queued or running now.
    pub fn queued(&self) -> usize {
        self.queued.load(Relaxed)
    }

    /// A fresh allowance for a page a client asked for (`max-per-page`).
    pub fn budget(&self) -> Budget {
        Budget::new(self.cfg.max_per_page)
    }

    /// Claims `urls` (already resolved, in document order) for prefetching: as many as
    /// `budget` allows, none already under way, and no more than `max-queued` in all.
    /// Each claim is held until its guard drops; requests for its URL wait on it meanwhile.
    /// Returns the claims and how many URLs were left out by the bounds.
    pub fn claim(self: &Arc<Self>, urls: Vec<Url>, budget: &Budget) -> (Vec<InFlight>, usize) {
        let Ok(mut m) = self.inflight.lock() else {
            return (Vec::new(), urls.len());
        };
        let mut claims = Vec::new();
        let mut skipped = 0;
        for u in urls.into_iter() {
            let key = u.to_string();
            if m.contains_key(&key) {
                continue;
            }
            let full = self.queued.load(Relaxed) >= self.cfg.max_queued || !budget.take();
            if full {
                skipped += 1;
                continue;
            }
            let (tx, rx) = watch::channel(false);
            let state = Arc::new(AtomicU8::new(QUEUED));
            m.insert(
                key.clone(),
                Entry {
                    done: rx,
                    state: state.clone(),
                },
            );
            self.queued.fetch_add(1, Relaxed);
            claims.push(InFlight {
                prefetcher: self.clone(),
                url: key,
                done: tx,
                state,
            });
        }
        (claims, skipped)
    }

    /// Waits, at most `limit`, for a prefetch of `url` that is fetching; false when there
    /// was none. A prefetch of `url` still waiting for a slot is called off instead: the
    /// client's request fetches it now rather than wait behind the queue.
    pub async fn join(&self, url: &str, limit: Duration) -> bool {
        let entry = match self.inflight.lock() {
            Ok(m) => m.get(url).cloned(),
            Err(_) => None,
        };
        let Some(Entry {
            done: mut rx,
            state,
        }) = entry
        else {
            return false;
        };
        let taken = state
            .compare_exchange(QUEUED, TAKEN, Relaxed, Relaxed)
            .is_ok();
        if taken || state.load(Relaxed) == TAKEN {
            return false;
        }
        // An error means the prefetch's guard is gone: it ended.
        let _ = tokio::time::timeout(limit, rx.wait_for(|done| *done)).await;
        true
    }

    /// A slot to fetch in (waits while `concurrency` prefetches are fetching).
    pub async fn slot(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        self.slots.clone().acquire_owned().await.ok()
    }
}

/// The essence of a Content-Type, when it is a document's (`text/html`,
/// `application/xhtml+xml`, `text/css`), in lower case; no allocation.
fn mime(content_type: Option<&str>) -> &'static str {
    let m = content_type
        .and_then(|c| c.split(';').next())
        .unwrap_or("")
        .trim();
    ["text/html", "application/xhtml+xml", "text/css"]
        .into_iter()
        .find(|d| m.eq_ignore_ascii_case(d))
        .unwrap_or("")
}

/// Whether a response of this type lists objects a browser fetches next: a page (HTML,
/// XHTML) or a stylesheet.
pub fn is_document(content_type: Option<&str>) -> bool {
    matches!(
        mime(content_type),
        "text/html" | "application/xhtml+xml" | "text/css"
    )
}

/// The objects of a page (`text/html`, XHTML) or stylesheet (`text/css`) body in identity
/// coding, resolved against `page` (and `<base href>`), of the page's own scheme (`http` or
/// `https`: a browser does not fetch an https page's objects over plain HTTP, and reaches an
/// http page's https objects through a tunnel the cache cannot answer), each once, without
/// the page itself, in document order. Anything else lists nothing.
pub fn objects_of(content_type: Option<&str>, body: &[u8], page: &Url) -> Vec<Url> {
    let (base, raw) = match mime(content_type) {
        "text/html" | "application/xhtml+xml" => {
            let (base, raw) = webpep_optimize::rewrite::subresource_urls(body);
            let base = base
                .and_then(|b| page.join(b.trim()).ok())
                .unwrap_or_else(|| page.clone());
            (base, raw)
        }
        "text/css" => (page.clone(), webpep_optimize::rewrite::css_urls(body)),
        _ => return Vec::new(),
    };
    let mut seen = HashSet::new();
    seen.insert(page.as_str().to_string());
    raw.iter()
        .filter_map(|r| base.join(r.trim()).ok())
        .filter(|u| u.scheme() == page.scheme() && u.host_str().is_some())
        .map(|mut u| {
            u.set_fragment(None);
            u
        })
        .filter(|u| seen.insert(u.as_str().to_string()))
        .collect()
}

/// The key a prefetch is known by: the origin URL as `url` normalizes it.
pub fn key(uri: &http::Uri) -> String {
    let s = uri.to_string();
    Url::parse(&s).map(|u| u.to_string()).unwrap_or(s)
}

/// Logs one finished prefetch.
pub fn log_done(url: &str, status: u16, cache: &str, started: Instant) {
    tracing::debug!(
        target: "webpep::prefetch",
        url,
        status,
        cache,
        ms = started.elapsed().as_millis() as u64,
        "prefetched"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page() -> Url {
        Url::parse("http://www.example.com/news/index.html").unwrap()
    }

    #[test]
    fn html_objects_resolve_against_base_once_http_only() {
        let html = br#"<base href="http://static.example.com/s/">
            <img src="a.gif"><img src="a.gif#frag"><img src="/top.png">
            <script src="https://secure.example.com/x.js"></script>
            <img src="data:image/gif;base64,R0lG"><a href="next.html">n</a>
            <link rel=stylesheet href="//cdn.example.net/m.css">
            <img src="http://www.example.com/news/index.html">"#;
        let got: Vec<String> = objects_of(Some("text/html; charset=utf-8"), html, &page())
            .into_iter()
            .map(|u| u.to_string())
            .collect();
        assert_eq!(
            got,
            [
                "http://static.example.com/s/a.gif",
                "http://static.example.com/top.png",
                "http://cdn.example.net/m.css",
            ]
        );
    }

    #[test]
    fn an_https_pages_objects_are_its_https_ones() {
        let html = br#"<img src="a.gif"><img src="http://plain.example.com/b.gif">
            <script src="//cdn.example.net/x.js"></script>"#;
        let page = Url::parse("https://www.example.com/").unwrap();
        let got: Vec<String> = objects_of(Some("text/html"), html, &page)
            .into_iter()
            .map(|u| u.to_string())
            .collect();
        assert_eq!(
            got,
            [
                "https://www.example.com/a.gif",
                "https://cdn.example.net/x.js"
            ]
        );
    }

    #[test]
    fn css_objects_resolve_against_the_sheet_and_other_types_list_nothing() {
        let css = b"@import 'more.css'; body { background: url(\"../img/bg.png\") }";
        let sheet = Url::parse("http://s.example.com/css/main.css").unwrap();
        let got: Vec<String> = objects_of(Some("text/css"), css, &sheet)
            .into_iter()
            .map(|u| u.to_string())
            .collect();
        assert_eq!(
            got,
            [
                "http://s.example.com/css/more.css",
                "http://s.example.com/img/bg.png"
            ]
        );
        assert!(objects_of(Some("image/png"), b"<img src=a.gif>", &sheet).is_empty());
        assert!(objects_of(None, b"<img src=a.gif>", &sheet).is_empty());
    }

    #[tokio::test]
    async fn claims_are_bounded_unique_and_released_on_drop() {
        let p = Arc::new(Prefetcher::new(&PrefetchConfig {
            enabled: true,
            max_per_page: 2,
            concurrency: 1,
            max_queued: 3,
        }));
        let u = |s: &str| Url::parse(&format!("http://h/{s}")).unwrap();
        let page = p.budget();
        let (a, skipped) = p.claim(vec![u("1"), u("2"), u("3")], &page);
        assert_eq!((a.len(), skipped), (2, 1), "max-per-page");
        let (none, skipped) = p.claim(vec![u("6")], &page);
        assert_eq!(
            (none.len(), skipped),
            (0, 1),
            "a stylesheet shares its page's allowance"
        );
        let (b, skipped) = p.claim(vec![u("1"), u("4"), u("5")], &p.budget());
        assert_eq!(b.len(), 1, "1 is under way; the queue holds 3 at most");
        assert_eq!(skipped, 1);
        assert_eq!(p.queued(), 3);
        // A request for a URL being fetched waits until its prefetch ends.
        assert!(a[0].start());
        let waiter = {
            let p = p.clone();
            tokio::spawn(async move { p.join("http://h/1", Duration::from_secs(10)).await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiter.is_finished());
        drop(a);
        assert!(waiter.await.unwrap(), "joined the prefetch of 1");
        assert!(!p.join("http://h/1", Duration::from_secs(10)).await);
        assert_eq!(p.queued(), 1);
        // A request for a URL whose prefetch has not started calls it off and does not wait.
        assert!(!p.join("http://h/4", Duration::from_secs(10)).await);
        assert!(!b[0].start(), "called off");
        drop(b);
        assert_eq!(p.queued(), 0);
    }
}
