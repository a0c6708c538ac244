//! Hostile peers for a front end under test (issue 30): origins that are slow, reset, lie or
//! send too much, clients that do the same, and the check that matters after each of them:
//! a well-behaved client is still served ([`assert_still_serves`]).
//!
//! Self-contained (tokio, httparse and socket2 only, no proxy types), so that any front end
//! can run the same peers: the edge proxy's suite (`tests/hostile.rs`, `tests/hostile_limits.rs`)
//! includes this file by path, and so does the soak tool (`examples/soak.rs`); a client proxy
//! or a QUIC front end can do the same. Origins are functions returning a [`HostileOrigin`]
//! (its address and what it saw); clients are async functions taking the front end's address
//! and speaking HTTP/1.1 to it as to a proxy (absolute-form targets).
//!
//! Everything is bounded: an origin holds a connection at most [`HOLD`], every client read is
//! under a deadline, and the deadlines are failure guards only (generous, for a shared noisy
//! machine): what the tests assert is behaviour (statuses, bytes, closes, what the origin saw).
#![allow(dead_code)]

use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The failure guard of one step ("answered within 10 s"): generous, never a latency bound.
pub const DEADLINE: Duration = Duration::from_secs(10);

/// The longest an origin keeps a connection it holds open (hanging, stalling).
pub const HOLD: Duration = Duration::from_secs(60);

/// The most one test may take, whatever its peers do (each test body runs under
/// [`bounded`]).
pub const TEST_LIMIT: Duration = Duration::from_secs(30);

/// Runs a whole test body, failing it after [`TEST_LIMIT`].
pub async fn bounded<F: Future>(f: F) -> F::Output {
    within("the test", TEST_LIMIT, f).await
}

/// Runs `f`, failing the test with `what` when it takes longer than `limit`.
pub async fn within<F: Future>(what: &str, limit: Duration, f: F) -> F::Output {
    match tokio::time::timeout(limit, f).await {
        Ok(v) => v,
        Err(_) => panic!("{what}: not done within {limit:?}"),
    }
}

