//! Small loopback servers for the loader's tests: a fake DNS server (A records, optional delay
//! and truncation), an HTTP/1.x server that is also a forward proxy (absolute URIs and CONNECT),
//! and a TLS server speaking h2. Each records what it saw.
#![allow(dead_code)]

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use hickory_proto::op::{Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{RData, Record};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};

pub fn ip(n: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, n))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

// ---------------------------------------------------------------------------------------------
// DNS

#[derive(Clone, Default)]
pub struct DnsOptions {
    pub ttl: u32,
    pub delay: Duration,
    pub truncate_udp: bool,
}

pub struct FakeDns {
    pub addr: SocketAddr,
    pub udp_queries: Arc<AtomicUsize>,
    pub tcp_queries: Arc<AtomicUsize>,
    pub names: Arc<Mutex<Vec<String>>>,
}

fn dns_answer(
    query: &[u8],
    records: &HashMap<String, Ipv4Addr>,
    ttl: u32,
    tc: bool,
) -> Option<(String, Vec<u8>)> {
    let q = Message::from_vec(query).ok()?;
    let question = q.queries().first()?.clone();
    let name = question
        .name()
        .to_ascii()
        .trim_end_matches('.')
        .to_ascii_lowercase();
    let mut m = Message::new();
    m.set_id(q.id())
        .set_message_type(MessageType::Response)
        .set_op_code(OpCode::Query)
        .set_recursion_desired(true);
    m.add_query(question.clone());
    if tc {
        m.set_truncated(true);
    } else if let Some(ip) = records.get(&name) {
        m.add_answer(Record::from_rdata(
            question.name().clone(),
            ttl,
            RData::A(A(*ip)),
        ));
    } else {
        m.set_response_code(ResponseCode::NXDomain);
    }
    Some((name, m.to_vec().ok()?))
}

