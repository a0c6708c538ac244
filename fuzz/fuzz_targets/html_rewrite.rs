//! Fuzz the URL rewriter of the transparent-url mode: arbitrary bytes as HTML and as CSS.
//! Neither may panic; HTML rewriting may not fail; and every absolute `http://` reference the
//! rewriter reports in its output points at the proxy, unless it could not be proxied or was
//! already in the input exactly as it stands (so the rewriter did not produce it). The
//! prefetch's list of subresources is a subset of the references the rewriter sees.

#![no_main]

use libfuzzer_sys::fuzz_target;
use url::Url;
use webpep_optimize::rewrite::{
    embedded_urls, rewrite_css, rewrite_html, subresource_urls, to_proxy_url,
};

const PROXY: &str = "10.0.0.12:8080";

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w == needle)
}

fuzz_target!(|data: &[u8]| {
    let Ok(page) = Url::parse("http://www.a.com/dir/page.html") else {
        return;
    };
    let out = match rewrite_html(data, &page, PROXY) {
        Ok(out) => out,
        Err(e) => panic!("rewrite_html refused input: {e}"),
    };
    let at_proxy = format!("http://{PROXY}/");
    for u in embedded_urls(&out) {
        let t = u.trim();
        if !t
            .get(..7)
            .is_some_and(|s| s.eq_ignore_ascii_case("http://"))
        {
            continue;
        }
        let Ok(abs) = Url::parse(t) else { continue };
        if abs.as_str().starts_with(&at_proxy) || to_proxy_url(&abs, PROXY).is_none() {
            continue;
        }
        assert!(
            contains(data, u.as_bytes()),
            "http reference {u:?} in the output is not at the proxy"
        );
    }

    let all: std::collections::HashSet<String> = embedded_urls(data).into_iter().collect();
    let (base, fetched) = subresource_urls(data);
    for u in base.iter().chain(fetched.iter()) {
        assert!(
            all.contains(u),
            "subresource {u:?} is not among the document's references"
        );
    }

    let sheet = Url::parse("http://static.a.com/css/site.css").unwrap_or(page);
    let css = rewrite_css(data, &sheet, PROXY);
    let lower = data.to_ascii_lowercase();
    let has_ref =
        lower.windows(4).any(|w| w == b"url(") || lower.windows(7).any(|w| w == b"@import");
    assert!(has_ref || css == data, "CSS without references changed");
});