/// Polls `cond` (every 10 ms) until it holds; fails the test after `limit`.
pub async fn wait_until(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    within(what, limit, async {
        while !cond() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
}

// ---------------------------------------------------------------------------------------
// Origins
// ---------------------------------------------------------------------------------------

/// A request as an origin saw it.
#[derive(Debug, Clone, Default)]
pub struct SeenRequest {
    pub method: String,
    /// The request target as sent (origin-form from a proxy).
    pub target: String,
    /// Names in lower case, in order, repeated fields kept apart.
    pub headers: Vec<(String, String)>,
    /// The body (empty for a head seen without its body).
    pub body: Vec<u8>,
}

impl SeenRequest {
    /// The first value of `name`.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Every value of `name`, in order.
    pub fn all(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// The path of the target (an absolute-form target's scheme and authority dropped).
    pub fn path(&self) -> &str {
        path_of(&self.target)
    }
}

fn path_of(target: &str) -> &str {
    match target.split_once("://") {
        Some((_, rest)) => rest.find('/').map_or("/", |i| &rest[i..]),
        None => target,
    }
}

/// What an origin saw: connections, request heads as they arrived, requests read whole.
#[derive(Debug, Default)]
pub struct Seen {
    connections: AtomicUsize,
    heads: Mutex<Vec<SeenRequest>>,
    requests: Mutex<Vec<SeenRequest>>,
}

impl Seen {
    /// Connections accepted.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
    /// Request heads read (whether or not their bodies followed).
    pub fn heads(&self) -> usize {
        self.heads.lock().unwrap().len()
    }
    /// Requests read whole (head and body).
    pub fn requests(&self) -> Vec<SeenRequest> {
        self.requests.lock().unwrap().clone()
    }
    /// How many requests were read whole.
    pub fn count(&self) -> usize {
        self.requests.lock().unwrap().len()
    }
    /// The last request read whole.
    pub fn last(&self) -> Option<SeenRequest> {
        self.requests.lock().unwrap().last().cloned()
    }
    /// Waits (under [`DEADLINE`]) until `n` request heads have arrived.
    pub async fn wait_heads(&self, n: usize) {
        wait_until(
            &format!("origin to see {n} request heads"),
            DEADLINE,
            || self.heads() >= n,
        )
        .await
    }
}

/// An origin on loopback.
pub struct HostileOrigin {
    pub addr: SocketAddr,
    pub seen: Arc<Seen>,
}

impl HostileOrigin {
    /// `http://<addr><path>`, the absolute-form target a proxy client sends.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

/// One accepted origin connection, with a reader for requests.
pub struct OriginConn {
    pub s: TcpStream,
    buf: Vec<u8>,
    pub seen: Arc<Seen>,
}

impl OriginConn {
    async fn fill(&mut self) -> bool {
        self.buf.reserve(16 * 1024);
        matches!(self.s.read_buf(&mut self.buf).await, Ok(n) if n > 0)
    }

    /// Reads the next request head (recorded in [`Seen::heads`]); `None` when the peer closed
    /// or sent something that is not a request.
    pub async fn read_head(&mut self) -> Option<SeenRequest> {
        loop {
            let mut hs = [httparse::EMPTY_HEADER; 128];
            let mut r = httparse::Request::new(&mut hs);
            match r.parse(&self.buf) {
                Ok(httparse::Status::Complete(n)) => {
                    let req = SeenRequest {
                        method: r.method.unwrap_or("").to_string(),
                        target: r.path.unwrap_or("").to_string(),
                        headers: r
                            .headers
                            .iter()
                            .map(|h| {
                                (
                                    h.name.to_ascii_lowercase(),
                                    String::from_utf8_lossy(h.value).into_owned(),
                                )
                            })
                            .collect(),
                        body: Vec::new(),
                    };
                    self.buf.drain(..n);
                    self.seen.heads.lock().unwrap().push(req.clone());
                    return Some(req);
                }
                Ok(httparse::Status::Partial) if self.buf.len() < (1 << 20) => {}
                _ => return None,
            }
            if !self.fill().await {
                return None;
            }
        }
    }

    /// Reads the body `head` announces: chunked, or Content-Length (a list of equal values
    /// taken as one); `None` when the peer closed first or the framing is broken.
    pub async fn read_body(&mut self, head: &SeenRequest) -> Option<Vec<u8>> {
        let chunked = head
            .all("transfer-encoding")
            .iter()
            .any(|v| v.to_ascii_lowercase().contains("chunked"));
        if chunked {
            let mut d = Dechunker::default();
            loop {
                match d.feed(&mut self.buf) {
                    Ok(true) => return Some(d.body),
                    Ok(false) => {}
                    Err(_) => return None,
                }
                if !self.fill().await {
                    return None;
                }
            }
        }
        let mut len: Option<usize> = None;
        for v in head.all("content-length") {
            for part in v.split(',') {
                let n: usize = part.trim().parse().ok()?;
                if len.is_some_and(|l| l != n) {
                    return None;
                }
                len = Some(n);
            }
        }
        let n = len.unwrap_or(0);
        while self.buf.len() < n {
            if !self.fill().await {
                return None;
            }
        }
        Some(self.buf.drain(..n).collect())
    }

    /// Reads a whole request (recorded in [`Seen::requests`]).
    pub async fn read_request(&mut self) -> Option<SeenRequest> {
        let mut req = self.read_head().await?;
        req.body = self.read_body(&req).await?;
        self.seen.requests.lock().unwrap().push(req.clone());
        Some(req)
    }

    /// Writes `b`; false when the peer is gone.
    pub async fn write(&mut self, b: &[u8]) -> bool {
        self.s.write_all(b).await.is_ok()
    }

    /// Keeps the connection open, reading and dropping whatever comes, until the peer closes
    /// or [`HOLD`] passes.
    pub async fn hold(mut self) {
        let _ = tokio::time::timeout(HOLD, async {
            let mut sink = vec![0u8; 16 * 1024];
            while let Ok(n) = self.s.read(&mut sink).await {
                if n == 0 {
                    break;
                }
            }
        })
        .await;
    }

    /// Closes with a reset (SO_LINGER 0).
    pub fn reset(self) {
        reset_stream(&self.s);
    }
}

fn reset_stream(s: &TcpStream) {
    let _ = socket2::SockRef::from(s).set_linger(Some(Duration::ZERO));
}

/// Starts an origin on 127.0.0.1 that runs `script` on each accepted connection (for at most
/// [`HOLD`]).
pub async fn scripted_origin<F, Fut>(script: F) -> HostileOrigin
where
    F: Fn(OriginConn) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind origin");
    let addr = l.local_addr().unwrap();
    let seen = Arc::new(Seen::default());
    let s2 = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((s, _)) = l.accept().await else {
                // E.g. out of descriptors for a moment: keep accepting.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            s2.connections.fetch_add(1, Ordering::SeqCst);
            let fut = script(OriginConn {
                s,
                buf: Vec::new(),
                seen: s2.clone(),
            });
            tokio::spawn(async move {
                let _ = tokio::time::timeout(HOLD, fut).await;
            });
        }
    });
    HostileOrigin { addr, seen }
}

/// A raw HTTP/1.1 response with a Content-Length for `body`.
pub fn response(status: u16, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut out = format!("HTTP/1.1 {status} X\r\n");
    for (k, v) in headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    let mut out = out.into_bytes();
    out.extend_from_slice(body);
    out
}

/// The body the well-behaved origin answers `path` with.
pub fn good_body(path: &str) -> String {
    format!("ok {path}")
}

/// The well-behaved origin: `200 ok <path>` to every request (HEAD without the body),
/// keep-alive; bodies are read and recorded.
pub async fn good_origin() -> HostileOrigin {
    scripted_origin(|mut c| async move {
        while let Some(r) = c.read_request().await {
            let body = good_body(r.path());
            let mut out = response(200, &[("Content-Type", "text/plain")], body.as_bytes());
            if r.method == "HEAD" {
                out.truncate(out.len() - body.len());
            }
            if !c.write(&out).await {
                return;
            }
        }
    })
    .await
}

/// What an origin does with the connection after its scripted answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Then {
    /// Closes (FIN).
    Close,
    /// Closes with a reset.
    Reset,
    /// Keeps the connection open without a word ([`OriginConn::hold`]).
    Hold,
    /// Answers the next request on the connection the same way.
    KeepAlive,
}

/// An origin that reads each request whole, writes `raw` (a head and whatever body, as
/// given: it may lie), then does `then`.
pub async fn raw_origin(raw: Vec<u8>, then: Then) -> HostileOrigin {
    let raw: Arc<[u8]> = raw.into();
    scripted_origin(move |mut c| {
        let raw = raw.clone();
        async move {
            loop {
                if c.read_request().await.is_none() || !c.write(&raw).await {
                    return;
                }
                match then {
                    Then::Close => return,
                    Then::Reset => return c.reset(),
                    Then::Hold => return c.hold().await,
                    Then::KeepAlive => {}
                }
            }
        }
    })
    .await
}

