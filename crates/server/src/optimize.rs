//! What the optimization stages ([`crate::stages`]) share: the result of a body filter,
//! header helpers, and the checks of the `[compress]` and `[transcode]` keys (the
//! `webpep_optimize` crate's own configurations).

use http::header::{self, HeaderMap, HeaderValue};
use webpep_optimize::compress::CompressConfig;
use webpep_optimize::transcode::TranscodeConfig;

/// The result of one body filter.
#[derive(Debug)]
pub enum Applied {
    /// The body changed.
    Changed {
        /// The new body.
        body: Vec<u8>,
    },
    /// Left alone (with why, for logs).
    Unchanged(String),
}

/// The response's Content-Type, when readable.
pub(crate) fn content_type(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
}

/// The Content-Type's essence (without parameters, compared ignoring case) is one of
/// `types` (lower case). No allocation: it runs for every response held.
pub(crate) fn mime_is(headers: &HeaderMap, types: &[&str]) -> bool {
    content_type(headers).is_some_and(|c| {
        let m = c.split(';').next().unwrap_or("").trim();
        types.iter().any(|t| m.eq_ignore_ascii_case(t))
    })
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

/// A strong ETag becomes weak: the representation changed.
pub(crate) fn weaken_etag(headers: &mut HeaderMap) {
    if let Some(v) = headers.get(header::ETAG).and_then(|v| v.to_str().ok()) {
        if !v.starts_with("W/") {
            if let Ok(w) = HeaderValue::from_str(&format!("W/{v}")) {
                headers.insert(header::ETAG, w);
            }
        }
    }
}

/// The response's content coding, lower case; `None` for none or `identity`.
pub(crate) fn content_coding(h: &HeaderMap) -> Option<String> {
    let ce = h
        .get(header::CONTENT_ENCODING)?
        .to_str()
        .ok()?
        .trim()
        .to_ascii_lowercase();
    if ce.is_empty() || ce == "identity" {
        None
    } else {
        Some(ce)
    }
}
