//! Format sniffing and header parsing from magic bytes, before any decoding.
//!
//! Everything here reads only the first bytes and the block structure of a file, so a
//! decompression bomb (a tiny body that claims huge dimensions) is refused without allocating
//! its pixels, and an animation is recognised without decoding its frames.

/// An image format that webpep can transcode, as sniffed from the body's first bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Format {
    /// JPEG (JFIF/Exif), starts `FF D8 FF`.
    Jpeg,
    /// PNG (and APNG), starts with the 8-byte PNG signature.
    Png,
    /// GIF87a or GIF89a.
    Gif,
    /// WebP (`RIFF....WEBP`).
    Webp,
}

impl Format {
    /// The format's MIME type.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Jpeg => "image/jpeg",
            Format::Png => "image/png",
            Format::Gif => "image/gif",
            Format::Webp => "image/webp",
        }
    }

    /// Short lower-case name ("jpeg", "png", ...), used in reports.
    pub fn name(self) -> &'static str {
        match self {
            Format::Jpeg => "jpeg",
            Format::Png => "png",
            Format::Gif => "gif",
            Format::Webp => "webp",
        }
    }

    /// The format a `Content-Type` value names, if it is one of ours.
    pub fn from_content_type(ct: &str) -> Option<Format> {
        let mime = ct
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        match mime.as_str() {
            "image/jpeg" | "image/jpg" | "image/pjpeg" => Some(Format::Jpeg),
            "image/png" | "image/x-png" | "image/apng" => Some(Format::Png),
            "image/gif" => Some(Format::Gif),
            "image/webp" => Some(Format::Webp),
            _ => None,
        }
    }

    pub(crate) fn image_format(self) -> image::ImageFormat {
        match self {
            Format::Jpeg => image::ImageFormat::Jpeg,
            Format::Png => image::ImageFormat::Png,
            Format::Gif => image::ImageFormat::Gif,
            Format::Webp => image::ImageFormat::WebP,
        }
    }
}

const PNG_SIGNATURE: &[u8] = b"\x89PNG\r\n\x1a\n";

/// Sniffs the format from magic bytes only; `None` for anything else (SVG, BMP, HTML...).
pub fn sniff(body: &[u8]) -> Option<Format> {
    if body.starts_with(&[0xFF, 0xD8, 0xFF]) {
        Some(Format::Jpeg)
    } else if body.starts_with(PNG_SIGNATURE) {
        Some(Format::Png)
    } else if body.starts_with(b"GIF87a") || body.starts_with(b"GIF89a") {
        Some(Format::Gif)
    } else if body.len() >= 12 && &body[0..4] == b"RIFF" && &body[8..12] == b"WEBP" {
        Some(Format::Webp)
    } else {
        None
    }
}

/// What the header says about an image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Width in pixels as declared by the header.
    pub width: u32,
    /// Height in pixels as declared by the header.
    pub height: u32,
    /// More than one frame (animated GIF, APNG, animated WebP).
    pub animated: bool,
}

impl Header {
    /// Declared pixel count.
    pub fn pixels(&self) -> u64 {
        u64::from(self.width) * u64::from(self.height)
    }
}

/// Reads dimensions and animation from the header of a body already sniffed as `format`.
/// `Err` carries a reason when the header is truncated or malformed.
pub fn read_header(format: Format, body: &[u8]) -> Result<Header, String> {
    match format {
        Format::Jpeg => jpeg_header(body),
        Format::Png => png_header(body),
        Format::Gif => gif_header(body),
        Format::Webp => webp_header(body),
    }
}

fn be16(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from(u16::from_be_bytes([
        *b.get(at)?,
        *b.get(at + 1)?,
    ])))
}

fn be32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes([
        *b.get(at)?,
        *b.get(at + 1)?,
        *b.get(at + 2)?,
        *b.get(at + 3)?,
    ]))
}

fn le16(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from(u16::from_le_bytes([
        *b.get(at)?,
        *b.get(at + 1)?,
    ])))
}

fn le24(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes([
        *b.get(at)?,
        *b.get(at + 1)?,
        *b.get(at + 2)?,
        0,
    ]))
}

fn le32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes([
        *b.get(at)?,
        *b.get(at + 1)?,
        *b.get(at + 2)?,
        *b.get(at + 3)?,
    ]))
}

