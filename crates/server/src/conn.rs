//! One client connection: a reader that parses requests (pipelined ones too) and starts a
//! handler task for each, up to `max-pipeline` at once, and a writer that sends the answers
//! back strictly in request order. CONNECT hands the socket over to a tunnel (or to
//! [`crate::intercept`]) once every earlier answer is written. The same loops serve the
//! HTTP/1.1 requests inside an intercepted CONNECT, on the browser's TLS ended here
//! ([`Wire`]).

use std::net::SocketAddr;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use http::{Method, StatusCode, Version};
use socket2::SockRef;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::air::{self, ProbeSchedule};
use crate::air_budget::AirGated;
use crate::client_link::ClientLink;
use crate::front::{admit, Outcome};
use crate::http1::{self, BodyFraming, ChunkedDecoder, HeadError, RequestHead};
use crate::intercept::Inner;
use crate::limits::Limit;
use crate::metrics::Metrics;
use crate::reply::{write_reply, Reply, Written};
use crate::request::Arrival;
use crate::state::Server;

/// What the access log and the writer need to know about a request.
#[derive(Debug, Clone)]
struct Meta {
    method: Method,
    url: String,
    mode: &'static str,
    version: Version,
    keep_alive: bool,
    start: Instant,
    /// The authenticated user (`[auth]`), for the access log.
    user: Option<Arc<str>>,
}

/// A side of a client connection as the request loops read or write it: a TCP socket's
/// half, or a half of the browser's TLS ended here, with the TCP socket beneath (for the
/// air-side socket options and the link measurement).
pub(crate) trait Wire {
    /// Whether the loops count what they read and write as the client's bytes (not when the
    /// layer beneath counts the bytes on the wire, TLS records and all).
    const COUNTS_BYTES: bool;
    /// The TCP socket beneath.
    fn socket(&self) -> BorrowedFd<'_>;
}

/// The writing side, and what it is paired with.
pub(crate) trait WriteWire: Wire + AsyncWrite + Unpin + Send {
    /// The reading side.
    type Read: Wire + AsyncRead + Unpin + Send;
    /// Serves an admitted CONNECT on the whole connection (a tunnel, or an intercepted
    /// connection: [`crate::intercept::connect`]). Inside an intercepted connection no
    /// CONNECT is served, and there is none to reach this.
    fn connect<'a>(
        self,
        rd: Self::Read,
        server: &'a Arc<Server>,
        c: crate::intercept::Connect,
        conn: &'a ConnInfo,
        tokens: (CancellationToken, CancellationToken),
        in_flight: InFlight,
    ) -> crate::subrequest::BoxFuture<'a, ()>;
    /// Drops this side without shutting it down (no FIN before the reset of a lingerless
    /// close).
    fn abort(self);
}

impl Wire for OwnedReadHalf {
    const COUNTS_BYTES: bool = true;
    fn socket(&self) -> BorrowedFd<'_> {
        self.as_ref().as_fd()
    }
}

impl Wire for OwnedWriteHalf {
    const COUNTS_BYTES: bool = true;
    fn socket(&self) -> BorrowedFd<'_> {
        self.as_ref().as_fd()
    }
}

impl WriteWire for OwnedWriteHalf {
    type Read = OwnedReadHalf;
    fn connect<'a>(
        self,
        rd: OwnedReadHalf,
        server: &'a Arc<Server>,
        c: crate::intercept::Connect,
        conn: &'a ConnInfo,
        tokens: (CancellationToken, CancellationToken),
        in_flight: InFlight,
    ) -> crate::subrequest::BoxFuture<'a, ()> {
        Box::pin(async move {
            if let Ok(stream) = rd.reunite(self) {
                crate::intercept::connect(server, stream, c, conn, tokens, in_flight).await;
            }
        })
    }
    fn abort(self) {
        self.forget();
    }
}

impl<W: Wire> Wire for AirGated<W> {
    const COUNTS_BYTES: bool = W::COUNTS_BYTES;
    fn socket(&self) -> BorrowedFd<'_> {
        self.get_ref().socket()
    }
}

