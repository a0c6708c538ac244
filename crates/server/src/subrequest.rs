//! Sub-requests: how a stage asks the pipeline for other URLs on behalf of a client's request
//! (inlining fetches a page's stylesheets, prefetch fetches its objects). A stage's
//! `page_filter` and `after_response` hooks ([`crate::stage`]) get a [`SubRequests`] handle
//! for the request they run on; through it a stage makes a GET for a URL below that request,
//! and the GET goes through the whole pipeline — cache lookup, origin, stages — as a
//! client's request for it would, so its result lands in the cache transformed for this
//! kind of client.
//!
//! What a sub-request is: the client's request for the URL as the browser would make it
//! (the same mode, so the same cache key and variant; the client's `User-Agent`, `Accept`,
//! `Accept-Language` and `Accept-Encoding`; the request it stands below as `Referer`; no
//! cookies or credentials). It stands one level deeper than the request that made it
//! ([`SubRequests::depth`]: 0 for a client's own request) and carries the allowance
//! ([`Budget`]) of the client's page that everything below it draws on. The pipeline runs a
//! sub-request as background work: its transforms at background priority, not counted in
//! the clients' cache counters, no `Server-Timing`.
//!
//! The pipeline implements [`Pipeline`] (in [`crate::proxy`]); this module imports neither
//! it nor the server's state, so stages can use the handle without an import circle.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::{StatusCode, Uri};
use url::Url;

use crate::http1::RequestHead;
use crate::mode::Mode;
use crate::request::ClientRequest;
use crate::transform_pool::{JobError, Priority, TransformPool};

/// A boxed future, as hooks on `dyn Stage` return them.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What is left of the allowance of a page a client asked for, shared by everything fetched
/// below it (its stylesheets, imports and frames, and their objects).
#[derive(Clone, Debug)]
pub struct Budget(Arc<AtomicUsize>);

impl Budget {
    /// An allowance of `n` sub-requests.
    pub fn new(n: usize) -> Budget {
        Budget(Arc::new(AtomicUsize::new(n)))
    }

    /// Takes one from the allowance; false when none is left.
    pub fn take(&self) -> bool {
        self.0
            .fetch_update(Relaxed, Relaxed, |v| v.checked_sub(1))
            .is_ok()
    }

    /// What is left.
    pub fn left(&self) -> usize {
        self.0.load(Relaxed)
    }
}

/// Where a sub-request stands below the client's request.
#[derive(Clone, Debug)]
pub struct Below {
    /// 1 for what a client's request fetches, 2 for what that fetches, and so on.
    pub depth: u8,
    /// The client's page's allowance, shared by everything below it.
    pub budget: Budget,
    /// Told the origin's response head when it arrives ([`SubRequest::watch_head`]).
    pub head: Option<HeadWatch>,
    /// Nothing waits for its answer, only for its bytes in the cache (a prefetch): no
    /// transform holds it; its variant is made in the background ([`SubRequest::unattended`]).
    pub unattended: bool,
}

/// The origin's response head of a sub-request as it arrived: its status and declared
/// length (`Content-Length`, in its coding), before the body is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeadSeen {
    /// The status.
    pub status: StatusCode,
    /// The declared body length.
    pub declared: Option<u64>,
}

/// Where the pipeline tells the origin's head of one sub-request (once).
#[derive(Clone, Debug)]
pub struct HeadWatch(Arc<std::sync::Mutex<Option<tokio::sync::oneshot::Sender<HeadSeen>>>>);

impl HeadWatch {
    /// Tells `seen` to the watcher, the first time only.
    pub fn tell(&self, seen: HeadSeen) {
        let tx = self.0.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(tx) = tx {
            let _ = tx.send(seen);
        }
    }
}

/// A sub-request's answer, as a client would have got it.
#[derive(Debug, Clone)]
pub struct SubReply {
    /// The status.
    pub status: StatusCode,
    /// The header fields.
    pub headers: HeaderMap,
    /// The body, when it was held whole (`None`: no body, or one too large to hold that went
    /// by as a stream and was dropped).
    pub body: Option<Bytes>,
    /// The cache result ("HIT", "MISS", …).
    pub cache: &'static str,
}

