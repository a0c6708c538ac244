//! CONNECT tunnels: after the port and destination checks, `200` and then bytes both ways,
//! uninterpreted (what `[intercept]` opens goes to [`crate::intercept`] instead); [`splice`]
//! also serves the TLS relay.

use std::io;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::pin::Pin;
use std::sync::atomic::AtomicU64;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::BytesMut;
use http::{Method, StatusCode, Version};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use crate::reply::{write_reply, Reply, Written};
use crate::state::Server;

/// A CONNECT's destination, as every front end opens one: the port must be allowed
/// (`[acl] connect-ports`), and the dialer resolves and checks the destination; otherwise the
/// status and reason to answer with.
pub(crate) async fn connect_destination(
    server: &Server,
    host: &str,
    port: u16,
) -> Result<TcpStream, (StatusCode, String)> {
    if !server.acl.connect_port_allowed(port) {
        return Err((
            StatusCode::FORBIDDEN,
            format!("CONNECT to port {port} not allowed"),
        ));
    }
    server
        .dialer
        .connect(host, port)
        .await
        .map_err(|e| (e.status(), e.to_string()))
}

/// Runs a tunnel to `host:port` on the client's connection. `leftover` holds bytes the
/// client sent after the CONNECT head (they go to the destination first).
#[allow(clippy::too_many_arguments)]
pub async fn run(
    server: &Server,
    mut client: TcpStream,
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
    let upstream = connect_destination(server, host, port)
        .await
        .map_err(|(status, reason)| refuse(status, reason));
    let mut upstream = match upstream {
        Ok(s) => s,
        Err(r) => {
            if let Ok(Written { bytes: n, .. }) = write_reply(
                &mut client,
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
            let _ = client.shutdown().await;
            return;
        }
    };
    let ok = b"HTTP/1.1 200 Connection established\r\n\r\n";
    if client.write_all(ok).await.is_err() {
        return;
    }
    metrics.request("connect", 200);
    Metrics::add(&metrics.client_bytes_out, ok.len() as u64);
    if !leftover.is_empty() && upstream.write_all(&leftover).await.is_err() {
        return;
    }
    // Read from the client with the CONNECT head (and counted then); sent on now.
    Metrics::add(&metrics.origin_bytes_out, leftover.len() as u64);
    tracing::info!(target: "webpep::access", client = %peer, mode = "connect", method = "CONNECT",
        url = %format!("{host}:{port}"), status = 200u16, user = user.unwrap_or("-"), "tunnel open");
    let air = server.air_budgets.join(peer.ip(), client.as_fd());
    splice(&mut client, &mut upstream, air, metrics, &hard).await;
    tracing::info!(target: "webpep::access", client = %peer, mode = "connect",
        url = %format!("{host}:{port}"), ms = start.elapsed().as_millis() as u64, "tunnel closed");
}

/// Copies bytes both ways until either side closes (or `hard` shutdown), counting them as
/// they pass: counted at the end alone, a tunnel that ended in a reset (or at shutdown) was
/// never counted, and a long one only once it ended.
pub(crate) async fn splice(
    client: &mut TcpStream,
    upstream: &mut TcpStream,
    air: Option<crate::air_budget::AirSlot>,
    metrics: &Metrics,
    hard: &CancellationToken,
) {
    let mut client = Metered::client(crate::air_budget::AirGated::new(air, client), metrics);
    let mut upstream = Metered {
        s: upstream,
        read: &metrics.origin_bytes_in,
        written: &metrics.origin_bytes_out,
    };
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut client, &mut upstream) => {}
        _ = hard.cancelled() => {}
    }
}

/// A stream that counts the bytes read from it and written to it.
pub(crate) struct Metered<'a, S> {
    s: S,
    read: &'a AtomicU64,
    written: &'a AtomicU64,
}

impl<'a, S> Metered<'a, S> {
    /// A client's connection: its bytes are the client's.
    pub(crate) fn client(s: S, metrics: &'a Metrics) -> Self {
        Metered {
            s,
            read: &metrics.client_bytes_in,
            written: &metrics.client_bytes_out,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Metered<'_, S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut this.s).poll_read(cx, buf);
        Metrics::add(this.read, (buf.filled().len() - before) as u64);
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Metered<'_, S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.s).poll_write(cx, data);
        if let Poll::Ready(Ok(n)) = r {
            Metrics::add(this.written, n as u64);
        }
        r
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().s).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().s).poll_shutdown(cx)
    }
}
