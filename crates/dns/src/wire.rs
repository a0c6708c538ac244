//! Small wire-level helpers shared by the proxy, the stub resolver and the upstream client:
//! IDs, question matching, TCP framing (RFC 1035 §4.2.2), error replies, UDP size limits.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};

use hickory_proto::op::{Message, MessageType, Query, ResponseCode};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::error::DnsError;

/// The classic UDP payload limit when a query carries no EDNS (RFC 1035 §4.2.1).
pub(crate) const CLASSIC_UDP_LIMIT: usize = 512;

/// An unpredictable query ID, so that an off-path attacker cannot guess it (RFC 5452): each
/// `RandomState` is freshly keyed by the standard library; a counter keeps IDs distinct.
pub(crate) fn random_id() -> u16 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.finish() as u16
}

/// Overwrites the ID of a wire-format message (its first two bytes).
pub(crate) fn set_wire_id(packet: &mut [u8], id: u16) {
    if let Some(head) = packet.get_mut(..2) {
        head.copy_from_slice(&id.to_be_bytes());
    }
}

/// Whether two question sections ask the same thing (names compared case-insensitively, since
/// resolvers may randomise case, RFC draft "0x20").
pub(crate) fn same_questions(a: &[Query], b: &[Query]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            x.query_type() == y.query_type()
                && x.query_class() == y.query_class()
                && x.name()
                    .to_ascii()
                    .eq_ignore_ascii_case(&y.name().to_ascii())
        })
}

/// Whether `reply` is the answer to the query with `id` and `questions`.
pub(crate) fn is_reply_to(reply: &Message, id: u16, questions: &[Query]) -> bool {
    reply.id() == id
        && reply.message_type() == MessageType::Response
        && same_questions(reply.queries(), questions)
}

/// An error reply (`rcode`) to `query`: same ID, opcode, RD, CD and question.
pub(crate) fn error_reply(query: &Message, rcode: ResponseCode) -> Message {
    let mut m = Message::new();
    m.set_id(query.id())
        .set_message_type(MessageType::Response)
        .set_op_code(query.op_code())
        .set_recursion_desired(query.recursion_desired())
        .set_recursion_available(true)
        .set_checking_disabled(query.checking_disabled())
        .set_response_code(rcode);
    m.add_queries(query.queries().iter().cloned());
    m
}

/// Encodes a message.
pub(crate) fn encode(msg: &Message) -> Result<Vec<u8>, DnsError> {
    msg.to_vec().map_err(|e| DnsError::Encode(e.to_string()))
}

/// The largest UDP answer the sender of `query` accepts.
pub(crate) fn udp_limit(query: &Message) -> usize {
    match query.extensions() {
        Some(edns) => usize::from(edns.max_payload()).max(CLASSIC_UDP_LIMIT),
        None => CLASSIC_UDP_LIMIT,
    }
}

/// `reply` as it may go out over UDP: unchanged when it fits in `limit`, otherwise the header
/// and question with TC set, so that the client retries over TCP (RFC 1035 §4.2.1).
pub(crate) fn fit_udp(reply: Vec<u8>, limit: usize) -> Result<Vec<u8>, DnsError> {
    if reply.len() <= limit {
        return Ok(reply);
    }
    let msg = Message::from_vec(&reply).map_err(|e| DnsError::Malformed(e.to_string()))?;
    encode(&msg.truncate())
}

/// Reads one length-prefixed message; `Ok(None)` on a clean end of stream before the prefix.
pub(crate) async fn read_frame<R: AsyncRead + Unpin>(r: &mut R) -> io::Result<Option<Vec<u8>>> {
    let mut len = [0u8; 2];
    match r.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let mut body = vec![0u8; usize::from(u16::from_be_bytes(len))];
    r.read_exact(&mut body).await?;
    Ok(Some(body))
}

/// Writes one length-prefixed message in a single write (one segment for small messages).
pub(crate) async fn write_frame<W: AsyncWrite + Unpin>(w: &mut W, msg: &[u8]) -> io::Result<()> {
    let len = u16::try_from(msg.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "DNS message over 65535 bytes"))?;
    let mut out = Vec::with_capacity(msg.len() + 2);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(msg);
    w.write_all(&out).await?;
    w.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_proto::rr::{Name, RecordType};

    #[test]
    fn ids_vary_and_can_be_patched() {
        let ids: std::collections::HashSet<u16> = (0..64).map(|_| random_id()).collect();
        assert!(ids.len() > 50, "ids should look random: {}", ids.len());
        let mut p = vec![0u8, 0, 9];
        set_wire_id(&mut p, 0xabcd);
        assert_eq!(p, vec![0xab, 0xcd, 9]);
        let mut short = vec![1u8];
        set_wire_id(&mut short, 7);
        assert_eq!(short, vec![1]);
    }

    #[test]
    fn questions_match_case_insensitively() {
        let a = [Query::query(
            Name::from_ascii("WwW.Foo.com.").unwrap(),
            RecordType::A,
        )];
        let b = [Query::query(
            Name::from_ascii("www.foo.com.").unwrap(),
            RecordType::A,
        )];
        let c = [Query::query(
            Name::from_ascii("www.foo.com.").unwrap(),
            RecordType::AAAA,
        )];
        assert!(same_questions(&a, &b));
        assert!(!same_questions(&a, &c));
        assert!(!same_questions(&a, &[]));
    }

    #[tokio::test]
    async fn frames_round_trip() {
        let mut buf = Vec::new();
        write_frame(&mut buf, b"hello").await.unwrap();
        write_frame(&mut buf, b"").await.unwrap();
        assert_eq!(&buf[..2], &[0, 5]);
        let mut r = &buf[..];
        assert_eq!(read_frame(&mut r).await.unwrap(), Some(b"hello".to_vec()));
        assert_eq!(read_frame(&mut r).await.unwrap(), Some(vec![]));
        assert_eq!(read_frame(&mut r).await.unwrap(), None);
        let mut cut: &[u8] = &[0, 9, 1];
        assert!(read_frame(&mut cut).await.is_err());
    }
}
