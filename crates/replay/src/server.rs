//! The replay server: the lab's virtual web hosting (000 §2.2, DESIGN §7.3).
//!
//! One listener per virtual domain address (port 80 plain, 443 TLS); every listener serves the
//! whole corpus, selected by Host (or absolute URI, or TLS SNI, or the listener's domain).
//! HTTP/1.x is served here on the project's one HTTP/1 codec, `webpep_http1` (keep-alive,
//! pipelined requests answered in order, HTTP/1.0, `close_after`, strict limits); HTTP/2 over
//! TLS uses hyper's server.

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};
use webpep_corpus::Corpus;

use crate::content::{simple, Ask, Reply, Site};
use crate::h1::{self, Parse};

/// Responses waiting to be written are flushed once they reach this size.
const FLUSH_AT: usize = 256 * 1024;
/// How long a closing connection keeps reading (and discarding) what the client still sends,
/// so that the kernel does not reset the connection under the last response.
const LINGER: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("replay listener: {0}")]
    Listener(#[source] io::Error),
}

/// An idle timeout as stored (µs; 0: none, and at least 1 µs otherwise).
fn idle_us(t: Option<Duration>) -> u64 {
    t.map_or(0, |t| (t.as_micros() as u64).max(1))
}

/// How the replay server behaves.
#[derive(Clone, Debug)]
pub struct ReplayConfig {
    /// After this many requests on an HTTP/1.x connection, answer with `Connection: close` and
    /// close (the "pre-emptive FIN" of 000 §2.2). `None`: never (the study's choice). `Some(0)`
    /// behaves as `Some(1)`.
    pub close_after: Option<u32>,
    /// An HTTP/1.x connection with no request for this long is closed. `None`: never.
    pub idle_timeout: Option<Duration>,
    /// Largest request head (request line and header fields); more → 431.
    pub max_header_bytes: usize,
    /// Largest request body accepted (and discarded); more → 413.
    pub max_request_body: u64,
    /// Time allowed for a TLS handshake.
    pub tls_handshake_timeout: Duration,
}

impl Default for ReplayConfig {
    fn default() -> Self {
        ReplayConfig {
            close_after: None,
            idle_timeout: Some(Duration::from_secs(300)),
            max_header_bytes: 64 * 1024,
            max_request_body: 1024 * 1024,
            tls_handshake_timeout: Duration::from_secs(60),
        }
    }
}

/// One listening socket for [`ReplayServer::serve`].
#[derive(Debug)]
pub struct Listener {
    /// Already bound and listening (made wherever the caller wants, e.g. in a namespace).
    pub socket: std::net::TcpListener,
    /// The virtual domain this address stands for: the host used when a request names none.
    pub domain: Option<String>,
    /// `Some`: TLS on this socket (ALPN h2 and http/1.1), typically from
    /// [`crate::LabCa::server_config`].
    pub tls: Option<Arc<rustls::ServerConfig>>,
}

/// The protocol of a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// Plain HTTP/1.x.
    Http1,
    /// TLS handshake not finished (or failed).
    Tls,
    /// HTTP/1.x over TLS.
    Http1Tls,
    /// HTTP/2 over TLS.
    H2,
}

impl Protocol {
    fn from_u8(v: u8) -> Protocol {
        match v {
            0 => Protocol::Http1,
            2 => Protocol::Http1Tls,
            3 => Protocol::H2,
            _ => Protocol::Tls,
        }
    }
    fn as_u8(self) -> u8 {
        match self {
            Protocol::Http1 => 0,
            Protocol::Tls => 1,
            Protocol::Http1Tls => 2,
            Protocol::H2 => 3,
        }
    }
}

/// A snapshot of one connection's counters. Bytes are counted on the TCP socket (TLS
/// overhead included).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectionStats {
    pub id: u64,
    pub peer: SocketAddr,
    pub local: SocketAddr,
    pub domain: Option<String>,
    pub protocol: Protocol,
    pub requests: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub open: bool,
}

