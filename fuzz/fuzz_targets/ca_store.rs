#![no_main]
//! The CA store's parser (`CaStore::from_pem`): the input up to its first 0 byte as the
//! certificate's PEM text, the rest as the key's (both UTF-8, lossy). Nothing may panic; a CA
//! that parses reads back from its own PEM with the same fingerprint and issues a leaf (or
//! says why not) without panicking.

use libfuzzer_sys::fuzz_target;
use webpep_intercept::CaStore;

fuzz_target!(|data: &[u8]| {
    let (cert, key) = match data.iter().position(|&b| b == 0) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &[][..]),
    };
    let cert = String::from_utf8_lossy(cert);
    let key = String::from_utf8_lossy(key);
    if let Ok(ca) = CaStore::from_pem(&cert, &key) {
        let again = CaStore::from_pem(ca.cert_pem(), &key).expect("a parsed CA reads back");
        assert_eq!(again.fingerprint(), ca.fingerprint());
        let _ = ca.issue(&["fuzz.example".to_string(), "192.0.2.1".to_string()]);
    }
});
