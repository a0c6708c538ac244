//! Encoders for the output formats: PNG (lossless, smallest colour type), JPEG at a quality,
//! WebP lossy at a quality and WebP lossless (exact). Each returns the encoded bytes or a
//! reason; none panics.

use image::codecs::png::{CompressionType, FilterType, PngEncoder};
use image::DynamicImage;

/// WebP cannot encode images larger than this in either dimension.
pub(crate) const WEBP_MAX_DIMENSION: u32 = 16383;

/// Facts about an image's pixels that decide which encodings are lossless for it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PixelFacts {
    /// Every pixel fully opaque.
    pub opaque: bool,
    /// Every pixel has r = g = b.
    pub grey: bool,
    /// More than 8 bits per channel.
    pub deep: bool,
}

impl PixelFacts {
    pub(crate) fn of(img: &DynamicImage) -> PixelFacts {
        let deep = matches!(
            img,
            DynamicImage::ImageLuma16(_)
                | DynamicImage::ImageLumaA16(_)
                | DynamicImage::ImageRgb16(_)
                | DynamicImage::ImageRgba16(_)
                | DynamicImage::ImageRgb32F(_)
                | DynamicImage::ImageRgba32F(_)
        );
        let (mut opaque, mut grey) = (true, true);
        match img {
            DynamicImage::ImageLuma8(_) | DynamicImage::ImageLuma16(_) => {}
            DynamicImage::ImageLumaA8(i) => opaque = i.pixels().all(|p| p.0[1] == 255),
            DynamicImage::ImageRgb8(i) => {
                grey = i.pixels().all(|p| p.0[0] == p.0[1] && p.0[1] == p.0[2])
            }
            _ => {
                let rgba = img.to_rgba16();
                for p in rgba.pixels() {
                    let [r, g, b, a] = p.0;
                    opaque &= a == u16::MAX;
                    grey &= r == g && g == b;
                    if !opaque && !grey {
                        break;
                    }
                }
            }
        }
        PixelFacts { opaque, grey, deep }
    }
}

/// PNG with the smallest lossless colour type (grey and/or no alpha when the pixels allow),
/// maximum deflate effort and adaptive filters.
pub(crate) fn png_lossless(img: &DynamicImage, facts: PixelFacts) -> Result<Vec<u8>, String> {
    let reduced = match (facts.deep, facts.grey, facts.opaque) {
        (false, true, true) => DynamicImage::ImageLuma8(img.to_luma8()),
        (false, true, false) => DynamicImage::ImageLumaA8(img.to_luma_alpha8()),
        (false, false, true) => DynamicImage::ImageRgb8(img.to_rgb8()),
        (false, false, false) => DynamicImage::ImageRgba8(img.to_rgba8()),
        (true, true, true) => DynamicImage::ImageLuma16(img.to_luma16()),
        (true, true, false) => DynamicImage::ImageLumaA16(img.to_luma_alpha16()),
        (true, false, true) => DynamicImage::ImageRgb16(img.to_rgb16()),
        (true, false, false) => DynamicImage::ImageRgba16(img.to_rgba16()),
    };
    let mut out = Vec::new();
    let enc = PngEncoder::new_with_quality(&mut out, CompressionType::Best, FilterType::Adaptive);
    reduced
        .write_with_encoder(enc)
        .map_err(|e| format!("PNG encode: {e}"))?;
    Ok(out)
}

