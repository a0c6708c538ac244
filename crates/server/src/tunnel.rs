//! CONNECT tunnels: after the port and destination checks, `200` and then bytes both ways,
//! uninterpreted (no TLS interception in this proxy); [`splice`] also serves the TLS relay.

use std::net::SocketAddr;
use std::time::Instant;

use bytes::BytesMut;
use http::{Method, StatusCode, Version};
use tokio::io::AsyncWriteExt;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use crate::reply::{write_reply, Reply, Written};
use crate::server::Server;

/// Runs a tunnel to `host:port` on the client's socket halves. `leftover` holds bytes the
/// client sent after the CONNECT head (they go to the destination first).
#[allow(clippy::too_many_arguments)]
pub async fn run(
    server: &Server,
    rd: OwnedReadHalf,
    mut wr: OwnedWriteHalf,
    leftover: BytesMut,
    host: &str,
    port: u16,
    peer: SocketAddr,
    start: Instant,
    user: Option<&str>,
    hard: CancellationToken,
) {
    let metrics = &server.metrics;
    let refuse = |status: StatusCode, reason: String| {
        tracing::info!(target: "webpep::access", client = %peer, mode = "connect", method = "CONNECT",
            url = %format!("{host}:{port}"), status = status.as_u16(), reason = %reason,
            ms = start.elapsed().as_millis() as u64);
        metrics.request("connect", status.as_u16());
        Reply::text_close(status, &reason)
    };
    let reply_err = if !server.acl.connect_port_allowed(port) {
        Some(refuse(
            StatusCode::FORBIDDEN,
            format!("CONNECT to port {port} not allowed"),
        ))
    } else {
        None
    };
    let upstream = match reply_err {
        Some(r) => Err(r),
        None => match server.dialer.connect(host, port).await {
            Ok(s) => Ok(s),
            Err(e) => Err(refuse(e.status(), e.to_string())),
        },
    };
    let mut upstream = match upstream {
        Ok(s) => s,
        Err(r) => {
            if let Ok(Written { bytes: n, .. }) = write_reply(
                &mut wr,
                r,
                &Method::CONNECT,
                Version::HTTP_11,
                false,
                &metrics.origin_bytes_in,
            )
            .await
            {
                Metrics::add(&metrics.client_bytes_out, n);
            }
            let _ = wr.shutdown().await;
            return;
        }
    };
    let ok = b"HTTP/1.1 200 Connection established\r\n\r\n";
    if wr.write_all(ok).await.is_err() {
        return;
    }
    metrics.request("connect", 200);
    Metrics::add(&metrics.client_bytes_out, ok.len() as u64);
    if !leftover.is_empty() && upstream.write_all(&leftover).await.is_err() {
        return;
    }
    let Ok(mut client) = rd.reunite(wr) else {
        return;
    };
    tracing::info!(target: "webpep::access", client = %peer, mode = "connect", method = "CONNECT",
        url = %format!("{host}:{port}"), status = 200u16, user = user.unwrap_or("-"), "tunnel open");
    if splice(&mut client, &mut upstream, metrics, &hard).await {
        Metrics::add(&metrics.client_bytes_in, leftover.len() as u64);
        Metrics::add(&metrics.origin_bytes_out, leftover.len() as u64);
    }
    tracing::info!(target: "webpep::access", client = %peer, mode = "connect",
        url = %format!("{host}:{port}"), ms = start.elapsed().as_millis() as u64, "tunnel closed");
}

/// Copies bytes both ways until either side closes (or `hard` shutdown), counting them.
/// Returns whether the copy ended by itself without an error.
pub(crate) async fn splice(
    client: &mut tokio::net::TcpStream,
    upstream: &mut tokio::net::TcpStream,
    metrics: &Metrics,
    hard: &CancellationToken,
) -> bool {
    tokio::select! {
        r = tokio::io::copy_bidirectional(client, upstream) => match r {
            Ok((up, down)) => {
                Metrics::add(&metrics.client_bytes_in, up);
                Metrics::add(&metrics.origin_bytes_out, up);
                Metrics::add(&metrics.origin_bytes_in, down);
                Metrics::add(&metrics.client_bytes_out, down);
                true
            }
            Err(_) => false,
        },
        _ = hard.cancelled() => false,
    }
}
