#![no_main]
//! The edge proxy's authentication parsers on untrusted input: any client's
//! `Proxy-Authorization` value (Basic credentials), a PHC hash string and a users file.
//! Nothing may panic; what parses must survive a round trip.

use base64::Engine as _;
use libfuzzer_sys::fuzz_target;
use webpep_server::auth::{parse_basic, parse_users, PasswordHash};

fuzz_target!(|data: &[u8]| {
    // Basic credentials: whatever parses, encoded again, parses to the same.
    if let Ok(c) = parse_basic(data) {
        let token =
            base64::engine::general_purpose::STANDARD.encode(format!("{}:{}", c.user, c.password));
        let again = parse_basic(format!("Basic {token}").as_bytes()).expect("re-encoded");
        assert_eq!(again, c);
        assert!(!c.user.contains(':'), "the user-id ends at the first colon");
    }
    if let Ok(text) = std::str::from_utf8(data) {
        // A hash string: a parsed one prints back to a string that parses to the same.
        if let Ok(h) = PasswordHash::parse(text) {
            let phc = h.to_phc();
            assert!(PasswordHash::parse(&phc).expect("printed hash parses") == h);
        }
        // A users file: parsed or refused naming a line, never a panic (no hash is computed).
        let _ = parse_users(text);
    }
});
