//! Lossy and lossless image transcoding for slow links (DESIGN §3 `transcode`; 000 §4.2,
//! 003 §7.1): JPEG re-encoded at the lowest quality that keeps SSIM above the preset's bound,
//! PNG/GIF recompressed or palette-reduced, WebP when the client's `Accept` lists it, and the
//! original kept whenever the result is not smaller or not similar enough.
//!
//! [`transcode`] is a pure function of its inputs (no I/O), so the proxy can call it on a
//! blocking thread and cache the result. The caller checks `Cache-Control: no-transform`
//! itself ([`crate::no_transform`]).

mod detect;
mod encode;
mod jpeg_strip;
mod palette;
mod ssim;

use std::fmt;
use std::io::Cursor;
use std::str::FromStr;
use std::time::{Duration, Instant};

use image::{DynamicImage, ImageDecoder, ImageReader, Limits};

pub use detect::{read_header, sniff, Format, Header};
pub use ssim::ssim;

use encode::PixelFacts;
use ssim::Background;

/// How far transcoding may go.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Preset {
    /// Pixel-identical output only (metadata stripped, better PNG compression, exact palettes).
    Lossless,
    /// Visually near-lossless: SSIM ≥ 0.95 against the original.
    Balanced,
    /// Smaller still: SSIM ≥ 0.85, lower qualities, fewer colours.
    Aggressive,
}

impl Preset {
    /// Every preset, mildest first.
    pub const ALL: [Preset; 3] = [Preset::Lossless, Preset::Balanced, Preset::Aggressive];

    /// The SSIM bound a result must reach unless [`TranscodeConfig::min_ssim`] overrides it.
    pub fn default_min_ssim(self) -> f64 {
        match self {
            Preset::Lossless => 1.0,
            Preset::Balanced => 0.95,
            Preset::Aggressive => 0.85,
        }
    }

    /// Quality range searched for JPEG and lossy WebP (lowest first).
    fn quality_range(self) -> (u8, u8) {
        match self {
            Preset::Lossless => (100, 100),
            Preset::Balanced => (45, 85),
            Preset::Aggressive => (20, 70),
        }
    }

    /// Palette size for quantized PNG output.
    fn palette_colors(self) -> usize {
        match self {
            Preset::Aggressive => 64,
            _ => 256,
        }
    }
}

impl fmt::Display for Preset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Preset::Lossless => "lossless",
            Preset::Balanced => "balanced",
            Preset::Aggressive => "aggressive",
        })
    }
}

/// A preset name that is not one of `lossless`, `balanced`, `aggressive`.
#[derive(Debug, thiserror::Error)]
#[error("unknown transcoding preset {0:?} (expected lossless, balanced or aggressive)")]
pub struct UnknownPreset(pub String);

impl FromStr for Preset {
    type Err = UnknownPreset;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "lossless" => Ok(Preset::Lossless),
            "balanced" => Ok(Preset::Balanced),
            "aggressive" => Ok(Preset::Aggressive),
            _ => Err(UnknownPreset(s.to_string())),
        }
    }
}

/// Transcoding settings (the proxy's `[transcode]` configuration section).
#[derive(Clone, Debug, serde::Deserialize)]
#[serde(rename_all = "kebab-case", default)]
pub struct TranscodeConfig {
    /// Quality preset.
    pub preset: Preset,
    /// Keep animations as they are (default); when false an animation becomes its first frame.
    pub keep_animations: bool,
    /// Refuse images whose header declares more pixels than this, before decoding.
    pub max_pixels: u64,
    /// Refuse bodies larger than this.
    pub max_input_bytes: usize,
    /// SSIM bound a result must reach; `None` uses the preset's ([`Preset::default_min_ssim`]).
    pub min_ssim: Option<f64>,
}

impl Default for TranscodeConfig {
    fn default() -> Self {
        TranscodeConfig {
            preset: Preset::Balanced,
            keep_animations: true,
            max_pixels: 40_000_000,
            max_input_bytes: 16 * 1024 * 1024,
            min_ssim: None,
        }
    }
}

