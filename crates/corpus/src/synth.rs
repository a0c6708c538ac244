//! Bodies synthesized "of the right type and size" for imported objects whose bodies the input
//! lacks, using the paper-sites generators.

use crate::images::{self, ImageKind};
use crate::store::CorpusError;
use crate::text::{self, HtmlMeta, HtmlRefs, IframeRef, ImgRef, Srcset};

/// Images larger than this are synthesized as incompressible bytes behind the format's magic
/// number rather than rendered (rendering multi-megapixel images is slow and tells nothing
/// more).
pub const MAX_RENDERED_IMAGE: usize = 2_000_000;

/// The MIME type without parameters, lowercase.
pub fn essence(mime: &str) -> String {
    mime.split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

/// A body of type `mime` and `size` bytes: exact for text and binary types, within a few per
/// cent for rendered images.
pub fn body(mime: &str, size: usize, seed: u64) -> Result<Vec<u8>, CorpusError> {
    if size == 0 {
        return Ok(Vec::new());
    }
    let m = essence(mime);
    let image_kind = match m.as_str() {
        "image/jpeg" | "image/jpg" | "image/pjpeg" => Some(ImageKind::Jpeg),
        "image/gif" => Some(ImageKind::Gif),
        "image/png" | "image/x-png" | "image/apng" => Some(ImageKind::Png),
        _ => None,
    };
    if let Some(k) = image_kind {
        if size > MAX_RENDERED_IMAGE {
            return Ok(images::binary_blob(seed, size, &m));
        }
        return Ok(images::fit(k, seed, size)?.bytes);
    }
    Ok(if m.contains("html") {
        html_document(seed, size, "Page", &[])
    } else if m == "text/css" {
        text::css_sheet(seed, &[], &[], size, text::DEFAULT_REDUNDANCY)
    } else if m.contains("javascript") || m.contains("ecmascript") {
        text::js_script(seed, size, text::DEFAULT_JS_REDUNDANCY)
    } else if m.contains("json") {
        text::json_text(seed, size)
    } else if m == "image/svg+xml" {
        text::svg_image(seed, size)
    } else if m.starts_with("text/") || m.contains("xml") {
        text::plain_text(seed, size)
    } else {
        images::binary_blob(seed, size, &m)
    })
}

/// An HTML document of about `size` bytes (exact when the references fit) that references each
/// of `refs` — (reference as written, content type) — with the tag a browser would fetch it
/// by: images with `<img>`, stylesheets with `<link rel=stylesheet>`, scripts with `<script>`,
/// documents with `<iframe>`, fonts with `@font-face`, anything else with `<object data>`
/// (elements every browser fetches; Mozilla 1.x ignored `<link rel=preload>`).
pub fn html_document(seed: u64, size: usize, title: &str, refs: &[(String, String)]) -> Vec<u8> {
    html_document_by(seed, size, title, refs, |render| {
        render(text::DEFAULT_REDUNDANCY)
    })
}

/// [`html_document`] whose full document `choose` picks from `render(redundancy)` (the HAR
/// importer fits the redundancy to a captured compressed size).
pub(crate) fn html_document_by(
    seed: u64,
    size: usize,
    title: &str,
    refs: &[(String, String)],
    choose: impl FnOnce(&dyn Fn(f64) -> Vec<u8>) -> Vec<u8>,
) -> Vec<u8> {
    let mut h = HtmlRefs::default();
    for (u, ct) in refs {
        let m = essence(ct);
        if m.starts_with("image/") {
            h.images.push(ImgRef {
                url: u.clone(),
                width: 100,
                height: 75,
                srcset: Srcset::No,
            });
        } else if m == "text/css" {
            h.stylesheets.push(u.clone());
        } else if m.contains("javascript") || m.contains("ecmascript") {
            h.body_scripts.push(u.clone());
        } else if m.contains("html") {
            h.iframes.push(IframeRef {
                url: u.clone(),
                width: 300,
                height: 250,
            });
        } else if m.starts_with("font/") || m.contains("woff") || m.contains("font") {
            h.fonts.push(u.clone());
        } else {
            h.embeds.push(u.clone());
        }
    }
    let meta = HtmlMeta {
        site: title.to_string(),
        title: title.to_string(),
        headline: title.to_string(),
        time: "9:00 a.m. GMT".to_string(),
    };
    let render = |redundancy: f64| {
        text::html_versions(seed, &h, std::slice::from_ref(&meta), size, redundancy)
            .pop()
            .unwrap_or_default()
    };
    let full = choose(&render);
    if full.len() <= size {
        full
    } else {
        text::html_minimal(seed, &h, title, size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_and_sizes() {
        for (m, n) in [
            ("text/html; charset=utf-8", 5_000),
            ("text/css", 3_000),
            ("application/javascript", 7_000),
            ("application/json", 900),
            ("image/svg+xml", 2_000),
            ("font/woff2", 20_000),
            ("application/octet-stream", 10),
        ] {
            assert_eq!(body(m, n, 1).unwrap().len(), n, "{m}");
        }
        let j = body("image/jpeg", 8_000, 2).unwrap();
        assert_eq!(&j[..2], b"\xFF\xD8");
        assert!(j.len().abs_diff(8_000) < 800);
        let g = body("image/gif", 500, 3).unwrap();
        assert_eq!(&g[..3], b"GIF");
        let big = body("image/png", 3_000_000, 4).unwrap();
        assert_eq!(big.len(), 3_000_000);
        assert_eq!(&big[..4], b"\x89PNG");
        let d = html_document(
            5,
            4_000,
            "t",
            &[
                ("a.css".into(), "text/css".into()),
                ("b.gif".into(), "image/gif".into()),
                ("c.js".into(), "text/javascript".into()),
                ("d.woff2".into(), "font/woff2".into()),
            ],
        );
        assert_eq!(d.len(), 4_000);
        let urls: Vec<String> = crate::scan::html_refs(&d)
            .into_iter()
            .filter(|r| r.kind.is_embedded())
            .map(|r| r.url)
            .collect();
        for u in ["a.css", "b.gif", "c.js", "d.woff2"] {
            assert!(urls.iter().any(|x| x == u), "{u} in {urls:?}");
        }
    }
}
