//! The device proxy's browser side against a stand-in for the edge: what a browser sends is
//! what the edge gets (hop-by-hop fields and proxy credentials removed), answers come back
//! framed for the browser, CONNECT tunnels carry bytes both ways untouched, the PAC file is
//! served, and a link that does not answer gives a clear 504 page in `link-down-after`
//! (paused time: no real waiting).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use webpep_client::proxy::Tunnel;
use webpep_client::{
    ClientConfig, ClientProxy, ProxyRequest, Upstream, UpstreamError, UpstreamResponse,
};

/// What the stand-in edge does.
#[derive(Clone, Copy)]
enum Behaviour {
    /// Answers 200 with the request's target as the body, its length known or not.
    Echo { known_length: bool },
    /// Never answers, and nothing comes from it.
    Silent,
    /// Answers after a minute, its link busy all along (packets keep coming).
    SlowOnABusyLink,
    /// Refuses with 403.
    Refuse,
}

struct FakeEdge {
    behaviour: Behaviour,
    seen: Mutex<Vec<ProxyRequest>>,
    tunnels: Mutex<Vec<(String, HeaderMap)>>,
    heard: AtomicU64,
}

impl Upstream for FakeEdge {
    async fn request(&self, req: ProxyRequest) -> Result<UpstreamResponse, UpstreamError> {
        self.seen.lock().unwrap().push(req.clone());
        match self.behaviour {
            Behaviour::Echo { known_length } => {
                let body = format!("{} {} {}", req.method, req.target, req.body.len());
                let mut headers = HeaderMap::new();
                headers.insert("content-type", HeaderValue::from_static("text/plain"));
                // A hop-by-hop field from the edge must not reach the browser.
                headers.insert("keep-alive", HeaderValue::from_static("timeout=5"));
                Ok(UpstreamResponse {
                    status: StatusCode::OK,
                    headers,
                    length: known_length.then_some(body.len() as u64),
                    body: Box::new(std::io::Cursor::new(body.into_bytes())),
                })
            }
            Behaviour::Silent => std::future::pending().await,
            Behaviour::SlowOnABusyLink => {
                tokio::time::sleep(Duration::from_secs(60)).await;
                Ok(UpstreamResponse {
                    status: StatusCode::OK,
                    headers: HeaderMap::new(),
                    length: Some(4),
                    body: Box::new(std::io::Cursor::new(b"late".to_vec())),
                })
            }
            Behaviour::Refuse => Err(UpstreamError::Failed(
                StatusCode::FORBIDDEN,
                "not for you".into(),
            )),
        }
    }

    fn heard(&self) -> Option<u64> {
        match self.behaviour {
            // A fresh count each time it is asked: something came.
            Behaviour::SlowOnABusyLink => Some(self.heard.fetch_add(1, Ordering::Relaxed)),
            _ => Some(0),
        }
    }

    async fn tunnel(&self, authority: String, headers: HeaderMap) -> Result<Tunnel, UpstreamError> {
        self.tunnels.lock().unwrap().push((authority, headers));
        // The origin: echoes what it gets, upper-cased.
        let (ours, theirs) = tokio::io::duplex(4096);
        tokio::spawn(async move {
            let (mut r, mut w) = tokio::io::split(theirs);
            let mut buf = [0u8; 1024];
            loop {
                let n = r.read(&mut buf).await.unwrap_or(0);
                if n == 0 {
                    let _ = w.shutdown().await;
                    return;
                }
                let up: Vec<u8> = buf[..n].to_ascii_uppercase();
                if w.write_all(&up).await.is_err() {
                    return;
                }
            }
        });
        let (r, w) = tokio::io::split(ours);
        Ok((Box::new(r), Box::new(w)))
    }
}

async fn start(behaviour: Behaviour, cfg: ClientConfig) -> (std::net::SocketAddr, Arc<FakeEdge>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let edge = Arc::new(FakeEdge {
        behaviour,
        seen: Mutex::new(Vec::new()),
        tunnels: Mutex::new(Vec::new()),
        heard: AtomicU64::new(0),
    });
    tokio::spawn(
        ClientProxy::new(Arc::new(cfg), edge.clone(), None)
            .serve(listener, CancellationToken::new()),
    );
    (addr, edge)
}

