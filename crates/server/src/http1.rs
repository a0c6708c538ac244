//! The client-facing HTTP/1.x wire format: request heads, body framing, the chunked decoder,
//! the header rules (hop-by-hop, keep-alive, Via, Max-Forwards, Expect) and response heads.
//! All of it is the project's one HTTP/1 codec, `webpep_http1` (shared with the lab's loader
//! and replay server, unit-tested and fuzzed there), named here as `crate::http1::...`.

pub use webpep_http1::*;
