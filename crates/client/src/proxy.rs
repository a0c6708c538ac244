//! The browser-facing side of the client proxy: HTTP/1.1 on a local port (absolute-URI
//! requests, CONNECT, `/proxy.pac`), each request handed to an [`Upstream`] — the link to the
//! edge — and its answer written back. The proxy never resolves names or connects anywhere
//! itself.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, StatusCode, Version};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use webpep_http1::fields::{request_keeps_alive, strip_hop_by_hop};
use webpep_http1::request::{parse_request_head, request_body_framing, BodyFraming, RequestHead};
use webpep_http1::response::{write_response_head, ResponseFraming};

use webpep_intercept::Decision;

use crate::config::ClientConfig;
use crate::intercept::Interception;
use crate::pac::pac_file;

/// A browser's request as the proxy forwards it: an absolute URI (or, for CONNECT, the
/// authority), the end-to-end header fields, the whole body.
#[derive(Clone, Debug)]
pub struct ProxyRequest {
    pub method: Method,
    pub target: String,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// The edge's answer: status, end-to-end header fields, and the body as the browser is to
/// receive it (in its content coding; any transfer coding between the proxies removed).
pub struct UpstreamResponse {
    pub status: StatusCode,
    pub headers: HeaderMap,
    /// The body's length when known (sent as Content-Length; chunked otherwise).
    pub length: Option<u64>,
    pub body: Box<dyn AsyncRead + Send + Unpin>,
}

/// Why the edge could not answer.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// No answer from the edge within `link-down-after`, or no connection to it.
    #[error("the link to the edge is down: {0}")]
    LinkDown(String),
    /// The edge refused or failed the request; the browser gets this status.
    #[error("{1}")]
    Failed(StatusCode, String),
}

/// Bytes both ways of a CONNECT tunnel, to the origin through the edge.
pub type Tunnel = (
    Box<dyn AsyncRead + Send + Unpin>,
    Box<dyn AsyncWrite + Send + Unpin>,
);

/// The link to the edge, as the browser side sees it.
pub trait Upstream: Send + Sync + 'static {
    fn request(
        &self,
        req: ProxyRequest,
    ) -> impl std::future::Future<Output = Result<UpstreamResponse, UpstreamError>> + Send;
    /// Opens a tunnel to `authority` (host:port); the edge resolves and connects. It may
    /// return before the edge has answered (`QuicUpstream::fast_connect`): a refusal then
    /// ends the tunnel instead of being returned here.
    fn tunnel(
        &self,
        authority: String,
        headers: HeaderMap,
    ) -> impl std::future::Future<Output = Result<Tunnel, UpstreamError>> + Send;
    /// A count that grows whenever the link brings anything from the edge (packets of any
    /// request, acknowledgements, keep-alives), or `None` while it cannot tell (no
    /// connection). A request is given up as "link down" only after `link-down-after` in
    /// which this did not grow; an upstream that never tells makes it a plain deadline.
    fn heard(&self) -> Option<u64> {
        None
    }
}

/// Accepts browsers on `listener` until `cancel`, each connection on its own task: plain
/// HTTP/1.1, or with `tls`, the proxy's HTTPS port (crate::tls_front).
async fn accept_browsers<U: Upstream>(
    listener: TcpListener,
    cx: ClientProxy<U>,
    tls: Option<Arc<rustls::ServerConfig>>,
    cancel: CancellationToken,
) {
    let local = listener.local_addr().unwrap_or(cx.cfg.listen);
    loop {
        let (stream, peer) = tokio::select! {
            _ = cancel.cancelled() => return,
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    tracing::warn!("accept: {e}");
                    continue;
                }
            },
        };
        if !cx.cfg.allows(peer.ip()) {
            tracing::warn!(%peer, "refused a browser that is not on the allow list");
            drop(stream);
            continue;
        }
        let cx = cx.clone();
        let cancel = cancel.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            let served = async {
                match tls {
                    None => connection(stream, local, cx).await,
                    Some(tls) => crate::tls_front::connection(stream, local, tls, cx).await,
                }
            };
            tokio::select! {
                _ = cancel.cancelled() => {}
                r = served => {
                    if let Err(e) = r {
                        tracing::debug!(%peer, "browser connection: {e}");
                    }
                }
            }
        });
    }
}