/// Reads one response (head and a Content-Length or chunked body) from `s`.
async fn read_response(s: &mut TcpStream) -> (u16, String, Vec<u8>) {
    let mut buf = Vec::new();
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let mut chunk = [0u8; 4096];
        let n = s.read(&mut chunk).await.unwrap();
        assert!(n > 0, "connection closed before the head");
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8(buf[..head_end].to_vec()).unwrap();
    let status: u16 = head[9..12].parse().unwrap();
    let mut rest = buf[head_end..].to_vec();
    let lower = head.to_ascii_lowercase();
    let body = if let Some(i) = lower.find("content-length: ") {
        let n: usize = lower[i + 16..]
            .split("\r\n")
            .next()
            .unwrap()
            .parse()
            .unwrap();
        while rest.len() < n {
            let mut chunk = [0u8; 4096];
            let k = s.read(&mut chunk).await.unwrap();
            assert!(k > 0);
            rest.extend_from_slice(&chunk[..k]);
        }
        rest.truncate(n);
        rest
    } else if lower.contains("transfer-encoding: chunked") {
        while !rest.ends_with(b"0\r\n\r\n") {
            let mut chunk = [0u8; 4096];
            let k = s.read(&mut chunk).await.unwrap();
            assert!(k > 0);
            rest.extend_from_slice(&chunk[..k]);
        }
        // Decode.
        let mut out = Vec::new();
        let mut p = &rest[..];
        loop {
            let line_end = p.windows(2).position(|w| w == b"\r\n").unwrap();
            let n =
                usize::from_str_radix(std::str::from_utf8(&p[..line_end]).unwrap(), 16).unwrap();
            p = &p[line_end + 2..];
            if n == 0 {
                break;
            }
            out.extend_from_slice(&p[..n]);
            p = &p[n + 2..];
        }
        out
    } else {
        let _ = s.read_to_end(&mut rest).await;
        rest
    };
    (status, head, body)
}

#[tokio::test]
async fn requests_reach_the_edge_cleaned_and_answers_come_back_framed() {
    let (addr, edge) = start(
        Behaviour::Echo { known_length: true },
        ClientConfig::default(),
    )
    .await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(
        b"GET http://example.com/a HTTP/1.1\r\nHost: example.com\r\nProxy-Connection: keep-alive\r\nProxy-Authorization: Basic eDp5\r\nAccept: text/html\r\n\r\n",
    )
    .await
    .unwrap();
    let (status, head, body) = read_response(&mut s).await;
    assert_eq!(status, 200);
    assert_eq!(body, b"GET http://example.com/a 0");
    assert!(
        !head.to_ascii_lowercase().contains("keep-alive: timeout"),
        "{head}"
    );
    // Same connection, a POST with a body.
    s.write_all(b"POST http://example.com/form HTTP/1.1\r\nHost: example.com\r\nContent-Length: 5\r\n\r\nhello")
        .await
        .unwrap();
    let (status, _, body) = read_response(&mut s).await;
    assert_eq!(status, 200);
    assert_eq!(body, b"POST http://example.com/form 5");
    let seen = edge.seen.lock().unwrap();
    assert_eq!(seen.len(), 2);
    assert!(seen[0].headers.get("proxy-authorization").is_none());
    assert!(seen[0].headers.get("proxy-connection").is_none());
    assert_eq!(seen[0].headers.get("accept").unwrap(), "text/html");
    assert_eq!(seen[1].body, Bytes::from_static(b"hello"));
}

#[tokio::test]
async fn an_answer_of_unknown_length_is_chunked() {
    let (addr, _) = start(
        Behaviour::Echo {
            known_length: false,
        },
        ClientConfig::default(),
    )
    .await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET http://example.com/b HTTP/1.1\r\nHost: example.com\r\n\r\n")
        .await
        .unwrap();
    let (status, head, body) = read_response(&mut s).await;
    assert_eq!(status, 200);
    assert!(
        head.to_ascii_lowercase()
            .contains("transfer-encoding: chunked"),
        "{head}"
    );
    assert_eq!(body, b"GET http://example.com/b 0");
}

#[tokio::test]
async fn connect_tunnels_bytes_through_the_edge_untouched() {
    let (addr, edge) = start(Behaviour::Refuse, ClientConfig::default()).await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n")
        .await
        .unwrap();
    let mut head = [0u8; 39];
    s.read_exact(&mut head).await.unwrap();
    assert_eq!(&head, b"HTTP/1.1 200 Connection Established\r\n\r\n");
    s.write_all(b"tls bytes").await.unwrap();
    let mut back = [0u8; 9];
    s.read_exact(&mut back).await.unwrap();
    assert_eq!(&back, b"TLS BYTES");
    assert_eq!(edge.tunnels.lock().unwrap()[0].0, "example.com:443");
}

