//! Structural similarity (SSIM, Wang et al. 2004) on luma: an 11×11 Gaussian window
//! (σ = 1.5), the standard constants C1 = (0.01·255)², C2 = (0.03·255)², averaged over every
//! window position that fits inside the image.

use image::DynamicImage;

/// Background that transparent pixels are composited onto before measuring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Background {
    White,
    Black,
}

/// Mean SSIM between two images of equal size, on luma (BT.601), with alpha composited on
/// white first. 1.0 means identical luma; images of different sizes score 0.0.
pub fn ssim(a: &DynamicImage, b: &DynamicImage) -> f64 {
    if a.width() != b.width() || a.height() != b.height() {
        return 0.0;
    }
    let (w, h) = (a.width() as usize, a.height() as usize);
    Reference::new(luma_plane(a, Background::White), w, h).score(&luma_plane(b, Background::White))
}

/// Luma of every pixel as f32, alpha composited over `bg`.
pub(crate) fn luma_plane(img: &DynamicImage, bg: Background) -> Vec<f32> {
    let back = match bg {
        Background::White => 255.0,
        Background::Black => 0.0,
    };
    let luma = |r: u8, g: u8, bl: u8, a: u8| {
        let y = 0.299 * f32::from(r) + 0.587 * f32::from(g) + 0.114 * f32::from(bl);
        let a = f32::from(a) / 255.0;
        y * a + back * (1.0 - a)
    };
    // The common 8-bit layouts are read in place: an RGBA copy of a large image would be
    // 4 more bytes per pixel at the transcoder's peak.
    match img {
        DynamicImage::ImageRgb8(i) => i.pixels().map(|p| luma(p[0], p[1], p[2], 255)).collect(),
        DynamicImage::ImageRgba8(i) => i.pixels().map(|p| luma(p[0], p[1], p[2], p[3])).collect(),
        DynamicImage::ImageLuma8(i) => i.pixels().map(|p| luma(p[0], p[0], p[0], 255)).collect(),
        _ => img
            .to_rgba8()
            .pixels()
            .map(|p| luma(p[0], p[1], p[2], p[3]))
            .collect(),
    }
}

const C1: f64 = (0.01 * 255.0) * (0.01 * 255.0);
const C2: f64 = (0.03 * 255.0) * (0.03 * 255.0);

fn gaussian_kernel(size: usize, sigma: f64) -> Vec<f32> {
    let mid = (size as f64 - 1.0) / 2.0;
    let raw: Vec<f64> = (0..size)
        .map(|i| (-((i as f64 - mid).powi(2)) / (2.0 * sigma * sigma)).exp())
        .collect();
    let sum: f64 = raw.iter().sum();
    raw.iter().map(|v| (v / sum) as f32).collect()
}

/// Separable "valid" convolution: output is (w-k+1)×(h-k+1). Both passes accumulate one
/// kernel tap at a time over a whole row, which the compiler vectorises.
fn blur_valid(src: &[f32], w: usize, h: usize, k: &[f32]) -> Vec<f32> {
    let n = k.len();
    let ow = w + 1 - n;
    let oh = h + 1 - n;
    let mut tmp = vec![0f32; ow * h];
    for y in 0..h {
        let row = &src[y * w..(y + 1) * w];
        let out = &mut tmp[y * ow..(y + 1) * ow];
        for (j, &kj) in k.iter().enumerate() {
            for (o, s) in out.iter_mut().zip(&row[j..j + ow]) {
                *o += kj * s;
            }
        }
    }
    let mut out = vec![0f32; ow * oh];
    for y in 0..oh {
        let orow = &mut out[y * ow..(y + 1) * ow];
        for (j, &kj) in k.iter().enumerate() {
            let srow = &tmp[(y + j) * ow..(y + j + 1) * ow];
            for (o, s) in orow.iter_mut().zip(srow) {
                *o += kj * s;
            }
        }
    }
    out
}

/// The SSIM window: 11×11 Gaussian, σ = 1.5.
const WIN: usize = 11;

/// One side of SSIM computed once: a transcoder's quality search compares many candidates
/// with the same original, so the original's local means and energies (two of the five
/// blurred planes) are not recomputed for each.
pub(crate) struct Reference {
    plane: Vec<f32>,
    w: usize,
    h: usize,
    /// Blurred plane and blurred squares; empty when the image is smaller than the window.
    mu: Vec<f32>,
    sq: Vec<f32>,
}

impl Reference {
    pub(crate) fn new(plane: Vec<f32>, w: usize, h: usize) -> Reference {
        let (mu, sq) = if w >= WIN && h >= WIN && plane.len() == w * h {
            let k = gaussian_kernel(WIN, 1.5);
            let mu = blur_valid(&plane, w, h, &k);
            let squares: Vec<f32> = plane.iter().map(|v| v * v).collect();
            (mu, blur_valid(&squares, w, h, &k))
        } else {
            (Vec::new(), Vec::new())
        };
        Reference {
            plane,
            w,
            h,
            mu,
            sq,
        }
    }

