//! The lab's certificate authority: one CA (written as `ca.pem` for the page loader and the
//! browser to trust) and one server certificate that covers every virtual domain.
//!
//! Everything uses rustls with the *ring* provider, passed explicitly (no process-wide default
//! provider is installed or needed).

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// The ALPN protocols the replay server offers, in preference order.
pub const ALPN: &[&[u8]] = &[b"h2", b"http/1.1"];

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("certificate generation: {0}")]
    Rcgen(#[from] rcgen::Error),
    #[error("TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("no names to put in the certificate")]
    NoNames,
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> TlsError + '_ {
    move |source| TlsError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The lab CA: a self-signed ECDSA P-256 root that signs the replay server's certificate.
pub struct LabCa {
    key: KeyPair,
    /// The CA certificate as issuer (regenerated from the key when loaded from disk).
    cert: rcgen::Certificate,
    /// What clients trust: exactly the `ca.pem` on disk when loaded, else the new certificate.
    ca_pem: String,
    ca_der: CertificateDer<'static>,
}

/// A certificate issued by the lab CA, with its private key.
pub struct IssuedCert {
    /// The leaf certificate (the chain the server sends).
    pub chain: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
    pub cert_pem: String,
    pub key_pem: String,
}

const CA_NAME: &str = "webpep lab CA";

fn validity(params: &mut CertificateParams, days: u64) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs() as i64;
    let day = 86_400i64;
    if let (Ok(nb), Ok(na)) = (
        time::OffsetDateTime::from_unix_timestamp(now - day),
        time::OffsetDateTime::from_unix_timestamp(now + days as i64 * day),
    ) {
        params.not_before = nb;
        params.not_after = na;
    }
}

fn ca_params() -> CertificateParams {
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, CA_NAME);
    dn.push(DnType::OrganizationName, "webpep lab");
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    validity(&mut params, 3650);
    params
}

impl LabCa {
    /// A new CA (kept in memory until [`LabCa::write`]).
    pub fn generate() -> Result<LabCa, TlsError> {
        let key = KeyPair::generate()?;
        let cert = ca_params().self_signed(&key)?;
        Ok(LabCa {
            ca_pem: cert.pem(),
            ca_der: cert.der().clone(),
            key,
            cert,
        })
    }

    /// Loads `dir/ca.pem` and `dir/ca-key.pem` when both exist, so that a browser profile that
    /// already trusts the CA keeps trusting it; otherwise generates a CA and writes both files.
    pub fn load_or_generate(dir: &Path) -> Result<LabCa, TlsError> {
        let cert_path = dir.join("ca.pem");
        let key_path = dir.join("ca-key.pem");
        if cert_path.exists() && key_path.exists() {
            let ca_pem = fs::read_to_string(&cert_path).map_err(io_err(&cert_path))?;
            let key_pem = fs::read_to_string(&key_path).map_err(io_err(&key_path))?;
            let key = KeyPair::from_pem(&key_pem)?;
            let ca_der = pem_to_der(&ca_pem).ok_or_else(|| TlsError::Io {
                path: cert_path.clone(),
                source: std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "not a PEM certificate",
                ),
            })?;
            // Same key and same subject: certificates it signs verify against the ca.pem on disk.
            let cert = ca_params().self_signed(&key)?;
            return Ok(LabCa {
                key,
                cert,
                ca_pem,
                ca_der,
            });
        }
        let ca = LabCa::generate()?;
        ca.write(dir)?;
        Ok(ca)
    }

    /// Writes `dir/ca.pem` (and `dir/ca-key.pem`, mode 0600) and returns the path of `ca.pem`.
    pub fn write(&self, dir: &Path) -> Result<PathBuf, TlsError> {
        fs::create_dir_all(dir).map_err(io_err(dir))?;
        let key_path = dir.join("ca-key.pem");
        write_file(&key_path, self.key.serialize_pem().as_bytes(), true)?;
        self.write_ca_pem(dir)
    }

    /// Writes only `dir/ca.pem` (what clients need) and returns its path.
    pub fn write_ca_pem(&self, dir: &Path) -> Result<PathBuf, TlsError> {
        fs::create_dir_all(dir).map_err(io_err(dir))?;
        let path = dir.join("ca.pem");
        write_file(&path, self.ca_pem.as_bytes(), false)?;
        Ok(path)
    }

    /// The CA certificate, PEM.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The CA certificate, DER (for a `rustls::RootCertStore`).
    pub fn ca_der(&self) -> CertificateDer<'static> {
        self.ca_der.clone()
    }

    /// Issues a server certificate for `names` (DNS names or IP addresses; all go in the SAN
    /// list), valid for a year.
    pub fn issue(&self, names: &[String]) -> Result<IssuedCert, TlsError> {
        if names.is_empty() {
            return Err(TlsError::NoNames);
        }
        let mut params = CertificateParams::new(names.to_vec())?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, names[0].as_str());
        params.distinguished_name = dn;
        params.is_ca = IsCa::NoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        validity(&mut params, 365);
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.cert, &self.key)?;
        Ok(IssuedCert {
            chain: vec![cert.der().clone()],
            key: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }

    /// A rustls server configuration with one certificate covering `names`, offering ALPN
    /// `h2` and `http/1.1`.
    pub fn server_config(&self, names: &[String]) -> Result<Arc<rustls::ServerConfig>, TlsError> {
        let issued = self.issue(names)?;
        let mut config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(issued.chain, issued.key)?;
        config.alpn_protocols = ALPN.iter().map(|p| p.to_vec()).collect();
        Ok(Arc::new(config))
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

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The DER of the first CERTIFICATE block of a PEM text.
fn pem_to_der(pem: &str) -> Option<CertificateDer<'static>> {
    use rustls::pki_types::pem::PemObject;
    CertificateDer::from_pem_slice(pem.as_bytes()).ok()
}

fn write_file(path: &Path, bytes: &[u8], private: bool) -> Result<(), TlsError> {
    let access = if private {
        webpep_files::Access::Private
    } else {
        webpep_files::Access::Public
    };
    webpep_files::write_atomic(path, bytes, access).map_err(|e| match e {
        webpep_files::FileError::Io { path, source } => TlsError::Io { path, source },
        other => TlsError::Io {
            path: path.to_path_buf(),
            source: std::io::Error::other(other.to_string()),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issue_and_reload() {
        let dir = std::env::temp_dir().join(format!("webpep-replay-ca-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let ca = LabCa::load_or_generate(&dir).expect("generate");
        assert!(dir.join("ca.pem").exists() && dir.join("ca-key.pem").exists());
        let again = LabCa::load_or_generate(&dir).expect("reload");
        assert_eq!(ca.ca_pem(), again.ca_pem());
        let issued = again
            .issue(&["a.test".into(), "b.test".into(), "127.0.0.2".into()])
            .expect("issue");
        assert!(issued.cert_pem.contains("BEGIN CERTIFICATE"));
        assert!(matches!(ca.issue(&[]), Err(TlsError::NoNames)));
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
        let _ = fs::remove_dir_all(&dir);
    }
}
