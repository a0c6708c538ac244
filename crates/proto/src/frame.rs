//! Frames: `varint type, varint length, payload`, as HTTP/3's (RFC 9114 §7.1). Frame types
//! this crate does not know are skipped whole (reserved and future extension types, as HTTP/3
//! does), so a later version may add frames an older peer ignores.

use crate::varint::{self, Reader};
use crate::Error;

/// Frame type numbers on the wire.
pub mod ty {
    pub const DATA: u64 = 0x0;
    pub const REQUEST: u64 = 0x1;
    pub const RESPONSE: u64 = 0x2;
    pub const END: u64 = 0x3;
    pub const ERROR: u64 = 0x4;
    pub const HELLO: u64 = 0x5;
    pub const INSERT: u64 = 0x6;
    pub const HEAD_ACK: u64 = 0x7;
    pub const GOAWAY: u64 = 0x8;
}

/// Which end of the connection sent a `Hello`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// `webpep client`, the device proxy (it opens the request streams).
    Client,
    /// `webpep server`, the edge.
    Server,
}

/// How a response body is carried between the proxies, on top of whatever content coding
/// (`Content-Encoding`) the response itself has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum BodyCoding {
    /// The bytes as they are.
    #[default]
    Identity,
    /// One zstd frame over the whole body (the concatenated `Data` payloads), which the client
    /// proxy decodes before handing the body to the browser.
    Zstd,
}

/// The kind of QUIC stream a frame travels on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StreamKind {
    /// Each side's one unidirectional control stream.
    Control,
    /// A bidirectional stream carrying one request and its response.
    Request,
}

/// One message of the protocol. See docs/protocol.md for where each may appear.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// First frame on each control stream: the versions this side speaks and who it is.
    Hello {
        versions: Vec<u32>,
        role: Role,
        /// Software name and version, for logs ("webpep 0.1.0").
        name: String,
    },
    /// Control stream: an insertion into the sender's header-encoder table (the receiver's
    /// decoder table).
    Insert { name: Vec<u8>, value: Vec<u8> },
    /// Control stream: the sender's decoder has decoded these header blocks (by the block ids
    /// they carry), so the peer's encoder may evict the entries they reference; and it has
    /// processed `table_ack` insertions.
    HeadAck { table_ack: u64, blocks: Vec<u64> },
    /// Request stream, client to edge, first frame: the request head.
    Request {
        method: String,
        /// An absolute URI (`http://host/path`), or `host:port` for CONNECT.
        target: String,
        /// A header block (see [`crate::headers`]).
        headers: Vec<u8>,
        /// Background work (push, prefetch): sent after every foreground request.
        background: bool,
        /// Insertions from the edge's encoder this client has processed.
        table_ack: u64,
    },
    /// Request stream, edge to client: a response head (1xx ones before the final one).
    Response {
        status: u16,
        headers: Vec<u8>,
        body_coding: BodyCoding,
        /// Insertions from the client's encoder the edge has processed.
        table_ack: u64,
    },
    /// Request stream: a piece of the body (of the request, or of the response).
    Data(Vec<u8>),
    /// Request stream: the body (and this direction of the exchange) is complete. Without it
    /// a stream's end is a truncation, not a complete message.
    End,
    /// Either stream: what went wrong; on a request stream it ends the exchange, on a control
    /// stream it precedes closing the connection.
    Error { code: u32, reason: String },
    /// Control stream, edge to client: streams with ids from `stream_id` on were not and will
    /// not be processed (the client may retry them on a new connection); no new ones.
    GoAway { stream_id: u64 },
}

impl Frame {
    /// The frame's type number.
    pub fn ty(&self) -> u64 {
        match self {
            Frame::Data(_) => ty::DATA,
            Frame::Request { .. } => ty::REQUEST,
            Frame::Response { .. } => ty::RESPONSE,
            Frame::End => ty::END,
            Frame::Error { .. } => ty::ERROR,
            Frame::Hello { .. } => ty::HELLO,
            Frame::Insert { .. } => ty::INSERT,
            Frame::HeadAck { .. } => ty::HEAD_ACK,
            Frame::GoAway { .. } => ty::GOAWAY,
        }
    }

    /// Whether this frame may appear on that kind of stream (a frame elsewhere is a protocol
    /// error: on a request stream it resets that stream, on a control stream it closes the
    /// connection).
    pub fn allowed_on(&self, kind: StreamKind) -> bool {
        match self {
            Frame::Hello { .. } | Frame::Insert { .. } | Frame::HeadAck { .. } => {
                kind == StreamKind::Control
            }
            Frame::GoAway { .. } => kind == StreamKind::Control,
            Frame::Request { .. } | Frame::Response { .. } | Frame::Data(_) | Frame::End => {
                kind == StreamKind::Request
            }
            Frame::Error { .. } => true,
        }
    }