/// A side held to its client's budget: out of it for a CONNECT (the tunnel, or the TLS
/// beneath an intercepted connection, joins again) and when aborted.
impl<W: WriteWire> WriteWire for AirGated<W> {
    type Read = W::Read;
    fn connect<'a>(
        self,
        rd: W::Read,
        server: &'a Arc<Server>,
        c: crate::intercept::Connect,
        conn: &'a ConnInfo,
        tokens: (CancellationToken, CancellationToken),
        in_flight: InFlight,
    ) -> crate::subrequest::BoxFuture<'a, ()> {
        self.into_inner()
            .connect(rd, server, c, conn, tokens, in_flight)
    }
    fn abort(self) {
        self.into_inner().abort();
    }
}

// One per request in a channel of `max-pipeline`: the size difference costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
enum Pending<R> {
    Task(JoinHandle<Reply>, Meta),
    Now(Reply, Meta),
    /// `100 Continue` for a client that waits for it before sending the body.
    Continue,
    Tunnel {
        rd: R,
        leftover: BytesMut,
        host: String,
        port: u16,
        meta: Meta,
    },
}

/// Serves one accepted client connection until it closes, the client idles out, or `cancel`
/// (stop reading new requests) / `hard` (abort) fires.
pub async fn serve_connection(
    server: Arc<Server>,
    stream: TcpStream,
    peer: SocketAddr,
    cancel: CancellationToken,
    hard: CancellationToken,
) {
    let metrics = &server.metrics;
    let _active = metrics.connection_opened();
    let local = match stream.local_addr() {
        Ok(a) => a,
        Err(_) => return,
    };
    if !server.acl.client_allowed(peer.ip()) {
        Metrics::add(&metrics.connections_refused, 1);
        tracing::info!(target: "webpep::access", client = %peer, status = 403, "client not allowed");
        let r = Reply::text_close(
            StatusCode::FORBIDDEN,
            "client not allowed to use this proxy",
        );
        refuse(stream, r, metrics).await;
        return;
    }
    // Counted until this function returns, whichever way it does (the slot is a guard).
    let (slot, evicted) = match server.limits.open(peer.ip()) {
        Ok(s) => s,
        Err(limit) => {
            metrics.limit_refused(limit);
            let l = &server.cfg.limits;
            let msg = match limit {
                Limit::ClientConnections => format!(
                    "too many connections from this client (limits.max-client-connections = {})",
                    l.max_client_connections
                ),
                _ => format!(
                    "too many connections to this proxy (limits.max-connections = {})",
                    l.max_connections
                ),
            };
            tracing::info!(target: "webpep::access", client = %peer, status = 503, limit = limit.label(), "connection limit");
            refuse(
                stream,
                Reply::text_close(StatusCode::SERVICE_UNAVAILABLE, &msg),
                metrics,
            )
            .await;
            return;
        }
    };
    if evicted {
        Metrics::add(&metrics.connections_evicted, 1);
    }
    let conn_handle = slot.handle();
    air::tune_accepted(&stream, &server.cfg.air);
    let original_dst = original_dst(&stream).filter(|d| *d != local);
    // A TLS ClientHello instead of a request: relayed by its server name (DNS rewriting
    // sends https names here too).
    let mut first = [0u8; 1];
    let peeked = tokio::select! {
        r = tokio::time::timeout(server.cfg.limits.client_idle_timeout.0, stream.peek(&mut first)) => r,
        _ = cancel.cancelled() => return,
        _ = conn_handle.evict.cancelled() => return,
    };
    match peeked {
        Ok(Ok(1..)) if first[0] == crate::tls_relay::HANDSHAKE_RECORD => {
            // A relayed TLS connection is busy until it ends, like a tunnel.
            slot.busy();
            let port = local.port();
            crate::tls_relay::run(&server, stream, peer, port, original_dst, cancel, hard).await;
            return;
        }
        Ok(Ok(1..)) => {}
        _ => return, // closed, failed or idle before a first byte: nothing was asked
    }
    let (rd, wr) = stream.into_split();
    let air = server.air_budgets.join(peer.ip(), wr.as_ref().as_fd());
    let wr = AirGated::new(air, wr);
    let conn = ConnInfo {
        peer,
        local,
        original_dst,
        inner: None,
    };
    let in_flight = InFlight::new(conn_handle);
    serve_requests(server.clone(), rd, wr, conn, (cancel, hard), in_flight).await;
    drop(slot);
}

