//! Opt-in TLS interception on the explicit port (`[intercept]`, docs/server.md "HTTPS
//! interception"): a CONNECT the policy names is answered `200` by the edge itself, the
//! browser's TLS is ended with a leaf certificate the edge's own CA mints for the host
//! ([`webpep_intercept::accept_browser`], shared with the device proxy), and the requests
//! inside are served as explicit `https://` requests through the same pipeline (cache,
//! compression, transcoding, inlining), as the CONNECT's user and client. HTTP/1.1 inside
//! runs on [`crate::conn`]'s own loops; HTTP/2 (what Chromium speaks) on hyper's server.

use std::net::SocketAddr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use http::{HeaderValue, Method, StatusCode, Version};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioExecutor;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf, ReadHalf, WriteHalf};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use webpep_intercept::{
    accept_browser, https_authority, serve_h2 as serve_h2_shell, Accepted, CaStore, Decision,
    H2End, LeafCache, Policy, TunnelReason,
};

use crate::config::InterceptConfig;
use crate::conn::{serve_requests, ConnInfo, InFlight, Wire, WriteWire};
use crate::front::{admit, Outcome};
use crate::http1::RequestHead;
use crate::metrics::Metrics;
use crate::origin::{CLIENT_CERTIFICATE, PASSTHROUGH_HEADER};
use crate::reply::{pump_rest, start_tee, Body, Pumped, Reply, Sink};
use crate::request::Arrival;
use crate::state::Server;
use crate::tunnel::Metered;

/// The access log's and the metrics' mode of requests inside an intercepted CONNECT.
pub const MODE: &str = "intercept-tls";

/// The edge's CA, its leaf certificates and the policy.
pub struct Interception {
    policy: Policy,
    leaves: LeafCache,
}

impl Interception {
    /// From `[intercept]`: `None` when off; the CA is loaded (a key others can read is
    /// refused) and the policy built, or the reason not.
    pub fn from_config(cfg: &InterceptConfig) -> Result<Option<Interception>, String> {
        if !cfg.enabled {
            return Ok(None);
        }
        let policy = cfg.policy().map_err(|(key, m)| format!("{key}: {m}"))?;
        let dir = cfg
            .ca_dir
            .as_deref()
            .ok_or("intercept.ca-dir: required when interception is enabled")?;
        let ca = CaStore::load(dir).map_err(|e| format!("intercept.ca-dir: {e}"))?;
        tracing::info!(
            "intercepting HTTPS for browsers that trust the CA in {} (SHA-256 {})",
            dir.display(),
            ca.fingerprint()
        );
        Ok(Some(Interception {
            leaves: LeafCache::new(Arc::new(ca), cfg.leaf_cache.max(1)),
            policy,
        }))
    }
}

/// An intercepted CONNECT as its requests need it.
pub(crate) struct Inner {
    /// The CONNECT's host.
    pub(crate) host: String,
    /// `host[:port]` as the requests' URLs name it.
    authority: String,
    /// The CONNECT's authenticated user (`[auth]`): the requests inside ride it.
    pub(crate) user: Option<Arc<str>>,
}

impl Inner {
    /// The explicit `https://` target of a request inside: only a path on the CONNECT's
    /// host (another host or another CONNECT would escape what the browser asked for).
    pub(crate) fn target(&self, path: &str) -> Option<String> {
        path.starts_with('/')
            .then(|| format!("https://{}{path}", self.authority))
    }
}

/// A CONNECT admitted on the explicit port, before its tunnel or interception.
pub(crate) struct Connect {
    pub(crate) host: String,
    pub(crate) port: u16,
    /// What the client sent after the CONNECT head (its ClientHello's start).
    pub(crate) leftover: BytesMut,
    pub(crate) start: Instant,
    pub(crate) user: Option<Arc<str>>,
}

impl Server {
    /// An answer inside an intercepted connection saying the origin asks for a client
    /// certificate (which only the browser can present): the host is tunnelled from now on,
    /// so the browser's reload goes through.
    pub(crate) fn after_intercepted(&self, host: &str, reply: &Reply) {
        let Some(icpt) = &self.intercept else {
            return;
        };
        if reply
            .headers
            .get(PASSTHROUGH_HEADER)
            .is_some_and(|v| v == CLIENT_CERTIFICATE)
        {
            icpt.policy
                .pass_through(host, TunnelReason::ClientCertificate);
            tracing::info!(%host, "the origin asks for a client certificate: tunnelled untouched from now on");
        }
    }
}

