//! Custom TOML profiles: arbitrary text must parse or fail with an error naming the file, and
//! a parsed profile must resolve (validate) or fail cleanly; never panic. A valid profile must
//! survive a TOML round trip and give finite derived figures.
//!
//! Trace rates would make `resolve` read whatever path the fuzzer invents (/dev/zero...), so
//! trace paths are replaced by one that does not exist: the error path is still exercised.

#![no_main]

use libfuzzer_sys::fuzz_target;
use webpep_link_model::profile::RateSpec;
use webpep_link_model::Profile;

const SOURCE: &str = "fuzz.toml";
const NO_SUCH_TRACE: &str = "/nonexistent/webpep-fuzz/trace";

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut p = match Profile::from_toml(&text, SOURCE) {
        Ok(p) => p,
        Err(e) => {
            let msg = e.to_string();
            assert!(msg.starts_with(SOURCE), "{msg}");
            return;
        }
    };
    let mut has_trace = false;
    for d in [&mut p.down, &mut p.up] {
        if let RateSpec::Trace(path) = &mut d.rate {
            *path = NO_SUCH_TRACE.into();
            has_trace = true;
        }
    }
    let r = match p.resolve(None) {
        Ok(r) => r,
        Err(e) => {
            let msg = e.to_string();
            assert!(!msg.is_empty());
            return;
        }
    };
    assert!(!has_trace, "a missing trace file resolved");
    // Derived figures of a valid profile are finite.
    for (what, v) in [
        ("down_kbps", r.down_kbps()),
        ("up_kbps", r.up_kbps()),
        ("rtt_ms", r.rtt_ms()),
        ("reacquire_rtt_ms", r.reacquire_rtt_ms()),
    ] {
        assert!(!v.is_nan(), "{what} = {v}");
    }
    let _ = r.release_after_idle_ms();
    // Round trip: what validated serializes, parses back to the same profile, and validates.
    let back_text = toml::to_string(&p).expect("a valid profile serializes to TOML");
    let back = Profile::from_toml(&back_text, SOURCE)
        .unwrap_or_else(|e| panic!("round trip failed: {e}\n{back_text}"));
    assert_eq!(back, p, "round trip changed the profile:\n{back_text}");
    back.resolve(None)
        .expect("the round-tripped profile resolves");
});
