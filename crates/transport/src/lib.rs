//! webpep's link transport between the client proxy and the edge: QUIC (quinn) with a
//! congestion controller that keeps the window just above the link's bandwidth-delay product,
//! and mutual authentication by the edge installation's own CA.

pub mod coding;
pub mod congestion;
pub mod credential;
pub mod endpoint;
pub mod session;
pub mod windowed;
pub mod write_order;

pub use congestion::{
    Config as CongestionConfig, ControllerFactory, LinkAware, LinkEstimate, LinkMemory, Phase,
};
pub use credential::{Credential, CredentialError, EdgeIdentity, Revocations, EDGE_SERVER_NAME};
pub use endpoint::{
    client_config, connect, connect_early, follow_send_budget, path_estimate, peer_certificate,
    server_config, Congestion, EdgeTransport, PathEstimate, TransportSettings, ALPN,
};
pub use rustls::pki_types::CertificateDer;