fn jpeg_header(b: &[u8]) -> Result<Header, String> {
    let truncated = || "truncated JPEG header".to_string();
    let mut i = 2;
    loop {
        // Markers may be preceded by fill bytes 0xFF.
        while b.get(i) == Some(&0xFF) && b.get(i + 1) == Some(&0xFF) {
            i += 1;
        }
        if b.get(i) != Some(&0xFF) {
            return Err(format!("JPEG: expected a marker at byte {i}"));
        }
        let marker = *b.get(i + 1).ok_or_else(truncated)?;
        match marker {
            // Standalone markers carry no length.
            0x01 | 0xD0..=0xD7 => {
                i += 2;
                continue;
            }
            0xD9 | 0xDA => return Err("JPEG: no frame header before the scan".into()),
            _ => {}
        }
        let len = be16(b, i + 2).ok_or_else(truncated)? as usize;
        if len < 2 {
            return Err("JPEG: bad segment length".into());
        }
        let is_sof = matches!(marker, 0xC0..=0xCF) && !matches!(marker, 0xC4 | 0xC8 | 0xCC);
        if is_sof {
            let height = be16(b, i + 5).ok_or_else(truncated)?;
            let width = be16(b, i + 7).ok_or_else(truncated)?;
            if width == 0 || height == 0 {
                return Err("JPEG: zero dimension".into());
            }
            // A JPEG without an end-of-image marker is truncated: decoders would fill the
            // missing part with grey, and the proxy would cache and serve the damage.
            if !b[i..].windows(2).any(|w| w == [0xFF, 0xD9]) {
                return Err("JPEG: truncated (no end-of-image marker)".into());
            }
            return Ok(Header {
                width,
                height,
                animated: false,
            });
        }
        i += 2 + len;
    }
}

fn png_header(b: &[u8]) -> Result<Header, String> {
    if b.get(12..16) != Some(b"IHDR") {
        return Err("PNG: missing IHDR".into());
    }
    let width = be32(b, 16).ok_or("PNG: truncated IHDR")?;
    let height = be32(b, 20).ok_or("PNG: truncated IHDR")?;
    if width == 0 || height == 0 {
        return Err("PNG: zero dimension".into());
    }
    // APNG: an acTL chunk before the first IDAT.
    let mut i = 8;
    let mut animated = false;
    let mut seen_iend = false;
    while let (Some(len), Some(kind)) = (be32(b, i), b.get(i + 4..i + 8)) {
        match kind {
            b"acTL" => animated = true,
            b"IEND" => {
                // The whole chunk (with its CRC) must be there.
                seen_iend = b.len() >= i.saturating_add(12);
                break;
            }
            _ => {}
        }
        i = i.saturating_add(12).saturating_add(len as usize);
    }
    if !seen_iend {
        return Err("PNG: truncated (no IEND chunk)".into());
    }
    Ok(Header {
        width,
        height,
        animated,
    })
}

fn gif_header(b: &[u8]) -> Result<Header, String> {
    let truncated = || "GIF: truncated".to_string();
    let width = le16(b, 6).ok_or_else(truncated)?;
    let height = le16(b, 8).ok_or_else(truncated)?;
    let flags = *b.get(10).ok_or_else(truncated)?;
    let mut i = 13;
    if flags & 0x80 != 0 {
        i += 3 * (1usize << ((flags & 7) + 1));
    }
    // Skips a chain of data sub-blocks ending with a zero-length block.
    let skip_sub_blocks = |mut i: usize| -> Option<usize> {
        loop {
            let n = *b.get(i)? as usize;
            i += 1 + n;
            if n == 0 {
                return Some(i);
            }
        }
    };
    let mut frames = 0u32;
    let mut max_w = width;
    let mut max_h = height;
    loop {
        match *b.get(i).ok_or_else(truncated)? {
            0x21 => {
                i = skip_sub_blocks(i + 2).ok_or_else(truncated)?;
            }
            0x2C => {
                // An image may extend past the logical screen; the decoder allocates for it.
                let fx = le16(b, i + 1).ok_or_else(truncated)?;
                let fy = le16(b, i + 3).ok_or_else(truncated)?;
                let fw = le16(b, i + 5).ok_or_else(truncated)?;
                let fh = le16(b, i + 7).ok_or_else(truncated)?;
                max_w = max_w.max(fx + fw);
                max_h = max_h.max(fy + fh);
                let lflags = *b.get(i + 9).ok_or_else(truncated)?;
                i += 10;
                if lflags & 0x80 != 0 {
                    i += 3 * (1usize << ((lflags & 7) + 1));
                }
                // LZW minimum code size, then the data sub-blocks.
                i = skip_sub_blocks(i + 1).ok_or_else(truncated)?;
                frames += 1;
                if frames > 1 {
                    break;
                }
            }
            0x3B => break,
            other => return Err(format!("GIF: unexpected block 0x{other:02x}")),
        }
    }
    if frames == 0 {
        return Err("GIF: no image".into());
    }
    if max_w == 0 || max_h == 0 {
        return Err("GIF: zero dimension".into());
    }
    Ok(Header {
        width: max_w,
        height: max_h,
        animated: frames > 1,
    })
}

