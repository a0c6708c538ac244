//! Lossless compression towards the browser (papers 000 §4.1.1, 003 §7): choose a content
//! coding from the request's `Accept-Encoding` (RFC 9110 §12.5.3), encode a response body the
//! proxy holds in identity coding, and undo an origin's `Content-Encoding` without letting a
//! decompression bomb exhaust memory (DESIGN §9).
//!
//! The pure pieces ([`negotiate`], [`is_compressible`], [`encode`], [`decode`], [`add_vary`])
//! are composed by [`compress_response`], the one call the proxy makes per response.

use std::io::{self, Read, Write};

use http::header::{
    HeaderMap, HeaderValue, CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_RANGE, ETAG, VARY,
};
use serde::Deserialize;

/// A content coding webpep can produce towards a browser (RFC 9110 §8.4.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Coding {
    /// No transformation.
    Identity,
    /// gzip (RFC 1952).
    Gzip,
    /// Brotli (RFC 7932).
    Br,
    /// Zstandard (RFC 8878).
    Zstd,
}

impl Coding {
    /// The token used in `Accept-Encoding` and `Content-Encoding`.
    pub fn token(self) -> &'static str {
        match self {
            Coding::Identity => "identity",
            Coding::Gzip => "gzip",
            Coding::Br => "br",
            Coding::Zstd => "zstd",
        }
    }

    /// Parses a coding token, case-insensitively; `x-gzip` is gzip (RFC 9110 §8.4.1.3).
    /// Codings webpep cannot produce (`deflate`, `compress`, unknown) give `None`.
    pub fn from_token(t: &str) -> Option<Coding> {
        let t = t.trim();
        [
            ("identity", Coding::Identity),
            ("gzip", Coding::Gzip),
            ("x-gzip", Coding::Gzip),
            ("br", Coding::Br),
            ("zstd", Coding::Zstd),
        ]
        .into_iter()
        .find(|(name, _)| t.eq_ignore_ascii_case(name))
        .map(|(_, c)| c)
    }
}

/// Settings of the compression switch (the `[compress]` table of the server's TOML).
#[derive(Clone, Debug, Deserialize)]
#[serde(default, rename_all = "kebab-case", deny_unknown_fields)]
pub struct CompressConfig {
    /// Enabled codings in server preference order; ties in the client's q-values go to the
    /// earlier one. Default `[br, zstd, gzip]`.
    pub codings: Vec<Coding>,
    /// Brotli quality, 0–11 (clamped). Default 9: bodies are cached, so a slow good setting pays.
    pub brotli_quality: u32,
    /// gzip level, 0–9 (clamped). Default 9.
    pub gzip_level: u32,
    /// zstd level, 1–22 (clamped). Default 19.
    pub zstd_level: i32,
    /// Bodies shorter than this are sent as they are: the header costs more than the saving.
    /// Default 256.
    pub min_size: usize,
}

impl Default for CompressConfig {
    fn default() -> Self {
        CompressConfig {
            codings: vec![Coding::Br, Coding::Zstd, Coding::Gzip],
            brotli_quality: 9,
            gzip_level: 9,
            zstd_level: 19,
            min_size: 256,
        }
    }
}

/// Why a body could not be decoded (or, unreachably with clamped levels, encoded).
#[derive(Debug, thiserror::Error)]
pub enum CompressError {
    /// The decoded output would exceed the caller's limit: a bomb, or just too big to hold.
    #[error("decoded body exceeds the limit of {limit} bytes")]
    TooLarge {
        /// The `max_output` the caller gave.
        limit: usize,
    },
    /// The input is not a valid stream of the named coding (truncated, corrupt, trailing junk).
    #[error("corrupt {coding} body: {reason}")]
    Corrupt {
        /// The coding whose decoder failed.
        coding: String,
        /// The decoder's message.
        reason: String,
    },
    /// A content coding this module does not know (e.g. `compress`).
    #[error("unsupported content coding {0:?}")]
    Unsupported(String),
    /// The encoder failed (only possible with out-of-range parameters, which are clamped).
    #[error("{coding} encoder failed: {reason}")]
    Encode {
        /// The coding whose encoder failed.
        coding: &'static str,
        /// The encoder's message.
        reason: String,
    },
}

