//! Front ends: how a request gets into the pipeline. A front end reads a request from its
//! transport and hands it to [`admit`], which decides its mode (explicit, transparent, URL,
//! local, CONNECT) and applies the per-client rate limit and proxy authentication, the same
//! for every transport. What follows ([`Server::handle`], [`crate::proxy`])
//! does not know where a request came from.
//!
//! Front ends today: the HTTP/1 listener ([`crate::conn`]: explicit, transparent and URL mode
//! on one port, CONNECT handed to [`crate::tunnel`] or, opened, to [`crate::intercept`], a
//! TLS ClientHello to [`crate::tls_relay`]) and the in-memory one, [`Server::serve_request`], which serves an
//! `http::Request` with no socket at all (tests; the client proxy's QUIC streams next).

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::StatusCode;

use crate::auth::{AuthFailure, Need};
use crate::http1::RequestHead;
use crate::limits::{retry_after_secs, BufferLease, Limit};
use crate::mode::{classify, Mode, ModeContext};
use crate::reply::Reply;
use crate::request::{Arrival, ClientRequest};
use crate::state::Server;

/// What [`admit`] decided for one request.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// Serve it ([`Server::handle`]).
    Serve(ClientRequest),
    /// A CONNECT tunnel to open (only a byte-stream front end can).
    Connect {
        /// Destination host.
        host: String,
        /// Destination port.
        port: u16,
    },
    /// Answer this instead (400 for a request no mode fits, 429, 407, 403).
    Refuse(Reply),
}

/// The decision and what the access log says about it.
#[derive(Debug)]
pub(crate) struct Admission {
    /// The mode's label ("explicit", …; "none" when no mode fits).
    pub mode: &'static str,
    /// The origin URL, or the target as sent.
    pub url: String,
    /// The authenticated user, if any.
    pub user: Option<Arc<str>>,
    /// The decision.
    pub outcome: Outcome,
}

/// Decides what to do with a request read whole by a front end. `enrolled`: who the
/// transport has authenticated (a client proxy's name, by its certificate over QUIC; the
/// user of the CONNECT a request arrived inside, when the edge intercepted it); proxy
/// authentication is then not asked for.
pub(crate) async fn admit(
    server: &Server,
    head: RequestHead,
    body: Bytes,
    body_lease: Option<BufferLease>,
    at: Arrival,
    enrolled: Option<Arc<str>>,
) -> Admission {
    let url_mode = &server.cfg.url_rewrite;
    let proxy_authority = url_mode
        .proxy_authority
        .as_deref()
        .filter(|_| url_mode.enabled);
    let ctx = ModeContext {
        local: at.local,
        proxy_authority,
    };
    let mode = match classify(&head.method, &head.target, &head.headers, &ctx) {
        Ok(m) => m,
        Err(reason) => {
            return Admission {
                mode: "none",
                url: head.target.clone(),
                user: None,
                outcome: Outcome::Refuse(Reply::text_close(StatusCode::BAD_REQUEST, &reason)),
            }
        }
    };
    let mut adm = Admission {
        mode: mode.label(),
        url: mode.origin_url().unwrap_or_else(|| head.target.clone()),
        user: None,
        outcome: Outcome::Refuse(Reply::text(StatusCode::INTERNAL_SERVER_ERROR, "")),
    };
    // Authentication comes after the rate limit, so guessing passwords is throttled too.
    let refused = match server.limits.request(at.peer.ip()) {
        Err(wait) => {
            server.metrics.limit_refused(Limit::Rate);
            Some(rate_refusal(wait, server.cfg.limits.client_rate, &mode))
        }
        Ok(()) if enrolled.is_some() => {
            adm.user = enrolled;
            None
        }
        Ok(()) => match authenticate(server, &mode, &head.headers, at.peer).await {
            Ok(user) => {
                adm.user = user;
                None
            }
            Err(r) => Some(r),
        },
    };
    adm.outcome = match (refused, mode) {
        (Some(r), _) => Outcome::Refuse(r),
        (None, Mode::Connect { host, port }) => Outcome::Connect { host, port },
        (None, mode) => Outcome::Serve(ClientRequest {
            head,
            body,
            peer: at.peer,
            local: at.local,
            original_dst: at.original_dst,
            mode,
            body_lease,
            link: None,
        }),
    };
    adm
}

fn rate_refusal(wait: std::time::Duration, rate: f64, mode: &Mode) -> Reply {
    let secs = retry_after_secs(wait);
    let mut r = Reply::text(
        StatusCode::TOO_MANY_REQUESTS,
        &format!(
            "too many requests from this client (limits.client-rate = {rate}/s); retry in {secs} s"
        ),
    );
    r.headers
        .insert(http::header::RETRY_AFTER, http::HeaderValue::from(secs));
    r.close = matches!(mode, Mode::Connect { .. });
    r
}