/// A GET a stage is about to make through the pipeline ([`SubRequests::request`]).
#[derive(Debug)]
pub struct SubRequest {
    /// The URL asked for (`http`).
    pub url: Url,
    req: ClientRequest,
    below: Below,
}

impl SubRequest {
    /// The header fields sent (a stage may change them, e.g. drop `Accept-Encoding` to get
    /// the identity coding).
    pub fn headers_mut(&mut self) -> &mut HeaderMap {
        &mut self.req.head.headers
    }

    /// Where it stands below the client's request.
    pub fn below(&self) -> &Below {
        &self.below
    }

    /// Marks it as one whose answer nobody waits for, only its bytes in the cache (a
    /// prefetch): it ends once the origin's bytes are stored, and its variant is made in the
    /// background. A client's request that joined it then decides for itself whether to
    /// wait for the variant, at the client's priority and on its link; before, it waited
    /// for the prefetch's transform at background priority.
    pub fn unattended(mut self) -> SubRequest {
        self.below.unattended = true;
        self
    }

    /// What the origin's head says, told when it arrives (before the body is read); the
    /// sender is dropped unheard when no origin is asked (a cache hit, an error).
    pub fn watch_head(&mut self) -> tokio::sync::oneshot::Receiver<HeadSeen> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.below.head = Some(HeadWatch(Arc::new(std::sync::Mutex::new(Some(tx)))));
        rx
    }
}

/// What the pipeline offers a [`SubRequests`] handle; implemented by the server's pipeline
/// ([`crate::proxy`]).
pub trait Pipeline: Send + Sync {
    /// Runs `req` through the whole pipeline as a request `below` a client's.
    fn fetch(self: Arc<Self>, req: ClientRequest, below: Below) -> BoxFuture<'static, SubReply>;
    /// The pipeline's wall clock.
    fn now(&self) -> SystemTime;
    /// Where CPU work runs (decoding, parsing, transforms).
    fn transform_pool(&self) -> &TransformPool;
}

/// A stage's handle to the pipeline for one request: sub-requests below it, CPU work on the
/// transform workers, the pipeline's clock.
#[derive(Clone)]
pub struct SubRequests {
    pipeline: Arc<dyn Pipeline>,
    client: Arc<ClientRequest>,
    uri: Uri,
    below: Option<Below>,
}

impl std::fmt::Debug for SubRequests {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubRequests")
            .field("uri", &self.uri)
            .field("below", &self.below)
            .finish_non_exhaustive()
    }
}

impl SubRequests {
    /// The handle for the request `client` (as the cache sees it: `uri`), standing `below` a
    /// client's request (`None`: it is the client's own).
    pub fn new(
        pipeline: Arc<dyn Pipeline>,
        client: Arc<ClientRequest>,
        uri: Uri,
        below: Option<Below>,
    ) -> SubRequests {
        SubRequests {
            pipeline,
            client,
            uri,
            below,
        }
    }

    /// How deep the request stands below a client's (0: the client's own request).
    pub fn depth(&self) -> u8 {
        self.below.as_ref().map_or(0, |b| b.depth)
    }

    /// The allowance of the client's page this request belongs to: the one it was made with
    /// when it is a sub-request, else a new one of `fresh`.
    pub fn allowance(&self, fresh: usize) -> Budget {
        match &self.below {
            Some(b) => b.budget.clone(),
            None => Budget::new(fresh),
        }
    }

    /// The request's absolute URI (its origin URL).
    pub fn uri(&self) -> &Uri {
        &self.uri
    }

    /// The request's URL, as `url` normalizes it.
    pub fn url(&self) -> Option<Url> {
        Url::parse(&self.uri.to_string()).ok()
    }

    /// The request this handle belongs to, as its front end (or the stage that made it)
    /// handed it over.
    pub fn client(&self) -> &ClientRequest {
        &self.client
    }