/// One element of `Accept-Encoding`: a coding token (lowercased) and its weight.
fn parse_accept_encoding(header: &str) -> Vec<(String, f32)> {
    header
        .split(',')
        .filter_map(|element| {
            let mut parts = element.split(';');
            let token = parts.next()?.trim();
            if token.is_empty() || !token.bytes().all(is_tchar) {
                return None;
            }
            let mut q = 1.0;
            for param in parts {
                let (name, value) = param.split_once('=')?;
                if name.trim().eq_ignore_ascii_case("q") {
                    // A malformed weight makes the whole element unusable (RFC 9110 §12.4.2).
                    q = parse_qvalue(value.trim())?;
                }
            }
            Some((token.to_ascii_lowercase(), q))
        })
        .collect()
}

/// `qvalue = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] )`
fn parse_qvalue(v: &str) -> Option<f32> {
    let (int, frac) = v.split_once('.').unwrap_or((v, ""));
    if frac.len() > 3 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    match int {
        "0" => {
            let digits = format!("{frac:0<3}");
            digits.parse::<u16>().ok().map(|n| f32::from(n) / 1000.0)
        }
        "1" if frac.bytes().all(|b| b == b'0') => Some(1.0),
        _ => None,
    }
}

/// RFC 9110 §5.6.2 token characters.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Whether a request's `Accept-Encoding` accepts `coding` (a token; `x-gzip` counts as
/// `gzip`): its own weight, else that of `*`, is above 0 (RFC 9110 §12.5.3).
pub fn accepts(accept_encoding: Option<&str>, coding: &str) -> bool {
    let Some(header) = accept_encoding else {
        return false;
    };
    let coding = coding.trim().to_ascii_lowercase();
    let coding = if coding == "x-gzip" {
        "gzip".to_string()
    } else {
        coding
    };
    let elements = parse_accept_encoding(header);
    let weight = |name: &str| {
        elements
            .iter()
            .filter(|(t, _)| t == name || (name == "gzip" && t == "x-gzip"))
            .map(|(_, q)| *q)
            .reduce(f32::max)
    };
    weight(&coding).or_else(|| weight("*")).unwrap_or(0.0) > 0.0
}

/// Chooses the coding for a response from the request's `Accept-Encoding` (RFC 9110 §12.5.3).
///
/// - No header: `Identity` (the client stated no preference; not compressing is always safe).
/// - Each enabled coding gets its explicit weight, else the weight of `*`, else 0; `x-gzip`
///   counts as `gzip`. The highest positive weight wins; ties go to `cfg.codings` order.
/// - A coding is chosen only when its weight is at least the weight the client gave
///   `identity` (directly or through `*`); an unweighted identity does not compete.
/// - When nothing is acceptable (all refused) the answer is `Identity`: the proxy then decides
///   between sending it anyway and 406.
pub fn negotiate(accept_encoding: Option<&str>, cfg: &CompressConfig) -> Coding {
    let Some(header) = accept_encoding else {
        return Coding::Identity;
    };
    let elements = parse_accept_encoding(header);
    let weight_of = |name: &str| -> Option<f32> {
        // The most specific element wins; among equals, the highest weight.
        elements
            .iter()
            .filter(|(t, _)| t == name || (name == "gzip" && t == "x-gzip"))
            .map(|(_, q)| *q)
            .reduce(f32::max)
    };
    let star = weight_of("*");
    // Identity competes only when the client weighed it (itself or through `*`): an
    // unweighted identity is merely acceptable (RFC 9110 §12.5.3), as servers treat it.
    let identity_q = weight_of("identity").or(star).unwrap_or(0.0);

    let mut best: Option<(Coding, f32)> = None;
    for &coding in &cfg.codings {
        if coding == Coding::Identity {
            continue;
        }
        let q = weight_of(coding.token()).or(star).unwrap_or(0.0);
        if q > 0.0 && best.is_none_or(|(_, bq)| q > bq) {
            best = Some((coding, q));
        }
    }
    match best {
        Some((coding, q)) if q >= identity_q => coding,
        _ => Coding::Identity,
    }
}