/// A CONNECT on the explicit port: opened when the policy says so (and its port is one
/// CONNECT may reach), else a tunnel as always.
pub(crate) async fn connect(
    server: &Arc<Server>,
    mut stream: TcpStream,
    c: Connect,
    conn: &ConnInfo,
    (cancel, hard): (CancellationToken, CancellationToken),
    in_flight: InFlight,
) {
    let Connect {
        host,
        port,
        leftover,
        start,
        user,
    } = c;
    let peer = conn.peer;
    let opened = server.intercept.as_ref().filter(|i| {
        server.acl.connect_port_allowed(port) && i.policy.decide(&host, port) == Decision::Intercept
    });
    let Some(icpt) = opened else {
        let user = user.as_deref();
        crate::tunnel::run(
            server, stream, leftover, &host, port, peer, start, user, hard,
        )
        .await;
        return;
    };
    let metrics = &server.metrics;
    let ok = b"HTTP/1.1 200 Connection established\r\n\r\n";
    if stream.write_all(ok).await.is_err() {
        return;
    }
    Metrics::add(&metrics.client_bytes_out, ok.len() as u64);
    metrics.request("connect", 200);
    // The TCP socket stays reachable under the TLS for its options and link measurement.
    let socket = match stream.as_fd().try_clone_to_owned() {
        Ok(fd) => Arc::new(fd),
        Err(e) => {
            tracing::warn!(client = %peer, %host, "intercepting {host}:{port}: {e}; connection closed");
            return;
        }
    };
    // Counted as the client's bytes on the wire, TLS records and all.
    // Held to the client's budget beneath the TLS, where its bytes are the wire's.
    let air = server.air_budgets.join(peer.ip(), stream.as_fd());
    let wire = Metered::client(crate::air_budget::AirGated::new(air, stream), metrics);
    let handshake = tokio::time::timeout(
        server.cfg.limits.header_timeout.0,
        accept_browser(wire, leftover.to_vec(), &host, &icpt.leaves),
    );
    let accepted = tokio::select! {
        r = handshake => r,
        _ = hard.cancelled() => return,
    };
    let Accepted { tls, h2 } = match accepted {
        Ok(Ok(a)) => a,
        Ok(Err(e)) if e.is_silent_close() => {
            // A browser's unused preconnect.
            tracing::debug!(client = %peer, %host, "intercepting {host}:{port}: closed before its ClientHello");
            return;
        }
        Ok(Err(e)) => {
            tracing::warn!(client = %peer, %host, "intercepting {host}:{port}: {e}; connection closed");
            return;
        }
        Err(_) => {
            tracing::warn!(client = %peer, %host, "intercepting {host}:{port}: no TLS handshake within limits.header-timeout; connection closed");
            return;
        }
    };
    Metrics::add(&metrics.intercepted_connections, 1);
    tracing::info!(target: "webpep::access", client = %peer, mode = MODE, method = "CONNECT",
        url = %format!("{host}:{port}"), status = 200u16, user = user.as_deref().unwrap_or("-"),
        h2, "intercepted");
    let inner = Arc::new(Inner {
        authority: https_authority(&host, port),
        host: host.clone(),
        user,
    });
    if h2 {
        let at = Arrival {
            peer,
            local: conn.local,
            original_dst: None,
        };
        serve_h2(server.clone(), tls, inner, at, (cancel, hard)).await;
    } else {
        let (rd, wr) = tokio::io::split(tls);
        let inner_conn = ConnInfo {
            peer,
            local: conn.local,
            original_dst: None,
            inner: Some(inner),
        };
        let rd = TlsHalf {
            half: rd,
            socket: socket.clone(),
        };
        let wr = TlsHalf { half: wr, socket };
        serve_requests(
            server.clone(),
            rd,
            wr,
            inner_conn,
            (cancel, hard),
            in_flight,
        )
        .await;
    }
    tracing::info!(target: "webpep::access", client = %peer, mode = MODE,
        url = %format!("{host}:{port}"), ms = start.elapsed().as_millis() as u64, "intercepted connection closed");
}

/// A half of the browser's TLS, ended here, with the TCP socket beneath.
pub(crate) struct TlsHalf<H> {
    half: H,
    socket: Arc<OwnedFd>,
}

impl<H> Wire for TlsHalf<H> {
    // Metered beneath the TLS.
    const COUNTS_BYTES: bool = false;
    fn socket(&self) -> BorrowedFd<'_> {
        self.socket.as_fd()
    }
}

