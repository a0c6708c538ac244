//! The proxy's HTTPS port (`tls-listen`): browsers reach the proxy over TLS with a
//! certificate from the client's own CA, and where ALPN gives HTTP/2, every request and
//! every CONNECT of a browser is one stream of one connection. Over HTTP/1.1 a browser
//! gives a proxy a bounded number of connections (Chromium 32), one request or one tunnel
//! each, which caps what a page of many hosts has in flight; over HTTP/2 it sends them all
//! at once and the edge and the link decide the order.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::{Method, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use webpep_intercept::{CaError, CaStore};

use crate::intercept::{empty_body, full_body, h2_forward, page, serve_h2, H2Body};
use crate::proxy::{
    http1_connection, link_down_message, own_page, plan_connect, run_connect, ClientProxy, Side,
    Upstream, UpstreamError,
};

/// How long a browser may take over its TLS handshake with the proxy (on the device, where
/// it takes milliseconds).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The TLS configuration of the HTTPS port at `listen`: a certificate from `ca` naming
/// `localhost`, 127.0.0.1, ::1 and the listening address; ALPN h2 and http/1.1.
pub fn proxy_tls_config(
    ca: &CaStore,
    listen: SocketAddr,
) -> Result<Arc<rustls::ServerConfig>, CaError> {
    let mut names = vec![
        "localhost".to_string(),
        "127.0.0.1".to_string(),
        "::1".to_string(),
    ];
    let ip = listen.ip();
    if !ip.is_unspecified() && !ip.is_loopback() {
        names.push(ip.to_string());
    }
    webpep_intercept::server_config(ca.issue(&names)?)
}

/// One browser's TLS connection to the proxy.
pub(crate) async fn connection<U: Upstream>(
    stream: TcpStream,
    local: SocketAddr,
    tls: Arc<rustls::ServerConfig>,
    cx: ClientProxy<U>,
) -> std::io::Result<()> {
    let _ = stream.set_nodelay(true);
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let stream = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            tracing::warn!("TLS handshake with a browser on the HTTPS port: {e}");
            return Ok(());
        }
        Err(_) => {
            tracing::warn!(
                "TLS handshake with a browser on the HTTPS port: none within {} s",
                HANDSHAKE_TIMEOUT.as_secs()
            );
            return Ok(());
        }
    };
    let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
    cx.counters.connection(h2);
    if !h2 {
        return http1_connection(stream, local, &cx).await;
    }
    let idle = cx.cfg.idle_timeout;
    let shared = Arc::new(cx);
    let handle = move |req: http::Request<Incoming>| {
        let cx = shared.clone();
        async move { proxy_exchange(req, local, &cx).await }
    };
    serve_h2(stream, handle, idle).await
}

/// One stream of a browser's HTTP/2 connection to the proxy: a CONNECT, a request for an
/// absolute URI, or one of the proxy's own pages.
async fn proxy_exchange<U: Upstream>(
    mut req: http::Request<Incoming>,
    local: SocketAddr,
    cx: &ClientProxy<U>,
) -> http::Response<H2Body> {
    let Some(authority) = req.uri().authority().map(|a| a.as_str().to_string()) else {
        return page(
            StatusCode::BAD_REQUEST,
            "a request to a proxy names the host it is for",
        );
    };
    if req.method() == Method::CONNECT {
        let plan = match plan_connect(&authority, req.headers(), cx).await {
            Ok(p) => p,
            Err(UpstreamError::LinkDown(why)) => {
                return page(StatusCode::GATEWAY_TIMEOUT, &link_down_message(&why))
            }
            Err(UpstreamError::Failed(status, why)) => return page(status, &why),
        };
        // The stream becomes the tunnel once the 200 below has gone out.
        let upgrade = hyper::upgrade::on(&mut req);
        let cx = cx.clone();
        tokio::spawn(async move {
            match upgrade.await {
                Ok(io) => {
                    if let Err(e) = run_connect(TokioIo::new(io), Vec::new(), plan, &cx).await {
                        tracing::debug!(%authority, "tunnel on an HTTP/2 stream: {e}");
                    }
                }
                Err(e) => tracing::debug!(%authority, "CONNECT stream: {e}"),
            }
        });
        let mut out = http::Response::new(empty_body());
        *out.status_mut() = StatusCode::OK;
        return out;
    }
    let own_host = authority.eq_ignore_ascii_case(crate::intercept::CA_PAGE_HOST)
        || authority.parse::<SocketAddr>().ok() == Some(local)
        || authority.eq_ignore_ascii_case(&format!("localhost:{}", local.port()));
    if own_host {
        let path = req
            .uri()
            .path_and_query()
            .map(|p| p.as_str().to_string())
            .unwrap_or_else(|| "/".into());
        if req.method() != Method::GET && req.method() != Method::HEAD {
            return page(StatusCode::METHOD_NOT_ALLOWED, "GET only");
        }
        let (status, headers, body) = own_page(&path, local, cx.intercept.as_deref());
        let body = if req.method() == Method::HEAD {
            empty_body()
        } else {
            full_body(body)
        };
        let mut out = http::Response::new(body);
        *out.status_mut() = status;
        *out.headers_mut() = headers;
        return out;
    }
    match req.uri().scheme_str() {
        Some("http") | Some("https") => {}
        _ => {
            return page(
                StatusCode::BAD_REQUEST,
                "a proxy request names an absolute http:// URI",
            )
        }
    }
    let target = req.uri().to_string();
    h2_forward(req, target, &authority, &Side::Proxy { local }, cx).await
}
