//! The URL-rewriting functions of `webpep_optimize::rewrite`, in one place (the only
//! module that names them).

/// `/<host[:port]>/<path>` → (`host[:port]`, `/path`).
pub fn from_proxy_path(path_and_query: &str) -> Option<(String, String)> {
    let _ = path_and_query;
    None
}

/// An http URL → its proxy form.
pub fn to_proxy_url(target: &url::Url, proxy_authority: &str) -> Option<String> {
    let _ = (target, proxy_authority);
    None
}

/// Rewrites embedded URLs of an HTML page.
pub fn rewrite_html(html: &[u8], page_url: &url::Url, proxy_authority: &str) -> Result<Vec<u8>, String> {
    let _ = (page_url, proxy_authority);
    Ok(html.to_vec())
}

/// Rewrites url() and @import of a style sheet.
pub fn rewrite_css(css: &[u8], sheet_url: &url::Url, proxy_authority: &str) -> Vec<u8> {
    let _ = (sheet_url, proxy_authority);
    css.to_vec()
}
