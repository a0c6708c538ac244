//! The link to the edge over QUIC: every request on a stream of one connection (docs/
//! protocol.md), reconnected when it has gone; an idempotent request whose connection died
//! under it is sent once more on the new one, anything else is not replayed. A reconnection
//! to an edge that gave us a session ticket is 0-RTT: idempotent requests go in its first
//! flight; anything else, and tunnels, wait for the handshake to complete.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

use http::{HeaderMap, Method, StatusCode};
use tokio::io::AsyncWriteExt;
use webpep_proto::Role;
use webpep_transport::session::{
    pump_from_frames, pump_into_frames, send_request, start_tunnel, tunnel_answer, Session,
    SessionError, TunnelEnd, TunnelFlights,
};
use webpep_transport::{client_config, connect_early, Credential, TransportSettings};

use crate::proxy::{ProxyRequest, Tunnel, Upstream, UpstreamError, UpstreamResponse};

/// The edge, reached over the link transport.
pub struct QuicUpstream {
    endpoint: quinn::Endpoint,
    server: SocketAddr,
    config: quinn::ClientConfig,
    header_table: bool,
    /// Tunnels answered before the edge has connected (see [`QuicUpstream::fast_connect`]).
    fast_connect: bool,
    link: tokio::sync::Mutex<Option<Link>>,
    stats: Arc<LinkStats>,
}

/// How the client's connections to the edge went (for tests and the client's log).
#[derive(Debug, Default)]
pub struct LinkStats {
    /// Connections opened.
    pub connections: std::sync::atomic::AtomicU64,
    /// Of those, reconnections whose first flight the edge took (0-RTT).
    pub early_accepted: std::sync::atomic::AtomicU64,
    /// Reconnections whose early data the edge refused (the connection is then closed and
    /// opened again in full).
    pub early_refused: std::sync::atomic::AtomicU64,
}

/// One connection to the edge: its session, and whether its handshake has completed.
#[derive(Clone)]
struct Link {
    session: Arc<Session>,
    /// `None` while a 0-RTT handshake is under way; then whether the edge took the early
    /// data (a full handshake is `Some(true)` at once).
    handshake: tokio::sync::watch::Receiver<Option<bool>>,
}