/// The client proxy: its configuration, the link to the edge, interception, and counters;
/// every browser connection shares it.
pub struct ClientProxy<U> {
    pub(crate) cfg: Arc<ClientConfig>,
    pub(crate) upstream: Arc<U>,
    pub(crate) intercept: Option<Arc<Interception>>,
    pub(crate) counters: Arc<BrowserCounters>,
}

impl<U> Clone for ClientProxy<U> {
    fn clone(&self) -> Self {
        ClientProxy {
            cfg: self.cfg.clone(),
            upstream: self.upstream.clone(),
            intercept: self.intercept.clone(),
            counters: self.counters.clone(),
        }
    }
}

impl<U: Upstream> ClientProxy<U> {
    /// A proxy that sends browsers' requests over `upstream` and opens the CONNECT tunnels
    /// `intercept`'s policy names (`[intercept]`).
    pub fn new(
        cfg: Arc<ClientConfig>,
        upstream: Arc<U>,
        intercept: Option<Arc<Interception>>,
    ) -> ClientProxy<U> {
        ClientProxy {
            cfg,
            upstream,
            intercept,
            counters: Arc::default(),
        }
    }

    /// Counts into `counters` (held by whoever reads them) instead of its own.
    pub fn counting_into(mut self, counters: Arc<BrowserCounters>) -> ClientProxy<U> {
        self.counters = counters;
        self
    }

    /// What the browser side has seen so far.
    pub fn counters(&self) -> &Arc<BrowserCounters> {
        &self.counters
    }

    /// Accepts browsers on `listener` (plain HTTP/1.1) until `cancel`.
    pub async fn serve(self, listener: TcpListener, cancel: CancellationToken) {
        accept_browsers(listener, self, None, cancel).await
    }

    /// Accepts browsers on the HTTPS port `listener` until `cancel` (crate::tls_front).
    pub async fn serve_tls(
        self,
        listener: TcpListener,
        tls: Arc<rustls::ServerConfig>,
        cancel: CancellationToken,
    ) {
        accept_browsers(listener, self, Some(tls), cancel).await
    }
}

/// Counts of the browser side (the lab reads them around a load).
#[derive(Debug, Default)]
pub struct BrowserCounters {
    connections: AtomicU64,
    h2_connections: AtomicU64,
    in_flight: AtomicU64,
    peak_in_flight: AtomicU64,
}

impl BrowserCounters {
    /// Browser connections accepted, on either port.
    pub fn connections(&self) -> u64 {
        self.connections.load(Ordering::Relaxed)
    }

    /// Of those, connections speaking HTTP/2 (the HTTPS port).
    pub fn h2_connections(&self) -> u64 {
        self.h2_connections.load(Ordering::Relaxed)
    }

    /// The most requests waiting on the edge at once since the last [`Self::reset_peak`].
    pub fn peak_in_flight(&self) -> u64 {
        self.peak_in_flight.load(Ordering::Relaxed)
    }

    pub fn reset_peak(&self) {
        self.peak_in_flight
            .store(self.in_flight.load(Ordering::Relaxed), Ordering::Relaxed);
    }

    pub(crate) fn connection(&self, h2: bool) {
        self.connections.fetch_add(1, Ordering::Relaxed);
        if h2 {
            self.h2_connections.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A request is with the edge until the guard drops.
    fn request(&self) -> InFlight<'_> {
        let now = self.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        self.peak_in_flight.fetch_max(now, Ordering::Relaxed);
        InFlight(self)
    }
}

struct InFlight<'a>(&'a BrowserCounters);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Whose requests a connection carries.
pub(crate) enum Side<'a> {
    /// A browser's connection to the proxy: absolute URIs, CONNECT, the proxy's own pages.
    Proxy { local: SocketAddr },
    /// Requests inside an intercepted tunnel to `authority` (`host[:port]`, the port left
    /// out when 443): origin-form, on `https://authority`.
    Intercepted { authority: &'a str, host: &'a str },
}

