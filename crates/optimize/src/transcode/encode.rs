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

/// JPEG at `quality` (1–100), with 4:2:0 chroma subsampling (what libjpeg's cjpeg and
/// mozjpeg do by default; image's own encoder keeps full-resolution chroma: ~30 % larger at
/// the same luma SSIM); greyscale images are encoded with one component. jpeg-encoder's
/// optimized Huffman tables are left off: with subsampling, image's decoder (zune-jpeg)
/// misreads them (measured: SSIM 0.23), and the proxy checks every result by decoding it.
pub(crate) fn jpeg(img: &DynamicImage, grey: bool, quality: u8) -> Result<Vec<u8>, String> {
    let (w, h) = (img.width(), img.height());
    let (Ok(w16), Ok(h16)) = (u16::try_from(w), u16::try_from(h)) else {
        return Err(format!("JPEG encode: {w}x{h} is larger than JPEG allows"));
    };
    let mut out = Vec::new();
    let mut enc = jpeg_encoder::Encoder::new(&mut out, quality.clamp(1, 100));
    let res = if grey {
        enc.encode(
            img.to_luma8().as_raw(),
            w16,
            h16,
            jpeg_encoder::ColorType::Luma,
        )
    } else {
        enc.set_sampling_factor(jpeg_encoder::SamplingFactor::R_4_2_0);
        enc.encode(
            img.to_rgb8().as_raw(),
            w16,
            h16,
            jpeg_encoder::ColorType::Rgb,
        )
    };
    res.map_err(|e| format!("JPEG encode: {e}"))?;
    Ok(out)
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