/// An origin that reads a request head and resets the connection while the body is still
/// coming (an upload cut off).
pub async fn upload_resetting_origin() -> HostileOrigin {
    scripted_origin(|mut c| async move {
        if c.read_head().await.is_some() {
            c.reset();
        }
    })
    .await
}

/// An origin that reads requests and never answers.
pub async fn hanging_origin() -> HostileOrigin {
    scripted_origin(|mut c| async move {
        if c.read_request().await.is_some() {
            c.hold().await;
        }
    })
    .await
}

/// Opens a [`gated_origin`].
pub struct Gate(watch::Sender<bool>);

impl Gate {
    /// From now on the origin reads bodies and answers.
    pub fn open(&self) {
        let _ = self.0.send(true);
    }
}

/// An origin that reads request heads (so [`Seen::heads`] counts them) but does not read
/// their bodies (the sender's buffers fill up) until the gate is opened; then it reads them
/// and answers like [`good_origin`].
pub async fn gated_origin() -> (HostileOrigin, Gate) {
    let (tx, rx) = watch::channel(false);
    let o = scripted_origin(move |mut c| {
        let mut rx = rx.clone();
        async move {
            while let Some(mut r) = c.read_head().await {
                if rx.wait_for(|open| *open).await.is_err() {
                    return;
                }
                let Some(body) = c.read_body(&r).await else {
                    return;
                };
                r.body = body;
                c.seen.requests.lock().unwrap().push(r.clone());
                let body = good_body(r.path());
                let out = response(200, &[("Content-Type", "text/plain")], body.as_bytes());
                if !c.write(&out).await {
                    return;
                }
            }
        }
    })
    .await;
    (o, Gate(tx))
}

/// `n` bytes of a recognisable pattern (`abcdefghij…` repeated).
pub fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| b'a' + (i % 26) as u8).collect()
}

/// An origin that declares `Content-Length: declared`, sends the first `sent` bytes of it,
/// then does `then` ([`Then::Close`]: broke off; [`Then::Hold`]: stalls).
pub async fn short_body_origin(declared: usize, sent: usize, then: Then) -> HostileOrigin {
    let mut raw = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: {declared}\r\n\r\n"
    )
    .into_bytes();
    raw.extend_from_slice(&pattern(sent));
    raw_origin(raw, then).await
}

/// An origin that answers chunked without a length, sends `sent` bytes in 16 KiB chunks,
/// waits until `release` is true (e.g. the client has read them all), then closes without
/// the last chunk (broke off mid-body).
pub async fn chunked_breakoff_origin(sent: usize, release: watch::Receiver<bool>) -> HostileOrigin {
    let mut raw = b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    for part in pattern(sent).chunks(16 * 1024) {
        raw.extend_from_slice(format!("{:x}\r\n", part.len()).as_bytes());
        raw.extend_from_slice(part);
        raw.extend_from_slice(b"\r\n");
    }
    let raw: Arc<[u8]> = raw.into();
    scripted_origin(move |mut c| {
        let (raw, mut release) = (raw.clone(), release.clone());
        async move {
            if c.read_request().await.is_some() && c.write(&raw).await {
                let _ = release.wait_for(|go| *go).await;
            }
        }
    })
    .await
}

/// How a trickling origin frames its body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// Content-Length.
    Length,
    /// Chunked, one chunk per piece.
    Chunked,
    /// Neither: the body ends when the connection closes.
    Close,
}

/// An origin that sends its head at once, then `total` bytes of [`pattern`] `piece` bytes
/// every `interval` (a trickle), then closes.
pub async fn trickle_origin(
    content_type: &'static str,
    total: usize,
    piece: usize,
    interval: Duration,
    framing: Framing,
) -> HostileOrigin {
    scripted_origin(move |mut c| async move {
        if c.read_request().await.is_none() {
            return;
        }
        let mut head = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nCache-Control: no-cache\r\n"
        );
        match framing {
            Framing::Length => head.push_str(&format!("Content-Length: {total}\r\n")),
            Framing::Chunked => head.push_str("Transfer-Encoding: chunked\r\n"),
            Framing::Close => head.push_str("Connection: close\r\n"),
        }
        head.push_str("\r\n");
        if !c.write(head.as_bytes()).await {
            return;
        }
        for part in pattern(total).chunks(piece.max(1)) {
            tokio::time::sleep(interval).await;
            let ok = if framing == Framing::Chunked {
                let mut b = format!("{:x}\r\n", part.len()).into_bytes();
                b.extend_from_slice(part);
                b.extend_from_slice(b"\r\n");
                c.write(&b).await
            } else {
                c.write(part).await
            };
            if !ok {
                return;
            }
        }
        if framing == Framing::Chunked {
            let _ = c.write(b"0\r\n\r\n").await;
        }
    })
    .await
}

/// A server-sent events origin: `text/event-stream`, chunked, `data: <i>` at once and then
/// every `interval`, `events` of them.
pub async fn event_stream_origin(events: usize, interval: Duration) -> HostileOrigin {
    scripted_origin(move |mut c| async move {
        if c.read_request().await.is_none() {
            return;
        }
        let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n";
        if !c.write(head.as_bytes()).await {
            return;
        }
        for i in 1..=events {
            let ev = format!("data: {i}\n\n");
            let chunk = format!("{:x}\r\n{ev}\r\n", ev.len());
            if !c.write(chunk.as_bytes()).await {
                return;
            }
            tokio::time::sleep(interval).await;
        }
        let _ = c.write(b"0\r\n\r\n").await;
    })
    .await
}

