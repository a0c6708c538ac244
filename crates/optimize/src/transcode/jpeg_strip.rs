//! Lossless JPEG slimming: drop metadata segments (Exif/XMP, Photoshop, comments, thumbnails)
//! without touching the entropy-coded data, so the decoded pixels are identical.
//!
//! Kept: APP0 JFIF (not JFXX thumbnails), APP2 ICC_PROFILE (colour-managed browsers use it;
//! MPF is dropped), APP14 (Adobe: tells decoders the colour transform) and APP1 Exif when its
//! orientation is not upright.

use super::detect::jpeg_exif_orientation;

/// Returns the JPEG without its removable metadata, or `None` when the segment structure is
/// malformed (the caller then keeps the original).
pub(crate) fn strip_metadata(b: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(b.len());
    out.extend_from_slice(b.get(0..2)?);
    let mut i = 2;
    loop {
        while b.get(i) == Some(&0xFF) && b.get(i + 1) == Some(&0xFF) {
            i += 1;
        }
        if *b.get(i)? != 0xFF {
            return None;
        }
        let marker = *b.get(i + 1)?;
        if matches!(marker, 0x01 | 0xD0..=0xD7) {
            out.extend_from_slice(&b[i..i + 2]);
            i += 2;
            continue;
        }
        if marker == 0xD9 {
            out.extend_from_slice(&b[i..i + 2]);
            return Some(out);
        }
        let len = usize::from(u16::from_be_bytes([*b.get(i + 2)?, *b.get(i + 3)?]));
        let end = i.checked_add(2 + len)?;
        let segment = b.get(i..end)?;
        if marker == 0xDA {
            // Start of scan: everything from here (scans, tables between progressive scans,
            // EOI) is copied verbatim.
            out.extend_from_slice(&b[i..]);
            return Some(out);
        }
        let keep = match marker {
            0xE0 => segment.get(4..)?.starts_with(b"JFIF\0"),
            0xE2 => segment.get(4..)?.starts_with(b"ICC_PROFILE\0"),
            0xEE => true,
            0xE1 => jpeg_exif_orientation(segment.get(4..)?).is_some_and(|o| o != 1),
            0xE3..=0xED | 0xEF | 0xFE => false,
            _ => true,
        };
        if keep {
            out.extend_from_slice(segment);
        }
        i = end;
    }
}
