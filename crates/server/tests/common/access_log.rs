//! The access log as the proxy writes it, captured: one JSON object a line, for tests that
//! read what the edge logged about a request.
#![allow(dead_code)]

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use super::common::WAIT_GUARD;

/// What the access log wrote, one JSON object a line.
pub fn access_log() -> &'static Arc<Mutex<Vec<u8>>> {
    static LOG: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOG.get_or_init(|| {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let sink = buf.clone();
        let subscriber = tracing_subscriber::fmt()
            .json()
            .with_env_filter("webpep::access=info")
            .with_writer(move || Sink(sink.clone()))
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");
        buf
    })
}

struct Sink(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Sink {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The access lines for `url` so far, as their fields.
pub fn lines_for(url: &str) -> Vec<serde_json::Value> {
    let text = String::from_utf8_lossy(&access_log().lock().unwrap()).into_owned();
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .map(|v| v["fields"].clone())
        .filter(|f| f["url"] == url)
        .collect()
}

/// Waits for the `n`th access line of `url` (written just after the response).
pub async fn nth_line(url: &str, n: usize) -> serde_json::Value {
    let waiting = async {
        loop {
            if let Some(l) = lines_for(url).get(n - 1) {
                return l.clone();
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(WAIT_GUARD, waiting)
        .await
        .unwrap_or_else(|_| panic!("no access line {n} for {url}: {:?}", lines_for(url)))
}