/// The request loops of one connection: the reader until it stops or the writer ends, then
/// the writer until every answer read is written.
pub(crate) async fn serve_requests<W: WriteWire>(
    server: Arc<Server>,
    rd: W::Read,
    wr: W,
    conn: ConnInfo,
    (cancel, hard): (CancellationToken, CancellationToken),
    in_flight: InFlight,
) {
    let (tx, rx) = mpsc::channel::<Pending<W::Read>>(server.cfg.limits.max_pipeline.max(1));
    let writer = writer_loop(
        server.clone(),
        wr,
        rx,
        conn.clone(),
        (cancel.clone(), hard.clone()),
        in_flight.clone(),
    );
    tokio::pin!(writer);
    tokio::select! {
        _ = reader_loop(server, rd, tx, conn, cancel, in_flight) => {}
        _ = &mut writer => return,
        _ = hard.cancelled() => {}
    }
    writer.await;
}

/// Requests of one connection between being read and their answer being written: the
/// connection may be evicted only while there are none ([`crate::limits::ClientLimits::open`]).
#[derive(Clone)]
pub(crate) struct InFlight {
    count: Arc<std::sync::atomic::AtomicUsize>,
    handle: crate::limits::ConnHandle,
}

impl InFlight {
    fn new(handle: crate::limits::ConnHandle) -> Self {
        InFlight {
            count: Arc::default(),
            handle,
        }
    }

    fn started(&self, server: &Server) {
        if self.count.fetch_add(1, std::sync::atomic::Ordering::AcqRel) == 0 {
            server.limits.busy(&self.handle);
        }
    }

    fn answered(&self, server: &Server) {
        if self.count.fetch_sub(1, std::sync::atomic::Ordering::AcqRel) == 1 {
            // A request started meanwhile may leave the connection marked idle for a moment:
            // eviction then stops only its reading, and the answers still go out.
            server.limits.idle(&self.handle);
        }
    }
}

/// Writes the one answer a connection gets (as HTTP/1.1 to a GET) and closes the write side;
/// the bytes written.
pub(crate) async fn answer_and_close(s: &mut TcpStream, reply: Reply, metrics: &Metrics) -> u64 {
    let written = write_reply(
        s,
        reply,
        &Method::GET,
        Version::HTTP_11,
        false,
        &metrics.origin_bytes_in,
    )
    .await
    .map_or(0, |w| w.bytes);
    let _ = s.shutdown().await;
    written
}

/// How long a refused connection is kept to deliver its answer.
const REFUSE_LINGER: Duration = Duration::from_secs(2);

/// Answers a connection that will not be served, then closes it. What the client sends is
/// read and dropped for a moment first: closing with unread input makes the kernel reset
/// the connection, and the reset can destroy the answer before the client reads it.
async fn refuse(mut s: TcpStream, reply: Reply, metrics: &Metrics) {
    // The refused client's bytes are client bytes like any other (they went uncounted).
    let _ = tokio::time::timeout(REFUSE_LINGER, async {
        let written = answer_and_close(&mut s, reply, metrics).await;
        Metrics::add(&metrics.client_bytes_out, written);
        let mut sink = [0u8; 4096];
        while let Ok(n) = s.read(&mut sink).await {
            if n == 0 {
                break;
            }
            Metrics::add(&metrics.client_bytes_in, n as u64);
        }
    })
    .await;
}

/// Where a connection's requests come from.
#[derive(Clone)]
pub(crate) struct ConnInfo {
    pub(crate) peer: SocketAddr,
    pub(crate) local: SocketAddr,
    pub(crate) original_dst: Option<SocketAddr>,
    /// Inside an intercepted CONNECT: its host and user.
    pub(crate) inner: Option<Arc<Inner>>,
}

/// Why reading stops (once a connection: the size difference costs nothing worth a box).
#[allow(clippy::large_enum_variant)]
enum ReadEnd {
    Closed,
    Idle,
    Cancelled,
    Error(Reply),
}

