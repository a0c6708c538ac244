//! The lab's certificate authority: one CA (written as `ca.pem` for the page loader and the
//! browser to trust) and one server certificate that covers every virtual domain. The CA
//! itself is webpep-intercept's [`CaStore`]; this adds the lab's conveniences.
//!
//! Everything uses rustls with the *ring* provider, passed explicitly (no process-wide default
//! provider is installed or needed).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::CertificateDer;
use webpep_intercept::{provider, CaError, CaStore};

pub use webpep_intercept::{IssuedCert, ALPN};

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error(transparent)]
    Ca(#[from] CaError),
    #[error("TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
    #[error("{path}: {source}", path = path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

const CA_NAME: &str = "webpep lab CA";

/// The lab CA: a self-signed ECDSA P-256 root that signs the replay server's certificate.
pub struct LabCa {
    ca: CaStore,
}

impl LabCa {
    /// A new CA (kept in memory until [`LabCa::write`]).
    pub fn generate() -> Result<LabCa, TlsError> {
        Ok(LabCa {
            ca: CaStore::generate(CA_NAME)?,
        })
    }

    /// Loads `dir/ca.pem` and `dir/ca-key.pem` when both exist, so that a browser profile that
    /// already trusts the CA keeps trusting it; otherwise generates a CA and writes both files.
    pub fn load_or_generate(dir: &Path) -> Result<LabCa, TlsError> {
        if dir.join(webpep_intercept::CA_CERT_FILE).exists()
            && dir.join(webpep_intercept::CA_KEY_FILE).exists()
        {
            return Ok(LabCa {
                ca: CaStore::load(dir)?,
            });
        }
        let ca = LabCa::generate()?;
        ca.write(dir)?;
        Ok(ca)
    }

    /// Writes `dir/ca.pem` (and `dir/ca-key.pem`, mode 0600), replacing them, and returns the
    /// path of `ca.pem`.
    pub fn write(&self, dir: &Path) -> Result<PathBuf, TlsError> {
        create_dir(dir)?;
        self.ca.write(dir, true)?;
        Ok(dir.join(webpep_intercept::CA_CERT_FILE))
    }

    /// Writes only `dir/ca.pem` (what clients need) and returns its path.
    pub fn write_ca_pem(&self, dir: &Path) -> Result<PathBuf, TlsError> {
        create_dir(dir)?;
        Ok(self.ca.write_cert(dir)?)
    }

    /// The CA certificate, PEM.
    pub fn ca_pem(&self) -> &str {
        self.ca.cert_pem()
    }

    /// The CA certificate, DER (for a `rustls::RootCertStore`).
    pub fn ca_der(&self) -> CertificateDer<'static> {
        self.ca.cert_der()
    }

    /// The CA itself.
    pub fn store(&self) -> &CaStore {
        &self.ca
    }

    /// Issues a server certificate for `names` (DNS names or IP addresses; all go in the SAN
    /// list).
    pub fn issue(&self, names: &[String]) -> Result<IssuedCert, TlsError> {
        Ok(self.ca.issue(names)?)
    }

    /// A rustls server configuration with one certificate covering `names`, offering ALPN
    /// `h2` and `http/1.1`.
    pub fn server_config(&self, names: &[String]) -> Result<Arc<rustls::ServerConfig>, TlsError> {
        Ok(webpep_intercept::server_config(self.ca.issue(names)?)?)
    }

    /// A rustls client configuration that trusts only this CA, offering `alpn` (for the page
    /// loader and tests).
    pub fn client_config(&self, alpn: &[&[u8]]) -> Result<Arc<rustls::ClientConfig>, TlsError> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.ca_der())?;
        let mut config = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Ok(Arc::new(config))
    }
}

/// The lab's CA directory is an ordinary one (results sit beside it): no 0700 here, the key
/// file is private on its own.
fn create_dir(dir: &Path) -> Result<(), TlsError> {
    std::fs::create_dir_all(dir).map_err(|source| TlsError::Io {
        path: dir.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issue_and_reload() {
        let dir = tempfile::tempdir().expect("tempdir");
        let dir = dir.path();
        let ca = LabCa::load_or_generate(dir).expect("generate");
        assert!(dir.join("ca.pem").exists() && dir.join("ca-key.pem").exists());
        let again = LabCa::load_or_generate(dir).expect("reload");
        assert_eq!(ca.ca_pem(), again.ca_pem());
        let issued = again
            .issue(&["a.test".into(), "b.test".into(), "127.0.0.2".into()])
            .expect("issue");
        assert!(issued.cert_pem.contains("BEGIN CERTIFICATE"));
        assert!(matches!(ca.issue(&[]), Err(TlsError::Ca(CaError::NoNames))));
        // The reloaded CA signs certificates that the original ca.pem verifies.
        let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
            Arc::new({
                let mut r = rustls::RootCertStore::empty();
                r.add(ca.ca_der()).expect("root");
                r
            }),
            provider(),
        )
        .build()
        .expect("verifier");
        use rustls::client::danger::ServerCertVerifier;
        let name = rustls::pki_types::ServerName::try_from("b.test").expect("name");
        verifier
            .verify_server_cert(
                &issued.chain[0],
                &[],
                &name,
                &[],
                rustls::pki_types::UnixTime::now(),
            )
            .expect("the reloaded CA's certificate verifies against the original ca.pem");
    }
}
