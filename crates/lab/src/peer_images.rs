//! Ziproxy's image recompression, measured image by image (for `webpep optimize images --peer
//! ziproxy`): each image is served once by a loopback origin and fetched through a Ziproxy
//! process in inetd mode (`ziproxy -i`: one request on stdin, the response on stdout), with
//! the same stock settings as the lab's `ziproxy` configuration. Nothing runs in a namespace
//! and nothing listens beyond the one loopback connection per image.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::configs::Peer;
use crate::peers::{binary, cannot_run, fresh_dir};
use crate::{LabError, Result};

/// The longest an image may take through Ziproxy (it decodes and re-encodes once).
const PER_IMAGE: Duration = Duration::from_secs(30);
/// Responses larger than this are refused rather than read.
const MAX_RESPONSE: usize = 64 << 20;

/// What Ziproxy sent for one image.
#[derive(Debug, Clone, PartialEq)]
pub struct PeerImage {
    pub status: u16,
    pub content_type: Option<String>,
    pub body: Vec<u8>,
}

/// A Ziproxy configuration in a private directory, removed on drop.
pub struct Ziproxy {
    dir: PathBuf,
    conf: PathBuf,
}

impl Ziproxy {
    /// Checks Ziproxy is installed and writes its configuration: only the listening address
    /// (unused in inetd mode) and the logs are set, everything else is Ziproxy's default (JPEG,
    /// PNG and GIF recompressed; ImageQuality {30,25,25,20}), as in the lab.
    pub fn new() -> Result<Ziproxy> {
        if let Some(why) = cannot_run(Peer::Ziproxy) {
            return Err(LabError::BadInput(format!("peer ziproxy: {why}")));
        }
        let dir = fresh_dir(&std::env::temp_dir(), "webpep-ziproxy")?;
        let conf = dir.join("ziproxy.conf");
        let text = format!(
            "Address = \"127.0.0.1\"\nOnlyFrom = \"127.0.0.1\"\nErrorLog = \"{}\"\n",
            dir.join("error.log").display()
        );
        std::fs::write(&conf, text).map_err(|e| LabError::Other(format!("ziproxy.conf: {e}")))?;
        Ok(Ziproxy { dir, conf })
    }

    /// Fetches `body` (served as `content_type`) through Ziproxy and returns what it sent.
    pub fn image(&self, body: &[u8], content_type: &str) -> Result<PeerImage> {
        let (origin, served) = serve_once(body.to_vec(), content_type.to_string())?;
        let request = format!(
            "GET http://{origin}/image HTTP/1.0\r\nHost: {origin}\r\nAccept: */*\r\n\
             User-Agent: Mozilla/5.0 (X11; U; Linux i686; en-US; rv:1.4) Gecko/20030624\r\n\r\n"
        );
        let mut child = Command::new(binary(Peer::Ziproxy))
            .arg("-i")
            .arg("-c")
            .arg(&self.conf)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| LabError::Other(format!("starting ziproxy: {e}")))?;
        let mut stdin = child.stdin.take().expect("piped");
        let mut stdout = child.stdout.take().expect("piped");
        // Write and close stdin (EOF ends the request), read stdout on another thread so a
        // stuck child can be killed at the deadline.
        let _ = stdin.write_all(request.as_bytes());
        drop(stdin);
        let reader = thread::spawn(move || {
            let mut out = Vec::new();
            let r = (&mut stdout)
                .take(MAX_RESPONSE as u64 + 1)
                .read_to_end(&mut out);
            r.map(|_| out)
        });
        let deadline = Instant::now() + PER_IMAGE;
        loop {
            match child.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(5)),
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(LabError::Other(format!(
                        "ziproxy gave no response within {PER_IMAGE:?}"
                    )));
                }
            }
        }
        let out = reader
            .join()
            .map_err(|_| LabError::Other("ziproxy output reader panicked".into()))?
            .map_err(|e| LabError::Other(format!("reading ziproxy's output: {e}")))?;
        let _ = served.join();
        if out.len() > MAX_RESPONSE {
            return Err(LabError::Other("ziproxy's response is over 64 MiB".into()));
        }
        parse_response(&out)
    }
}

impl Drop for Ziproxy {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A loopback origin that answers one request with `body`, then closes.
fn serve_once(body: Vec<u8>, content_type: String) -> Result<(SocketAddr, thread::JoinHandle<()>)> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .map_err(|e| LabError::Other(format!("loopback origin: {e}")))?;
    let addr = listener
        .local_addr()
        .map_err(|e| LabError::Other(format!("loopback origin: {e}")))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| LabError::Other(format!("loopback origin: {e}")))?;
    let handle = thread::spawn(move || {
        let deadline = Instant::now() + PER_IMAGE;
        let mut conn = loop {
            match listener.accept() {
                Ok((c, _)) => break c,
                Err(_) if Instant::now() < deadline => thread::sleep(Duration::from_millis(2)),
                Err(_) => return,
            }
        };
        let _ = conn.set_nonblocking(false);
        let _ = conn.set_read_timeout(Some(PER_IMAGE));
        // Read the request head (and ignore it: there is one body to serve).
        let mut head = Vec::new();
        let mut buf = [0u8; 4096];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 65536 {
            match conn.read(&mut buf) {
                Ok(n) if n > 0 => head.extend_from_slice(&buf[..n]),
                _ => return,
            }
        }
        let reply = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n",
            body.len()
        );
        let _ = conn.write_all(reply.as_bytes());
        let _ = conn.write_all(&body);
    });
    Ok((addr, handle))
}

/// Splits an HTTP/1.x response into status, content type and body (to its Content-Length,
/// or to the end).
fn parse_response(raw: &[u8]) -> Result<PeerImage> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut resp = httparse::Response::new(&mut headers);
    let bad = |why: String| LabError::Other(format!("ziproxy's response: {why}"));
    let head_len = match resp.parse(raw) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Err(bad("incomplete head".into())),
        Err(e) => return Err(bad(e.to_string())),
    };
    let header = |name: &str| {
        resp.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .and_then(|h| std::str::from_utf8(h.value).ok())
            .map(|v| v.trim().to_string())
    };
    let mut body = raw[head_len..].to_vec();
    if let Some(len) = header("content-length").and_then(|v| v.parse::<usize>().ok()) {
        if body.len() < len {
            return Err(bad(format!("body {} of {len} bytes", body.len())));
        }
        body.truncate(len);
    }
    Ok(PeerImage {
        status: resp.code.unwrap_or(0),
        content_type: header("content-type"),
        body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responses_are_split_by_content_length() {
        let raw = b"HTTP/1.0 200 OK\r\nContent-Type: image/jpeg\r\nContent-Length: 3\r\n\r\nabcdef";
        let r = parse_response(raw).unwrap();
        assert_eq!(r.status, 200);
        assert_eq!(r.content_type.as_deref(), Some("image/jpeg"));
        assert_eq!(r.body, b"abc");
        let short = b"HTTP/1.0 200 OK\r\nContent-Length: 9\r\n\r\nabc";
        assert!(parse_response(short).is_err());
        assert!(parse_response(b"garbage\r\n\r\n").is_err());
        let no_len = parse_response(b"HTTP/1.0 200 OK\r\n\r\nrest").unwrap();
        assert_eq!(no_len.body, b"rest");
    }
}
