//! A response on its way to the client, and writing it in HTTP/1.x framing.

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, StatusCode, Version};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use std::time::Duration;
use tokio::io::{AsyncWrite, AsyncWriteExt};

use crate::http1::{response_framing, write_response_head, ResponseFraming};

/// A response body.
#[derive(Debug)]
pub enum Body {
    /// No bytes.
    Empty,
    /// All bytes at hand.
    Full(Bytes),
    /// Not buffered (too large, too slow, or an event stream): what was read, then the rest
    /// from the origin as it comes.
    Stream {
        /// Bytes already read.
        prefix: Bytes,
        /// The remainder.
        rest: Incoming,
        /// The whole body's length, when the origin declared it (prefix included).
        len: Option<u64>,
        /// The longest wait for the origin's next bytes before the body counts as broken off.
        stall: Duration,
        /// A copy kept for the cache as the body goes by (`None`: none kept).
        tee: Option<Tee>,
    },
}

/// What a finished copy of a streamed body is handed to (the cache's store).
pub type TeeDone =
    Box<dyn FnOnce(Bytes) -> crate::subrequest::BoxFuture<'static, ()> + Send + Sync>;

/// A copy of a streamed body kept as it goes by to the client: at most `max` bytes, within
/// the buffered-body budget (over either, the copy is dropped and the body streams on). When
/// the body has come whole, the copy is handed to its `done` (the cache's store) before the
/// body's last bytes go out, so the client's next request finds it stored.
pub struct Tee {
    max: usize,
    buf: bytes::BytesMut,
    lease: crate::limits::BufferLease,
    /// Where the whole copy goes (`None`: nowhere; a front end without a wire still reads
    /// the body whole by it, [`Body::gather`]).
    done: Option<TeeDone>,
}

impl std::fmt::Debug for Tee {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tee")
            .field("max", &self.max)
            .field("kept", &self.buf.len())
            .finish_non_exhaustive()
    }
}

impl Tee {
    /// A copy of at most `max` bytes held in `lease`, handed to `done` when whole.
    pub fn new(max: usize, lease: crate::limits::BufferLease, done: Option<TeeDone>) -> Tee {
        Tee {
            max,
            buf: bytes::BytesMut::new(),
            lease,
            done,
        }
    }

    /// Keeps `data`; false when the copy went over its bounds (it is then to be dropped).
    fn keep(&mut self, data: &[u8]) -> bool {
        let total = self.buf.len() + data.len();
        if total > self.max || !self.lease.grow_to(total as u64) {
            return false;
        }
        self.buf.extend_from_slice(data);
        true
    }

    /// Hands the whole copy to `done`, and waits for it; the copy.
    async fn finish(self) -> Bytes {
        let body = self.buf.freeze();
        if let Some(done) = self.done {
            done(body.clone()).await;
        }
        body
    }
}

/// Keeps `data` in the copy, dropping the copy when it goes over its bounds.
fn tee_keep(tee: &mut Option<Tee>, data: &[u8]) {
    if tee.as_mut().is_some_and(|t| !t.keep(data)) {
        *tee = None;
    }
}

impl Body {
    /// For a front end without a wire (the in-memory one): a body streaming through with a
    /// copy for the cache, read whole into memory within the copy's bounds (and stored);
    /// over them, or broken off, what was read and the rest as a stream. Any other body as
    /// it is.
    pub async fn gather(self) -> Body {
        let Body::Stream {
            prefix,
            mut rest,
            len,
            stall,
            tee: Some(mut tee),
        } = self
        else {
            return self;
        };
        let partial = |tee: Tee, more: &[u8], rest, len, stall| {
            let mut kept = tee.buf;
            kept.extend_from_slice(more);
            Body::Stream {
                prefix: kept.freeze(),
                rest,
                len,
                stall,
                tee: None,
            }
        };
        if !tee.keep(&prefix) {
            return partial(tee, &prefix, rest, len, stall);
        }
        loop {
            match tokio::time::timeout(stall, rest.frame()).await {
                Ok(Some(Ok(frame))) => {
                    if let Ok(d) = frame.into_data() {
                        if !tee.keep(&d) {
                            return partial(tee, &d, rest, len, stall);
                        }
                    }
                }
                Ok(None) if len.is_none_or(|n| n == tee.buf.len() as u64) => {
                    return Body::Full(tee.finish().await);
                }
                _ => return partial(tee, &[], rest, len, stall),
            }
        }
    }

