//! Opt-in TLS interception (`[intercept]`, docs/interception.md): for a CONNECT the policy
//! names, the client answers 200 itself, ends the browser's TLS with a leaf certificate its
//! own CA mints for the host, and sends the requests inside as ordinary `https://` requests
//! over the link, where the edge verifies the origin and every stage applies. Nothing is
//! asked of the edge before the browser's first request, so interception also saves the
//! tunnel's round trip.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, HeaderValue, Method, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioExecutor;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::sync::CancellationToken;
use webpep_http1::fields::strip_hop_by_hop;
use webpep_intercept::{
    accept_browser, https_authority, Accepted, CaStore, Decision, H2End, LeafCache, Policy,
    TunnelReason,
};

use crate::config::InterceptConfig;
use crate::proxy::{
    error_page, forward, html_escape, link_down_message, requests, ClientProxy, Forwarded,
    ProxyRequest, Side, Upstream, UpstreamResponse,
};

/// The host name under which a browser using the proxy finds the CA page (`.invalid` never
/// resolves, so the name cannot collide with a real site).
pub const CA_PAGE_HOST: &str = "webpep.invalid";

/// The edge's response header saying the origin wants a client certificate.
pub const PASSTHROUGH_HEADER: &str = "webpep-passthrough";

/// The client's CA, its leaf certificates and the policy.
pub struct Interception {
    ca: Arc<CaStore>,
    leaves: LeafCache,
    policy: Policy,
    ca_dir: PathBuf,
}

impl Interception {
    /// Loads the CA from `cfg`'s directory (refusing a key others can read) and the policy.
    pub fn load(cfg: &InterceptConfig) -> Result<Interception, String> {
        let ca_dir = crate::config::ca_dir(cfg);
        let ca = Arc::new(CaStore::load(&ca_dir).map_err(|e| e.to_string())?);
        Interception::new(ca, cfg, ca_dir)
    }

    /// Interception with a CA already at hand (the lab, tests).
    pub fn new(
        ca: Arc<CaStore>,
        cfg: &InterceptConfig,
        ca_dir: PathBuf,
    ) -> Result<Interception, String> {
        let policy = cfg.policy().map_err(|(key, m)| format!("{key}: {m}"))?;
        Ok(Interception {
            leaves: LeafCache::new(ca.clone(), cfg.leaf_cache.max(1)),
            ca,
            policy,
            ca_dir,
        })
    }

    /// Whether a CONNECT to `host:port` is opened.
    pub fn decide(&self, host: &str, port: u16) -> Decision {
        self.policy.decide(host, port)
    }

    /// Leaf certificates minted so far.
    pub fn minted(&self) -> u64 {
        self.leaves.minted()
    }

    /// The CA (the HTTPS port's certificate comes from it too).
    pub fn ca(&self) -> &Arc<CaStore> {
        &self.ca
    }

    pub fn ca_pem(&self) -> &str {
        self.ca.cert_pem()
    }

    pub fn fingerprint(&self) -> String {
        self.ca.fingerprint()
    }

    /// The page that hands out the CA certificate and says how to install it.
    pub fn ca_page(&self, local: SocketAddr) -> String {
        format!(
            r#"<!doctype html><meta charset="utf-8"><title>webpep CA</title>
<h1>webpep on this device: its certificate authority</h1>
<p>This device's webpep client opens the HTTPS connections its policy names so that the edge can
compress, cache and transcode them. Browsers accept that only if they trust this device's own CA.
Its SHA-256 fingerprint is <code>{fp}</code>; check it against <code>webpep client ca show</code>
before you trust it.</p>
<p><a href="http://{local}/ca.pem">Download the CA certificate (webpep-ca.pem)</a></p>
<h2>Chromium, Chrome (Linux)</h2>
<pre>certutil -d sql:$HOME/.pki/nssdb -A -t "C,," -n webpep -i webpep-ca.pem</pre>
<h2>Firefox</h2>
<pre>certutil -d sql:$HOME/.mozilla/firefox/PROFILE -A -t "C,," -n webpep -i webpep-ca.pem</pre>
<p>or Settings → Privacy &amp; Security → Certificates → View Certificates → Authorities → Import.</p>
<h2>Debian's system store (curl, wget, most programs)</h2>
<pre>sudo cp webpep-ca.pem /usr/local/share/ca-certificates/webpep-ca.crt
sudo update-ca-certificates</pre>
<p>To stop: remove the certificate from these stores, and delete the CA directory
(<code>{dir}</code>) or set <code>[intercept] enabled = false</code>.</p>
"#,
            fp = html_escape(&self.fingerprint()),
            dir = html_escape(&self.ca_dir.display().to_string()),
        )
    }

