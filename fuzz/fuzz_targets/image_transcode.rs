//! Fuzzes the edge proxy's content paths that decode untrusted bodies (`webpep_optimize`):
//! image transcoding (`transcode::transcode`, every preset, with and without WebP) and the
//! bomb-safe content decoder (`compress::decode`). Neither may panic or exceed its limits; a
//! transcoded image is smaller than the original, is what its content type says, and meets
//! its preset's SSIM bound (pixel-identical for `lossless`).

#![no_main]

use libfuzzer_sys::fuzz_target;
use webpep_optimize::compress;
use webpep_optimize::transcode::{self, Format, Outcome, Preset, TranscodeConfig};

/// Small limits keep each run fast; the checks are the same as at the default limits.
const MAX_PIXELS: u64 = 1 << 18;
const MAX_DECODED: usize = 1 << 20;

fn image(sel: u8, body: &[u8]) {
    let preset = match sel % 3 {
        0 => Preset::Lossless,
        1 => Preset::Balanced,
        _ => Preset::Aggressive,
    };
    let cfg = TranscodeConfig {
        preset,
        keep_animations: sel & 0x08 != 0,
        max_pixels: MAX_PIXELS,
        max_input_bytes: 1 << 20,
        min_ssim: None,
    };
    let accept = (sel & 0x10 != 0).then_some("image/webp,*/*");
    // The header's type is only a hint (the format is sniffed); a wrong hint must not matter.
    let hint = ["image/jpeg", "image/png", "image/gif", "text/html"][usize::from(sel >> 5) % 4];
    match transcode::transcode(body, Some(hint), accept, &cfg) {
        Outcome::Transcoded {
            body: out,
            content_type,
            ssim,
        } => {
            assert!(
                out.len() < body.len(),
                "a transcoded image that is not smaller"
            );
            let format = transcode::sniff(&out).expect("the output is an image");
            assert_eq!(
                format.content_type(),
                content_type,
                "content type and bytes disagree"
            );
            if format == Format::Webp {
                assert!(
                    accept.is_some(),
                    "WebP sent to a client that did not ask for it"
                );
            }
            let ssim = ssim.expect("a transcoded image has an SSIM");
            if preset == Preset::Lossless {
                assert_eq!(ssim, 1.0, "lossless changed pixels");
            } else {
                assert!(
                    ssim >= preset.default_min_ssim(),
                    "SSIM {ssim} below the bound"
                );
            }
        }
        Outcome::Unchanged(_) => {}
    }
}

fn decoded(sel: u8, body: &[u8]) {
    let codings = [
        "gzip",
        "x-gzip",
        "deflate",
        "br",
        "zstd",
        "identity",
        "gzip, br",
        "br, zstd, gzip",
        "compress",
        "",
    ];
    let coding = codings[usize::from(sel >> 1) % codings.len()];
    if let Ok(out) = compress::decode(body, coding, MAX_DECODED) {
        assert!(out.len() <= MAX_DECODED, "decoded past the limit");
    }
}

fuzz_target!(|data: &[u8]| {
    // Byte 0: bit 0 picks the path; the other bits its settings.
    let Some((&sel, body)) = data.split_first() else {
        return;
    };
    if sel & 1 == 0 {
        image(sel >> 1, body);
    } else {
        decoded(sel, body);
    }
});
