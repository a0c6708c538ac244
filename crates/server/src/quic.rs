//! The edge's QUIC front end: enrolled client proxies (`webpep client`) send requests on QUIC
//! streams in the messages of docs/protocol.md; each goes through the same pipeline as the
//! HTTP/1 listener's ([`Server::serve_enrolled`]: cache, compression, transcoding, inlining),
//! and its answer goes back on the stream. The transport has authenticated the client (its
//! certificate, in the handshake), so the client-network list and proxy authentication,
//! which are for browsers, do not apply.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http_body_util::BodyExt;
use tokio_util::sync::CancellationToken;
use webpep_proto::{BodyCoding, Frame, Role};
use webpep_transport::session::{
    pump_from_frames, pump_into_frames, read_request_body_part, read_request_head,
    send_response_head, write_frame, BodySender, FrameReader, IncomingRequest, ResponseBody,
    Session, SessionError, TunnelEnd, TunnelFlights,
};
use webpep_transport::EdgeTransport;

use crate::client_link::ClientLink;
use crate::reply::{Body, Reply};
use crate::request::Arrival;
use crate::state::Server;

/// The access log's mode of a request from a client proxy.
pub const MODE: &str = "quic";

/// Serves enrolled clients on `endpoint` until `cancel`.
pub async fn serve_quic(
    server: Arc<Server>,
    endpoint: quinn::Endpoint,
    edge: Arc<EdgeTransport>,
    cancel: CancellationToken,
) {
    let local = endpoint
        .local_addr()
        .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
    loop {
        let incoming = tokio::select! {
            _ = cancel.cancelled() => break,
            i = endpoint.accept() => match i {
                Some(i) => i,
                None => break,
            },
        };
        let server = server.clone();
        let edge = edge.clone();
        let cancel = cancel.clone();
        tokio::spawn(async move {
            let identity = edge.identity().clone();
            let Some((conn, cert)) = authenticated(&edge, incoming).await else {
                return;
            };
            // A resumed session skips the handshake's certificate check: revocation is
            // checked here for every connection.
            if identity.revocations().is_revoked(&cert) {
                tracing::info!(peer = %conn.remote_address(), "refused a revoked client (resumed session)");
                conn.close(0u32.into(), b"credential revoked");
                return;
            }
            let name: Arc<str> = identity
                .name_of(&cert)
                .unwrap_or_else(|| "unknown".into())
                .into();
            tracing::info!(client = %name, peer = %conn.remote_address(), "client proxy connected");
            server.metrics.quic_client(&name, |c| c.connections += 1);
            tokio::select! {
                _ = cancel.cancelled() => conn.close(0u32.into(), b"edge shutting down"),
                r = connection(server, conn.clone(), local, name.clone()) => {
                    if let Err(e) = r {
                        tracing::info!(client = %name, "client proxy connection ended: {e}");
                    }
                }
            }
        });
    }
    endpoint.close(0u32.into(), b"edge shutting down");
}

/// The connection and its client's certificate. A client resuming a session (its ticket
/// carries its certificate, proven by the ticket's key) is served at once, so what it sent in
/// its first flight (0-RTT) is answered without waiting for its handshake to finish; a new
/// client's certificate is known when its handshake completes. `None` when the handshake
/// failed or was refused (logged).
async fn authenticated(
    edge: &EdgeTransport,
    incoming: quinn::Incoming,
) -> Option<(quinn::Connection, webpep_transport::CertificateDer<'static>)> {
    let connecting = match edge.accept(incoming) {
        Ok(c) => c,
        Err(e) => {
            tracing::info!("QUIC connection refused: {e}");
            return None;
        }
    };
    let (conn, handshake) = match connecting.into_0rtt() {
        Ok(early) => early,
        // A server's connection always converts; should that change, do the handshake first.
        Err(connecting) => match connecting.await {
            Ok(c) => return webpep_transport::peer_certificate(&c).map(|cert| (c, cert)),
            Err(e) => {
                tracing::info!("QUIC handshake refused or failed: {e}");
                return None;
            }
        },
    };
    if let Some(cert) = webpep_transport::peer_certificate(&conn) {
        return Some((conn, cert));
    }
    tokio::select! {
        _ = handshake => {}
        e = conn.closed() => {
            tracing::info!("QUIC handshake refused or failed: {e}");
            return None;
        }
    }
    match webpep_transport::peer_certificate(&conn) {
        Some(cert) => Some((conn, cert)),
        None => {
            tracing::info!(peer = %conn.remote_address(), "a QUIC client without a certificate");
            conn.close(0u32.into(), b"no client certificate");
            None
        }
    }
}

