//! The browser-facing side of the client proxy: HTTP/1.1 on a local port (absolute-URI
//! requests, CONNECT, `/proxy.pac`), each request handed to an [`Upstream`] — the link to the
//! edge — and its answer written back. The proxy never resolves names or connects anywhere
//! itself.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, StatusCode, Version};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use webpep_http1::fields::{request_keeps_alive, strip_hop_by_hop};
use webpep_http1::request::{parse_request_head, request_body_framing, BodyFraming, RequestHead};
use webpep_http1::response::{write_response_head, ResponseFraming};

use crate::config::ClientConfig;
use crate::pac::pac_file;

/// A browser's request as the proxy forwards it: an absolute URI (or, for CONNECT, the
/// authority), the end-to-end header fields, the whole body.
#[derive(Clone, Debug)]
pub struct ProxyRequest {
    pub method: Method,
    pub target: String,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// The edge's answer: status, end-to-end header fields, and the body as the browser is to
/// receive it (in its content coding; any transfer coding between the proxies removed).
pub struct UpstreamResponse {
    pub status: StatusCode,
    pub headers: HeaderMap,
    /// The body's length when known (sent as Content-Length; chunked otherwise).
    pub length: Option<u64>,
    pub body: Box<dyn AsyncRead + Send + Unpin>,
}

/// Why the edge could not answer.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// No answer from the edge within `link-down-after`, or no connection to it.
    #[error("the link to the edge is down: {0}")]
    LinkDown(String),
    /// The edge refused or failed the request; the browser gets this status.
    #[error("{1}")]
    Failed(StatusCode, String),
}

/// Bytes both ways of a CONNECT tunnel, to the origin through the edge.
pub type Tunnel = (
    Box<dyn AsyncRead + Send + Unpin>,
    Box<dyn AsyncWrite + Send + Unpin>,
);

/// The link to the edge, as the browser side sees it.
pub trait Upstream: Send + Sync + 'static {
    fn request(
        &self,
        req: ProxyRequest,
    ) -> impl std::future::Future<Output = Result<UpstreamResponse, UpstreamError>> + Send;
    /// Opens a tunnel to `authority` (host:port); the edge resolves and connects.
    fn tunnel(
        &self,
        authority: String,
        headers: HeaderMap,
    ) -> impl std::future::Future<Output = Result<Tunnel, UpstreamError>> + Send;
}

/// Accepts browsers on `listener` until `cancel`, serving each connection on its own task.
pub async fn serve<U: Upstream>(
    listener: TcpListener,
    cfg: Arc<ClientConfig>,
    upstream: Arc<U>,
    cancel: CancellationToken,
) {
    let local = listener.local_addr().unwrap_or(cfg.listen);
    loop {
        let (stream, peer) = tokio::select! {
            _ = cancel.cancelled() => return,
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    tracing::warn!("accept: {e}");
                    continue;
                }
            },
        };
        if !cfg.allows(peer.ip()) {
            tracing::warn!(%peer, "refused a browser that is not on the allow list");
            drop(stream);
            continue;
        }
        let cfg = cfg.clone();
        let upstream = upstream.clone();
        let cancel = cancel.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = cancel.cancelled() => {}
                r = connection(stream, local, &cfg, &*upstream) => {
                    if let Err(e) = r {
                        tracing::debug!(%peer, "browser connection: {e}");
                    }
                }
            }
        });
    }
}

