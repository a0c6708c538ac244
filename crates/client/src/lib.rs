//! `webpep client`: the proxy on the device. Browsers send it every request (as an explicit
//! HTTP proxy, or through its PAC file); it never resolves a name nor opens a TCP connection
//! over the air: each request, and each CONNECT tunnel, goes to the edge through an
//! [`Upstream`] (the link transport's QUIC connection).

pub mod coding;
pub mod config;
pub mod intercept;
pub mod pac;
pub mod proxy;
pub mod quic;
pub mod tls_front;

pub use config::{ClientConfig, InterceptConfig};
pub use intercept::Interception;
pub use proxy::{
    BrowserCounters, ClientProxy, ProxyRequest, Upstream, UpstreamError, UpstreamResponse,
};
pub use quic::QuicUpstream;
pub use tls_front::proxy_tls_config;