impl FakeDns {
    pub async fn start(records: &[(&str, IpAddr)], opts: DnsOptions) -> FakeDns {
        let map: HashMap<String, Ipv4Addr> = records
            .iter()
            .filter_map(|(n, ip)| match ip {
                IpAddr::V4(v4) => Some((n.to_ascii_lowercase(), *v4)),
                _ => None,
            })
            .collect();
        let map = Arc::new(map);
        // UDP and TCP on the same port.
        let (udp, tcp) = loop {
            let udp = UdpSocket::bind("127.0.0.1:0").await.expect("bind udp");
            let addr = udp.local_addr().expect("addr");
            if let Ok(tcp) = TcpListener::bind(addr).await {
                break (udp, tcp);
            }
        };
        let addr = udp.local_addr().expect("addr");
        let udp = Arc::new(udp);
        let udp_queries = Arc::new(AtomicUsize::new(0));
        let tcp_queries = Arc::new(AtomicUsize::new(0));
        let names = Arc::new(Mutex::new(Vec::new()));
        {
            let (map, opts, udp, count, names) = (
                map.clone(),
                opts.clone(),
                udp.clone(),
                udp_queries.clone(),
                names.clone(),
            );
            tokio::spawn(async move {
                let mut buf = vec![0u8; 1500];
                loop {
                    let Ok((n, from)) = udp.recv_from(&mut buf).await else {
                        return;
                    };
                    count.fetch_add(1, Ordering::SeqCst);
                    let Some((name, reply)) =
                        dns_answer(&buf[..n], &map, opts.ttl, opts.truncate_udp)
                    else {
                        continue;
                    };
                    lock(&names).push(name);
                    let (udp, delay) = (udp.clone(), opts.delay);
                    tokio::spawn(async move {
                        // The scripted resolver's behaviour: answers `delay` late.
                        tokio::time::sleep(delay).await;
                        let _ = udp.send_to(&reply, from).await;
                    });
                }
            });
        }
        {
            let (map, opts, count) = (map.clone(), opts.clone(), tcp_queries.clone());
            tokio::spawn(async move {
                loop {
                    let Ok((mut s, _)) = tcp.accept().await else {
                        return;
                    };
                    let (map, opts, count) = (map.clone(), opts.clone(), count.clone());
                    tokio::spawn(async move {
                        let mut lenb = [0u8; 2];
                        if s.read_exact(&mut lenb).await.is_err() {
                            return;
                        }
                        let mut q = vec![0u8; u16::from_be_bytes(lenb) as usize];
                        if s.read_exact(&mut q).await.is_err() {
                            return;
                        }
                        count.fetch_add(1, Ordering::SeqCst);
                        if let Some((_, reply)) = dns_answer(&q, &map, opts.ttl, false) {
                            // The scripted resolver's behaviour, over TCP too.
                            tokio::time::sleep(opts.delay).await;
                            let mut out = (reply.len() as u16).to_be_bytes().to_vec();
                            out.extend_from_slice(&reply);
                            let _ = s.write_all(&out).await;
                        }
                    });
                }
            });
        }
        FakeDns {
            addr,
            udp_queries,
            tcp_queries,
            names,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Content

#[derive(Clone, Debug)]
pub struct Route {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub chunked: bool,
    pub delay: Duration,
    pub etag: Option<String>,
    /// Send the first half of the response, wait this long, then the rest.
    pub split: Option<Duration>,
}

impl Route {
    pub fn ok(ct: &str, body: impl Into<Vec<u8>>) -> Route {
        Route {
            status: 200,
            headers: vec![("Content-Type".into(), ct.into())],
            body: body.into(),
            chunked: false,
            delay: Duration::ZERO,
            etag: None,
            split: None,
        }
    }
    pub fn html(body: impl Into<Vec<u8>>) -> Route {
        Route::ok("text/html", body)
    }
    pub fn css(body: impl Into<Vec<u8>>) -> Route {
        Route::ok("text/css", body)
    }
    pub fn image(len: usize) -> Route {
        Route::ok("image/gif", vec![b'G'; len])
    }
    pub fn redirect(status: u16, to: &str) -> Route {
        Route {
            status,
            headers: vec![("Location".into(), to.into())],
            body: Vec::new(),
            chunked: false,
            delay: Duration::ZERO,
            etag: None,
            split: None,
        }
    }
    pub fn status(status: u16) -> Route {
        Route {
            status,
            headers: vec![("Content-Type".into(), "text/plain".into())],
            body: b"nope".to_vec(),
            chunked: false,
            delay: Duration::ZERO,
            etag: None,
            split: None,
        }
    }
    pub fn delayed(mut self, d: Duration) -> Route {
        self.delay = d;
        self
    }
    pub fn chunked(mut self) -> Route {
        self.chunked = true;
        self
    }
    pub fn split(mut self, pause: Duration) -> Route {
        self.split = Some(pause);
        self
    }
    pub fn with_etag(mut self, e: &str) -> Route {
        self.etag = Some(e.into());
        self
    }
}

/// host (no port) + path → route, shared by every server of a test.
#[derive(Clone, Default)]
pub struct Routes(pub Arc<Mutex<HashMap<String, Route>>>);

impl Routes {
    pub fn add(&self, host: &str, path: &str, r: Route) {
        lock(&self.0).insert(format!("{}{}", host.to_ascii_lowercase(), path), r);
    }
    fn get(&self, host: &str, path: &str) -> Option<Route> {
        lock(&self.0)
            .get(&format!("{}{}", host.to_ascii_lowercase(), path))
            .cloned()
    }
}

#[derive(Clone, Debug)]
pub struct ReqLog {
    pub conn: usize,
    pub method: String,
    pub target: String,
    pub host: String,
    pub path: String,
    pub http10: bool,
    pub headers: Vec<(String, String)>,
    /// Requests received on the connection and not yet answered when this one was parsed.
    pub pending: usize,
}

#[derive(Default, Debug)]
pub struct Stats {
    pub connections: usize,
    pub active: usize,
    pub max_active: usize,
    pub requests: Vec<ReqLog>,
    pub connects: Vec<String>,
}

impl Stats {
    pub fn max_pipelined(&self) -> usize {
        self.requests.iter().map(|r| r.pending).max().unwrap_or(0)
    }
    pub fn paths(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .requests
            .iter()
            .map(|r| format!("{}{}", r.host, r.path))
            .collect();
        v.sort();
        v
    }
}

#[derive(Clone, Default)]
pub struct ServerOptions {
    /// Close the connection after this many responses (the "pre-emptive FIN").
    pub close_after: Option<usize>,
    /// Act as a forward proxy: CONNECT authority → tunnel to this address.
    pub connect_map: Option<HashMap<String, SocketAddr>>,
}

pub struct HttpServer {
    pub addr: SocketAddr,
    pub stats: Arc<Mutex<Stats>>,
}

impl HttpServer {
    pub async fn start(ip: IpAddr, routes: Routes, opts: ServerOptions) -> HttpServer {
        let listener = TcpListener::bind(SocketAddr::new(ip, 0))
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let stats = Arc::new(Mutex::new(Stats::default()));
        let st = stats.clone();
        tokio::spawn(async move {
            loop {
                let Ok((s, _)) = listener.accept().await else {
                    return;
                };
                let (routes, st, opts) = (routes.clone(), st.clone(), opts.clone());
                let id = {
                    let mut g = lock(&st);
                    g.connections += 1;
                    g.active += 1;
                    g.max_active = g.max_active.max(g.active);
                    g.connections
                };
                tokio::spawn(async move {
                    serve_conn(s, id, routes, st.clone(), opts).await;
                    lock(&st).active -= 1;
                });
            }
        });
        HttpServer { addr, stats }
    }

    pub fn stats(&self) -> std::sync::MutexGuard<'_, Stats> {
        lock(&self.stats)
    }
}

struct Parsed {
    method: String,
    target: String,
    http10: bool,
    headers: Vec<(String, String)>,
}

fn parse_requests(buf: &mut BytesMut, out: &mut Vec<Parsed>) -> bool {
    loop {
        let mut hs = [httparse::EMPTY_HEADER; 64];
        let mut req = httparse::Request::new(&mut hs);
        match req.parse(buf) {
            Ok(httparse::Status::Complete(n)) => {
                let p = Parsed {
                    method: req.method.unwrap_or("").to_string(),
                    target: req.path.unwrap_or("").to_string(),
                    http10: req.version == Some(0),
                    headers: req
                        .headers
                        .iter()
                        .map(|h| {
                            (
                                h.name.to_string(),
                                String::from_utf8_lossy(h.value).into_owned(),
                            )
                        })
                        .collect(),
                };
                buf.advance(n);
                out.push(p);
            }
            Ok(httparse::Status::Partial) => return true,
            Err(_) => return false,
        }
    }
}

fn hdr<'a>(h: &'a [(String, String)], n: &str) -> Option<&'a str> {
    h.iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(n))
        .map(|(_, v)| v.as_str())
}