impl<T> WriteWire for TlsHalf<WriteHalf<T>>
where
    T: AsyncRead + AsyncWrite + Send + Unpin,
{
    type Read = TlsHalf<ReadHalf<T>>;
    fn connect<'a>(
        self,
        _rd: Self::Read,
        _server: &'a Arc<Server>,
        _c: Connect,
        _conn: &'a ConnInfo,
        _tokens: (CancellationToken, CancellationToken),
        _in_flight: InFlight,
    ) -> crate::subrequest::BoxFuture<'a, ()> {
        Box::pin(async {})
    }
    fn abort(self) {}
}

impl<H: AsyncRead + Unpin> AsyncRead for TlsHalf<H> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().half).poll_read(cx, buf)
    }
}

impl<H: AsyncWrite + Unpin> AsyncWrite for TlsHalf<H> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().half).poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().half).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().half).poll_shutdown(cx)
    }
}

type H2Body = UnsyncBoxBody<Bytes, std::io::Error>;

/// HTTP/2 inside the browser's TLS: each stream one request through the pipeline. The
/// connection closes gracefully after `client-idle-timeout` without a stream (as an idle
/// HTTP/1 connection does) and at the server's shutdown.
async fn serve_h2<S>(
    server: Arc<Server>,
    io: S,
    inner: Arc<Inner>,
    at: Arrival,
    (cancel, hard): (CancellationToken, CancellationToken),
) where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let idle = server.cfg.limits.client_idle_timeout.0;
    let handle = move |req: http::Request<Incoming>| {
        let (server, inner) = (server.clone(), inner.clone());
        async move { exchange(server, &inner, at, req).await }
    };
    let builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    if let H2End::Closed(Some(e)) = serve_h2_shell(io, &builder, handle, idle, &cancel, &hard).await
    {
        tracing::debug!(client = %at.peer, "intercepted HTTP/2 connection: {e}");
    }
}

/// What the access log says of one HTTP/2 exchange.
struct Logged {
    peer: SocketAddr,
    method: Method,
    url: String,
    user: Option<Arc<str>>,
    start: Instant,
}

impl Logged {
    fn done(&self, server: &Server, status: StatusCode, cache: &str, bytes: u64, truncated: bool) {
        server.metrics.request(MODE, status.as_u16());
        tracing::info!(
            target: "webpep::access",
            client = %self.peer,
            mode = MODE,
            method = %self.method,
            url = %self.url,
            status = status.as_u16(),
            bytes,
            cache,
            user = self.user.as_deref().unwrap_or("-"),
            ms = self.start.elapsed().as_millis() as u64,
            truncated,
            h2 = true,
        );
    }
}

/// One HTTP/2 request through the pipeline, as an explicit `https://` request.
async fn exchange(
    server: Arc<Server>,
    inner: &Inner,
    at: Arrival,
    req: http::Request<Incoming>,
) -> http::Response<H2Body> {
    let (parts, body) = req.into_parts();
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut log = Logged {
        peer: at.peer,
        method: parts.method.clone(),
        url: path.to_string(),
        user: inner.user.clone(),
        start: Instant::now(),
    };
    let refused = |status, why: &str| Reply::text(status, why);
    let target = match inner.target(path) {
        Some(t) if parts.method != Method::CONNECT => t,
        _ => {
            let r = refused(StatusCode::METHOD_NOT_ALLOWED, "CONNECT inside a tunnel");
            return respond(server, r, log);
        }
    };
    let (body, lease) = match read_body(&server, at, body).await {
        Ok(b) => b,
        Err(r) => return respond(server, r, log),
    };
    let mut headers = parts.headers;
    // HTTP/2 carries the host in `:authority`; the pipeline and HTTP/1 origins want Host.
    if let Ok(v) = HeaderValue::from_str(&inner.authority) {
        headers.insert(http::header::HOST, v);
    }
    let head = RequestHead {
        method: parts.method,
        target,
        version: Version::HTTP_11,
        headers,
        head_len: 0,
    };
    let adm = admit(&server, head, body, Some(lease), at, inner.user.clone()).await;
    log.url = adm.url;
    log.user = adm.user;
    let reply = match adm.outcome {
        Outcome::Serve(req) => server.clone().handle(req).await,
        Outcome::Connect { .. } => {
            refused(StatusCode::METHOD_NOT_ALLOWED, "CONNECT inside a tunnel")
        }
        Outcome::Refuse(r) => r,
    };
    server.after_intercepted(&inner.host, &reply);
    respond(server, reply, log)
}