    fn known_len(&self) -> Option<u64> {
        match self {
            Body::Empty => Some(0),
            Body::Full(b) => Some(b.len() as u64),
            Body::Stream { len, .. } => *len,
        }
    }
}

/// What writing a reply did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    /// Bytes written.
    pub bytes: u64,
    /// The connection must close now.
    pub close: bool,
    /// The body broke off (the origin failed or stalled, or sent less than it declared): the
    /// connection must be reset so the client cannot take the body as complete.
    pub truncated: bool,
    /// When the first byte went to the client (its first write returned).
    pub first_out: Option<std::time::Instant>,
}

/// A response for the client.
#[derive(Debug)]
pub struct Reply {
    /// Status.
    pub status: StatusCode,
    /// End-to-end header fields (no hop-by-hop, no framing).
    pub headers: HeaderMap,
    /// Body.
    pub body: Body,
    /// Close the connection after this response.
    pub close: bool,
    /// Cache result for the access log ("HIT", "MISS", "REVALIDATED", "-").
    pub cache: &'static str,
    /// The buffered-body budget the body holds until it is written.
    pub lease: Option<crate::limits::BufferLease>,
    /// Where the pipeline's time went, for the access log.
    pub trace: Trace,
}

/// What the pipeline reports about a reply to the access log.
#[derive(Debug, Clone, Copy, Default)]
pub struct Trace {
    /// The pipeline's timing (`None`: the proxy answered before the pipeline).
    pub timing: Option<crate::stage::Timing>,
    /// When the response's first byte reached the proxy (the origin's head, the cache's
    /// answer); with the first byte out, the edge's added latency.
    pub first_in: Option<std::time::Instant>,
}

impl Reply {
    /// A plain-text response stating `reason` (errors the proxy generates itself).
    pub fn text(status: StatusCode, reason: &str) -> Reply {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        let body = format!(
            "{} {}: {reason}\n",
            status.as_u16(),
            status.canonical_reason().unwrap_or("")
        );
        Reply {
            status,
            headers,
            body: Body::Full(Bytes::from(body)),
            close: false,
            cache: "-",
            lease: None,
            trace: Trace::default(),
        }
    }

    /// The same, closing the connection afterwards.
    pub fn text_close(status: StatusCode, reason: &str) -> Reply {
        let mut r = Reply::text(status, reason);
        r.close = true;
        r
    }
}

/// Writes `reply` to `w` for a request with `method`/`version`.
pub async fn write_reply<W: AsyncWrite + Unpin>(
    w: &mut W,
    reply: Reply,
    method: &Method,
    version: Version,
    keep_alive: bool,
    origin_bytes: &std::sync::atomic::AtomicU64,
) -> std::io::Result<Written> {
    let Reply {
        status,
        headers,
        body,
        close,
        lease: _lease,
        ..
    } = reply;
    let framing = response_framing(method, status, body.known_len(), version);
    // HEAD and 304 announce the representation's length when known.
    let head_len = if framing == ResponseFraming::NoBody && status != StatusCode::NO_CONTENT {
        match &body {
            Body::Full(b) if !b.is_empty() => Some(b.len() as u64),
            _ => webpep_http1::fields::content_length(&headers),
        }
    } else {
        None
    };
    let keep = keep_alive && !close;
    // The head goes out with the body (or its first part) in one write: the air side has
    // TCP_NODELAY, so each write is a segment, and a small response should be one.
    let mut out = write_response_head(status, &headers, framing, head_len, keep, version);
    let must_close = !keep || framing == ResponseFraming::Close;
    let chunked = framing == ResponseFraming::Chunked;
    let stream = match (framing, body) {
        (ResponseFraming::NoBody, _) | (_, Body::Empty) => None,
        (_, Body::Full(b)) => {
            push_part(&mut out, &b, chunked);
            None
        }
        (
            _,
            Body::Stream {
                prefix,
                rest,
                len,
                stall,
                tee,
            },
        ) => {
            push_part(&mut out, &prefix, chunked);
            let tee = start_tee(tee, &prefix);
            Some((rest, prefix.len() as u64, len, stall, tee))
        }
    };
    if chunked && stream.is_none() {
        out.extend_from_slice(LAST_CHUNK);
    }
    // The first byte is out when the socket takes the first of these bytes, not all of
    // them: a body larger than the socket's room for unsent bytes (TCP_NOTSENT_LOWAT on the
    // air side) waits for the link, which is not the edge's added latency.
    let first = if out.is_empty() {
        0
    } else {
        match w.write(&out).await? {
            0 => return Err(std::io::ErrorKind::WriteZero.into()),
            n => n,
        }
    };
    // (tokio's clock, which a test may pause, as the std instant the trace keeps.)
    let first_out = Some(tokio::time::Instant::now().into_std());
    let mut written = first as u64 + raw(w, &out[first..]).await?;
    drop(out);
    if let Some((mut rest, sent, len, stall, mut tee)) = stream {
        let mut sink = WireSink { w, chunked };
        let end = pump_rest(
            &mut rest,
            sent,
            len,
            stall,
            &mut tee,
            origin_bytes,
            &mut sink,
        )
        .await?;
        written += end.bytes();
        if let Pumped::BrokeOff { why, .. } = end {
            // The client must not take a truncated body as complete.
            w.flush().await?;
            tracing::warn!(reason = %why, "origin body broke off mid-stream");
            return Ok(Written {
                bytes: written,
                close: true,
                truncated: true,
                first_out,
            });
        }
        if chunked {
            written += raw(w, LAST_CHUNK).await?;
        }
    }
    w.flush().await?;
    Ok(Written {
        bytes: written,
        close: must_close,
        truncated: false,
        first_out,
    })
}

