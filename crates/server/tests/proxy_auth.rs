//! Proxy authentication (`[auth]`, DESIGN §9): 407 with a Basic challenge for explicit and
//! CONNECT requests without valid credentials, credentials never forwarded, transparent
//! requests refused unless allowed by network, repeated failures from one address throttled,
//! a bad users file stops the start. Loopback only; every step under a timeout of a few
//! seconds.

mod common;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use base64::Engine as _;
use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use webpep_server::auth::hash_password_with;
use webpep_server::config::TransparentAuth;
use webpep_server::{Server, ServerConfig};

/// Low for speed; generated hashes use the default (600,000).
const TEST_ITERATIONS: u32 = 1000;
const CHALLENGE: &str = "Basic realm=\"webpep\", charset=\"UTF-8\"";

/// A users file with alice (password `open: sesame`, colons and a space) and bob.
fn users_file() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("users");
    let text = format!(
        "# webpep users\n\nalice:{}\nbob:{}\n",
        hash_password_with("open: sesame", b"alice-salt-16byt", TEST_ITERATIONS),
        hash_password_with("bobpw", b"bob-salt-16bytes", TEST_ITERATIONS),
    );
    std::fs::write(&path, text).unwrap();
    (dir, path)
}

fn auth_config(path: PathBuf) -> ServerConfig {
    let mut cfg = test_config();
    cfg.auth.users_file = Some(path);
    cfg
}

/// A started proxy with authentication on (the users file is read at start).
async fn auth_proxy(transparent: TransparentAuth) -> Proxy {
    let (_dir, path) = users_file();
    let mut cfg = auth_config(path);
    cfg.auth.transparent = transparent;
    step(start_proxy(cfg)).await
}

fn basic(user_pass: &str) -> String {
    format!(
        "Proxy-Authorization: Basic {}\r\n",
        base64::engine::general_purpose::STANDARD.encode(user_pass)
    )
}

fn metric(p: &Proxy, line_prefix: &str) -> u64 {
    p.server
        .metrics_text()
        .lines()
        .find_map(|l| {
            l.strip_prefix(line_prefix)
                .map(|v| v.trim().parse().unwrap())
        })
        .unwrap_or_else(|| panic!("metric {line_prefix} present"))
}

fn failures(p: &Proxy, reason: &str) -> u64 {
    metric(
        p,
        &format!("webpep_auth_failures_total{{reason=\"{reason}\"}} "),
    )
}

#[tokio::test]
async fn without_credentials_407_with_challenge_and_the_connection_serves_the_retry() {
    let o = step(Origin::start(hello())).await;
    let p = auth_proxy(TransparentAuth::Network).await;
    let url = format!("http://{}/page", o.addr);
    let mut c = step(Client::connect(p.addr)).await;
    let r = step(c.get(&url, "")).await;
    assert_eq!(r.status, 407, "{}", r.text());
    assert_eq!(r.header("proxy-authenticate"), Some(CHALLENGE));
    assert!(r.text().contains("no Proxy-Authorization"), "{}", r.text());
    assert_ne!(r.header("connection"), Some("close"));
    assert_eq!(
        o.requests(),
        0,
        "nothing reaches the origin unauthenticated"
    );
    // As a browser does: the same request again on the same connection, with credentials.
    let r = step(c.get(&url, &basic("alice:open: sesame"))).await;
    assert_eq!((r.status, r.text().as_str()), (200, "hello /page"));
    assert_eq!(failures(&p, "missing"), 1);
}

#[tokio::test]
async fn right_credentials_reach_the_origin_without_proxy_authorization() {
    let o = step(Origin::start(hello())).await;
    let p = auth_proxy(TransparentAuth::Network).await;
    let mut c = step(Client::connect(p.addr)).await;
    for i in 0..5 {
        let r = step(c.get(
            &format!("http://{}/o{i}", o.addr),
            &basic("alice:open: sesame"),
        ))
        .await;
        assert_eq!((r.status, r.text()), (200, format!("hello /o{i}")));
        let seen = o.last().unwrap();
        assert!(seen.header("proxy-authorization").is_none(), "{seen:?}");
        assert!(seen.header("proxy-authenticate").is_none());
    }
    // Another connection, another user.
    let r = step(get_once(
        p.addr,
        &format!("http://{}/b", o.addr),
        &basic("bob:bobpw"),
    ))
    .await;
    assert_eq!(r.status, 200);
    assert!(o
        .log
        .lock()
        .unwrap()
        .iter()
        .all(|r| r.header("proxy-authorization").is_none()));
    // One slow hash per user: the other requests were answered from the cache.
    assert_eq!(metric(&p, "webpep_auth_verifications_total "), 2);
    for reason in [
        "missing",
        "scheme",
        "malformed",
        "invalid",
        "transparent",
        "throttled",
    ] {
        assert_eq!(failures(&p, reason), 0, "{reason}");
    }
}