    /// The GET of `url` below this request, drawing on `budget` (see [`Self::allowance`]):
    /// as the client's request for it would be, with this request's URL as `Referer`.
    /// `None` when `url` is not one the pipeline fetches for it (not `http`, or `https` from
    /// a request that is not explicit; no host; this request's mode has no origin URLs).
    pub fn request(&self, url: &Url, budget: Budget) -> Option<SubRequest> {
        let page = self.url()?;
        let req = request_for(&self.client, &page, url)?;
        Some(SubRequest {
            url: url.clone(),
            req,
            below: Below {
                depth: self.depth().saturating_add(1),
                budget,
                head: None,
                unattended: false,
            },
        })
    }

    /// Runs `req` through the pipeline; its answer. The future owns what it needs, so it
    /// may be spawned (the pipeline's result lands in the cache whether it is awaited or
    /// not).
    pub fn get(&self, req: SubRequest) -> BoxFuture<'static, SubReply> {
        self.pipeline.clone().fetch(req.req, req.below)
    }

    /// The pipeline's wall clock (what freshness is judged at).
    pub fn now(&self) -> SystemTime {
        self.pipeline.now()
    }

    /// Runs CPU work (decoding, parsing) on the transform workers, at `priority`, reserving
    /// `memory` bytes of `[limits] transform-memory`.
    pub async fn run_blocking<T, F>(
        &self,
        priority: Priority,
        memory: u64,
        job: F,
    ) -> Result<T, JobError>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        self.pipeline
            .transform_pool()
            .run_as(priority, memory, job)
            .await
    }
}

/// Request headers a sub-request copies from the client's request: what the response's
/// variant (content coding, WebP) and content negotiation depend on. Credentials and cookies
/// are not copied.
const COPIED_HEADERS: [header::HeaderName; 4] = [
    header::USER_AGENT,
    header::ACCEPT,
    header::ACCEPT_LANGUAGE,
    header::ACCEPT_ENCODING,
];