async fn serve_conn<S>(
    mut s: S,
    id: usize,
    routes: Routes,
    st: Arc<Mutex<Stats>>,
    opts: ServerOptions,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let mut buf = BytesMut::with_capacity(8192);
    let mut pending: std::collections::VecDeque<Parsed> = Default::default();
    let mut answered = 0usize;
    loop {
        // Take every complete request already here.
        let mut fresh = Vec::new();
        if !parse_requests(&mut buf, &mut fresh) {
            return;
        }
        for p in fresh {
            pending.push_back(p);
            let (host, path) = split_target(
                &pending.back().expect("just pushed").target,
                &pending.back().expect("just pushed").headers,
            );
            let b = pending.back().expect("just pushed");
            lock(&st).requests.push(ReqLog {
                conn: id,
                method: b.method.clone(),
                target: b.target.clone(),
                host,
                path,
                http10: b.http10,
                headers: b.headers.clone(),
                pending: pending.len(),
            });
        }
        let Some(req) = pending.pop_front() else {
            let mut tmp = [0u8; 8192];
            match s.read(&mut tmp).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&tmp[..n]),
            }
            continue;
        };
        if req.method == "CONNECT" {
            if let Some(map) = &opts.connect_map {
                lock(&st).connects.push(req.target.clone());
                let Some(to) = map.get(&req.target).copied() else {
                    let _ = s
                        .write_all(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
                        .await;
                    return;
                };
                let Ok(mut up) = TcpStream::connect(to).await else {
                    let _ = s
                        .write_all(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
                        .await;
                    return;
                };
                if s.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    .await
                    .is_err()
                {
                    return;
                }
                let _ = tokio::io::copy_bidirectional(&mut s, &mut up).await;
                return;
            }
        }
        let (host, path) = split_target(&req.target, &req.headers);
        let route = routes
            .get(&host, &path)
            .unwrap_or_else(|| Route::status(404));
        if !route.delay.is_zero() {
            // The scripted origin's behaviour: this route answers late.
            tokio::time::sleep(route.delay).await;
        }
        // Requests that arrived meanwhile count as pipelined.
        let mut tmp = [0u8; 8192];
        while let Some(Ok(n)) = futures_util::FutureExt::now_or_never(s.read(&mut tmp)) {
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&tmp[..n]);
        }
        let mut more = Vec::new();
        parse_requests(&mut buf, &mut more);
        for p in more {
            let (h, pa) = split_target(&p.target, &p.headers);
            lock(&st).requests.push(ReqLog {
                conn: id,
                method: p.method.clone(),
                target: p.target.clone(),
                host: h,
                path: pa,
                http10: p.http10,
                headers: p.headers.clone(),
                pending: pending.len() + 2,
            });
            pending.push_back(p);
        }
        answered += 1;
        let close = req.http10
            || hdr(&req.headers, "connection").is_some_and(|v| v.eq_ignore_ascii_case("close"))
            || opts.close_after.is_some_and(|n| answered >= n);
        let not_modified = route
            .etag
            .as_deref()
            .is_some_and(|e| hdr(&req.headers, "if-none-match") == Some(e));
        let mut head = if not_modified {
            "HTTP/1.1 304 Not Modified\r\n".to_string()
        } else {
            format!("HTTP/1.1 {} X\r\n", route.status)
        };
        if let Some(e) = &route.etag {
            head.push_str(&format!(
                "ETag: {e}\r\nLast-Modified: Mon, 01 Jan 2024 00:00:00 GMT\r\n"
            ));
        }
        for (n, v) in &route.headers {
            head.push_str(&format!("{n}: {v}\r\n"));
        }
        if close {
            head.push_str("Connection: close\r\n");
        }
        let mut out = Vec::new();
        if not_modified {
            head.push_str("\r\n");
            out.extend_from_slice(head.as_bytes());
        } else if route.chunked {
            head.push_str("Transfer-Encoding: chunked\r\n\r\n");
            out.extend_from_slice(head.as_bytes());
            for c in route.body.chunks(37) {
                out.extend_from_slice(format!("{:x};x=y\r\n", c.len()).as_bytes());
                out.extend_from_slice(c);
                out.extend_from_slice(b"\r\n");
            }
            out.extend_from_slice(b"0\r\n\r\n");
        } else {
            head.push_str(&format!("Content-Length: {}\r\n\r\n", route.body.len()));
            out.extend_from_slice(head.as_bytes());
            out.extend_from_slice(&route.body);
        }
        let cut = if route.split.is_some() {
            out.len() / 2
        } else {
            out.len()
        };
        if s.write_all(&out[..cut]).await.is_err() || s.flush().await.is_err() {
            return;
        }
        if let Some(pause) = route.split {
            // The scripted origin's behaviour: the response in two parts, apart.
            tokio::time::sleep(pause).await;
            if s.write_all(&out[cut..]).await.is_err() {
                return;
            }
        }
        if close {
            let _ = s.shutdown().await;
            return;
        }
    }
}

