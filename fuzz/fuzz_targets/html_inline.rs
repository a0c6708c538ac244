//! Fuzz the inliner of the edge proxy's `inline` switch: arbitrary bytes as a page and as a
//! stylesheet's, script's or image's body. Nothing may panic; inlining may not fail; inlining
//! every candidate adds no reference the page did not have; a text accepted for a page can
//! never end its element early (`</style` in a stylesheet, `</script` in a script); and an
//! accepted image is a `data:` URI of an image type with nothing but base64 after its comma;
//! a stylesheet's images put into it as `data:` URIs leave none of them behind and keep every
//! other reference.

#![no_main]

use std::collections::HashMap;

use libfuzzer_sys::fuzz_target;
use url::Url;
use webpep_optimize::rewrite::{
    css_urls, inlinable_image, inlinable_text, inline_candidates, inline_resources,
    inline_stylesheet_images, stylesheet_images, InlineKind,
};

fuzz_target!(|data: &[u8]| {
    let Ok(page) = Url::parse("http://www.a.com/dir/page.html") else {
        return;
    };
    let scan = inline_candidates(data, &page);
    let ready: HashMap<String, (InlineKind, String)> = scan
        .candidates
        .iter()
        .map(|(u, k)| {
            let v = match k {
                InlineKind::Image => "data:image/gif;base64,R0lGODlh",
                _ => "/*x*/",
            };
            (u.to_string(), (*k, v.to_string()))
        })
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
                    InlineKind::Image => unreachable!("images are not texts"),
                };
                assert!(!lower.contains(end), "{end} in an accepted text");
                assert!(utf8 || text.is_ascii());
            }
        }
    }
    if let Some(uri) = inlinable_image(data, 1 << 16) {
        let (head, b64) = uri.split_once(',').expect("a data: URI has a comma");
        assert!(head.starts_with("data:image/") && head.ends_with(";base64"), "{head}");
        assert!(b64
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"+/=".contains(&b)));
    }
    if let Ok(css) = std::str::from_utf8(data) {
        let images: HashMap<String, String> = stylesheet_images(css, &sheet)
            .into_iter()
            .map(|u| (u.to_string(), "data:image/gif;base64,R0lGODlh".to_string()))
            .collect();
        let (out, _) = inline_stylesheet_images(css, &sheet, &images);
        let left = stylesheet_images(&out, &sheet);
        assert!(
            left.iter().all(|u| !images.contains_key(u.as_str())),
            "an image left behind: {left:?}"
        );
        // Each reference replaced in place: as many as before, imports among them.
        assert_eq!(css_urls(out.as_bytes()).len(), css_urls(css.as_bytes()).len());
    }
});