impl TranscodeConfig {
    /// The configuration for `preset` with every other setting at its default.
    pub fn with_preset(preset: Preset) -> Self {
        TranscodeConfig {
            preset,
            ..Default::default()
        }
    }

    fn min_ssim(&self) -> f64 {
        self.min_ssim
            .unwrap_or_else(|| self.preset.default_min_ssim())
    }
}

/// What [`transcode`] decided.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// Send this body instead of the original.
    Transcoded {
        /// The new body.
        body: Vec<u8>,
        /// Its content type (`image/jpeg`, `image/png` or `image/webp`).
        content_type: &'static str,
        /// SSIM against the original (1.0 for pixel-identical output).
        ssim: Option<f64>,
    },
    /// Send the original; the reason is for logs and metrics.
    Unchanged(Skip),
}

/// Why the original was kept.
#[derive(Clone, Debug, PartialEq)]
pub enum Skip {
    /// Not a JPEG, PNG, GIF or WebP (by its bytes).
    NotAnImage,
    /// An animation, kept because [`TranscodeConfig::keep_animations`] is set.
    Animated,
    /// No candidate was smaller than the original.
    NotSmaller,
    /// The best candidate's SSIM (given) was below the bound.
    BelowSsim(f64),
    /// The image could not be parsed or decoded.
    Corrupt(String),
    /// Over the byte or pixel limit.
    TooLarge(String),
}

impl Skip {
    /// A short stable label for metrics (`not-an-image`, `animated`, ...).
    pub fn label(&self) -> &'static str {
        match self {
            Skip::NotAnImage => "not-an-image",
            Skip::Animated => "animated",
            Skip::NotSmaller => "not-smaller",
            Skip::BelowSsim(_) => "below-ssim",
            Skip::Corrupt(_) => "corrupt",
            Skip::TooLarge(_) => "too-large",
        }
    }
}

impl fmt::Display for Skip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Skip::NotAnImage => f.write_str("not an image"),
            Skip::Animated => f.write_str("animated image kept"),
            Skip::NotSmaller => f.write_str("no smaller encoding"),
            Skip::BelowSsim(s) => write!(f, "best candidate's SSIM {s:.4} below the bound"),
            Skip::Corrupt(m) => write!(f, "corrupt image: {m}"),
            Skip::TooLarge(m) => write!(f, "image too large: {m}"),
        }
    }
}

/// True when the `Accept` header lists `image/webp` explicitly with a non-zero q
/// (`*/*` or `image/*` alone are not enough: browsers that decode WebP say so).
pub fn accepts_webp(accept: Option<&str>) -> bool {
    let Some(accept) = accept else { return false };
    accept.split(',').any(|item| {
        let mut parts = item.split(';');
        let mime = parts.next().unwrap_or("").trim();
        if !mime.eq_ignore_ascii_case("image/webp") {
            return false;
        }
        let q = parts
            .filter_map(|p| {
                p.trim()
                    .strip_prefix("q=")
                    .or_else(|| p.trim().strip_prefix("Q="))
            })
            .filter_map(|v| v.trim().parse::<f32>().ok())
            .next()
            .unwrap_or(1.0);
        q > 0.0
    })
}

/// Time after which the quality search stops refining and keeps its best passing result.
const SEARCH_BUDGET: Duration = Duration::from_millis(1500);

/// Transcodes an image response body. `content_type` is the response's header (the real
/// format is sniffed from the bytes); `accept` is the client's `Accept` header. Never panics;
/// anything unexpected keeps the original.
pub fn transcode(
    body: &[u8],
    content_type: Option<&str>,
    accept: Option<&str>,
    cfg: &TranscodeConfig,
) -> Outcome {
    match transcode_inner(body, content_type, accept, cfg) {
        Ok(c) => Outcome::Transcoded {
            body: c.body,
            content_type: c.content_type,
            ssim: Some(c.ssim),
        },
        Err(skip) => {
            tracing::debug!(reason = %skip, bytes = body.len(), "image kept");
            Outcome::Unchanged(skip)
        }
    }
}

/// An encoded alternative and its similarity to the original.
struct Candidate {
    body: Vec<u8>,
    content_type: &'static str,
    ssim: f64,
}