/// One browser connection: requests one after the other until either side closes.
async fn connection<U: Upstream>(
    mut stream: TcpStream,
    local: SocketAddr,
    cfg: &ClientConfig,
    upstream: &U,
) -> std::io::Result<()> {
    let _ = stream.set_nodelay(true);
    let mut buf: Vec<u8> = Vec::with_capacity(8192);
    loop {
        let head = loop {
            match parse_request_head(&buf, cfg.max_header_bytes) {
                Ok(Some(h)) => break h,
                Ok(None) => {}
                Err(e) => {
                    let status = e.status();
                    return reply(&mut stream, status, &e.to_string(), false).await;
                }
            }
            if stream.read_buf(&mut buf).await? == 0 {
                return Ok(());
            }
        };
        buf.drain(..head.head_len);
        let keep_alive = request_keeps_alive(head.version, &head.headers);

        if head.method == Method::CONNECT {
            return connect(stream, head, buf, upstream).await;
        }
        // Requests for the proxy itself: the PAC file.
        if head.target.starts_with('/') {
            if head.method == Method::GET && head.target == "/proxy.pac" {
                let pac = pac_file(local);
                let mut headers = HeaderMap::new();
                headers.insert(
                    http::header::CONTENT_TYPE,
                    HeaderValue::from_static("application/x-ns-proxy-autoconfig"),
                );
                let out = write_response_head(
                    StatusCode::OK,
                    &headers,
                    ResponseFraming::Length(pac.len() as u64),
                    None,
                    keep_alive,
                    Version::HTTP_11,
                );
                stream.write_all(&out).await?;
                stream.write_all(pac.as_bytes()).await?;
                if keep_alive {
                    continue;
                }
                return Ok(());
            }
            return reply(
                &mut stream,
                StatusCode::NOT_FOUND,
                "this is webpep's device proxy: configure it as the browser's HTTP proxy, or use /proxy.pac",
                false,
            )
            .await;
        }
        if !(head.target.starts_with("http://") || head.target.starts_with("https://")) {
            return reply(
                &mut stream,
                StatusCode::BAD_REQUEST,
                "a proxy request names an absolute http:// URI",
                false,
            )
            .await;
        }
        let body = match read_body(&mut stream, &mut buf, &head, cfg).await {
            Ok(b) => b,
            Err(BodyError::Io(e)) => return Err(e),
            Err(BodyError::Refused(status, why)) => {
                return reply(&mut stream, status, &why, false).await
            }
        };
        let mut headers = head.headers.clone();
        strip_hop_by_hop(&mut headers);
        headers.remove(http::header::PROXY_AUTHORIZATION);
        let req = ProxyRequest {
            method: head.method.clone(),
            target: head.target.clone(),
            headers,
            body,
        };
        let answer = tokio::time::timeout(cfg.link_down_after, upstream.request(req)).await;
        let resp = match answer {
            Ok(Ok(r)) => r,
            Ok(Err(UpstreamError::LinkDown(why))) => {
                return link_down(&mut stream, &why).await;
            }
            Ok(Err(UpstreamError::Failed(status, why))) => {
                reply(&mut stream, status, &why, keep_alive).await?;
                if keep_alive {
                    continue;
                }
                return Ok(());
            }
            Err(_) => {
                let why = format!(
                    "no answer from the edge within {:.0} s",
                    cfg.link_down_after.as_secs_f64()
                );
                return link_down(&mut stream, &why).await;
            }
        };
        let no_body = head.method == Method::HEAD
            || resp.status.is_informational()
            || resp.status == StatusCode::NO_CONTENT
            || resp.status == StatusCode::NOT_MODIFIED;
        let framing = match (no_body, resp.length) {
            (true, _) => ResponseFraming::NoBody,
            (false, Some(n)) => ResponseFraming::Length(n),
            (false, None) if head.version == Version::HTTP_11 => ResponseFraming::Chunked,
            (false, None) => ResponseFraming::Close,
        };
        let keep_alive = keep_alive && framing != ResponseFraming::Close;
        let mut headers = resp.headers;
        strip_hop_by_hop(&mut headers);
        let out = write_response_head(
            resp.status,
            &headers,
            framing,
            if no_body { resp.length } else { None },
            keep_alive,
            head.version,
        );
        stream.write_all(&out).await?;
        if !no_body {
            copy_body(resp.body, &mut stream, framing).await?;
        }
        if !keep_alive {
            return stream.shutdown().await;
        }
    }
}

enum BodyError {
    Io(std::io::Error),
    Refused(StatusCode, String),
}

