//! Lossy image transcoding (000 §4.2, 003 §5) with `no-transform` honoured: `[transcode]`.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use http::header::{self, HeaderMap, HeaderValue};
use webpep_optimize::compress;
use webpep_optimize::transcode::{self, Outcome, TranscodeConfig};

use crate::optimize::{content_type, weaken_etag};
use crate::stage::{Applied, Registry, Section, Stage, StageCtx, StageFactory};

/// Peak memory of a transcode, in bytes per declared pixel: the decoded image and the float
/// planes of its SSIM checks (measured: 488 MB for a 12 MP JPEG).
const TRANSCODE_BYTES_PER_PIXEL: u64 = 40;

pub(super) struct Factory;

impl StageFactory for Factory {
    fn name(&self) -> &'static str {
        "transcode"
    }
    fn built_in(&self) -> bool {
        true
    }
    fn build(
        &self,
        section: Section<'_>,
        registry: &mut Registry,
    ) -> Result<Option<Arc<dyn Stage>>, (String, String)> {
        let Section::BuiltIn(cfg) = section else {
            return Ok(None);
        };
        if !cfg.transcode.enabled {
            return Ok(None);
        }
        let config = crate::optimize::transcode_config(&cfg.transcode.options)
            .map_err(|m| ("transcode".to_string(), m))?;
        let saved = registry.counter(
            "webpep_transcode_saved_bytes_total",
            "Bytes saved by image transcoding.",
        );
        Ok(Some(Arc::new(Transcode { config, saved })))
    }
}

struct Transcode {
    config: TranscodeConfig,
    saved: Arc<AtomicU64>,
}

impl Stage for Transcode {
    fn name(&self) -> &'static str {
        "transcode"
    }
    fn order(&self) -> i32 {
        100
    }
    fn variant_part(&self, ctx: &StageCtx<'_>) -> Option<String> {
        let webp = if transcode::accepts_webp(ctx.accept) {
            ";webp"
        } else {
            ""
        };
        Some(format!("img={}{webp}", self.config.preset))
    }
    fn filters_bodies(&self) -> bool {
        true
    }
    fn wants_original(&self, _status: http::StatusCode, _headers: &HeaderMap) -> bool {
        // A body filter only: its wants_body says which bodies.
        false
    }
    fn wants_body(&self, headers: &HeaderMap, _ctx: &StageCtx<'_>) -> bool {
        !webpep_optimize::no_transform(headers)
            && content_type(headers)
                .is_some_and(|c| c.trim_start().to_ascii_lowercase().starts_with("image/"))
    }
    /// From the image header alone: nothing much unless it is an image the transcoder will
    /// decode (within `max-pixels`).
    fn body_memory(&self, body: &[u8]) -> u64 {
        use webpep_optimize::transcode::{read_header, sniff};
        match sniff(body).and_then(|f| read_header(f, body).ok()) {
            Some(h) if h.pixels() <= self.config.max_pixels => {
                h.pixels() * TRANSCODE_BYTES_PER_PIXEL
            }
            _ => 0,
        }
    }
    fn body_filter(&self, ctx: &StageCtx<'_>, headers: &mut HeaderMap, body: &[u8]) -> Applied {
        if !self.wants_body(headers, ctx) {
            return Applied::Unchanged("not an image or no-transform".into());
        }
        let accept = if transcode::accepts_webp(ctx.accept) {
            ctx.accept
        } else {
            None
        };
        match transcode::transcode(body, content_type(headers), accept, &self.config) {
            Outcome::Transcoded {
                body: out,
                content_type: ct,
                ..
            } => {
                headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(ct));
                headers.remove(header::CONTENT_LENGTH);
                headers.remove("content-md5");
                weaken_etag(headers);
                // The output type depends on Accept when WebP is possible.
                compress::add_vary(headers, "Accept");
                self.saved.fetch_add(
                    (body.len() as u64).saturating_sub(out.len() as u64),
                    Relaxed,
                );
                Applied::Changed { body: out }
            }
            Outcome::Unchanged(skip) => Applied::Unchanged(skip.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A PNG signature, an IHDR chunk declaring `w` × `h` (its CRC is not checked here) and IEND.
    fn png_head(w: u32, h: u32) -> Vec<u8> {
        let mut b = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec();
        b.extend_from_slice(&w.to_be_bytes());
        b.extend_from_slice(&h.to_be_bytes());
        b.extend_from_slice(&[8, 6, 0, 0, 0, 0, 0, 0, 0]);
        b.extend_from_slice(b"\0\0\0\0IEND\xae\x42\x60\x82");
        b
    }

    fn stage(max_pixels: u64) -> Transcode {
        Transcode {
            config: TranscodeConfig {
                max_pixels,
                ..TranscodeConfig::default()
            },
            saved: Arc::default(),
        }
    }

    #[test]
    fn body_memory_follows_the_declared_pixels_within_the_limit() {
        assert_eq!(stage(1_000_000).body_memory(&png_head(100, 50)), 5000 * 40);
        // A decompression bomb is not decoded, so it reserves nothing.
        assert_eq!(
            stage(40_000_000).body_memory(&png_head(100_000, 100_000)),
            0
        );
        // Not an image.
        assert_eq!(stage(1_000_000).body_memory(b"<html>"), 0);
    }
}
