//! Test images generated in code: a photo-like JPEG, a flat-colour logo (PNG and GIF), an
//! animated GIF and a truecolour PNG with alpha. Deterministic (a fixed xorshift seed).
#![allow(dead_code)]

use image::codecs::jpeg::JpegEncoder;
use image::codecs::png::{CompressionType, FilterType, PngEncoder};
use image::{DynamicImage, ExtendedColorType, ImageEncoder, Rgb, RgbImage, Rgba, RgbaImage};

/// A small deterministic PRNG so that tests need no extra crate.
pub struct XorShift(pub u64);

impl XorShift {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// Uniform in -amp..=amp.
    pub fn noise(&mut self, amp: i32) -> i32 {
        (self.next() % (2 * amp as u64 + 1)) as i32 - amp
    }
}

fn clamp(v: f32) -> u8 {
    v.round().clamp(0.0, 255.0) as u8
}

/// Photo-like pixels: smooth gradients, soft shapes and mild sensor noise.
pub fn photo_pixels(w: u32, h: u32, noise: i32) -> RgbImage {
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    RgbImage::from_fn(w, h, |x, y| {
        let (fx, fy) = (x as f32 / w as f32, y as f32 / h as f32);
        let wave = ((fx * 9.0).sin() * (fy * 7.0).cos()) * 40.0;
        let disc = if (fx - 0.6).powi(2) + (fy - 0.4).powi(2) < 0.05 {
            60.0
        } else {
            0.0
        };
        let r = 90.0 + 120.0 * fx + wave + disc + rng.noise(noise) as f32;
        let g = 60.0 + 100.0 * fy - wave * 0.5 + rng.noise(noise) as f32;
        let b = 160.0 - 80.0 * fx + disc * 0.3 + rng.noise(noise) as f32;
        Rgb([clamp(r), clamp(g), clamp(b)])
    })
}

/// The photo as a quality-92 JPEG (a typical web photo).
pub fn photo_jpeg(w: u32, h: u32) -> Vec<u8> {
    jpeg_of(&photo_pixels(w, h, 3), 92)
}

pub fn jpeg_of(img: &RgbImage, q: u8) -> Vec<u8> {
    let mut out = Vec::new();
    JpegEncoder::new_with_quality(&mut out, q)
        .write_image(
            img.as_raw(),
            img.width(),
            img.height(),
            ExtendedColorType::Rgb8,
        )
        .unwrap();
    out
}

/// Inserts metadata segments (a 4 KB Exif-like APP1 with orientation 1 and a comment) after SOI.
pub fn with_metadata(jpeg: &[u8]) -> Vec<u8> {
    let mut exif =
        b"Exif\0\0II*\0\x08\0\0\0\x01\0\x12\x01\x03\0\x01\0\0\0\x01\0\0\0\0\0\0\0".to_vec();
    exif.resize(4000, 0x55);
    let mut out = jpeg[..2].to_vec();
    out.extend_from_slice(&[0xFF, 0xE1]);
    out.extend_from_slice(&((exif.len() + 2) as u16).to_be_bytes());
    out.extend_from_slice(&exif);
    let comment = b"made by a camera that likes to talk about itself";
    out.extend_from_slice(&[0xFF, 0xFE]);
    out.extend_from_slice(&((comment.len() + 2) as u16).to_be_bytes());
    out.extend_from_slice(comment);
    out.extend_from_slice(&jpeg[2..]);
    out
}

/// A flat-colour logo: background, a bar, a disc and a frame; 4 colours.
pub fn logo_pixels(w: u32, h: u32) -> RgbaImage {
    RgbaImage::from_fn(w, h, |x, y| {
        let (cx, cy) = (x as i64 - w as i64 / 3, y as i64 - h as i64 / 2);
        if x < 3 || y < 3 || x >= w - 3 || y >= h - 3 {
            Rgba([20, 20, 90, 255])
        } else if cx * cx + cy * cy < (h as i64 / 3).pow(2) {
            Rgba([230, 120, 20, 255])
        } else if y > h / 2 && y < h / 2 + 8 {
            Rgba([30, 160, 60, 255])
        } else {
            Rgba([250, 250, 245, 255])
        }
    })
}

/// A PNG written carelessly (RGBA, no filtering, fast deflate), as many sites serve them.
pub fn careless_png(img: &RgbaImage) -> Vec<u8> {
    let mut out = Vec::new();
    PngEncoder::new_with_quality(&mut out, CompressionType::Fast, FilterType::NoFilter)
        .write_image(
            img.as_raw(),
            img.width(),
            img.height(),
            ExtendedColorType::Rgba8,
        )
        .unwrap();
    out
}

/// A single-frame GIF of an image with at most 256 colours.
pub fn gif_of(img: &RgbaImage) -> Vec<u8> {
    gif_frames(std::slice::from_ref(img))
}

/// A GIF with one frame per image (animated when more than one).
pub fn gif_frames(frames: &[RgbaImage]) -> Vec<u8> {
    let (w, h) = (frames[0].width() as u16, frames[0].height() as u16);
    let mut out = Vec::new();
    {
        let mut enc = gif::Encoder::new(&mut out, w, h, &[]).unwrap();
        if frames.len() > 1 {
            enc.set_repeat(gif::Repeat::Infinite).unwrap();
        }
        for f in frames {
            let mut raw = f.as_raw().clone();
            let mut frame = gif::Frame::from_rgba_speed(w, h, &mut raw, 10);
            frame.delay = 10;
            enc.write_frame(&frame).unwrap();
        }
    }
    out
}

/// A truecolour RGBA image with a soft round alpha mask (many colours, real transparency).
pub fn alpha_pixels(w: u32, h: u32) -> RgbaImage {
    let photo = photo_pixels(w, h, 3);
    RgbaImage::from_fn(w, h, |x, y| {
        let (dx, dy) = (x as f32 / w as f32 - 0.5, y as f32 / h as f32 - 0.5);
        let d = (dx * dx + dy * dy).sqrt();
        let a = clamp(255.0 * (1.0 - (d - 0.3) / 0.15).clamp(0.0, 1.0));
        let p = photo.get_pixel(x, y).0;
        Rgba([p[0], p[1], p[2], a])
    })
}

/// Decodes any supported image.
pub fn decode(bytes: &[u8]) -> DynamicImage {
    image::load_from_memory(bytes).unwrap()
}
