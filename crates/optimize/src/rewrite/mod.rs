//! URL rewriting for the `transparent-url` mode (paper 002 §3.1, DESIGN §2): the proxy serves
//! origin pages at `http://<proxy authority>/<host[:port]>/<path?query>`, and the `http://`
//! URLs embedded in HTML and CSS are rewritten to that form so an unconfigured browser fetches
//! every object through the proxy, over one or a few connections, with no DNS lookups over
//! the air.
//!
//! - [`to_proxy_url`] / [`from_proxy_path`]: the URL mapping and its inverse (the proxy's
//!   request router uses the latter).
//! - [`rewrite_html`]: every URL attribute, `srcset`, `<base href>`, meta refresh, and CSS in
//!   `style` attributes and `<style>` elements; everything else byte-identical.
//! - [`rewrite_css`]: `url(...)` and `@import "..."` in a stylesheet.
//! - [`embedded_urls`]: the URL references of a document as the rewriter sees them (for tests,
//!   fuzzing and discovery).
//! - [`subresource_urls`], [`css_urls`]: what a browser fetches to render a document or
//!   stylesheet (the proxy's prefetch).
//! - [`inline_candidates`], [`inlinable_text`], [`inline_resources`]: small external
//!   stylesheets and scripts copied into the page (the proxy's `inline` switch), so a browser
//!   does not spend a round trip over the air on each before it can go on.
//!
//! Only `http` URLs are rewritten: `https` stays end to end (DESIGN §6), and `data:`,
//! `javascript:`, `mailto:` and the like are not fetches.

mod css;
mod host;
mod html;
mod inline;

pub use css::{absolutize_css, css_urls, rewrite_css};
pub use html::{embedded_urls, rewrite_html, subresource_urls};
pub use inline::{
    inlinable_image, inlinable_text, inline_candidates, inline_resources, inline_stylesheet_images,
    stylesheet_images, InlineKind, InlineScan,
};

use url::Url;

/// Why a document could not be rewritten.
#[derive(Debug, thiserror::Error)]
pub enum RewriteError {
    /// The HTML rewriter stopped (e.g. its memory limit); the proxy should send the original.
    #[error("HTML rewriting failed: {0}")]
    Html(String),
}

/// The proxy URL for `target`: `http://www.a.com/x/y.gif?q=1#f` →
/// `http://<proxy_authority>/www.a.com/x/y.gif?q=1#f`, keeping a non-default port
/// (`/www.a.com:8080/...`).
///
/// `None` (leave the URL alone) for anything but `http` (https, data:, javascript:, mailto:
/// …), for URLs with credentials (a proxy path cannot carry them), for URLs already at the
/// proxy, and for hosts [`from_proxy_path`] would not accept back (single-label names other
/// than `localhost`, names ending in a file extension such as `.html`), so every URL this
/// returns is one the proxy can serve.
pub fn to_proxy_url(target: &Url, proxy_authority: &str) -> Option<String> {
    if target.scheme() != "http" || !target.username().is_empty() || target.password().is_some() {
        return None;
    }
    let host = target.host_str()?;
    let host_port = match target.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_string(),
    };
    let host_port = host::canonical_host_port(&host_port)?;
    // Already pointing at the proxy (a page rewritten twice, or a link to the proxy itself).
    let proxy_canonical = host::canonical_host_port(proxy_authority);
    if host_port.eq_ignore_ascii_case(proxy_authority)
        || proxy_canonical.as_deref() == Some(host_port.as_str())
    {
        return None;
    }
    let mut out =
        String::with_capacity(proxy_authority.len() + host_port.len() + target.as_str().len() + 8);
    out.push_str("http://");
    out.push_str(proxy_authority);
    out.push('/');
    out.push_str(&host_port);
    out.push_str(target.path());
    if let Some(q) = target.query() {
        out.push('?');
        out.push_str(q);
    }
    if let Some(f) = target.fragment() {
        out.push('#');
        out.push_str(f);
    }
    Some(out)
}

/// The origin a proxy request path names: `"/www.a.com/x/y.gif?q=1"` →
/// `("www.a.com", "/x/y.gif?q=1")`; `"/www.a.com"` → `("www.a.com", "/")`;
/// `"/www.a.com:8080?x"` → `("www.a.com:8080", "/?x")`.
///
/// The host is lowercased and must be in canonical form: a DNS name of at least two labels
/// (or `localhost`) whose last label is not a file extension, an IPv4 address, or a bracketed
/// IPv6 address; an explicit `:80` is dropped. Anything else is `None`, so `/favicon.ico`,
/// `/index.html` and `/` are requests for the proxy itself.
pub fn from_proxy_path(path_and_query: &str) -> Option<(String, String)> {
    let rest = path_and_query.strip_prefix('/')?;
    // Request targets carry no fragment; drop one if a caller passes it.
    let rest = rest.split('#').next().unwrap_or("");
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (host_port, tail) = rest.split_at(end);
    let host_port = host::canonical_host_port(host_port)?;
    let path = if tail.starts_with('/') {
        tail.to_string()
    } else {
        format!("/{tail}")
    };
    Some((host_port, path))
}

/// Resolves a raw URL reference against `base` and maps it to the proxy, or `None` when it
/// is to be left alone (empty, fragment-only, unparsable, or not proxyable).
fn proxied(raw: &str, base: &Url, proxy_authority: &str) -> Option<String> {
    let v = raw.trim_matches(|c: char| c.is_ascii_whitespace() || c.is_ascii_control());
    if v.is_empty() || v.starts_with('#') {
        return None;
    }
    let abs = base.join(v).ok()?;
    to_proxy_url(&abs, proxy_authority)
}