impl QuicUpstream {
    /// An upstream to the edge at `server`, authenticating with `credential`.
    pub fn new(
        server: SocketAddr,
        credential: &Credential,
        settings: &TransportSettings,
    ) -> Result<QuicUpstream, String> {
        let config = client_config(credential, settings).map_err(|e| e.to_string())?;
        let bind: SocketAddr = if server.is_ipv4() {
            (Ipv4Addr::UNSPECIFIED, 0).into()
        } else {
            (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
        };
        let endpoint = quinn::Endpoint::client(bind).map_err(|e| format!("UDP socket: {e}"))?;
        Ok(QuicUpstream {
            endpoint,
            server,
            config,
            header_table: settings.header_table,
            fast_connect: true,
            link: tokio::sync::Mutex::new(None),
            stats: Arc::default(),
        })
    }

    pub fn stats(&self) -> &LinkStats {
        &self.stats
    }

    /// With `on` (the default), a CONNECT's tunnel is handed to the browser as soon as its
    /// request is on its way to the edge, so the browser's first bytes (its TLS ClientHello)
    /// cross the link with the CONNECT instead of a round trip after it: on a slow link that
    /// is a round trip less per HTTPS connection, and the browser's own timeout for setting
    /// up a tunnel through a proxy no longer runs over the air. If the edge then refuses
    /// (a port or host its rules forbid, an origin that cannot be reached), the browser's
    /// connection is closed instead of getting the edge's error page; the client logs why.
    /// With `off`, the browser waits for the edge's answer and gets its error page.
    pub fn fast_connect(mut self, on: bool) -> Self {
        self.fast_connect = on;
        self
    }

    /// Connects to the edge, waits for its `Hello` (its session ticket has come by then:
    /// the edge sends tickets as its handshake completes), and closes the connection: the
    /// next request reconnects with 0-RTT. (The lab's `quic_resumed` configurations: a
    /// device whose client has talked to this edge before.)
    pub async fn connect_and_close(&self) -> Result<(), UpstreamError> {
        let link = self.link().await?;
        link.session
            .peer_hello()
            .await
            .map_err(|e| UpstreamError::LinkDown(e.to_string()))?;
        let mut handshake = link.handshake.clone();
        let _ = handshake.wait_for(|h| h.is_some()).await;
        // Closed, it is replaced at the next request (see `link`).
        link.session
            .connection()
            .close(0u32.into(), b"until the next request");
        Ok(())
    }

    /// The connection, connecting (again) when there is none or it has closed.
    async fn link(&self) -> Result<Link, UpstreamError> {
        use std::sync::atomic::Ordering::Relaxed;
        let mut slot = self.link.lock().await;
        if let Some(l) = slot.as_ref() {
            if l.session.connection().close_reason().is_none() {
                return Ok(l.clone());
            }
        }
        let (conn, early) = connect_early(&self.endpoint, self.server, self.config.clone())
            .await
            .map_err(|e| UpstreamError::LinkDown(e.to_string()))?;
        self.stats.connections.fetch_add(1, Relaxed);
        let session = Session::open_with(conn.clone(), Role::Client, self.header_table)
            .await
            .map_err(|e| UpstreamError::LinkDown(e.to_string()))?;
        let (tx, handshake) = tokio::sync::watch::channel(None);
        match early {
            None => {
                let _ = tx.send(Some(true));
            }
            Some(accepted) => {
                let stats = self.stats.clone();
                tokio::spawn(async move {
                    let took = accepted.await;
                    if took {
                        stats.early_accepted.fetch_add(1, Relaxed);
                    } else {
                        stats.early_refused.fetch_add(1, Relaxed);
                        // What went early is lost, the control stream with it: start over.
                        conn.close(0u32.into(), b"early data refused");
                    }
                    let _ = tx.send(Some(took));
                });
            }
        }
        let link = Link { session, handshake };
        *slot = Some(link.clone());
        Ok(link)
    }

    /// A session on which `method` may be sent now: at once for what may be received twice,
    /// after the handshake has completed for anything else (`None`: a tunnel).
    async fn session_for(&self, method: Option<&Method>) -> Result<Arc<Session>, UpstreamError> {
        let early_ok = method.is_some_and(idempotent);
        for _ in 0..2 {
            let link = self.link().await?;
            if early_ok {
                return Ok(link.session);
            }
            let mut handshake = link.handshake.clone();
            let done = tokio::select! {
                r = handshake.wait_for(|h| h.is_some()) => r.map(|h| *h == Some(true)).unwrap_or(false),
                e = link.session.connection().closed() => {
                    return Err(UpstreamError::LinkDown(e.to_string()));
                }
            };
            if done {
                return Ok(link.session);
            }
            // Refused early data: that connection is closed; the next one is opened anew.
        }
        Err(UpstreamError::LinkDown(
            "the edge refused this client's early data twice".into(),
        ))
    }

    async fn forward(&self, req: &ProxyRequest) -> Result<UpstreamResponse, Attempt> {
        let session = self
            .session_for(Some(&req.method))
            .await
            .map_err(Attempt::Final)?;
        let sent = send_request(
            &session,
            req.method.as_str(),
            &req.target,
            &req.headers,
            &req.body,
            false,
        )
        .await;
        let (status, headers, _coding, mut body) = match sent {
            Ok(r) => r,
            Err(e) if connection_gone(&e) => return Err(Attempt::ConnectionLost(e.to_string())),
            Err(e) => {
                return Err(Attempt::Final(UpstreamError::Failed(
                    StatusCode::BAD_GATEWAY,
                    e.to_string(),
                )))
            }
        };
        let status = StatusCode::from_u16(status).map_err(|_| {
            Attempt::Final(UpstreamError::Failed(
                StatusCode::BAD_GATEWAY,
                format!("the edge answered status {status}"),
            ))
        })?;
        let length = webpep_http1::fields::content_length(&headers);
        // The body flows to the browser as it arrives; a broken-off body ends short, and the
        // browser sees its connection closed before the length it was told.
        let (reader, mut writer) = tokio::io::duplex(64 * 1024);
        tokio::spawn(async move {
            loop {
                match body.chunk().await {
                    Ok(Some(d)) => {
                        if writer.write_all(&d).await.is_err() {
                            return;
                        }
                    }
                    Ok(None) => {
                        let _ = writer.shutdown().await;
                        return;
                    }
                    Err(e) => {
                        tracing::info!("a response body broke off: {e}");
                        return;
                    }
                }
            }
        });
        Ok(UpstreamResponse {
            status,
            headers,
            length,
            body: Box::new(reader),
        })
    }
}

enum Attempt {
    /// The connection went away under the request (it may not have reached the edge).
    ConnectionLost(String),
    Final(UpstreamError),
}

fn connection_gone(e: &SessionError) -> bool {
    matches!(
        e,
        SessionError::Connection(_)
            | SessionError::Write(quinn::WriteError::ConnectionLost(_))
            | SessionError::Read(quinn::ReadError::ConnectionLost(_))
            // Sent early on a reconnection whose early data the edge refused: not received.
            | SessionError::Write(quinn::WriteError::ZeroRttRejected)
            | SessionError::Read(quinn::ReadError::ZeroRttRejected)
    )
}

/// Requests that may be sent twice (RFC 9110 §9.2.2): retried once on a new connection.
fn idempotent(m: &Method) -> bool {
    matches!(
        *m,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::PUT | Method::DELETE | Method::TRACE
    )
}

impl Upstream for QuicUpstream {
    async fn request(&self, req: ProxyRequest) -> Result<UpstreamResponse, UpstreamError> {
        match self.forward(&req).await {
            Ok(r) => Ok(r),
            Err(Attempt::Final(e)) => Err(e),
            Err(Attempt::ConnectionLost(why)) if idempotent(&req.method) => {
                tracing::info!(
                    "connection to the edge lost ({why}); retrying {} once",
                    req.target
                );
                match self.forward(&req).await {
                    Ok(r) => Ok(r),
                    Err(Attempt::Final(e)) => Err(e),
                    Err(Attempt::ConnectionLost(why)) => Err(UpstreamError::LinkDown(why)),
                }
            }
            Err(Attempt::ConnectionLost(why)) => Err(UpstreamError::LinkDown(format!(
                "{why}; a {} is not sent twice",
                req.method
            ))),
        }
    }

