//! Bad input: corrupt and truncated images of each format, decompression bombs, non-images
//! and arbitrary bytes. The original is always kept and nothing panics.

mod transcode_support;

use proptest::prelude::*;
use transcode_support::*;
use webpep_optimize::transcode::{transcode, Outcome, Preset, Skip, TranscodeConfig};

fn balanced() -> TranscodeConfig {
    TranscodeConfig::default()
}

fn is_corrupt(o: &Outcome) -> bool {
    matches!(o, Outcome::Unchanged(Skip::Corrupt(_)))
}

fn is_too_large(o: &Outcome) -> bool {
    matches!(o, Outcome::Unchanged(Skip::TooLarge(_)))
}

fn webp_photo() -> Vec<u8> {
    let img = photo_pixels(64, 48, 4);
    webp::Encoder::from_rgb(img.as_raw(), 64, 48)
        .encode_simple(false, 80.0)
        .unwrap()
        .to_vec()
}

fn samples() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("image/jpeg", photo_jpeg(96, 64)),
        ("image/png", careless_png(&logo_pixels(96, 48))),
        ("image/gif", gif_of(&logo_pixels(96, 48))),
        ("image/webp", webp_photo()),
    ]
}

#[test]
fn truncated_images_of_each_format_are_corrupt() {
    for (ct, bytes) in samples() {
        for cut in [bytes.len() / 2, bytes.len() - 3, 20, 4] {
            let out = transcode(&bytes[..cut], Some(ct), None, &balanced());
            assert!(is_corrupt(&out), "{ct} cut at {cut}: {out:?}");
        }
    }
}

#[test]
fn damaged_png_data_is_corrupt() {
    let mut png = careless_png(&logo_pixels(96, 48));
    let mid = png.len() / 2;
    png[mid] ^= 0xFF; // breaks the IDAT CRC and the deflate stream
    assert!(is_corrupt(&transcode(
        &png,
        Some("image/png"),
        None,
        &balanced()
    )));
}

#[test]
fn garbage_under_an_image_type_is_corrupt_otherwise_not_an_image() {
    let html = b"<!doctype html><title>404</title>".to_vec();
    assert!(is_corrupt(&transcode(
        &html,
        Some("image/png"),
        None,
        &balanced()
    )));
    assert_eq!(
        transcode(&html, Some("text/html"), None, &balanced()),
        Outcome::Unchanged(Skip::NotAnImage)
    );
    let svg = b"<svg xmlns='http://www.w3.org/2000/svg'/>".to_vec();
    assert_eq!(
        transcode(&svg, Some("image/svg+xml"), None, &balanced()),
        Outcome::Unchanged(Skip::NotAnImage)
    );
    assert_eq!(
        transcode(b"", None, None, &balanced()),
        Outcome::Unchanged(Skip::NotAnImage)
    );
}

#[test]
fn bytes_are_trusted_over_the_header() {
    // A PNG labelled image/jpeg is still recompressed as the PNG it is.
    let png = careless_png(&logo_pixels(96, 48));
    let out = transcode(
        &png,
        Some("image/jpeg"),
        None,
        &TranscodeConfig::with_preset(Preset::Lossless),
    );
    assert!(
        matches!(
            out,
            Outcome::Transcoded {
                content_type: "image/png",
                ..
            }
        ),
        "{out:?}"
    );
}

/// A PNG of a few dozen bytes whose IHDR claims `w`×`h`.
fn png_bomb(w: u32, h: u32) -> Vec<u8> {
    let mut b = b"\x89PNG\r\n\x1a\n".to_vec();
    b.extend_from_slice(&13u32.to_be_bytes());
    b.extend_from_slice(b"IHDR");
    b.extend_from_slice(&w.to_be_bytes());
    b.extend_from_slice(&h.to_be_bytes());
    b.extend_from_slice(&[8, 6, 0, 0, 0, 0, 0, 0, 0]);
    b.extend_from_slice(&0u32.to_be_bytes());
    b.extend_from_slice(b"IEND\xAE\x42\x60\x82");
    b
}

#[test]
fn decompression_bombs_are_refused_before_decoding() {
    // Each header claims billions of pixels: had the decoder run, it would have allocated
    // tens of GB; "too large" is decided from the header alone.
    assert!(is_too_large(&transcode(
        &png_bomb(100_000, 100_000),
        Some("image/png"),
        None,
        &balanced()
    )));

    // GIF: logical screen 65535×65535 and one tiny frame.
    let mut gif = gif_of(&logo_pixels(8, 8));
    gif[6..10].copy_from_slice(&[0xFF, 0xFF, 0xFF, 0xFF]);
    assert!(is_too_large(&transcode(
        &gif,
        Some("image/gif"),
        None,
        &balanced()
    )));

    // JPEG: patch the frame header's dimensions to 65535×65535.
    let mut jpeg = photo_jpeg(16, 16);
    let sof = jpeg.windows(2).position(|w| w == [0xFF, 0xC0]).unwrap();
    jpeg[sof + 5..sof + 9].copy_from_slice(&[0xFF, 0xFF, 0xFF, 0xFF]);
    assert!(is_too_large(&transcode(
        &jpeg,
        Some("image/jpeg"),
        None,
        &balanced()
    )));

    // Byte limit.
    let small = TranscodeConfig {
        max_input_bytes: 100,
        ..balanced()
    };
    assert!(is_too_large(&transcode(
        &photo_jpeg(32, 32),
        None,
        None,
        &small
    )));
    // Pixel limit set low: a real image over it is refused too.
    let few = TranscodeConfig {
        max_pixels: 1000,
        ..balanced()
    };
    assert!(is_too_large(&transcode(
        &photo_jpeg(64, 64),
        None,
        None,
        &few
    )));
}

#[test]
fn a_bomb_under_the_limit_but_lying_about_its_data_is_corrupt() {
    // 2000×2000 declared, no pixel data: decodes to an error, not to 16 MB of zeros.
    assert!(is_corrupt(&transcode(
        &png_bomb(2000, 2000),
        Some("image/png"),
        None,
        &balanced()
    )));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512), which in 0usize..5) {
        // Give the bytes each format's magic so the parsers, not the sniffer, see them.
        let magic: &[u8] = match which {
            0 => b"\xFF\xD8\xFF",
            1 => b"\x89PNG\r\n\x1a\n",
            2 => b"GIF89a",
            3 => b"RIFF\x40\0\0\0WEBPVP8 ",
            _ => b"",
        };
        let mut body = magic.to_vec();
        body.extend_from_slice(&bytes);
        let _ = transcode(&body, Some("image/png"), Some("image/webp"), &balanced());
    }

    #[test]
    fn mutated_images_never_panic(sample in 0usize..4, pos in any::<usize>(), val in any::<u8>(), cut in any::<usize>()) {
        let samples = samples();
        let (ct, mut bytes) = samples[sample].clone();
        let i = pos % bytes.len();
        bytes[i] = val;
        let keep = bytes.len() - cut % (bytes.len() / 4).max(1);
        bytes.truncate(keep);
        let _ = transcode(&bytes, Some(ct), Some("image/webp"), &TranscodeConfig::with_preset(Preset::Aggressive));
    }
}
