//! The URL-rewriting functions of `webpep_optimize::rewrite` (paper 002 §3.1), in one place:
//! the only module of this crate that names them.

pub use webpep_optimize::rewrite::{from_proxy_path, rewrite_css, to_proxy_url};

/// Rewrites embedded URLs of an HTML page; the error is a message for the log.
pub fn rewrite_html(
    html: &[u8],
    page_url: &url::Url,
    proxy_authority: &str,
) -> Result<Vec<u8>, String> {
    webpep_optimize::rewrite::rewrite_html(html, page_url, proxy_authority)
        .map_err(|e| e.to_string())
}
