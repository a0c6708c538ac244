//! Connection drivers: one future per connection, polled by the page load's own task (never
//! spawned, so every socket is made on the caller's thread). A driver sets the connection up,
//! then takes jobs (requests) from its channel and reports events back.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::stream::FuturesUnordered;
use futures_util::StreamExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};
use tokio::time::Instant;
use url::Url;

use crate::error::FetchError;
use crate::h1::{self, BodyDecoder, Framing};
use crate::net::{self, Origin, Protocol, Stream, Target};
use crate::request_headers;

/// One request for a driver.
#[derive(Debug, Clone)]
pub(crate) struct Job {
    pub gen: u64,
    pub obj: usize,
    pub url: Url,
    pub origin: Origin,
    /// This request's own headers: those for its kind of object, the Referer, conditional
    /// headers. One named like a common header replaces it.
    pub extra_headers: Vec<(String, String)>,
    /// Report the head and each body chunk as they arrive (documents, for the preload scanner).
    pub stream_body: bool,
    /// Return the whole body in `Done` (documents and stylesheets, for discovery and caching).
    pub keep_body: bool,
}

/// Fixed parameters of the drivers of one loader.
#[derive(Debug, Clone)]
pub(crate) struct DriverCfg {
    /// When any of the loader's connections last received bytes (see [`Progress`]).
    pub progress: Progress,
    pub user_agent: String,
    /// Sent with every request, after the fixed ones (a browser's Accept-Language etc.).
    pub request_headers: Vec<(String, String)>,
    pub accept_encoding: Option<String>,
    pub response_timeout: Duration,
    pub setup_timeouts: net::SetupTimeouts,
    pub max_body_bytes: u64,
    pub max_header_bytes: usize,
    pub tls: Option<Arc<rustls::ClientConfig>>,
}

/// The response to a job.
#[derive(Debug, Clone, Default)]
pub(crate) struct Response {
    pub status: u16,
    pub reason: String,
    pub version: &'static str,
    pub headers: Vec<(String, String)>,
    pub headers_size: Option<u64>,
    pub body_size: u64,
    pub content_size: u64,
    pub body: Option<Bytes>,
}

/// The request as sent.
#[derive(Debug, Clone, Default)]
pub(crate) struct Sent {
    pub version: &'static str,
    pub headers: Vec<(String, String)>,
    pub headers_size: Option<u64>,
    pub send_start: Option<Instant>,
    pub send_end: Option<Instant>,
}

#[derive(Debug)]
pub(crate) enum Event {
    Connected {
        conn: u64,
        peer: SocketAddr,
        protocol: Protocol,
        tcp_start: Instant,
        end: Instant,
        tls: Option<(Instant, Instant)>,
    },
    ConnectFailed {
        conn: u64,
        error: FetchError,
        start: Instant,
        end: Instant,
    },
    Head {
        gen: u64,
        obj: usize,
        status: u16,
        headers: Vec<(String, String)>,
    },
    Chunk {
        gen: u64,
        obj: usize,
        data: Bytes,
    },
    Done {
        conn: u64,
        gen: u64,
        obj: usize,
        sent: Sent,
        first_byte: Option<Instant>,
        end: Instant,
        outcome: Result<Response, FetchError>,
        /// The request got no response byte and may be re-sent on another connection.
        retryable: bool,
        /// The connection can take another request.
        reusable: bool,
    },
    Closed {
        conn: u64,
    },
    Dns {
        gen: u64,
        host: String,
        start: Instant,
        end: Instant,
        result: Result<crate::dns::Answer, String>,
    },
}

/// How a driver should speak HTTP/1.x.
#[derive(Debug, Clone, Copy)]
pub(crate) struct H1Mode {
    /// Send HTTP/1.0 requests without keep-alive.
    pub http10: bool,
    /// Absolute-URI requests (plain http through a proxy).
    pub absolute: bool,
}

