//! TLS by name, uninterpreted: a connection that opens with a TLS ClientHello instead of an
//! HTTP request (a browser sent to this proxy's address by DNS rewriting, or intercepted on
//! port 443) is relayed to the host its Server Name Indication names, on the same port.
//! Nothing is decrypted; the ClientHello is read only for the name. Without the relay, an
//! https name answered with the proxy's address costs the browser a refused connection over
//! the air before it falls back to the original addresses (002 §5).

use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::time::Instant;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use crate::state::Server;

/// The TLS record type of a handshake message: the first byte a TLS client sends.
pub const HANDSHAKE_RECORD: u8 = 22;

/// A ClientHello larger than this is refused (real ones are a few KB; post-quantum key
/// shares make them about 2 KB).
const MAX_HELLO: usize = 64 * 1024;
/// The largest TLS record a peer may send (2^14 plus expansion, RFC 8446 §5.2).
const MAX_RECORD: usize = 16384 + 2048;

/// What the bytes read so far say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hello {
    /// More bytes are needed.
    Incomplete,
    /// A whole ClientHello; the host name it asks for, if it names one.
    Complete { server_name: Option<String> },
}

/// Why the bytes are not a ClientHello this relay can use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HelloError {
    #[error("not a TLS handshake record")]
    NotHandshake,
    #[error("the first handshake message is not a ClientHello")]
    NotClientHello,
    #[error("ClientHello over {MAX_HELLO} bytes")]
    TooLarge,
    #[error("malformed ClientHello: {0}")]
    Malformed(&'static str),
}

/// Reads the ClientHello at the start of `buf` (one or more handshake records) and returns
/// the `host_name` of its server_name extension (RFC 6066 §3), lower-cased, without a
/// trailing dot. A name that is not a DNS host name (an address literal, odd bytes) is an
/// error, not a destination.
pub fn parse_client_hello(buf: &[u8]) -> Result<Hello, HelloError> {
    let mut hs = Vec::new();
    let mut at = 0;
    loop {
        let Some(header) = buf.get(at..at + 5) else {
            return Ok(Hello::Incomplete);
        };
        if header[0] != HANDSHAKE_RECORD || header[1] != 3 {
            return Err(HelloError::NotHandshake);
        }
        let len = u16::from_be_bytes([header[3], header[4]]) as usize;
        if len == 0 || len > MAX_RECORD {
            return Err(HelloError::Malformed("record length"));
        }
        let Some(fragment) = buf.get(at + 5..at + 5 + len) else {
            return Ok(Hello::Incomplete);
        };
        hs.extend_from_slice(fragment);
        at += 5 + len;
        if hs[0] != 1 {
            return Err(HelloError::NotClientHello);
        }
        if hs.len() < 4 {
            continue;
        }
        let body_len = u32::from_be_bytes([0, hs[1], hs[2], hs[3]]) as usize;
        if body_len > MAX_HELLO {
            return Err(HelloError::TooLarge);
        }
        if hs.len() >= 4 + body_len {
            let server_name = server_name(&hs[4..4 + body_len])?;
            return Ok(Hello::Complete { server_name });
        }
    }
}