/// The request body, whole (uploads from a browser are small next to what the link carries
/// back; a limit answers 413 above it).
async fn read_body(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    head: &RequestHead,
    cfg: &ClientConfig,
) -> Result<Bytes, BodyError> {
    let framing = request_body_framing(&head.headers)
        .map_err(|e| BodyError::Refused(e.status(), e.to_string()))?;
    match framing {
        BodyFraming::None => Ok(Bytes::new()),
        BodyFraming::Length(n) => {
            let n = usize::try_from(n).unwrap_or(usize::MAX);
            if n > cfg.max_request_body {
                return Err(BodyError::Refused(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("request body over {} bytes", cfg.max_request_body),
                ));
            }
            while buf.len() < n {
                if stream.read_buf(buf).await.map_err(BodyError::Io)? == 0 {
                    return Err(BodyError::Io(std::io::ErrorKind::UnexpectedEof.into()));
                }
            }
            Ok(Bytes::from(buf.drain(..n).collect::<Vec<u8>>()))
        }
        BodyFraming::Chunked => {
            let mut decoder = webpep_http1::body::ChunkedDecoder::new(cfg.max_request_body);
            let mut out = Vec::new();
            loop {
                let used = decoder
                    .decode(buf, &mut out)
                    .map_err(|e| BodyError::Refused(StatusCode::BAD_REQUEST, e.to_string()))?;
                buf.drain(..used);
                if decoder.is_done() {
                    return Ok(Bytes::from(out));
                }
                if stream.read_buf(buf).await.map_err(BodyError::Io)? == 0 {
                    return Err(BodyError::Io(std::io::ErrorKind::UnexpectedEof.into()));
                }
            }
        }
    }
}

async fn copy_body(
    mut body: Box<dyn AsyncRead + Send + Unpin>,
    out: &mut TcpStream,
    framing: ResponseFraming,
) -> std::io::Result<()> {
    let mut chunk = vec![0u8; 16 * 1024];
    loop {
        let n = body.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        if framing == ResponseFraming::Chunked {
            out.write_all(format!("{n:x}\r\n").as_bytes()).await?;
            out.write_all(&chunk[..n]).await?;
            out.write_all(b"\r\n").await?;
        } else {
            out.write_all(&chunk[..n]).await?;
        }
    }
    if framing == ResponseFraming::Chunked {
        out.write_all(b"0\r\n\r\n").await?;
    }
    out.flush().await
}

/// CONNECT: the edge opens the TCP connection; the browser's bytes (its TLS) go through
/// untouched.
async fn connect<U: Upstream>(
    mut stream: TcpStream,
    head: RequestHead,
    early: Vec<u8>,
    upstream: &U,
) -> std::io::Result<()> {
    let authority = head.target.clone();
    if authority.contains('/') || !authority.contains(':') {
        return reply(
            &mut stream,
            StatusCode::BAD_REQUEST,
            "CONNECT names host:port",
            false,
        )
        .await;
    }
    let mut headers = head.headers.clone();
    strip_hop_by_hop(&mut headers);
    headers.remove(http::header::PROXY_AUTHORIZATION);
    let (mut from_edge, mut to_edge) = match upstream.tunnel(authority.clone(), headers).await {
        Ok(t) => t,
        Err(UpstreamError::LinkDown(why)) => return link_down(&mut stream, &why).await,
        Err(UpstreamError::Failed(status, why)) => {
            return reply(&mut stream, status, &why, false).await
        }
    };
    stream
        .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
        .await?;
    if !early.is_empty() {
        to_edge.write_all(&early).await?;
    }
    let (mut browser_read, mut browser_write) = stream.split();
    let up = async {
        tokio::io::copy(&mut browser_read, &mut to_edge).await?;
        to_edge.shutdown().await
    };
    let down = async {
        tokio::io::copy(&mut from_edge, &mut browser_write).await?;
        browser_write.shutdown().await
    };
    let (a, b) = tokio::join!(up, down);
    a.and(b)
}

/// A short page for the browser: what happened, in words.
async fn reply(
    stream: &mut TcpStream,
    status: StatusCode,
    message: &str,
    keep_alive: bool,
) -> std::io::Result<()> {
    let body = format!(
        "<!doctype html><title>{code} {reason}</title><h1>{code} {reason}</h1><p>{msg}</p><p>webpep client</p>\n",
        code = status.as_u16(),
        reason = status.canonical_reason().unwrap_or(""),
        msg = html_escape(message)
    );
    let mut headers = HeaderMap::new();
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    headers.insert(
        http::header::CACHE_CONTROL,
        HeaderValue::from_static("no-store"),
    );
    let out = write_response_head(
        status,
        &headers,
        ResponseFraming::Length(body.len() as u64),
        None,
        keep_alive,
        Version::HTTP_11,
    );
    stream.write_all(&out).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.flush().await
}

/// The link to the edge is down: a clear page now rather than a browser spinning for minutes.
async fn link_down(stream: &mut TcpStream, why: &str) -> std::io::Result<()> {
    reply(
        stream,
        StatusCode::GATEWAY_TIMEOUT,
        &format!("The slow link to the webpep edge is down ({why}). The page will load once the link is back; try again."),
        false,
    )
    .await
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