/// What one input gives the search: its pixels and the facts that choose encoders.
struct Source {
    format: Format,
    img: DynamicImage,
    facts: PixelFacts,
    /// Luma planes of the original on white and (with alpha) on black, for SSIM.
    white: Vec<f32>,
    black: Option<Vec<f32>>,
}

impl Source {
    fn new(format: Format, img: DynamicImage) -> Source {
        let facts = PixelFacts::of(&img);
        let white = ssim::luma_plane(&img, Background::White);
        let black = (!facts.opaque).then(|| ssim::luma_plane(&img, Background::Black));
        Source {
            format,
            img,
            facts,
            white,
            black,
        }
    }

    /// SSIM of `other` against the original; with alpha, the worse of white and black
    /// backgrounds so that damaged transparency counts.
    fn ssim_of(&self, other: &DynamicImage) -> f64 {
        if other.width() != self.img.width() || other.height() != self.img.height() {
            return 0.0;
        }
        let (w, h) = (self.img.width() as usize, self.img.height() as usize);
        let on_white = ssim::ssim_planes(
            &self.white,
            &ssim::luma_plane(other, Background::White),
            w,
            h,
        );
        match &self.black {
            Some(black) => {
                let on_black =
                    ssim::ssim_planes(black, &ssim::luma_plane(other, Background::Black), w, h);
                on_white.min(on_black)
            }
            None => on_white,
        }
    }

    /// SSIM of an encoded body (decoded again), 0.0 when it does not decode.
    fn ssim_of_encoded(&self, body: &[u8], format: Format) -> f64 {
        match image::load_from_memory_with_format(body, format.image_format()) {
            Ok(img) => self.ssim_of(&img),
            Err(_) => 0.0,
        }
    }
}

/// SSIM of another encoder's `output` (another proxy's, say) against `original`, measured as
/// [`transcode`] measures its own candidates: luma, and with alpha the worse of white and
/// black backgrounds. Both are decoded within `cfg`'s byte and pixel limits; an image that
/// cannot be is the error (the output's marked as such).
pub fn compare(original: &[u8], output: &[u8], cfg: &TranscodeConfig) -> Result<f64, Skip> {
    let (format, header) = checked_header(original, None, cfg)?;
    let src = Source::new(format, decode(format, original, &header)?);
    let side = |e: Skip| match e {
        Skip::Corrupt(m) => Skip::Corrupt(format!("output: {m}")),
        Skip::NotAnImage => Skip::Corrupt("output is not an image".into()),
        other => other,
    };
    let (oformat, oheader) = checked_header(output, None, cfg).map_err(side)?;
    let out = decode(oformat, output, &oheader).map_err(side)?;
    Ok(src.ssim_of(&out))
}

/// The format and header of `body`, within `cfg`'s byte and pixel limits.
fn checked_header(
    body: &[u8],
    content_type: Option<&str>,
    cfg: &TranscodeConfig,
) -> Result<(Format, Header), Skip> {
    if body.len() > cfg.max_input_bytes {
        return Err(Skip::TooLarge(format!(
            "{} bytes > {} byte limit",
            body.len(),
            cfg.max_input_bytes
        )));
    }
    let declared = content_type.and_then(Format::from_content_type);
    let Some(format) = sniff(body) else {
        // Bytes that are no image under an image content type are a broken image, not text.
        return Err(match declared {
            Some(d) => Skip::Corrupt(format!("body is not a {} image", d.name())),
            None => Skip::NotAnImage,
        });
    };
    let header = read_header(format, body).map_err(Skip::Corrupt)?;
    if header.pixels() > cfg.max_pixels {
        return Err(Skip::TooLarge(format!(
            "{}x{} = {} pixels > {} pixel limit",
            header.width,
            header.height,
            header.pixels(),
            cfg.max_pixels
        )));
    }
    Ok((format, header))
}