async fn connection(
    server: Arc<Server>,
    conn: quinn::Connection,
    local: SocketAddr,
    name: Arc<str>,
) -> Result<(), webpep_transport::session::SessionError> {
    let session = Session::open(conn.clone(), Role::Server).await?;
    loop {
        let (send, recv) = conn.accept_bi().await?;
        let server = server.clone();
        let session = session.clone();
        let name = name.clone();
        let at = Arrival {
            peer: conn.remote_address(),
            local,
            original_dst: None,
        };
        tokio::spawn(async move {
            exchange(server, session, send, recv, at, name).await;
        });
    }
}

/// A request stream as read.
enum Read {
    Request(IncomingRequest, crate::limits::BufferLease),
    /// A CONNECT to this authority.
    Connect(String),
    /// Its body was refused while it came.
    Refused {
        method: String,
        target: String,
        why: crate::limits::BodyRefused,
    },
}

/// One request and its answer. A malformed request resets its stream only; the connection
/// lives on.
async fn exchange(
    server: Arc<Server>,
    session: Arc<Session>,
    mut send: quinn::SendStream,
    recv: quinn::RecvStream,
    at: Arrival,
    client: Arc<str>,
) {
    // Nothing is answered before the client's Hello said it speaks our version.
    if session.peer_hello().await.is_err() {
        return;
    }
    let mut frames = FrameReader::new(recv);
    // A refused body is timed from when its stream began to be read.
    let read_start = Instant::now();
    let read = async {
        let head = read_request_head(&session, &mut frames).await?;
        if head.method == "CONNECT" {
            return Ok(Read::Connect(head.target));
        }
        // The body is held in the buffered-body budget as a browser's is: many streams
        // could otherwise each hold `max-request-body`.
        let mut intake = server.body_intake(at.peer.ip());
        let declared = webpep_http1::fields::content_length(&head.headers);
        let refused = |why| Read::Refused {
            method: head.method.clone(),
            target: head.target.clone(),
            why,
        };
        if let Some(Err(why)) = declared.map(|n| intake.admit(n)) {
            return Ok(refused(why));
        }
        let mut body = Vec::new();
        while let Some(part) = read_request_body_part(&mut frames).await? {
            if let Err(why) = intake.admit((body.len() + part.len()) as u64) {
                return Ok(refused(why));
            }
            body.extend_from_slice(&part);
        }
        Ok::<_, webpep_transport::session::SessionError>(Read::Request(
            IncomingRequest {
                method: head.method,
                target: head.target,
                headers: head.headers,
                body,
                background: head.background,
            },
            intake.into_lease(),
        ))
    };
    let (req, _lease) = match read.await {
        Ok(Read::Request(r, lease)) => {
            if r.background {
                // Its answer goes only when no foreground stream has data to send.
                let _ = send.set_priority(webpep_transport::session::BACKGROUND_PRIORITY);
            }
            let n = r.body.len() as u64;
            server.metrics.quic_client(&client, |c| {
                c.requests += 1;
                c.bytes_in += n;
            });
            (r, lease)
        }
        Ok(Read::Connect(target)) => {
            server.metrics.quic_client(&client, |c| c.requests += 1);
            tunnel(&server, &session, send, frames, &target, at, &client).await;
            return;
        }
        Ok(Read::Refused {
            method,
            target,
            why,
        }) => {
            server.metrics.quic_client(&client, |c| c.requests += 1);
            tracing::debug!(%client, "request body refused: {}", why.reason());
            let exchange = Exchanged {
                at,
                client: &client,
                method: &method,
                url: &target,
                start: read_start,
            };
            let reply = server.body_refused(why);
            let _ = answer_and_log(&server, &session, &mut send, reply, false, &exchange).await;
            let _ = send.finish();
            // The rest of the body is not wanted.
            let _ = frames
                .stream()
                .stop(quinn::VarInt::from_u32(webpep_proto::code::REQUEST_REFUSED));
            return;
        }
        Err(e) => {
            tracing::debug!(%client, "malformed request stream: {e}");
            let _ = write_frame(
                &session,
                &mut send,
                &Frame::Error {
                    code: webpep_proto::code::PROTOCOL,
                    reason: e.to_string(),
                },
            )
            .await;
            let _ = send.finish();
            return;
        }
    };
    // The link to this client as the connection measured it so far, remembered as a
    // browser's TCP link is; before its rate is known, its RTT (the handshake's) still is.
    let link = server.measure_links.then(|| {
        let l = link_of(&server, &session);
        server.links.measured(at.peer.ip(), l, Instant::now());
        server.links.get(at.peer.ip(), Instant::now()).unwrap_or(l)
    });
    // Timed from here, as the HTTP/1 listener times a request from its complete head.
    let start = Instant::now();
    let (method, url) = (req.method.clone(), req.target.clone());
    let reply = match build(req) {
        Ok(r) => server.serve_enrolled(r, at, client.clone(), link).await,
        Err(why) => Reply::text(http::StatusCode::BAD_REQUEST, &why),
    };
    let exchange = Exchanged {
        at,
        client: &client,
        method: &method,
        url: &url,
        start,
    };
    let zstd = server.cfg.quic.zstd;
    if let Err(e) = answer_and_log(&server, &session, &mut send, reply, zstd, &exchange).await {
        tracing::debug!(%client, "writing a response: {e}");
        return;
    }
    let _ = send.finish();
}