/// The request a sub-request of `url` makes on behalf of `client`, who asked for `page`: the
/// same mode (so the cache key and variant are those of the browser's own request), the
/// headers the variant depends on, and the page as Referer.
pub fn request_for(client: &ClientRequest, page: &Url, url: &Url) -> Option<ClientRequest> {
    let host = url.host_str()?;
    let authority = match url.port() {
        Some(p) => format!("{host}:{p}"),
        None => host.to_string(),
    };
    let path = match url.query() {
        Some(q) => format!("{}?{q}", url.path()),
        None => url.path().to_string(),
    };
    let secure = match url.scheme() {
        "http" => false,
        "https" => true,
        _ => return None,
    };
    let mode = match &client.mode {
        // Only an explicit request can name its scheme: the edge fetches an https object
        // over TLS, verifying the origin as for the client's own requests.
        Mode::Explicit { .. } => Mode::Explicit {
            authority: authority.clone(),
            path: path.clone(),
            secure,
        },
        // The other modes' requests are plain HTTP by construction.
        _ if secure => return None,
        Mode::Transparent { .. } => Mode::Transparent {
            authority: authority.clone(),
            path: path.clone(),
        },
        Mode::UrlPath { .. } => Mode::UrlPath {
            authority: authority.clone(),
            path: path.clone(),
        },
        _ => return None,
    };
    let mut headers = HeaderMap::new();
    for name in COPIED_HEADERS {
        for v in client.head.headers.get_all(&name) {
            headers.append(name.clone(), v.clone());
        }
    }
    headers.insert(header::HOST, HeaderValue::from_str(&authority).ok()?);
    // As browsers do, an https page is not named to a plain-HTTP request.
    let downgrade = page.scheme() == "https" && !secure;
    if let Some(v) = HeaderValue::from_str(page.as_str())
        .ok()
        .filter(|_| !downgrade)
    {
        headers.insert(header::REFERER, v);
    }
    let target = match mode {
        Mode::Explicit { .. } => url.to_string(),
        _ => path,
    };
    Some(ClientRequest {
        head: RequestHead {
            method: http::Method::GET,
            target,
            version: http::Version::HTTP_11,
            headers,
            head_len: 0,
        },
        body: Bytes::new(),
        peer: client.peer,
        local: client.local,
        original_dst: None,
        mode,
        body_lease: None,
        // The same client on the same link.
        link: client.link,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page() -> Url {
        Url::parse("http://www.example.com/news/index.html").unwrap()
    }

    #[test]
    fn budgets_are_shared_and_run_out() {
        let b = Budget::new(2);
        let c = b.clone();
        assert!(b.take());
        assert!(c.take());
        assert!(!b.take());
        assert_eq!(c.left(), 0);
    }

    #[test]
    fn sub_requests_copy_negotiation_headers_not_credentials() {
        let mut headers = HeaderMap::new();
        headers.insert(header::ACCEPT, HeaderValue::from_static("image/webp,*/*"));
        headers.insert(header::ACCEPT_ENCODING, HeaderValue::from_static("gzip"));
        headers.insert(header::COOKIE, HeaderValue::from_static("session=secret"));
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Basic eA=="),
        );
        let client = ClientRequest {
            head: RequestHead {
                method: http::Method::GET,
                target: "/news/index.html".into(),
                version: http::Version::HTTP_11,
                headers,
                head_len: 0,
            },
            body: Bytes::new(),
            peer: "10.0.0.2:5000".parse().unwrap(),
            local: "10.0.0.1:80".parse().unwrap(),
            original_dst: Some("192.0.2.1:80".parse().unwrap()),
            body_lease: None,
            link: None,
            mode: Mode::Transparent {
                authority: "www.example.com".into(),
                path: "/news/index.html".into(),
            },
        };
        let obj = Url::parse("http://img.example.com:8080/a.gif?x=1").unwrap();
        let r = request_for(&client, &page(), &obj).unwrap();
        assert_eq!(
            r.mode,
            Mode::Transparent {
                authority: "img.example.com:8080".into(),
                path: "/a.gif?x=1".into()
            }
        );
        assert_eq!(r.head.target, "/a.gif?x=1");
        assert_eq!(
            r.original_dst, None,
            "connect by name, not to the page's address"
        );
        let h = &r.head.headers;
        assert_eq!(h.get(header::ACCEPT).unwrap(), "image/webp,*/*");
        assert_eq!(h.get(header::ACCEPT_ENCODING).unwrap(), "gzip");
        assert_eq!(h.get(header::HOST).unwrap(), "img.example.com:8080");
        assert_eq!(h.get(header::REFERER).unwrap(), page().as_str());
        assert!(h.get(header::COOKIE).is_none());
        assert!(h.get(header::AUTHORIZATION).is_none());
        let https = Url::parse("https://img.example.com/a.gif").unwrap();
        assert!(
            request_for(&client, &page(), &https).is_none(),
            "a transparent request cannot say https"
        );
    }

    #[test]
    fn explicit_sub_requests_keep_the_objects_scheme() {
        let page = Url::parse("https://www.example.com/").unwrap();
        let client = ClientRequest {
            head: RequestHead {
                method: http::Method::GET,
                target: page.to_string(),
                version: http::Version::HTTP_11,
                headers: HeaderMap::new(),
                head_len: 0,
            },
            body: Bytes::new(),
            peer: "10.0.0.2:5000".parse().unwrap(),
            local: "10.0.0.1:3128".parse().unwrap(),
            original_dst: None,
            body_lease: None,
            link: None,
            mode: Mode::Explicit {
                authority: "www.example.com".into(),
                path: "/".into(),
                secure: true,
            },
        };
        let obj = Url::parse("https://img.example.com/a.gif").unwrap();
        let r = request_for(&client, &page, &obj).unwrap();
        assert_eq!(
            r.mode.origin_url().unwrap(),
            "https://img.example.com/a.gif"
        );
        assert_eq!(r.head.target, "https://img.example.com/a.gif");
        assert_eq!(
            r.head.headers.get(header::REFERER).unwrap(),
            "https://www.example.com/"
        );
        let plain = Url::parse("http://img.example.com/b.gif").unwrap();
        let r = request_for(&client, &page, &plain).unwrap();
        assert_eq!(r.mode.origin_url().unwrap(), "http://img.example.com/b.gif");
        assert!(r.head.headers.get(header::REFERER).is_none());
        assert!(request_for(&client, &page, &Url::parse("ftp://a.test/x").unwrap()).is_none());
    }
}
