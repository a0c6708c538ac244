//! The client side towards the upstream resolver: UDP with a timeout per attempt and retries,
//! TCP when the UDP answer is truncated (RFC 1035 §4.2, RFC 7766).

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hickory_proto::op::{Message, Query};
use tokio::net::{TcpStream, UdpSocket};
use tracing::debug;

use crate::error::DnsError;
use crate::wire::{is_reply_to, read_frame, write_frame};

/// Where and how patiently to ask.
#[derive(Clone, Debug)]
pub(crate) struct Upstream {
    pub addr: SocketAddr,
    /// Per attempt (UDP) and for the whole TCP exchange.
    pub timeout: Duration,
    /// UDP attempts in all (at least one).
    pub attempts: u32,
}

/// A matching upstream answer: its exact bytes (to forward unchanged) and its parse.
pub(crate) struct Reply {
    pub bytes: Vec<u8>,
    pub msg: Message,
}

impl Upstream {
    /// Sends `query` (whose ID is `id` and question `questions`) and returns the matching
    /// answer. Each packet sent (retries and TCP included) is counted in `sent`.
    pub(crate) async fn exchange(
        &self,
        query: &[u8],
        id: u16,
        questions: &[Query],
        sent: &AtomicU64,
    ) -> Result<Reply, DnsError> {
        let reply = self.exchange_udp(query, id, questions, sent).await?;
        if !reply.msg.truncated() {
            return Ok(reply);
        }
        debug!(upstream = %self.addr, "dns: truncated upstream answer, retrying over TCP");
        self.exchange_tcp(query, id, questions, sent).await
    }

    async fn exchange_udp(
        &self,
        query: &[u8],
        id: u16,
        questions: &[Query],
        sent: &AtomicU64,
    ) -> Result<Reply, DnsError> {
        // A fresh socket per exchange: a random source port, and no answers to other queries.
        let bind: SocketAddr = if self.addr.is_ipv4() {
            (Ipv4Addr::UNSPECIFIED, 0).into()
        } else {
            (Ipv6Addr::UNSPECIFIED, 0).into()
        };
        let socket = UdpSocket::bind(bind).await?;
        socket.connect(self.addr).await?;
        let mut buf = vec![0u8; 65_535];
        let mut last_error = format!("no answer from {}", self.addr);
        for _ in 0..self.attempts.max(1) {
            sent.fetch_add(1, Ordering::Relaxed);
            let deadline = tokio::time::Instant::now() + self.timeout;
            if let Err(e) = socket.send(query).await {
                last_error = e.to_string();
                tokio::time::sleep_until(deadline).await;
                continue;
            }
            loop {
                let n = match tokio::time::timeout_at(deadline, socket.recv(&mut buf)).await {
                    Err(_) => {
                        last_error = format!("no answer from {} in {:?}", self.addr, self.timeout);
                        break;
                    }
                    Ok(Err(e)) => {
                        // An ICMP error for an earlier packet (port unreachable): this attempt
                        // is lost; wait out its time so that retries are paced.
                        last_error = e.to_string();
                        tokio::time::sleep_until(deadline).await;
                        break;
                    }
                    Ok(Ok(n)) => n,
                };
                let bytes = buf[..n].to_vec();
                match Message::from_vec(&bytes) {
                    Ok(msg) if is_reply_to(&msg, id, questions) => return Ok(Reply { bytes, msg }),
                    _ => {
                        debug!(upstream = %self.addr, "dns: unrelated or malformed upstream packet ignored")
                    }
                }
            }
        }
        Err(DnsError::Upstream(last_error))
    }

    async fn exchange_tcp(
        &self,
        query: &[u8],
        id: u16,
        questions: &[Query],
        sent: &AtomicU64,
    ) -> Result<Reply, DnsError> {
        sent.fetch_add(1, Ordering::Relaxed);
        let exchange = async {
            let mut stream = TcpStream::connect(self.addr).await?;
            write_frame(&mut stream, query).await?;
            let bytes = read_frame(&mut stream)
                .await?
                .ok_or_else(|| DnsError::Upstream("upstream closed the TCP connection".into()))?;
            let msg = Message::from_vec(&bytes).map_err(|e| DnsError::Upstream(e.to_string()))?;
            if !is_reply_to(&msg, id, questions) {
                return Err(DnsError::Upstream("unrelated answer over TCP".into()));
            }
            Ok(Reply { bytes, msg })
        };
        match tokio::time::timeout(self.timeout, exchange).await {
            Ok(r) => r,
            Err(_) => Err(DnsError::Upstream(format!(
                "no TCP answer from {} in {:?}",
                self.addr, self.timeout
            ))),
        }
    }
}
