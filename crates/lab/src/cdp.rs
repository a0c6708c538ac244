//! The Chrome DevTools Protocol over `--remote-debugging-pipe`: JSON messages ended by a NUL
//! byte, commands written to the browser's fd 3, answers and events read from its fd 4. A pipe
//! needs no port, so a browser inside a lab namespace is driven from outside it, and nothing
//! else can connect to it.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// A message larger than this ends the session (a page's events are far smaller; the limit
/// keeps a confused browser from filling memory).
const MAX_MESSAGE: usize = 64 << 20;

/// Why a DevTools exchange failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CdpError {
    #[error("the browser closed its DevTools pipe")]
    Closed,
    #[error("no answer to {0} in time")]
    Timeout(String),
    #[error("{method}: {message}")]
    Command { method: String, message: String },
    #[error("DevTools pipe: {0}")]
    Io(String),
}

/// One DevTools connection to a browser.
pub struct Cdp {
    to_browser: File,
    from_browser: Receiver<Result<Value, String>>,
    next_id: u64,
    /// Events that arrived while a command waited for its answer, oldest first.
    pending: VecDeque<Value>,
    closed: bool,
    reader: Option<JoinHandle<()>>,
}

impl Cdp {
    /// Talks to a browser over `to_browser` (its fd 3) and `from_browser` (its fd 4). A thread
    /// splits the incoming stream into messages; it ends when the browser closes its end.
    pub fn new(to_browser: File, from_browser: File) -> std::io::Result<Cdp> {
        let (tx, rx) = mpsc::channel();
        let reader = std::thread::Builder::new()
            .name("cdp-reader".into())
            .spawn(move || read_messages(BufReader::new(from_browser), &tx))?;
        Ok(Cdp {
            to_browser,
            from_browser: rx,
            next_id: 1,
            pending: VecDeque::new(),
            closed: false,
            reader: Some(reader),
        })
    }

    /// Sends `method` (to the page `session` when given) and waits for its answer; events
    /// read meanwhile are kept for [`Cdp::next_event`].
    pub fn call(
        &mut self,
        session: Option<&str>,
        method: &str,
        params: Value,
        timeout: Duration,
    ) -> Result<Value, CdpError> {
        let id = self.next_id;
        self.next_id += 1;
        let mut msg = json!({ "id": id, "method": method, "params": params });
        if let Some(s) = session {
            msg["sessionId"] = Value::String(s.to_string());
        }
        let mut bytes = serde_json::to_vec(&msg).map_err(|e| CdpError::Io(e.to_string()))?;
        bytes.push(0);
        self.to_browser
            .write_all(&bytes)
            .map_err(|e| CdpError::Io(format!("sending {method}: {e}")))?;
        let deadline = Instant::now() + timeout;
        loop {
            let m = self
                .receive(deadline)?
                .ok_or_else(|| CdpError::Timeout(method.to_string()))?;
            if m.get("id").and_then(Value::as_u64) == Some(id) {
                if let Some(e) = m.get("error") {
                    return Err(CdpError::Command {
                        method: method.to_string(),
                        message: e
                            .get("message")
                            .and_then(Value::as_str)
                            .unwrap_or("error")
                            .to_string(),
                    });
                }
                return Ok(m.get("result").cloned().unwrap_or(Value::Null));
            }
            if m.get("method").is_some() {
                self.pending.push_back(m);
            }
        }
    }

    /// The next event (a message with a `method`), waiting until `deadline`; `Ok(None)` when
    /// none came in time.
    pub fn next_event(&mut self, deadline: Instant) -> Result<Option<Value>, CdpError> {
        if let Some(e) = self.pending.pop_front() {
            return Ok(Some(e));
        }
        loop {
            match self.receive(deadline)? {
                Some(m) if m.get("method").is_some() => return Ok(Some(m)),
                // A late answer to a command that timed out.
                Some(_) => continue,
                None => return Ok(None),
            }
        }
    }

    fn receive(&mut self, deadline: Instant) -> Result<Option<Value>, CdpError> {
        if self.closed {
            return Err(CdpError::Closed);
        }
        let wait = deadline.saturating_duration_since(Instant::now());
        match self.from_browser.recv_timeout(wait) {
            Ok(Ok(v)) => Ok(Some(v)),
            Ok(Err(e)) => {
                self.closed = true;
                Err(CdpError::Io(e))
            }
            Err(RecvTimeoutError::Timeout) => Ok(None),
            Err(RecvTimeoutError::Disconnected) => {
                self.closed = true;
                Err(CdpError::Closed)
            }
        }
    }
}

impl Drop for Cdp {
    fn drop(&mut self) {
        // The reader ends when the browser's end of the pipe closes (the caller stops the
        // browser first); a reader still blocked is left to finish on its own.
        if let Some(r) = self.reader.take() {
            if r.is_finished() {
                let _ = r.join();
            }
        }
    }
}