/// The copy kept of a streamed body whose first bytes are `prefix` (a copy for nobody is not
/// kept).
pub(crate) fn start_tee(tee: Option<Tee>, prefix: &[u8]) -> Option<Tee> {
    let mut tee = tee.filter(|t| t.done.is_some());
    tee_keep(&mut tee, prefix);
    tee
}

/// Where the parts of a streamed body go (an HTTP/1 connection, an HTTP/2 stream).
pub(crate) trait Sink {
    /// Sends one part; the bytes that went out for it (framing included).
    async fn part(&mut self, data: Bytes) -> std::io::Result<u64>;
}

/// An HTTP/1 connection: the parts as chunks or as they are.
struct WireSink<'a, W> {
    w: &'a mut W,
    chunked: bool,
}

impl<W: AsyncWrite + Unpin> Sink for WireSink<'_, W> {
    async fn part(&mut self, data: Bytes) -> std::io::Result<u64> {
        if self.chunked {
            write_chunk(self.w, &data).await
        } else {
            raw(self.w, &data).await
        }
    }
}

/// How the rest of a streamed body went.
#[derive(Debug)]
pub(crate) enum Pumped {
    /// All of it, `bytes` out.
    Whole { bytes: u64 },
    /// The origin failed, stalled or sent less than it declared: why, and the bytes out.
    BrokeOff { why: String, bytes: u64 },
}

impl Pumped {
    /// The bytes that went out.
    pub(crate) fn bytes(&self) -> u64 {
        match self {
            Pumped::Whole { bytes } | Pumped::BrokeOff { bytes, .. } => *bytes,
        }
    }
}

/// Sends the rest of a streamed body (`sent` bytes of it gone already) to `sink` as it comes
/// from the origin, counting it in `origin_bytes` and keeping the cache's copy (stored before
/// the last bytes go out, so the client's next request finds it).
pub(crate) async fn pump_rest<S: Sink>(
    rest: &mut Incoming,
    mut sent: u64,
    len: Option<u64>,
    stall: Duration,
    tee: &mut Option<Tee>,
    origin_bytes: &std::sync::atomic::AtomicU64,
    sink: &mut S,
) -> std::io::Result<Pumped> {
    let mut bytes = 0;
    loop {
        match tokio::time::timeout(stall, rest.frame()).await {
            Err(_) => {
                let why = format!("no bytes for {stall:?}");
                return Ok(Pumped::BrokeOff { why, bytes });
            }
            Ok(Some(Ok(frame))) => {
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                origin_bytes.fetch_add(data.len() as u64, std::sync::atomic::Ordering::Relaxed);
                if data.is_empty() {
                    continue;
                }
                tee_keep(tee, &data);
                if len == Some(sent + data.len() as u64) {
                    // The last bytes: the copy is stored before they go out.
                    if let Some(t) = tee.take() {
                        let _ = t.finish().await;
                    }
                }
                sent += data.len() as u64;
                bytes += sink.part(data).await?;
            }
            Ok(Some(Err(e))) => {
                return Ok(Pumped::BrokeOff {
                    why: e.to_string(),
                    bytes,
                })
            }
            Ok(None) => {
                // A body of no declared length ends here, before its last chunk.
                if let (Some(t), None) = (tee.take(), len) {
                    let _ = t.finish().await;
                }
                break;
            }
        }
    }
    if len.is_some_and(|n| sent != n) {
        let why = format!("{sent} of {len:?} bytes");
        return Ok(Pumped::BrokeOff { why, bytes });
    }
    Ok(Pumped::Whole { bytes })
}

