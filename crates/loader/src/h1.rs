//! The loader's HTTP/1.x client codec: the project's one codec, `webpep_http1` (shared with
//! the edge proxy and the replay server, tested and fuzzed there), under the names the
//! connection driver uses. Pure: the driver does the I/O.

pub use webpep_http1::{
    parse_response_head as parse_head, response_body_framing as framing, BodyDecoder, CodecError,
    Decoded, OutgoingRequest as RequestHead, ResponseFraming as Framing, ResponseHead,
};