/// A snapshot of the server's counters (since start or the last [`ReplayServer::reset_stats`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplayStats {
    pub connections: u64,
    /// Responses sent (each HTTP/2 stream counts as one).
    pub requests: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub status_2xx: u64,
    /// 3xx other than 304.
    pub status_3xx: u64,
    pub not_modified: u64,
    pub status_4xx: u64,
    pub status_5xx: u64,
    pub tls_failures: u64,
    /// Connections closed by `close_after`.
    pub closed_after_limit: u64,
    pub per_connection: Vec<ConnectionStats>,
}

#[derive(Default)]
struct Totals {
    connections: AtomicU64,
    requests: AtomicU64,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    status_2xx: AtomicU64,
    status_3xx: AtomicU64,
    not_modified: AtomicU64,
    status_4xx: AtomicU64,
    status_5xx: AtomicU64,
    tls_failures: AtomicU64,
    closed_after_limit: AtomicU64,
}

struct ConnInfo {
    id: u64,
    peer: SocketAddr,
    local: SocketAddr,
    domain: Option<String>,
    protocol: AtomicU8,
    requests: AtomicU64,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    open: AtomicBool,
}

struct Inner {
    site: Site,
    config: ReplayConfig,
    close_after: AtomicU32,
    /// `idle_timeout` in µs (0: none), changeable while serving.
    idle_timeout_us: AtomicU64,
    visit: Arc<AtomicUsize>,
    totals: Totals,
    conns: Mutex<Vec<Arc<ConnInfo>>>,
    next_id: AtomicU64,
}

/// The replay server. Cheap to clone (shared state); every clone serves the same corpus and
/// shares the visit number and counters.
#[derive(Clone)]
pub struct ReplayServer {
    inner: Arc<Inner>,
}

impl ReplayServer {
    /// Indexes `corpus` and reads every body into memory (blocking file reads: call it before
    /// serving). Missing or corrupt bodies are logged and answered with 500 when requested.
    pub fn new(corpus: &Corpus, config: ReplayConfig) -> ReplayServer {
        let site = Site::load(corpus);
        info!(
            corpus = %corpus.manifest.name,
            objects = site.object_count(),
            domains = site.domains().len(),
            "replay: corpus loaded"
        );
        ReplayServer {
            inner: Arc::new(Inner {
                site,
                close_after: AtomicU32::new(config.close_after.map_or(0, |n| n.max(1))),
                idle_timeout_us: AtomicU64::new(idle_us(config.idle_timeout)),
                config,
                visit: Arc::new(AtomicUsize::new(0)),
                totals: Totals::default(),
                conns: Mutex::new(Vec::new()),
                next_id: AtomicU64::new(1),
            }),
        }
    }

    /// Every host the corpus serves (the manifest's domains and every object URL's host),
    /// lowercase, sorted: one address and DNS name each.
    pub fn domains(&self) -> &[String] {
        self.inner.site.domains()
    }

    /// Selects the visit: visit `k` (0-based) serves version `Object::version(k)`.
    /// Also starts each URL's captured responses again: the next request for a URL gets the
    /// first response the capture holds for it, the one after the second, and so on (whatever
    /// the connection; the last one repeats), so every page load replays the same sequence.
    pub fn set_visit(&self, k: usize) {
        self.inner.visit.store(k, Ordering::SeqCst);
        self.inner.site.restart();
    }

    /// The shared visit number, for the lab to change between page loads.
    pub fn visit_handle(&self) -> Arc<AtomicUsize> {
        self.inner.visit.clone()
    }

    /// Changes `idle_timeout` for connections from their next wait on (`None`: never).
    pub fn set_idle_timeout(&self, t: Option<Duration>) {
        self.inner
            .idle_timeout_us
            .store(idle_us(t), Ordering::SeqCst);
    }

