//! webpep's messages between the client proxy and the edge (see docs/protocol.md).
//!
//! Sans-IO: nothing here reads a socket or a clock. [`frame`] turns frames into bytes and
//! bytes (in any pieces) into frames; [`headers`] compresses header fields across a
//! connection with a static table and a dynamic table whose insertions travel on the control
//! stream; [`version`] negotiates the protocol version from the two `Hello` frames.

pub mod frame;
pub mod headers;
pub mod varint;
pub mod version;

pub use frame::{BodyCoding, Frame, FrameDecoder, FrameLimits, Role};
pub use headers::{Decoder, Encoder, HeaderField, HeaderLimits};
pub use version::{negotiate, VersionMismatch, PROTOCOL_VERSION};

/// Error codes carried by `Frame::Error` (and usable as QUIC stream or connection error codes).
pub mod code {
    /// Not an error: a graceful close.
    pub const NO_ERROR: u32 = 0x0;
    /// A malformed frame, or a frame where it is not allowed.
    pub const PROTOCOL: u32 = 0x1;
    /// A frame over the receiver's size limit.
    pub const FRAME_TOO_LARGE: u32 = 0x2;
    /// No protocol version in common (the reason names both sides' versions).
    pub const VERSION_MISMATCH: u32 = 0x3;
    /// A header block or a table insertion that could not be decoded.
    pub const HEADER_COMPRESSION: u32 = 0x4;
    /// The request was not processed at all; it may be retried as it is.
    pub const REQUEST_REFUSED: u32 = 0x5;
    /// The request was cancelled (by the browser, or the stream's reader went away).
    pub const CANCELLED: u32 = 0x6;
    /// The edge could not reach the origin (DNS, connect, TLS, a broken response).
    pub const UPSTREAM: u32 = 0x7;
    /// The edge refuses the request by policy (a private destination, a port not allowed).
    pub const FORBIDDEN: u32 = 0x8;
    /// A fault of the sender itself.
    pub const INTERNAL: u32 = 0x9;
    /// A body over the receiver's limit, or one whose content coding does not decode.
    pub const BODY: u32 = 0xa;
}

/// What went wrong reading a frame, a header block or a table insertion. Every one is the
/// peer's fault (or a broken link), never a panic; [`Error::code`] is what to send back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A frame's declared length is over the limit for its type (checked before anything is
    /// allocated for it).
    #[error("frame of type {ty:#x} declares {len} bytes, over the limit of {limit}")]
    FrameTooLarge { ty: u64, len: u64, limit: usize },
    /// A frame or header block whose contents do not parse.
    #[error("malformed {what}: {reason}")]
    Malformed {
        what: &'static str,
        reason: &'static str,
    },
    /// The stream ended inside a frame.
    #[error("the stream ended inside a frame ({buffered} bytes of it received)")]
    Truncated { buffered: usize },
    /// A header block refers to a static-table index past the table.
    #[error("header block refers to static entry {index}, past the table's {len} entries")]
    StaticIndex { index: u64, len: usize },
    /// A header block refers to a dynamic entry the decoder does not hold (evicted, or never
    /// inserted).
    #[error("header block refers to dynamic entry {index}, not in the table (entries {first}..{inserted})")]
    DynamicIndex {
        index: u64,
        first: u64,
        inserted: u64,
    },
    /// A header block depends on insertions the decoder has not processed: the encoder
    /// referenced an entry before it was acknowledged, which the protocol forbids.
    #[error("header block depends on {required} insertions, only {inserted} processed")]
    Unacknowledged { required: u64, inserted: u64 },
    /// A table insertion bigger than the whole table.
    #[error("table insertion of {size} bytes is over the table's capacity of {capacity}")]
    EntryTooLarge { size: usize, capacity: usize },
    /// A header field name that is not a lower-case token, or a value with CR, LF or NUL.
    #[error("invalid header field: {0}")]
    InvalidField(&'static str),
    /// A header block decoding to more fields than allowed.
    #[error("header block has more than {limit} fields")]
    TooManyFields { limit: usize },
    /// A header block decoding to more bytes (names + values + 32 per field) than allowed.
    #[error("header block decodes to more than {limit} bytes")]
    HeaderListTooLarge { limit: usize },
}

impl Error {
    /// The error code to send to the peer for this error.
    pub fn code(&self) -> u32 {
        match self {
            Error::FrameTooLarge { .. } => code::FRAME_TOO_LARGE,
            Error::Malformed { .. } | Error::Truncated { .. } => code::PROTOCOL,
            Error::StaticIndex { .. }
            | Error::DynamicIndex { .. }
            | Error::Unacknowledged { .. }
            | Error::EntryTooLarge { .. }
            | Error::InvalidField(_)
            | Error::TooManyFields { .. }
            | Error::HeaderListTooLarge { .. } => code::HEADER_COMPRESSION,
        }
    }
}