    /// Appends the frame (type, length, payload).
    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut payload = Vec::new();
        let body: &[u8] = match self {
            Frame::Data(bytes) => bytes,
            Frame::End => &[],
            Frame::Hello {
                versions,
                role,
                name,
            } => {
                varint::encode(versions.len() as u64, &mut payload);
                for &v in versions {
                    varint::encode(u64::from(v), &mut payload);
                }
                payload.push(match role {
                    Role::Client => 0,
                    Role::Server => 1,
                });
                payload.extend_from_slice(name.as_bytes());
                &payload
            }
            Frame::Insert { name, value } => {
                put_bytes(name, &mut payload);
                payload.extend_from_slice(value);
                &payload
            }
            Frame::HeadAck { table_ack, blocks } => {
                varint::encode(*table_ack, &mut payload);
                for &b in blocks {
                    varint::encode(b, &mut payload);
                }
                &payload
            }
            Frame::Request {
                method,
                target,
                headers,
                background,
                table_ack,
            } => {
                varint::encode(*table_ack, &mut payload);
                payload.push(u8::from(*background));
                put_bytes(method.as_bytes(), &mut payload);
                put_bytes(target.as_bytes(), &mut payload);
                payload.extend_from_slice(headers);
                &payload
            }
            Frame::Response {
                status,
                headers,
                body_coding,
                table_ack,
            } => {
                varint::encode(u64::from(*status), &mut payload);
                varint::encode(*table_ack, &mut payload);
                payload.push(match body_coding {
                    BodyCoding::Identity => 0,
                    BodyCoding::Zstd => 1,
                });
                payload.extend_from_slice(headers);
                &payload
            }
            Frame::Error { code, reason } => {
                varint::encode(u64::from(*code), &mut payload);
                payload.extend_from_slice(reason.as_bytes());
                &payload
            }
            Frame::GoAway { stream_id } => {
                varint::encode(*stream_id, &mut payload);
                &payload
            }
        };
        varint::encode(self.ty(), out);
        varint::encode(body.len() as u64, out);
        out.extend_from_slice(body);
    }

    /// The frame as a new byte vector.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode(&mut out);
        out
    }

    /// Parses a complete payload of type `ty`: `Ok(None)` for a type this crate does not know
    /// (to be skipped).
    pub fn decode_payload(ty: u64, payload: &[u8]) -> Result<Option<Frame>, Error> {
        let frame = match ty {
            ty::DATA => Frame::Data(payload.to_vec()),
            ty::END => {
                if !payload.is_empty() {
                    return Err(Error::Malformed {
                        what: "END frame",
                        reason: "it has a payload",
                    });
                }
                Frame::End
            }
            ty::HELLO => {
                let mut r = Reader::new(payload, "HELLO frame");
                let count = r.varint()?;
                let mut versions = Vec::new();
                for _ in 0..count {
                    // Each version takes at least a byte, so a lying count runs out here
                    // rather than allocating.
                    let v = r.varint()?;
                    versions
                        .push(u32::try_from(v).map_err(|_| r.malformed("a version over 2^32"))?);
                }
                let role = match r.u8()? {
                    0 => Role::Client,
                    1 => Role::Server,
                    _ => return Err(r.malformed("unknown role")),
                };
                let name = utf8(r.rest(), &r)?;
                Frame::Hello {
                    versions,
                    role,
                    name,
                }
            }
            ty::INSERT => {
                let mut r = Reader::new(payload, "INSERT frame");
                let name = r.bytes_with_len()?.to_vec();
                Frame::Insert {
                    name,
                    value: r.rest().to_vec(),
                }
            }
            ty::HEAD_ACK => {
                let mut r = Reader::new(payload, "HEAD_ACK frame");
                let table_ack = r.varint()?;
                let mut blocks = Vec::new();
                while !r.is_empty() {
                    blocks.push(r.varint()?);
                }
                Frame::HeadAck { table_ack, blocks }
            }
            ty::REQUEST => {
                let mut r = Reader::new(payload, "REQUEST frame");
                let table_ack = r.varint()?;
                let background = match r.u8()? {
                    0 => false,
                    1 => true,
                    _ => return Err(r.malformed("flags other than background")),
                };
                let method = r.bytes_with_len()?;
                if method.is_empty() || !method.iter().all(|&b| is_tchar(b)) {
                    return Err(r.malformed("the method is not a token"));
                }
                let target = r.bytes_with_len()?;
                if target.is_empty() || !target.iter().all(|&b| (0x21..0x7f).contains(&b)) {
                    return Err(r.malformed("the target is empty or not visible ASCII"));
                }
                Frame::Request {
                    // Both checked ASCII above.
                    method: String::from_utf8_lossy(method).into_owned(),
                    target: String::from_utf8_lossy(target).into_owned(),
                    headers: r.rest().to_vec(),
                    background,
                    table_ack,
                }
            }
            ty::RESPONSE => {
                let mut r = Reader::new(payload, "RESPONSE frame");
                let status = r.varint()?;
                if !(100..=999).contains(&status) {
                    return Err(r.malformed("the status is not three digits"));
                }
                let table_ack = r.varint()?;
                let body_coding = match r.u8()? {
                    0 => BodyCoding::Identity,
                    1 => BodyCoding::Zstd,
                    _ => return Err(r.malformed("unknown body coding")),
                };
                Frame::Response {
                    status: status as u16,
                    headers: r.rest().to_vec(),
                    body_coding,
                    table_ack,
                }
            }
            ty::ERROR => {
                let mut r = Reader::new(payload, "ERROR frame");
                let code = r.varint()?;
                let code = u32::try_from(code).map_err(|_| r.malformed("a code over 2^32"))?;
                let reason = utf8(r.rest(), &r)?;
                Frame::Error { code, reason }
            }
            ty::GOAWAY => {
                let mut r = Reader::new(payload, "GOAWAY frame");
                let stream_id = r.varint()?;
                if !r.is_empty() {
                    return Err(r.malformed("bytes after the stream id"));
                }
                Frame::GoAway { stream_id }
            }
            _ => return Ok(None),
        };
        Ok(Some(frame))
    }
}