async fn reader_loop<R: Wire + AsyncRead + Unpin>(
    server: Arc<Server>,
    mut rd: R,
    tx: mpsc::Sender<Pending<R>>,
    conn: ConnInfo,
    cancel: CancellationToken,
    in_flight: InFlight,
) {
    let limits = &server.cfg.limits;
    let air_cfg = &server.cfg.air;
    let mut buf = BytesMut::with_capacity(8192);
    let mut probes = ProbeSchedule::new(air_cfg.probe_stop.0);
    let idle = limits.client_idle_timeout.0;
    let evict = in_flight.handle.evict.clone();
    // Every reply goes through here: counted in flight until the writer has written it.
    let send = |p: Pending<R>| {
        // A tunnel is busy for as long as it lasts (never answered): evicting it would free
        // nothing.
        if matches!(
            p,
            Pending::Now(..) | Pending::Task(..) | Pending::Tunnel { .. }
        ) {
            in_flight.started(&server);
        }
        tx.send(p)
    };
    loop {
        // Parse the next head, reading more as needed. Once a head has begun, all of it must
        // arrive within `header-timeout` (a client trickling header bytes cannot hold the
        // connection for long).
        let mut head_began = None;
        let head = loop {
            match http1::parse_request_head(&buf, limits.max_header_bytes) {
                Ok(Some(h)) => break Ok(h),
                Ok(None) => {}
                Err(e) => break Err(e),
            }
            if !buf.is_empty() && head_began.is_none() {
                head_began = Some(Instant::now());
            }
            let wait = head_began.map_or(idle, |t| {
                limits.header_timeout.0.saturating_sub(t.elapsed())
            });
            let stop = Stop {
                cancel: &cancel,
                evict: &evict,
            };
            match read_more(&mut rd, &mut buf, &mut probes, air_cfg, wait, stop, &server).await {
                Ok(()) => {}
                Err(ReadEnd::Error(r)) => {
                    let _ = send(Pending::Now(r, error_meta())).await;
                    return;
                }
                Err(_) => return,
            }
        };
        let head = match head.and_then(|h| {
            if h.headers.get_all(http::header::HOST).iter().count() > 1 {
                Err(HeadError::Malformed("more than one Host field".into()))
            } else {
                Ok(h)
            }
        }) {
            Ok(h) => h,
            Err(e) => {
                let status = e.status();
                let msg = match &e {
                    HeadError::Malformed(m) => m.clone(),
                    HeadError::TooLarge => "request header block over the limit".to_string(),
                };
                let _ = send(Pending::Now(Reply::text_close(status, &msg), error_meta())).await;
                return;
            }
        };
        let _ = buf.split_to(head.head_len);
        let mut head = head;
        if let Some(inner) = &conn.inner {
            // Inside the browser's TLS a request names a path on the CONNECT's host, and
            // nothing else: not another host, not another CONNECT.
            match inner.target(&head.target) {
                Some(t) => head.target = t,
                None => {
                    let r = Reply::text_close(
                        StatusCode::BAD_REQUEST,
                        "inside an intercepted connection a request names a path (origin-form)",
                    );
                    let _ = send(Pending::Now(r, error_meta())).await;
                    return;
                }
            }
        }
        if air_cfg.keepalive_probes {
            if let Some(on) = probes.on_request(Instant::now()) {
                air::set_probes(SockRef::from(&rd.socket()), on, air_cfg.probe_interval.0);
            }
        }
        let keep_alive = http1::request_keeps_alive(head.version, &head.headers);
        let meta = Meta {
            method: head.method.clone(),
            url: head.target.clone(),
            mode: "none",
            version: head.version,
            keep_alive,
            start: Instant::now(),
            user: None,
        };
        // The body, bounded in size, in time and by the buffered-body budget.
        let body =
            match read_body(&mut rd, &mut buf, &mut head, &send, &evict, &conn, &server).await {
                Ok(b) => b,
                Err(r) => {
                    let _ = send(Pending::Now(r, meta)).await;
                    return;
                }
            };
        // A request framed by both Transfer-Encoding and Content-Length may have been meant
        // differently by whoever sent it: it is served, then the connection closes
        // (RFC 9112 §6.1).
        let keep_alive = keep_alive && !body.ambiguous;
        let meta = Meta { keep_alive, ..meta };
        let at = Arrival {
            peer: conn.peer,
            local: conn.local,
            original_dst: conn.original_dst,
        };
        // Inside an intercepted CONNECT the requests ride its authentication.
        let user = conn.inner.as_ref().and_then(|i| i.user.clone());
        let adm = admit(&server, head, body.bytes, body.lease, at, user).await;
        let meta = Meta {
            mode: match conn.inner {
                Some(_) => crate::intercept::MODE,
                None => adm.mode,
            },
            url: adm.url,
            user: adm.user,
            ..meta
        };
        // The request was read whole, so a refused one (429, 407, 403) leaves the connection
        // usable and is answered in order like any other reply; after CONNECT the client may
        // already be sending tunnel bytes, so those refusals close (as does a 400 for a
        // request no mode fits).
        let req = match adm.outcome {
            Outcome::Serve(mut req) => {
                if server.measure_links {
                    // The client's link as last measured (on this or another of its
                    // connections); for a new client, what this connection's handshake
                    // measured (its RTT; no rate yet).
                    req.link = server
                        .links
                        .get(conn.peer.ip(), Instant::now())
                        .or_else(|| {
                            ClientLink::of_socket(rd.socket())
                                .map(|l| l.unscaled(server.cfg.air.link_time_scale))
                        });
                }
                req
            }
            Outcome::Refuse(r) => {
                let close = r.close || !keep_alive;
                if send(Pending::Now(r, meta)).await.is_err() || close {
                    return;
                }
                continue;
            }
            Outcome::Connect { host, port } => {
                let leftover = std::mem::take(&mut buf);
                let _ = send(Pending::Tunnel {
                    rd,
                    leftover,
                    host,
                    port,
                    meta,
                })
                .await;
                return;
            }
        };
        let srv = server.clone();
        let inner = conn.inner.clone();
        let task = tokio::spawn(async move {
            let reply = srv.clone().handle(req).await;
            if let Some(inner) = inner {
                srv.after_intercepted(&inner.host, &reply);
            }
            reply
        });
        if send(Pending::Task(task, meta)).await.is_err() {
            return;
        }
        if !keep_alive {
            return;
        }
    }
}