#[tokio::test]
async fn the_pac_file_and_bad_requests() {
    let (addr, _) = start(Behaviour::Refuse, ClientConfig::default()).await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /proxy.pac HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let (status, head, body) = read_response(&mut s).await;
    assert_eq!(status, 200);
    assert!(head.contains("application/x-ns-proxy-autoconfig"));
    assert!(String::from_utf8(body)
        .unwrap()
        .contains(&format!("PROXY 127.0.0.1:{}", addr.port())));

    // The edge refuses: its status reaches the browser.
    s.write_all(b"GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n")
        .await
        .unwrap();
    let (status, _, body) = read_response(&mut s).await;
    assert_eq!(status, 403);
    assert!(String::from_utf8_lossy(&body).contains("not for you"));

    for bad in [
        &b"GET ftp://example.com/ HTTP/1.1\r\nHost: x\r\n\r\n"[..],
        b"GARBAGE\r\n\r\n",
        b"CONNECT example.com HTTP/1.1\r\n\r\n",
    ] {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(bad).await.unwrap();
        let (status, _, _) = read_response(&mut s).await;
        assert_eq!(status, 400, "{}", String::from_utf8_lossy(bad));
    }
}

/// A GET through a client whose `link-down-after` is 30 s, to an edge that behaves as
/// `behaviour`: the answer's status and body, and the virtual time it took.
async fn get_with_link_down_after_30s(behaviour: Behaviour) -> (u16, Vec<u8>, Duration) {
    let cfg = ClientConfig {
        link_down_after: Duration::from_secs(30),
        ..ClientConfig::default()
    };
    let (addr, _) = start(behaviour, cfg).await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    let t0 = tokio::time::Instant::now();
    s.write_all(b"GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n")
        .await
        .unwrap();
    let (status, _, body) = read_response(&mut s).await;
    (status, body, t0.elapsed())
}

#[tokio::test(start_paused = true)]
async fn a_silent_link_gives_a_clear_504_after_link_down_after() {
    let (status, body, took) = get_with_link_down_after_30s(Behaviour::Silent).await;
    assert_eq!(status, 504);
    assert!(String::from_utf8_lossy(&body).contains("link to the webpep edge is down"));
    // Virtual time: the page came at link-down-after, not before.
    assert!(took >= Duration::from_secs(30));
}

/// A link that keeps bringing packets is not down, however long one answer takes behind
/// the others (over a loaded EV-DO link, a minute): the browser gets it, not a 504.
#[tokio::test(start_paused = true)]
async fn a_busy_link_slow_to_answer_is_not_down() {
    let (status, body, took) = get_with_link_down_after_30s(Behaviour::SlowOnABusyLink).await;
    assert_eq!((status, body.as_slice()), (200, &b"late"[..]));
    assert!(took >= Duration::from_secs(60));
}

/// A browser connection with no request for `idle-timeout` is closed; one whose request head
/// does not complete within it gets a 408 and is closed. Both in virtual time.
#[tokio::test(start_paused = true)]
async fn idle_connections_and_trickled_heads_are_closed_after_idle_timeout() {
    let cfg = ClientConfig {
        idle_timeout: Duration::from_secs(120),
        ..ClientConfig::default()
    };
    let (addr, _) = start(Behaviour::Refuse, cfg).await;

    // A served request, then silence: the connection ends at idle-timeout, not before.
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /proxy.pac HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let (status, _, _) = read_response(&mut s).await;
    assert_eq!(status, 200);
    let t0 = tokio::time::Instant::now();
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).await.unwrap();
    assert!(rest.is_empty(), "{}", String::from_utf8_lossy(&rest));
    let waited = t0.elapsed();
    assert!(
        waited >= Duration::from_secs(120) && waited < Duration::from_secs(121),
        "{waited:?}"
    );

    // A head that trickles in, a line a minute: 408 when idle-timeout has passed.
    let mut s = TcpStream::connect(addr).await.unwrap();
    let t0 = tokio::time::Instant::now();
    s.write_all(b"GET /proxy.pac HTTP/1.1\r\n").await.unwrap();
    tokio::time::sleep(Duration::from_secs(60)).await;
    s.write_all(b"Host: x\r\n").await.unwrap();
    let (status, _, _) = read_response(&mut s).await;
    assert_eq!(status, 408);
    assert!(t0.elapsed() >= Duration::from_secs(120));
}
