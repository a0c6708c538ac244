//! `[origin] http2 = true`: the proxy speaks h2c (prior knowledge) to origins, and several
//! client requests share one origin connection.

mod common;

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use common::*;
use http_body_util::Full;

#[tokio::test]
async fn h2c_to_origin() {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let conns = Arc::new(AtomicUsize::new(0));
    let c2 = conns.clone();
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            c2.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(
                    |req: hyper::Request<hyper::body::Incoming>| async move {
                        let body = format!("{:?} {}", req.version(), req.uri().path());
                        Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::from(body))))
                    },
                );
                let _ =
                    hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                        .serve_connection(hyper_util::rt::TokioIo::new(s), svc)
                        .await;
            });
        }
    });
    let mut cfg = test_config();
    cfg.origin.http2 = true;
    let p = start_proxy(cfg).await;
    for i in 0..3 {
        let r = get_once(p.addr, &format!("http://{addr}/p{i}"), "").await;
        assert_eq!(r.status, 200);
        assert_eq!(r.text(), format!("HTTP/2.0 /p{i}"));
    }
    assert_eq!(conns.load(Ordering::SeqCst), 1, "one pooled h2 connection");
}
