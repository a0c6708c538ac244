//! Chromium's DevTools events, as any bytes: NUL-separated messages, the JSON ones fed to the
//! recorder that turns them into a load record. Nothing may panic, whatever the numbers,
//! types or order of the events.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::time::Duration;

fuzz_target!(|data: &[u8]| {
    let (flags, rest) = data.split_first().unwrap_or((&0, &[]));
    let events = rest
        .split(|&b| b == 0)
        .filter_map(|m| serde_json::from_slice::<serde_json::Value>(m).ok());
    let plt = (flags & 1 == 1).then(|| Duration::from_millis(u64::from(*flags) * 100));
    let load =
        webpep_lab::chromium::load_from_events("http://a.test/", events, plt, flags & 2 == 2);
    assert_eq!(load.breakdown.total(), load.plt);
    let _ = load.to_har("fuzz");
});
