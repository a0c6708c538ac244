//! A certificate authority kept in a directory: `ca.pem` (the certificate browsers trust) and
//! `ca-key.pem` (its private key, mode 0600), and the leaf certificates it issues.

use std::fs;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, DnValue,
    ExtendedKeyUsagePurpose, IsCa, KeyIdMethod, KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use sha2::{Digest, Sha256};
use time::{Duration, OffsetDateTime};

use crate::der::{self, Attribute, CertFields};

/// The CA certificate's file in a CA directory.
pub const CA_CERT_FILE: &str = "ca.pem";
/// The CA private key's file in a CA directory (mode 0600).
pub const CA_KEY_FILE: &str = "ca-key.pem";

/// How long a new CA is valid.
const CA_VALIDITY_DAYS: i64 = 3650;
/// How long an issued leaf is valid at most, counted from its notBefore: Apple's and Chrome's
/// limit for publicly trusted leaves is 398 days, and both apply it to user-installed roots too.
const LEAF_VALIDITY_DAYS: i64 = 397;

#[derive(Debug, thiserror::Error)]
pub enum CaError {
    #[error("{path}: {source}", path = path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} does not exist: run `webpep client ca init` to create the CA", path = path.display())]
    Missing { path: PathBuf },
    #[error(
        "{path} already exists: a CA is already installed there; replace it only on purpose \
         (`--force`), since browsers that trust the old CA will then reject webpep's certificates",
        path = path.display()
    )]
    Exists { path: PathBuf },
    #[error(
        "{path} can be read by other users (mode {mode:04o}); it is the CA's private key, \
         with which anyone can impersonate any web site to this machine's browsers: chmod 600 {path}",
        path = path.display()
    )]
    KeyPermissions { path: PathBuf, mode: u32 },
    #[error("{path}: {source}", path = path.display())]
    InFile { path: PathBuf, source: Box<CaError> },
    #[error("CA certificate: {0}")]
    Certificate(String),
    #[error("CA key: {0}")]
    Key(String),
    #[error("the CA key does not belong to the CA certificate (their public keys differ)")]
    KeyMismatch,
    #[error("the certificate is not a CA certificate: {0}")]
    NotACa(&'static str),
    #[error("the CA certificate is valid from {not_before} to {not_after}, not now: create a new CA (`webpep client ca init --force`) and trust it instead")]
    NotValidNow {
        not_before: OffsetDateTime,
        not_after: OffsetDateTime,
    },
    #[error("no names to put in the certificate")]
    NoNames,
    #[error("{0:?} is neither a valid host name nor an IP address")]
    InvalidHost(String),
    #[error("certificate generation: {0}")]
    Rcgen(#[from] rcgen::Error),
    #[error("TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
}

/// A certificate issued by a [`CaStore`], with its private key.
pub struct IssuedCert {
    /// The leaf certificate (the chain a server sends; the CA itself is not sent).
    pub chain: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
    pub cert_pem: String,
    pub key_pem: String,
}

/// A CA: an ECDSA P-256 key (when webpep made it) and its self-signed certificate.
pub struct CaStore {
    key: KeyPair,
    /// The CA as rcgen's issuer: same key, the exact subject bytes and the same key identifier
    /// as the certificate, so the leaves it signs chain to `cert_der`.
    issuer: rcgen::Certificate,
    /// Whether the certificate has a subject key identifier, which leaves then reference.
    has_key_id: bool,
    cert_pem: String,
    cert_der: CertificateDer<'static>,
    not_before: OffsetDateTime,
    not_after: OffsetDateTime,
}

impl std::fmt::Debug for CaStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaStore")
            .field("fingerprint", &self.fingerprint())
            .field("not_after", &self.not_after)
            .finish_non_exhaustive()
    }
}

