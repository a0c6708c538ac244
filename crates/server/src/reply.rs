//! A response on its way to the client, and writing it in HTTP/1.x framing.

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, StatusCode, Version};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tokio::io::{AsyncWrite, AsyncWriteExt};

use crate::http1::{response_framing, write_response_head, ResponseFraming};

/// A response body.
#[derive(Debug)]
pub enum Body {
    /// No bytes.
    Empty,
    /// All bytes at hand.
    Full(Bytes),
    /// Too large to buffer: what was read, then the rest from the origin.
    Stream {
        /// Bytes already read.
        prefix: Bytes,
        /// The remainder.
        rest: Incoming,
    },
}

impl Body {
    fn known_len(&self) -> Option<u64> {
        match self {
            Body::Empty => Some(0),
            Body::Full(b) => Some(b.len() as u64),
            Body::Stream { .. } => None,
        }
    }
}

/// A response for the client.
#[derive(Debug)]
pub struct Reply {
    /// Status.
    pub status: StatusCode,
    /// End-to-end header fields (no hop-by-hop, no framing).
    pub headers: HeaderMap,
    /// Body.
    pub body: Body,
    /// Close the connection after this response.
    pub close: bool,
    /// Cache result for the access log ("HIT", "MISS", "REVALIDATED", "-").
    pub cache: &'static str,
}

impl Reply {
    /// A plain-text response stating `reason` (errors the proxy generates itself).
    pub fn text(status: StatusCode, reason: &str) -> Reply {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        let body = format!(
            "{} {}: {reason}\n",
            status.as_u16(),
            status.canonical_reason().unwrap_or("")
        );
        Reply {
            status,
            headers,
            body: Body::Full(Bytes::from(body)),
            close: false,
            cache: "-",
        }
    }

    /// The same, closing the connection afterwards.
    pub fn text_close(status: StatusCode, reason: &str) -> Reply {
        let mut r = Reply::text(status, reason);
        r.close = true;
        r
    }
}

/// Writes `reply` to `w` for a request with `method`/`version`; returns bytes written and
/// whether the connection must close afterwards.
pub async fn write_reply<W: AsyncWrite + Unpin>(
    w: &mut W,
    reply: Reply,
    method: &Method,
    version: Version,
    keep_alive: bool,
    origin_bytes: &std::sync::atomic::AtomicU64,
) -> std::io::Result<(u64, bool)> {
    let Reply {
        status,
        headers,
        body,
        close,
        ..
    } = reply;
    let framing = response_framing(method, status, body.known_len(), version);
    // HEAD and 304 announce the representation's length when known.
    let head_len = if framing == ResponseFraming::NoBody && status != StatusCode::NO_CONTENT {
        match &body {
            Body::Full(b) if !b.is_empty() => Some(b.len() as u64),
            _ => headers
                .get(header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse().ok()),
        }
    } else {
        None
    };
    let keep = keep_alive && !close;
    let head = write_response_head(status, &headers, framing, head_len, keep, version);
    let mut written = head.len() as u64;
    w.write_all(&head).await?;
    let must_close = !keep || framing == ResponseFraming::Close;
    match (framing, body) {
        (ResponseFraming::NoBody, _) | (_, Body::Empty) => {
            if framing == ResponseFraming::Chunked {
                w.write_all(b"0\r\n\r\n").await?;
                written += 5;
            }
        }
        (_, Body::Full(b)) => {
            if framing == ResponseFraming::Chunked {
                written += write_chunk(w, &b).await?;
                w.write_all(b"0\r\n\r\n").await?;
                written += 5;
            } else {
                w.write_all(&b).await?;
                written += b.len() as u64;
            }
        }
        (_, Body::Stream { prefix, mut rest }) => {
            let chunked = framing == ResponseFraming::Chunked;
            let first = prefix;
            if !first.is_empty() {
                written += if chunked {
                    write_chunk(w, &first).await?
                } else {
                    raw(w, &first).await?
                };
            }
            loop {
                match rest.frame().await {
                    Some(Ok(frame)) => {
                        if let Ok(data) = frame.into_data() {
                            origin_bytes
                                .fetch_add(data.len() as u64, std::sync::atomic::Ordering::Relaxed);
                            if !data.is_empty() {
                                written += if chunked {
                                    write_chunk(w, &data).await?
                                } else {
                                    raw(w, &data).await?
                                };
                            }
                        }
                    }
                    Some(Err(e)) => {
                        // The origin broke off: the client must not take a truncated body as
                        // complete, so the connection is closed without the final chunk.
                        tracing::warn!(error = %e, "origin body failed mid-stream");
                        w.flush().await?;
                        return Ok((written, true));
                    }
                    None => break,
                }
            }
            if chunked {
                w.write_all(b"0\r\n\r\n").await?;
                written += 5;
            }
        }
    }
    w.flush().await?;
    Ok((written, must_close))
}

async fn raw<W: AsyncWrite + Unpin>(w: &mut W, data: &[u8]) -> std::io::Result<u64> {
    w.write_all(data).await?;
    Ok(data.len() as u64)
}

async fn write_chunk<W: AsyncWrite + Unpin>(w: &mut W, data: &[u8]) -> std::io::Result<u64> {
    if data.is_empty() {
        return Ok(0);
    }
    let head = format!("{:x}\r\n", data.len());
    w.write_all(head.as_bytes()).await?;
    w.write_all(data).await?;
    w.write_all(b"\r\n").await?;
    Ok((head.len() + data.len() + 2) as u64)
}