/// A cursor over the ClientHello body; every read is bounds-checked.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], HelloError> {
        if self.0.len() < n {
            return Err(HelloError::Malformed(what));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn u8(&mut self, what: &'static str) -> Result<usize, HelloError> {
        Ok(self.take(1, what)?[0] as usize)
    }
    fn u16(&mut self, what: &'static str) -> Result<usize, HelloError> {
        let b = self.take(2, what)?;
        Ok(u16::from_be_bytes([b[0], b[1]]) as usize)
    }
    /// A vector with a one- or two-byte length prefix.
    fn vec8(&mut self, what: &'static str) -> Result<&'a [u8], HelloError> {
        let n = self.u8(what)?;
        self.take(n, what)
    }
    fn vec16(&mut self, what: &'static str) -> Result<&'a [u8], HelloError> {
        let n = self.u16(what)?;
        self.take(n, what)
    }
}

fn server_name(body: &[u8]) -> Result<Option<String>, HelloError> {
    let mut r = Reader(body);
    r.take(2 + 32, "version and random")?;
    r.vec8("session id")?;
    r.vec16("cipher suites")?;
    r.vec8("compression methods")?;
    if r.0.is_empty() {
        return Ok(None); // no extensions at all (TLS 1.0-era clients)
    }
    let mut exts = Reader(r.vec16("extensions")?);
    while !exts.0.is_empty() {
        let ty = exts.u16("extension type")?;
        let data = exts.vec16("extension data")?;
        if ty != 0 {
            continue;
        }
        let mut list = Reader(Reader(data).vec16("server name list")?);
        while !list.0.is_empty() {
            let name_type = list.u8("server name type")?;
            let name = list.vec16("server name")?;
            if name_type == 0 {
                return host_name(name).map(Some);
            }
        }
        return Ok(None);
    }
    Ok(None)
}

fn host_name(raw: &[u8]) -> Result<String, HelloError> {
    let name = std::str::from_utf8(raw).map_err(|_| HelloError::Malformed("server name bytes"))?;
    let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
    let valid_label = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    if name.is_empty() || name.len() > 253 || !name.split('.').all(valid_label) {
        return Err(HelloError::Malformed("server name is not a host name"));
    }
    if name.parse::<std::net::IpAddr>().is_ok() {
        return Err(HelloError::Malformed("server name is an address literal"));
    }
    Ok(name)
}

/// A fatal TLS alert record (TLS 1.2 framing, which every client reads before its own
/// version is agreed): the client learns why instead of seeing a bare close.
fn alert(description: u8) -> [u8; 7] {
    [21, 3, 3, 0, 2, 2, description]
}
const ALERT_HANDSHAKE_FAILURE: u8 = 40;
const ALERT_ACCESS_DENIED: u8 = 49;
const ALERT_INTERNAL_ERROR: u8 = 80;
const ALERT_UNRECOGNIZED_NAME: u8 = 112;

/// Why a relay was not opened: logged, counted and told to the client as a TLS alert.
struct Refusal {
    status: u16,
    url: String,
    reason: String,
    alert: u8,
}

impl Refusal {
    fn new(status: u16, url: &str, reason: impl Into<String>, alert: u8) -> Option<Refusal> {
        Some(Refusal {
            status,
            url: url.to_string(),
            reason: reason.into(),
            alert,
        })
    }
}

/// Relays `stream`, whose first byte is a TLS handshake record, to the host its ClientHello
/// names: on the original destination's port when the connection was intercepted, else on
/// the port it arrived at. The port checks and destination rules of CONNECT apply.
pub async fn run(
    server: &Server,
    mut stream: TcpStream,
    peer: SocketAddr,
    port: u16,
    original_dst: Option<SocketAddr>,
    cancel: CancellationToken,
    hard: CancellationToken,
) {
    let start = Instant::now();
    let metrics = &server.metrics;
    let (mut upstream, url) = match open(server, &mut stream, port, original_dst, cancel).await {
        Ok(opened) => opened,
        Err(None) => return,
        Err(Some(r)) => {
            tracing::info!(target: "webpep::access", client = %peer, mode = "tls", url = %r.url,
                status = r.status, reason = %r.reason, ms = start.elapsed().as_millis() as u64,
                "tls relay refused");
            metrics.request("tls", r.status);
            let alert = alert(r.alert);
            if stream.write_all(&alert).await.is_ok() {
                // Written to the client like any answer (it went uncounted).
                Metrics::add(&metrics.client_bytes_out, alert.len() as u64);
            }
            return;
        }
    };
    metrics.request("tls", 200);
    tracing::info!(target: "webpep::access", client = %peer, mode = "tls", url = %url,
        status = 200u16, "tls relay open");
    let air = server.air_budgets.join(peer.ip(), stream.as_fd());
    crate::tunnel::splice(&mut stream, &mut upstream, air, metrics, &hard).await;
    tracing::info!(target: "webpep::access", client = %peer, mode = "tls", url = %url,
        ms = start.elapsed().as_millis() as u64, "tls relay closed");
}

/// Reads the ClientHello, checks the destination it names and connects to it, handing the
/// hello on. `Err(None)`: the client went away or stayed silent (nothing to answer).
async fn open(
    server: &Server,
    stream: &mut TcpStream,
    port: u16,
    original_dst: Option<SocketAddr>,
    cancel: CancellationToken,
) -> Result<(TcpStream, String), Option<Refusal>> {
    let metrics = &server.metrics;
    // Read the whole ClientHello within one idle timeout in all (not per read: a client
    // trickling a byte at a time must not hold the connection open for ever).
    let deadline = tokio::time::Instant::now() + server.cfg.limits.client_idle_timeout.0;
    let mut buf = BytesMut::with_capacity(4096);
    let hello = loop {
        match parse_client_hello(&buf) {
            Ok(Hello::Incomplete) => {}
            other => break other,
        }
        if buf.len() > MAX_HELLO + 1024 {
            break Err(HelloError::TooLarge);
        }
        let read = tokio::select! {
            r = tokio::time::timeout_at(deadline, stream.read_buf(&mut buf)) => r,
            _ = cancel.cancelled() => return Err(None),
        };
        match read {
            Ok(Ok(n)) if n > 0 => Metrics::add(&metrics.client_bytes_in, n as u64),
            _ => return Err(None), // closed, failed or idle before the hello was complete
        }
    };
    let target = match hello {
        Ok(Hello::Complete {
            server_name: Some(name),
        }) => name,
        Ok(Hello::Complete { server_name: None }) => match original_dst {
            // Intercepted: the address the client meant is known even without a name.
            Some(d) => d.ip().to_string(),
            None => {
                let why = "ClientHello without a server name";
                return Err(Refusal::new(400, "-", why, ALERT_UNRECOGNIZED_NAME));
            }
        },
        Ok(Hello::Incomplete) => return Err(None),
        Err(e) => {
            return Err(Refusal::new(
                400,
                "-",
                e.to_string(),
                ALERT_HANDSHAKE_FAILURE,
            ))
        }
    };
    let port = original_dst.map(|d| d.port()).unwrap_or(port);
    let url = format!("{target}:{port}");
    if !server.cfg.acl.tls_relay {
        let why = "TLS relay off (acl.tls-relay = false)";
        return Err(Refusal::new(403, &url, why, ALERT_ACCESS_DENIED));
    }
    if server
        .auth
        .as_ref()
        .is_some_and(|a| a.refuses_transparent())
    {
        let why = "authentication required (auth.transparent = \"refuse\")";
        return Err(Refusal::new(403, &url, why, ALERT_ACCESS_DENIED));
    }
    if !server.acl.connect_port_allowed(port) {
        let why = format!("port {port} not allowed");
        return Err(Refusal::new(403, &url, why, ALERT_ACCESS_DENIED));
    }
    let mut upstream = server.dialer.connect(&target, port).await.map_err(|e| {
        let status = e.status().as_u16();
        let alert = if status == 403 {
            ALERT_ACCESS_DENIED
        } else {
            ALERT_INTERNAL_ERROR
        };
        Refusal::new(status, &url, e.to_string(), alert)
    })?;
    upstream.write_all(&buf).await.map_err(|_| None)?;
    Metrics::add(&metrics.origin_bytes_out, buf.len() as u64);
    Ok((upstream, url))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ClientHello as a real TLS client writes it (rustls, TLS 1.3 and 1.2 offered).
    pub(crate) fn rustls_hello(name: &str) -> Vec<u8> {
        use std::sync::Arc;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let cfg = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth();
        let server_name = rustls::pki_types::ServerName::try_from(name.to_string()).unwrap();
        let mut conn = rustls::ClientConnection::new(Arc::new(cfg), server_name).unwrap();
        let mut out = Vec::new();
        while conn.wants_write() {
            conn.write_tls(&mut out).unwrap();
        }
        out
    }

    #[test]
    fn a_real_client_hello_names_its_host_at_every_split() {
        let hello = rustls_hello("Origin.Example.");
        assert_eq!(
            parse_client_hello(&hello),
            Ok(Hello::Complete {
                server_name: Some("origin.example".into())
            })
        );
        for cut in 0..hello.len() {
            assert_eq!(
                parse_client_hello(&hello[..cut]),
                Ok(Hello::Incomplete),
                "cut {cut}"
            );
        }
    }

    #[test]
    fn a_hello_split_over_two_records_is_joined() {
        let hello = rustls_hello("split.example");
        let fragment = &hello[5..];
        let (a, b) = fragment.split_at(40);
        let mut two = Vec::new();
        for part in [a, b] {
            two.extend_from_slice(&[22, 3, 1]);
            two.extend_from_slice(&(part.len() as u16).to_be_bytes());
            two.extend_from_slice(part);
        }
        assert_eq!(
            parse_client_hello(&two),
            Ok(Hello::Complete {
                server_name: Some("split.example".into())
            })
        );
    }

    /// A minimal ClientHello with the given extensions block (None: no extensions).
    fn hello_with(extensions: Option<Vec<u8>>) -> Vec<u8> {
        let mut body = vec![3, 3];
        body.extend_from_slice(&[7; 32]);
        body.extend_from_slice(&[0, 0, 2, 0x13, 0x01, 1, 0]);
        if let Some(e) = extensions {
            body.extend_from_slice(&(e.len() as u16).to_be_bytes());
            body.extend_from_slice(&e);
        }
        let mut hs = vec![1, 0];
        hs.extend_from_slice(&(body.len() as u16).to_be_bytes());
        hs.extend_from_slice(&body);
        let mut rec = vec![22, 3, 1];
        rec.extend_from_slice(&(hs.len() as u16).to_be_bytes());
        rec.extend_from_slice(&hs);
        rec
    }

    fn sni_ext(name_type: u8, name: &[u8]) -> Vec<u8> {
        let mut entry = vec![name_type];
        entry.extend_from_slice(&(name.len() as u16).to_be_bytes());
        entry.extend_from_slice(name);
        let mut list = (entry.len() as u16).to_be_bytes().to_vec();
        list.extend_from_slice(&entry);
        let mut ext = vec![0, 0];
        ext.extend_from_slice(&(list.len() as u16).to_be_bytes());
        ext.extend_from_slice(&list);
        ext
    }

    #[test]
    fn no_extensions_or_no_server_name_is_a_hello_without_a_name() {
        let none = Ok(Hello::Complete { server_name: None });
        assert_eq!(parse_client_hello(&hello_with(None)), none);
        assert_eq!(parse_client_hello(&hello_with(Some(vec![]))), none);
        // Another extension (supported_versions) only.
        let other = vec![0, 43, 0, 3, 2, 3, 4];
        assert_eq!(parse_client_hello(&hello_with(Some(other))), none);
    }

    #[test]
    fn names_that_are_not_host_names_are_errors() {
        for bad in [
            &b"10.0.0.1"[..],
            b"",
            b"a..b",
            b"bad name.example",
            b"\xff\xfe.example",
            &[b'a'; 300],
        ] {
            let h = hello_with(Some(sni_ext(0, bad)));
            assert!(
                matches!(parse_client_hello(&h), Err(HelloError::Malformed(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn garbage_and_other_messages_are_refused() {
        assert_eq!(
            parse_client_hello(b"GET / HTTP/1.1\r\n\r\n"),
            Err(HelloError::NotHandshake)
        );
        assert_eq!(
            parse_client_hello(&[22, 3, 3, 0, 4, 2, 0, 0, 0]),
            Err(HelloError::NotClientHello)
        );
        assert_eq!(
            parse_client_hello(&[22, 3, 3, 0, 0]),
            Err(HelloError::Malformed("record length"))
        );
        assert_eq!(
            parse_client_hello(&[22, 3, 3, 0, 4, 1, 0x10, 0, 0]),
            Err(HelloError::TooLarge)
        );
        // An extensions length that runs past the message.
        let mut h = hello_with(Some(sni_ext(0, b"x.example")));
        let n = h.len();
        h[n - sni_ext(0, b"x.example").len() - 1] += 1;
        assert!(matches!(
            parse_client_hello(&h),
            Err(HelloError::Malformed(_))
        ));
    }
}