/// Proxy authentication (`[auth]`): the user (if any) when the request may go on, else the
/// refusal to answer.
async fn authenticate(
    server: &Server,
    mode: &Mode,
    headers: &http::HeaderMap,
    peer: SocketAddr,
) -> Result<Option<Arc<str>>, Reply> {
    let Some(auth) = server.auth.as_ref() else {
        return Ok(None);
    };
    let failure = match auth.need(mode) {
        Need::Nothing => return Ok(None),
        Need::Refuse => AuthFailure::Transparent,
        Need::Credentials => match auth
            .check(headers, peer.ip(), &server.metrics.auth_verifications)
            .await
        {
            Ok(user) => return Ok(Some(user)),
            Err(f) => f,
        },
    };
    server.metrics.auth_failed(&failure);
    tracing::debug!(client = %peer, reason = failure.label(), "proxy authentication failed");
    Err(auth.refusal(&failure, matches!(mode, Mode::Connect { .. })))
}

impl Server {
    /// The intake of one request body from `ip` ([`crate::limits::BodyIntake`]).
    pub(crate) fn body_intake(&self, ip: std::net::IpAddr) -> crate::limits::BodyIntake {
        crate::limits::BodyIntake::new(&self.buffers, ip, self.cfg.limits.max_request_body as u64)
    }

    /// The answer to a refused request body (a refusal of the budget is counted).
    pub(crate) fn body_refused(&self, why: crate::limits::BodyRefused) -> Reply {
        if why == crate::limits::BodyRefused::OverBudget {
            self.metrics.limit_refused(crate::limits::Limit::Buffer);
        }
        Reply::text(why.status(), why.reason())
    }

    /// The in-memory front end: serves one request given as an `http::Request` (its target in
    /// the URI as a client sent it: absolute for an explicit proxy, a path with a `Host`
    /// field otherwise), as though it had arrived from `at.peer` at `at.local`, with every
    /// rule a socket front end applies: client networks, rate limit, authentication, modes,
    /// destinations. CONNECT needs a byte stream and is refused (501). A response the
    /// listener would stream through untransformed is read whole (within
    /// `max-body-transform`). The request is counted
    /// on `/metrics` as the HTTP/1 listener counts it; bytes are not (there is no wire).
    pub async fn serve_request(self: &Arc<Self>, req: http::Request<Bytes>, at: Arrival) -> Reply {
        self.serve_in_memory(req, at, None, None).await
    }

    /// The in-memory front end for a client the transport has authenticated (an enrolled
    /// client proxy, by its certificate): the client-network list and proxy authentication
    /// are for browsers reaching the proxy directly, so neither applies; everything else does.
    /// `link`: the client's link as the transport measured it (the stages scale with it).
    pub async fn serve_enrolled(
        self: &Arc<Self>,
        req: http::Request<Bytes>,
        at: Arrival,
        client: Arc<str>,
        link: Option<crate::client_link::ClientLink>,
    ) -> Reply {
        self.serve_in_memory(req, at, Some(client), link).await
    }

    async fn serve_in_memory(
        self: &Arc<Self>,
        req: http::Request<Bytes>,
        at: Arrival,
        enrolled: Option<Arc<str>>,
        link: Option<crate::client_link::ClientLink>,
    ) -> Reply {
        let (parts, body) = req.into_parts();
        if enrolled.is_none() && !self.acl.client_allowed(at.peer.ip()) {
            crate::metrics::Metrics::add(&self.metrics.connections_refused, 1);
            self.metrics.request("none", 403);
            return Reply::text_close(
                StatusCode::FORBIDDEN,
                "client not allowed to use this proxy",
            );
        }
        let head = RequestHead {
            method: parts.method,
            target: parts.uri.to_string(),
            version: match parts.version {
                http::Version::HTTP_10 => http::Version::HTTP_10,
                _ => http::Version::HTTP_11,
            },
            headers: parts.headers,
            head_len: 0,
        };
        let adm = admit(self, head, body, None, at, enrolled).await;
        let reply = match adm.outcome {
            Outcome::Serve(mut r) => {
                if self.measure_links {
                    r.link = link;
                }
                let mut reply = self.clone().handle(r).await;
                // What a socket front end streams through as it comes, whole here.
                reply.body = reply.body.gather().await;
                reply
            }
            Outcome::Connect { .. } => Reply::text(
                StatusCode::NOT_IMPLEMENTED,
                "CONNECT needs a byte-stream front end",
            ),
            Outcome::Refuse(r) => r,
        };
        self.metrics.request(adm.mode, reply.status.as_u16());
        reply
    }
}