/// JPEG at `quality` (1–100) with mozjpeg: progressive scans, trellis quantisation and
/// optimized Huffman tables (measured on the paper-sites photos: about a fifth smaller than a
/// baseline encoder at the same SSIM), 4:2:0 chroma subsampling as cjpeg does by default;
/// greyscale images are encoded with one component. libjpeg reports errors by unwinding, so
/// the encoder runs inside `catch_unwind` and an error becomes a reason, not a crash.
pub(crate) fn jpeg(img: &DynamicImage, grey: bool, quality: u8) -> Result<Vec<u8>, String> {
    let (w, h) = (img.width(), img.height());
    if w == 0 || h == 0 || w > 65_500 || h > 65_500 {
        return Err(format!("JPEG encode: {w}x{h} is outside what JPEG allows"));
    }
    let (space, pixels) = if grey {
        (
            mozjpeg::ColorSpace::JCS_GRAYSCALE,
            img.to_luma8().into_raw(),
        )
    } else {
        (mozjpeg::ColorSpace::JCS_RGB, img.to_rgb8().into_raw())
    };
    let q = f32::from(quality.clamp(1, 100));
    let run = std::panic::catch_unwind(move || -> std::io::Result<Vec<u8>> {
        let mut comp = mozjpeg::Compress::new(space);
        comp.set_size(w as usize, h as usize);
        // Trying scan splits costs a fifth more time for a few bytes (measured).
        comp.set_optimize_scans(false);
        comp.set_quality(q);
        let mut started = comp.start_compress(Vec::new())?;
        started.write_scanlines(&pixels)?;
        started.finish()
    });
    match run {
        Ok(Ok(out)) => Ok(out),
        Ok(Err(e)) => Err(format!("JPEG encode: {e}")),
        Err(_) => Err("JPEG encode: libjpeg failed".into()),
    }
}

fn webp_config(lossless: bool, quality: f32) -> Result<webp::WebPConfig, String> {
    let mut config = webp::WebPConfig::new().map_err(|()| "WebP: no config".to_string())?;
    config.lossless = i32::from(lossless);
    config.quality = quality;
    // Method 4 is libwebp's default speed/size balance; 6 is too slow for a proxy.
    config.method = 4;
    if lossless {
        // Keep the RGB of transparent pixels so the output is pixel-identical.
        config.exact = 1;
    } else {
        config.alpha_compression = 1;
    }
    Ok(config)
}

fn webp_encode(
    img: &DynamicImage,
    opaque: bool,
    config: &webp::WebPConfig,
) -> Result<Vec<u8>, String> {
    let (w, h) = (img.width(), img.height());
    if w > WEBP_MAX_DIMENSION || h > WEBP_MAX_DIMENSION {
        return Err("WebP: image too large for WebP".into());
    }
    let mem = if opaque {
        let rgb = img.to_rgb8();
        webp::Encoder::from_rgb(rgb.as_raw(), w, h).encode_advanced(config)
    } else {
        let rgba = img.to_rgba8();
        webp::Encoder::from_rgba(rgba.as_raw(), w, h).encode_advanced(config)
    };
    let mem = mem.map_err(|e| format!("WebP encode: {e:?}"))?;
    Ok(mem.to_vec())
}

/// Lossy WebP at `quality` (0–100), with lossy-compressed alpha when not opaque.
pub(crate) fn webp_lossy(img: &DynamicImage, opaque: bool, quality: u8) -> Result<Vec<u8>, String> {
    webp_encode(
        img,
        opaque,
        &webp_config(false, f32::from(quality.min(100)))?,
    )
}

/// Lossless WebP that keeps every RGBA value (`exact`).
pub(crate) fn webp_lossless(img: &DynamicImage, opaque: bool) -> Result<Vec<u8>, String> {
    webp_encode(img, opaque, &webp_config(true, 75.0)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use image::{GrayImage, Rgb, RgbImage};

    #[test]
    fn mozjpeg_output_decodes_in_colour_and_grey_and_bad_sizes_are_errors() {
        let rgb = DynamicImage::ImageRgb8(RgbImage::from_fn(37, 23, |x, y| {
            Rgb([(x * 7) as u8, (y * 11) as u8, ((x + y) * 3) as u8])
        }));
        let grey = DynamicImage::ImageLuma8(GrayImage::from_fn(16, 9, |x, y| {
            image::Luma([(x * 16 + y) as u8])
        }));
        for (img, is_grey) in [(&rgb, false), (&grey, true)] {
            let out = jpeg(img, is_grey, 70).expect("encodes");
            let back = image::load_from_memory_with_format(&out, image::ImageFormat::Jpeg)
                .expect("decodes");
            assert_eq!((back.width(), back.height()), (img.width(), img.height()));
            assert_eq!(back.color().channel_count(), if is_grey { 1 } else { 3 });
        }
        let empty = DynamicImage::ImageRgb8(RgbImage::new(0, 5));
        assert!(jpeg(&empty, false, 70).unwrap_err().contains("0x5"));
    }
}