#[tokio::test]
async fn wrong_password_unknown_user_and_bad_headers_get_407() {
    let o = step(Origin::start(hello())).await;
    let p = auth_proxy(TransparentAuth::Network).await;
    let url = format!("http://{}/x", o.addr);
    let mut c = step(Client::connect(p.addr)).await;
    let wrong = step(c.get(&url, &basic("alice:open:sesame"))).await;
    let unknown = step(c.get(&url, &basic("mallory:open: sesame"))).await;
    for r in [&wrong, &unknown] {
        assert_eq!(r.status, 407);
        assert_eq!(r.header("proxy-authenticate"), Some(CHALLENGE));
        assert!(
            r.text().contains("unknown user or wrong password"),
            "{}",
            r.text()
        );
    }
    assert_eq!(wrong.body, unknown.body, "which of the two is not revealed");
    let r = step(c.get(&url, "Proxy-Authorization: Bearer abc\r\n")).await;
    assert_eq!(r.status, 407);
    assert!(r.text().contains("Basic scheme"), "{}", r.text());
    let r = step(c.get(&url, "Proxy-Authorization: Basic %%%\r\n")).await;
    assert_eq!(r.status, 407);
    assert!(r.text().contains("malformed"), "{}", r.text());
    // Origin credentials (Authorization) are not proxy credentials.
    let r = step(c.get(&url, "Authorization: Basic YWxpY2U6eA==\r\n")).await;
    assert_eq!(r.status, 407);
    // Still the same connection, still usable.
    let r = step(c.get(&url, &basic("alice:open: sesame"))).await;
    assert_eq!(r.status, 200);
    assert_eq!(o.requests(), 1);
    assert_eq!(failures(&p, "invalid"), 2);
    assert_eq!(failures(&p, "scheme"), 1);
    assert_eq!(failures(&p, "malformed"), 1);
    assert_eq!(failures(&p, "missing"), 1);
}

#[tokio::test]
async fn connect_without_credentials_gets_407_and_close_and_with_them_a_tunnel() {
    let eaddr = step(echo_server()).await;
    let (_dir, path) = users_file();
    let mut cfg = auth_config(path);
    cfg.acl.connect_ports = vec![eaddr.port()];
    let p = step(start_proxy(cfg)).await;

    let mut c = step(Client::connect(p.addr)).await;
    step(c.send(&format!(
        "CONNECT {eaddr} HTTP/1.1\r\nHost: {eaddr}\r\n\r\n"
    )))
    .await;
    let r = step(c.read(false)).await.unwrap();
    assert_eq!(r.status, 407);
    assert_eq!(r.header("proxy-authenticate"), Some(CHALLENGE));
    assert_eq!(r.header("connection"), Some("close"));
    assert!(step(c.closed()).await);

    let mut c = step(Client::connect(p.addr)).await;
    step(c.send(&format!(
        "CONNECT {eaddr} HTTP/1.1\r\nHost: {eaddr}\r\n{}\r\n",
        basic("alice:wrong")
    )))
    .await;
    assert_eq!(step(c.read(false)).await.unwrap().status, 407);
    assert!(step(c.closed()).await);

    let mut c = step(Client::connect(p.addr)).await;
    step(c.send(&format!(
        "CONNECT {eaddr} HTTP/1.1\r\nHost: {eaddr}\r\n{}\r\n",
        basic("bob:bobpw")
    )))
    .await;
    assert_eq!(step(c.read(true)).await.unwrap().status, 200);
    step(c.s.write_all(b"ping")).await.unwrap();
    let mut b = [0u8; 4];
    step(c.s.read_exact(&mut b)).await.unwrap();
    assert_eq!(&b, b"ping");
    assert_eq!(failures(&p, "missing"), 1);
    assert_eq!(failures(&p, "invalid"), 1);
}

