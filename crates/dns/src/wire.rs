//! Small wire-level helpers shared by the proxy, the stub resolver and the upstream client:
//! IDs, question matching, TCP framing (RFC 1035 §4.2.2), error replies, UDP size limits.
//! [`TcpFrames`] is the TCP framing as a pure decoder over bytes (public for the fuzz target).

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

/// Why a TCP message stream cannot be read on: its framing is lost from here on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// A length prefix of zero: no DNS message is empty (its header alone is 12 bytes).
    #[error("a zero-length DNS message over TCP")]
    Empty,
    /// A length prefix over the decoder's limit.
    #[error("a {len}-byte DNS message over TCP, over the {max}-byte limit")]
    TooLong {
        /// The declared length.
        len: usize,
        /// The decoder's limit.
        max: usize,
    },
}

/// The length-prefixed messages of a DNS TCP stream (RFC 1035 §4.2.2, RFC 7766 §8), decoded as
/// its bytes arrive: [`TcpFrames::push`] what was read, then take [`TcpFrames::next_frame`]
/// until it gives `Ok(None)`. How the bytes are split makes no difference; after an error
/// every further call gives the same error.
#[derive(Clone, Debug)]
pub struct TcpFrames {
    buf: Vec<u8>,
    /// Bytes at the front of `buf` already given out.
    start: usize,
    max_len: usize,
    error: Option<FrameError>,
}

impl TcpFrames {
    /// A decoder for messages of 1 to `max_len` bytes.
    pub fn new(max_len: usize) -> Self {
        TcpFrames {
            buf: Vec::new(),
            start: 0,
            max_len,
            error: None,
        }
    }

    /// Appends bytes read from the stream (ignored once framing is lost).
    pub fn push(&mut self, bytes: &[u8]) {
        if self.error.is_some() {
            return;
        }
        // Consumed bytes are dropped in bulk, so that many small pipelined messages in one
        // read are not each shifted down the buffer.
        if self.start > 0 && self.start >= self.buf.len() / 2 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete message; `Ok(None)` until more bytes are pushed.
    pub fn next_frame(&mut self) -> Result<Option<Vec<u8>>, FrameError> {
        if let Some(e) = self.error {
            return Err(e);
        }
        let rest = &self.buf[self.start..];
        let Some(prefix) = rest.get(..2) else {
            return Ok(None);
        };
        let len = usize::from(u16::from_be_bytes([prefix[0], prefix[1]]));
        let error = if len == 0 {
            Some(FrameError::Empty)
        } else if len > self.max_len {
            Some(FrameError::TooLong {
                len,
                max: self.max_len,
            })
        } else {
            None
        };
        if let Some(e) = error {
            self.error = Some(e);
            self.buf = Vec::new();
            self.start = 0;
            return Err(e);
        }
        let Some(body) = rest.get(2..2 + len) else {
            return Ok(None);
        };
        let frame = body.to_vec();
        self.start += 2 + len;
        if self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        }
        Ok(Some(frame))
    }

    /// Bytes pushed and not yet given out as a message: a stream that ends with some ended
    /// mid-message.
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.start
    }
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
    use proptest::collection::vec;
    use proptest::prelude::*;

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

    /// The messages of `stream` pushed in pieces cut at `cuts`, and the error that ended them.
    fn decode(max: usize, stream: &[u8], cuts: &[usize]) -> (Vec<Vec<u8>>, Option<FrameError>) {
        let mut d = TcpFrames::new(max);
        let mut out = Vec::new();
        let mut from = 0;
        for &to in cuts.iter().chain([&stream.len()]) {
            d.push(&stream[from..to]);
            from = to;
            loop {
                match d.next_frame() {
                    Ok(Some(m)) => out.push(m),
                    Ok(None) => break,
                    Err(e) => return (out, Some(e)),
                }
            }
        }
        (out, None)
    }

    fn framed(messages: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        for m in messages {
            out.extend_from_slice(&(m.len() as u16).to_be_bytes());
            out.extend_from_slice(m);
        }
        out
    }

    #[test]
    fn tcp_frames_split_anywhere_give_the_same_messages() {
        let messages: [&[u8]; 4] = [b"hello", b"x", &[7u8; 300], b"last one"];
        let stream = framed(&messages);
        let want: Vec<Vec<u8>> = messages.iter().map(|m| m.to_vec()).collect();
        assert_eq!(decode(512, &stream, &[]), (want.clone(), None));
        for i in 0..=stream.len() {
            assert_eq!(
                decode(512, &stream, &[i]),
                (want.clone(), None),
                "cut at {i}"
            );
            for j in (i..=stream.len()).step_by(7) {
                assert_eq!(
                    decode(512, &stream, &[i, j]),
                    (want.clone(), None),
                    "cut at {i}, {j}"
                );
            }
        }
        let every_byte: Vec<usize> = (0..=stream.len()).collect();
        assert_eq!(decode(512, &stream, &every_byte), (want, None));
    }

    #[test]
    fn tcp_frames_hold_a_partial_message_until_it_is_complete() {
        let mut d = TcpFrames::new(512);
        d.push(&[0]);
        assert_eq!((d.next_frame(), d.buffered()), (Ok(None), 1));
        d.push(&[3, b'a', b'b']);
        assert_eq!((d.next_frame(), d.buffered()), (Ok(None), 4));
        d.push(&[b'c', 0]);
        assert_eq!(d.next_frame(), Ok(Some(b"abc".to_vec())));
        assert_eq!((d.next_frame(), d.buffered()), (Ok(None), 1));
    }

    #[test]
    fn tcp_frames_refuse_zero_and_oversize_lengths_for_good() {
        let mut stream = framed(&[b"ok"]);
        stream.extend_from_slice(&[0, 0]);
        stream.extend_from_slice(&framed(&[b"never"]));
        assert_eq!(
            decode(512, &stream, &[3]),
            (vec![b"ok".to_vec()], Some(FrameError::Empty))
        );
        let big = framed(&[b"ok", &[1u8; 13]]);
        let too_long = FrameError::TooLong { len: 13, max: 12 };
        assert_eq!(
            decode(12, &big, &[5]),
            (vec![b"ok".to_vec()], Some(too_long))
        );
        assert_eq!(decode(13, &big, &[5]).1, None);
        // Decided at the prefix, before the body arrives; and for good.
        let mut d = TcpFrames::new(12);
        d.push(&[0, 13]);
        assert_eq!(d.next_frame(), Err(too_long));
        d.push(&framed(&[b"ok"]));
        assert_eq!(d.next_frame(), Err(too_long));
        assert_eq!(d.buffered(), 0);
    }

    proptest! {
        #[test]
        fn tcp_frames_any_messages_any_cuts(
            messages in vec(vec(any::<u8>(), 1..40), 0..8),
            cuts in vec(0usize..400, 0..6),
        ) {
            let refs: Vec<&[u8]> = messages.iter().map(Vec::as_slice).collect();
            let stream = framed(&refs);
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(stream.len())).collect();
            cuts.sort_unstable();
            prop_assert_eq!(decode(64, &stream, &cuts), (messages, None));
        }
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