async fn raw<W: AsyncWrite + Unpin>(w: &mut W, data: &[u8]) -> std::io::Result<u64> {
    w.write_all(data).await?;
    Ok(data.len() as u64)
}

/// The chunk that ends a chunked body (no trailers).
const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

/// Appends a part of the body as it goes on the wire: a chunk, or the bytes as they are.
fn push_part(out: &mut Vec<u8>, data: &[u8], chunked: bool) {
    if chunked {
        push_chunk(out, data);
    } else {
        out.extend_from_slice(data);
    }
}

/// Appends `data` as one chunk (nothing for empty data, which would end the body).
fn push_chunk(out: &mut Vec<u8>, data: &[u8]) {
    if data.is_empty() {
        return;
    }
    out.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// One chunk in one write (size line, data and CRLF as one segment, not three).
async fn write_chunk<W: AsyncWrite + Unpin>(w: &mut W, data: &[u8]) -> std::io::Result<u64> {
    let mut out = Vec::with_capacity(data.len() + 12);
    push_chunk(&mut out, data);
    raw(w, &out).await
}

/// One response's access line (`webpep::access`), as every front end that serves through the
/// pipeline writes it.
pub(crate) struct AccessLine<'a> {
    pub peer: std::net::SocketAddr,
    pub mode: &'a str,
    pub method: &'a str,
    pub url: &'a str,
    pub status: u16,
    pub bytes: u64,
    pub cache: &'a str,
    pub user: &'a str,
    pub start: std::time::Instant,
    pub truncated: bool,
    /// The link to the client as its connection measured it after the response.
    pub link: Option<crate::client_link::ClientLink>,
    pub trace: Trace,
    /// When the response's first byte went out to the client.
    pub first_out: Option<std::time::Instant>,
}