/// An origin whose response has two different Content-Lengths (bad framing).
pub async fn two_lengths_origin() -> HostileOrigin {
    raw_origin(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\nContent-Length: 12\r\n\r\nhello world!"
            .to_vec(),
        Then::Close,
    )
    .await
}

/// An origin that answers a plain request with `101 Switching Protocols` (nobody asked).
pub async fn switching_protocols_origin() -> HostileOrigin {
    raw_origin(
        b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\nnot http any more"
            .to_vec(),
        Then::Hold,
    )
    .await
}

/// An origin whose response head is `bytes` long (one huge header field).
pub async fn oversized_head_origin(bytes: usize) -> HostileOrigin {
    let mut raw = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nX-Big: ".to_vec();
    raw.extend_from_slice(&vec![b'a'; bytes]);
    raw.extend_from_slice(b"\r\nContent-Length: 2\r\n\r\nhi");
    raw_origin(raw, Then::Close).await
}

/// An origin serving `body` (`Content-Length`, keep-alive) with `headers` to every request.
pub async fn body_origin(headers: &[(&str, &str)], body: &[u8]) -> HostileOrigin {
    raw_origin(response(200, headers, body), Then::KeepAlive).await
}

/// A gzip stream (one member, valid CRC and size) of 1 GiB of zeros, ~6.5 MB: a literal zero
/// and then length-258 distance-1 matches in one fixed-Huffman block, packed directly (no
/// compressor needed, ~0.2 s even unoptimized).
pub fn gzip_zero_bomb() -> Vec<u8> {
    struct Bits {
        out: Vec<u8>,
        acc: u64,
        n: u32,
    }
    impl Bits {
        /// `n` bits of `v`, least significant first (deflate's order for everything but
        /// Huffman codes).
        fn put(&mut self, v: u64, n: u32) {
            self.acc |= v << self.n;
            self.n += n;
            while self.n >= 8 {
                self.out.push(self.acc as u8);
                self.acc >>= 8;
                self.n -= 8;
            }
        }
        /// A Huffman code, most significant bit first.
        fn huff(&mut self, code: u32, len: u32) {
            self.put((code.reverse_bits() >> (32 - len)) as u64, len);
        }
    }
    const TOTAL: u64 = 1 << 30;
    // zlib.crc32 of 2^30 zero bytes.
    const CRC: u32 = 0x5b64_c2b0;
    let mut b = Bits {
        out: Vec::with_capacity(7 << 20),
        acc: 0,
        n: 0,
    };
    b.out
        .extend_from_slice(&[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff]);
    b.put(1, 1); // BFINAL
    b.put(1, 2); // BTYPE 01: fixed Huffman
    b.huff(0x30, 8); // literal 0
    let matches = (TOTAL - 1) / 258;
    for _ in 0..matches {
        b.huff(0xC5, 8); // length code 285: 258
        b.put(0, 5); // distance code 0: 1
    }
    // 3 left: length code 257, distance 1; then end of block.
    b.huff(1, 7);
    b.put(0, 5);
    b.huff(0, 7);
    if b.n > 0 {
        b.out.push(b.acc as u8);
    }
    b.out.extend_from_slice(&CRC.to_le_bytes());
    b.out.extend_from_slice(&(TOTAL as u32).to_le_bytes());
    b.out
}

// ---------------------------------------------------------------------------------------
// Clients
// ---------------------------------------------------------------------------------------

/// How reading a response or a connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The whole message as framed arrived.
    Complete,
    /// Stopped on purpose with more to come (a prefix was asked for).
    More,
    /// The peer closed (FIN).
    Eof,
    /// The peer reset the connection (ECONNRESET).
    Reset,
    /// Another error (or bytes that do not parse: `InvalidData`).
    Failed(io::ErrorKind),
    /// Nothing more within the deadline (the connection is still open).
    TimedOut,
}

impl End {
    /// The connection is gone (closed, reset or failed).
    pub fn closed(self) -> bool {
        matches!(self, End::Eof | End::Reset | End::Failed(_))
    }
}

/// A response head.
#[derive(Debug, Clone)]
pub struct Head {
    pub status: u16,
    /// Names in lower case, in order.
    pub headers: Vec<(String, String)>,
}