    /// Mean SSIM of `other` (a luma plane of the same size) against this reference. Images
    /// smaller than the window in either dimension are measured as a single window covering
    /// the whole image (uniform weights).
    pub(crate) fn score(&self, other: &[f32]) -> f64 {
        let (a, b, w, h) = (&self.plane, other, self.w, self.h);
        if w == 0 || h == 0 || a.len() != w * h || b.len() != w * h {
            return 0.0;
        }
        if a.as_slice() == b {
            return 1.0;
        }
        if w < WIN || h < WIN {
            return global_ssim(a, b);
        }
        let k = gaussian_kernel(WIN, 1.5);
        // Each product plane is dropped once blurred, to keep the peak memory low.
        let mu_b = blur_valid(b, w, h, &k);
        let s_bb = blur_valid(&b.iter().map(|v| v * v).collect::<Vec<f32>>(), w, h, &k);
        let s_ab = blur_valid(
            &a.iter().zip(b).map(|(x, y)| x * y).collect::<Vec<f32>>(),
            w,
            h,
            &k,
        );
        let mut total = 0f64;
        for i in 0..mu_b.len() {
            let (ma, mb) = (f64::from(self.mu[i]), f64::from(mu_b[i]));
            let va = (f64::from(self.sq[i]) - ma * ma).max(0.0);
            let vb = (f64::from(s_bb[i]) - mb * mb).max(0.0);
            let cov = f64::from(s_ab[i]) - ma * mb;
            total += ((2.0 * ma * mb + C1) * (2.0 * cov + C2))
                / ((ma * ma + mb * mb + C1) * (va + vb + C2));
        }
        total / mu_b.len() as f64
    }
}

fn global_ssim(a: &[f32], b: &[f32]) -> f64 {
    let n = a.len() as f64;
    let ma = a.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
    let mb = b.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
    let (mut va, mut vb, mut cov) = (0f64, 0f64, 0f64);
    for (&x, &y) in a.iter().zip(b) {
        let (dx, dy) = (f64::from(x) - ma, f64::from(y) - mb);
        va += dx * dx;
        vb += dy * dy;
        cov += dx * dy;
    }
    va /= n;
    vb /= n;
    cov /= n;
    ((2.0 * ma * mb + C1) * (2.0 * cov + C2)) / ((ma * ma + mb * mb + C1) * (va + vb + C2))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SSIM of two luma planes of size w×h (see [`Reference::score`]).
    fn ssim_planes(a: &[f32], b: &[f32], w: usize, h: usize) -> f64 {
        Reference::new(a.to_vec(), w, h).score(b)
    }

    fn plane(w: usize, h: usize) -> Vec<f32> {
        (0..w * h)
            .map(|i| ((i % w) * 3 + (i / w) * 2) as f32 % 256.0)
            .collect()
    }

    #[test]
    fn identical_is_one_and_noise_lowers_it() {
        let a = plane(32, 24);
        assert_eq!(ssim_planes(&a, &a, 32, 24), 1.0);
        let mut b = a.clone();
        for (i, v) in b.iter_mut().enumerate() {
            *v += if i % 2 == 0 { 20.0 } else { -20.0 };
        }
        let s = ssim_planes(&a, &b, 32, 24);
        assert!(s < 0.9 && s > -1.0, "{s}");
    }

    #[test]
    fn tiny_images_use_one_window() {
        let a = vec![10.0, 20.0, 30.0, 40.0];
        let b = vec![10.0, 20.0, 30.0, 90.0];
        let s = ssim_planes(&a, &b, 2, 2);
        assert!(s < 1.0 && s > 0.0, "{s}");
    }

    /// SSIM computed the slow, obvious way: every window position, 2-D Gaussian weights.
    fn direct_ssim(a: &[f32], b: &[f32], w: usize, h: usize) -> f64 {
        let k = gaussian_kernel(WIN, 1.5);
        let mut total = 0f64;
        let mut count = 0usize;
        for y0 in 0..=h - WIN {
            for x0 in 0..=w - WIN {
                let (mut ma, mut mb, mut saa, mut sbb, mut sab) = (0f64, 0f64, 0f64, 0f64, 0f64);
                for j in 0..WIN {
                    for i in 0..WIN {
                        let wt = f64::from(k[i] * k[j]);
                        let (x, y) = (
                            f64::from(a[(y0 + j) * w + x0 + i]),
                            f64::from(b[(y0 + j) * w + x0 + i]),
                        );
                        ma += wt * x;
                        mb += wt * y;
                        saa += wt * x * x;
                        sbb += wt * y * y;
                        sab += wt * x * y;
                    }
                }
                let (va, vb, cov) = (saa - ma * ma, sbb - mb * mb, sab - ma * mb);
                total += ((2.0 * ma * mb + C1) * (2.0 * cov + C2))
                    / ((ma * ma + mb * mb + C1) * (va.max(0.0) + vb.max(0.0) + C2));
                count += 1;
            }
        }
        total / count as f64
    }

    #[test]
    fn a_prepared_reference_scores_as_the_direct_formula_does() {
        let (w, h) = (37, 29);
        let a = plane(w, h);
        let reference = Reference::new(a.clone(), w, h);
        for amp in [3.0f32, 15.0, 60.0] {
            let b: Vec<f32> = a
                .iter()
                .enumerate()
                .map(|(i, v)| v + amp * (((i * 7919) % 13) as f32 - 6.0) / 6.0)
                .collect();
            let (fast, slow) = (reference.score(&b), direct_ssim(&a, &b, w, h));
            assert!((fast - slow).abs() < 1e-4, "amp {amp}: {fast} vs {slow}");
            assert_eq!(fast, ssim_planes(&a, &b, w, h));
        }
    }

    #[test]
    fn kernel_sums_to_one() {
        let k = gaussian_kernel(11, 1.5);
        assert!((k.iter().sum::<f32>() - 1.0).abs() < 1e-5);
    }
}
