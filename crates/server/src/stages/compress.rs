//! Lossless compression by the client's Accept-Encoding (000 §4.1.1): `[compress]`.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use http::header::{self, HeaderMap, HeaderValue};
use webpep_optimize::compress::{self, CompressConfig};

use crate::optimize::content_type;
use crate::stage::{Applied, Registry, Section, Stage, StageCtx, StageFactory};

/// The codings the proxy asks origins for when it recompresses itself (all it can decode).
const ORIGIN_ACCEPT_ENCODING: &str = "gzip, deflate, br, zstd";

pub(super) struct Factory;

impl StageFactory for Factory {
    fn name(&self) -> &'static str {
        "compress"
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
        if !cfg.compress.enabled {
            return Ok(None);
        }
        let config = crate::optimize::compress_config(&cfg.compress.options)
            .map_err(|m| ("compress".to_string(), m))?;
        let saved = registry.counter(
            "webpep_compress_saved_bytes_total",
            "Bytes saved by compression.",
        );
        Ok(Some(Arc::new(Compress { config, saved })))
    }
}

struct Compress {
    config: CompressConfig,
    saved: Arc<AtomicU64>,
}

impl Stage for Compress {
    fn name(&self) -> &'static str {
        "compress"
    }
    fn order(&self) -> i32 {
        300
    }
    fn upstream_request_filter(&self, headers: &mut HeaderMap) {
        // One shared copy of each origin response, whatever the browser accepts.
        headers.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static(ORIGIN_ACCEPT_ENCODING),
        );
    }
    fn variant_part(&self, ctx: &StageCtx<'_>) -> Option<String> {
        Some(format!(
            "ce={}",
            compress::negotiate(ctx.accept_encoding, &self.config).token()
        ))
    }
    fn filters_bodies(&self) -> bool {
        true
    }
    fn wants_original(&self, _status: http::StatusCode, _headers: &HeaderMap) -> bool {
        // A body filter only: its wants_body says which bodies.
        false
    }
    fn wants_body(&self, headers: &HeaderMap, _ctx: &StageCtx<'_>) -> bool {
        !webpep_optimize::no_transform(headers) && compress::is_compressible(content_type(headers))
    }
    fn body_filter(&self, ctx: &StageCtx<'_>, headers: &mut HeaderMap, body: &[u8]) -> Applied {
        match compress::compress_response(ctx.accept_encoding, headers, body, &self.config) {
            Some(c) => {
                self.saved.fetch_add(
                    (body.len() as u64).saturating_sub(c.body.len() as u64),
                    Relaxed,
                );
                Applied::Changed { body: c.body }
            }
            None => Applied::Unchanged("not compressed".into()),
        }
    }
}