    fn idle_timeout(&self) -> Option<Duration> {
        match self.inner.idle_timeout_us.load(Ordering::SeqCst) {
            0 => None,
            us => Some(Duration::from_micros(us)),
        }
    }

    /// Changes `close_after` for requests from now on.
    pub fn set_close_after(&self, n: Option<u32>) {
        self.inner
            .close_after
            .store(n.map_or(0, |n| n.max(1)), Ordering::SeqCst);
    }

    /// The counters now.
    pub fn stats(&self) -> ReplayStats {
        let t = &self.inner.totals;
        let get = |a: &AtomicU64| a.load(Ordering::SeqCst);
        let per_connection = self
            .conns()
            .iter()
            .map(|c| ConnectionStats {
                id: c.id,
                peer: c.peer,
                local: c.local,
                domain: c.domain.clone(),
                protocol: Protocol::from_u8(c.protocol.load(Ordering::SeqCst)),
                requests: get(&c.requests),
                bytes_in: get(&c.bytes_in),
                bytes_out: get(&c.bytes_out),
                open: c.open.load(Ordering::SeqCst),
            })
            .collect();
        ReplayStats {
            connections: get(&t.connections),
            requests: get(&t.requests),
            bytes_in: get(&t.bytes_in),
            bytes_out: get(&t.bytes_out),
            status_2xx: get(&t.status_2xx),
            status_3xx: get(&t.status_3xx),
            not_modified: get(&t.not_modified),
            status_4xx: get(&t.status_4xx),
            status_5xx: get(&t.status_5xx),
            tls_failures: get(&t.tls_failures),
            closed_after_limit: get(&t.closed_after_limit),
            per_connection,
        }
    }

    /// Zeroes the totals and forgets closed connections (open ones stay listed with their own
    /// counters).
    pub fn reset_stats(&self) {
        let t = &self.inner.totals;
        for a in [
            &t.connections,
            &t.requests,
            &t.bytes_in,
            &t.bytes_out,
            &t.status_2xx,
            &t.status_3xx,
            &t.not_modified,
            &t.status_4xx,
            &t.status_5xx,
            &t.tls_failures,
            &t.closed_after_limit,
        ] {
            a.store(0, Ordering::SeqCst);
        }
        self.conns().retain(|c| c.open.load(Ordering::SeqCst));
    }

    fn conns(&self) -> std::sync::MutexGuard<'_, Vec<Arc<ConnInfo>>> {
        // A panic while holding this lock cannot leave the list inconsistent: recover it.
        self.inner
            .conns
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Plain HTTP on one pre-bound listener until `cancel`.
    pub async fn serve_http(
        &self,
        socket: std::net::TcpListener,
        domain: Option<String>,
        cancel: CancellationToken,
    ) -> Result<(), ReplayError> {
        self.serve(
            vec![Listener {
                socket,
                domain,
                tls: None,
            }],
            cancel,
        )
        .await
    }

    /// HTTPS (h2 and http/1.1 by ALPN) on one pre-bound listener until `cancel`.
    pub async fn serve_https(
        &self,
        socket: std::net::TcpListener,
        domain: Option<String>,
        tls: Arc<rustls::ServerConfig>,
        cancel: CancellationToken,
    ) -> Result<(), ReplayError> {
        self.serve(
            vec![Listener {
                socket,
                domain,
                tls: Some(tls),
            }],
            cancel,
        )
        .await
    }

