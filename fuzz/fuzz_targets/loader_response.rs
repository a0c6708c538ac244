//! Fuzzes what the browser model reads from servers (`webpep_loader`): the HTTP/1.x
//! response-head parser, body framing and the incremental body decoder (the one HTTP/1
//! codec, `webpep_http1`, as the loader uses it), DNS replies
//! (`dns::parse_reply`), object discovery in HTML and CSS (`discover`), and what a layout
//! takes of a stylesheet (`stylesheet`, `selectors`, `media`). None may panic; the body
//! decoder and the HTML scanner (references and elements) must not depend on how the bytes
//! were split into reads (the network splits them anywhere), discovery yields only http(s)
//! URLs, and a layout neither loses nor invents a waiting reference.

#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use url::Url;
use webpep_http1 as h1;
use webpep_loader::{discover, dns, media, selectors, stylesheet, Viewport};

const MAX_HEAD: usize = 8192;

/// A body as the decoder gave it.
#[derive(Debug, PartialEq)]
struct Body {
    bytes: Vec<u8>,
    /// Wire bytes consumed, framing included.
    wire: usize,
    done: bool,
}

/// Decodes `input` with `framing`, handing it over `step` bytes at a time, as reads would.
/// `None`: the decoder failed (the loader then records the object as an error, so what came
/// out before is not a body).
fn decode(framing: h1::ResponseFraming, input: &[u8], step: usize) -> Option<Body> {
    let mut dec = h1::BodyDecoder::new(framing);
    let mut buf = BytesMut::new();
    let mut bytes = Vec::new();
    let mut wire = 0;
    for piece in input.chunks(step.max(1)) {
        buf.extend_from_slice(piece);
        let d = dec
            .decode(&mut buf, &mut |b| bytes.extend_from_slice(b))
            .ok()?;
        wire += d.wire;
        if d.done {
            break;
        }
    }
    Some(Body {
        bytes,
        wire,
        done: dec.is_done(),
    })
}

fn response(data: &[u8], step: usize) {
    let head = match h1::parse_response_head(data, MAX_HEAD) {
        Ok(Some(h)) => h,
        Ok(None) => {
            assert!(
                data.len() <= MAX_HEAD,
                "an over-long partial head must be refused"
            );
            return;
        }
        Err(_) => return,
    };
    assert!(head.len <= data.len() && head.len <= MAX_HEAD);
    for method in ["GET", "HEAD"] {
        let Ok(framing) = h1::response_body_framing(&head, method) else {
            continue;
        };
        let rest = &data[head.len..];
        let whole = decode(framing, rest, rest.len());
        let split = decode(framing, rest, step);
        assert_eq!(
            split.is_none(),
            whole.is_none(),
            "the decoder fails or not depending on the split (framing {framing:?}, step {step})"
        );
        let Some(body) = whole else {
            continue;
        };
        assert!(body.wire <= rest.len(), "consumed more than was given");
        assert!(
            body.bytes.len() <= body.wire,
            "a body longer than its wire bytes"
        );
        if let h1::ResponseFraming::Length(l) = framing {
            assert!(body.bytes.len() as u64 <= l);
            assert_eq!(body.done, body.bytes.len() as u64 == l);
        }
        assert_eq!(
            split.as_ref(),
            Some(&body),
            "the decoder depends on how the bytes were split (framing {framing:?}, step {step})"
        );
    }
}

fn discovery(data: &[u8], step: usize) {
    let base = Url::parse("http://www.example.com/dir/page.html").unwrap();
    let mut one = discover::HtmlScanner::new(base.clone());
    let mut whole = one.feed(data);
    whole.extend(one.finish());
    let mut scanner = discover::HtmlScanner::new(base.clone());
    let mut pieces = Vec::new();
    let mut elements = Vec::new();
    for piece in data.chunks(step.max(1)) {
        pieces.extend(scanner.feed(piece));
        elements.extend(scanner.take_elements());
    }
    pieces.extend(scanner.finish());
    elements.extend(scanner.take_elements());
    let text = String::from_utf8_lossy(data);
    let css = discover::scan_css(&text, &base);
    for d in whole.iter().chain(&pieces).chain(&css) {
        assert!(matches!(d.url.scheme(), "http" | "https"), "{}", d.url);
        assert!(d.url.fragment().is_none(), "{}", d.url);
    }
    if scanner.error().is_none() {
        let urls = |v: &[discover::Discovered]| v.iter().map(|d| d.url.clone()).collect::<Vec<_>>();
        assert_eq!(
            urls(&pieces),
            urls(&whole),
            "the HTML scanner depends on the split"
        );
        assert_eq!(
            elements,
            one.take_elements(),
            "the elements depend on the split"
        );
    }
    let _ = webpep_discover::srcset::largest(&text, None);

    // A layout of those elements with the text read as a stylesheet.
    let screen = Viewport::default();
    let sheet = stylesheet::scan_stylesheet(&text, &base, step % 2 == 0, &screen);
    let _ = media::media_applies(&text, &screen);
    let list = selectors::parse_selector_list(&text);
    let mut doc = stylesheet::DocumentStyle::default();
    for e in elements {
        doc.elements.add(e);
    }
    let _ = doc.elements.matches(&list);
    for u in sheet.font_uses {
        doc.add_font_use(u);
    }
    for d in &sheet.refs {
        assert!(matches!(d.url.scheme(), "http" | "https"), "{}", d.url);
    }
    let mut pending = sheet.refs;
    let n = pending.len();
    let taken = doc.take_needed(&mut pending, |d| &d.need);
    assert_eq!(taken.len() + pending.len(), n, "a layout lost or invented a reference");
}

fuzz_target!(|data: &[u8]| {
    // Byte 0: which parser (low 2 bits) and the read size for the split checks (the rest).
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let step = usize::from(sel >> 2) + 1;
    match sel & 3 {
        0 | 1 => response(rest, step),
        2 => {
            if let dns::Reply::Answer(a) = dns::parse_reply(rest, 0x1234, "www.example.com") {
                assert!(!a.addrs.is_empty(), "an answer without addresses");
            }
        }
        _ => discovery(rest, step),
    }
});
