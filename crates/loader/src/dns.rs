//! DNS lookups sent to the configured resolver (never the system resolver): A queries over UDP,
//! retried on timeout, repeated over TCP when the answer is truncated. Encoding and decoding
//! with `hickory-proto`.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};

/// A successful answer: the addresses and the TTL to cache them for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub addrs: Vec<IpAddr>,
    pub ttl: u32,
    /// Whether the answer came over TCP (after a truncated UDP answer).
    pub over_tcp: bool,
}

/// Build an A query for `host` with message id `id`.
pub fn build_query(id: u16, host: &str) -> Result<Vec<u8>, String> {
    let name = Name::from_utf8(host).map_err(|e| format!("bad name {host:?}: {e}"))?;
    let mut msg = Message::new();
    msg.set_id(id)
        .set_message_type(MessageType::Query)
        .set_op_code(OpCode::Query)
        .set_recursion_desired(true)
        .add_query(Query::query(name, RecordType::A));
    msg.to_vec().map_err(|e| format!("encoding query: {e}"))
}

/// What a decoded reply says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// Not the reply to our query (wrong id or question): keep waiting.
    Unrelated,
    Truncated,
    Answer(Answer),
    Failed(String),
}

/// Decode a reply to the query `id` for `host`.
pub fn parse_reply(bytes: &[u8], id: u16, host: &str) -> Reply {
    let msg = match Message::from_vec(bytes) {
        Ok(m) => m,
        Err(_) => return Reply::Unrelated,
    };
    if msg.id() != id || msg.message_type() != MessageType::Response {
        return Reply::Unrelated;
    }
    let want = host.trim_end_matches('.');
    let asked = msg
        .queries()
        .first()
        .map(|q| {
            q.name()
                .to_ascii()
                .trim_end_matches('.')
                .eq_ignore_ascii_case(want)
        })
        .unwrap_or(false);
    if !asked {
        return Reply::Unrelated;
    }
    if msg.truncated() {
        return Reply::Truncated;
    }
    match msg.response_code() {
        ResponseCode::NoError => {}
        ResponseCode::NXDomain => return Reply::Failed("no such name (NXDOMAIN)".into()),
        other => return Reply::Failed(format!("resolver answered {other}")),
    }
    let mut addrs = Vec::new();
    let mut ttl: Option<u32> = None;
    for rec in msg.answers() {
        if let RData::A(a) = rec.data() {
            let ip: Ipv4Addr = a.0;
            addrs.push(IpAddr::V4(ip));
            ttl = Some(ttl.map_or(rec.ttl(), |t| t.min(rec.ttl())));
        } else if rec.record_type() == RecordType::CNAME {
            ttl = Some(ttl.map_or(rec.ttl(), |t| t.min(rec.ttl())));
        }
    }
    if addrs.is_empty() {
        return Reply::Failed("no A records in the answer".into());
    }
    Reply::Answer(Answer {
        addrs,
        ttl: ttl.unwrap_or(0),
        over_tcp: false,
    })
}

fn next_id() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let c = COUNTER.fetch_add(0x9e37, Ordering::Relaxed);
    ((t ^ c ^ (t >> 16)) & 0xffff) as u16
}

/// Look `host` up at `resolver`: up to `attempts` UDP queries, each waited for `timeout`; a
/// truncated answer is asked again over TCP.
pub async fn lookup(
    resolver: SocketAddr,
    host: &str,
    timeout: Duration,
    attempts: u32,
) -> Result<Answer, String> {
    let bind: SocketAddr = if resolver.is_ipv4() {
        SocketAddr::from(([0, 0, 0, 0], 0))
    } else {
        SocketAddr::from(([0u16; 8], 0))
    };
    let sock = UdpSocket::bind(bind)
        .await
        .map_err(|e| format!("binding a UDP socket: {e}"))?;
    sock.connect(resolver)
        .await
        .map_err(|e| format!("resolver {resolver}: {e}"))?;
    let id = next_id();
    let query = build_query(id, host)?;
    let mut buf = vec![0u8; 4096];
    let mut last_err = format!("no answer from {resolver}");
    for _ in 0..attempts.max(1) {
        if let Err(e) = sock.send(&query).await {
            last_err = format!("sending to {resolver}: {e}");
            continue;
        }
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            match tokio::time::timeout_at(deadline, sock.recv(&mut buf)).await {
                Err(_) => {
                    // No duration here: the page load states the timeout itself, in the
                    // units its record uses (unscaled link time in the lab).
                    last_err = format!("no answer from {resolver} ({} queries)", attempts.max(1));
                    break;
                }
                Ok(Err(e)) => {
                    // ICMP port unreachable and the like: count as a failed attempt.
                    last_err = format!("resolver {resolver}: {e}");
                    tokio::time::sleep_until(deadline).await;
                    break;
                }
                Ok(Ok(n)) => match parse_reply(&buf[..n], id, host) {
                    Reply::Unrelated => continue,
                    Reply::Answer(a) => return Ok(a),
                    Reply::Failed(e) => return Err(e),
                    Reply::Truncated => return lookup_tcp(resolver, host, timeout).await,
                },
            }
        }
    }
    Err(last_err)
}

