//! Fuzz the page-discovery core (webpep-discover) and the corpus's span scanner on arbitrary
//! bytes: nothing panics; every span lies in the input; a CSS reference whose raw text is its
//! value reads back exactly; replacing nothing, or each reference by itself, gives the input
//! back byte for byte; srcset candidate spans read back their URL; a refresh URL range is in
//! its value.

#![no_main]

use libfuzzer_sys::fuzz_target;
use webpep_discover::{css, entities, html, srcset};

fuzz_target!(|data: &[u8]| {
    let refs = css::references(data);
    for r in &refs {
        assert!(r.span.start <= r.span.end && r.span.end <= data.len(), "{r:?}");
        if r.plain {
            assert_eq!(&data[r.span.clone()], r.value.as_bytes(), "{r:?}");
        }
    }
    assert_eq!(css::replace(data, |_| None), data);
    assert_eq!(css::replace(data, |r| Some(r.value.clone())), data);

    let text = String::from_utf8_lossy(data);
    for c in srcset::parse(&text) {
        assert_eq!(&text[c.span.clone()], c.url);
    }
    let _ = srcset::largest(&text, Some("s.gif"));
    let _ = entities::decode(&text);
    if let Some(at) = html::refresh_url(&text) {
        assert!(at.end <= text.len());
    }
    let mut words = text.split_ascii_whitespace();
    let tag = words.next().unwrap_or("img").to_ascii_lowercase();
    let attrs: Vec<(&str, &str)> = words.filter_map(|w| w.split_once('=')).collect();
    for r in html::element_refs(&tag, |n| attrs.iter().find(|(k, _)| *k == n).map(|(_, v)| v.to_string())) {
        assert!(attrs.iter().any(|(k, _)| *k == r.attr), "{r:?}");
    }

    for r in webpep_corpus::scan::html_refs(data) {
        assert!(r.span.start <= r.span.end && r.span.end <= data.len(), "{r:?}");
    }
});