/// The lowercased media type of a `Content-Type` value, without parameters.
fn media_type(content_type: &str) -> String {
    content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

/// True when a body of this `Content-Type` is worth compressing losslessly: text, scripts,
/// JSON, XML (including SVG, RSS, Atom, XHTML), WebAssembly, uncompressed fonts (TTF, OTF,
/// EOT) and uncompressed bitmaps (BMP, ICO). False for formats that are already compressed
/// (JPEG, PNG, GIF, WebP, audio, video, zip, gzip, WOFF, WOFF2, PDF), for event streams (they
/// must not be buffered) and for an absent or unknown type.
pub fn is_compressible(content_type: Option<&str>) -> bool {
    let Some(ct) = content_type else {
        return false;
    };
    let mt = media_type(ct);
    let Some((top, sub)) = mt.split_once('/') else {
        return false;
    };
    match top {
        "text" => sub != "event-stream",
        "application" => {
            sub.ends_with("+json")
                || sub.ends_with("+xml")
                || matches!(
                    sub,
                    "javascript"
                        | "x-javascript"
                        | "ecmascript"
                        | "x-ecmascript"
                        | "json"
                        | "x-json"
                        | "xml"
                        | "xml-dtd"
                        | "wasm"
                        | "x-font-ttf"
                        | "x-font-otf"
                        | "x-font-truetype"
                        | "x-font-opentype"
                        | "font-sfnt"
                        | "vnd.ms-fontobject"
                        | "x-sh"
                        | "x-csh"
                        | "x-httpd-php"
                        | "x-www-form-urlencoded"
                        | "graphql"
                )
        }
        "image" => matches!(
            sub,
            "svg+xml" | "bmp" | "x-ms-bmp" | "x-icon" | "vnd.microsoft.icon"
        ),
        "font" => matches!(sub, "ttf" | "otf" | "sfnt" | "collection"),
        _ => false,
    }
}

/// Encodes `body` with `coding` at the levels in `cfg` (clamped to each codec's range).
/// Returns the error only for an encoder failure, which clamped levels make unreachable;
/// [`encode`] is the infallible form.
pub fn try_encode(
    body: &[u8],
    coding: Coding,
    cfg: &CompressConfig,
) -> Result<Vec<u8>, CompressError> {
    let fail = |reason: io::Error| CompressError::Encode {
        coding: coding.token(),
        reason: reason.to_string(),
    };
    match coding {
        Coding::Identity => Ok(body.to_vec()),
        Coding::Gzip => {
            let level = flate2::Compression::new(cfg.gzip_level.min(9));
            let mut enc = flate2::write::GzEncoder::new(Vec::with_capacity(body.len() / 3), level);
            enc.write_all(body).map_err(fail)?;
            enc.finish().map_err(fail)
        }
        Coding::Br => {
            // A 4 MB window (lgwin 22) is what every browser decoder supports.
            let mut enc = brotli::CompressorWriter::new(
                Vec::with_capacity(body.len() / 3),
                16 * 1024,
                cfg.brotli_quality.min(11),
                22,
            );
            enc.write_all(body).map_err(fail)?;
            enc.flush().map_err(fail)?;
            Ok(enc.into_inner())
        }
        Coding::Zstd => {
            // Browsers accept zstd windows up to 8 MB (RFC 9659); levels ≤ 19 stay within it.
            let level = cfg.zstd_level.clamp(1, 19);
            zstd::bulk::compress(body, level).map_err(fail)
        }
    }
}

/// Encodes `body` with `coding` at the levels in `cfg`. Never panics; in the unreachable case
/// of an encoder failure it logs and returns an empty body (callers that must tell the
/// difference use [`try_encode`]; [`compress_response`] does).
pub fn encode(body: &[u8], coding: Coding, cfg: &CompressConfig) -> Vec<u8> {
    try_encode(body, coding, cfg).unwrap_or_else(|e| {
        tracing::error!(error = %e, "encoder failed");
        Vec::new()
    })
}

/// Zstandard frames may demand a window up to this log2 size; larger is refused as a bomb
/// vector (RFC 9659 caps HTTP zstd at 8 MB windows; we allow 2^23).
const ZSTD_WINDOW_LOG_MAX: u32 = 23;

/// Reads `reader` to the end into a new buffer, failing with `TooLarge` as soon as more than
/// `max_output` bytes come out, so a bomb is stopped after `max_output + 1` bytes of work.
fn read_bounded(
    reader: impl Read,
    max_output: usize,
    coding: &str,
) -> Result<Vec<u8>, CompressError> {
    let limit = u64::try_from(max_output)
        .unwrap_or(u64::MAX)
        .saturating_add(1);
    let mut out = Vec::new();
    reader
        .take(limit)
        .read_to_end(&mut out)
        .map_err(|e| CompressError::Corrupt {
            coding: coding.to_string(),
            reason: e.to_string(),
        })?;
    if out.len() > max_output {
        return Err(CompressError::TooLarge { limit: max_output });
    }
    Ok(out)
}

/// True when `body` starts with a valid zlib header (RFC 1950 §2.2): deflate method, and the
/// 16-bit header divisible by 31. Servers disagree on whether `deflate` means zlib or raw.
fn has_zlib_header(body: &[u8]) -> bool {
    match body {
        [cmf, flg, ..] => {
            cmf & 0x0f == 8 && cmf >> 4 <= 7 && (u16::from(*cmf) << 8 | u16::from(*flg)) % 31 == 0
        }
        _ => false,
    }
}

/// Undoes one content coding.
fn decode_one(body: &[u8], coding: &str, max_output: usize) -> Result<Vec<u8>, CompressError> {
    let lower = coding.to_ascii_lowercase();
    match lower.as_str() {
        "identity" => read_bounded(body, max_output, "identity"),
        "gzip" | "x-gzip" => {
            read_bounded(flate2::read::MultiGzDecoder::new(body), max_output, "gzip")
        }
        "deflate" => {
            if has_zlib_header(body) {
                read_bounded(flate2::read::ZlibDecoder::new(body), max_output, "deflate")
            } else {
                read_bounded(
                    flate2::read::DeflateDecoder::new(body),
                    max_output,
                    "deflate",
                )
            }
        }
        "br" => read_bounded(brotli::Decompressor::new(body, 16 * 1024), max_output, "br"),
        "zstd" => {
            let corrupt = |e: io::Error| CompressError::Corrupt {
                coding: "zstd".to_string(),
                reason: e.to_string(),
            };
            let mut dec = zstd::stream::read::Decoder::with_buffer(body).map_err(corrupt)?;
            dec.window_log_max(ZSTD_WINDOW_LOG_MAX).map_err(corrupt)?;
            read_bounded(dec, max_output, "zstd")
        }
        _ => Err(CompressError::Unsupported(coding.to_string())),
    }
}

/// Undoes an origin's `Content-Encoding`: `gzip`/`x-gzip` (multi-member), `deflate` (zlib or
/// raw, detected), `br`, `zstd`, `identity`, or a comma list of them (listed in the order they
/// were applied, so undone from the last). Bomb-safe: stops with [`CompressError::TooLarge`] as
/// soon as any stage's output would exceed `max_output`; a truncated or corrupt stream gives
/// [`CompressError::Corrupt`]; an unknown coding [`CompressError::Unsupported`]. Never panics.
pub fn decode(
    body: &[u8],
    content_encoding: &str,
    max_output: usize,
) -> Result<Vec<u8>, CompressError> {
    let codings: Vec<&str> = content_encoding
        .split(',')
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    let Some((last, rest)) = codings.split_last() else {
        return read_bounded(body, max_output, "identity");
    };
    let mut current = decode_one(body, last, max_output)?;
    for coding in rest.iter().rev() {
        current = decode_one(&current, coding, max_output)?;
    }
    Ok(current)
}

/// Adds `field` to the response's `Vary`, merging all existing `Vary` lines into one without
/// duplicates (compared case-insensitively). `Vary: *` already varies on everything and is
/// left alone; a value that is not visible ASCII is kept and `field` added on its own line.
pub fn add_vary(headers: &mut HeaderMap, field: &str) {
    let mut fields: Vec<String> = Vec::new();
    let mut opaque = false;
    for value in headers.get_all(VARY) {
        match value.to_str() {
            Ok(s) => fields.extend(
                s.split(',')
                    .map(str::trim)
                    .filter(|f| !f.is_empty())
                    .map(str::to_string),
            ),
            Err(_) => opaque = true,
        }
    }
    if fields
        .iter()
        .any(|f| f == "*" || f.eq_ignore_ascii_case(field))
    {
        return;
    }
    let Ok(new_field) = HeaderValue::from_str(field) else {
        tracing::warn!(field, "not a valid Vary field name; Vary left alone");
        return;
    };
    if opaque {
        headers.append(VARY, new_field);
        return;
    }
    fields.push(field.to_string());
    match HeaderValue::from_str(&fields.join(", ")) {
        Ok(merged) => {
            headers.insert(VARY, merged);
        }
        Err(_) => {
            headers.append(VARY, new_field);
        }
    }
}

/// A body compressed by [`compress_response`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Compressed {
    /// The encoded body.
    pub body: Vec<u8>,
    /// The coding now named in `Content-Encoding`.
    pub coding: Coding,
}