fn split_target(target: &str, headers: &[(String, String)]) -> (String, String) {
    if let Some(rest) = target
        .strip_prefix("http://")
        .or_else(|| target.strip_prefix("https://"))
    {
        let (auth, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let host = auth.split(':').next().unwrap_or("").to_ascii_lowercase();
        return (host, path.to_string());
    }
    let host = hdr(headers, "host")
        .unwrap_or("")
        .split(':')
        .next()
        .unwrap_or("")
        .to_ascii_lowercase();
    (host, target.to_string())
}

/// An address on which nothing listens (connections are refused).
pub async fn refused_addr(ip: IpAddr) -> SocketAddr {
    let l = TcpListener::bind(SocketAddr::new(ip, 0))
        .await
        .expect("bind");
    let a = l.local_addr().expect("addr");
    drop(l);
    a
}

// ---------------------------------------------------------------------------------------------
// TLS + h2

pub struct TestCa {
    pub ca_pem: String,
    pub server_config: Arc<rustls::ServerConfig>,
}

pub fn make_ca(names: &[&str]) -> TestCa {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
    let ca_key = KeyPair::generate().expect("ca key");
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "webpep test CA");
    let ca_cert = ca_params.self_signed(&ca_key).expect("ca cert");
    let leaf_key = KeyPair::generate().expect("leaf key");
    let leaf_params =
        CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
            .expect("params");
    let leaf = leaf_params
        .signed_by(&leaf_key, &ca_cert, &ca_key)
        .expect("leaf");
    let key = rustls_pki_types::PrivateKeyDer::Pkcs8(leaf_key.serialize_der().into());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(vec![leaf.der().clone(), ca_cert.der().clone()], key)
        .expect("server config");
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    TestCa {
        ca_pem: ca_cert.pem(),
        server_config: Arc::new(cfg),
    }
}

