//! The CA directory, the certificate-store parser, leaf certificates and the leaf cache.

use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
use rustls::client::danger::ServerCertVerifier;
use rustls::pki_types::{ServerName, UnixTime};
use webpep_intercept::{provider, CaError, CaStore, LeafCache};

fn mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// The process's umask, which decides a public file's mode (Linux reports it in /proc).
fn umask() -> u32 {
    let status = fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("Umask:")).unwrap();
    u32::from_str_radix(line["Umask:".len()..].trim(), 8).unwrap()
}

fn roots(ca: &CaStore) -> Arc<rustls::RootCertStore> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.cert_der()).unwrap();
    Arc::new(roots)
}

fn verify(
    ca: &CaStore,
    leaf: &rustls::pki_types::CertificateDer<'_>,
    name: &str,
) -> Result<(), rustls::Error> {
    let verifier =
        rustls::client::WebPkiServerVerifier::builder_with_provider(roots(ca), provider())
            .build()
            .unwrap();
    let name = ServerName::try_from(name.to_string()).unwrap();
    verifier
        .verify_server_cert(leaf, &[], &name, &[], UnixTime::now())
        .map(|_| ())
}

#[test]
fn init_writes_the_key_0600_and_the_certificate_public() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("nested").join("ca");
    let ca = CaStore::init(&dir, false).unwrap();
    assert_eq!(mode(&dir), 0o700 & !umask());
    assert_eq!(mode(&dir.join("ca-key.pem")), 0o600);
    assert_eq!(mode(&dir.join("ca.pem")), 0o666 & !umask());
    assert_eq!(
        fs::read_to_string(dir.join("ca.pem")).unwrap(),
        ca.cert_pem()
    );
    assert!(fs::read_to_string(dir.join("ca-key.pem"))
        .unwrap()
        .contains("BEGIN PRIVATE KEY"));
    // Nothing else is left in the directory (no temporary files).
    assert_eq!(fs::read_dir(&dir).unwrap().count(), 2);
}

#[test]
fn init_refuses_to_replace_a_ca_unless_forced() {
    let tmp = tempfile::tempdir().unwrap();
    let first = CaStore::init(tmp.path(), false).unwrap();
    let err = CaStore::init(tmp.path(), false).unwrap_err();
    assert!(matches!(err, CaError::Exists { .. }), "{err}");
    assert!(err.to_string().contains("ca-key.pem"), "{err}");
    assert_eq!(
        CaStore::load(tmp.path()).unwrap().fingerprint(),
        first.fingerprint()
    );
    // A lone certificate counts too.
    fs::remove_file(tmp.path().join("ca-key.pem")).unwrap();
    assert!(matches!(
        CaStore::init(tmp.path(), false),
        Err(CaError::Exists { .. })
    ));
    let second = CaStore::init(tmp.path(), true).unwrap();
    assert_ne!(second.fingerprint(), first.fingerprint());
    assert_eq!(mode(&tmp.path().join("ca-key.pem")), 0o600);
    assert_eq!(
        CaStore::load(tmp.path()).unwrap().fingerprint(),
        second.fingerprint()
    );
}

#[test]
fn load_refuses_a_key_others_can_read() {
    let tmp = tempfile::tempdir().unwrap();
    CaStore::init(tmp.path(), false).unwrap();
    let key = tmp.path().join("ca-key.pem");
    for wide in [0o644, 0o640, 0o604, 0o620] {
        fs::set_permissions(&key, fs::Permissions::from_mode(wide)).unwrap();
        let err = CaStore::load(tmp.path()).unwrap_err();
        match &err {
            CaError::KeyPermissions { path, mode } => {
                assert_eq!((path.as_path(), *mode), (key.as_path(), wide));
            }
            other => panic!("{other}"),
        }
        let message = err.to_string();
        assert!(
            message.contains(&format!("chmod 600 {}", key.display())),
            "{message}"
        );
    }
    fs::set_permissions(&key, fs::Permissions::from_mode(0o400)).unwrap();
    CaStore::load(tmp.path()).expect("a read-only key is fine");
}

