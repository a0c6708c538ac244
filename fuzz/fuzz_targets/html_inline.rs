//! Fuzz the inliner of the edge proxy's `inline` switch: arbitrary bytes as a page and as a
//! stylesheet's or script's text. Nothing may panic; inlining may not fail; inlining every
//! candidate adds no reference the page did not have; and a text accepted for a page can
//! never end its element early (`</style` in a stylesheet, `</script` in a script).

#![no_main]

use std::collections::HashMap;

use libfuzzer_sys::fuzz_target;
use url::Url;
use webpep_optimize::rewrite::{inlinable_text, inline_candidates, inline_resources, InlineKind};

fuzz_target!(|data: &[u8]| {
    let Ok(page) = Url::parse("http://www.a.com/dir/page.html") else {
        return;
    };
    let scan = inline_candidates(data, &page);
    let ready: HashMap<String, (InlineKind, String)> = scan
        .candidates
        .iter()
        .map(|(u, k)| (u.to_string(), (*k, "/*x*/".to_string())))
        .collect();
    let (out, n) = match inline_resources(data, &page, &ready) {
        Ok(r) => r,
        Err(e) => panic!("inline_resources refused input: {e}"),
    };
    assert!(n > 0 || out == data, "nothing inlined but the page changed");
    let before: std::collections::HashSet<_> = scan.candidates.iter().cloned().collect();
    for c in inline_candidates(&out, &page).candidates {
        assert!(before.contains(&c), "inlining made a new reference {c:?}");
    }

    let sheet = Url::parse("http://static.a.com/css/site.css").unwrap_or(page);
    for kind in [InlineKind::Stylesheet, InlineKind::Script] {
        for utf8 in [false, true] {
            if let Some(text) = inlinable_text(kind, data, &sheet, utf8, 1 << 16) {
                let lower = text.to_ascii_lowercase();
                let end = match kind {
                    InlineKind::Stylesheet => "</style",
                    InlineKind::Script => "</script",
                };
                assert!(!lower.contains(end), "{end} in an accepted text");
                assert!(utf8 || text.is_ascii());
            }
        }
    }
});