pub struct H2Server {
    pub addr: SocketAddr,
    pub stats: Arc<Mutex<Stats>>,
}

impl H2Server {
    pub async fn start(ip: IpAddr, routes: Routes, tls: Arc<rustls::ServerConfig>) -> H2Server {
        let listener = TcpListener::bind(SocketAddr::new(ip, 0))
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let stats = Arc::new(Mutex::new(Stats::default()));
        let st = stats.clone();
        let acceptor = tokio_rustls::TlsAcceptor::from(tls);
        tokio::spawn(async move {
            loop {
                let Ok((s, _)) = listener.accept().await else {
                    return;
                };
                let (routes, st, acceptor) = (routes.clone(), st.clone(), acceptor.clone());
                let id = {
                    let mut g = lock(&st);
                    g.connections += 1;
                    g.active += 1;
                    g.max_active = g.max_active.max(g.active);
                    g.connections
                };
                tokio::spawn(async move {
                    if let Ok(tls) = acceptor.accept(s).await {
                        if tls.get_ref().1.alpn_protocol() == Some(b"h2") {
                            serve_h2(tls, id, routes, st.clone()).await;
                        } else {
                            serve_conn(tls, id, routes, st.clone(), ServerOptions::default()).await;
                        }
                    }
                    lock(&st).active -= 1;
                });
            }
        });
        H2Server { addr, stats }
    }

    pub fn stats(&self) -> std::sync::MutexGuard<'_, Stats> {
        lock(&self.stats)
    }
}