    /// Inside a tunnel to `host`: an edge answer saying the origin asks for a client
    /// certificate makes the host a plain tunnel from now on (only the browser can present
    /// one), and the browser is told to reload.
    pub(crate) fn after_response(
        &self,
        host: &str,
        resp: UpstreamResponse,
    ) -> Result<UpstreamResponse, (StatusCode, String)> {
        if !resp.headers.contains_key(PASSTHROUGH_HEADER) {
            return Ok(resp);
        }
        self.policy
            .pass_through(host, TunnelReason::ClientCertificate);
        tracing::info!(%host, "the origin asks for a client certificate: tunnelled untouched from now on");
        Err((
            StatusCode::BAD_GATEWAY,
            format!("{host} asks for a client certificate, which only the browser can present. webpep tunnels {host} untouched from now on: reload the page."),
        ))
    }
}

/// Whether an absolute request target names the CA page.
pub fn is_ca_page_host(target: &str) -> bool {
    let rest = match target.get(..7) {
        Some(s) if s.eq_ignore_ascii_case("http://") => &target[7..],
        _ => return false,
    };
    let host = rest.split(['/', '?']).next().unwrap_or("");
    host.eq_ignore_ascii_case(CA_PAGE_HOST)
}

/// An intercepted CONNECT, after the browser has its 200: TLS with a minted leaf, then its
/// requests.
pub(crate) async fn intercepted<S, U>(
    stream: S,
    early: Vec<u8>,
    host: &str,
    port: u16,
    cx: &ClientProxy<U>,
) -> std::io::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    U: Upstream,
{
    let Some(icpt) = cx.intercept.clone() else {
        return Ok(());
    };
    let Accepted { mut tls, h2 } = match accept_browser(stream, early, host, &icpt.leaves).await {
        Ok(a) => a,
        Err(e) if e.is_silent_close() => {
            // A browser's preconnect that was never used: nothing went wrong.
            tracing::debug!(%host, "intercepting {host}:{port}: closed before a ClientHello");
            return Ok(());
        }
        Err(e) => {
            tracing::warn!(%host, "intercepting {host}:{port}: {e}; connection closed");
            return Ok(());
        }
    };
    let authority = https_authority(host, port);
    tracing::debug!(%host, h2, "intercepted");
    if h2 {
        serve_tunnel_h2(tls, authority, host.to_string(), cx.clone()).await
    } else {
        let mut buf = Vec::with_capacity(8192);
        let side = Side::Intercepted {
            authority: &authority,
            host,
        };
        requests(&mut tls, &mut buf, &side, cx).await.map(|_| ())
    }
}

pub(crate) type H2Body = UnsyncBoxBody<Bytes, std::io::Error>;

/// Serves a browser's HTTP/2 connection (on the HTTPS port or in an intercepted tunnel),
/// each stream answered by `handle`, until the browser closes it or it idles out.
pub(crate) async fn serve_h2<S, F, Fut>(io: S, handle: F, idle: Duration) -> std::io::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
    F: Fn(http::Request<Incoming>) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = http::Response<H2Body>> + Send + 'static,
{
    let mut b = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    // A page of many hosts opens a stream per request and per CONNECT at once; the edge
    // and the link, not this count, decide how many are worked on.
    b.max_concurrent_streams(1024);
    // The proxy's shutdown drops its connections (ClientProxy::serve), so only idling ends
    // one from this side.
    let never = CancellationToken::new();
    match webpep_intercept::serve_h2(io, &b, handle, idle, &never, &never).await {
        H2End::Closed(Some(e)) => Err(std::io::Error::other(e)),
        _ => Ok(()),
    }
}

/// HTTP/2 inside the tunnel: each stream one request to the edge.
async fn serve_tunnel_h2<S, U>(
    io: S,
    authority: String,
    host: String,
    cx: ClientProxy<U>,
) -> std::io::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    U: Upstream,
{
    let idle = cx.cfg.idle_timeout;
    let shared = Arc::new((authority, host, cx));
    let handle = move |req: http::Request<Incoming>| {
        let shared = shared.clone();
        async move {
            let (authority, host, cx) = &*shared;
            h2_exchange(req, authority, host, cx).await
        }
    };
    serve_h2(io, handle, idle).await
}

