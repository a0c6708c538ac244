//! Indexed-colour PNG: an exact palette when an image has at most 256 colours (lossless), or a
//! NeuQuant-quantized palette (lossy, checked against SSIM by the caller). Writes the smallest
//! bit depth (1, 2, 4 or 8) and a tRNS chunk trimmed to the entries that are not opaque.

use std::collections::HashMap;

use image::RgbaImage;

/// A palette image: up to 256 RGBA colours and one index per pixel, row-major.
#[derive(Clone, Debug)]
pub(crate) struct Indexed {
    pub width: u32,
    pub height: u32,
    pub palette: Vec<[u8; 4]>,
    pub indices: Vec<u8>,
}

/// The image's exact palette, or `None` when it has more than 256 distinct RGBA colours.
pub(crate) fn exact(img: &RgbaImage) -> Option<Indexed> {
    let mut map: HashMap<[u8; 4], u8> = HashMap::new();
    let mut palette = Vec::new();
    let mut indices = Vec::with_capacity(img.as_raw().len() / 4);
    for p in img.pixels() {
        let idx = match map.get(&p.0) {
            Some(&i) => i,
            None => {
                if palette.len() == 256 {
                    return None;
                }
                let i = palette.len() as u8;
                map.insert(p.0, i);
                palette.push(p.0);
                i
            }
        };
        indices.push(idx);
    }
    Some(Indexed {
        width: img.width(),
        height: img.height(),
        palette,
        indices,
    })
}

/// Quantizes to at most `colors` colours with NeuQuant (`sample` 1 = best, 30 = fastest).
pub(crate) fn quantize(img: &RgbaImage, colors: usize, sample: i32) -> Indexed {
    let nq = color_quant::NeuQuant::new(sample, colors.clamp(2, 256), img.as_raw());
    let palette: Vec<[u8; 4]> = nq
        .color_map_rgba()
        .chunks_exact(4)
        .map(|c| [c[0], c[1], c[2], c[3]])
        .collect();
    let indices = img.pixels().map(|p| nq.index_of(&p.0) as u8).collect();
    Indexed {
        width: img.width(),
        height: img.height(),
        palette,
        indices,
    }
}

impl Indexed {
    /// The image as RGBA pixels (to measure SSIM against the original).
    pub(crate) fn to_rgba(&self) -> Option<RgbaImage> {
        let mut raw = Vec::with_capacity(self.indices.len() * 4);
        for &i in &self.indices {
            raw.extend_from_slice(self.palette.get(usize::from(i))?);
        }
        RgbaImage::from_raw(self.width, self.height, raw)
    }

    /// Encodes as an indexed PNG with maximum deflate effort.
    pub(crate) fn to_png(&self) -> Result<Vec<u8>, String> {
        // Put non-opaque entries first so tRNS can stop at the last of them.
        let mut order: Vec<usize> = (0..self.palette.len()).collect();
        order.sort_by_key(|&i| self.palette[i][3] == 255);
        let mut remap = vec![0u8; self.palette.len()];
        for (new, &old) in order.iter().enumerate() {
            remap[old] = new as u8;
        }
        let plte: Vec<u8> = order
            .iter()
            .flat_map(|&i| self.palette[i][..3].to_vec())
            .collect();
        let trns: Vec<u8> = order
            .iter()
            .map(|&i| self.palette[i][3])
            .take_while(|&a| a != 255)
            .collect();
        let depth: u8 = match self.palette.len() {
            0..=2 => 1,
            3..=4 => 2,
            5..=16 => 4,
            _ => 8,
        };
        let w = self.width as usize;
        let per_byte = 8 / usize::from(depth);
        let stride = w.div_ceil(per_byte);
        let mut packed = vec![0u8; stride * self.height as usize];
        for (y, row) in self.indices.chunks_exact(w.max(1)).enumerate() {
            let out = &mut packed[y * stride..(y + 1) * stride];
            for (x, &i) in row.iter().enumerate() {
                let v = remap.get(usize::from(i)).copied().unwrap_or(0);
                let shift = 8 - usize::from(depth) * (x % per_byte + 1);
                out[x / per_byte] |= v << shift;
            }
        }
        let mut buf = Vec::new();
        {
            let mut enc = png::Encoder::new(&mut buf, self.width, self.height);
            enc.set_color(png::ColorType::Indexed);
            enc.set_depth(match depth {
                1 => png::BitDepth::One,
                2 => png::BitDepth::Two,
                4 => png::BitDepth::Four,
                _ => png::BitDepth::Eight,
            });
            enc.set_palette(plte);
            if !trns.is_empty() {
                enc.set_trns(trns);
            }
            enc.set_compression(png::Compression::High);
            // Palette indices are not a continuous signal: unfiltered rows compress best.
            enc.set_filter(png::Filter::NoFilter);
            let mut writer = enc.write_header().map_err(|e| format!("PNG: {e}"))?;
            writer
                .write_image_data(&packed)
                .map_err(|e| format!("PNG: {e}"))?;
            writer.finish().map_err(|e| format!("PNG: {e}"))?;
        }
        Ok(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_palette_roundtrips_through_png() {
        let img = RgbaImage::from_fn(13, 7, |x, y| {
            image::Rgba([
                (x * 20) as u8,
                (y * 30) as u8,
                7,
                if x == 0 { 0 } else { 255 },
            ])
        });
        let ix = exact(&img).unwrap();
        assert_eq!(ix.to_rgba().unwrap(), img);
        let png = ix.to_png().unwrap();
        let back = image::load_from_memory(&png).unwrap().to_rgba8();
        assert_eq!(back, img);
    }

    #[test]
    fn too_many_colours_has_no_exact_palette() {
        let img = RgbaImage::from_fn(32, 32, |x, y| image::Rgba([x as u8, y as u8, 0, 255]));
        assert!(exact(&img).is_none());
    }
}