/// Issue 30: with a users file and no `transparent` key, a transparent request (origin-form,
/// `Host` naming a foreign origin) used to get 200 without credentials.
#[tokio::test]
async fn transparent_requests_are_refused_by_default() {
    let o = step(Origin::start(hello())).await;
    let (_dir, path) = users_file();
    let p = step(start_proxy(auth_config(path))).await;
    let mut c = step(Client::connect(p.addr)).await;
    step(c.send(&format!("GET /t HTTP/1.1\r\nHost: {}\r\n\r\n", o.addr))).await;
    let r = step(c.read(false)).await.unwrap();
    assert_eq!(r.status, 403, "{}", r.text());
    assert!(r.text().contains("transparent"), "{}", r.text());
    assert_eq!(
        o.requests(),
        0,
        "nothing reaches the origin unauthenticated"
    );
    assert_eq!(failures(&p, "transparent"), 1);
    // Explicit requests with credentials are served as before.
    let r = step(c.get(
        &format!("http://{}/e", o.addr),
        &basic("alice:open: sesame"),
    ))
    .await;
    assert_eq!((r.status, r.text().as_str()), (200, "hello /e"));
}

#[tokio::test]
async fn transparent_requests_are_allowed_by_network_when_chosen() {
    let o = step(Origin::start(hello())).await;
    let p = auth_proxy(TransparentAuth::Network).await;
    let mut c = step(Client::connect(p.addr)).await;
    step(c.send(&format!("GET /t HTTP/1.1\r\nHost: {}\r\n\r\n", o.addr))).await;
    let r = step(c.read(false)).await.unwrap();
    assert_eq!((r.status, r.text().as_str()), (200, "hello /t"));
    // An explicit request on the same connection still needs credentials.
    let r = step(c.get(&format!("http://{}/e", o.addr), "")).await;
    assert_eq!(r.status, 407);
}

#[tokio::test]
async fn transparent_requests_are_refused_with_refuse() {
    let o = step(Origin::start(hello())).await;
    let p = auth_proxy(TransparentAuth::Refuse).await;
    let mut c = step(Client::connect(p.addr)).await;
    // Credentials do not help: a browser would not send them here.
    step(c.send(&format!(
        "GET /t HTTP/1.1\r\nHost: {}\r\n{}\r\n",
        o.addr,
        basic("alice:open: sesame")
    )))
    .await;
    let r = step(c.read(false)).await.unwrap();
    assert_eq!(r.status, 403, "{}", r.text());
    assert!(r.header("proxy-authenticate").is_none());
    assert!(r.text().contains("transparent"), "{}", r.text());
    assert_eq!(o.requests(), 0);
    // The connection stays usable for explicit requests with credentials.
    let r = step(c.get(
        &format!("http://{}/e", o.addr),
        &basic("alice:open: sesame"),
    ))
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(failures(&p, "transparent"), 1);
}

#[tokio::test]
async fn metrics_endpoint_needs_no_credentials() {
    let p = auth_proxy(TransparentAuth::Refuse).await;
    let mut c = step(Client::connect(p.admin)).await;
    step(c.send("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")).await;
    let r = step(c.read(false)).await.unwrap();
    assert_eq!(r.status, 200);
    assert!(
        r.text()
            .contains("webpep_auth_failures_total{reason=\"missing\"} 0"),
        "{}",
        r.text()
    );
}

#[tokio::test]
async fn without_auth_section_no_credentials_are_needed() {
    let o = step(Origin::start(hello())).await;
    let p = step(start_proxy(test_config())).await;
    let r = step(get_once(p.addr, &format!("http://{}/n", o.addr), "")).await;
    assert_eq!(r.status, 200);
    assert!(r.header("proxy-authenticate").is_none());
}

#[test]
fn a_bad_users_file_stops_the_start_naming_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-users");
    let e = Server::new(auth_config(missing.clone()))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("auth.users-file") && e.contains(&*missing.display().to_string()),
        "{e}"
    );

    let path = dir.path().join("users");
    let good = hash_password_with("pw", b"saltsaltsaltsalt", TEST_ITERATIONS);
    for (text, line) in [
        (format!("# ok\nalice:{good}\nbob:hunter2\n"), "line 3"),
        (format!("alice {good}\n"), "line 1"),
        (format!("\n\nalice:{good}\nalice:{good}\n"), "line 4"),
    ] {
        std::fs::write(&path, &text).unwrap();
        let e = Server::new(auth_config(path.clone()))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&*path.display().to_string()) && e.contains(line),
            "{text:?}: {e}"
        );
        assert!(!e.contains("hunter2"), "{e}");
    }
}