/// Run one connection from setup to close.
pub(crate) async fn run(
    conn: u64,
    target: Target,
    mode: H1Mode,
    cfg: Arc<DriverCfg>,
    jobs: UnboundedReceiver<Job>,
    ev: UnboundedSender<Event>,
) {
    let start = Instant::now();
    let est = match net::establish(
        &target,
        cfg.tls.clone(),
        cfg.setup_timeouts,
        &cfg.user_agent,
        cfg.max_header_bytes,
    )
    .await
    {
        Ok(e) => e,
        Err((error, end)) => {
            let _ = ev.send(Event::ConnectFailed {
                conn,
                error,
                start,
                end,
            });
            return;
        }
    };
    let protocol = if est.alpn_h2 {
        Protocol::H2
    } else if mode.http10 {
        Protocol::Http10
    } else {
        Protocol::Http11
    };
    let _ = ev.send(Event::Connected {
        conn,
        peer: est.peer,
        protocol,
        tcp_start: est.tcp_start,
        end: est.end,
        tls: est.tls,
    });
    if est.alpn_h2 {
        let stream = Noting {
            inner: est.stream,
            progress: cfg.progress.clone(),
        };
        h2_loop(conn, stream, cfg, jobs, ev).await;
    } else {
        let stream = Noting {
            inner: est.stream,
            progress: cfg.progress.clone(),
        };
        h1_loop(conn, stream, mode, cfg, jobs, ev).await;
    }
}

fn request_headers(job: &Job, cfg: &DriverCfg, mode: H1Mode) -> Vec<(String, String)> {
    let mut h = vec![("User-Agent".to_string(), cfg.user_agent.clone())];
    if !cfg
        .request_headers
        .iter()
        .any(|(n, _)| n.eq_ignore_ascii_case("accept"))
    {
        h.push(("Accept".to_string(), "*/*".to_string()));
    }
    // Through a proxy, browsers ask for persistence in Proxy-Connection *instead of*
    // Connection (Mozilla's nsHttpHandler; Chromium does the same): a configured Connection
    // header is not sent then, so the request is as long as the browser's, byte for byte.
    let via_proxy = !mode.http10 && mode.absolute;
    h.extend(
        cfg.request_headers
            .iter()
            .filter(|(n, _)| !(via_proxy && n.eq_ignore_ascii_case("connection")))
            .cloned(),
    );
    if let Some(ae) = &cfg.accept_encoding {
        h.push(("Accept-Encoding".into(), ae.clone()));
    }
    if via_proxy {
        h.push(("Proxy-Connection".into(), "keep-alive".into()));
    }
    let mut all = vec![("Host".to_string(), job.origin.host_header())];
    all.extend(request_headers::merge(&h, &job.extra_headers));
    all
}

fn request_target(url: &Url, absolute: bool) -> String {
    if absolute {
        let mut u = url.clone();
        u.set_fragment(None);
        return u.to_string();
    }
    let mut t = url.path().to_string();
    if let Some(q) = url.query() {
        t.push('?');
        t.push_str(q);
    }
    if t.is_empty() {
        t.push('/');
    }
    t
}

enum RState {
    Head,
    Body {
        dec: BodyDecoder,
        head: h1::ResponseHead,
    },
}

struct InFlight {
    job: Job,
    sent: Sent,
    first_byte: Option<Instant>,
    state: RState,
    body: Option<BytesMut>,
    body_size: u64,
    content_size: u64,
    headers_size: u64,
}

impl InFlight {
    fn done(
        self,
        conn: u64,
        outcome: Result<Response, FetchError>,
        retryable: bool,
        reusable: bool,
    ) -> Event {
        Event::Done {
            conn,
            gen: self.job.gen,
            obj: self.job.obj,
            sent: self.sent,
            first_byte: self.first_byte,
            end: Instant::now(),
            outcome,
            retryable,
            reusable,
        }
    }
}

/// Report every request still in flight as unanswered (re-sendable when no byte came back).
fn abandon(
    conn: u64,
    inflight: &mut VecDeque<InFlight>,
    ev: &UnboundedSender<Event>,
    err: FetchError,
) {
    while let Some(f) = inflight.pop_front() {
        let got_bytes = f.first_byte.is_some();
        let e = if got_bytes {
            FetchError::Truncated
        } else {
            err.clone()
        };
        let _ = ev.send(f.done(conn, Err(e), !got_bytes, false));
    }
    let _ = ev.send(Event::Closed { conn });
}

/// The response at the front is malformed: it fails, the rest are abandoned, the connection
/// closes (its framing can no longer be trusted).
fn bad_response(
    conn: u64,
    inflight: &mut VecDeque<InFlight>,
    ev: &UnboundedSender<Event>,
    why: String,
) -> Step {
    fail_front(conn, inflight, ev, FetchError::BadResponse(why))
}