fn transcode_inner(
    body: &[u8],
    content_type: Option<&str>,
    accept: Option<&str>,
    cfg: &TranscodeConfig,
) -> Result<Candidate, Skip> {
    let (format, header) = checked_header(body, content_type, cfg)?;
    if header.animated && cfg.keep_animations {
        return Err(Skip::Animated);
    }
    let src = Source::new(format, decode(format, body, &header)?);
    let webp_ok = accepts_webp(accept);
    let bound = cfg.min_ssim();

    let mut candidates: Vec<Candidate> = Vec::new();
    let mut failed_ssim: Option<f64> = None;
    let started = Instant::now();

    // Lossless candidates, good for every preset.
    lossless_candidates(&src, body, webp_ok, header.animated, &mut candidates);

    if cfg.preset != Preset::Lossless {
        let (lo, hi) = cfg.preset.quality_range();
        let photo_like =
            src.format == Format::Jpeg || palette::exact(&src.img.to_rgba8()).is_none();
        if photo_like {
            if src.facts.opaque {
                let r = search_quality(&src, lo, hi, bound, started, Format::Jpeg, |q| {
                    encode::jpeg(&src.img, src.facts.grey, q)
                });
                push_result(r, &mut candidates, &mut failed_ssim);
            }
            if webp_ok {
                let r = search_quality(&src, lo, hi, bound, started, Format::Webp, |q| {
                    encode::webp_lossy(&src.img, src.facts.opaque, q)
                });
                push_result(r, &mut candidates, &mut failed_ssim);
            }
        } else if webp_ok {
            // Few colours: lossy WebP sometimes beats the exact palette on large flat graphics.
            let r = search_quality(&src, lo, hi, bound, started, Format::Webp, |q| {
                encode::webp_lossy(&src.img, src.facts.opaque, q)
            });
            push_result(r, &mut candidates, &mut failed_ssim);
        }
    }

    if cfg.preset != Preset::Lossless && src.format != Format::Jpeg {
        push_result(
            reduce_palette(&src, cfg.preset.palette_colors(), bound),
            &mut candidates,
            &mut failed_ssim,
        );
    }

    let best = candidates
        .into_iter()
        .filter(|c| c.ssim >= bound)
        .min_by_key(|c| c.body.len());
    match best {
        Some(c) if c.body.len() < body.len() => Ok(c),
        Some(_) => Err(Skip::NotSmaller),
        None => Err(match failed_ssim {
            Some(s) => Skip::BelowSsim(s),
            None => Skip::NotSmaller,
        }),
    }
}

/// Palette reduction of a graphic (003 §7.1 reduces GIFs to 16 colours): the fewest colours,
/// of 16, 32, 64, … up to `max_colors`, whose result still meets the SSIM bound. Fewer
/// colours shrink the palette and make the deflated index rows more repetitive.
fn reduce_palette(src: &Source, max_colors: usize, bound: f64) -> Result<Candidate, f64> {
    let rgba = src.img.to_rgba8();
    let exact = palette::exact(&rgba)
        .map(|ix| ix.palette.len())
        .unwrap_or(usize::MAX);
    let mut best_fail = 0.0f64;
    let mut colors = 16;
    while colors <= max_colors && colors < exact {
        let q = palette::quantize(&rgba, colors, 10);
        if let (Some(out), Ok(png)) = (q.to_rgba(), q.to_png()) {
            let s = src.ssim_of(&DynamicImage::ImageRgba8(out));
            if s >= bound {
                return Ok(Candidate {
                    body: png,
                    content_type: "image/png",
                    ssim: s,
                });
            }
            best_fail = best_fail.max(s);
        }
        colors *= 2;
    }
    Err(best_fail)
}

/// Adds a passing candidate, or remembers the best failing SSIM.
fn push_result(r: Result<Candidate, f64>, out: &mut Vec<Candidate>, failed: &mut Option<f64>) {
    match r {
        Ok(c) => out.push(c),
        Err(s) => *failed = Some(failed.map_or(s, |f: f64| f.max(s))),
    }
}

