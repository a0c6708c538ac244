//! webpep's link transport between the client proxy and the edge: QUIC (quinn) with a
//! congestion controller that keeps the window just above the link's bandwidth-delay product.

pub mod congestion;
pub mod windowed;

pub use congestion::{
    Config as CongestionConfig, ControllerFactory, LinkAware, LinkEstimate, LinkMemory,
};