/// One browser connection: requests one after the other until either side closes.
async fn connection<U: Upstream>(
    stream: TcpStream,
    local: SocketAddr,
    cx: ClientProxy<U>,
) -> std::io::Result<()> {
    let _ = stream.set_nodelay(true);
    cx.counters.connection(false);
    http1_connection(stream, local, &cx).await
}

/// HTTP/1.x from a browser on `stream` (a TCP connection, or TLS to the proxy's HTTPS port):
/// requests, and a CONNECT that ends them.
pub(crate) async fn http1_connection<S, U>(
    mut stream: S,
    local: SocketAddr,
    cx: &ClientProxy<U>,
) -> std::io::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    U: Upstream,
{
    let mut buf: Vec<u8> = Vec::with_capacity(8192);
    match requests(&mut stream, &mut buf, &Side::Proxy { local }, cx).await? {
        Some(head) => connect(stream, head, buf, cx).await,
        None => Ok(()),
    }
}

/// Serves HTTP/1.x requests on `stream` until it closes; a CONNECT on the proxy's side ends
/// the loop and is returned (the bytes after its head stay in `buf`).
pub(crate) async fn requests<S, U>(
    stream: &mut S,
    buf: &mut Vec<u8>,
    side: &Side<'_>,
    cx: &ClientProxy<U>,
) -> std::io::Result<Option<RequestHead>>
where
    S: AsyncRead + AsyncWrite + Unpin,
    U: Upstream,
{
    let cfg = &*cx.cfg;
    loop {
        // The next request, head and all, within `idle-timeout`: a connection the browser
        // forgot, or a head trickled in, does not hold the proxy for ever.
        let deadline = tokio::time::Instant::now() + cfg.idle_timeout;
        let head = loop {
            match parse_request_head(buf, cfg.max_header_bytes) {
                Ok(Some(h)) => break h,
                Ok(None) => {}
                Err(e) => {
                    let status = e.status();
                    reply(stream, status, &e.to_string(), false).await?;
                    return Ok(None);
                }
            }
            match tokio::time::timeout_at(deadline, stream.read_buf(buf)).await {
                Ok(read) => {
                    if read? == 0 {
                        return Ok(None);
                    }
                }
                Err(_) if buf.is_empty() => return Ok(None),
                Err(_) => {
                    let why = "no complete request head within idle-timeout";
                    reply(stream, StatusCode::REQUEST_TIMEOUT, why, false).await?;
                    return Ok(None);
                }
            }
        };
        buf.drain(..head.head_len);
        let keep_alive = request_keeps_alive(head.version, &head.headers);

        let target = match side {
            Side::Proxy { local } => {
                if head.method == Method::CONNECT {
                    return Ok(Some(head));
                }
                let page = if head.target.starts_with('/') {
                    Some(own_page(&head.target, *local, cx.intercept.as_deref()))
                } else if crate::intercept::is_ca_page_host(&head.target) {
                    let path = head.target.splitn(4, '/').nth(3).unwrap_or("");
                    Some(own_page(
                        &format!("/{path}"),
                        *local,
                        cx.intercept.as_deref(),
                    ))
                } else {
                    None
                };
                if let Some(page) = page {
                    if head.method != Method::GET && head.method != Method::HEAD {
                        reply(stream, StatusCode::METHOD_NOT_ALLOWED, "GET only", false).await?;
                        return Ok(None);
                    }
                    let (status, headers, body) = page;
                    write_page(stream, status, &headers, &body, &head, keep_alive).await?;
                    if keep_alive && status.is_success() {
                        continue;
                    }
                    return Ok(None);
                }
                if !(head.target.starts_with("http://") || head.target.starts_with("https://")) {
                    reply(
                        stream,
                        StatusCode::BAD_REQUEST,
                        "a proxy request names an absolute http:// URI",
                        false,
                    )
                    .await?;
                    return Ok(None);
                }
                head.target.clone()
            }
            Side::Intercepted { authority, .. } => {
                if head.method == Method::CONNECT {
                    reply(
                        stream,
                        StatusCode::METHOD_NOT_ALLOWED,
                        "CONNECT inside a tunnel",
                        false,
                    )
                    .await?;
                    return Ok(None);
                }
                if head.target.starts_with('/') {
                    format!("https://{authority}{}", head.target)
                } else if head.target.starts_with("https://") {
                    head.target.clone()
                } else {
                    reply(
                        stream,
                        StatusCode::BAD_REQUEST,
                        "a request in a TLS connection names a path",
                        false,
                    )
                    .await?;
                    return Ok(None);
                }
            }
        };
        let body = match read_body(stream, buf, &head, cfg).await {
            Ok(b) => b,
            Err(BodyError::Io(e)) => return Err(e),
            Err(BodyError::Refused(status, why)) => {
                reply(stream, status, &why, false).await?;
                return Ok(None);
            }
        };
        let mut headers = head.headers.clone();
        strip_hop_by_hop(&mut headers);
        headers.remove(http::header::PROXY_AUTHORIZATION);
        let req = ProxyRequest {
            method: head.method.clone(),
            target,
            headers,
            body,
        };
        let resp = match forward(req, side, cx).await {
            Forwarded::Answer(r) => r,
            Forwarded::LinkDown(why) => {
                link_down(stream, &why).await?;
                return Ok(None);
            }
            Forwarded::Failed(status, why) => {
                reply(stream, status, &why, keep_alive).await?;
                if keep_alive {
                    continue;
                }
                return Ok(None);
            }
        };
        let no_body = head.method == Method::HEAD
            || resp.status.is_informational()
            || resp.status == StatusCode::NO_CONTENT
            || resp.status == StatusCode::NOT_MODIFIED;
        let framing = match (no_body, resp.length) {
            (true, _) => ResponseFraming::NoBody,
            (false, Some(n)) => ResponseFraming::Length(n),
            (false, None) if head.version == Version::HTTP_11 => ResponseFraming::Chunked,
            (false, None) => ResponseFraming::Close,
        };
        let keep_alive = keep_alive && framing != ResponseFraming::Close;
        let mut headers = resp.headers;
        strip_hop_by_hop(&mut headers);
        let out = write_response_head(
            resp.status,
            &headers,
            framing,
            if no_body { resp.length } else { None },
            keep_alive,
            head.version,
        );
        stream.write_all(&out).await?;
        if !no_body {
            copy_body(resp.body, stream, framing).await?;
        }
        if !keep_alive {
            stream.shutdown().await?;
            return Ok(None);
        }
    }
}

