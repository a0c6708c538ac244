#![no_main]
//! The TLS relay's ClientHello reader: arbitrary bytes → incomplete, a server name, or an
//! error. Nothing may panic; a name it returns is a lower-case host name, and a prefix of a
//! complete hello is never read as a different one.

use libfuzzer_sys::fuzz_target;
use webpep_server::tls_relay::{parse_client_hello, Hello};

fuzz_target!(|data: &[u8]| {
    let whole = parse_client_hello(data);
    if let Ok(Hello::Complete {
        server_name: Some(name),
    }) = &whole
    {
        assert!(!name.is_empty() && name.len() <= 253);
        assert!(name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.".contains(&b)));
        assert!(name.parse::<std::net::IpAddr>().is_err());
    }
    // Any prefix is either still incomplete or already decided the same way.
    let cut = data.len() / 2;
    match parse_client_hello(&data[..cut]) {
        Ok(Hello::Incomplete) => {}
        prefix => assert_eq!(prefix, whole, "prefix of {} bytes", cut),
    }
});
