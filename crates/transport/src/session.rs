//! One QUIC connection between the proxies as the protocol uses it (docs/protocol.md): each
//! side's control stream (its `Hello`, then its header-table insertions and acknowledgements),
//! the two header tables, and frames read from and written to request streams.

use std::sync::{Arc, Mutex};

use webpep_proto::frame::StreamKind;
use webpep_proto::headers::TABLE_CAPACITY;
use webpep_proto::version::SUPPORTED_VERSIONS;
use webpep_proto::{negotiate, Decoder, Encoder, Frame, FrameDecoder, HeaderField, Role};

use webpep_proto::code;

use crate::coding::{BodyDecoder, BodyEncoder, CodingError};

#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("protocol: {0}")]
    Proto(#[from] webpep_proto::Error),
    #[error("connection: {0}")]
    Connection(#[from] quinn::ConnectionError),
    #[error("stream write: {0}")]
    Write(#[from] quinn::WriteError),
    #[error("stream read: {0}")]
    Read(#[from] quinn::ReadError),
    #[error("stream closed: {0}")]
    Closed(#[from] quinn::ClosedStream),
    #[error("{0}")]
    Unexpected(String),
}

/// The control stream's send priority, above every request stream (quinn's default is 0) and
/// every tunnel's opening.
pub const CONTROL_PRIORITY: i32 = i32::MAX;

/// The send priority of a background exchange's stream (push, prefetch), each way: below every
/// foreground stream (quinn's default 0), whose data always goes first. Streams of one
/// priority share the link in turn (quinn's send fairness), so a small foreground response is
/// never queued behind a bulk one.
pub const BACKGROUND_PRIORITY: i32 = -1;

/// The send priorities of tunnels' openings lie in `1..=OPENING_TOP`, above every other
/// foreground stream (quinn's default 0), the earliest opened highest ([`opening_priority`]).
pub const OPENING_TOP: i32 = 1 << 24;

/// How many flights (runs of one end's bytes) of a tunnel are its opening: a TLS 1.3
/// handshake's ClientHello, the server's flight, and the client's Finished with its first
/// request. The server's answer to that is the tunnel's ordinary traffic.
pub const OPENING_FLIGHTS: u32 = 3;

/// At most this many bytes of a tunnel, each way, count as its opening, whatever its flights.
pub const OPENING_BYTES: u64 = 16 * 1024;

/// The send priority of the opening of the tunnel on `stream`: earlier streams first.
///
/// Today's browser gives a TLS handshake 30 s once its tunnel is up, and over gprs a page's
/// thirty tunnels open together: their ClientHellos (about 2 KB each, Chromium's with its
/// post-quantum key share) take 40 s of a 12 kbit/s uplink between them. Sharing the link in
/// turn, every handshake would end near the last and all would time out; first come, first
/// served, the first twenty or so are done within their 30 s (earliest deadline first: every
/// tunnel's timer starts as it opens).
pub fn opening_priority(stream: quinn::StreamId) -> i32 {
    let index = stream.index().min(OPENING_TOP as u64 - 1) as i32;
    OPENING_TOP - index
}

/// The priority of a tunnel's stream whose next bytes are of `flight` (numbered from 1) and
/// which has sent `sent` bytes so far.
pub fn tunnel_priority(stream: quinn::StreamId, flight: u32, sent: u64) -> i32 {
    if flight <= OPENING_FLIGHTS && sent < OPENING_BYTES {
        opening_priority(stream)
    } else {
        0
    }
}

/// One end of a tunnel: the browser's (client) or the origin's (server).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TunnelEnd {
    Client,
    Server,
}

/// A tunnel's bytes so far as flights, as one proxy sees them: both of its pumps (the bytes it
/// sends and the bytes it receives) tell it who spoke.
#[derive(Debug, Default)]
pub struct TunnelFlights {
    /// Who spoke last, and the number of that flight.
    last: Mutex<Option<(TunnelEnd, u32)>>,
}

impl TunnelFlights {
    pub fn new() -> Arc<TunnelFlights> {
        Arc::new(TunnelFlights::default())
    }

    /// Whether `end` has sent anything yet (flights alternate: a second flight means both
    /// ends spoke).
    pub fn heard(&self, end: TunnelEnd) -> bool {
        match *self.last.lock().unwrap_or_else(|e| e.into_inner()) {
            Some((who, n)) => who == end || n >= 2,
            None => false,
        }
    }

    /// `end` sent bytes: the number of the flight they belong to (1 for the first).
    pub fn spoke(&self, end: TunnelEnd) -> u32 {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let flight = match *last {
            Some((who, n)) if who == end => n,
            Some((_, n)) => n.saturating_add(1),
            None => 1,
        };
        *last = Some((end, flight));
        flight
    }
}

/// The protocol state of one connection, shared by its request streams.
pub struct Session {
    conn: quinn::Connection,
    control: tokio::sync::Mutex<quinn::SendStream>,
    /// Encodes this side's header blocks (its insertions go on our control stream).
    encoder: Mutex<Encoder>,
    /// Decodes the peer's header blocks (fed by the peer's control stream).
    decoder: Mutex<Decoder>,
    /// Whether the peer's `Hello` has come (and its version is one we speak).
    peer_hello: tokio::sync::watch::Sender<bool>,
    /// Every stream's bytes go to quinn through it, highest priority first.
    order: crate::write_order::WriteOrder,
}

impl Session {
    /// Opens this side's control stream with its `Hello` and starts reading the peer's. A
    /// peer whose versions share none with ours gets the connection closed with
    /// `VERSION_MISMATCH` and a reason naming both.
    pub async fn open(conn: quinn::Connection, role: Role) -> Result<Arc<Session>, SessionError> {
        Session::open_with(conn, role, true).await
    }

    /// [`Session::open`]; `header_table` false: this side's header blocks use the static
    /// table and literals only, nothing inserted (the header-compression ablation; the peer
    /// decodes such blocks as any other).
    pub async fn open_with(
        conn: quinn::Connection,
        role: Role,
        header_table: bool,
    ) -> Result<Arc<Session>, SessionError> {
        let mut control = conn.open_uni().await?;
        // Table insertions and acknowledgements go before any body bytes: a request whose
        // header block is sent must not wait for them behind a bulk response.
        let _ = control.set_priority(CONTROL_PRIORITY);
        let hello = Frame::Hello {
            versions: SUPPORTED_VERSIONS.to_vec(),
            role,
            name: format!("webpep {}", env!("CARGO_PKG_VERSION")),
        };
        control.write_all(&hello.to_bytes()).await?;
        let session = Arc::new(Session {
            conn: conn.clone(),
            control: tokio::sync::Mutex::new(control),
            encoder: Mutex::new(Encoder::new(if header_table { TABLE_CAPACITY } else { 0 })),
            decoder: Mutex::new(Decoder::new(TABLE_CAPACITY)),
            peer_hello: tokio::sync::watch::channel(false).0,
            order: Default::default(),
        });
        let reader = session.clone();
        tokio::spawn(async move {
            if let Err(e) = reader.read_peer_control().await {
                tracing::debug!("control stream: {e}");
            }
        });
        crate::endpoint::follow_send_budget(&conn);
        Ok(session)
    }

    pub fn connection(&self) -> &quinn::Connection {
        &self.conn
    }

    /// Waits for the peer's `Hello` (the edge answers a request only once it knows the
    /// client speaks its version); an error when the connection closed first.
    pub async fn peer_hello(&self) -> Result<(), SessionError> {
        let mut rx = self.peer_hello.subscribe();
        tokio::select! {
            r = rx.wait_for(|h| *h) => r.map(|_| ()).map_err(|_| SessionError::Unexpected("the session ended".into())),
            e = self.conn.closed() => Err(e.into()),
        }
    }

    async fn read_peer_control(&self) -> Result<(), SessionError> {
        let recv = self.conn.accept_uni().await?;
        let mut frames = FrameReader::new(recv);
        match frames.next().await? {
            Some(Frame::Hello { versions, .. }) => {
                if let Err(mismatch) = negotiate(SUPPORTED_VERSIONS, &versions) {
                    let reason = mismatch.to_string();
                    tracing::warn!("{reason}");
                    // The ERROR on our control stream first, then the close with the same
                    // code and reason (docs/protocol.md).
                    let _ = self
                        .control
                        .lock()
                        .await
                        .write_all(&mismatch.to_frame().to_bytes())
                        .await;
                    self.conn
                        .close(code::VERSION_MISMATCH.into(), reason.as_bytes());
                    return Err(SessionError::Unexpected(reason));
                }
                self.peer_hello.send_replace(true);
            }
            other => {
                self.conn.close(
                    code::PROTOCOL.into(),
                    b"the control stream must start with Hello",
                );
                return Err(SessionError::Unexpected(format!(
                    "control stream began with {other:?}"
                )));
            }
        }
        while let Some(frame) = frames.next().await? {
            if !frame.allowed_on(StreamKind::Control) {
                self.conn.close(
                    code::PROTOCOL.into(),
                    b"a request frame on the control stream",
                );
                return Err(SessionError::Unexpected(format!("{frame:?} on control")));
            }
            match frame {
                Frame::Insert { name, value } => {
                    let r = lock(&self.decoder).on_insert(&name, &value);
                    if let Err(e) = r {
                        self.conn
                            .close(code::PROTOCOL.into(), e.to_string().as_bytes());
                        return Err(e.into());
                    }
                }
                Frame::HeadAck { table_ack, blocks } => {
                    lock(&self.encoder).on_head_ack(table_ack, &blocks);
                }
                Frame::Error { code, reason } => {
                    tracing::warn!(code, "peer reports: {reason}");
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Encodes a header list for a head frame; its table insertions go out on the control
    /// stream first (the block never depends on them: it refers only to entries the peer has
    /// acknowledged).
    pub async fn encode_headers(&self, fields: &[HeaderField]) -> Result<Vec<u8>, SessionError> {
        let (block, inserts) = lock(&self.encoder).encode(fields);
        if !inserts.is_empty() {
            let mut bytes = Vec::new();
            for f in &inserts {
                f.encode(&mut bytes);
            }
            let mut control = self.control.lock().await;
            self.order.write_all(&mut *control, &bytes).await?;
        }
        Ok(block)
    }

    /// Decodes a peer's header block, acknowledging it on the control stream when it
    /// referred to the table (so the peer may evict those entries).
    pub async fn decode_headers(&self, block: &[u8]) -> Result<Vec<HeaderField>, SessionError> {
        let (fields, ack) = {
            let mut d = lock(&self.decoder);
            let fields = d.decode(block);
            (fields, d.take_ack())
        };
        if let Some(ack) = ack {
            let mut control = self.control.lock().await;
            self.order.write_all(&mut *control, &ack.to_bytes()).await?;
        }
        Ok(fields?)
    }

    /// Writes `bytes` to `send` (a stream of this connection) after the connection's writers
    /// of a higher priority ([`crate::write_order`]).
    pub async fn write_all(
        &self,
        send: &mut quinn::SendStream,
        bytes: &[u8],
    ) -> Result<(), quinn::WriteError> {
        self.order.write_all(send, bytes).await
    }

    /// The peer's insertions processed so far (what head frames carry as `table_ack`).
    pub fn table_ack(&self) -> u64 {
        lock(&self.decoder).inserted()
    }

    /// The peer has processed `count` of our insertions (a head frame's `table_ack`).
    pub fn on_table_ack(&self, count: u64) {
        lock(&self.encoder).on_ack(count);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Frames from one stream.
pub struct FrameReader {
    recv: quinn::RecvStream,
    decoder: FrameDecoder,
    buf: Vec<u8>,
}

impl FrameReader {
    pub fn new(recv: quinn::RecvStream) -> Self {
        FrameReader {
            recv,
            decoder: FrameDecoder::new(),
            buf: vec![0u8; 16 * 1024],
        }
    }

    /// The next frame; `None` at the stream's clean end (an end inside a frame is an error).
    pub async fn next(&mut self) -> Result<Option<Frame>, SessionError> {
        loop {
            if let Some(f) = self.decoder.next_frame()? {
                return Ok(Some(f));
            }
            match self.recv.read(&mut self.buf).await? {
                Some(n) => self.decoder.push(&self.buf[..n]),
                None => {
                    self.decoder.finish()?;
                    return Ok(None);
                }
            }
        }
    }

    pub fn stream(&mut self) -> &mut quinn::RecvStream {
        &mut self.recv
    }
}

/// Writes one frame on a stream of `session`'s connection.
pub async fn write_frame(
    session: &Session,
    send: &mut quinn::SendStream,
    frame: &Frame,
) -> Result<(), SessionError> {
    session.write_all(send, &frame.to_bytes()).await?;
    Ok(())
}

/// Header fields of an `http::HeaderMap` as the tables take them (names are lower case).
pub fn fields_of(headers: &http::HeaderMap) -> Vec<HeaderField> {
    headers
        .iter()
        .map(|(n, v)| (n.as_str().as_bytes().to_vec(), v.as_bytes().to_vec()))
        .collect()
}

/// Header fields back into an `http::HeaderMap`; a field `http` cannot hold is an error.
pub fn header_map(fields: Vec<HeaderField>) -> Result<http::HeaderMap, SessionError> {
    let mut map = http::HeaderMap::with_capacity(fields.len());
    for (n, v) in fields {
        let name = http::HeaderName::from_bytes(&n)
            .map_err(|_| SessionError::Unexpected("a header name http cannot hold".into()))?;
        let value = http::HeaderValue::from_bytes(&v)
            .map_err(|_| SessionError::Unexpected("a header value http cannot hold".into()))?;
        map.append(name, value);
    }
    Ok(map)
}

/// A request as the edge reads it from a request stream.
#[derive(Debug)]
pub struct IncomingRequest {
    pub method: String,
    pub target: String,
    pub headers: http::HeaderMap,
    pub body: Vec<u8>,
    pub background: bool,
}

/// The client's side of one exchange: sends the request on a new stream and returns the
/// response head and a reader of its body.
pub async fn send_request(
    session: &Session,
    method: &str,
    target: &str,
    headers: &http::HeaderMap,
    body: &[u8],
    background: bool,
) -> Result<(u16, http::HeaderMap, webpep_proto::BodyCoding, ResponseBody), SessionError> {
    let (mut send, recv) = session.conn.open_bi().await?;
    if background {
        let _ = send.set_priority(BACKGROUND_PRIORITY);
    }
    let block = session.encode_headers(&fields_of(headers)).await?;
    let mut bytes = Frame::Request {
        method: method.to_string(),
        target: target.to_string(),
        headers: block,
        background,
        table_ack: session.table_ack(),
    }
    .to_bytes();
    if !body.is_empty() {
        Frame::Data(body.to_vec()).encode(&mut bytes);
    }
    Frame::End.encode(&mut bytes);
    match session.write_all(&mut send, &bytes).await {
        Ok(()) => send.finish()?,
        // The edge refused the body before it had all of it (a limit of its own): its
        // answer on the stream says why.
        Err(quinn::WriteError::Stopped(_)) => {}
        Err(e) => return Err(e.into()),
    }
    let mut frames = FrameReader::new(recv);
    loop {
        match frames.next().await? {
            Some(Frame::Response {
                status,
                headers,
                body_coding,
                table_ack,
            }) => {
                session.on_table_ack(table_ack);
                let headers = header_map(session.decode_headers(&headers).await?)?;
                if (100..200).contains(&status) {
                    continue;
                }
                let body = ResponseBody::coded(frames, body_coding, &headers)?;
                return Ok((status, headers, body_coding, body));
            }
            Some(Frame::Error { code, reason }) => {
                return Err(SessionError::Unexpected(format!(
                    "the edge failed the request ({code}): {reason}"
                )))
            }
            Some(other) => {
                return Err(SessionError::Unexpected(format!(
                    "expected a response head, got {other:?}"
                )))
            }
            None => {
                return Err(SessionError::Unexpected(
                    "the stream ended before a response".into(),
                ))
            }
        }
    }
}

/// A response body arriving in `Data` frames, decoded from the coding between the proxies.
pub struct ResponseBody {
    frames: FrameReader,
    /// Set when the body comes zstd-coded.
    decoder: Option<BodyDecoder>,
}

/// The most decoded bytes one [`ResponseBody::chunk`] gives (a coded body can expand a
/// thousandfold: it is handed on in pieces).
pub const DECODED_PIECE: usize = 64 * 1024;

impl ResponseBody {
    /// The body of a response whose head announced `coding`; a zstd body must not decode
    /// past the head's Content-Length.
    fn coded(
        frames: FrameReader,
        coding: webpep_proto::BodyCoding,
        headers: &http::HeaderMap,
    ) -> Result<Self, SessionError> {
        let decoder = match coding {
            webpep_proto::BodyCoding::Identity => None,
            webpep_proto::BodyCoding::Zstd => {
                let declared = webpep_http1::fields::content_length(headers);
                Some(BodyDecoder::new(declared).map_err(|e| {
                    SessionError::Unexpected(format!("cannot make a zstd decoder: {e}"))
                })?)
            }
        };
        Ok(ResponseBody { frames, decoder })
    }

    /// The next piece of the body; `None` once `End` came. A stream that ends without `End`
    /// is a truncated response: an error, as a coded body that does not decode is.
    pub async fn chunk(&mut self) -> Result<Option<Vec<u8>>, SessionError> {
        let coding_error = |e: CodingError| SessionError::Unexpected(e.to_string());
        loop {
            if let Some(dec) = &mut self.decoder {
                let out = dec.output(DECODED_PIECE).map_err(coding_error)?;
                if !out.is_empty() {
                    return Ok(Some(out));
                }
            }
            let d = match self.next_piece().await? {
                Some(d) => d,
                None => {
                    if let Some(dec) = &mut self.decoder {
                        dec.finish().map_err(coding_error)?;
                    }
                    return Ok(None);
                }
            };
            match &mut self.decoder {
                Some(dec) => dec.push(&d),
                None => return Ok(Some(d)),
            }
        }
    }

    /// The next `Data` payload as it came; `None` at `End`.
    async fn next_piece(&mut self) -> Result<Option<Vec<u8>>, SessionError> {
        match self.frames.next().await? {
            Some(Frame::Data(d)) => Ok(Some(d)),
            Some(Frame::End) => Ok(None),
            Some(Frame::Error { code, reason }) => Err(SessionError::Unexpected(format!(
                "the edge broke off the response ({code}): {reason}"
            ))),
            Some(other) => Err(SessionError::Unexpected(format!(
                "unexpected {other:?} in a response body"
            ))),
            None => Err(SessionError::Unexpected(
                "the response ended without End (truncated)".into(),
            )),
        }
    }
}

/// A request head as the edge reads it.
#[derive(Debug)]
pub struct RequestHead {
    pub method: String,
    pub target: String,
    pub headers: http::HeaderMap,
    pub background: bool,
}

/// The edge's side: the head of a request on a stream the client opened.
pub async fn read_request_head(
    session: &Session,
    frames: &mut FrameReader,
) -> Result<RequestHead, SessionError> {
    let (method, target, block, background) = match frames.next().await? {
        Some(Frame::Request {
            method,
            target,
            headers,
            background,
            table_ack,
        }) => {
            session.on_table_ack(table_ack);
            (method, target, headers, background)
        }
        other => {
            return Err(SessionError::Unexpected(format!(
                "a request stream must start with Request, not {other:?}"
            )))
        }
    };
    let headers = header_map(session.decode_headers(&block).await?)?;
    Ok(RequestHead {
        method,
        target,
        headers,
        background,
    })
}

/// The edge's side: the next part of a request body; `None` at its `End`. A caller that
/// holds bodies within a budget checks each part as it comes.
pub async fn read_request_body_part(
    frames: &mut FrameReader,
) -> Result<Option<Vec<u8>>, SessionError> {
    match frames.next().await? {
        Some(Frame::Data(d)) => Ok(Some(d)),
        Some(Frame::End) => Ok(None),
        other => Err(SessionError::Unexpected(format!(
            "expected the request body, got {other:?}"
        ))),
    }
}

/// The edge's side: a request body, whole, at most `max_body` bytes, up to its `End`.
pub async fn read_request_body(
    frames: &mut FrameReader,
    max_body: usize,
) -> Result<Vec<u8>, SessionError> {
    let mut body = Vec::new();
    while let Some(d) = read_request_body_part(frames).await? {
        if body.len() + d.len() > max_body {
            return Err(SessionError::Unexpected(format!(
                "request body over {max_body} bytes"
            )));
        }
        body.extend_from_slice(&d);
    }
    Ok(body)
}

/// The edge's side: reads a request (head and whole body, at most `max_body` bytes) from a
/// stream the client opened.
pub async fn read_request(
    session: &Session,
    recv: quinn::RecvStream,
    max_body: usize,
) -> Result<IncomingRequest, SessionError> {
    let mut frames = FrameReader::new(recv);
    let head = read_request_head(session, &mut frames).await?;
    let body = read_request_body(&mut frames, max_body).await?;
    Ok(IncomingRequest {
        method: head.method,
        target: head.target,
        headers: head.headers,
        body,
        background: head.background,
    })
}

/// The client's side of a CONNECT: sends its head for `authority` on a new stream and
/// returns the stream's halves without waiting for the edge: the tunnel's `Data` frames may follow at once (the edge
/// reads them once it has connected, and drops them if it refuses). [`tunnel_answer`] reads
/// the edge's answer from the receiving half.
pub async fn start_tunnel(
    session: &Session,
    authority: &str,
    headers: &http::HeaderMap,
) -> Result<(quinn::SendStream, FrameReader), SessionError> {
    let (mut send, recv) = session.conn.open_bi().await?;
    let block = session.encode_headers(&fields_of(headers)).await?;
    let head = Frame::Request {
        method: "CONNECT".into(),
        target: authority.to_string(),
        headers: block,
        background: false,
        table_ack: session.table_ack(),
    };
    write_frame(session, &mut send, &head).await?;
    Ok((send, FrameReader::new(recv)))
}

/// The edge's answer to a CONNECT sent with [`start_tunnel`]: its status and headers, and
/// the body that carries the tunnel's bytes from the origin (on a 2xx: `Data` frames each
/// way, `End` when a side has no more) or the edge's reason.
pub async fn tunnel_answer(
    session: &Session,
    mut frames: FrameReader,
) -> Result<(u16, http::HeaderMap, ResponseBody), SessionError> {
    match frames.next().await? {
        Some(Frame::Response {
            status,
            headers,
            table_ack,
            ..
        }) => {
            session.on_table_ack(table_ack);
            let headers = header_map(session.decode_headers(&headers).await?)?;
            Ok((status, headers, ResponseBody::from_frames(frames)))
        }
        Some(Frame::Error { code, reason }) => Err(SessionError::Unexpected(format!(
            "the edge failed the tunnel ({code}): {reason}"
        ))),
        other => Err(SessionError::Unexpected(format!(
            "expected a response head, got {other:?}"
        ))),
    }
}

/// Copies everything `from` (the tunnel's `end`) yields into `Data` frames on `send`, then
/// `End` and the stream's finish: one direction of a tunnel, its opening first
/// ([`tunnel_priority`]).
///
/// A browser that closes its end of a TLS tunnel before the server said anything gave up on
/// the handshake (TLS never half-closes before the server's first flight; Chromium closes a
/// connection whose handshake took 30 s). Its bytes still unsent would cross the uplink for
/// nothing and the server's answer the downlink, both in the way of the tunnels still
/// wanted; the stream is reset instead (`CANCELLED`), dropping them. The end is watched while
/// a write waits for the connection's stream budget, so a ClientHello held there goes no
/// further.
pub async fn pump_into_frames<R: tokio::io::AsyncRead + Unpin>(
    session: &Session,
    mut from: R,
    send: &mut quinn::SendStream,
    flights: &TunnelFlights,
    end: TunnelEnd,
) -> Result<(), SessionError> {
    use tokio::io::AsyncReadExt;
    let mut buf = vec![0u8; DATA_CHUNK];
    let mut ahead = vec![0u8; DATA_CHUNK];
    let mut sent = 0u64;
    let mut first_byte = None;
    let stream = send.id();
    let mut priority = opening_priority(stream);
    let _ = send.set_priority(priority);
    let read_err = |e: std::io::Error| SessionError::Unexpected(format!("tunnel read: {e}"));
    let abandoned = |first_byte: Option<u8>| {
        end == TunnelEnd::Client
            && first_byte == Some(TLS_HANDSHAKE_RECORD)
            && !flights.heard(TunnelEnd::Server)
    };
    let mut n = from.read(&mut buf).await.map_err(read_err)?;
    loop {
        if n == 0 {
            if abandoned(first_byte) {
                let _ = send.reset(webpep_proto::code::CANCELLED.into());
                return Ok(());
            }
            break;
        }
        first_byte.get_or_insert(buf[0]);
        let now = tunnel_priority(stream, flights.spoke(end), sent);
        if now != priority {
            priority = now;
            let _ = send.set_priority(priority);
        }
        let frame = Frame::Data(buf[..n].to_vec());
        // The write, and meanwhile the next read (at most one chunk ahead).
        let mut next = None;
        let mut gave_up = false;
        {
            let write = write_frame(session, send, &frame);
            tokio::pin!(write);
            while !gave_up {
                tokio::select! {
                    written = &mut write => {
                        written?;
                        break;
                    }
                    read = from.read(&mut ahead), if next.is_none() => {
                        let k = read.map_err(read_err)?;
                        next = Some(k);
                        gave_up = k == 0 && abandoned(first_byte);
                    }
                }
            }
        }
        if gave_up {
            // The frame may be half written: the reset ends the stream where it is.
            let _ = send.reset(webpep_proto::code::CANCELLED.into());
            return Ok(());
        }
        sent += n as u64;
        n = match next {
            Some(k) => {
                std::mem::swap(&mut buf, &mut ahead);
                k
            }
            None => from.read(&mut buf).await.map_err(read_err)?,
        };
    }
    write_frame(session, send, &Frame::End).await?;
    send.finish()?;
    Ok(())
}

/// The first byte of a TLS record that carries a handshake message (a ClientHello's).
const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// The other direction: `Data` frames from `body` (the tunnel's `end`) written to `to`, shut
/// down at `End`.
pub async fn pump_from_frames<W: tokio::io::AsyncWrite + Unpin>(
    body: &mut ResponseBody,
    mut to: W,
    flights: &TunnelFlights,
    end: TunnelEnd,
) -> Result<(), SessionError> {
    use tokio::io::AsyncWriteExt;
    while let Some(d) = body.chunk().await? {
        if !d.is_empty() {
            flights.spoke(end);
        }
        to.write_all(&d)
            .await
            .map_err(|e| SessionError::Unexpected(format!("tunnel write: {e}")))?;
    }
    let _ = to.shutdown().await;
    Ok(())
}

impl ResponseBody {
    /// Frames from a stream whose head was read elsewhere (the edge's side of a tunnel).
    pub fn from_frames(frames: FrameReader) -> Self {
        ResponseBody {
            frames,
            decoder: None,
        }
    }
}

/// The edge's side: a response body as `Data` frames (at most [`DATA_CHUNK`] each), in the
/// coding its head announced.
pub struct BodySender {
    encoder: Option<BodyEncoder>,
    /// The body's bytes as sent (coded, when it is), without the frames' own.
    payload: u64,
}

impl BodySender {
    pub fn new(coding: webpep_proto::BodyCoding) -> Result<Self, SessionError> {
        let encoder = match coding {
            webpep_proto::BodyCoding::Identity => None,
            webpep_proto::BodyCoding::Zstd => Some(BodyEncoder::new().map_err(|e| {
                SessionError::Unexpected(format!("cannot make a zstd encoder: {e}"))
            })?),
        };
        Ok(BodySender {
            encoder,
            payload: 0,
        })
    }

    /// The frames carrying the next piece of the body (coded and flushed: the client can
    /// hand it on at once).
    pub fn piece(&mut self, body: &[u8]) -> Result<Vec<u8>, SessionError> {
        match &mut self.encoder {
            None => {
                self.payload += body.len() as u64;
                Ok(data_frames(body))
            }
            Some(enc) => {
                let coded = enc
                    .encode(body)
                    .map_err(|e| SessionError::Unexpected(format!("zstd: {e}")))?;
                self.payload += coded.len() as u64;
                Ok(data_frames(&coded))
            }
        }
    }

    /// The body's bytes so far as they cross (coded, when it is), without the frames' own.
    pub fn payload(&self) -> u64 {
        self.payload
    }

    /// The frames that end the body's coding (none for identity); `End` is the caller's.
    pub fn last(&mut self) -> Result<Vec<u8>, SessionError> {
        match &mut self.encoder {
            None => Ok(Vec::new()),
            Some(enc) => {
                let coded = enc
                    .finish()
                    .map_err(|e| SessionError::Unexpected(format!("zstd: {e}")))?;
                self.payload += coded.len() as u64;
                Ok(data_frames(&coded))
            }
        }
    }
}

/// `bytes` as `Data` frames of at most [`DATA_CHUNK`].
fn data_frames(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len() + 16);
    for chunk in bytes.chunks(DATA_CHUNK) {
        Frame::Data(chunk.to_vec()).encode(&mut out);
    }
    out
}

/// The edge's side: a response head, its body to follow in `body_coding`.
pub async fn send_response_head(
    session: &Session,
    send: &mut quinn::SendStream,
    status: u16,
    headers: &http::HeaderMap,
    body_coding: webpep_proto::BodyCoding,
) -> Result<(), SessionError> {
    let block = session.encode_headers(&fields_of(headers)).await?;
    let head = Frame::Response {
        status,
        headers: block,
        body_coding,
        table_ack: session.table_ack(),
    };
    write_frame(session, send, &head).await
}

/// Largest `Data` frame written: small enough that streams interleave (docs/protocol.md).
pub const DATA_CHUNK: usize = 16 * 1024;

#[cfg(test)]
mod tests {
    use super::*;

    fn bidi(index: u64) -> quinn::StreamId {
        quinn::StreamId::new(quinn::Side::Client, quinn::Dir::Bi, index)
    }

    #[test]
    fn a_tunnels_opening_goes_first_and_its_bulk_takes_turns() {
        let s = bidi(3);
        let opening = opening_priority(s);
        for flight in 1..=OPENING_FLIGHTS {
            assert_eq!(tunnel_priority(s, flight, 0), opening);
        }
        assert_eq!(tunnel_priority(s, 2, OPENING_BYTES - 1), opening);
        assert_eq!(tunnel_priority(s, 2, OPENING_BYTES), 0, "past its bytes");
        assert_eq!(
            tunnel_priority(s, OPENING_FLIGHTS + 1, 100),
            0,
            "past its flights"
        );
        // Above every foreground stream, below nothing but the control stream.
        assert!(opening > 0 && opening < CONTROL_PRIORITY);
        assert!(BACKGROUND_PRIORITY < tunnel_priority(s, u32::MAX, u64::MAX));
    }

    #[test]
    fn an_earlier_tunnels_opening_goes_before_a_later_ones() {
        assert!(opening_priority(bidi(0)) > opening_priority(bidi(1)));
        assert!(opening_priority(bidi(1)) > opening_priority(bidi(1000)));
        assert_eq!(opening_priority(bidi(0)), OPENING_TOP);
        // A connection that outlives sixteen million streams still opens above the bulk.
        assert_eq!(opening_priority(bidi(u64::from(u32::MAX))), 1);
        assert_eq!(
            opening_priority(bidi(3)),
            opening_priority(quinn::StreamId::new(quinn::Side::Server, quinn::Dir::Bi, 3)),
            "both proxies rank a tunnel alike"
        );
    }

    #[test]
    fn a_tls_handshake_is_three_flights() {
        use TunnelEnd::*;
        let f = TunnelFlights::new();
        // The ClientHello, in two reads.
        assert_eq!(f.spoke(Client), 1);
        assert_eq!(f.spoke(Client), 1);
        // The server's flight.
        assert_eq!(f.spoke(Server), 2);
        assert_eq!(f.spoke(Server), 2);
        // Finished and the first request.
        assert_eq!(f.spoke(Client), 3);
        // The answer: the tunnel's ordinary traffic.
        assert_eq!(f.spoke(Server), 4);
        assert_eq!(f.spoke(Client), 5);
    }
}