/// The response at the front fails with `err` (malformed, or over the body limit): the rest
/// are abandoned and the connection closes, since what follows on it cannot be read.
fn fail_front(
    conn: u64,
    inflight: &mut VecDeque<InFlight>,
    ev: &UnboundedSender<Event>,
    err: FetchError,
) -> Step {
    if let Some(f) = inflight.pop_front() {
        let _ = ev.send(f.done(conn, Err(err), false, false));
    }
    abandon(
        conn,
        inflight,
        ev,
        FetchError::ConnectionClosed { retries: 0 },
    );
    Step::Close
}

enum Step {
    Continue,
    Close,
}

/// Parse as much of the buffered responses as possible.
fn process(
    conn: u64,
    buf: &mut BytesMut,
    inflight: &mut VecDeque<InFlight>,
    mode: H1Mode,
    cfg: &DriverCfg,
    ev: &UnboundedSender<Event>,
    now: Instant,
) -> Step {
    loop {
        let Some(front) = inflight.front_mut() else {
            if buf.is_empty() {
                return Step::Continue;
            }
            // Bytes nobody asked for: the connection cannot be trusted any more.
            let _ = ev.send(Event::Closed { conn });
            return Step::Close;
        };
        let head_pending = matches!(front.state, RState::Head);
        if buf.is_empty() && head_pending {
            return Step::Continue;
        }
        if front.first_byte.is_none() {
            front.first_byte = Some(now);
        }
        match &mut front.state {
            RState::Head => match h1::parse_head(buf, cfg.max_header_bytes) {
                Ok(None) => return Step::Continue,
                Err(e) => {
                    return bad_response(conn, inflight, ev, e.0);
                }
                Ok(Some(head)) => {
                    bytes::Buf::advance(buf, head.len);
                    front.headers_size += head.len as u64;
                    if (100..200).contains(&head.status) && head.status != 101 {
                        continue; // informational; the real head follows
                    }
                    let framing = match h1::framing(&head, "GET") {
                        Ok(f) => f,
                        Err(e) => {
                            return bad_response(conn, inflight, ev, e.0);
                        }
                    };
                    if let Framing::Length(l) = framing {
                        if l > cfg.max_body_bytes {
                            let too_large = FetchError::TooLarge(cfg.max_body_bytes);
                            return fail_front(conn, inflight, ev, too_large);
                        }
                    }
                    if front.job.stream_body {
                        let _ = ev.send(Event::Head {
                            gen: front.job.gen,
                            obj: front.job.obj,
                            status: head.status,
                            headers: head.headers.clone(),
                        });
                    }
                    front.state = RState::Body {
                        dec: BodyDecoder::new(framing),
                        head,
                    };
                }
            },
            RState::Body { dec, head } => {
                let stream = front.job.stream_body;
                let (gen, obj) = (front.job.gen, front.job.obj);
                let mut decoded = 0u64;
                let keep = &mut front.body;
                let r = dec.decode(buf, &mut |chunk: &[u8]| {
                    decoded += chunk.len() as u64;
                    if let Some(k) = keep.as_mut() {
                        k.extend_from_slice(chunk);
                    }
                    if stream && !chunk.is_empty() {
                        let _ = ev.send(Event::Chunk {
                            gen,
                            obj,
                            data: Bytes::copy_from_slice(chunk),
                        });
                    }
                });
                front.content_size += decoded;
                match r {
                    Err(e) => {
                        return bad_response(conn, inflight, ev, e.0);
                    }
                    Ok(d) => {
                        front.body_size += d.wire as u64;
                        if front.body_size > cfg.max_body_bytes {
                            let too_large = FetchError::TooLarge(cfg.max_body_bytes);
                            return fail_front(conn, inflight, ev, too_large);
                        }
                        if !d.done {
                            return Step::Continue;
                        }
                        let reusable = !mode.http10
                            && head.keep_alive()
                            && dec.framing() != Framing::UntilClose;
                        if let Some(f) = inflight.pop_front() {
                            let resp = finish_response(&f);
                            let _ = ev.send(f.done(conn, Ok(resp), false, reusable));
                        }
                        if !reusable {
                            abandon(
                                conn,
                                inflight,
                                ev,
                                FetchError::ConnectionClosed { retries: 0 },
                            );
                            return Step::Close;
                        }
                    }
                }
            }
        }
    }
}

fn finish_response(f: &InFlight) -> Response {
    let (status, reason, version, headers) = match &f.state {
        RState::Body { head, .. } => (
            head.status,
            head.reason.clone(),
            head.version_str(),
            head.headers.clone(),
        ),
        RState::Head => (0, String::new(), "", Vec::new()),
    };
    Response {
        status,
        reason,
        version,
        headers,
        headers_size: Some(f.headers_size),
        body_size: f.body_size,
        content_size: f.content_size,
        body: f.body.as_ref().map(|b| Bytes::copy_from_slice(b)),
    }
}