/// What became of a request sent to the edge.
pub(crate) enum Forwarded {
    Answer(UpstreamResponse),
    /// The browser gets the link-down page.
    LinkDown(String),
    /// The browser gets an error page with this status.
    Failed(StatusCode, String),
}

/// Sends `req` to the edge and waits for its answer for as long as the link is alive: the
/// browser gets the link-down page once nothing has come from the edge for
/// `link-down-after` (a busy link, whose queue holds this answer behind others for longer,
/// is not down). Inside an intercepted tunnel, an answer that says the origin wants a client
/// certificate makes the host a tunnel from now on.
pub(crate) async fn forward<U: Upstream>(
    mut req: ProxyRequest,
    side: &Side<'_>,
    cx: &ClientProxy<U>,
) -> Forwarded {
    let cfg = &*cx.cfg;
    let browser_accepts = crate::coding::ask_edge(&mut req.headers);
    let method = req.method.clone();
    let answer = async {
        let _in_flight = cx.counters.request();
        let r = cx.upstream.request(req).await?;
        match &browser_accepts {
            Some(accepts) => crate::coding::for_browser(r, accepts.as_deref(), &method)
                .await
                .map_err(|(status, why)| UpstreamError::Failed(status, why)),
            None => Ok(r),
        }
    };
    let answered = tokio::select! {
        r = answer => Ok(r),
        () = link_silent_for(&*cx.upstream, cfg.link_down_after) => Err(()),
    };
    match answered {
        Ok(Ok(r)) => match (side, &cx.intercept) {
            (Side::Intercepted { host, .. }, Some(i)) => match i.after_response(host, r) {
                Ok(r) => Forwarded::Answer(r),
                Err((status, why)) => Forwarded::Failed(status, why),
            },
            _ => Forwarded::Answer(r),
        },
        Ok(Err(UpstreamError::LinkDown(why))) => Forwarded::LinkDown(why),
        Ok(Err(UpstreamError::Failed(status, why))) => Forwarded::Failed(status, why),
        Err(()) => Forwarded::LinkDown(format!(
            "nothing from the edge for {:.0} s",
            cfg.link_down_after.as_secs_f64()
        )),
    }
}