/// A reply as an HTTP/2 response; a streamed body goes on as it comes from the origin (its
/// breaking off resets the stream, so the browser cannot take it as complete).
fn respond(server: Arc<Server>, reply: Reply, log: Logged) -> http::Response<H2Body> {
    let Reply {
        status,
        mut headers,
        body,
        cache,
        lease,
        ..
    } = reply;
    let no_body = log.method == Method::HEAD
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED;
    let full = |b: Bytes| Full::new(b).map_err(|n| match n {}).boxed_unsync();
    let (body, len): (H2Body, Option<u64>) = match body {
        _ if no_body => {
            log.done(&server, status, cache, 0, false);
            (full(Bytes::new()), None)
        }
        Body::Empty => {
            log.done(&server, status, cache, 0, false);
            (full(Bytes::new()), Some(0))
        }
        Body::Full(b) => {
            log.done(&server, status, cache, b.len() as u64, false);
            let n = b.len() as u64;
            (full(b), Some(n))
        }
        Body::Stream {
            prefix,
            mut rest,
            len,
            stall,
            tee,
        } => {
            let (tx, rx) = mpsc::channel(4);
            tokio::spawn(async move {
                let _lease = lease;
                let mut tee = start_tee(tee, &prefix);
                let mut sink = ChannelSink(tx);
                let first = prefix.len() as u64;
                let sent = if prefix.is_empty() {
                    Ok(0)
                } else {
                    sink.part(prefix).await
                };
                let origin_bytes = &server.metrics.origin_bytes_in;
                let end = match sent {
                    Ok(_) => {
                        pump_rest(
                            &mut rest,
                            first,
                            len,
                            stall,
                            &mut tee,
                            origin_bytes,
                            &mut sink,
                        )
                        .await
                    }
                    Err(e) => Err(e),
                };
                let (bytes, truncated) = match end {
                    Ok(Pumped::Whole { bytes }) => (first + bytes, false),
                    Ok(Pumped::BrokeOff { why, bytes }) => {
                        tracing::warn!(reason = %why, "origin body broke off mid-stream");
                        let _ = sink.0.send(Err(std::io::Error::other(why))).await;
                        (first + bytes, true)
                    }
                    // The browser went away.
                    Err(_) => (first, true),
                };
                log.done(&server, status, cache, bytes, truncated);
            });
            (ChannelBody(rx).boxed_unsync(), len)
        }
    };
    if let (Some(n), false) = (len, no_body) {
        headers.insert(http::header::CONTENT_LENGTH, HeaderValue::from(n));
    }
    let mut out = http::Response::new(body);
    *out.status_mut() = status;
    *out.headers_mut() = headers;
    out
}

/// A request body read whole within `limits.max-request-body`, held in the buffered-body
/// budget as an HTTP/1 request's is.
async fn read_body(
    server: &Server,
    at: Arrival,
    mut body: Incoming,
) -> Result<(Bytes, crate::limits::BufferLease), Reply> {
    let mut intake = server.body_intake(at.peer.ip());
    let refused = |why| server.body_refused(why);
    if let Some(n) = hyper::body::Body::size_hint(&body).exact() {
        intake.admit(n).map_err(refused)?;
    }
    let mut out = bytes::BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame
            .map_err(|e| Reply::text(StatusCode::BAD_REQUEST, &format!("request body: {e}")))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        intake
            .admit((out.len() + data.len()) as u64)
            .map_err(refused)?;
        out.extend_from_slice(&data);
    }
    Ok((out.freeze(), intake.into_lease()))
}

/// An HTTP/2 stream's body, fed part by part.
struct ChannelSink(mpsc::Sender<std::io::Result<Bytes>>);

impl Sink for ChannelSink {
    async fn part(&mut self, data: Bytes) -> std::io::Result<u64> {
        let n = data.len() as u64;
        self.0
            .send(Ok(data))
            .await
            .map_err(|_| std::io::Error::other("the browser closed the stream"))?;
        Ok(n)
    }
}

/// The body the parts sent to a [`ChannelSink`] make.
struct ChannelBody(mpsc::Receiver<std::io::Result<Bytes>>);

impl hyper::body::Body for ChannelBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        self.get_mut()
            .0
            .poll_recv(cx)
            .map(|part| part.map(|r| r.map(Frame::data)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_inside_name_a_path_on_the_connects_host() {
        let inner = Inner {
            host: "a.test".into(),
            authority: https_authority("a.test", 8443),
            user: None,
        };
        assert_eq!(
            inner.target("/x?y").as_deref(),
            Some("https://a.test:8443/x?y")
        );
        assert_eq!(inner.target("https://b.test/"), None);
        assert_eq!(inner.target("b.test:443"), None);
        assert_eq!(inner.target("*"), None);
    }
}
