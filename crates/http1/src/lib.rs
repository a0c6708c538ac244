//! webpep's one HTTP/1.x codec, as pure functions and state machines over bytes (no I/O):
//! every HTTP/1 speaker of the project uses it.
//!
//! * the edge proxy (`webpep server`) parses pipelined request heads
//!   ([`parse_request_head`]), frames and decodes request bodies ([`request_body_framing`],
//!   [`ChunkedDecoder`]), chooses the framing of its responses and writes their heads
//!   ([`response_framing`], [`write_response_head`]);
//! * the lab's page loader (a client) writes requests ([`OutgoingRequest`]), parses response
//!   heads ([`parse_response_head`]) and reads bodies ([`response_body_framing`],
//!   [`BodyDecoder`]), pipelined;
//! * the lab's replay server parses pipelined requests and writes its responses with the same
//!   pieces ([`write_status_line`], [`write_field`], [`connection_value`]).
//!
//! The header rules live in one place ([`fields`]): list tokens, keep-alive, hop-by-hop fields
//! (those the Connection field names included), Via, Max-Forwards, Expect, field syntax. The
//! shared cache strips hop-by-hop fields with them too.
//!
//! Fuzzed by `fuzz/fuzz_targets/{http_request,chunked_body,loader_response}.rs`.

pub mod body;
pub mod fields;
pub mod request;
pub mod response;

pub use body::{BodyDecoder, ChunkError, ChunkedDecoder, Decoded, MAX_CHUNK_LINE};
pub use fields::{
    add_via, connection_has, connection_value, expects_continue, has_token, is_hop_by_hop,
    max_forwards, request_keeps_alive, strip_hop_by_hop, tokens, valid_field_name,
    valid_field_value, via_has, without_hop_by_hop, Fields,
};
pub use request::{
    parse_request_head, request_body_framing, write_request_line, BodyFraming, HeadError,
    OutgoingRequest, RequestHead,
};
pub use response::{
    parse_response_head, response_body_framing, response_framing, response_has_no_body,
    write_field, write_response_head, write_status_line, CodecError, ResponseFraming, ResponseHead,
};

/// Most header fields one message may carry (a request with more → 431).
pub const MAX_HEADERS: usize = 128;
