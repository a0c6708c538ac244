//! Synthesized text that compresses as the capture says: when a HAR lacks an encoded text
//! body but gives its size on the wire, the generators' redundancy (the share of template
//! blocks, [`text::DEFAULT_REDUNDANCY`]) is searched so the body, gzipped at level 6, comes
//! within a few per cent of that size.

use crate::store::CorpusError;
use crate::synth::{self, essence};
use crate::text;

/// How close a fitted body's gzip size gets to its target before the search stops.
const TOLERANCE: f64 = 0.02;
/// Most generator runs one search makes.
const STEPS: usize = 8;

/// Searches `redundancy` in [0, 1] (more redundancy, smaller gzip) for a body of `gen` whose
/// gzip size is nearest `target`; without a target, the body at `default`.
fn search(target: Option<u64>, default: f64, gen: impl Fn(f64) -> Vec<u8>) -> Vec<u8> {
    let first = gen(default);
    let Some(target) = target.filter(|&t| t > 0) else {
        return first;
    };
    let target = target as f64;
    let off = |b: &[u8]| (text::gzip_len(b) as f64 - target) / target;
    let mut best_err = off(&first);
    let mut best = first;
    let (mut lo, mut hi) = if best_err > 0.0 {
        (default, 1.0)
    } else {
        (0.0, default)
    };
    for _ in 0..STEPS {
        if best_err.abs() <= TOLERANCE {
            break;
        }
        let mid = (lo + hi) / 2.0;
        let b = gen(mid);
        let e = off(&b);
        if e > 0.0 {
            lo = mid;
        } else {
            hi = mid;
        }
        if e.abs() < best_err.abs() {
            best_err = e;
            best = b;
        }
    }
    best
}

/// [`synth::body`], HTML, CSS and scripts fitted to gzip to `target` bytes when given.
pub(crate) fn body(
    mime: &str,
    size: usize,
    seed: u64,
    target: Option<u64>,
) -> Result<Vec<u8>, CorpusError> {
    if size == 0 || target.is_none() {
        return synth::body(mime, size, seed);
    }
    let m = essence(mime);
    if m.contains("html") {
        Ok(html(seed, size, "Page", &[], target))
    } else if m == "text/css" {
        Ok(search(target, text::DEFAULT_REDUNDANCY, |r| {
            text::css_sheet(seed, &[], &[], size, r)
        }))
    } else if m.contains("javascript") || m.contains("ecmascript") {
        Ok(search(target, text::DEFAULT_JS_REDUNDANCY, |r| {
            text::js_script(seed, size, r)
        }))
    } else {
        synth::body(mime, size, seed)
    }
}

/// [`synth::html_document`], fitted to gzip to `target` bytes when given.
pub(crate) fn html(
    seed: u64,
    size: usize,
    title: &str,
    refs: &[(String, String)],
    target: Option<u64>,
) -> Vec<u8> {
    synth::html_document_by(seed, size, title, refs, |render| {
        search(target, text::DEFAULT_REDUNDANCY, render)
    })
}
