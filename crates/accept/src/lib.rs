//! The accept step every webpep server shares (the edge proxy and its metrics endpoint, the
//! DNS proxy, the lab's replay server and authoritative DNS), and the clock their caches read
//! ([`Clock`]).
//!
//! An accept error (out of file descriptors, say) is not the listener's end: it is logged and
//! retried after a short pause, since retrying at once would spin a core until a descriptor
//! frees up. Cancellation ends the wait at any point.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// Where a server's cache reads the time (when answers were stored, whether they have
/// expired): injectable, so that tests decide expiry without waiting for it.
pub trait Clock: Send + Sync {
    /// The time now.
    fn now(&self) -> tokio::time::Instant;
}

/// The default clock: tokio's, so a runtime with paused time (`tokio::time::pause`,
/// `advance`) drives expiry too.
#[derive(Clone, Copy, Debug, Default)]
pub struct TokioClock;

impl Clock for TokioClock {
    fn now(&self) -> tokio::time::Instant {
        tokio::time::Instant::now()
    }
}

/// The pause after a failed accept.
pub const BACKOFF: Duration = Duration::from_millis(50);

/// The next connection on `listener`, or `None` once `cancel` fires. Failed accepts are logged
/// under `server` and retried after [`BACKOFF`].
pub async fn accept(
    listener: &TcpListener,
    cancel: &CancellationToken,
    server: &str,
) -> Option<(TcpStream, SocketAddr)> {
    loop {
        let accepted = tokio::select! {
            _ = cancel.cancelled() => return None,
            r = listener.accept() => r,
        };
        match accepted {
            Ok(conn) => return Some(conn),
            Err(e) => {
                tracing::warn!(server, error = %e, "accept failed; retrying shortly");
                tokio::select! {
                    _ = cancel.cancelled() => return None,
                    _ = tokio::time::sleep(BACKOFF) => {}
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Paused time: the 20 ms before the cancel are virtual. Tokio moves its clock only when
    // every task waits, so the accept is surely waiting (with no connection) when it fires.
    #[tokio::test(start_paused = true)]
    async fn returns_connections_then_none_once_cancelled() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let cancel = CancellationToken::new();
        let client = TcpStream::connect(addr).await.unwrap();
        let (_s, peer) = accept(&l, &cancel, "test").await.expect("a connection");
        assert_eq!(peer, client.local_addr().unwrap());
        // A cancel ends a wait with no connection in sight.
        let c = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            c.cancel();
        });
        assert!(accept(&l, &cancel, "test").await.is_none());
    }
}
