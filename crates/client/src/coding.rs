//! Content codings between the proxies: the client asks the edge for the strongest coding it
//! can undo (brotli, zstd, gzip), whatever the browser accepts, and undoes on the device what
//! the browser does not take. The air then carries text in the edge's best coding — Chromium
//! accepts only gzip over plain HTTP, and a gzip body from the origin is recoded by the edge
//! (its decode-then-compress path) — while loopback to the browser costs nothing.

use bytes::Bytes;
use http::header::{ACCEPT_ENCODING, CONTENT_ENCODING, CONTENT_LENGTH, RANGE};
use http::{HeaderMap, HeaderValue, Method, StatusCode};
use tokio::io::AsyncReadExt;
use webpep_optimize::compress;

use crate::proxy::UpstreamResponse;

/// What the client takes from the edge, best first.
pub const BETWEEN_PROXIES: &str = "br, zstd, gzip";

/// The largest body the client decodes for a browser (the edge codes no body above its
/// `max-body-transform`, 8 MiB by default; an origin's own coding may be larger).
pub const MAX_DECODED: usize = 64 << 20;

/// Sets the request's Accept-Encoding for the edge; returns what the browser asked for
/// (`Some(None)` when it named no coding), or `None` when the request is left alone (a
/// range request: a part of a coded body cannot be undone alone).
pub fn ask_edge(headers: &mut HeaderMap) -> Option<Option<String>> {
    if headers.contains_key(RANGE) {
        return None;
    }
    let browser = headers
        .get_all(ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect::<Vec<_>>()
        .join(", ");
    headers.insert(ACCEPT_ENCODING, HeaderValue::from_static(BETWEEN_PROXIES));
    Some((!browser.is_empty()).then_some(browser))
}

/// The edge's answer as the browser may take it: a coding the browser did not accept is
/// undone here (the whole body, within [`MAX_DECODED`]).
pub async fn for_browser(
    mut resp: UpstreamResponse,
    browser_accepts: Option<&str>,
    method: &Method,
) -> Result<UpstreamResponse, (StatusCode, String)> {
    let Some(ce) = resp
        .headers
        .get(CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
    else {
        return Ok(resp);
    };
    let accepted = ce
        .split(',')
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .all(|c| compress::accepts(browser_accepts, c));
    let no_body = *method == Method::HEAD
        || resp.status == StatusCode::NO_CONTENT
        || resp.status == StatusCode::NOT_MODIFIED
        || resp.status.is_informational();
    if accepted || no_body {
        return Ok(resp);
    }
    let mut coded = Vec::new();
    (&mut resp.body)
        .take(MAX_DECODED as u64 + 1)
        .read_to_end(&mut coded)
        .await
        .map_err(|e| {
            (
                StatusCode::BAD_GATEWAY,
                format!("reading the edge's answer: {e}"),
            )
        })?;
    if coded.len() > MAX_DECODED {
        return Err((
            StatusCode::BAD_GATEWAY,
            format!(
                "a {ce}-coded body over {MAX_DECODED} bytes, which the browser does not accept"
            ),
        ));
    }
    let body = compress::decode(&coded, &ce, MAX_DECODED)
        .map_err(|e| (StatusCode::BAD_GATEWAY, format!("undoing {ce}: {e}")))?;
    resp.headers.remove(CONTENT_ENCODING);
    resp.headers.remove(CONTENT_LENGTH);
    compress::weaken_etag(&mut resp.headers);
    resp.length = Some(body.len() as u64);
    resp.body = Box::new(std::io::Cursor::new(Bytes::from(body)));
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(ce: Option<&str>, body: Vec<u8>) -> UpstreamResponse {
        let mut headers = HeaderMap::new();
        if let Some(ce) = ce {
            headers.insert(CONTENT_ENCODING, HeaderValue::from_str(ce).unwrap());
        }
        headers.insert("etag", HeaderValue::from_static("\"v1\""));
        UpstreamResponse {
            status: StatusCode::OK,
            headers,
            length: Some(body.len() as u64),
            body: Box::new(std::io::Cursor::new(body)),
        }
    }

    async fn body_of(r: UpstreamResponse) -> Vec<u8> {
        let mut out = Vec::new();
        let mut b = r.body;
        b.read_to_end(&mut out).await.unwrap();
        out
    }

    #[test]
    fn the_edge_is_asked_for_the_best_coding_unless_a_range_is() {
        let mut h = HeaderMap::new();
        h.insert(ACCEPT_ENCODING, HeaderValue::from_static("gzip, deflate"));
        assert_eq!(ask_edge(&mut h), Some(Some("gzip, deflate".into())));
        assert_eq!(h[ACCEPT_ENCODING], BETWEEN_PROXIES);
        let mut h = HeaderMap::new();
        assert_eq!(ask_edge(&mut h), Some(None));
        let mut h = HeaderMap::new();
        h.insert(RANGE, HeaderValue::from_static("bytes=0-9"));
        h.insert(ACCEPT_ENCODING, HeaderValue::from_static("gzip"));
        assert_eq!(ask_edge(&mut h), None);
        assert_eq!(h[ACCEPT_ENCODING], "gzip");
    }

    #[tokio::test]
    async fn a_coding_the_browser_does_not_take_is_undone() {
        let text = b"the same words again and again, ".repeat(200);
        let cfg = compress::CompressConfig::default();
        let br = compress::encode(&text, compress::Coding::Br, &cfg);
        // Chromium over plain HTTP: gzip and deflate only.
        let r = for_browser(
            answer(Some("br"), br.clone()),
            Some("gzip, deflate"),
            &Method::GET,
        )
        .await
        .unwrap();
        assert!(r.headers.get(CONTENT_ENCODING).is_none());
        assert_eq!(r.length, Some(text.len() as u64));
        assert_eq!(r.headers["etag"], "W/\"v1\"");
        assert_eq!(body_of(r).await, text);
        // A browser that takes br gets br as it came.
        let r = for_browser(
            answer(Some("br"), br.clone()),
            Some("gzip, br"),
            &Method::GET,
        )
        .await
        .unwrap();
        assert_eq!(r.headers[CONTENT_ENCODING], "br");
        assert_eq!(body_of(r).await, br);
        // Identity answers and HEAD pass as they are.
        let r = for_browser(answer(None, text.clone()), None, &Method::GET)
            .await
            .unwrap();
        assert_eq!(body_of(r).await, text);
        let r = for_browser(answer(Some("br"), Vec::new()), None, &Method::HEAD)
            .await
            .unwrap();
        assert_eq!(r.headers[CONTENT_ENCODING], "br");
        // A corrupt body is an error the browser sees, not garbage.
        let e = for_browser(
            answer(Some("br"), b"not brotli".to_vec()),
            None,
            &Method::GET,
        )
        .await
        .err()
        .unwrap();
        assert_eq!(e.0, StatusCode::BAD_GATEWAY);
    }
}
