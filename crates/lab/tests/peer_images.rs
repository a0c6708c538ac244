//! Ziproxy's image recompression through `peer_images` (inetd mode behind a loopback origin):
//! what it sends back is read whole and measured against the original, interlaced GIFs
//! included. Needs Debian's ziproxy; skips with the reason elsewhere, fails in CI
//! (`WEBPEP_REQUIRE_PEERS=1`).

use std::io::Cursor;

use image::{DynamicImage, ImageFormat, RgbImage};
use webpep_lab::configs::Peer;
use webpep_lab::peer_images::Ziproxy;
use webpep_lab::peers::cannot_run;
use webpep_link::testing::skip_unless_required;
use webpep_optimize::transcode::{compare, sniff, Format, Preset, TranscodeConfig};

fn ziproxy_or_skip(test: &str) -> Option<Ziproxy> {
    if let Some(why) = cannot_run(Peer::Ziproxy) {
        skip_unless_required(test, "WEBPEP_REQUIRE_PEERS", &why);
        return None;
    }
    Some(Ziproxy::new().expect("ziproxy configuration"))
}

/// A photo-like picture: smooth gradients with fine texture, so JPEG quality matters.
fn photo(w: u32, h: u32) -> RgbImage {
    RgbImage::from_fn(w, h, |x, y| {
        let t = ((x * 7 + y * 13) % 17) as u8;
        image::Rgb([
            (x * 255 / w) as u8 ^ t,
            (y * 255 / h) as u8,
            ((x + y) * 3 % 256) as u8,
        ])
    })
}

fn jpeg(img: &RgbImage, quality: u8) -> Vec<u8> {
    let mut out = Vec::new();
    image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, quality)
        .encode_image(img)
        .unwrap();
    out
}

/// A 4-colour graphic as an interlaced GIF (rows stored in the four passes of GIF89a §
/// Appendix E), and the same picture decoded, for checking.
fn interlaced_gif(w: u16, h: u16) -> (Vec<u8>, DynamicImage) {
    let palette = [0u8, 0, 0, 255, 255, 0, 200, 0, 255, 255, 255, 255];
    let index = |x: u16, y: u16| -> u8 { ((x / 5 + y / 3) % 4) as u8 };
    let mut rows: Vec<u16> = Vec::new();
    for (start, step) in [(0, 8), (4, 8), (2, 4), (1, 2)] {
        rows.extend((start..h).step_by(step));
    }
    let buffer: Vec<u8> = rows
        .iter()
        .flat_map(|&y| (0..w).map(move |x| index(x, y)))
        .collect();
    let mut out = Vec::new();
    {
        let mut enc = gif::Encoder::new(&mut out, w, h, &palette).unwrap();
        let frame = gif::Frame {
            width: w,
            height: h,
            interlaced: true,
            buffer: buffer.into(),
            ..gif::Frame::default()
        };
        enc.write_frame(&frame).unwrap();
    }
    let plain = RgbImage::from_fn(u32::from(w), u32::from(h), |x, y| {
        let i = usize::from(index(x as u16, y as u16)) * 3;
        image::Rgb([palette[i], palette[i + 1], palette[i + 2]])
    });
    (out, DynamicImage::ImageRgb8(plain))
}

#[test]
fn a_jpeg_comes_back_smaller_and_is_measured() {
    let Some(z) = ziproxy_or_skip("a_jpeg_comes_back_smaller_and_is_measured") else {
        return;
    };
    let original = jpeg(&photo(320, 240), 95);
    let got = z.image(&original, "image/jpeg").unwrap();
    assert_eq!(got.status, 200);
    assert_eq!(got.content_type.as_deref(), Some("image/jpeg"));
    assert_eq!(sniff(&got.body), Some(Format::Jpeg));
    assert!(
        got.body.len() < original.len() / 2,
        "{} of {}",
        got.body.len(),
        original.len()
    );
    let s = compare(
        &original,
        &got.body,
        &TranscodeConfig::with_preset(Preset::Lossless),
    )
    .unwrap();
    assert!(s > 0.3 && s < 0.99, "ssim {s}");
}

#[test]
fn an_interlaced_gif_is_decoded_whole_on_our_side() {
    let (gif, plain) = interlaced_gif(120, 37);
    // Our decoder puts the four passes back in order: the GIF is the plain picture.
    let mut png = Vec::new();
    plain
        .write_to(&mut Cursor::new(&mut png), ImageFormat::Png)
        .unwrap();
    let cfg = TranscodeConfig::with_preset(Preset::Lossless);
    assert_eq!(compare(&png, &gif, &cfg), Ok(1.0));
    let Some(z) = ziproxy_or_skip("an_interlaced_gif_is_decoded_whole_on_our_side") else {
        return;
    };
    // Whatever Ziproxy makes of it is read whole and scored (Debian's 3.3.2 scrambles the
    // rows of interlaced GIFs: the README reports it; the score is not asserted here).
    let got = z.image(&gif, "image/gif").unwrap();
    assert_eq!(got.status, 200);
    if got.body != gif {
        let s = compare(&gif, &got.body, &cfg).unwrap();
        assert!((-1.0..=1.0).contains(&s), "ssim {s}");
        eprintln!("ziproxy on an interlaced GIF: SSIM {s:.4}");
    }
}

#[test]
fn a_broken_image_comes_back_without_harm() {
    let Some(z) = ziproxy_or_skip("a_broken_image_comes_back_without_harm") else {
        return;
    };
    let mut broken = jpeg(&photo(64, 64), 90);
    broken.truncate(broken.len() / 3);
    let got = z.image(&broken, "image/jpeg").unwrap();
    assert_eq!(got.status, 200);
    assert!(!got.body.is_empty());
    // And the next image still works.
    let ok = jpeg(&photo(64, 64), 90);
    assert_eq!(z.image(&ok, "image/jpeg").unwrap().status, 200);
}