/// One request from the loopback address `source` on a fresh connection that closes after
/// it; the status, None when `source` cannot be bound here.
async fn status_from(source: &str, proxy: SocketAddr, url: &str, extra: &str) -> Option<u16> {
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    if let Err(e) = sock.bind(SocketAddr::new(source.parse().unwrap(), 0)) {
        eprintln!("cannot bind {source} ({e}): that part is skipped");
        return None;
    }
    let mut s = sock.connect(proxy).await.unwrap();
    let req = format!("GET {url} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{extra}\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    s.read_to_end(&mut got).await.unwrap();
    let text = String::from_utf8_lossy(&got);
    Some(
        text.split(' ')
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0),
    )
}

/// Issue 30: password guessing was unthrottled. With the default `[auth]`, the fifth wrong
/// password in a row from an address makes it wait a second (`failure-backoff`) during which
/// even the right password gets 429 without a hash being computed; another address is not
/// affected; once the wait is over the right password works and forgets the failures.
#[tokio::test]
async fn repeated_wrong_passwords_make_the_address_wait() {
    let backoff = Duration::from_secs(1);
    let o = step(Origin::start(hello())).await;
    let (_dir, path) = users_file();
    let p = step(start_proxy(auth_config(path))).await;
    let url = format!("http://{}/x", o.addr);
    let mut c = step(Client::connect(p.addr)).await;
    for _ in 0..4 {
        assert_eq!(step(c.get(&url, &basic("alice:guess"))).await.status, 407);
    }
    // The wait begins after the fifth failure, so no earlier than now.
    let fifth = Instant::now();
    let r = step(c.get(&url, &basic("alice:guess"))).await;
    assert_eq!(r.status, 407, "the fifth guess is still checked");
    assert_eq!(metric(&p, "webpep_auth_verifications_total "), 5);

    let r = step(c.get(&url, &basic("alice:open: sesame"))).await;
    if r.status != 429 {
        // Only a machine too slow to send one request within the backoff gets here; the
        // right password must not have been accepted before the backoff passed.
        assert!(
            fifth.elapsed() >= backoff,
            "accepted during the backoff: {} {}",
            r.status,
            r.text()
        );
        eprintln!("the backoff passed before the next request: throttle not observed");
        return;
    }
    assert_eq!(r.header("retry-after"), Some("1"));
    assert!(r.header("proxy-authenticate").is_none());
    assert_ne!(
        r.header("connection"),
        Some("close"),
        "the connection is kept"
    );
    assert!(r.text().contains("too many failed logins"), "{}", r.text());
    assert_eq!(o.requests(), 0);
    assert_eq!(failures(&p, "throttled"), 1);
    assert_eq!(failures(&p, "invalid"), 5);
    assert_eq!(
        metric(&p, "webpep_auth_verifications_total "),
        5,
        "no hash while waiting"
    );

    // Another client address logs in and is refused as usual, with its password checked.
    if let Some(status) = step(status_from(
        "127.0.0.2",
        p.addr,
        &url,
        &basic("alice:open: sesame"),
    ))
    .await
    {
        assert_eq!(status, 200);
        let wrong = step(status_from("127.0.0.2", p.addr, &url, &basic("alice:x"))).await;
        assert_eq!(wrong, Some(407));
    }

    // The right password works again once the wait is over (never before it).
    let ok = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let r = c.get(&url, &basic("alice:open: sesame")).await;
            if r.status != 429 {
                return r;
            }
        }
    })
    .await
    .expect("the wait ends");
    assert_eq!((ok.status, ok.text().as_str()), (200, "hello /x"));
    assert!(fifth.elapsed() >= backoff, "served during the backoff");
    // The success forgot the failures: a typo is a 407 again, not a wait.
    assert_eq!(step(c.get(&url, &basic("alice:typo"))).await.status, 407);
    assert_eq!(
        step(c.get(&url, &basic("alice:open: sesame"))).await.status,
        200
    );
}

/// `max-failures = 0` turns the throttle off.
#[tokio::test]
async fn the_throttle_can_be_turned_off() {
    let o = step(Origin::start(hello())).await;
    let (_dir, path) = users_file();
    let mut cfg = auth_config(path);
    cfg.auth.max_failures = 0;
    let p = step(start_proxy(cfg)).await;
    let url = format!("http://{}/x", o.addr);
    let mut c = step(Client::connect(p.addr)).await;
    for _ in 0..8 {
        assert_eq!(step(c.get(&url, &basic("alice:guess"))).await.status, 407);
    }
    let r = step(c.get(&url, &basic("alice:open: sesame"))).await;
    assert_eq!(r.status, 200);
    assert_eq!(failures(&p, "throttled"), 0);
}
