//! The HTTP/2 serving shell both proxies use for a browser's HTTP/2 connection (inside an
//! intercepted tunnel, or on the client's HTTPS port): hyper's server, each stream one call of
//! the handler, closed gracefully after `idle` with no stream open (as an idle HTTP/1
//! connection is) or when `graceful` is cancelled; dropped at once when `hard` is.

use std::convert::Infallible;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// How an HTTP/2 connection ended.
#[derive(Debug)]
pub enum H2End {
    /// The browser closed it, or it failed (the error, for a debug line).
    Closed(Option<hyper::Error>),
    /// No stream for the idle time: sent GOAWAY and let open streams finish.
    IdledOut,
    /// `graceful` was cancelled: as idle.
    ShutDown,
    /// `hard` was cancelled: dropped.
    Dropped,
}

/// Streams in flight on a connection, and a wake-up whenever one starts or ends.
#[derive(Default)]
struct Activity {
    streams: AtomicUsize,
    changed: Notify,
}

/// Counts a stream while it lives (also when its future is dropped, as on a reset).
struct Stream(Arc<Activity>);

impl Stream {
    fn start(a: &Arc<Activity>) -> Stream {
        a.streams.fetch_add(1, Ordering::AcqRel);
        a.changed.notify_one();
        Stream(a.clone())
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        self.0.streams.fetch_sub(1, Ordering::AcqRel);
        self.0.changed.notify_one();
    }
}

/// Serves HTTP/2 on `io` with `builder`, each stream answered by `handle`, until the
/// connection ends (see [`H2End`]).
pub async fn serve_h2<S, F, Fut, B>(
    io: S,
    builder: &hyper::server::conn::http2::Builder<TokioExecutor>,
    handle: F,
    idle: Duration,
    graceful: &CancellationToken,
    hard: &CancellationToken,
) -> H2End
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
    F: Fn(http::Request<Incoming>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = http::Response<B>> + Send + 'static,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let activity = Arc::new(Activity::default());
    let act = activity.clone();
    let handle = Arc::new(handle);
    let service = hyper::service::service_fn(move |req: http::Request<Incoming>| {
        let stream = Stream::start(&act);
        let answer = handle(req);
        async move {
            let resp = answer.await;
            drop(stream);
            Ok::<_, Infallible>(resp)
        }
    });
    let conn = builder.serve_connection(TokioIo::new(io), service);
    tokio::pin!(conn);
    let idled_out = async {
        loop {
            let woken = tokio::time::timeout(idle, activity.changed.notified()).await;
            if woken.is_err() && activity.streams.load(Ordering::Acquire) == 0 {
                return;
            }
        }
    };
    let end = tokio::select! {
        r = conn.as_mut() => return H2End::Closed(r.err()),
        _ = graceful.cancelled() => H2End::ShutDown,
        _ = idled_out => H2End::IdledOut,
        _ = hard.cancelled() => return H2End::Dropped,
    };
    conn.as_mut().graceful_shutdown();
    tokio::select! {
        _ = conn => end,
        _ = hard.cancelled() => H2End::Dropped,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use http_body_util::{BodyExt, Empty, Full};

    /// A client and the shell on an in-memory pipe; the handler answers "ok" after `delay`.
    async fn pair(
        idle: Duration,
        delay: Duration,
    ) -> (
        hyper::client::conn::http2::SendRequest<Empty<Bytes>>,
        tokio::task::JoinHandle<H2End>,
        tokio::task::JoinHandle<()>,
    ) {
        let (a, b) = tokio::io::duplex(1 << 16);
        let server = tokio::spawn(async move {
            let builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
            serve_h2(
                b,
                &builder,
                move |_req| async move {
                    tokio::time::sleep(delay).await;
                    http::Response::new(Full::new(Bytes::from_static(b"ok")))
                },
                idle,
                &CancellationToken::new(),
                &CancellationToken::new(),
            )
            .await
        });
        let (send, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(a))
                .await
                .unwrap();
        let client = tokio::spawn(async move {
            let _ = conn.await;
        });
        (send, server, client)
    }

    fn get() -> http::Request<Empty<Bytes>> {
        http::Request::get("https://a.example/")
            .body(Empty::new())
            .unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_connection_is_closed_after_the_idle_time() {
        let (mut send, server, _client) = pair(Duration::from_secs(120), Duration::ZERO).await;
        let resp = send.send_request(get()).await.unwrap();
        assert_eq!(resp.into_body().collect().await.unwrap().to_bytes(), "ok");
        let started = tokio::time::Instant::now();
        assert!(matches!(server.await.unwrap(), H2End::IdledOut));
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_secs(120) && waited < Duration::from_secs(121),
            "{waited:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_stream_longer_than_the_idle_time_completes() {
        let (mut send, server, _client) =
            pair(Duration::from_secs(10), Duration::from_secs(45)).await;
        let resp = send.send_request(get()).await.unwrap();
        assert_eq!(resp.into_body().collect().await.unwrap().to_bytes(), "ok");
        assert!(matches!(server.await.unwrap(), H2End::IdledOut));
    }
}