fn put_bytes(bytes: &[u8], out: &mut Vec<u8>) {
    varint::encode(bytes.len() as u64, out);
    out.extend_from_slice(bytes);
}

fn utf8(bytes: &[u8], r: &Reader<'_>) -> Result<String, Error> {
    String::from_utf8(bytes.to_vec()).map_err(|_| r.malformed("text that is not UTF-8"))
}

/// RFC 9110 `tchar`.
pub(crate) fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Size limits of a [`FrameDecoder`], checked against a frame's declared length before any
/// of its payload is buffered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameLimits {
    /// Largest `Data` payload.
    pub max_data: usize,
    /// Largest payload of any other frame (heads, insertions, errors, unknown types).
    pub max_head: usize,
}

impl Default for FrameLimits {
    fn default() -> Self {
        FrameLimits {
            max_data: 1 << 20,
            max_head: 64 << 10,
        }
    }
}

impl FrameLimits {
    /// The limit for a frame of type `ty`.
    pub fn limit(&self, ty: u64) -> usize {
        if ty == ty::DATA {
            self.max_data
        } else {
            self.max_head
        }
    }
}

/// Reads frames from a stream's bytes, pushed in pieces of any size.
///
/// After an error the decoder is spent: every later `next_frame` returns the same error (the
/// stream's framing is lost, so nothing after it can be trusted).
#[derive(Debug, Default)]
pub struct FrameDecoder {
    buf: Vec<u8>,
    /// Where the unread bytes of `buf` start.
    start: usize,
    limits: FrameLimits,
    failed: Option<Error>,
}

impl FrameDecoder {
    /// A decoder with the default limits (1 MiB `Data`, 64 KiB for everything else).
    pub fn new() -> Self {
        Self::default()
    }

    pub fn with_limits(limits: FrameLimits) -> Self {
        FrameDecoder {
            limits,
            ..Self::default()
        }
    }

    /// Adds bytes read from the stream.
    pub fn push(&mut self, bytes: &[u8]) {
        if self.start > 0 && self.start >= self.buf.len() / 2 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete frame, `Ok(None)` when more bytes are needed. Unknown frame types
    /// are skipped (within the head limit).
    pub fn next_frame(&mut self) -> Result<Option<Frame>, Error> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        loop {
            let r = self.step();
            match r {
                Ok(Step::Frame(f)) => return Ok(Some(f)),
                Ok(Step::Skipped) => continue,
                Ok(Step::NeedMore) => return Ok(None),
                Err(e) => {
                    self.failed = Some(e.clone());
                    return Err(e);
                }
            }
        }
    }

    fn step(&mut self) -> Result<Step, Error> {
        let bytes = &self.buf[self.start..];
        let Some((ty, n1)) = varint::decode(bytes)? else {
            return Ok(Step::NeedMore);
        };
        let Some((len, n2)) = varint::decode(&bytes[n1..])? else {
            return Ok(Step::NeedMore);
        };
        let limit = self.limits.limit(ty);
        if len > limit as u64 {
            return Err(Error::FrameTooLarge { ty, len, limit });
        }
        let head = n1 + n2;
        let len = len as usize;
        if bytes.len() - head < len {
            self.buf.reserve(head + len - bytes.len());
            return Ok(Step::NeedMore);
        }
        let frame = Frame::decode_payload(ty, &bytes[head..head + len])?;
        self.start += head + len;
        Ok(match frame {
            Some(f) => Step::Frame(f),
            None => Step::Skipped,
        })
    }

    /// Bytes received and not yet returned as frames (a partial frame).
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.start
    }

    /// Call at the stream's end: an error if it ended inside a frame.
    pub fn finish(&self) -> Result<(), Error> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        match self.buffered() {
            0 => Ok(()),
            buffered => Err(Error::Truncated { buffered }),
        }
    }
}

enum Step {
    Frame(Frame),
    Skipped,
    NeedMore,
}