    /// Serves on every listener until `cancel` fires, then closes every connection and returns
    /// once all of them have ended. Must run inside a tokio runtime with I/O and time enabled
    /// (a current-thread runtime is enough).
    pub async fn serve(
        &self,
        listeners: Vec<Listener>,
        cancel: CancellationToken,
    ) -> Result<(), ReplayError> {
        let mut ready = Vec::new();
        for l in listeners {
            l.socket
                .set_nonblocking(true)
                .map_err(ReplayError::Listener)?;
            let listener =
                tokio::net::TcpListener::from_std(l.socket).map_err(ReplayError::Listener)?;
            if let Ok(addr) = listener.local_addr() {
                info!(%addr, domain = ?l.domain, tls = l.tls.is_some(), "replay: listening");
            }
            ready.push((listener, l.domain, l.tls.map(TlsAcceptor::from)));
        }
        let tracker = TaskTracker::new();
        for (listener, domain, tls) in ready {
            tracker.spawn(self.clone().accept_loop(
                listener,
                domain,
                tls,
                tracker.clone(),
                cancel.clone(),
            ));
        }
        cancel.cancelled().await;
        tracker.close();
        tracker.wait().await;
        Ok(())
    }

    async fn accept_loop(
        self,
        listener: tokio::net::TcpListener,
        domain: Option<String>,
        tls: Option<TlsAcceptor>,
        tracker: TaskTracker,
        cancel: CancellationToken,
    ) {
        let listen_addr = listener.local_addr().ok();
        while let Some((stream, peer)) = webpep_accept::accept(&listener, &cancel, "replay").await {
            let _ = stream.set_nodelay(true);
            let local = stream
                .local_addr()
                .ok()
                .or(listen_addr)
                .unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)));
            let conn = self.register(peer, local, domain.clone(), tls.is_some());
            let me = self.clone();
            let tls = tls.clone();
            let domain = domain.clone();
            let cancel = cancel.clone();
            tracker.spawn(async move {
                me.connection(stream, conn, domain, tls, cancel).await;
            });
        }
    }

    fn register(
        &self,
        peer: SocketAddr,
        local: SocketAddr,
        domain: Option<String>,
        tls: bool,
    ) -> Arc<ConnInfo> {
        let proto = if tls { Protocol::Tls } else { Protocol::Http1 };
        let conn = Arc::new(ConnInfo {
            id: self.inner.next_id.fetch_add(1, Ordering::SeqCst),
            peer,
            local,
            domain,
            protocol: AtomicU8::new(proto.as_u8()),
            requests: AtomicU64::new(0),
            bytes_in: AtomicU64::new(0),
            bytes_out: AtomicU64::new(0),
            open: AtomicBool::new(true),
        });
        self.inner.totals.connections.fetch_add(1, Ordering::SeqCst);
        self.conns().push(conn.clone());
        conn
    }

    async fn connection(
        self,
        stream: TcpStream,
        conn: Arc<ConnInfo>,
        domain: Option<String>,
        tls: Option<TlsAcceptor>,
        cancel: CancellationToken,
    ) {
        debug!(id = conn.id, peer = %conn.peer, local = %conn.local, "replay: connection");
        let io = Counted {
            inner: stream,
            conn: conn.clone(),
            server: self.inner.clone(),
        };
        let result = match tls {
            None => {
                let mut io = io;
                self.h1_loop(&mut io, &conn, domain.as_deref(), false, &cancel)
                    .await
            }
            Some(acceptor) => {
                let handshake = tokio::select! {
                    _ = cancel.cancelled() => None,
                    r = tokio::time::timeout(self.inner.config.tls_handshake_timeout, acceptor.accept(io)) => Some(r),
                };
                match handshake {
                    None => Ok(()),
                    Some(Err(_)) => {
                        self.inner
                            .totals
                            .tls_failures
                            .fetch_add(1, Ordering::SeqCst);
                        Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            "TLS handshake timed out",
                        ))
                    }
                    Some(Ok(Err(e))) => {
                        self.inner
                            .totals
                            .tls_failures
                            .fetch_add(1, Ordering::SeqCst);
                        Err(e)
                    }
                    Some(Ok(Ok(mut stream))) => {
                        let (_, session) = stream.get_ref();
                        let h2 = session.alpn_protocol() == Some(b"h2");
                        // Without a Host, the SNI names the site better than the listener.
                        let fallback = session.server_name().map(str::to_string).or(domain);
                        if h2 {
                            conn.protocol.store(Protocol::H2.as_u8(), Ordering::SeqCst);
                            self.h2_conn(stream, conn.clone(), fallback, &cancel).await
                        } else {
                            conn.protocol
                                .store(Protocol::Http1Tls.as_u8(), Ordering::SeqCst);
                            self.h1_loop(&mut stream, &conn, fallback.as_deref(), true, &cancel)
                                .await
                        }
                    }
                }
            }
        };
        if let Err(e) = result {
            debug!(id = conn.id, error = %e, "replay: connection ended with an error");
        }
        conn.open.store(false, Ordering::SeqCst);
        debug!(
            id = conn.id,
            requests = conn.requests.load(Ordering::SeqCst),
            "replay: connection closed"
        );
    }

    fn reply(&self, ask: &Ask<'_>, fallback: Option<&str>) -> Reply {
        let visit = self.inner.visit.load(Ordering::SeqCst);
        self.inner.site.respond(ask, fallback, visit)
    }

    fn count(&self, conn: &ConnInfo, status: u16) {
        let t = &self.inner.totals;
        conn.requests.fetch_add(1, Ordering::SeqCst);
        t.requests.fetch_add(1, Ordering::SeqCst);
        let class = match status {
            200..=299 => &t.status_2xx,
            304 => &t.not_modified,
            300..=399 => &t.status_3xx,
            400..=499 => &t.status_4xx,
            _ => &t.status_5xx,
        };
        class.fetch_add(1, Ordering::SeqCst);
    }

    /// HTTP/1.x: answers every complete request in the buffer in order, flushes, reads more.
    async fn h1_loop<S>(
        &self,
        io: &mut S,
        conn: &ConnInfo,
        fallback: Option<&str>,
        secure: bool,
        cancel: &CancellationToken,
    ) -> io::Result<()>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let cfg = &self.inner.config;
        let mut buf = BytesMut::with_capacity(16 * 1024);
        let mut out: Vec<u8> = Vec::new();
        let mut served: u32 = 0;
        loop {
            let mut close = false;
            loop {
                let error = match h1::parse(&buf, cfg.max_header_bytes) {
                    Parse::Partial => break,
                    Parse::Invalid(why) => {
                        debug!(id = conn.id, %why, "replay: 400");
                        Some(simple(400, &format!("bad request: {why}\n")))
                    }
                    Parse::TooLarge => {
                        debug!(id = conn.id, "replay: 431");
                        Some(simple(
                            431,
                            &format!(
                                "request head over {} bytes or {} fields\n",
                                cfg.max_header_bytes,
                                h1::MAX_HEADERS
                            ),
                        ))
                    }
                    Parse::Complete(head, n) => {
                        if head.chunked {
                            Some(simple(501, "chunked request bodies are not supported\n"))
                        } else if head.content_length > cfg.max_request_body {
                            Some(simple(413, "request body too large\n"))
                        } else {
                            let total = n + head.content_length as usize;
                            if buf.len() < total {
                                break; // the body is still coming
                            }
                            // Accept-Encoding, which the replay's head parser does not keep.
                            let accept_encoding =
                                accept_encoding_of(&buf[..n], cfg.max_header_bytes);
                            let _ = buf.split_to(total);
                            served = served.saturating_add(1);
                            let reply = self.reply(
                                &Ask {
                                    method: &head.method,
                                    host: head.host.as_deref(),
                                    target: &head.target,
                                    secure,
                                    if_none_match: head.if_none_match.as_deref(),
                                    if_modified_since: head.if_modified_since.as_deref(),
                                    accept_encoding: accept_encoding.as_deref(),
                                },
                                fallback,
                            );
                            self.count(conn, reply.status);
                            let limit = self.inner.close_after.load(Ordering::SeqCst);
                            let limited = limit != 0 && served >= limit;
                            close = !head.keep_alive() || limited;
                            if limited && head.keep_alive() {
                                self.inner
                                    .totals
                                    .closed_after_limit
                                    .fetch_add(1, Ordering::SeqCst);
                            }
                            h1::write_reply(
                                &mut out,
                                &reply,
                                head.method == "HEAD",
                                close,
                                head.version,
                            );
                            None
                        }
                    }
                };
                if let Some(reply) = error {
                    self.count(conn, reply.status);
                    h1::write_reply(&mut out, &reply, false, true, http::Version::HTTP_11);
                    close = true;
                }
                if close {
                    break;
                }
                if out.len() >= FLUSH_AT {
                    write_out(io, &mut out, cancel).await?;
                }
            }
            write_out(io, &mut out, cancel).await?;
            if close {
                linger(io, cancel).await;
                return Ok(());
            }
            if cancel.is_cancelled() {
                return Ok(());
            }
            buf.reserve(16 * 1024);
            let read = tokio::select! {
                _ = cancel.cancelled() => return Ok(()),
                r = read_some(io, &mut buf, self.idle_timeout()) => r,
            };
            match read {
                Ok(0) => return Ok(()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::TimedOut => {
                    debug!(id = conn.id, "replay: idle connection closed");
                    let _ = io.shutdown().await;
                    return Ok(());
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// HTTP/2 over TLS with hyper; one response per stream from the same [`Site`].
    async fn h2_conn<S>(
        &self,
        io: S,
        conn: Arc<ConnInfo>,
        fallback: Option<String>,
        cancel: &CancellationToken,
    ) -> io::Result<()>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let me = self.clone();
        let fallback: Arc<Option<String>> = Arc::new(fallback);
        let service = hyper::service::service_fn(move |req: http::Request<Incoming>| {
            let me = me.clone();
            let conn = conn.clone();
            let fallback = fallback.clone();
            async move { Ok::<_, Infallible>(me.h2_reply(req, &conn, fallback.as_deref())) }
        });
        let mut builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
        builder.max_header_list_size(
            u32::try_from(self.inner.config.max_header_bytes).unwrap_or(u32::MAX),
        );
        let connection = builder.serve_connection(TokioIo::new(io), service);
        tokio::pin!(connection);
        let result = tokio::select! {
            r = connection.as_mut() => r,
            _ = cancel.cancelled() => {
                connection.as_mut().graceful_shutdown();
                match tokio::time::timeout(LINGER, connection.as_mut()).await {
                    Ok(r) => r,
                    Err(_) => Ok(()),
                }
            }
        };
        result.map_err(io::Error::other)
    }

    fn h2_reply(
        &self,
        req: http::Request<Incoming>,
        conn: &ConnInfo,
        fallback: Option<&str>,
    ) -> http::Response<Full<Bytes>> {
        let header = |name: http::header::HeaderName| -> Option<String> {
            let values: Vec<&str> = req
                .headers()
                .get_all(name)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .collect();
            (!values.is_empty()).then(|| values.join(", "))
        };
        let host = req
            .uri()
            .authority()
            .map(|a| a.as_str().to_string())
            .or_else(|| header(http::header::HOST));
        let target = req
            .uri()
            .path_and_query()
            .map(|p| p.as_str())
            .unwrap_or("/");
        let inm = header(http::header::IF_NONE_MATCH);
        let ims = header(http::header::IF_MODIFIED_SINCE);
        let ae = header(http::header::ACCEPT_ENCODING);
        let method = req.method().as_str();
        let reply = self.reply(
            &Ask {
                method,
                host: host.as_deref(),
                target,
                secure: true,
                if_none_match: inm.as_deref(),
                if_modified_since: ims.as_deref(),
                accept_encoding: ae.as_deref(),
            },
            fallback,
        );
        self.count(conn, reply.status);
        to_http_response(reply, method == "HEAD")
    }
}

/// The Accept-Encoding fields of an HTTP/1.x request head, joined.
fn accept_encoding_of(head: &[u8], max_head: usize) -> Option<String> {
    let parsed = webpep_http1::parse_request_head(head, max_head).ok()??;
    let values: Vec<&str> = parsed
        .headers
        .get_all(http::header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    (!values.is_empty()).then(|| values.join(", "))
}

fn to_http_response(reply: Reply, head_only: bool) -> http::Response<Full<Bytes>> {
    let mut builder = http::Response::builder().status(reply.status);
    for (name, value) in &reply.headers {
        let name = match http::header::HeaderName::from_bytes(name.to_ascii_lowercase().as_bytes())
        {
            Ok(n) => n,
            Err(_) => {
                warn!(%name, "replay: dropping a header that cannot be sent over h2");
                continue;
            }
        };
        match http::header::HeaderValue::from_str(value) {
            Ok(v) => builder = builder.header(name, v),
            Err(_) => warn!(%name, "replay: dropping a header value that cannot be sent"),
        }
    }
    if let Some(len) = reply.content_length {
        builder = builder.header(http::header::CONTENT_LENGTH, len);
    }
    let body = if head_only { Bytes::new() } else { reply.body };
    builder.body(Full::new(body)).unwrap_or_else(|e| {
        warn!(error = %e, "replay: response could not be built");
        let mut r = http::Response::new(Full::new(Bytes::from_static(b"response error\n")));
        *r.status_mut() = http::StatusCode::INTERNAL_SERVER_ERROR;
        r
    })
}

async fn write_out<S: AsyncWrite + Unpin>(
    io: &mut S,
    out: &mut Vec<u8>,
    cancel: &CancellationToken,
) -> io::Result<()> {
    if out.is_empty() {
        return Ok(());
    }
    tokio::select! {
        _ = cancel.cancelled() => Err(io::Error::new(io::ErrorKind::Interrupted, "server stopping")),
        r = async { io.write_all(out).await?; io.flush().await } => {
            out.clear();
            r
        }
    }
}

async fn read_some<S: AsyncRead + Unpin>(
    io: &mut S,
    buf: &mut BytesMut,
    idle: Option<Duration>,
) -> io::Result<usize> {
    match idle {
        None => io.read_buf(buf).await,
        Some(d) => match tokio::time::timeout(d, io.read_buf(buf)).await {
            Ok(r) => r,
            Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "idle")),
        },
    }
}

/// Half-closes, then reads and discards for a moment so that requests the client already sent
/// do not make the kernel reset the connection under the last response.
async fn linger<S: AsyncRead + AsyncWrite + Unpin>(io: &mut S, cancel: &CancellationToken) {
    let _ = io.shutdown().await;
    let mut sink = [0u8; 4096];
    let drain = async {
        let mut total = 0usize;
        loop {
            match io.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    total += n;
                    if total > 1024 * 1024 {
                        break;
                    }
                }
            }
        }
    };
    tokio::select! {
        _ = cancel.cancelled() => {}
        _ = tokio::time::timeout(LINGER, drain) => {}
    }
}

/// A TCP stream that counts the bytes it carries (per connection and in total).
struct Counted {
    inner: TcpStream,
    conn: Arc<ConnInfo>,
    server: Arc<Inner>,
}

impl Counted {
    fn add_in(&self, n: usize) {
        self.conn.bytes_in.fetch_add(n as u64, Ordering::Relaxed);
        self.server
            .totals
            .bytes_in
            .fetch_add(n as u64, Ordering::Relaxed);
    }
    fn add_out(&self, n: usize) {
        self.conn.bytes_out.fetch_add(n as u64, Ordering::Relaxed);
        self.server
            .totals
            .bytes_out
            .fetch_add(n as u64, Ordering::Relaxed);
    }
}

impl AsyncRead for Counted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = r {
            let n = buf.filled().len().saturating_sub(before);
            self.add_in(n);
        }
        r
    }
}

impl AsyncWrite for Counted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = r {
            self.add_out(n);
        }
        r
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = r {
            self.add_out(n);
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