fn error_meta() -> Meta {
    Meta {
        method: Method::GET,
        url: "-".into(),
        mode: "none",
        version: Version::HTTP_11,
        keep_alive: false,
        start: Instant::now(),
        user: None,
    }
}

/// What stops reading: the server's shutdown (only between requests) and eviction (at once).
#[derive(Clone, Copy)]
struct Stop<'a> {
    cancel: &'a CancellationToken,
    evict: &'a CancellationToken,
}

async fn read_more<R: Wire + AsyncRead + Unpin>(
    rd: &mut R,
    buf: &mut BytesMut,
    probes: &mut ProbeSchedule,
    air_cfg: &crate::config::AirConfig,
    idle: Duration,
    stop: Stop<'_>,
    server: &Server,
) -> Result<(), ReadEnd> {
    let idle_deadline = tokio::time::Instant::now() + idle;
    loop {
        // Wake up to switch probes off after probe-stop without requests.
        let probe_deadline = probes
            .next_deadline()
            .filter(|_| air_cfg.keepalive_probes)
            .map(tokio::time::Instant::from_std);
        let wake = probe_deadline.map_or(idle_deadline, |p| p.min(idle_deadline));
        tokio::select! {
            _ = stop.cancel.cancelled(), if buf.is_empty() => return Err(ReadEnd::Cancelled),
            _ = stop.evict.cancelled() => return Err(ReadEnd::Cancelled),
            r = rd.read_buf(buf) => {
                return match r {
                    Ok(0) => {
                        if buf.is_empty() { Err(ReadEnd::Closed) } else {
                            Err(ReadEnd::Error(Reply::text_close(StatusCode::BAD_REQUEST, "incomplete request")))
                        }
                    }
                    Ok(n) => { if R::COUNTS_BYTES { Metrics::add(&server.metrics.client_bytes_in, n as u64); } Ok(()) }
                    Err(_) => Err(ReadEnd::Closed),
                };
            }
            _ = tokio::time::sleep_until(wake) => {
                if let Some(false) = probes.on_tick(Instant::now()) {
                    air::set_probes(SockRef::from(&rd.socket()), false, Duration::from_secs(1));
                }
                if tokio::time::Instant::now() >= idle_deadline {
                    return Err(if buf.is_empty() { ReadEnd::Idle } else {
                        Metrics::add(&server.metrics.client_timeouts, 1);
                        ReadEnd::Error(Reply::text_close(StatusCode::REQUEST_TIMEOUT, "request header not completed in time (limits.header-timeout)"))
                    });
                }
            }
        }
    }
}