async fn lookup_tcp(resolver: SocketAddr, host: &str, timeout: Duration) -> Result<Answer, String> {
    let work = async {
        let mut s = TcpStream::connect(resolver)
            .await
            .map_err(|e| format!("TCP to resolver {resolver}: {e}"))?;
        let id = next_id();
        let query = build_query(id, host)?;
        let len = u16::try_from(query.len()).map_err(|_| "query too long".to_string())?;
        let mut framed = len.to_be_bytes().to_vec();
        framed.extend_from_slice(&query);
        s.write_all(&framed)
            .await
            .map_err(|e| format!("TCP to resolver: {e}"))?;
        loop {
            let mut lenb = [0u8; 2];
            s.read_exact(&mut lenb)
                .await
                .map_err(|e| format!("TCP answer from resolver: {e}"))?;
            let mut msg = vec![0u8; u16::from_be_bytes(lenb) as usize];
            s.read_exact(&mut msg)
                .await
                .map_err(|e| format!("TCP answer from resolver: {e}"))?;
            match parse_reply(&msg, id, host) {
                Reply::Unrelated => continue,
                Reply::Answer(mut a) => {
                    a.over_tcp = true;
                    return Ok(a);
                }
                Reply::Failed(e) => return Err(e),
                Reply::Truncated => return Err("truncated answer over TCP".into()),
            }
        }
    };
    tokio::time::timeout(timeout, work)
        .await
        .unwrap_or_else(|_| Err(format!("no TCP answer from {resolver}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_proto::rr::rdata::A;
    use hickory_proto::rr::Record;

    fn reply_for(
        query: &[u8],
        ips: &[Ipv4Addr],
        ttl: u32,
        tc: bool,
        rcode: ResponseCode,
    ) -> Vec<u8> {
        let q = Message::from_vec(query).expect("query decodes");
        let mut m = Message::new();
        m.set_id(q.id())
            .set_message_type(MessageType::Response)
            .set_op_code(OpCode::Query)
            .set_truncated(tc)
            .set_response_code(rcode);
        for qq in q.queries() {
            m.add_query(qq.clone());
            for ip in ips {
                m.add_answer(Record::from_rdata(qq.name().clone(), ttl, RData::A(A(*ip))));
            }
        }
        m.to_vec().expect("encodes")
    }

    #[test]
    fn round_trip() {
        let q = build_query(77, "www.Example.test").expect("query");
        let r = reply_for(
            &q,
            &[Ipv4Addr::new(127, 0, 0, 2), Ipv4Addr::new(127, 0, 0, 3)],
            30,
            false,
            ResponseCode::NoError,
        );
        match parse_reply(&r, 77, "www.example.test") {
            Reply::Answer(a) => {
                assert_eq!(a.addrs.len(), 2);
                assert_eq!(a.ttl, 30);
            }
            other => panic!("unexpected {other:?}"),
        }
        assert_eq!(parse_reply(&r, 78, "www.example.test"), Reply::Unrelated);
        assert_eq!(parse_reply(&r, 77, "other.test"), Reply::Unrelated);
        let tc = reply_for(&q, &[], 0, true, ResponseCode::NoError);
        assert_eq!(parse_reply(&tc, 77, "www.example.test"), Reply::Truncated);
        let nx = reply_for(&q, &[], 0, false, ResponseCode::NXDomain);
        assert!(matches!(
            parse_reply(&nx, 77, "www.example.test"),
            Reply::Failed(_)
        ));
        assert_eq!(parse_reply(b"\x01\x02junk", 77, "x"), Reply::Unrelated);
    }
}
