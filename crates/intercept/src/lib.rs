//! webpep's opt-in TLS interception, the building blocks (DESIGN §6, issue 35): a CA per
//! installation kept in a directory (`ca.pem`, and `ca-key.pem` mode 0600), leaf certificates
//! minted per host and cached, and the policy that decides which CONNECT destinations are
//! intercepted and which are tunnelled untouched.
//!
//! Everything uses rustls with the *ring* provider, passed explicitly (no process-wide default
//! provider is installed or needed).
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use webpep_intercept::*;
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let ca = Arc::new(CaStore::load(std::path::Path::new("/home/me/.config/webpep/ca"))?);
//! println!("CA fingerprint (SHA-256): {}", ca.fingerprint());
//! let leaves = LeafCache::new(ca, 1000);
//! let policy = Policy::new(true, &[], &["bank.example".to_string()])?;
//! if policy.decide("www.cnn.com", 443) == Decision::Intercept {
//!     let tls: Arc<rustls::ServerConfig> = leaves.server_config("www.cnn.com")?;
//!     # let _ = tls;
//! }
//! # Ok(()) }
//! ```

mod accept;
mod ca;
mod config;
mod der;
mod h2;
mod host;
mod leaf;
mod policy;

pub use accept::{accept_browser, https_authority, AcceptError, Accepted, Rewind};
pub use ca::{CaError, CaStore, IssuedCert, CA_CERT_FILE, CA_KEY_FILE};
pub use config::{default_client_ca_dir, InterceptConfig};
pub use der::certificate_expiry;
pub use h2::{serve_h2, H2End};
pub use host::valid_host_name;
pub use leaf::{provider, server_config, LeafCache, ALPN};
pub use policy::{Decision, Policy, PolicyError, TunnelReason, DEFAULT_PORTS, PASS_THROUGH_LIMIT};
