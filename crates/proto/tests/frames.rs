//! Frames: round trips at any split, unknown types skipped, malformed and oversized input.

use proptest::prelude::*;
use webpep_proto::frame::{ty, StreamKind};
use webpep_proto::{varint, BodyCoding, Error, Frame, FrameDecoder, FrameLimits, Role};

fn decode_all(bytes: &[u8], splits: &[usize]) -> Result<Vec<Frame>, Error> {
    let mut d = FrameDecoder::new();
    let mut out = Vec::new();
    let mut at = 0;
    let mut cuts: Vec<usize> = splits.iter().map(|s| s % (bytes.len() + 1)).collect();
    cuts.sort_unstable();
    cuts.push(bytes.len());
    for cut in cuts {
        d.push(&bytes[at..cut]);
        at = cut;
        while let Some(f) = d.next_frame()? {
            out.push(f);
        }
    }
    d.finish()?;
    Ok(out)
}

fn token() -> impl Strategy<Value = String> {
    "[A-Za-z0-9!#$%&'*+.^_`|~-]{1,12}"
}

fn arb_frame() -> impl Strategy<Value = Frame> {
    let bytes = || proptest::collection::vec(any::<u8>(), 0..300);
    prop_oneof![
        (
            proptest::collection::vec(any::<u32>(), 0..5),
            any::<bool>(),
            ".{0,20}"
        )
            .prop_map(|(versions, client, name)| Frame::Hello {
                versions,
                role: if client { Role::Client } else { Role::Server },
                name,
            }),
        (bytes(), bytes()).prop_map(|(name, value)| Frame::Insert { name, value }),
        (
            0..varint::MAX,
            proptest::collection::vec(0..varint::MAX, 0..5)
        )
            .prop_map(|(table_ack, blocks)| Frame::HeadAck { table_ack, blocks }),
        (
            token(),
            "[!-~]{1,80}",
            bytes(),
            any::<bool>(),
            0..varint::MAX
        )
            .prop_map(
                |(method, target, headers, background, table_ack)| Frame::Request {
                    method,
                    target,
                    headers,
                    background,
                    table_ack,
                }
            ),
        (100u16..1000, bytes(), any::<bool>(), 0..varint::MAX).prop_map(
            |(status, headers, zstd, table_ack)| Frame::Response {
                status,
                headers,
                body_coding: if zstd {
                    BodyCoding::Zstd
                } else {
                    BodyCoding::Identity
                },
                table_ack,
            }
        ),
        proptest::collection::vec(any::<u8>(), 0..3000).prop_map(Frame::Data),
        Just(Frame::End),
        (any::<u32>(), ".{0,40}").prop_map(|(code, reason)| Frame::Error { code, reason }),
        (0..varint::MAX).prop_map(|stream_id| Frame::GoAway { stream_id }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Any frames, with unknown (reserved) frame types between them, decode to the same
    /// frames whatever pieces the bytes arrive in.
    #[test]
    fn frames_round_trip_at_any_split(
        frames in proptest::collection::vec(arb_frame(), 1..8),
        unknown in proptest::collection::vec((0u64..1000, proptest::collection::vec(any::<u8>(), 0..50)), 0..4),
        splits in proptest::collection::vec(any::<usize>(), 0..10),
    ) {
        let mut bytes = Vec::new();
        for (i, f) in frames.iter().enumerate() {
            if let Some((n, payload)) = unknown.get(i) {
                // Reserved types of the form 0x1f * N + 0x21, as HTTP/3's.
                varint::encode(0x1f * n + 0x21, &mut bytes);
                varint::encode(payload.len() as u64, &mut bytes);
                bytes.extend_from_slice(payload);
            }
            f.encode(&mut bytes);
        }
        prop_assert_eq!(decode_all(&bytes, &splits)?, frames.clone());
        // One byte at a time, too.
        let all: Vec<usize> = (0..bytes.len()).collect();
        prop_assert_eq!(decode_all(&bytes, &all)?, frames);
    }

    /// Arbitrary bytes never panic, and the verdict does not depend on the split.
    #[test]
    fn arbitrary_bytes_same_verdict_at_any_split(
        bytes in proptest::collection::vec(any::<u8>(), 0..400),
        splits in proptest::collection::vec(any::<usize>(), 0..10),
    ) {
        prop_assert_eq!(decode_all(&bytes, &[]), decode_all(&bytes, &splits));
    }
}

#[test]
fn frame_type_numbers_are_the_documented_ones() {
    let cases = [
        (Frame::Data(vec![]), 0x0),
        (
            Frame::Request {
                method: "GET".into(),
                target: "http://a/".into(),
                headers: vec![0],
                background: false,
                table_ack: 0,
            },
            0x1,
        ),
        (
            Frame::Response {
                status: 200,
                headers: vec![0],
                body_coding: BodyCoding::Identity,
                table_ack: 0,
            },
            0x2,
        ),
        (Frame::End, 0x3),
        (
            Frame::Error {
                code: 1,
                reason: String::new(),
            },
            0x4,
        ),
        (
            Frame::Hello {
                versions: vec![1],
                role: Role::Client,
                name: String::new(),
            },
            0x5,
        ),
        (
            Frame::Insert {
                name: vec![],
                value: vec![],
            },
            0x6,
        ),
        (
            Frame::HeadAck {
                table_ack: 0,
                blocks: vec![],
            },
            0x7,
        ),
        (Frame::GoAway { stream_id: 0 }, 0x8),
    ];
    for (f, n) in cases {
        assert_eq!(f.ty(), n);
        assert_eq!(f.to_bytes()[0], n as u8);
    }
    // A request head as docs/protocol.md shows it, byte for byte.
    let f = Frame::Request {
        method: "GET".into(),
        target: "http://a/".into(),
        headers: vec![0x00, 0x81],
        background: true,
        table_ack: 5,
    };
    assert_eq!(
        f.to_bytes(),
        b"\x01\x12\x05\x01\x03GET\x09http://a/\x00\x81".to_vec()
    );
}

#[test]
fn where_frames_may_appear() {
    assert!(Frame::Insert {
        name: vec![],
        value: vec![]
    }
    .allowed_on(StreamKind::Control));
    assert!(!Frame::Data(vec![]).allowed_on(StreamKind::Control));
    assert!(!Frame::GoAway { stream_id: 0 }.allowed_on(StreamKind::Request));
    assert!(Frame::Error {
        code: 0,
        reason: String::new()
    }
    .allowed_on(StreamKind::Request));
}

#[test]
fn a_length_over_the_limit_is_refused_before_its_payload_arrives() {
    let mut d = FrameDecoder::new();
    let mut head = Vec::new();
    varint::encode(ty::DATA, &mut head);
    varint::encode((1 << 20) + 1, &mut head);
    d.push(&head);
    let e = d.next_frame().unwrap_err();
    assert_eq!(
        e,
        Error::FrameTooLarge {
            ty: 0,
            len: (1 << 20) + 1,
            limit: 1 << 20
        }
    );
    assert_eq!(e.code(), webpep_proto::code::FRAME_TOO_LARGE);
    // Spent: the same error again, and at the stream's end.
    assert_eq!(d.next_frame().unwrap_err(), e);
    assert_eq!(d.finish().unwrap_err(), e);

    // A head frame is held to the smaller limit; a huge (2^62 - 1) length too.
    let mut d = FrameDecoder::with_limits(FrameLimits {
        max_data: 100,
        max_head: 10,
    });
    d.push(&[ty::REQUEST as u8, 11]);
    assert!(matches!(
        d.next_frame(),
        Err(Error::FrameTooLarge {
            len: 11,
            limit: 10,
            ..
        })
    ));
    let mut d = FrameDecoder::new();
    d.push(&[0x21, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]);
    assert!(matches!(d.next_frame(), Err(Error::FrameTooLarge { .. })));
    // Exactly at the limit is fine.
    let mut d = FrameDecoder::with_limits(FrameLimits {
        max_data: 100,
        max_head: 10,
    });
    d.push(&Frame::Data(vec![7; 100]).to_bytes());
    assert_eq!(d.next_frame().unwrap(), Some(Frame::Data(vec![7; 100])));
}

#[test]
fn truncation_is_an_error_at_the_stream_end() {
    let bytes = Frame::Data(vec![1, 2, 3]).to_bytes();
    for cut in 1..bytes.len() {
        let mut d = FrameDecoder::new();
        d.push(&bytes[..cut]);
        assert_eq!(d.next_frame().unwrap(), None);
        assert_eq!(d.finish().unwrap_err(), Error::Truncated { buffered: cut });
    }
    // A varint cut inside a complete payload is malformed, not "need more".
    let mut d = FrameDecoder::new();
    d.push(&[ty::HELLO as u8, 1, 0x40]); // count: a 2-byte varint with 1 byte
    assert!(matches!(d.next_frame(), Err(Error::Malformed { .. })));
    // A lying count runs out of bytes rather than allocating.
    let mut d = FrameDecoder::new();
    d.push(&[ty::HELLO as u8, 8, 0xbf, 0xff, 0xff, 0xff, 1, 2, 3, 0]);
    assert!(matches!(d.next_frame(), Err(Error::Malformed { .. })));
}

#[test]
fn malformed_payloads() {
    let bad: &[(&[u8], &str)] = &[
        (&[ty::END as u8, 1, 0], "END with a payload"),
        (&[ty::HELLO as u8, 2, 0, 2], "unknown role"),
        (&[ty::HELLO as u8, 4, 0, 0, 0xff, 0xfe], "name not UTF-8"),
        (&[ty::REQUEST as u8, 2, 0, 2], "unknown request flags"),
        (
            &[ty::REQUEST as u8, 7, 0, 0, 0, 1, b'/', 0, 0],
            "empty method",
        ),
        (
            &[ty::REQUEST as u8, 8, 0, 0, 2, b'G', b' ', 1, b'/', 0],
            "method with a space",
        ),
        (
            &[ty::REQUEST as u8, 7, 0, 0, 1, b'G', 1, b'\n', 0],
            "target with LF",
        ),
        (&[ty::REQUEST as u8, 5, 0, 0, 1, b'G', 0], "empty target"),
        (&[ty::RESPONSE as u8, 3, 0x19, 0, 0], "status 25"),
        (&[ty::RESPONSE as u8, 4, 0x43, 0xe8, 0, 0], "status 1000"),
        (
            &[ty::RESPONSE as u8, 4, 0x40, 200, 0, 2],
            "unknown body coding",
        ),
        (
            &[ty::ERROR as u8, 5, 0xc0, 0, 0, 1, 0],
            "code over u32 (truncated)",
        ),
        (&[ty::GOAWAY as u8, 2, 0, 0], "bytes after the stream id"),
        (&[ty::INSERT as u8, 2, 5, b'a'], "name length past the end"),
    ];
    for (bytes, what) in bad {
        let mut d = FrameDecoder::new();
        d.push(bytes);
        let e = d.next_frame();
        assert!(matches!(e, Err(Error::Malformed { .. })), "{what}: {e:?}");
        assert_eq!(
            e.unwrap_err().code(),
            webpep_proto::code::PROTOCOL,
            "{what}"
        );
    }
}

/// A client speaking only version 2 meets an edge speaking 1: the edge's answer, through the
/// wire, names both.
#[test]
fn a_version_mismatch_is_answered_with_an_error_naming_both_versions() {
    use webpep_proto::version::SUPPORTED_VERSIONS;
    let hello = Frame::Hello {
        versions: vec![2],
        role: Role::Client,
        name: "webpep 9.0.0".into(),
    };
    let mut edge = FrameDecoder::new();
    edge.push(&hello.to_bytes());
    let Some(Frame::Hello { versions, role, .. }) = edge.next_frame().unwrap() else {
        panic!("not a hello")
    };
    assert_eq!(role, Role::Client);
    let mismatch = webpep_proto::negotiate(SUPPORTED_VERSIONS, &versions).unwrap_err();
    let mut client = FrameDecoder::new();
    client.push(&mismatch.to_frame().to_bytes());
    let Some(Frame::Error { code, reason }) = client.next_frame().unwrap() else {
        panic!("not an error")
    };
    assert_eq!(code, webpep_proto::code::VERSION_MISMATCH);
    assert_eq!(
        reason,
        "no protocol version in common: we speak 1, the peer speaks 2"
    );
    // Both speaking 1 and 2: 2.
    assert_eq!(webpep_proto::negotiate(&[1, 2], &[2, 1]), Ok(2));
}