/// Resolves once `upstream` has heard nothing from the edge for `limit` (see
/// [`Upstream::heard`]), checking a few times per `limit`.
async fn link_silent_for<U: Upstream>(upstream: &U, limit: std::time::Duration) {
    let step = (limit / 4).clamp(
        std::time::Duration::from_millis(10),
        std::time::Duration::from_secs(1),
    );
    let mut last = upstream.heard();
    let mut quiet_since = tokio::time::Instant::now();
    loop {
        let left = limit.saturating_sub(quiet_since.elapsed());
        if left.is_zero() {
            return;
        }
        tokio::time::sleep(left.min(step)).await;
        let now = upstream.heard();
        if now.is_some() && now != last {
            quiet_since = tokio::time::Instant::now();
        }
        last = now;
    }
}

/// The proxy's own pages, at its address: the PAC file, and with interception on, the CA
/// certificate and how to install it.
pub(crate) fn own_page(
    path: &str,
    local: SocketAddr,
    intercept: Option<&Interception>,
) -> (StatusCode, HeaderMap, Bytes) {
    let path = path.split('?').next().unwrap_or(path);
    let mut headers = HeaderMap::new();
    let typed = |headers: &mut HeaderMap, ct: &'static str| {
        headers.insert(http::header::CONTENT_TYPE, HeaderValue::from_static(ct));
    };
    match (path, intercept) {
        ("/proxy.pac", _) => {
            typed(&mut headers, "application/x-ns-proxy-autoconfig");
            (StatusCode::OK, headers, Bytes::from(pac_file(local)))
        }
        ("/ca.pem", Some(i)) => {
            typed(&mut headers, "application/x-x509-ca-cert");
            headers.insert(
                http::header::CONTENT_DISPOSITION,
                HeaderValue::from_static("attachment; filename=\"webpep-ca.pem\""),
            );
            (StatusCode::OK, headers, Bytes::from(i.ca_pem().to_string()))
        }
        ("/" | "/ca", Some(i)) => {
            typed(&mut headers, "text/html; charset=utf-8");
            (StatusCode::OK, headers, Bytes::from(i.ca_page(local)))
        }
        _ => {
            let (headers, body) = error_page(
                StatusCode::NOT_FOUND,
                "this is webpep's device proxy: configure it as the browser's HTTP proxy, or use /proxy.pac",
            );
            (StatusCode::NOT_FOUND, headers, Bytes::from(body))
        }
    }
}

async fn write_page<S: AsyncWrite + Unpin>(
    stream: &mut S,
    status: StatusCode,
    headers: &HeaderMap,
    body: &[u8],
    head: &RequestHead,
    keep_alive: bool,
) -> std::io::Result<()> {
    let keep_alive = keep_alive && status.is_success();
    let out = write_response_head(
        status,
        headers,
        ResponseFraming::Length(body.len() as u64),
        None,
        keep_alive,
        Version::HTTP_11,
    );
    stream.write_all(&out).await?;
    if head.method != Method::HEAD {
        stream.write_all(body).await?;
    }
    stream.flush().await
}

enum BodyError {
    Io(std::io::Error),
    Refused(StatusCode, String),
}