/// Whose request a reply answers, for the access log.
struct Exchanged<'a> {
    at: Arrival,
    client: &'a str,
    method: &'a str,
    url: &'a str,
    start: Instant,
}

/// Sends `reply` on the stream and writes its access line (as the HTTP/1 listener writes
/// it; the link as this connection measured it after the response).
async fn answer_and_log(
    server: &Server,
    session: &Session,
    send: &mut quinn::SendStream,
    reply: Reply,
    zstd: bool,
    ex: &Exchanged<'_>,
) -> Result<(), webpep_transport::session::SessionError> {
    let (status, cache, trace) = (reply.status.as_u16(), reply.cache, reply.trace);
    let written = answer(session, send, reply, zstd).await;
    if let Ok((n, _)) = &written {
        server.metrics.quic_client(ex.client, |c| c.bytes_out += *n);
    }
    if tracing::enabled!(target: "webpep::access", tracing::Level::INFO) {
        crate::reply::AccessLine {
            peer: ex.at.peer,
            mode: MODE,
            method: ex.method,
            url: ex.url,
            status,
            bytes: written.as_ref().map_or(0, |w| w.0),
            cache,
            user: ex.client,
            start: ex.start,
            truncated: written.is_err(),
            link: Some(link_of(server, session)),
            trace,
            first_out: written.as_ref().ok().and_then(|w| w.1),
        }
        .write();
    }
    written.map(|_| ())
}

/// The link to a client proxy as its connection measured it so far (the lab's time-scaled
/// links read as the links they stand for).
fn link_of(server: &Server, session: &Session) -> ClientLink {
    ClientLink::of_path(webpep_transport::path_estimate(session.connection()))
        .unscaled(server.cfg.air.link_time_scale)
}

/// A CONNECT from a client proxy: the edge checks the port and the destination, resolves
/// and connects (nothing of this crosses the air), answers 200, and the stream then carries
/// the tunnel's bytes as `Data` frames each way. The browser's TLS stays end to end.
async fn tunnel(
    server: &Server,
    session: &Session,
    mut send: quinn::SendStream,
    frames: FrameReader,
    authority: &str,
    at: Arrival,
    client: &str,
) {
    let start = std::time::Instant::now();
    let target = authority.rsplit_once(':').and_then(|(h, p)| {
        Some((
            h.trim_matches(|c| c == '[' || c == ']'),
            p.parse::<u16>().ok()?,
        ))
    });
    let upstream = match target {
        None => Err((
            http::StatusCode::BAD_REQUEST,
            "CONNECT names host:port".to_string(),
        )),
        Some((host, port)) => crate::tunnel::connect_destination(server, host, port).await,
    };
    let status = match &upstream {
        Ok(_) => 200,
        Err((s, _)) => s.as_u16(),
    };
    tracing::info!(target: "webpep::access", client = %at.peer, user = %client, mode = "quic-connect",
        method = "CONNECT", url = %authority, status, ms = start.elapsed().as_millis() as u64);
    server.metrics.request("connect", status);
    let tcp = match upstream {
        Ok(t) => t,
        Err((status, reason)) => {
            let reply = Reply::text(status, &reason);
            let _ = answer(session, &mut send, reply, false).await;
            let _ = send.finish();
            return;
        }
    };
    // The 200 goes with the tunnel's opening, ahead of other tunnels' bulk.
    let _ = send.set_priority(webpep_transport::session::opening_priority(send.id()));
    if send_response_head(
        session,
        &mut send,
        200,
        &http::HeaderMap::new(),
        BodyCoding::Identity,
    )
    .await
    .is_err()
    {
        return;
    }
    let (rd, wr) = tcp.into_split();
    let mut from_client = ResponseBody::from_frames(frames);
    let flights = TunnelFlights::new();
    let mut given_up = false;
    let ended = {
        let up = pump_from_frames(&mut from_client, wr, &flights, TunnelEnd::Client);
        let down = pump_into_frames(session, rd, &mut send, &flights, TunnelEnd::Server);
        tokio::pin!(up, down);
        tokio::select! {
            a = &mut up => match a {
                // The client gave the tunnel up (a browser's abandoned handshake): the
                // origin's connection goes (both halves, with `down`), and so does the rest
                // of its answer.
                Err(SessionError::Read(quinn::ReadError::Reset(code))) => {
                    given_up = true;
                    Err(format!("the client reset the tunnel ({code})"))
                }
                a => a.and(down.await).map_err(|e| e.to_string()),
            },
            b = &mut down => up.await.and(b).map_err(|e| e.to_string()),
        }
    };
    if given_up {
        let _ = send.reset(webpep_proto::code::CANCELLED.into());
    }
    if let Err(e) = ended {
        tracing::debug!(%authority, "tunnel ended: {e}");
    }
}

