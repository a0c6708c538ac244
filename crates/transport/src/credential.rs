//! Who may use the edge over QUIC: the edge's own certificate authority, the client
//! credentials it issues (`webpep server enroll NAME`), and the list of revoked ones.
//!
//! Each edge installation has a private CA (ECDSA P-256, key kept 0600). It signs the edge's
//! server certificate (for the fixed name [`EDGE_SERVER_NAME`], so a client reaches the edge at
//! any address) and one client certificate per enrolled client. Both sides trust only that CA:
//! the client pins its edge, the edge admits only clients it enrolled, checked in the TLS
//! handshake, so an unenrolled peer never gets a stream (the edge is no open relay). Revoking
//! adds the certificate's SHA-256 fingerprint to `revoked.toml`, which the running edge
//! re-reads when it changes: no restart.

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SerialNumber,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use webpep_files::{write_atomic, Access, FileError};

/// The name in the edge's server certificate, and the one every client asks for.
pub const EDGE_SERVER_NAME: &str = "webpep-edge";

#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    #[error("certificate generation: {0}")]
    Rcgen(#[from] rcgen::Error),
    #[error("TLS: {0}")]
    Rustls(#[from] rustls::Error),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {reason}")]
    Invalid { path: PathBuf, reason: String },
    #[error(transparent)]
    File(#[from] FileError),
    #[error("no client named {0:?} is enrolled")]
    NotEnrolled(String),
    #[error("a client name is 1-64 characters of letters, digits, '.', '_' and '-': {0:?}")]
    BadName(String),
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> CredentialError + '_ {
    move |source| CredentialError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn invalid(path: &Path, reason: impl Into<String>) -> CredentialError {
    CredentialError::Invalid {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// The SHA-256 of a certificate's DER, hex: how the edge's lists name a certificate.
pub fn fingerprint(der: &[u8]) -> String {
    Sha256::digest(der)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn validity(params: &mut CertificateParams, days: i64) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs() as i64;
    let day = 86_400i64;
    if let (Ok(nb), Ok(na)) = (
        time::OffsetDateTime::from_unix_timestamp(now - day),
        time::OffsetDateTime::from_unix_timestamp(now + days * day),
    ) {
        params.not_before = nb;
        params.not_after = na;
    }
}

fn ca_params() -> CertificateParams {
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "webpep edge CA");
    dn.push(DnType::OrganizationName, "webpep");
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    validity(&mut params, 3650);
    params
}

fn write_file(path: &Path, bytes: &[u8], private: bool) -> Result<(), CredentialError> {
    let access = if private {
        Access::Private
    } else {
        Access::Public
    };
    Ok(write_atomic(path, bytes, access)?)
}

fn read_private(path: &Path) -> Result<String, CredentialError> {
    Ok(webpep_files::read_private(path)?)
}

fn cert_from_pem(path: &Path, pem: &str) -> Result<CertificateDer<'static>, CredentialError> {
    CertificateDer::from_pem_slice(pem.as_bytes())
        .map_err(|e| invalid(path, format!("not a PEM certificate: {e}")))
}

fn key_from_pem(path: &Path, pem: &str) -> Result<PrivateKeyDer<'static>, CredentialError> {
    PrivateKeyDer::from_pem_slice(pem.as_bytes())
        .map_err(|e| invalid(path, format!("not a PEM private key: {e}")))
}

fn check_name(name: &str) -> Result<(), CredentialError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if ok {
        Ok(())
    } else {
        Err(CredentialError::BadName(name.to_string()))
    }
}

/// One enrolled client, as the edge records it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Enrolled {
    pub name: String,
    pub fingerprint: String,
    /// Seconds since the Unix epoch.
    pub issued: u64,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct EnrolledFile {
    #[serde(default)]
    client: Vec<Enrolled>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct RevokedFile {
    #[serde(default)]
    revoked: Vec<Enrolled>,
}

/// The edge's side: its CA, its server certificate and its lists, in one directory.
///
/// | file | what |
/// |---|---|
/// | `edge-ca.pem`, `edge-ca-key.pem` (0600) | the installation's CA |
/// | `edge-cert.pem`, `edge-key.pem` (0600) | the edge's server certificate |
/// | `enrolled.toml` | every client credential issued: name, fingerprint, when |
/// | `revoked.toml` | the revoked ones |
pub struct EdgeIdentity {
    dir: PathBuf,
    ca_key: KeyPair,
    ca_cert: rcgen::Certificate,
    ca_pem: String,
    ca_der: CertificateDer<'static>,
    pub server_chain: Vec<CertificateDer<'static>>,
    pub server_key: PrivateKeyDer<'static>,
}

impl EdgeIdentity {
    /// Loads the edge's identity from `dir`, creating the CA and the server certificate the
    /// first time (the directory too, mode 0700).
    pub fn load_or_create(dir: &Path) -> Result<EdgeIdentity, CredentialError> {
        if !dir.exists() {
            fs::create_dir_all(dir).map_err(io_err(dir))?;
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).map_err(io_err(dir))?;
            }
        }
        let ca_path = dir.join("edge-ca.pem");
        let ca_key_path = dir.join("edge-ca-key.pem");
        let (ca_key, ca_pem) = if ca_path.exists() && ca_key_path.exists() {
            let key_pem = read_private(&ca_key_path)?;
            let key = KeyPair::from_pem(&key_pem)?;
            (key, fs::read_to_string(&ca_path).map_err(io_err(&ca_path))?)
        } else {
            let key = KeyPair::generate()?;
            let cert = ca_params().self_signed(&key)?;
            write_file(&ca_key_path, key.serialize_pem().as_bytes(), true)?;
            write_file(&ca_path, cert.pem().as_bytes(), false)?;
            (key, cert.pem())
        };
        let ca_der = cert_from_pem(&ca_path, &ca_pem)?;
        // Same key and subject as the CA on disk: what it signs verifies against edge-ca.pem.
        let ca_cert = ca_params().self_signed(&ca_key)?;

        let cert_path = dir.join("edge-cert.pem");
        let key_path = dir.join("edge-key.pem");
        let (server_pem, server_key_pem) = if cert_path.exists() && key_path.exists() {
            (
                fs::read_to_string(&cert_path).map_err(io_err(&cert_path))?,
                read_private(&key_path)?,
            )
        } else {
            let key = KeyPair::generate()?;
            let mut params = CertificateParams::new(vec![EDGE_SERVER_NAME.to_string()])?;
            params
                .distinguished_name
                .push(DnType::CommonName, EDGE_SERVER_NAME);
            params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
            validity(&mut params, 3650);
            let cert = params.signed_by(&key, &ca_cert, &ca_key)?;
            write_file(&key_path, key.serialize_pem().as_bytes(), true)?;
            write_file(&cert_path, cert.pem().as_bytes(), false)?;
            (cert.pem(), key.serialize_pem())
        };
        Ok(EdgeIdentity {
            dir: dir.to_path_buf(),
            server_chain: vec![cert_from_pem(&cert_path, &server_pem)?],
            server_key: key_from_pem(&key_path, &server_key_pem)?,
            ca_key,
            ca_cert,
            ca_pem,
            ca_der,
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The CA certificate (what clients pin, and what client certificates chain to).
    pub fn ca_der(&self) -> &CertificateDer<'static> {
        &self.ca_der
    }

    /// Issues a credential for a client called `name` and records it in `enrolled.toml`.
    /// Enrolling a name again issues a new credential; the old one stays valid until revoked.
    pub fn enroll(&self, name: &str) -> Result<Credential, CredentialError> {
        check_name(name)?;
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, name);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let mut serial = [0u8; 16];
        random_serial(&mut serial)?;
        params.serial_number = Some(SerialNumber::from_slice(&serial));
        validity(&mut params, 3650);
        let cert = params.signed_by(&key, &self.ca_cert, &self.ca_key)?;
        let enrolled = Enrolled {
            name: name.to_string(),
            fingerprint: fingerprint(cert.der()),
            issued: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or(Duration::ZERO)
                .as_secs(),
        };
        let path = self.dir.join("enrolled.toml");
        let mut list: EnrolledFile = read_toml(&path)?;
        list.client.push(enrolled);
        write_toml(&path, &list)?;
        Ok(Credential {
            name: name.to_string(),
            edge_ca: self.ca_pem.clone(),
            cert: cert.pem(),
            key: key.serialize_pem(),
        })
    }

    /// Every credential issued.
    pub fn enrolled(&self) -> Result<Vec<Enrolled>, CredentialError> {
        Ok(read_toml::<EnrolledFile>(&self.dir.join("enrolled.toml"))?.client)
    }

    /// Revokes every credential issued to `name`; returns how many were revoked.
    pub fn revoke(&self, name: &str) -> Result<usize, CredentialError> {
        let issued: Vec<Enrolled> = self
            .enrolled()?
            .into_iter()
            .filter(|e| e.name == name)
            .collect();
        if issued.is_empty() {
            return Err(CredentialError::NotEnrolled(name.to_string()));
        }
        let path = self.dir.join("revoked.toml");
        let mut list: RevokedFile = read_toml(&path)?;
        let mut added = 0;
        for e in issued {
            if !list.revoked.iter().any(|r| r.fingerprint == e.fingerprint) {
                list.revoked.push(e);
                added += 1;
            }
        }
        write_toml(&path, &list)?;
        Ok(added)
    }

    /// The revocation list the running edge checks at each handshake.
    pub fn revocations(&self) -> Arc<Revocations> {
        Arc::new(Revocations::new(self.dir.join("revoked.toml")))
    }

    /// The enrolled name of a client certificate, if it is one this edge issued.
    pub fn name_of(&self, cert_der: &[u8]) -> Option<String> {
        let fp = fingerprint(cert_der);
        self.enrolled()
            .ok()?
            .into_iter()
            .find(|e| e.fingerprint == fp)
            .map(|e| e.name)
    }
}

/// 16 random bytes for a certificate serial (rcgen has no serial generator of its own).
fn random_serial(out: &mut [u8; 16]) -> Result<(), CredentialError> {
    use ring::rand::SecureRandom;
    ring::rand::SystemRandom::new()
        .fill(out)
        .map_err(|_| CredentialError::Rcgen(rcgen::Error::RingUnspecified))?;
    // Positive, as X.509 wants.
    out[0] &= 0x7f;
    Ok(())
}

fn read_toml<T: Default + for<'de> Deserialize<'de>>(path: &Path) -> Result<T, CredentialError> {
    match fs::read_to_string(path) {
        Ok(text) => toml::from_str(&text).map_err(|e| invalid(path, e.to_string())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(T::default()),
        Err(e) => Err(io_err(path)(e)),
    }
}

fn write_toml<T: Serialize>(path: &Path, value: &T) -> Result<(), CredentialError> {
    let text = toml::to_string(value).map_err(|e| invalid(path, e.to_string()))?;
    write_file(path, text.as_bytes(), false)
}

/// The revoked fingerprints, re-read whenever `revoked.toml` changes (its modification time
/// or size), so that `webpep server revoke` takes effect at the next handshake.
#[derive(Debug)]
pub struct Revocations {
    path: PathBuf,
    cache: Mutex<RevokedCache>,
}

/// The list as last read, and the file's (modification time, size) then.
type RevokedCache = (Option<(SystemTime, u64)>, HashSet<String>);

impl Revocations {
    pub fn new(path: PathBuf) -> Self {
        Revocations {
            path,
            cache: Mutex::new((None, HashSet::new())),
        }
    }

    /// Whether the certificate with this DER is revoked. A list that cannot be read or parsed
    /// revokes everything (fail closed) and says why in the log.
    pub fn is_revoked(&self, cert_der: &[u8]) -> bool {
        self.is_revoked_fingerprint(&fingerprint(cert_der))
    }

    /// Whether the certificate with this fingerprint ([`fingerprint`]) is revoked.
    pub fn is_revoked_fingerprint(&self, fp: &str) -> bool {
        let stamp = fs::metadata(&self.path)
            .ok()
            .map(|m| (m.modified().unwrap_or(UNIX_EPOCH), m.len()));
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if cache.0 != stamp || stamp.is_none() {
            match read_toml::<RevokedFile>(&self.path) {
                Ok(list) => {
                    cache.1 = list.revoked.into_iter().map(|e| e.fingerprint).collect();
                    cache.0 = stamp;
                }
                Err(e) => {
                    tracing::error!("revocation list unreadable, refusing every client: {e}");
                    return true;
                }
            }
        }
        cache.1.contains(fp)
    }
}

/// What `webpep client` needs to reach its edge: its name, the edge's CA (pinned), and its
/// certificate and key. Written as one TOML file, mode 0600.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Credential {
    pub name: String,
    pub edge_ca: String,
    pub cert: String,
    pub key: String,
}

impl Credential {
    /// Writes the credential (mode 0600 from the start).
    pub fn write(&self, path: &Path) -> Result<(), CredentialError> {
        let text = toml::to_string(self).map_err(|e| invalid(path, e.to_string()))?;
        let text = format!(
            "# webpep client credential for {:?}: keep it private (it is the client's key)\n{text}",
            self.name
        );
        write_file(path, text.as_bytes(), true)
    }

    /// Reads a credential, refusing one other users can read.
    pub fn load(path: &Path) -> Result<Credential, CredentialError> {
        let text = read_private(path)?;
        let cred: Credential = toml::from_str(&text).map_err(|e| invalid(path, e.to_string()))?;
        cert_from_pem(path, &cred.edge_ca)?;
        cert_from_pem(path, &cred.cert)?;
        key_from_pem(path, &cred.key)?;
        Ok(cred)
    }

    pub fn edge_ca_der(&self) -> Result<CertificateDer<'static>, CredentialError> {
        cert_from_pem(Path::new("credential"), &self.edge_ca)
    }

    pub fn cert_der(&self) -> Result<CertificateDer<'static>, CredentialError> {
        cert_from_pem(Path::new("credential"), &self.cert)
    }

    pub fn key_der(&self) -> Result<PrivateKeyDer<'static>, CredentialError> {
        key_from_pem(Path::new("credential"), &self.key)
    }
}