async fn h2_exchange<U: Upstream>(
    req: http::Request<Incoming>,
    authority: &str,
    host: &str,
    cx: &ClientProxy<U>,
) -> http::Response<H2Body> {
    if req.method() == Method::CONNECT {
        return page(StatusCode::METHOD_NOT_ALLOWED, "CONNECT inside a tunnel");
    }
    let path = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str())
        .filter(|p| p.starts_with('/'))
        .unwrap_or("/");
    let target = format!("https://{authority}{path}");
    h2_forward(
        req,
        target,
        authority,
        &Side::Intercepted { authority, host },
        cx,
    )
    .await
}

/// One HTTP/2 request to the edge as `target` (`authority` becomes its Host field when it
/// has none), and the edge's answer as the stream's response.
pub(crate) async fn h2_forward<U: Upstream>(
    req: http::Request<Incoming>,
    target: String,
    authority: &str,
    side: &Side<'_>,
    cx: &ClientProxy<U>,
) -> http::Response<H2Body> {
    let (parts, body) = req.into_parts();
    let body = match Limited::new(body, cx.cfg.max_request_body).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            return page(
                StatusCode::PAYLOAD_TOO_LARGE,
                &format!("request body over {} bytes", cx.cfg.max_request_body),
            )
        }
        Err(e) => return page(StatusCode::BAD_REQUEST, &format!("request body: {e}")),
    };
    let mut headers = parts.headers;
    strip_hop_by_hop(&mut headers);
    headers.remove(http::header::PROXY_AUTHORIZATION);
    // HTTP/2 carries the host in `:authority`; the edge and an HTTP/1 origin want Host.
    if !headers.contains_key(http::header::HOST) {
        if let Ok(v) = HeaderValue::from_str(authority) {
            headers.insert(http::header::HOST, v);
        }
    }
    let req = ProxyRequest {
        method: parts.method.clone(),
        target,
        headers,
        body,
    };
    let resp = match forward(req, side, cx).await {
        Forwarded::Answer(r) => r,
        Forwarded::LinkDown(why) => {
            return page(StatusCode::GATEWAY_TIMEOUT, &link_down_message(&why))
        }
        Forwarded::Failed(status, why) => return page(status, &why),
    };
    let mut headers = resp.headers;
    strip_hop_by_hop(&mut headers);
    let no_body = parts.method == Method::HEAD
        || resp.status == StatusCode::NO_CONTENT
        || resp.status == StatusCode::NOT_MODIFIED;
    if let (Some(n), false) = (resp.length, no_body) {
        headers.insert(http::header::CONTENT_LENGTH, HeaderValue::from(n));
    }
    let body: H2Body = if no_body {
        empty_body()
    } else {
        ReadBody {
            inner: resp.body,
            buf: BytesMut::new(),
        }
        .boxed_unsync()
    };
    let mut out = http::Response::new(body);
    *out.status_mut() = resp.status;
    *out.headers_mut() = headers;
    out
}

pub(crate) fn empty_body() -> H2Body {
    Full::new(Bytes::new())
        .map_err(|n| match n {})
        .boxed_unsync()
}

pub(crate) fn full_body(bytes: Bytes) -> H2Body {
    Full::new(bytes).map_err(|n| match n {}).boxed_unsync()
}

pub(crate) fn page(status: StatusCode, message: &str) -> http::Response<H2Body> {
    let (headers, body): (HeaderMap, String) = error_page(status, message);
    let mut out = http::Response::new(full_body(Bytes::from(body)));
    *out.status_mut() = status;
    *out.headers_mut() = headers;
    out
}

/// An edge response body as HTTP/2 data frames, as it arrives.
struct ReadBody {
    inner: Box<dyn AsyncRead + Send + Unpin>,
    buf: BytesMut,
}

impl hyper::body::Body for ReadBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        let this = self.get_mut();
        this.buf.reserve(16 * 1024);
        match tokio_util::io::poll_read_buf(Pin::new(&mut this.inner), cx, &mut this.buf) {
            Poll::Ready(Ok(0)) => Poll::Ready(None),
            Poll::Ready(Ok(_)) => Poll::Ready(Some(Ok(Frame::data(this.buf.split().freeze())))),
            Poll::Ready(Err(e)) => Poll::Ready(Some(Err(e))),
            Poll::Pending => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ca_page_host() {
        assert!(is_ca_page_host("http://webpep.invalid/"));
        assert!(is_ca_page_host("http://WEBPEP.invalid/ca.pem"));
        assert!(is_ca_page_host("http://webpep.invalid"));
        assert!(!is_ca_page_host("https://webpep.invalid/"));
        assert!(!is_ca_page_host("http://webpep.invalid.example/"));
    }
}