/// The request body, whole (uploads from a browser are small next to what the link carries
/// back; a limit answers 413 above it).
async fn read_body<S: AsyncRead + Unpin>(
    stream: &mut S,
    buf: &mut Vec<u8>,
    head: &RequestHead,
    cfg: &ClientConfig,
) -> Result<Bytes, BodyError> {
    let framing = request_body_framing(&head.headers)
        .map_err(|e| BodyError::Refused(e.status(), e.to_string()))?;
    match framing {
        BodyFraming::None => Ok(Bytes::new()),
        BodyFraming::Length(n) => {
            let n = usize::try_from(n).unwrap_or(usize::MAX);
            if n > cfg.max_request_body {
                return Err(BodyError::Refused(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("request body over {} bytes", cfg.max_request_body),
                ));
            }
            while buf.len() < n {
                if stream.read_buf(buf).await.map_err(BodyError::Io)? == 0 {
                    return Err(BodyError::Io(std::io::ErrorKind::UnexpectedEof.into()));
                }
            }
            Ok(Bytes::from(buf.drain(..n).collect::<Vec<u8>>()))
        }
        BodyFraming::Chunked => {
            let mut decoder = webpep_http1::body::ChunkedDecoder::new(cfg.max_request_body);
            let mut out = Vec::new();
            loop {
                let used = decoder
                    .decode(buf, &mut out)
                    .map_err(|e| BodyError::Refused(StatusCode::BAD_REQUEST, e.to_string()))?;
                buf.drain(..used);
                if decoder.is_done() {
                    return Ok(Bytes::from(out));
                }
                if stream.read_buf(buf).await.map_err(BodyError::Io)? == 0 {
                    return Err(BodyError::Io(std::io::ErrorKind::UnexpectedEof.into()));
                }
            }
        }
    }
}

async fn copy_body<S: AsyncWrite + Unpin>(
    mut body: Box<dyn AsyncRead + Send + Unpin>,
    out: &mut S,
    framing: ResponseFraming,
) -> std::io::Result<()> {
    let mut chunk = vec![0u8; 16 * 1024];
    loop {
        let n = body.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        if framing == ResponseFraming::Chunked {
            out.write_all(format!("{n:x}\r\n").as_bytes()).await?;
            out.write_all(&chunk[..n]).await?;
            out.write_all(b"\r\n").await?;
        } else {
            out.write_all(&chunk[..n]).await?;
        }
    }
    if framing == ResponseFraming::Chunked {
        out.write_all(b"0\r\n\r\n").await?;
    }
    out.flush().await
}

/// CONNECT over HTTP/1.1: the edge opens the TCP connection; the browser's bytes (its TLS)
/// go through untouched — unless `[intercept]` names the host, when the client ends the
/// browser's TLS itself and its requests cross the link as ordinary ones.
async fn connect<S, U>(
    mut stream: S,
    head: RequestHead,
    early: Vec<u8>,
    cx: &ClientProxy<U>,
) -> std::io::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    U: Upstream,
{
    let plan = match plan_connect(&head.target, &head.headers, cx).await {
        Ok(p) => p,
        Err(UpstreamError::LinkDown(why)) => return link_down(&mut stream, &why).await,
        Err(UpstreamError::Failed(status, why)) => {
            return reply(&mut stream, status, &why, false).await
        }
    };
    stream
        .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
        .await?;
    run_connect(stream, early, plan, cx).await
}

/// What a CONNECT becomes once the policy (and, for a tunnel, the edge) has answered.
pub(crate) enum ConnectPlan {
    /// The client ends the browser's TLS for `host` (nothing is asked of the edge yet).
    Intercept { host: String, port: u16 },
    /// Bytes both ways to the origin, through the edge.
    Tunnel(Tunnel),
}