fn build(req: IncomingRequest) -> Result<http::Request<Bytes>, String> {
    let method = http::Method::from_bytes(req.method.as_bytes())
        .map_err(|_| format!("not a method: {:?}", req.method))?;
    let uri: http::Uri = req
        .target
        .parse()
        .map_err(|_| format!("not a request target: {:?}", req.target))?;
    let mut r = http::Request::builder()
        .method(method)
        .uri(uri)
        .body(Bytes::from(req.body))
        .map_err(|e| e.to_string())?;
    *r.headers_mut() = req.headers;
    Ok(r)
}

/// Writes the reply; the body bytes written and when the head went out.
async fn answer(
    session: &Session,
    send: &mut quinn::SendStream,
    reply: Reply,
    zstd: bool,
) -> Result<(u64, Option<Instant>), webpep_transport::session::SessionError> {
    let coding = if zstd && worth_zstd(&reply) {
        BodyCoding::Zstd
    } else {
        BodyCoding::Identity
    };
    send_response_head(session, send, reply.status.as_u16(), &reply.headers, coding).await?;
    let first_out = Some(Instant::now());
    // Its bytes as they cross (coded, when it is) are what `sent` counts.
    let mut body = BodySender::new(coding)?;
    match reply.body {
        Body::Empty => {}
        Body::Full(b) => {
            let mut frames = body.piece(&b)?;
            frames.extend(body.last()?);
            session.write_all(send, &frames).await?
        }
        Body::Stream {
            prefix, mut rest, ..
        } => {
            if !prefix.is_empty() {
                session.write_all(send, &body.piece(&prefix)?).await?;
            }
            while let Some(frame) = rest.frame().await {
                match frame {
                    Ok(f) => {
                        if let Ok(d) = f.into_data() {
                            session.write_all(send, &body.piece(&d)?).await?;
                        }
                    }
                    Err(e) => {
                        // The origin broke off: say so rather than end as though complete.
                        write_frame(
                            session,
                            send,
                            &Frame::Error {
                                code: webpep_proto::code::INTERNAL,
                                reason: format!("the origin broke off the body: {e}"),
                            },
                        )
                        .await?;
                        return Ok((body.payload(), first_out));
                    }
                }
            }
            session.write_all(send, &body.last()?).await?;
        }
    }
    write_frame(session, send, &Frame::End).await?;
    Ok((body.payload(), first_out))
}

/// Whether a response crosses to the client proxy zstd-coded: text (a type worth
/// compressing) with no content coding of its own, and a body worth the coding (a streamed
/// one always is: its length is not known).
fn worth_zstd(reply: &Reply) -> bool {
    let coded = reply
        .headers
        .get(http::header::CONTENT_ENCODING)
        .is_some_and(|v| !v.as_bytes().eq_ignore_ascii_case(b"identity"));
    let big_enough = match &reply.body {
        Body::Empty => false,
        Body::Full(b) => b.len() >= ZSTD_MIN_BODY,
        Body::Stream { .. } => true,
    };
    let text = webpep_optimize::compress::is_compressible(
        reply
            .headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok()),
    );
    !coded && big_enough && text
}

/// Bodies shorter than this go as they are (the compression stage's own minimum).
const ZSTD_MIN_BODY: usize = 256;