/// Splits the stream into NUL-ended JSON messages; a malformed message or one over
/// [`MAX_MESSAGE`] ends the session with the reason.
fn read_messages<R: BufRead>(mut input: R, tx: &mpsc::Sender<Result<Value, String>>) {
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match read_message(&mut input, &mut buf) {
            Ok(false) => return,
            Ok(true) => {}
            Err(e) => {
                let _ = tx.send(Err(e));
                return;
            }
        }
        let parsed = serde_json::from_slice::<Value>(&buf)
            .map_err(|e| format!("a message that is not JSON ({e})"));
        let stop = parsed.is_err();
        if tx.send(parsed).is_err() || stop {
            return;
        }
    }
}

/// Reads one message into `buf` (without its NUL); `Ok(false)` at a clean end of stream.
fn read_message<R: BufRead>(input: &mut R, buf: &mut Vec<u8>) -> Result<bool, String> {
    loop {
        let chunk = input.fill_buf().map_err(|e| e.to_string())?;
        if chunk.is_empty() {
            return if buf.is_empty() {
                Ok(false)
            } else {
                Err("the stream ended inside a message".into())
            };
        }
        let (used, done) = match chunk.iter().position(|&b| b == 0) {
            Some(i) => {
                buf.extend_from_slice(&chunk[..i]);
                (i + 1, true)
            }
            None => {
                buf.extend_from_slice(chunk);
                (chunk.len(), false)
            }
        };
        input.consume(used);
        if buf.len() > MAX_MESSAGE {
            return Err(format!("a message over {MAX_MESSAGE} bytes"));
        }
        if done {
            return Ok(true);
        }
    }
}

/// A browser stand-in on two real pipes, for tests: `answer` gives the messages to send back
/// for each command (events and the command's answer); the thread returns every command it
/// read once the [`Cdp`] is dropped.
#[cfg(test)]
pub(crate) fn fake_browser<F>(answer: F) -> (Cdp, JoinHandle<Vec<Value>>)
where
    F: Fn(&Value) -> Vec<Value> + Send + 'static,
{
    let (cmd_r, cmd_w) = std::io::pipe().expect("pipe");
    let (ev_r, mut ev_w) = std::io::pipe().expect("pipe");
    let fake = std::thread::spawn(move || {
        let mut input = BufReader::new(cmd_r);
        let mut buf = Vec::new();
        let mut seen = Vec::new();
        while read_message(&mut input, &mut buf).expect("read") {
            let m: Value = serde_json::from_slice(&buf).expect("json");
            buf.clear();
            for v in answer(&m) {
                let mut b = serde_json::to_vec(&v).expect("json");
                b.push(0);
                ev_w.write_all(&b).expect("write");
            }
            seen.push(m);
        }
        seen
    });
    let cdp = Cdp::new(
        File::from(std::os::fd::OwnedFd::from(cmd_w)),
        File::from(std::os::fd::OwnedFd::from(ev_r)),
    )
    .expect("cdp");
    (cdp, fake)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn messages(stream: &[u8]) -> Vec<Result<Value, String>> {
        let (tx, rx) = mpsc::channel();
        read_messages(std::io::Cursor::new(stream.to_vec()), &tx);
        drop(tx);
        rx.into_iter().collect()
    }

    #[test]
    fn the_stream_splits_at_nul_bytes_and_garbage_ends_it_with_a_reason() {
        let got = messages(b"{\"id\":1,\"result\":{}}\0{\"method\":\"Page.loadEventFired\"}\0");
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].as_ref().unwrap()["id"], 1);
        assert_eq!(got[1].as_ref().unwrap()["method"], "Page.loadEventFired");

        let got = messages(b"{\"id\":1}\0not json\0{\"id\":2}\0");
        assert_eq!(got.len(), 2, "nothing is read after garbage");
        assert!(got[1].as_ref().unwrap_err().contains("not JSON"));

        let got = messages(b"{\"id\":1}\0{\"id\":");
        assert!(got[1]
            .as_ref()
            .unwrap_err()
            .contains("ended inside a message"));
        assert!(messages(b"").is_empty());
    }

    /// Answers every command, sending an event first.
    #[test]
    fn commands_get_their_answers_and_events_wait_for_the_caller() {
        let (mut cdp, fake) = fake_browser(|m| {
            let reply = if m["method"] == "Fail.me" {
                json!({"id": m["id"], "error": {"message": "no such method"}})
            } else {
                json!({"id": m["id"], "result": {"echo": m["params"], "session": m["sessionId"]}})
            };
            let event = json!({"method": "Network.dataReceived", "params": {"n": m["id"]}});
            vec![event, reply]
        });
        let t = Duration::from_secs(5);
        let r = cdp
            .call(Some("S1"), "Page.navigate", json!({"url": "http://a/"}), t)
            .expect("answer");
        assert_eq!(r["echo"]["url"], "http://a/");
        assert_eq!(r["session"], "S1");
        let e = cdp.call(None, "Fail.me", json!({}), t).unwrap_err();
        assert_eq!(e.to_string(), "Fail.me: no such method");
        let soon = Instant::now() + t;
        assert_eq!(cdp.next_event(soon).unwrap().unwrap()["params"]["n"], 1);
        assert_eq!(cdp.next_event(soon).unwrap().unwrap()["params"]["n"], 2);
        let quick = Instant::now() + Duration::from_millis(50);
        assert_eq!(cdp.next_event(quick).unwrap(), None);
        drop(cdp);
        fake.join().expect("fake browser");
    }
}