impl AccessLine<'_> {
    pub(crate) fn write(&self) {
        let ms = |d: Duration| (d.as_secs_f64() * 1e4).round() / 10.0;
        let timing = self.trace.timing.unwrap_or_default();
        // The edge's added latency: from the response's first byte at the proxy (the
        // origin's head, the cache's answer) to its first byte out to the client.
        let added = match (self.trace.first_in, self.first_out) {
            (Some(i), Some(o)) => Some(ms(o.saturating_duration_since(i))),
            _ => None,
        };
        let link = self.link;
        let decision = timing.decision;
        tracing::info!(
            target: "webpep::access",
            client = %self.peer,
            mode = self.mode,
            method = self.method,
            url = self.url,
            status = self.status,
            bytes = self.bytes,
            cache = self.cache,
            user = self.user,
            ms = self.start.elapsed().as_millis() as u64,
            truncated = self.truncated,
            link_kbps = link.and_then(|l| l.rate_kbps()).map(|k| k.round() as u64),
            min_rtt_ms = link.and_then(|l| l.min_rtt).map(|d| d.as_millis() as u64),
            added_ms = added,
            origin_ms = timing.origin.map(ms),
            queue_ms = timing.queue.map(ms),
            transform_ms = timing.transform.map(ms),
            hold = timing.hold.map(|h| h.label()),
            hold_kbps = decision.and_then(|d| d.rate).map(|r| r * 8 / 1000),
            hold_cost_ms = decision.and_then(|d| d.cost).map(ms),
            hold_saves_ms = decision.and_then(|d| d.saves).map(ms),
            hold_ahead_ms = decision.map(|d| ms(d.ahead)),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    /// Records each write the reply makes.
    #[derive(Default)]
    struct Writes(Vec<Vec<u8>>);

    impl AsyncWrite for Writes {
        fn poll_write(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<std::io::Result<usize>> {
            self.0.push(buf.to_vec());
            Poll::Ready(Ok(buf.len()))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    /// Writes `reply` to a GET on a keep-alive HTTP/1.1 connection; the writes and what
    /// `write_reply` returned.
    async fn writes_of(reply: Reply) -> (Writes, u64, bool) {
        let mut w = Writes::default();
        let out = reply_to_get(&mut w, reply).await;
        (w, out.bytes, out.close)
    }

    /// Writes `reply` to a GET on a keep-alive HTTP/1.1 connection.
    async fn reply_to_get<W: AsyncWrite + Unpin>(w: &mut W, reply: Reply) -> Written {
        let counter = std::sync::atomic::AtomicU64::new(0);
        write_reply(w, reply, &Method::GET, Version::HTTP_11, true, &counter)
            .await
            .expect("written")
    }

    #[tokio::test]
    async fn a_response_at_hand_goes_out_in_one_write() {
        let body = Bytes::from(vec![b'x'; 500]);
        let reply = Reply {
            status: StatusCode::OK,
            headers: HeaderMap::new(),
            body: Body::Full(body.clone()),
            close: false,
            cache: "-",
            lease: None,
            trace: Trace::default(),
        };
        let (w, n, close) = writes_of(reply).await;
        assert!(!close);
        assert_eq!(w.0.len(), 1, "head and body in one write");
        let out = &w.0[0];
        assert_eq!(n, out.len() as u64);
        assert!(out.starts_with(b"HTTP/1.1 200 OK\r\n"));
        assert!(out.ends_with(&body));

        let (w, _, _) = writes_of(Reply::text(StatusCode::BAD_GATEWAY, "origin refused")).await;
        assert_eq!(w.0.len(), 1);
        assert!(w.0[0].ends_with(b"502 Bad Gateway: origin refused\n"));
    }

    /// A socket that takes 1000 bytes at once, then 1000 more each second (virtual time): a
    /// slow link behind a small unsent buffer.
    struct SlowSocket {
        room: usize,
        refill: Option<Pin<Box<tokio::time::Sleep>>>,
        taken: usize,
    }

    impl AsyncWrite for SlowSocket {
        fn poll_write(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<std::io::Result<usize>> {
            while self.room == 0 {
                let refill = self
                    .refill
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(Duration::from_secs(1))));
                std::task::ready!(refill.as_mut().poll(cx));
                self.refill = None;
                self.room = 1000;
            }
            let n = buf.len().min(self.room);
            self.room -= n;
            self.taken += n;
            Poll::Ready(Ok(n))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    /// The edge's added latency ends when the response's first byte goes out, not when the
    /// socket has taken its last: a 10 KB body through a socket that takes 1 KB a second is
    /// out first at once and whole ten seconds later.
    #[tokio::test(start_paused = true)]
    async fn the_first_byte_out_is_not_the_last() {
        let reply = Reply {
            status: StatusCode::OK,
            headers: HeaderMap::new(),
            body: Body::Full(Bytes::from(vec![b'x'; 10_000])),
            close: false,
            cache: "-",
            lease: None,
            trace: Trace::default(),
        };
        let mut socket = SlowSocket {
            room: 1000,
            refill: None,
            taken: 0,
        };
        let start = tokio::time::Instant::now();
        let out = reply_to_get(&mut socket, reply).await;
        let whole = start.elapsed();
        assert_eq!(out.bytes, socket.taken as u64, "every byte written");
        assert!(whole >= Duration::from_secs(10), "{whole:?}");
        let first = out.first_out.expect("a first byte out");
        let first = first.saturating_duration_since(start.into_std());
        assert!(
            first < Duration::from_millis(1),
            "first byte out after {first:?}"
        );
    }

    #[test]
    fn a_chunk_is_its_size_line_data_and_crlf() {
        let mut out = Vec::new();
        push_chunk(&mut out, b"hello world, 26 bytes long");
        assert_eq!(out, b"1a\r\nhello world, 26 bytes long\r\n");
        push_chunk(&mut out, b"");
        assert_eq!(out.len(), 4 + 26 + 2, "an empty chunk would end the body");
    }
}