async fn h1_loop(
    conn: u64,
    stream: Noting<Stream>,
    mode: H1Mode,
    cfg: Arc<DriverCfg>,
    mut jobs: UnboundedReceiver<Job>,
    ev: UnboundedSender<Event>,
) {
    let (mut rd, mut wr) = tokio::io::split(stream);
    let mut buf = BytesMut::with_capacity(32 * 1024);
    let mut inflight: VecDeque<InFlight> = VecDeque::new();
    let mut accepting = true;
    let mut deadline = Instant::now() + cfg.response_timeout;
    loop {
        if !accepting && inflight.is_empty() {
            return;
        }
        if buf.capacity() - buf.len() < 8 * 1024 {
            buf.reserve(32 * 1024);
        }
        tokio::select! {
            biased;
            job = jobs.recv(), if accepting => {
                let Some(job) = job else {
                    accepting = false;
                    continue;
                };
                let headers = request_headers(&job, &cfg, mode);
                let head = h1::RequestHead {
                    method: "GET".into(),
                    target: request_target(&job.url, mode.absolute),
                    http11: !mode.http10,
                    headers: headers.clone(),
                };
                let bytes = head.to_bytes();
                let send_start = Instant::now();
                let write = async {
                    wr.write_all(&bytes).await?;
                    wr.flush().await
                };
                let result = tokio::time::timeout(cfg.response_timeout, write).await;
                let send_end = Instant::now();
                let keep_body = job.keep_body;
                let f = InFlight {
                    job,
                    sent: Sent {
                        version: if mode.http10 { "HTTP/1.0" } else { "HTTP/1.1" },
                        headers,
                        headers_size: Some(bytes.len() as u64),
                        send_start: Some(send_start),
                        send_end: Some(send_end),
                    },
                    first_byte: None,
                    state: RState::Head,
                    body: keep_body.then(BytesMut::new),
                    body_size: 0,
                    content_size: 0,
                    headers_size: 0,
                };
                if inflight.is_empty() {
                    deadline = send_end + cfg.response_timeout;
                }
                inflight.push_back(f);
                match result {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        abandon(conn, &mut inflight, &ev, FetchError::io(&e));
                        return;
                    }
                    Err(_) => {
                        abandon(conn, &mut inflight, &ev, FetchError::ResponseTimeout(cfg.response_timeout));
                        return;
                    }
                }
            }
            r = rd.read_buf(&mut buf) => {
                let now = Instant::now();
                match r {
                    Ok(0) => {
                        // EOF: a read-until-close body ends here; anything else is cut short.
                        if let Some(front) = inflight.front_mut() {
                            let complete = match &mut front.state {
                                RState::Body { dec, .. } => dec.complete_at_eof(),
                                RState::Head => false,
                            };
                            if complete {
                                if let Some(f) = inflight.pop_front() {
                                    let resp = finish_response(&f);
                                    let _ = ev.send(f.done(conn, Ok(resp), false, false));
                                }
                            }
                        }
                        abandon(conn, &mut inflight, &ev, FetchError::ConnectionClosed { retries: 0 });
                        return;
                    }
                    Ok(_) => {
                        deadline = now + cfg.response_timeout;
                        if let Step::Close = process(conn, &mut buf, &mut inflight, mode, &cfg, &ev, now) {
                            return;
                        }
                    }
                    Err(e) => {
                        abandon(conn, &mut inflight, &ev, FetchError::io(&e));
                        return;
                    }
                }
            }
            _ = tokio::time::sleep_until(deadline), if !inflight.is_empty() => {
                if let Some(f) = inflight.pop_front() {
                    let _ = ev.send(f.done(conn, Err(FetchError::ResponseTimeout(cfg.response_timeout)), false, false));
                }
                abandon(conn, &mut inflight, &ev, FetchError::ConnectionClosed { retries: 0 });
                return;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// HTTP/2

/// When the loader's connections last received bytes, any of them. An HTTP/2 stream waits
/// as long as the page makes progress: with a hundred streams on a dozen connections sharing
/// a slow link, one may rightly see no byte of its own, or of its connection, for minutes
/// (the link is busy with the others), and no browser gives up on a request for that; what
/// the model gives up on is a load that has gone silent.
#[derive(Clone, Debug)]
pub(crate) struct Progress {
    base: Instant,
    last_ns: Arc<std::sync::atomic::AtomicU64>,
}

impl Progress {
    pub(crate) fn new() -> Progress {
        Progress {
            base: Instant::now(),
            last_ns: Arc::new(std::sync::atomic::AtomicU64::new(0)),
        }
    }

    fn touch(&self) {
        let ns = u64::try_from(self.base.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.last_ns
            .fetch_max(ns, std::sync::atomic::Ordering::Relaxed);
    }

    fn last(&self) -> Instant {
        self.base + Duration::from_nanos(self.last_ns.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// `fut`, or `None` once no connection has received anything for `idle` (counted from
    /// the later of now and the last bytes).
    async fn within<F: std::future::Future>(&self, idle: Duration, fut: F) -> Option<F::Output> {
        let start = Instant::now();
        let quiet_since = || self.last().max(start);
        tokio::pin!(fut);
        loop {
            tokio::select! {
                out = &mut fut => return Some(out),
                _ = tokio::time::sleep_until(quiet_since() + idle) => {
                    if quiet_since() + idle <= Instant::now() {
                        return None;
                    }
                }
            }
        }
    }
}

/// A connection's transport, noting when bytes arrive.
pub(crate) struct Noting<S> {
    inner: S,
    progress: Progress,
}

impl<S: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Noting<S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.progress.touch();
        }
        r
    }
}

impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Noting<S> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

async fn h2_loop(
    conn: u64,
    stream: Noting<Stream>,
    cfg: Arc<DriverCfg>,
    mut jobs: UnboundedReceiver<Job>,
    ev: UnboundedSender<Event>,
) {
    let progress = cfg.progress.clone();
    let (client, connection) = match h2::client::Builder::new()
        .initial_window_size(4 << 20)
        .initial_connection_window_size(8 << 20)
        .handshake::<_, Bytes>(stream)
        .await
    {
        Ok(x) => x,
        Err(_) => {
            let _ = ev.send(Event::Closed { conn });
            return;
        }
    };
    let mut connection = Box::pin(connection);
    let mut streams = FuturesUnordered::new();
    let mut accepting = true;
    loop {
        if !accepting && streams.is_empty() {
            let _ = ev.send(Event::Closed { conn });
            return;
        }
        tokio::select! {
            job = jobs.recv(), if accepting => {
                match job {
                    Some(job) => streams.push(h2_request(conn, client.clone(), job, cfg.clone(), ev.clone(), progress.clone())),
                    None => accepting = false,
                }
            }
            Some(()) = streams.next(), if !streams.is_empty() => {}
            _ = &mut connection => {
                // GOAWAY, close or error: streams still open fail (re-sendable if unanswered).
                while streams.next().await.is_some() {}
                let _ = ev.send(Event::Closed { conn });
                return;
            }
        }
    }
}

async fn h2_request(
    conn: u64,
    client: h2::client::SendRequest<Bytes>,
    job: Job,
    cfg: Arc<DriverCfg>,
    ev: UnboundedSender<Event>,
    progress: Progress,
) {
    let mut sent = Sent {
        version: "HTTP/2",
        ..Sent::default()
    };
    let mut first_byte = None;
    let (gen, obj) = (job.gen, job.obj);
    let done = |sent: Sent, first_byte, outcome, retryable| Event::Done {
        conn,
        gen,
        obj,
        sent,
        first_byte,
        end: Instant::now(),
        outcome,
        retryable,
        reusable: true,
    };
    // The same headers as over HTTP/1.1, lower-cased, less those that belong to one HTTP/1.1
    // connection (Connection, Keep-Alive).
    let mut builder = http::Request::builder()
        .method(http::Method::GET)
        .uri(job.url.as_str());
    let mut headers = vec![
        (":method".to_string(), "GET".to_string()),
        (":authority".to_string(), job.origin.host_header()),
        (":scheme".to_string(), "https".to_string()),
        (":path".to_string(), request_target(&job.url, false)),
    ];
    let mode = H1Mode {
        http10: false,
        absolute: false,
    };
    // The first is Host, which `:authority` carries over h2.
    for (n, v) in request_headers(&job, &cfg, mode).into_iter().skip(1) {
        if request_headers::is_connection_specific(&n) {
            continue;
        }
        let n = n.to_ascii_lowercase();
        builder = builder.header(n.as_str(), v.as_str());
        headers.push((n, v));
    }
    sent.headers = headers;
    let req = match builder.body(()) {
        Ok(r) => r,
        Err(e) => {
            let _ = ev.send(done(sent, None, Err(FetchError::H2(e.to_string())), false));
            return;
        }
    };
    let start = Instant::now();
    sent.send_start = Some(start);
    let mut client = match progress.within(cfg.response_timeout, client.ready()).await {
        Some(Ok(c)) => c,
        Some(Err(e)) => {
            sent.send_end = Some(Instant::now());
            let _ = ev.send(done(sent, None, Err(FetchError::H2(e.to_string())), true));
            return;
        }
        None => {
            sent.send_end = Some(Instant::now());
            let _ = ev.send(done(
                sent,
                None,
                Err(FetchError::ResponseTimeout(cfg.response_timeout)),
                false,
            ));
            return;
        }
    };
    // Waiting for a stream slot is queueing, not sending.
    sent.send_start = Some(Instant::now());
    let resp_fut = match client.send_request(req, true) {
        Ok((f, _)) => f,
        Err(e) => {
            sent.send_end = Some(Instant::now());
            let _ = ev.send(done(sent, None, Err(FetchError::H2(e.to_string())), true));
            return;
        }
    };
    sent.send_end = Some(Instant::now());
    let resp = match progress.within(cfg.response_timeout, resp_fut).await {
        Some(Ok(r)) => r,
        Some(Err(e)) => {
            let retry =
                e.is_go_away() || e.reason() == Some(h2::Reason::REFUSED_STREAM) || e.is_io();
            let _ = ev.send(done(sent, None, Err(FetchError::H2(e.to_string())), retry));
            return;
        }
        None => {
            let _ = ev.send(done(
                sent,
                None,
                Err(FetchError::ResponseTimeout(cfg.response_timeout)),
                false,
            ));
            return;
        }
    };
    first_byte = first_byte.or(Some(Instant::now()));
    let (parts, mut body) = resp.into_parts();
    let status = parts.status.as_u16();
    let resp_headers: Vec<(String, String)> = parts
        .headers
        .iter()
        .map(|(n, v)| {
            (
                n.as_str().to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    if job.stream_body {
        let _ = ev.send(Event::Head {
            gen,
            obj,
            status,
            headers: resp_headers.clone(),
        });
    }
    let mut kept = job.keep_body.then(BytesMut::new);
    let mut size = 0u64;
    loop {
        match progress.within(cfg.response_timeout, body.data()).await {
            None => {
                let _ = ev.send(done(
                    sent,
                    first_byte,
                    Err(FetchError::ResponseTimeout(cfg.response_timeout)),
                    false,
                ));
                return;
            }
            Some(None) => break,
            Some(Some(Err(e))) => {
                let _ = ev.send(done(
                    sent,
                    first_byte,
                    Err(FetchError::H2(e.to_string())),
                    false,
                ));
                return;
            }
            Some(Some(Ok(chunk))) => {
                let _ = body.flow_control().release_capacity(chunk.len());
                size += chunk.len() as u64;
                if size > cfg.max_body_bytes {
                    let _ = ev.send(done(
                        sent,
                        first_byte,
                        Err(FetchError::TooLarge(cfg.max_body_bytes)),
                        false,
                    ));
                    return;
                }
                if let Some(k) = kept.as_mut() {
                    k.extend_from_slice(&chunk);
                }
                if job.stream_body && !chunk.is_empty() {
                    let _ = ev.send(Event::Chunk {
                        gen,
                        obj,
                        data: chunk,
                    });
                }
            }
        }
    }
    let resp = Response {
        status,
        reason: parts.status.canonical_reason().unwrap_or("").to_string(),
        version: "HTTP/2",
        headers: resp_headers,
        headers_size: None,
        body_size: size,
        content_size: size,
        body: kept.map(|k| k.freeze()),
    };
    let _ = ev.send(done(sent, first_byte, Ok(resp), false));
}

/// A DNS lookup as a task: reports its result as an event.
pub(crate) async fn dns_task(
    gen: u64,
    host: String,
    resolver: SocketAddr,
    timeout: Duration,
    attempts: u32,
    ev: UnboundedSender<Event>,
) {
    let start = Instant::now();
    let result = crate::dns::lookup(resolver, &host, timeout, attempts).await;
    let _ = ev.send(Event::Dns {
        gen,
        host,
        start,
        end: Instant::now(),
        result,
    });
}