/// Turns a strong `ETag` into a weak one: the compressed bytes are a different
/// representation, so a strong validator must not claim byte equality with the original
/// (RFC 9110 §8.8.3). An unquoted (malformed) tag is quoted; one that cannot be is dropped.
pub fn weaken_etag(headers: &mut HeaderMap) {
    let Some(etag) = headers.get(ETAG) else {
        return;
    };
    let bytes = etag.as_bytes();
    if bytes.starts_with(b"W/") {
        return;
    }
    let weak = if bytes.starts_with(b"\"") {
        let mut v = b"W/".to_vec();
        v.extend_from_slice(bytes);
        HeaderValue::from_bytes(&v).ok()
    } else if !bytes.is_empty() && bytes.iter().all(|&b| b > 0x20 && b != b'"' && b != 0x7f) {
        let mut v = b"W/\"".to_vec();
        v.extend_from_slice(bytes);
        v.push(b'"');
        HeaderValue::from_bytes(&v).ok()
    } else {
        None
    };
    match weak {
        Some(w) => {
            headers.insert(ETAG, w);
        }
        None => {
            headers.remove(ETAG);
        }
    }
}

/// The one call the proxy makes for a response body it holds in identity coding.
///
/// Leaves the body alone (returns `None`) when the response says `no-transform`, already has
/// a non-identity `Content-Encoding`, is a partial (`Content-Range`) response, has a type that
/// is not [`is_compressible`], is shorter than `cfg.min_size`, when [`negotiate`] picks
/// identity, or when the encoded body is not smaller. For every compressible type it adds
/// `Vary: Accept-Encoding`, even when it sends identity, so a shared cache keeps the variants
/// apart. On success it sets `Content-Encoding`, removes `Content-Length` (the proxy frames
/// the new body) and `Content-MD5`, and weakens a strong `ETag`.
pub fn compress_response(
    accept_encoding: Option<&str>,
    headers: &mut HeaderMap,
    body: &[u8],
    cfg: &CompressConfig,
) -> Option<Compressed> {
    if crate::no_transform(headers) || headers.contains_key(CONTENT_RANGE) {
        return None;
    }
    let already_encoded = headers.get_all(CONTENT_ENCODING).iter().any(|v| {
        v.to_str().map_or(true, |s| {
            s.split(',')
                .map(str::trim)
                .any(|c| !c.is_empty() && !c.eq_ignore_ascii_case("identity"))
        })
    });
    if already_encoded {
        return None;
    }
    let content_type = headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    if !is_compressible(content_type) {
        return None;
    }
    add_vary(headers, "Accept-Encoding");
    if body.len() < cfg.min_size {
        return None;
    }
    let coding = negotiate(accept_encoding, cfg);
    if coding == Coding::Identity {
        return None;
    }
    let encoded = match try_encode(body, coding, cfg) {
        Ok(e) => e,
        Err(e) => {
            tracing::warn!(error = %e, "compression skipped");
            return None;
        }
    };
    if encoded.len() >= body.len() {
        tracing::debug!(
            coding = coding.token(),
            size = body.len(),
            "compressed body not smaller; sent as is"
        );
        return None;
    }
    headers.insert(CONTENT_ENCODING, HeaderValue::from_static(coding.token()));
    headers.remove(CONTENT_LENGTH);
    headers.remove("content-md5");
    weaken_etag(headers);
    Some(Compressed {
        body: encoded,
        coding,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_follows_weights_and_the_star() {
        assert!(accepts(Some("gzip, br"), "gzip"));
        assert!(accepts(Some("x-gzip"), "gzip"));
        assert!(accepts(Some("gzip"), "x-gzip"));
        assert!(!accepts(Some("gzip;q=0"), "gzip"));
        assert!(!accepts(Some("gzip;q=0.000, br"), "gzip"));
        assert!(accepts(Some("*"), "zstd"));
        assert!(!accepts(Some("*;q=0"), "zstd"));
        // The coding's own weight wins over the star's.
        assert!(!accepts(Some("*, br;q=0"), "br"));
        assert!(accepts(Some("*;q=0, br"), "br"));
        assert!(!accepts(None, "gzip"));
        assert!(!accepts(Some("deflate"), "gzip"));
    }

    #[test]
    fn qvalue_grammar() {
        assert_eq!(parse_qvalue("0"), Some(0.0));
        assert_eq!(parse_qvalue("0.5"), Some(0.5));
        assert_eq!(parse_qvalue("0.001"), Some(0.001));
        assert_eq!(parse_qvalue("1.000"), Some(1.0));
        assert_eq!(parse_qvalue("1.5"), None);
        assert_eq!(parse_qvalue("0.0001"), None);
        assert_eq!(parse_qvalue("abc"), None);
        assert_eq!(parse_qvalue("-0"), None);
        assert_eq!(parse_qvalue(""), None);
    }

    #[test]
    fn zlib_header_detection() {
        assert!(has_zlib_header(&[0x78, 0x9c]));
        assert!(has_zlib_header(&[0x78, 0x01]));
        assert!(!has_zlib_header(&[0x78, 0x9d]));
        assert!(!has_zlib_header(&[0x78]));
    }
}