async fn serve_h2(
    tls: tokio_rustls::server::TlsStream<TcpStream>,
    id: usize,
    routes: Routes,
    st: Arc<Mutex<Stats>>,
) {
    let Ok(mut conn) = h2::server::handshake(tls).await else {
        return;
    };
    while let Some(Ok((req, mut respond))) = conn.accept().await {
        let host = req.uri().host().unwrap_or("").to_ascii_lowercase();
        let path = req
            .uri()
            .path_and_query()
            .map(|p| p.as_str().to_string())
            .unwrap_or_else(|| "/".into());
        let headers: Vec<(String, String)> = req
            .headers()
            .iter()
            .map(|(n, v)| {
                (
                    n.as_str().to_string(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect();
        lock(&st).requests.push(ReqLog {
            conn: id,
            method: req.method().to_string(),
            target: req.uri().to_string(),
            host: host.clone(),
            path: path.clone(),
            http10: false,
            headers,
            pending: 0,
        });
        let route = routes
            .get(&host, &path)
            .unwrap_or_else(|| Route::status(404));
        let not_modified = route.etag.as_deref().is_some_and(|e| {
            req.headers()
                .get("if-none-match")
                .and_then(|v| v.to_str().ok())
                == Some(e)
        });
        tokio::spawn(async move {
            // The scripted origin's behaviour (HTTP/2): this route answers late.
            tokio::time::sleep(route.delay).await;
            if not_modified {
                let Ok(resp) = http::Response::builder().status(304).body(()) else {
                    return;
                };
                let _ = respond.send_response(resp, true);
                return;
            }
            let mut b = http::Response::builder().status(route.status);
            if let Some(e) = &route.etag {
                b = b.header("etag", e.as_str());
            }
            for (n, v) in &route.headers {
                b = b.header(n.as_str(), v.as_str());
            }
            let Ok(resp) = b.body(()) else { return };
            let Ok(mut send) = respond.send_response(resp, route.body.is_empty()) else {
                return;
            };
            if !route.body.is_empty() {
                let _ = send.send_data(Bytes::from(route.body.clone()), true);
            }
        });
    }
}

// ---------------------------------------------------------------------------------------------
// Checks shared by the tests

pub fn check_page(page: &webpep_loader::PageLoad) {
    assert_eq!(
        page.breakdown.total(),
        page.plt,
        "breakdown must sum to PLT: {:?}",
        page.breakdown
    );
    for o in &page.objects {
        assert!(o.end >= o.start, "{o:?}");
        assert!(o.end <= page.plt, "object ends after PLT: {o:?}");
        let t = o.timings.total();
        let span = o.end - o.start;
        let diff = t.abs_diff(span);
        assert!(
            diff <= Duration::from_millis(1),
            "timings {t:?} vs span {span:?} for {}",
            o.url
        );
    }
    let har = page.to_har("page_1");
    check_har(&har);
}

pub fn check_har(har: &serde_json::Value) {
    let log = &har["log"];
    assert_eq!(log["version"], "1.2");
    assert_eq!(log["creator"]["name"], "webpep");
    assert!(log["creator"]["version"].is_string());
    let pages = log["pages"].as_array().expect("pages");
    assert_eq!(pages.len(), 1);
    assert!(pages[0]["startedDateTime"]
        .as_str()
        .expect("date")
        .ends_with('Z'));
    assert!(pages[0]["pageTimings"]["onLoad"].as_f64().expect("onLoad") >= 0.0);
    for e in log["entries"].as_array().expect("entries") {
        assert_eq!(e["pageref"], pages[0]["id"]);
        assert!(e["startedDateTime"].is_string());
        let time = e["time"].as_f64().expect("time");
        let t = &e["timings"];
        let mut sum = 0.0;
        for k in ["blocked", "dns", "connect", "send", "wait", "receive"] {
            let v = t[k].as_f64().unwrap_or_else(|| panic!("timing {k}"));
            assert!(
                v >= 0.0 || (v == -1.0 && !matches!(k, "send" | "wait" | "receive")),
                "{k}={v}"
            );
            if v > 0.0 {
                sum += v;
            }
        }
        assert!((sum - time).abs() < 0.01, "time {time} != sum {sum}");
        let ssl = t["ssl"].as_f64().expect("ssl");
        if ssl >= 0.0 {
            assert!(ssl <= t["connect"].as_f64().expect("connect") + 0.001);
        }
        for part in ["request", "response"] {
            let r = &e[part];
            assert!(r["httpVersion"].is_string());
            assert!(r["cookies"].is_array());
            assert!(r["headers"].is_array());
            assert!(r["headersSize"].is_i64());
            assert!(r["bodySize"].is_i64());
        }
        assert!(e["request"]["method"].is_string());
        assert!(e["request"]["url"].is_string());
        assert!(e["request"]["queryString"].is_array());
        assert!(e["response"]["status"].is_u64());
        assert!(e["response"]["statusText"].is_string());
        assert!(e["response"]["content"]["size"].is_u64());
        assert!(e["response"]["content"]["mimeType"].is_string());
        assert!(e["response"]["redirectURL"].is_string());
        assert!(e["cache"].is_object());
    }
}