#[test]
fn load_round_trips_and_names_missing_files() {
    let tmp = tempfile::tempdir().unwrap();
    let err = CaStore::load(tmp.path()).unwrap_err();
    assert!(matches!(err, CaError::Missing { .. }));
    assert!(err.to_string().contains("webpep client ca init"), "{err}");
    assert!(err.to_string().contains("ca.pem"), "{err}");

    let made = CaStore::init(tmp.path(), false).unwrap();
    let loaded = CaStore::load(tmp.path()).unwrap();
    assert_eq!(loaded.fingerprint(), made.fingerprint());
    assert_eq!(loaded.cert_pem(), made.cert_pem());
    let fp = loaded.fingerprint();
    assert_eq!(fp.len(), 32 * 3 - 1);
    assert!(fp.split(':').all(|pair| pair.len() == 2
        && pair
            .bytes()
            .all(|b| b.is_ascii_digit() || b.is_ascii_uppercase())));

    // The loaded CA issues leaves that the certificate written at init verifies.
    let leaf = loaded.issue(&["www.example.com".into()]).unwrap();
    verify(&made, &leaf.chain[0], "www.example.com").unwrap();

    // A damaged file is named in the error.
    fs::write(tmp.path().join("ca.pem"), "garbage").unwrap();
    let err = CaStore::load(tmp.path()).unwrap_err();
    assert!(err.to_string().contains("ca.pem"), "{err}");
}

#[test]
fn from_pem_rejects_garbage_non_cas_and_foreign_keys() {
    let ca = CaStore::generate("test CA").unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = {
        let mut p = CertificateParams::default();
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.self_signed(&key).unwrap()
    };
    CaStore::from_pem(&cert.pem(), &key.serialize_pem()).expect("a self-made CA parses");

    let garbage = [
        "",
        "garbage",
        "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
    ];
    for text in garbage {
        let err = CaStore::from_pem(text, &key.serialize_pem()).unwrap_err();
        assert!(matches!(err, CaError::Certificate(_)), "{text:?}: {err}");
        let err = CaStore::from_pem(&cert.pem(), text).unwrap_err();
        assert!(matches!(err, CaError::Key(_)), "{text:?}: {err}");
    }
    let two = format!("{}{}", cert.pem(), ca.cert_pem());
    assert!(matches!(
        CaStore::from_pem(&two, &key.serialize_pem()),
        Err(CaError::Certificate(_))
    ));

    // A leaf is not a CA, even with the right key.
    let leaf = ca.issue(&["leaf.example".into()]).unwrap();
    let err = CaStore::from_pem(&leaf.cert_pem, &leaf.key_pem).unwrap_err();
    assert!(matches!(err, CaError::NotACa(_)), "{err}");
    // cA set but keyCertSign not allowed.
    let limited = {
        let mut p = CertificateParams::default();
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        p.self_signed(&key).unwrap()
    };
    let err = CaStore::from_pem(&limited.pem(), &key.serialize_pem()).unwrap_err();
    assert!(matches!(err, CaError::NotACa(_)), "{err}");
    let explicit_no = {
        let mut p = CertificateParams::default();
        p.is_ca = IsCa::ExplicitNoCa;
        p.self_signed(&key).unwrap()
    };
    assert!(matches!(
        CaStore::from_pem(&explicit_no.pem(), &key.serialize_pem()),
        Err(CaError::NotACa(_))
    ));

    // The key of another CA.
    let err = CaStore::from_pem(ca.cert_pem(), &key.serialize_pem()).unwrap_err();
    assert!(matches!(err, CaError::KeyMismatch), "{err}");
}

#[test]
fn a_ca_with_a_foreign_subject_issues_leaves_that_chain() {
    // A subject with PrintableString and IA5String values and no key identifier, as other
    // tools write them: leaves must carry the byte-identical issuer name.
    let key = KeyPair::generate().unwrap();
    let mut p = CertificateParams::default();
    p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    p.distinguished_name = rcgen::DistinguishedName::new();
    p.distinguished_name.push(
        DnType::CountryName,
        rcgen::DnValue::PrintableString("SE".try_into().unwrap()),
    );
    p.distinguished_name
        .push(DnType::OrganizationName, "Åkerö AB");
    p.distinguished_name.push(
        DnType::CustomDnType(vec![1, 2, 840, 113549, 1, 9, 1]),
        rcgen::DnValue::Ia5String("ca@example.com".try_into().unwrap()),
    );
    let cert = p.self_signed(&key).unwrap();
    let ca = CaStore::from_pem(&cert.pem(), &key.serialize_pem()).unwrap();
    let leaf = ca
        .issue(&["shop.example".into(), "10.1.2.3".into()])
        .unwrap();
    verify(&ca, &leaf.chain[0], "shop.example").unwrap();
    verify(&ca, &leaf.chain[0], "10.1.2.3").unwrap();
}