/// A request body as read.
struct ReadBody {
    bytes: Bytes,
    /// Its share of the buffered-body budget.
    lease: Option<crate::limits::BufferLease>,
    /// Framed by both Transfer-Encoding and Content-Length.
    ambiguous: bool,
}

/// Reads the body of `head`, within `max-request-body`, the buffered-body budget and the
/// minimum body rate, sending `100 Continue` first when the client waits for it. Leaves
/// `head` with one Content-Length (or none when it was chunked) and without `Expect`, as
/// the origin gets it.
async fn read_body<R, F, Fut>(
    rd: &mut R,
    buf: &mut BytesMut,
    head: &mut RequestHead,
    send: &F,
    evict: &CancellationToken,
    conn: &ConnInfo,
    server: &Server,
) -> Result<ReadBody, Reply>
where
    R: Wire + AsyncRead + Unpin,
    F: Fn(Pending<R>) -> Fut,
    Fut: std::future::Future<Output = Result<(), mpsc::error::SendError<Pending<R>>>>,
{
    let limits = &server.cfg.limits;
    let framing = http1::request_body_framing(&head.headers)
        .map_err(|e| Reply::text_close(StatusCode::BAD_REQUEST, &e.to_string()))?;
    let ambiguous =
        framing == BodyFraming::Chunked && head.headers.contains_key(http::header::CONTENT_LENGTH);
    let expect = http1::expects_continue(&head.headers)
        .map_err(|e| Reply::text_close(StatusCode::EXPECTATION_FAILED, &e))?;
    head.headers.remove(http::header::EXPECT);
    match framing {
        BodyFraming::None => {
            return Ok(ReadBody {
                bytes: Bytes::new(),
                lease: None,
                ambiguous,
            })
        }
        BodyFraming::Length(n) => {
            head.headers
                .insert(http::header::CONTENT_LENGTH, http::HeaderValue::from(n));
        }
        BodyFraming::Chunked => {
            head.headers.remove(http::header::CONTENT_LENGTH);
        }
    }
    let max = limits.max_request_body;
    let mut intake = server.body_intake(conn.peer.ip());
    // An HTTP/1 connection that refused a body cannot find the next request: it closes.
    let refused = |why| {
        let mut r = server.body_refused(why);
        r.close = true;
        r
    };
    if let BodyFraming::Length(n) = framing {
        intake.admit(n).map_err(refused)?;
    }
    // Only a client that waits is told to go on, and only once the body has a place.
    if expect && head.version == Version::HTTP_11 && buf.is_empty() {
        let _ = send(Pending::Continue).await;
    }
    let pace = BodyPace::new(
        Instant::now(),
        limits.header_timeout.0,
        limits.body_min_rate,
    );
    let bytes = match framing {
        BodyFraming::None => Bytes::new(),
        BodyFraming::Length(n) => {
            let n = n as usize;
            while buf.len() < n {
                let got = buf.len() as u64;
                fill(rd, buf, pace.deadline(got), evict, server).await?;
            }
            buf.split_to(n).freeze()
        }
        BodyFraming::Chunked => {
            let mut dec = ChunkedDecoder::new(max);
            let mut out = Vec::new();
            let mut consumed = 0u64;
            loop {
                let used = dec.decode(buf, &mut out).map_err(|e| match e {
                    http1::ChunkError::TooLarge => refused(crate::limits::BodyRefused::TooLarge),
                    http1::ChunkError::Malformed => {
                        Reply::text_close(StatusCode::BAD_REQUEST, "malformed chunked body")
                    }
                })?;
                let _ = buf.split_to(used);
                consumed += used as u64;
                intake.admit(out.len() as u64).map_err(refused)?;
                if dec.is_done() {
                    break Bytes::from(out);
                }
                fill(rd, buf, pace.deadline(consumed), evict, server).await?;
            }
        }
    };
    Ok(ReadBody {
        bytes,
        lease: Some(intake.into_lease()),
        ambiguous,
    })
}

