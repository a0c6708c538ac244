//! The content optimizations as one small trait ([`Transform`]) with one unit per switch
//! (transcode, URL rewrite, compress), so the lab can turn each off for an ablation
//! (DESIGN §3, §10). Each unit wraps the `webpep_optimize` crate.

use crate::url_rewrite as rewrite;
use http::header::{self, HeaderMap, HeaderValue};
use webpep_optimize::compress::{self, CompressConfig};
use webpep_optimize::transcode::{self, Outcome, TranscodeConfig};

/// What a transform may look at besides the response.
#[derive(Debug, Clone, Copy)]
pub struct TransformCtx<'a> {
    /// The client's `Accept`.
    pub accept: Option<&'a str>,
    /// The client's `Accept-Encoding`.
    pub accept_encoding: Option<&'a str>,
    /// In URL mode: the origin URL of the response and the proxy authority.
    pub url_mode: Option<(&'a url::Url, &'a str)>,
}

/// The result of one transform.
#[derive(Debug)]
pub enum Applied {
    /// The body changed; `saved` bytes fewer (0 when it grew, e.g. rewriting).
    Changed {
        /// The new body.
        body: Vec<u8>,
    },
    /// Left alone (with why, for logs).
    Unchanged(String),
}

/// One optimization of the response pipeline.
pub trait Transform: Send + Sync {
    /// Short name (logs, metrics).
    fn name(&self) -> &'static str;
    /// The part of the cache variant key this transform contributes for this request (the
    /// same request must always give the same key), or `None` when it never applies.
    fn variant_part(&self, ctx: &TransformCtx<'_>) -> Option<String>;
    /// True when this transform would work on a response with these headers (so the
    /// pipeline knows to decode the origin's content coding first).
    fn wants(&self, headers: &HeaderMap, ctx: &TransformCtx<'_>) -> bool;
    /// Transforms `body` (identity coding), updating `headers`.
    fn apply(&self, ctx: &TransformCtx<'_>, headers: &mut HeaderMap, body: &[u8]) -> Applied;
}

fn content_type(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
}

/// The Content-Type's essence (lower case, without parameters) is one of `types`.
pub(crate) fn mime_is(headers: &HeaderMap, types: &[&str]) -> bool {
    content_type(headers)
        .map(|c| {
            c.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        })
        .is_some_and(|m| types.contains(&m.as_str()))
}

/// Checks `[compress]` keys by deserializing them into the optimize crate's config.
pub fn compress_config(options: &toml::Table) -> Result<CompressConfig, String> {
    toml::Value::Table(options.clone())
        .try_into::<CompressConfig>()
        .map_err(|e| e.to_string().trim().to_string())
}

/// Checks `[transcode]` keys by deserializing them into the optimize crate's config.
pub fn transcode_config(options: &toml::Table) -> Result<TranscodeConfig, String> {
    toml::Value::Table(options.clone())
        .try_into::<TranscodeConfig>()
        .map_err(|e| e.to_string().trim().to_string())
}

/// Lossy image transcoding (000 §4.2, 003 §5); `no-transform` honoured.
pub struct TranscodeUnit(pub TranscodeConfig);

impl Transform for TranscodeUnit {
    fn name(&self) -> &'static str {
        "transcode"
    }
    fn variant_part(&self, ctx: &TransformCtx<'_>) -> Option<String> {
        let webp = if transcode::accepts_webp(ctx.accept) {
            ";webp"
        } else {
            ""
        };
        Some(format!("img={}{webp}", self.0.preset))
    }
    fn wants(&self, headers: &HeaderMap, _ctx: &TransformCtx<'_>) -> bool {
        !webpep_optimize::no_transform(headers)
            && content_type(headers)
                .is_some_and(|c| c.trim_start().to_ascii_lowercase().starts_with("image/"))
    }
    fn apply(&self, ctx: &TransformCtx<'_>, headers: &mut HeaderMap, body: &[u8]) -> Applied {
        if !self.wants(headers, ctx) {
            return Applied::Unchanged("not an image or no-transform".into());
        }
        let accept = if transcode::accepts_webp(ctx.accept) {
            ctx.accept
        } else {
            None
        };
        match transcode::transcode(body, content_type(headers), accept, &self.0) {
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
                Applied::Changed { body: out }
            }
            Outcome::Unchanged(skip) => Applied::Unchanged(skip.to_string()),
        }
    }
}

/// A strong ETag becomes weak: the representation changed.
fn weaken_etag(headers: &mut HeaderMap) {
    if let Some(v) = headers.get(header::ETAG).and_then(|v| v.to_str().ok()) {
        if !v.starts_with("W/") {
            if let Ok(w) = HeaderValue::from_str(&format!("W/{v}")) {
                headers.insert(header::ETAG, w);
            }
        }
    }
}

/// URL rewriting of HTML and CSS in URL mode (002 §3.1). Applied even under no-transform:
/// without it the mode does not work at all.
pub struct RewriteUnit;

impl Transform for RewriteUnit {
    fn name(&self) -> &'static str {
        "url-rewrite"
    }
    fn variant_part(&self, ctx: &TransformCtx<'_>) -> Option<String> {
        ctx.url_mode.map(|(_, a)| format!("url={a}"))
    }
    fn wants(&self, headers: &HeaderMap, ctx: &TransformCtx<'_>) -> bool {
        ctx.url_mode.is_some()
            && mime_is(headers, &["text/html", "application/xhtml+xml", "text/css"])
    }
    fn apply(&self, ctx: &TransformCtx<'_>, headers: &mut HeaderMap, body: &[u8]) -> Applied {
        let Some((page, authority)) = ctx.url_mode else {
            return Applied::Unchanged("not url mode".into());
        };
        let out = if mime_is(headers, &["text/css"]) {
            rewrite::rewrite_css(body, page, authority)
        } else if mime_is(headers, &["text/html", "application/xhtml+xml"]) {
            match rewrite::rewrite_html(body, page, authority) {
                Ok(b) => b,
                Err(e) => return Applied::Unchanged(format!("html rewrite failed: {e}")),
            }
        } else {
            return Applied::Unchanged("not html or css".into());
        };
        if out == body {
            return Applied::Unchanged("no urls".into());
        }
        headers.remove(header::CONTENT_LENGTH);
        headers.remove("content-md5");
        weaken_etag(headers);
        Applied::Changed { body: out }
    }
}

/// Lossless compression by the client's Accept-Encoding (000 §4.1.1).
pub struct CompressUnit(pub CompressConfig);

impl Transform for CompressUnit {
    fn name(&self) -> &'static str {
        "compress"
    }
    fn variant_part(&self, ctx: &TransformCtx<'_>) -> Option<String> {
        Some(format!(
            "ce={}",
            compress::negotiate(ctx.accept_encoding, &self.0).token()
        ))
    }
    fn wants(&self, headers: &HeaderMap, _ctx: &TransformCtx<'_>) -> bool {
        !webpep_optimize::no_transform(headers) && compress::is_compressible(content_type(headers))
    }
    fn apply(&self, ctx: &TransformCtx<'_>, headers: &mut HeaderMap, body: &[u8]) -> Applied {
        match compress::compress_response(ctx.accept_encoding, headers, body, &self.0) {
            Some(c) => Applied::Changed { body: c.body },
            None => Applied::Unchanged("not compressed".into()),
        }
    }
}