fn webp_header(b: &[u8]) -> Result<Header, String> {
    let truncated = || "WebP: truncated".to_string();
    let riff_len = le32(b, 4).ok_or_else(truncated)? as usize;
    if b.len() < riff_len.saturating_add(8) {
        return Err(truncated());
    }
    let kind = b.get(12..16).ok_or_else(truncated)?;
    match kind {
        b"VP8X" => {
            let flags = *b.get(20).ok_or_else(truncated)?;
            let width = le24(b, 24).ok_or_else(truncated)? + 1;
            let height = le24(b, 27).ok_or_else(truncated)? + 1;
            Ok(Header {
                width,
                height,
                animated: flags & 0x02 != 0,
            })
        }
        b"VP8 " => {
            // Frame tag (3 bytes), start code 9d 01 2a, then 14-bit width and height.
            if b.get(23..26) != Some(&[0x9d, 0x01, 0x2a]) {
                return Err("WebP: bad VP8 start code".into());
            }
            let width = le16(b, 26).ok_or_else(truncated)? & 0x3FFF;
            let height = le16(b, 28).ok_or_else(truncated)? & 0x3FFF;
            if width == 0 || height == 0 {
                return Err("WebP: zero dimension".into());
            }
            Ok(Header {
                width,
                height,
                animated: false,
            })
        }
        b"VP8L" => {
            if b.get(20) != Some(&0x2f) {
                return Err("WebP: bad VP8L signature".into());
            }
            let bits = le32(b, 21).ok_or_else(truncated)?;
            let width = (bits & 0x3FFF) + 1;
            let height = ((bits >> 14) & 0x3FFF) + 1;
            Ok(Header {
                width,
                height,
                animated: false,
            })
        }
        _ => Err("WebP: unknown chunk".into()),
    }
}

/// The Exif orientation tag (1 = upright) of a JPEG APP1 segment's payload, if it has one.
/// Images whose orientation is not 1 must keep their Exif or browsers show them sideways.
pub fn jpeg_exif_orientation(app1_payload: &[u8]) -> Option<u16> {
    let tiff = app1_payload.strip_prefix(b"Exif\0\0")?;
    let little = match tiff.get(0..2)? {
        b"II" => true,
        b"MM" => false,
        _ => return None,
    };
    let r16 = |at: usize| -> Option<u16> {
        let v = [*tiff.get(at)?, *tiff.get(at + 1)?];
        Some(if little {
            u16::from_le_bytes(v)
        } else {
            u16::from_be_bytes(v)
        })
    };
    let r32 = |at: usize| -> Option<u32> {
        let v = [
            *tiff.get(at)?,
            *tiff.get(at + 1)?,
            *tiff.get(at + 2)?,
            *tiff.get(at + 3)?,
        ];
        Some(if little {
            u32::from_le_bytes(v)
        } else {
            u32::from_be_bytes(v)
        })
    };
    let ifd = r32(4)? as usize;
    let count = r16(ifd)? as usize;
    for k in 0..count.min(512) {
        let entry = ifd + 2 + 12 * k;
        if r16(entry)? == 0x0112 {
            return r16(entry + 8);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sniffs_magic_bytes() {
        assert_eq!(sniff(b"\xFF\xD8\xFF\xE0"), Some(Format::Jpeg));
        assert_eq!(sniff(b"GIF89a...."), Some(Format::Gif));
        assert_eq!(sniff(b"RIFF\0\0\0\0WEBPVP8 "), Some(Format::Webp));
        assert_eq!(sniff(b"<svg xmlns="), None);
        assert_eq!(sniff(b""), None);
    }

    #[test]
    fn png_bomb_header_is_read_without_decoding() {
        let mut b = PNG_SIGNATURE.to_vec();
        b.extend_from_slice(&13u32.to_be_bytes());
        b.extend_from_slice(b"IHDR");
        b.extend_from_slice(&100_000u32.to_be_bytes());
        b.extend_from_slice(&100_000u32.to_be_bytes());
        b.extend_from_slice(&[8, 6, 0, 0, 0, 0, 0, 0, 0]);
        b.extend_from_slice(&0u32.to_be_bytes());
        b.extend_from_slice(b"IEND");
        b.extend_from_slice(&[0; 4]);
        let h = read_header(Format::Png, &b).unwrap();
        assert_eq!((h.width, h.height, h.animated), (100_000, 100_000, false));
    }

    #[test]
    fn truncated_headers_are_errors() {
        assert!(read_header(Format::Png, PNG_SIGNATURE).is_err());
        assert!(read_header(Format::Gif, b"GIF89a\x01").is_err());
        assert!(read_header(Format::Jpeg, b"\xFF\xD8\xFF").is_err());
        assert!(read_header(Format::Webp, b"RIFF\x04\0\0\0WEBP").is_err());
    }

    #[test]
    fn content_types() {
        assert_eq!(
            Format::from_content_type("image/JPEG; q=1"),
            Some(Format::Jpeg)
        );
        assert_eq!(Format::from_content_type("text/html"), None);
    }
}