impl Head {
    /// The first value of `name`.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A response as a client read it.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// How the body ended: [`End::Complete`] when it arrived whole as framed (a body that
    /// ends with the connection is [`End::Eof`] or [`End::Reset`]).
    pub end: End,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// An incremental chunked-body decoder.
#[derive(Debug, Default)]
pub struct Dechunker {
    state: ChunkState,
    /// The body decoded so far.
    pub body: Vec<u8>,
}

#[derive(Debug, Default, Clone, Copy)]
enum ChunkState {
    #[default]
    Size,
    Data(usize),
    DataEnd,
    Trailers,
    Done,
}

impl Dechunker {
    /// Decodes what it can from the front of `buf` (consuming it); `Ok(true)` once the last
    /// chunk and the trailers are through.
    pub fn feed(&mut self, buf: &mut Vec<u8>) -> Result<bool, String> {
        loop {
            match self.state {
                ChunkState::Size => {
                    let Some(i) = find_crlf(buf) else {
                        return if buf.len() > 4096 {
                            Err("chunk size line too long".into())
                        } else {
                            Ok(false)
                        };
                    };
                    let line = String::from_utf8_lossy(&buf[..i]).into_owned();
                    let hex = line.split(';').next().unwrap_or("").trim();
                    let n = usize::from_str_radix(hex, 16)
                        .map_err(|_| format!("bad chunk size {line:?}"))?;
                    buf.drain(..i + 2);
                    self.state = if n == 0 {
                        ChunkState::Trailers
                    } else {
                        ChunkState::Data(n)
                    };
                }
                ChunkState::Data(n) => {
                    if buf.is_empty() {
                        return Ok(false);
                    }
                    let k = n.min(buf.len());
                    self.body.extend(buf.drain(..k));
                    self.state = if k == n {
                        ChunkState::DataEnd
                    } else {
                        ChunkState::Data(n - k)
                    };
                }
                ChunkState::DataEnd => {
                    if buf.len() < 2 {
                        return Ok(false);
                    }
                    if &buf[..2] != b"\r\n" {
                        return Err("no CRLF after chunk data".into());
                    }
                    buf.drain(..2);
                    self.state = ChunkState::Size;
                }
                ChunkState::Trailers => {
                    let Some(i) = find_crlf(buf) else {
                        return Ok(false);
                    };
                    buf.drain(..i + 2);
                    if i == 0 {
                        self.state = ChunkState::Done;
                    }
                }
                ChunkState::Done => return Ok(true),
            }
        }
    }
}

fn find_crlf(b: &[u8]) -> Option<usize> {
    b.windows(2).position(|w| w == b"\r\n")
}

/// A client connection to the front end, read and written separately (a writer can trickle
/// in a task of its own while the test reads).
pub struct RawClient {
    rd: OwnedReadHalf,
    wr: Option<OwnedWriteHalf>,
    buf: Vec<u8>,
}

impl RawClient {
    /// Connects to `proxy`.
    pub async fn connect(proxy: SocketAddr) -> io::Result<RawClient> {
        Ok(Self::from_stream(TcpStream::connect(proxy).await?))
    }

    /// Connects to `proxy` from `local` (any port), e.g. 127.0.0.2 to be another client.
    pub async fn connect_from(local: IpAddr, proxy: SocketAddr) -> io::Result<RawClient> {
        let sock = if local.is_ipv4() {
            TcpSocket::new_v4()?
        } else {
            TcpSocket::new_v6()?
        };
        sock.bind(SocketAddr::new(local, 0))?;
        Ok(Self::from_stream(sock.connect(proxy).await?))
    }

    fn from_stream(s: TcpStream) -> RawClient {
        let _ = s.set_nodelay(true);
        let (rd, wr) = s.into_split();
        RawClient {
            rd,
            wr: Some(wr),
            buf: Vec::new(),
        }
    }

    /// Sends `b`.
    pub async fn send(&mut self, b: &[u8]) -> io::Result<()> {
        let wr = self
            .wr
            .as_mut()
            .ok_or_else(|| io::Error::other("writer taken"))?;
        wr.write_all(b).await
    }

    /// The write half, for a writer task; dropping it sends FIN.
    pub fn take_writer(&mut self) -> OwnedWriteHalf {
        self.wr.take().expect("writer present")
    }

    /// Closes with a reset (SO_LINGER 0), whatever is in flight.
    pub fn reset(self) {
        let _ = socket2::SockRef::from(self.rd.as_ref()).set_linger(Some(Duration::ZERO));
    }

    async fn fill(&mut self, until: tokio::time::Instant) -> Result<usize, End> {
        self.buf.reserve(16 * 1024);
        match tokio::time::timeout_at(until, self.rd.read_buf(&mut self.buf)).await {
            Err(_) => Err(End::TimedOut),
            Ok(Ok(0)) => Err(End::Eof),
            Ok(Ok(n)) => Ok(n),
            Ok(Err(e)) if e.kind() == io::ErrorKind::ConnectionReset => Err(End::Reset),
            Ok(Err(e)) => Err(End::Failed(e.kind())),
        }
    }

    /// Reads a response head (1xx ones too) within `limit`.
    pub async fn read_head(&mut self, limit: Duration) -> Result<Head, End> {
        let until = tokio::time::Instant::now() + limit;
        loop {
            let mut hs = [httparse::EMPTY_HEADER; 128];
            let mut r = httparse::Response::new(&mut hs);
            match r.parse(&self.buf) {
                Ok(httparse::Status::Complete(n)) => {
                    let head = Head {
                        status: r.code.unwrap_or(0),
                        headers: r
                            .headers
                            .iter()
                            .map(|h| {
                                (
                                    h.name.to_ascii_lowercase(),
                                    String::from_utf8_lossy(h.value).into_owned(),
                                )
                            })
                            .collect(),
                    };
                    self.buf.drain(..n);
                    return Ok(head);
                }
                Ok(httparse::Status::Partial) => {}
                Err(_) => return Err(End::Failed(io::ErrorKind::InvalidData)),
            }
            self.fill(until).await?;
        }
    }

