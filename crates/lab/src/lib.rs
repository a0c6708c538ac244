//! The webpep lab (DESIGN §7): the namespaces and links a measurement runs on, the
//! experiments, their results and their report.

pub mod cdp;
pub mod chromium;
pub mod configs;
pub mod edge_proxy;
pub mod hosting;
pub mod missing;
pub mod nsrt;
pub mod paper_refs;
pub mod peer_images;
pub mod peers;
pub mod proxy_bench;
pub mod report;
pub mod results;
pub mod runner;
pub mod topology;
pub mod transport_bench;

/// Errors of the lab.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    #[error(transparent)]
    Link(#[from] webpep_link::Error),
    #[error(transparent)]
    Model(#[from] webpep_link_model::ModelError),
    /// The user's input is at fault (a corrupt manifest or configuration file, an unknown
    /// name): exit code 2.
    #[error("{0}")]
    BadInput(String),
    #[error("{0}")]
    Other(String),
}

pub type Result<T, E = LabError> = std::result::Result<T, E>;