/// Decides a CONNECT to `authority` and, for a tunnel, has the edge open it: an error is
/// the answer the browser gets instead of 200.
pub(crate) async fn plan_connect<U: Upstream>(
    authority: &str,
    headers: &HeaderMap,
    cx: &ClientProxy<U>,
) -> Result<ConnectPlan, UpstreamError> {
    let Some((host, port)) = split_connect_authority(authority) else {
        return Err(UpstreamError::Failed(
            StatusCode::BAD_REQUEST,
            "CONNECT names host:port".into(),
        ));
    };
    if let Some(i) = &cx.intercept {
        match i.decide(&host, port) {
            Decision::Intercept => return Ok(ConnectPlan::Intercept { host, port }),
            Decision::Tunnel(why) => {
                tracing::debug!(%authority, "tunnelled untouched: {why}");
            }
        }
    }
    let mut headers = headers.clone();
    strip_hop_by_hop(&mut headers);
    headers.remove(http::header::PROXY_AUTHORIZATION);
    cx.upstream
        .tunnel(authority.to_string(), headers)
        .await
        .map(ConnectPlan::Tunnel)
}

/// The tunnel after the browser has its 200: `early` is what the browser sent past its
/// CONNECT head.
pub(crate) async fn run_connect<S, U>(
    stream: S,
    early: Vec<u8>,
    plan: ConnectPlan,
    cx: &ClientProxy<U>,
) -> std::io::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    U: Upstream,
{
    let (mut from_edge, mut to_edge) = match plan {
        ConnectPlan::Intercept { host, port } => {
            return crate::intercept::intercepted(stream, early, &host, port, cx).await
        }
        ConnectPlan::Tunnel(t) => t,
    };
    if !early.is_empty() {
        to_edge.write_all(&early).await?;
    }
    let (mut browser_read, mut browser_write) = tokio::io::split(stream);
    let up = async {
        tokio::io::copy(&mut browser_read, &mut to_edge).await?;
        to_edge.shutdown().await
    };
    let down = async {
        tokio::io::copy(&mut from_edge, &mut browser_write).await?;
        browser_write.shutdown().await
    };
    let (a, b) = tokio::join!(up, down);
    a.and(b)
}

/// `host:port` of a CONNECT (brackets of an IPv6 literal removed, host lower-cased).
fn split_connect_authority(authority: &str) -> Option<(String, u16)> {
    if authority.contains('/') {
        return None;
    }
    let (host, port) = authority.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port = port.parse::<u16>().ok().filter(|p| *p != 0)?;
    (!host.is_empty()).then(|| (host.to_ascii_lowercase(), port))
}

/// A short page for the browser: what happened, in words.
pub(crate) fn error_page(status: StatusCode, message: &str) -> (HeaderMap, String) {
    let body = format!(
        "<!doctype html><title>{code} {reason}</title><h1>{code} {reason}</h1><p>{msg}</p><p>webpep client</p>\n",
        code = status.as_u16(),
        reason = status.canonical_reason().unwrap_or(""),
        msg = html_escape(message)
    );
    let mut headers = HeaderMap::new();
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    headers.insert(
        http::header::CACHE_CONTROL,
        HeaderValue::from_static("no-store"),
    );
    (headers, body)
}

async fn reply<S: AsyncWrite + Unpin>(
    stream: &mut S,
    status: StatusCode,
    message: &str,
    keep_alive: bool,
) -> std::io::Result<()> {
    let (headers, body) = error_page(status, message);
    let out = write_response_head(
        status,
        &headers,
        ResponseFraming::Length(body.len() as u64),
        None,
        keep_alive,
        Version::HTTP_11,
    );
    stream.write_all(&out).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.flush().await
}

/// The text of the link-down page.
pub(crate) fn link_down_message(why: &str) -> String {
    format!("The slow link to the webpep edge is down ({why}). The page will load once the link is back; try again.")
}

/// The link to the edge is down: a clear page now rather than a browser spinning for minutes.
async fn link_down<S: AsyncWrite + Unpin>(stream: &mut S, why: &str) -> std::io::Result<()> {
    reply(
        stream,
        StatusCode::GATEWAY_TIMEOUT,
        &link_down_message(why),
        false,
    )
    .await
}

pub(crate) fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