    /// Reads the body of a response with `head` (`head_request`: it answers a HEAD) within
    /// `limit`, stopping once `want` bytes are in ([`End::More`] then, unless it is complete).
    pub async fn read_body(
        &mut self,
        head: &Head,
        head_request: bool,
        want: usize,
        limit: Duration,
    ) -> (Vec<u8>, End) {
        let until = tokio::time::Instant::now() + limit;
        let s = head.status;
        if head_request || (100..200).contains(&s) || s == 204 || s == 304 {
            return (Vec::new(), End::Complete);
        }
        let chunked = head
            .header("transfer-encoding")
            .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
        if chunked {
            let mut d = Dechunker::default();
            loop {
                match d.feed(&mut self.buf) {
                    Ok(true) => return (d.body, End::Complete),
                    Ok(false) if d.body.len() >= want => return (d.body, End::More),
                    Ok(false) => {}
                    Err(_) => return (d.body, End::Failed(io::ErrorKind::InvalidData)),
                }
                if let Err(e) = self.fill(until).await {
                    return (d.body, e);
                }
            }
        }
        if let Some(n) = head
            .header("content-length")
            .and_then(|v| v.trim().parse::<usize>().ok())
        {
            loop {
                if self.buf.len() >= n {
                    return (self.buf.drain(..n).collect(), End::Complete);
                }
                if self.buf.len() >= want {
                    return (std::mem::take(&mut self.buf), End::More);
                }
                if let Err(e) = self.fill(until).await {
                    return (std::mem::take(&mut self.buf), e);
                }
            }
        }
        // Delimited by the close.
        loop {
            if self.buf.len() >= want {
                return (std::mem::take(&mut self.buf), End::More);
            }
            if let Err(e) = self.fill(until).await {
                return (std::mem::take(&mut self.buf), e);
            }
        }
    }

    /// Reads one whole response (a 1xx one too) within `limit`; `Err` when no head came.
    pub async fn read_response(&mut self, limit: Duration) -> Result<Response, End> {
        self.read_response_to(false, limit).await
    }

    /// The same for a HEAD request's response when `head_request`.
    pub async fn read_response_to(
        &mut self,
        head_request: bool,
        limit: Duration,
    ) -> Result<Response, End> {
        let t0 = tokio::time::Instant::now();
        let head = self.read_head(limit).await?;
        let left = limit.saturating_sub(t0.elapsed());
        let (body, end) = self.read_body(&head, head_request, usize::MAX, left).await;
        Ok(Response {
            status: head.status,
            headers: head.headers,
            body,
            end,
        })
    }

    /// Reads and drops whatever comes until the connection ends or `limit` passes
    /// ([`End::TimedOut`]: still open).
    pub async fn wait_closed(&mut self, limit: Duration) -> End {
        let until = tokio::time::Instant::now() + limit;
        loop {
            self.buf.clear();
            if let Err(e) = self.fill(until).await {
                return e;
            }
        }
    }

    /// Reads and drops up to `max` raw bytes (framing not parsed) within `limit`; how many
    /// and how it ended ([`End::More`]: `max` reached).
    pub async fn discard(&mut self, max: usize, limit: Duration) -> (usize, End) {
        let until = tokio::time::Instant::now() + limit;
        let mut got = std::mem::take(&mut self.buf).len();
        while got < max {
            match self.fill(until).await {
                Ok(n) => {
                    got += n;
                    self.buf.clear();
                }
                Err(e) => return (got, e),
            }
        }
        (got, End::More)
    }
}

/// The head of a GET for `url` through a proxy.
pub fn get_head(url: &str) -> String {
    format!("GET {url} HTTP/1.1\r\nHost: {}\r\n\r\n", host_of(url))
}

fn host_of(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    rest.split('/').next().unwrap_or(rest)
}

/// What a (hostile) client got.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The response, when one came.
    pub response: Option<Response>,
    /// How the connection ended after it (or instead of it); [`End::TimedOut`]: still open
    /// at the deadline.
    pub end: End,
    /// From connecting to the end of the response (or of the wait for one).
    pub elapsed: Duration,
}

impl Outcome {
    /// The response's status.
    pub fn status(&self) -> Option<u16> {
        self.response.as_ref().map(|r| r.status)
    }
    /// The response's body as text ("" without one).
    pub fn text(&self) -> String {
        self.response.as_ref().map(|r| r.text()).unwrap_or_default()
    }
    fn failed(t0: Instant, end: End) -> Outcome {
        Outcome {
            response: None,
            end,
            elapsed: t0.elapsed(),
        }
    }
}

/// Writes `data` `piece` bytes every `interval` (the first piece at once) until it is all
/// sent, a write fails, or `until`; returns the writer (dropping it would send FIN).
pub fn trickle(
    mut wr: OwnedWriteHalf,
    data: Vec<u8>,
    piece: usize,
    interval: Duration,
    until: tokio::time::Instant,
) -> JoinHandle<OwnedWriteHalf> {
    tokio::spawn(async move {
        for (i, part) in data.chunks(piece.max(1)).enumerate() {
            if i > 0 {
                if tokio::time::Instant::now() + interval > until {
                    break;
                }
                tokio::time::sleep(interval).await;
            }
            if wr.write_all(part).await.is_err() {
                break;
            }
        }
        wr
    })
}

/// Writes `len` zero bytes as fast as the peer takes them (until done, a write fails or
/// `until`); returns the writer.
pub fn blast(
    mut wr: OwnedWriteHalf,
    len: u64,
    until: tokio::time::Instant,
) -> JoinHandle<OwnedWriteHalf> {
    tokio::spawn(async move {
        let zeros = vec![0u8; 64 * 1024];
        let mut left = len;
        while left > 0 && tokio::time::Instant::now() < until {
            let n = left.min(zeros.len() as u64) as usize;
            match tokio::time::timeout_at(until, wr.write_all(&zeros[..n])).await {
                Ok(Ok(())) => left -= n as u64,
                _ => break,
            }
        }
        wr
    })
}