fn lossless_candidates(
    src: &Source,
    body: &[u8],
    webp_ok: bool,
    animated: bool,
    out: &mut Vec<Candidate>,
) {
    match src.format {
        Format::Jpeg => {
            if let Some(stripped) = jpeg_strip::strip_metadata(body) {
                out.push(Candidate {
                    body: stripped,
                    content_type: "image/jpeg",
                    ssim: 1.0,
                });
            }
        }
        Format::Png | Format::Gif | Format::Webp => {
            // A lossy WebP source re-encoded losslessly only grows; its pixels are already lossy.
            if src.format == Format::Webp && !animated && !is_lossless_webp(body) {
                return;
            }
            if !src.facts.deep {
                if let Some(ix) = palette::exact(&src.img.to_rgba8()) {
                    if let Ok(png) = ix.to_png() {
                        out.push(Candidate {
                            body: png,
                            content_type: "image/png",
                            ssim: 1.0,
                        });
                    }
                }
            }
            if let Ok(png) = encode::png_lossless(&src.img, src.facts) {
                out.push(Candidate {
                    body: png,
                    content_type: "image/png",
                    ssim: 1.0,
                });
            }
            if webp_ok && !src.facts.deep {
                if let Ok(w) = encode::webp_lossless(&src.img, src.facts.opaque) {
                    out.push(Candidate {
                        body: w,
                        content_type: "image/webp",
                        ssim: 1.0,
                    });
                }
            }
        }
    }
}

fn is_lossless_webp(body: &[u8]) -> bool {
    // Simple lossless files start with VP8L; extended ones (VP8X) name it in a later chunk.
    body.get(12..16) == Some(b"VP8L") || body.windows(4).take(64).any(|w| w == b"VP8L")
}

/// Finds the lowest quality in `lo..=hi` whose encoding reaches `bound`, by bisection (SSIM
/// grows with quality). `Err` carries the SSIM at `hi` when even that fails.
fn search_quality(
    src: &Source,
    lo: u8,
    hi: u8,
    bound: f64,
    started: Instant,
    format: Format,
    encode: impl Fn(u8) -> Result<Vec<u8>, String>,
) -> Result<Candidate, f64> {
    let content_type = format.content_type();
    let try_q = |q: u8| -> Option<(Vec<u8>, f64)> {
        let body = encode(q).ok()?;
        let s = src.ssim_of_encoded(&body, format);
        Some((body, s))
    };
    let (body_lo, s_lo) = try_q(lo).ok_or(0.0)?;
    if s_lo >= bound {
        return Ok(Candidate {
            body: body_lo,
            content_type,
            ssim: s_lo,
        });
    }
    let (mut best_body, mut best_s) = try_q(hi).ok_or(s_lo)?;
    if best_s < bound {
        return Err(best_s);
    }
    let (mut fail, mut pass) = (lo, hi);
    // Stop when the step is small (a few quality points change size by a few percent).
    while pass - fail > 4 && started.elapsed() < SEARCH_BUDGET {
        let mid = fail + (pass - fail) / 2;
        match try_q(mid) {
            Some((b, s)) if s >= bound => {
                pass = mid;
                best_body = b;
                best_s = s;
            }
            Some(_) => fail = mid,
            None => break,
        }
    }
    Ok(Candidate {
        body: best_body,
        content_type,
        ssim: best_s,
    })
}

/// Decodes with limits taken from the header, applying Exif orientation so that re-encoded
/// output (which drops Exif) is shown the right way up.
fn decode(format: Format, body: &[u8], header: &Header) -> Result<DynamicImage, Skip> {
    let corrupt = |e: image::ImageError| Skip::Corrupt(e.to_string());
    let mut reader = ImageReader::with_format(Cursor::new(body), format.image_format());
    let mut limits = Limits::default();
    limits.max_image_width = Some(header.width);
    limits.max_image_height = Some(header.height);
    // Room for 16-bit RGBA pixels plus decoder working buffers, and no more.
    limits.max_alloc = Some(header.pixels().saturating_mul(16).saturating_add(64 << 20));
    reader.limits(limits);
    let mut decoder = reader.into_decoder().map_err(corrupt)?;
    let orientation = decoder.orientation().map_err(corrupt)?;
    let mut img = DynamicImage::from_decoder(decoder).map_err(corrupt)?;
    img.apply_orientation(orientation);
    Ok(img)
}