    /// The edge resolves and connects; the tunnel's bytes ride the request's stream as
    /// `Data` frames each way (the browser's TLS end to end).
    async fn tunnel(&self, authority: String, headers: HeaderMap) -> Result<Tunnel, UpstreamError> {
        let session = self.session_for(None).await?;
        let failed = |e: SessionError| {
            if connection_gone(&e) {
                UpstreamError::LinkDown(e.to_string())
            } else {
                UpstreamError::Failed(StatusCode::BAD_GATEWAY, e.to_string())
            }
        };
        let (mut send, frames) = start_tunnel(&session, &authority, &headers)
            .await
            .map_err(failed)?;
        // With fast connect the browser has its tunnel now and the edge's answer is read
        // behind it; otherwise the answer decides what the browser gets.
        let answer = if self.fast_connect {
            Answer::Pending(frames)
        } else {
            let (status, _, body) = tunnel_answer(&session, frames).await.map_err(failed)?;
            if !(200..300).contains(&status) {
                let status = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
                return Err(UpstreamError::Failed(status, refusal_reason(body).await));
            }
            Answer::Open(body)
        };
        // Two pipes between the browser's side and the stream.
        let (browser_reads, mut from_edge) = tokio::io::duplex(64 * 1024);
        let (to_edge, browser_writes) = tokio::io::duplex(64 * 1024);
        let flights = TunnelFlights::new();
        let flights_up = flights.clone();
        let session_up = session.clone();
        tokio::spawn(async move {
            let mut body = match answer {
                Answer::Open(body) => body,
                Answer::Pending(frames) => match tunnel_answer(&session, frames).await {
                    Ok((status, _, body)) if (200..300).contains(&status) => body,
                    // Dropping `from_edge` closes the browser's connection.
                    Ok((status, _, body)) => {
                        tracing::warn!(
                            %authority,
                            status,
                            "the edge refused the tunnel after the browser had its 200: {}",
                            refusal_reason(body).await
                        );
                        return;
                    }
                    // The edge's answer to this side's reset of a tunnel the browser gave up.
                    Err(SessionError::Read(quinn::ReadError::Reset(code)))
                        if u64::from(code) == u64::from(webpep_proto::code::CANCELLED) =>
                    {
                        tracing::debug!(%authority, "the tunnel was given up");
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(%authority, "the tunnel failed: {e}");
                        return;
                    }
                },
            };
            if let Err(e) =
                pump_from_frames(&mut body, &mut from_edge, &flights, TunnelEnd::Server).await
            {
                tracing::debug!("tunnel from the edge: {e}");
            }
        });
        tokio::spawn(async move {
            if let Err(e) = pump_into_frames(
                &session_up,
                browser_writes,
                &mut send,
                &flights_up,
                TunnelEnd::Client,
            )
            .await
            {
                tracing::debug!("tunnel to the edge: {e}");
            }
        });
        Ok((Box::new(browser_reads), Box::new(to_edge)))
    }

    /// Datagrams received on the current connection (the edge ACKs what the client sends
    /// and answers its keep-alives, so a live link is never silent for long).
    fn heard(&self) -> Option<u64> {
        let link = self.link.try_lock().ok()?;
        let conn = link.as_ref()?.session.connection();
        conn.close_reason()
            .is_none()
            .then(|| conn.stats().udp_rx.datagrams)
    }
}

/// A tunnel's answer from the edge: read (2xx), or still to come behind the browser's bytes.
enum Answer {
    Open(webpep_transport::session::ResponseBody),
    Pending(webpep_transport::session::FrameReader),
}

/// The edge's reason for refusing a tunnel: its answer's body (the first 4 KB).
async fn refusal_reason(mut body: webpep_transport::session::ResponseBody) -> String {
    let mut reason = Vec::new();
    while let Ok(Some(d)) = body.chunk().await {
        reason.extend_from_slice(&d);
        if reason.len() > 4096 {
            break;
        }
    }
    String::from_utf8_lossy(&reason).trim().to_string()
}