/// Sends `head`, then `body` through `writer` (a task started with the write half),
/// reading the response meanwhile; then waits (a little) to see whether the connection is
/// closed. The common core of the misbehaving clients.
async fn exchange_with<W>(mut c: RawClient, t0: Instant, limit: Duration, writer: W) -> Outcome
where
    W: FnOnce(OwnedWriteHalf, tokio::time::Instant) -> JoinHandle<OwnedWriteHalf>,
{
    let until = tokio::time::Instant::now() + limit;
    let w = writer(c.take_writer(), until);
    let r = c.read_response(limit).await;
    let elapsed = t0.elapsed();
    let out = match r {
        Ok(resp) => {
            // After a response that ends with the connection there is nothing to wait for.
            let end = if resp.end.closed() {
                resp.end
            } else {
                c.wait_closed(Duration::from_millis(1500).min(limit)).await
            };
            Outcome {
                response: Some(resp),
                end,
                elapsed,
            }
        }
        Err(end) => Outcome {
            response: None,
            end,
            elapsed,
        },
    };
    w.abort();
    out
}

/// A slowloris head: `GET url` and then one more header byte every `interval`, until the
/// front end answers or closes, or `limit`.
pub async fn slowloris_head(
    proxy: SocketAddr,
    url: &str,
    interval: Duration,
    limit: Duration,
) -> Outcome {
    let t0 = Instant::now();
    let mut c = match RawClient::connect(proxy).await {
        Ok(c) => c,
        Err(e) => return Outcome::failed(t0, End::Failed(e.kind())),
    };
    let start = format!("GET {url} HTTP/1.1\r\nHost: {}\r\nX-Slow: ", host_of(url));
    if let Err(e) = c.send(start.as_bytes()).await {
        return Outcome::failed(t0, End::Failed(e.kind()));
    }
    // Never a whole head: 64 KiB of header bytes at this pace would take hours.
    let rest = vec![b'a'; 64 * 1024];
    exchange_with(c, t0, limit, |wr, until| {
        trickle(wr, rest, 1, interval, until)
    })
    .await
}

/// An upload whose body comes slowly: `Content-Length: declared`, then `piece` bytes every
/// `interval`.
pub async fn slow_body(
    proxy: SocketAddr,
    url: &str,
    declared: usize,
    piece: usize,
    interval: Duration,
    limit: Duration,
) -> Outcome {
    let t0 = Instant::now();
    let mut c = match RawClient::connect(proxy).await {
        Ok(c) => c,
        Err(e) => return Outcome::failed(t0, End::Failed(e.kind())),
    };
    let head = format!(
        "POST {url} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/octet-stream\r\nContent-Length: {declared}\r\n\r\n",
        host_of(url)
    );
    if let Err(e) = c.send(head.as_bytes()).await {
        return Outcome::failed(t0, End::Failed(e.kind()));
    }
    exchange_with(c, t0, limit, |wr, until| {
        trickle(wr, vec![b'x'; declared], piece, interval, until)
    })
    .await
}

/// An upload on `c` of `declared` bytes (`Content-Length`) sent as fast as the front end
/// takes them, the response read meanwhile.
pub async fn upload_on(c: RawClient, url: &str, declared: u64, limit: Duration) -> Outcome {
    let t0 = Instant::now();
    let mut c = c;
    let head = format!(
        "POST {url} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/octet-stream\r\nContent-Length: {declared}\r\n\r\n",
        host_of(url)
    );
    if let Err(e) = c.send(head.as_bytes()).await {
        return Outcome::failed(t0, End::Failed(e.kind()));
    }
    exchange_with(c, t0, limit, |wr, until| blast(wr, declared, until)).await
}

/// [`upload_on`] a new connection.
pub async fn upload(proxy: SocketAddr, url: &str, declared: u64, limit: Duration) -> Outcome {
    match RawClient::connect(proxy).await {
        Ok(c) => upload_on(c, url, declared, limit).await,
        Err(e) => Outcome::failed(Instant::now(), End::Failed(e.kind())),
    }
}

/// A chunked upload of `total` bytes in 64 KiB chunks, as fast as the front end takes it.
pub async fn chunked_upload(
    proxy: SocketAddr,
    url: &str,
    total: usize,
    limit: Duration,
) -> Outcome {
    let t0 = Instant::now();
    let mut c = match RawClient::connect(proxy).await {
        Ok(c) => c,
        Err(e) => return Outcome::failed(t0, End::Failed(e.kind())),
    };
    let head = format!(
        "POST {url} HTTP/1.1\r\nHost: {}\r\nTransfer-Encoding: chunked\r\n\r\n",
        host_of(url)
    );
    if let Err(e) = c.send(head.as_bytes()).await {
        return Outcome::failed(t0, End::Failed(e.kind()));
    }
    exchange_with(c, t0, limit, move |mut wr, until| {
        tokio::spawn(async move {
            let mut chunk = format!("{:x}\r\n", 64 * 1024).into_bytes();
            chunk.extend_from_slice(&[b'z'; 64 * 1024]);
            chunk.extend_from_slice(b"\r\n");
            let mut sent = 0;
            while sent < total && tokio::time::Instant::now() < until {
                if !matches!(
                    tokio::time::timeout_at(until, wr.write_all(&chunk)).await,
                    Ok(Ok(()))
                ) {
                    return wr;
                }
                sent += 64 * 1024;
            }
            let _ = wr.write_all(b"0\r\n\r\n").await;
            wr
        })
    })
    .await
}