/// When the next body bytes must have come, for a body that must average at least
/// `min_rate` bytes per second once `grace` has passed since it began. Pure: the caller
/// gives the times.
#[derive(Debug, Clone, Copy)]
pub struct BodyPace {
    start: Instant,
    grace: Duration,
    min_rate: u64,
}

impl BodyPace {
    /// A body that began at `start`.
    pub fn new(start: Instant, grace: Duration, min_rate: u64) -> Self {
        BodyPace {
            start,
            grace,
            min_rate,
        }
    }

    /// The instant by which more than `received` bytes must have arrived (`None`: no minimum
    /// rate, so no deadline).
    pub fn deadline(&self, received: u64) -> Option<Instant> {
        if self.min_rate == 0 {
            return None;
        }
        let owed = Duration::from_secs_f64((received + 1) as f64 / self.min_rate as f64);
        Some(self.start + self.grace + owed)
    }
}

/// Reads more body bytes; a client that does not keep up the body's pace gets 408, one that
/// closes 400; an evicted connection just closes.
async fn fill<R: Wire + AsyncRead + Unpin>(
    rd: &mut R,
    buf: &mut BytesMut,
    deadline: Option<Instant>,
    evict: &CancellationToken,
    server: &Server,
) -> Result<(), Reply> {
    let sleep = async {
        match deadline {
            Some(d) => tokio::time::sleep_until(tokio::time::Instant::from_std(d)).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        r = rd.read_buf(buf) => match r {
            Ok(0) | Err(_) => Err(Reply::text_close(
                StatusCode::BAD_REQUEST,
                "incomplete request body",
            )),
            Ok(n) => {
                if R::COUNTS_BYTES {
                    Metrics::add(&server.metrics.client_bytes_in, n as u64);
                }
                Ok(())
            }
        },
        _ = sleep => {
            Metrics::add(&server.metrics.client_timeouts, 1);
            Err(Reply::text_close(
                StatusCode::REQUEST_TIMEOUT,
                "request body sent too slowly (limits.body-min-rate)",
            ))
        }
        _ = evict.cancelled() => Err(Reply::text_close(
            StatusCode::SERVICE_UNAVAILABLE,
            "connection closed to make room for other clients (limits.max-connections)",
        )),
    }
}

async fn writer_loop<W: WriteWire>(
    server: Arc<Server>,
    mut wr: W,
    mut rx: mpsc::Receiver<Pending<W::Read>>,
    conn: ConnInfo,
    (cancel, hard): (CancellationToken, CancellationToken),
    in_flight: InFlight,
) {
    let peer = conn.peer;
    while let Some(p) = rx.recv().await {
        let (reply, meta) = match p {
            Pending::Continue => {
                const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";
                let r = tokio::select! {
                    r = wr.write_all(CONTINUE) => r,
                    _ = hard.cancelled() => return,
                };
                if r.is_err() {
                    break;
                }
                // Written to the client like any answer (it went uncounted).
                if W::COUNTS_BYTES {
                    Metrics::add(&server.metrics.client_bytes_out, CONTINUE.len() as u64);
                }
                continue;
            }
            Pending::Now(r, m) => (r, m),
            Pending::Task(task, m) => {
                let r = tokio::select! {
                    r = task => r,
                    _ = hard.cancelled() => return,
                };
                match r {
                    Ok(r) => (r, m),
                    Err(e) => {
                        tracing::error!(error = %e, "request handler failed");
                        (
                            Reply::text_close(StatusCode::INTERNAL_SERVER_ERROR, "internal error"),
                            m,
                        )
                    }
                }
            }
            Pending::Tunnel {
                rd,
                leftover,
                host,
                port,
                meta,
            } => {
                let connect = crate::intercept::Connect {
                    host,
                    port,
                    leftover,
                    start: meta.start,
                    user: meta.user,
                };
                wr.connect(rd, &server, connect, &conn, (cancel, hard), in_flight)
                    .await;
                return;
            }
        };
        let status = reply.status.as_u16();
        let cache = reply.cache;
        let trace = reply.trace;
        let res = tokio::select! {
            r = write_reply(&mut wr, reply, &meta.method, meta.version, meta.keep_alive, &server.metrics.origin_bytes_in) => r,
            _ = hard.cancelled() => return,
        };
        in_flight.answered(&server);
        let written = res.unwrap_or(Written {
            bytes: 0,
            close: true,
            truncated: false,
            first_out: None,
        });
        if W::COUNTS_BYTES {
            Metrics::add(&server.metrics.client_bytes_out, written.bytes);
        }
        server.metrics.request(meta.mode, status);
        // The link to this client as its TCP connection measured it, after this response (a
        // system call: only when the access log is on or the stages scale with it).
        let logged = tracing::enabled!(target: "webpep::access", tracing::Level::INFO);
        let link = (logged || server.measure_links)
            .then(|| ClientLink::of_socket(wr.socket()))
            .flatten()
            .map(|l| l.unscaled(server.cfg.air.link_time_scale));
        if let (Some(l), true) = (link, server.measure_links) {
            server.links.measured(peer.ip(), l, Instant::now());
        }
        crate::reply::AccessLine {
            peer,
            mode: meta.mode,
            method: meta.method.as_str(),
            url: &meta.url,
            status,
            bytes: written.bytes,
            cache,
            user: meta.user.as_deref().unwrap_or("-"),
            start: meta.start,
            truncated: written.truncated,
            link,
            trace,
            first_out: written.first_out,
        }
        .write();
        if written.truncated {
            // The body broke off: a reset, not a clean close, so that no client (an HTTP/1.0
            // one reading to the end above all) takes what it got for the whole body.
            let _ = SockRef::from(&wr.socket()).set_linger(Some(Duration::ZERO));
            // Dropped as it is, the half would shut down writing first: a FIN could then reach
            // the client before the reset and read as a clean end.
            wr.abort();
            return;
        }
        if written.close {
            break;
        }
    }
    let _ = wr.shutdown().await;
}

/// The original destination of a connection redirected by netfilter (SO_ORIGINAL_DST).
pub fn original_dst(stream: &TcpStream) -> Option<SocketAddr> {
    use std::os::fd::AsRawFd;
    // SO_ORIGINAL_DST from <linux/netfilter_ipv4.h>; same value for IPv6 (IP6T_SO_ORIGINAL_DST).
    const SO_ORIGINAL_DST: libc::c_int = 80;
    let fd = stream.as_raw_fd();
    if stream.local_addr().ok()?.is_ipv4() {
        // SAFETY: zeroed sockaddr_in is valid; the length describes it.
        let mut sa: libc::sockaddr_in = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        // SAFETY: valid fd, out-pointers to live memory of the given length.
        let rc = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_IP,
                SO_ORIGINAL_DST,
                (&mut sa as *mut libc::sockaddr_in).cast(),
                &mut len,
            )
        };
        if rc != 0 {
            return None;
        }
        let ip = std::net::Ipv4Addr::from(u32::from_be(sa.sin_addr.s_addr));
        Some(SocketAddr::from((ip, u16::from_be(sa.sin_port))))
    } else {
        // SAFETY: as above, for sockaddr_in6.
        let mut sa: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t;
        // SAFETY: valid fd, out-pointers to live memory of the given length.
        let rc = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_IPV6,
                SO_ORIGINAL_DST,
                (&mut sa as *mut libc::sockaddr_in6).cast(),
                &mut len,
            )
        };
        if rc != 0 {
            return None;
        }
        let ip = std::net::Ipv6Addr::from(sa.sin6_addr.s6_addr);
        Some(SocketAddr::from((ip, u16::from_be(sa.sin6_port))))
    }
}