#[test]
fn a_leaf_verifies_for_its_host_only() {
    let ca = CaStore::generate("test CA").unwrap();
    let leaf = ca.issue(&["www.cnn.com".into(), "cnn.com".into()]).unwrap();
    verify(&ca, &leaf.chain[0], "www.cnn.com").unwrap();
    verify(&ca, &leaf.chain[0], "cnn.com").unwrap();
    let err = verify(&ca, &leaf.chain[0], "www.bbc.co.uk").unwrap_err();
    assert!(
        matches!(
            err,
            rustls::Error::InvalidCertificate(rustls::CertificateError::NotValidForName)
                | rustls::Error::InvalidCertificate(
                    rustls::CertificateError::NotValidForNameContext { .. }
                )
        ),
        "{err:?}"
    );
    // Another CA does not vouch for it.
    let other = CaStore::generate("other CA").unwrap();
    assert!(verify(&other, &leaf.chain[0], "www.cnn.com").is_err());
    assert!(matches!(ca.issue(&[]), Err(CaError::NoNames)));
}

#[test]
fn a_leaf_is_valid_from_a_day_ago_for_at_most_397_days() {
    let ca = CaStore::generate("test CA").unwrap();
    let leaf = ca.issue(&["a.example".into()]).unwrap();
    // The window's edges, a minute either side, as a verifier sees them.
    let now = UnixTime::now().as_secs();
    let day = 86_400;
    let verifier =
        rustls::client::WebPkiServerVerifier::builder_with_provider(roots(&ca), provider())
            .build()
            .unwrap();
    let name = ServerName::try_from("a.example").unwrap();
    let at = |secs: u64| {
        verifier.verify_server_cert(
            &leaf.chain[0],
            &[],
            &name,
            &[],
            UnixTime::since_unix_epoch(std::time::Duration::from_secs(secs)),
        )
    };
    at(now - day + 60).expect("valid a day ago");
    at(now - day - 60).expect_err("not before a day ago");
    at(now + 396 * day - 60).expect("valid 397 days from its start");
    at(now + 396 * day + 60).expect_err("not beyond 397 days from its start");
}

/// Moves what `from` has to send into `to`, which processes it.
fn pump<A, B>(
    from: &mut rustls::ConnectionCommon<A>,
    to: &mut rustls::ConnectionCommon<B>,
) -> Result<(), rustls::Error> {
    let mut buf = Vec::new();
    from.write_tls(&mut buf).unwrap();
    let mut slice = buf.as_slice();
    while !slice.is_empty() {
        to.read_tls(&mut slice).unwrap();
    }
    to.process_new_packets().map(|_| ())
}

/// Runs a TLS handshake between `client` and `server` in memory, flight by flight.
fn handshake(
    client: &mut rustls::ClientConnection,
    server: &mut rustls::ServerConnection,
) -> Result<(), rustls::Error> {
    for _ in 0..10 {
        if !client.is_handshaking() && !server.is_handshaking() {
            return Ok(());
        }
        pump(client, server)?;
        pump(server, client)?;
    }
    panic!("the handshake did not finish");
}