impl CaStore {
    /// A new CA named `common_name` with a new ECDSA P-256 key, valid for ten years from a day
    /// ago; kept in memory until [`CaStore::write`].
    pub fn generate(common_name: &str) -> Result<CaStore, CaError> {
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, common_name);
        dn.push(DnType::OrganizationName, "webpep");
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let now = OffsetDateTime::now_utc();
        params.not_before = now - Duration::days(1);
        params.not_after = now + Duration::days(CA_VALIDITY_DAYS);
        let cert = params.self_signed(&key)?;
        CaStore::from_pem(&cert.pem(), &key.serialize_pem())
    }

    /// Creates `dir` (0700 when it is new) with a new CA: `ca.pem` and `ca-key.pem`, the key
    /// created with mode 0600. Refuses to replace an existing CA unless `force`.
    pub fn init(dir: &Path, force: bool) -> Result<CaStore, CaError> {
        create_private_dir(dir)?;
        let ca = CaStore::generate(&installation_name())?;
        ca.write(dir, force)?;
        Ok(ca)
    }

    /// Loads `dir/ca.pem` and `dir/ca-key.pem`, refusing a key file that other users can read
    /// or write.
    pub fn load(dir: &Path) -> Result<CaStore, CaError> {
        let cert_path = dir.join(CA_CERT_FILE);
        let key_path = dir.join(CA_KEY_FILE);
        for path in [&cert_path, &key_path] {
            if !path.exists() {
                return Err(CaError::Missing { path: path.clone() });
            }
        }
        let key_pem = webpep_files::read_private(&key_path).map_err(|e| match e {
            webpep_files::FileError::TooOpen { path, mode } => {
                CaError::KeyPermissions { path, mode }
            }
            webpep_files::FileError::Io { path, source } => CaError::Io { path, source },
        })?;
        let cert_pem = fs::read_to_string(&cert_path).map_err(|source| CaError::Io {
            path: cert_path.clone(),
            source,
        })?;
        let in_file = |path: &Path| {
            let path = path.to_path_buf();
            move |e: CaError| CaError::InFile {
                path,
                source: Box::new(e),
            }
        };
        let key = parse_key(&key_pem).map_err(in_file(&key_path))?;
        let cert = parse_cert(&cert_pem).map_err(in_file(&cert_path))?;
        CaStore::from_parts(key, cert).map_err(in_file(&cert_path))
    }

    /// Parses a CA from PEM: `cert_pem` holds exactly one certificate, `key_pem` its PKCS#8
    /// private key. Checks that the certificate is a CA that may sign certificates and that
    /// the key is the certificate's.
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<CaStore, CaError> {
        let cert = parse_cert(cert_pem)?;
        let key = parse_key(key_pem)?;
        CaStore::from_parts(key, cert)
    }

    fn from_parts(
        key: KeyPair,
        (cert_der, fields): (CertificateDer<'static>, CertFields),
    ) -> Result<CaStore, CaError> {
        if !fields.is_ca {
            return Err(CaError::NotACa("basicConstraints does not say cA"));
        }
        if !fields.may_sign_certs {
            return Err(CaError::NotACa("its key usage does not allow keyCertSign"));
        }
        if key.public_key_der() != fields.spki_der {
            return Err(CaError::KeyMismatch);
        }
        let mut params = CertificateParams::default();
        params.distinguished_name = distinguished_name(&fields.subject)?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        if let Some(id) = &fields.subject_key_id {
            params.key_identifier_method = KeyIdMethod::PreSpecified(id.clone());
        }
        let issuer = params.self_signed(&key)?;
        // rcgen re-encodes the subject; a leaf chains only if its issuer is byte-identical.
        let encoded =
            der::read_certificate(issuer.der()).map_err(|e| CaError::Certificate(e.to_string()))?;
        if encoded.subject_der != fields.subject_der {
            return Err(CaError::Certificate(
                "its subject uses an encoding webpep cannot reproduce in the certificates it \
                 issues"
                    .into(),
            ));
        }
        Ok(CaStore {
            key,
            issuer,
            has_key_id: fields.subject_key_id.is_some(),
            cert_pem: encode_pem(&cert_der),
            cert_der,
            not_before: fields.not_before,
            not_after: fields.not_after,
        })
    }

    /// Writes `dir/ca-key.pem` (created with mode 0600) and `dir/ca.pem` into an existing
    /// directory. Refuses to replace either file unless `force`.
    pub fn write(&self, dir: &Path, force: bool) -> Result<(), CaError> {
        let key_path = dir.join(CA_KEY_FILE);
        let cert_path = dir.join(CA_CERT_FILE);
        if !force {
            if let Some(path) = [&key_path, &cert_path].into_iter().find(|p| p.exists()) {
                return Err(CaError::Exists { path: path.clone() });
            }
        }
        write_file(
            &key_path,
            self.key.serialize_pem().as_bytes(),
            webpep_files::Access::Private,
        )?;
        self.write_cert(dir).map(|_| ())
    }

    /// Writes only `dir/ca.pem` (what browsers and clients need), replacing it, and returns its
    /// path.
    pub fn write_cert(&self, dir: &Path) -> Result<PathBuf, CaError> {
        let path = dir.join(CA_CERT_FILE);
        write_file(
            &path,
            self.cert_pem.as_bytes(),
            webpep_files::Access::Public,
        )?;
        Ok(path)
    }

    /// The CA certificate, PEM.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The CA certificate, DER (for a `rustls::RootCertStore`).
    pub fn cert_der(&self) -> CertificateDer<'static> {
        self.cert_der.clone()
    }

    /// SHA-256 of the DER certificate as browsers show it: upper-case hex pairs joined by ':'.
    pub fn fingerprint(&self) -> String {
        let digest = Sha256::digest(self.cert_der.as_ref());
        let pairs: Vec<String> = digest.iter().map(|b| format!("{b:02X}")).collect();
        pairs.join(":")
    }

    /// When the CA certificate stops being valid.
    pub fn not_after(&self) -> OffsetDateTime {
        self.not_after
    }

    /// Issues a server certificate for `names` (DNS names or IP literals; all go in the SAN
    /// list, the first is also the common name) with a new ECDSA P-256 key: serverAuth only,
    /// valid from a day ago (clocks differ) for at most 397 days and never beyond the CA.
    pub fn issue(&self, names: &[String]) -> Result<IssuedCert, CaError> {
        let first = names.first().ok_or(CaError::NoNames)?;
        let now = OffsetDateTime::now_utc();
        if now < self.not_before || now >= self.not_after {
            return Err(CaError::NotValidNow {
                not_before: self.not_before,
                not_after: self.not_after,
            });
        }
        let mut params = CertificateParams::new(names.to_vec())?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, first.as_str());
        params.distinguished_name = dn;
        params.is_ca = IsCa::NoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = self.has_key_id;
        params.not_before = (now - Duration::days(1)).max(self.not_before);
        params.not_after =
            (params.not_before + Duration::days(LEAF_VALIDITY_DAYS)).min(self.not_after);
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
        let cert = params.signed_by(&key, &self.issuer, &self.key)?;
        Ok(IssuedCert {
            chain: vec![cert.der().clone()],
            key: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

/// A name that tells one installation's CA from another's in a browser's certificate list (and
/// so which to remove): derived from the time it was made, which needs no host name lookup.
fn installation_name() -> String {
    let now = OffsetDateTime::now_utc();
    format!(
        "webpep interception CA {:04}-{:02}-{:02} {:02}{:02}{:02}",
        now.year(),
        u8::from(now.month()),
        now.day(),
        now.hour(),
        now.minute(),
        now.second()
    )
}

fn parse_cert(pem_text: &str) -> Result<(CertificateDer<'static>, CertFields), CaError> {
    let blocks = pem::parse_many(pem_text).map_err(|e| CaError::Certificate(e.to_string()))?;
    let mut certs = blocks.into_iter().filter(|b| b.tag() == "CERTIFICATE");
    let der = match (certs.next(), certs.next()) {
        (Some(cert), None) => cert.into_contents(),
        (None, _) => return Err(CaError::Certificate("no CERTIFICATE block".into())),
        (Some(_), Some(_)) => {
            return Err(CaError::Certificate(
                "more than one certificate: a CA file holds only the CA's".into(),
            ))
        }
    };
    let fields = der::read_certificate(&der).map_err(|e| CaError::Certificate(e.to_string()))?;
    Ok((CertificateDer::from(der), fields))
}

fn parse_key(pem_text: &str) -> Result<KeyPair, CaError> {
    let blocks = pem::parse_many(pem_text).map_err(|e| CaError::Key(e.to_string()))?;
    let block = blocks
        .into_iter()
        .find(|b| b.tag() == "PRIVATE KEY")
        .ok_or_else(|| CaError::Key("no PKCS#8 PRIVATE KEY block".into()))?;
    KeyPair::try_from(block.contents()).map_err(|e| CaError::Key(e.to_string()))
}

/// rcgen's form of a subject read from a certificate. Only what it can write back is accepted
/// (one attribute per RDN, each attribute type once, three string types); the caller checks
/// that the re-encoding is byte-identical.
fn distinguished_name(rdns: &[Vec<Attribute>]) -> Result<DistinguishedName, CaError> {
    let unsupported = |what: &str| {
        CaError::Certificate(format!(
            "its subject has {what}, which webpep cannot reproduce in the certificates it issues"
        ))
    };
    let mut dn = DistinguishedName::new();
    for rdn in rdns {
        let [attr] = rdn.as_slice() else {
            return Err(unsupported("a multi-valued or empty RDN"));
        };
        let ty = DnType::from_oid(&attr.oid);
        if dn.get(&ty).is_some() {
            return Err(unsupported("an attribute type twice"));
        }
        let text =
            std::str::from_utf8(&attr.value).map_err(|_| unsupported("a non-UTF-8 value"))?;
        let value = match attr.tag {
            0x0c => DnValue::Utf8String(text.to_string()),
            0x13 => DnValue::PrintableString(
                text.try_into()
                    .map_err(|_| unsupported("an invalid PrintableString"))?,
            ),
            0x16 => DnValue::Ia5String(
                text.try_into()
                    .map_err(|_| unsupported("an invalid IA5String"))?,
            ),
            _ => return Err(unsupported("a value of an unusual string type")),
        };
        dn.push(ty, value);
    }
    Ok(dn)
}

fn encode_pem(der: &[u8]) -> String {
    pem::encode_config(
        &pem::Pem::new("CERTIFICATE", der.to_vec()),
        pem::EncodeConfig::new().set_line_ending(pem::LineEnding::LF),
    )
}

fn create_private_dir(dir: &Path) -> Result<(), CaError> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder.create(dir).map_err(|source| CaError::Io {
        path: dir.to_path_buf(),
        source,
    })
}

fn write_file(path: &Path, bytes: &[u8], access: webpep_files::Access) -> Result<(), CaError> {
    webpep_files::write_atomic(path, bytes, access).map_err(|e| match e {
        webpep_files::FileError::Io { path, source } => CaError::Io { path, source },
        other => CaError::Io {
            path: path.to_path_buf(),
            source: std::io::Error::other(other.to_string()),
        },
    })
}