/// An upload that the client resets: `Content-Length: declared`, `sent` bytes of it, then a
/// reset (SO_LINGER 0). Returns once reset.
pub async fn reset_mid_upload(proxy: SocketAddr, url: &str, declared: u64, sent: usize) {
    let Ok(mut c) = RawClient::connect(proxy).await else {
        return;
    };
    let head = format!(
        "POST {url} HTTP/1.1\r\nHost: {}\r\nContent-Length: {declared}\r\n\r\n",
        host_of(url)
    );
    let body = vec![b'r'; sent];
    let _ = tokio::time::timeout(DEADLINE, async {
        c.send(head.as_bytes()).await?;
        c.send(&body).await
    })
    .await;
    c.reset();
}

/// Sends `bytes` (garbage, or any raw request) and reads what comes back.
pub async fn raw_request(proxy: SocketAddr, bytes: &[u8], limit: Duration) -> Outcome {
    let t0 = Instant::now();
    let c = match RawClient::connect(proxy).await {
        Ok(c) => c,
        Err(e) => return Outcome::failed(t0, End::Failed(e.kind())),
    };
    let data = bytes.to_vec();
    exchange_with(c, t0, limit, move |mut wr, _| {
        tokio::spawn(async move {
            let _ = wr.write_all(&data).await;
            wr
        })
    })
    .await
}

/// `n` bytes of noise (a fixed pseudo-random sequence from `seed`; no CRLF CRLF, so no
/// accidental head end).
pub fn garbage(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            match (x >> 24) as u8 {
                b'\r' | b'\n' => b'#',
                b => b,
            }
        })
        .collect()
}

/// A connection that made one well-behaved request to `good` and now sits idle (keep-alive).
pub async fn idle_after_request(proxy: SocketAddr, good: SocketAddr) -> Result<RawClient, String> {
    let mut c = RawClient::connect(proxy)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let path = "/idle";
    c.send(get_head(&format!("http://{good}{path}")).as_bytes())
        .await
        .map_err(|e| format!("send: {e}"))?;
    let r = c
        .read_response(DEADLINE)
        .await
        .map_err(|e| format!("no response: {e:?}"))?;
    if r.status != 200 {
        return Err(format!("status {}: {}", r.status, r.text()));
    }
    Ok(c)
}

/// A connection that sent part of a request head and nothing more since.
pub async fn partial_head(proxy: SocketAddr, url: &str) -> io::Result<RawClient> {
    let mut c = RawClient::connect(proxy).await?;
    c.send(
        format!(
            "GET {url} HTTP/1.1\r\nHost: {}\r\nX-Partial: ",
            host_of(url)
        )
        .as_bytes(),
    )
    .await?;
    Ok(c)
}

static STILL_SERVING: AtomicU64 = AtomicU64::new(0);

/// One well-behaved GET to `good` (a [`good_origin`]) through `proxy` on a new connection,
/// under [`DEADLINE`]: its latency, or what went wrong.
pub async fn well_behaved_get(proxy: SocketAddr, good: SocketAddr) -> Result<Duration, String> {
    let n = STILL_SERVING.fetch_add(1, Ordering::Relaxed);
    let path = format!("/still-serving/{n}");
    let t0 = Instant::now();
    let r = tokio::time::timeout(DEADLINE, async {
        let mut c = RawClient::connect(proxy)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        c.send(get_head(&format!("http://{good}{path}")).as_bytes())
            .await
            .map_err(|e| format!("send: {e}"))?;
        c.read_response(DEADLINE)
            .await
            .map_err(|e| format!("no response: {e:?}"))
    })
    .await
    .map_err(|_| format!("no answer within {DEADLINE:?}"))??;
    let elapsed = t0.elapsed();
    if r.status != 200 || r.end != End::Complete || r.body != good_body(&path).as_bytes() {
        return Err(format!(
            "status {} ({:?}): {:?}",
            r.status,
            r.end,
            r.text().chars().take(200).collect::<String>()
        ));
    }
    Ok(elapsed)
}

/// The proxy at `proxy` still serves a well-behaved client (a GET to `good`, a
/// [`good_origin`], on a new connection) within [`DEADLINE`]; fails the test otherwise.
pub async fn assert_still_serves(proxy: SocketAddr, good: SocketAddr) -> Duration {
    match well_behaved_get(proxy, good).await {
        Ok(d) => d,
        Err(e) => panic!("the proxy no longer serves a well-behaved client: {e}"),
    }
}

// ---------------------------------------------------------------------------------------
// Observing the front end
// ---------------------------------------------------------------------------------------

/// `/metrics` from an admin address.
pub async fn fetch_metrics(admin: SocketAddr) -> Result<String, String> {
    let mut c = RawClient::connect(admin)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    c.send(b"GET /metrics HTTP/1.1\r\nHost: admin\r\n\r\n")
        .await
        .map_err(|e| format!("send: {e}"))?;
    let r = c
        .read_response(DEADLINE)
        .await
        .map_err(|e| format!("no response: {e:?}"))?;
    if r.status != 200 {
        return Err(format!("status {}", r.status));
    }
    Ok(r.text())
}

/// The value of an unlabelled metric in a `/metrics` text.
pub fn metric_value(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// A `/proc/<pid>/status` field in kB (`VmRSS`, `VmHWM`); `pid` 0: this process.
pub fn proc_status_kb(pid: u32, field: &str) -> Option<u64> {
    let path = if pid == 0 {
        "/proc/self/status".to_string()
    } else {
        format!("/proc/{pid}/status")
    };
    let text = std::fs::read_to_string(path).ok()?;
    text.lines().find_map(|l| {
        l.strip_prefix(field)?
            .strip_prefix(':')?
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()
    })
}
