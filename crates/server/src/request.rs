//! A request as a front end hands it to the pipeline, and where it arrived.

use std::net::SocketAddr;

use bytes::Bytes;

use crate::http1::RequestHead;
use crate::mode::Mode;

/// A parsed request with its body and where it came from.
#[derive(Debug)]
pub struct ClientRequest {
    /// Request line and headers.
    pub head: RequestHead,
    /// The body (bounded).
    pub body: Bytes,
    /// The client.
    pub peer: SocketAddr,
    /// The local address the client reached.
    pub local: SocketAddr,
    /// The original destination of an intercepted connection (SO_ORIGINAL_DST), when it is
    /// not the proxy itself.
    pub original_dst: Option<SocketAddr>,
    /// The mode.
    pub mode: Mode,
    /// The budget the body holds while the request lives.
    pub body_lease: Option<crate::limits::BufferLease>,
    /// The link to the client as last measured, when the stages scale with it
    /// ([`crate::adapt`]); `None`: not measured (today's defaults apply).
    pub link: Option<crate::client_link::ClientLink>,
}

/// Where a request arrived, as its transport knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrival {
    /// The client.
    pub peer: SocketAddr,
    /// The local address the client reached.
    pub local: SocketAddr,
    /// The original destination of an intercepted connection, when not the proxy itself.
    pub original_dst: Option<SocketAddr>,
}