fn client_config(
    ca: &CaStore,
    alpn: &[&[u8]],
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> Arc<rustls::ClientConfig> {
    let mut config = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(versions)
        .unwrap()
        .with_root_certificates(roots(ca))
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(config)
}

#[test]
fn an_in_memory_handshake_negotiates_h2_with_a_minted_leaf() {
    let ca = Arc::new(CaStore::generate("test CA").unwrap());
    let leaves = LeafCache::new(ca.clone(), 16);
    let server_config = leaves.server_config("www.example.com").unwrap();
    use rustls::version::{TLS12, TLS13};
    // What the client offers, over which version, and what is negotiated.
    type Case = (
        &'static [&'static [u8]],
        &'static rustls::SupportedProtocolVersion,
        Option<&'static [u8]>,
    );
    let cases: [Case; 5] = [
        (&[b"h2", b"http/1.1"], &TLS13, Some(b"h2")),
        (&[b"http/1.1", b"h2"], &TLS13, Some(b"h2")),
        (&[b"h2", b"http/1.1"], &TLS12, Some(b"h2")),
        (&[b"http/1.1"], &TLS13, Some(b"http/1.1")),
        (&[], &TLS13, None),
    ];
    for (alpn, version, expected) in cases {
        let mut client = rustls::ClientConnection::new(
            client_config(&ca, alpn, &[version]),
            ServerName::try_from("www.example.com").unwrap(),
        )
        .unwrap();
        let mut server = rustls::ServerConnection::new(server_config.clone()).unwrap();
        handshake(&mut client, &mut server).unwrap();
        assert_eq!(client.alpn_protocol(), expected, "{alpn:?}");
        assert_eq!(server.server_name(), Some("www.example.com"));
        client
            .writer()
            .write_all(b"GET / HTTP/1.1\r\n\r\n")
            .unwrap();
        pump(&mut client, &mut server).unwrap();
        let mut got = [0u8; 18];
        server.reader().read_exact(&mut got).unwrap();
        assert_eq!(&got, b"GET / HTTP/1.1\r\n\r\n");
    }

    // A client that asks for another host rejects the leaf.
    let mut client = rustls::ClientConnection::new(
        client_config(&ca, &[b"h2"], &[&rustls::version::TLS13]),
        ServerName::try_from("www.other.example").unwrap(),
    )
    .unwrap();
    let mut server = rustls::ServerConnection::new(server_config).unwrap();
    let err = handshake(&mut client, &mut server).unwrap_err();
    assert!(
        matches!(err, rustls::Error::InvalidCertificate(_)),
        "{err:?}"
    );
}

#[test]
fn the_leaf_cache_mints_once_per_host_and_evicts_the_least_recently_used() {
    let ca = Arc::new(CaStore::generate("test CA").unwrap());
    let leaves = LeafCache::new(ca, 2);
    let a = leaves.server_config("a.example").unwrap();
    let again = leaves.server_config("A.Example.").unwrap();
    assert!(Arc::ptr_eq(&a, &again));
    assert_eq!(leaves.minted(), 1);

    leaves.server_config("b.example").unwrap();
    assert_eq!(leaves.minted(), 2);
    // a was used more recently than b, so c evicts b.
    leaves.server_config("a.example").unwrap();
    leaves.server_config("c.example").unwrap();
    assert_eq!((leaves.minted(), leaves.len()), (3, 2));
    assert!(Arc::ptr_eq(&a, &leaves.server_config("a.example").unwrap()));
    assert_eq!(leaves.minted(), 3);
    leaves.server_config("b.example").unwrap();
    assert_eq!((leaves.minted(), leaves.len()), (4, 2));

    // IP literals get a leaf of their own; names that are neither are refused.
    leaves.server_config("192.0.2.7").unwrap();
    leaves.server_config("[2001:db8::7]").unwrap();
    assert_eq!(leaves.minted(), 6);
    for bad in [
        "",
        "*.example.com",
        "bad_name.example",
        "a..b",
        "example.com:443",
    ] {
        let err = leaves.server_config(bad).unwrap_err();
        assert!(matches!(err, CaError::InvalidHost(_)), "{bad:?}: {err}");
    }
    assert_eq!(leaves.minted(), 6);
}

#[test]
fn the_leaf_cache_is_shared_across_threads() {
    let ca = Arc::new(CaStore::generate("test CA").unwrap());
    let leaves = Arc::new(LeafCache::new(ca, 100));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let leaves = leaves.clone();
            std::thread::spawn(move || {
                for i in 0..10 {
                    leaves.server_config(&format!("h{i}.example")).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(leaves.minted(), 10);
}

#[test]
fn an_issued_certificates_expiry_reads_as_it_was_issued() {
    let ca = CaStore::generate("test CA").unwrap();
    let leaf = ca.issue(&["origin.example".to_string()]).unwrap();
    let expiry = webpep_intercept::certificate_expiry(&leaf.chain[0]).unwrap();
    let days = expiry
        .duration_since(std::time::SystemTime::now())
        .unwrap()
        .as_secs()
        / 86_400;
    // Issued from a day ago for 397 days.
    assert_eq!(days, 395);
    assert_eq!(
        webpep_intercept::certificate_expiry(b"not a certificate"),
        None
    );
}
