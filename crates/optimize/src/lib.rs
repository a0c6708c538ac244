//! webpep's content optimizations, each one module behind a small API (DESIGN §3, §10):
//! [`compress`] (lossless, by Accept-Encoding), [`transcode`] (lossy images, with SSIM),
//! [`rewrite`] (HTML and CSS URL rewriting for the URL-rewriting mode of paper 002).

pub mod compress;
pub mod rewrite;
pub mod transcode;

/// True when the response forbids transformation (`Cache-Control: no-transform`, RFC 9111
/// §5.2.2.6): no optimization may change its content or its content coding.
pub fn no_transform(headers: &http::HeaderMap) -> bool {
    headers
        .get_all(http::header::CACHE_CONTROL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|d| d.trim().eq_ignore_ascii_case("no-transform"))
}
