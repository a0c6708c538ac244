#![no_main]
//! webpep-proto's header decompressor on arbitrary table insertions and header blocks. Byte 0
//! picks the table capacity (0, 64, 300, 4096 or 16384 bytes) and the limits (up to 8 fields
//! or 256 + 64 × byte 0 bytes, so that bombs are refused often); the rest is a list of records
//! `[kind, len, payload…]`: an even kind is an `Insert` (the payload's first byte the name
//! length, the rest split there), an odd one a header block to decode. Never panics; a failed
//! insertion or decode leaves the table as it was; a decoded list is within the limits, holds
//! only valid fields, decodes the same a second time, and round-trips through a fresh
//! encoder and decoder.

use libfuzzer_sys::fuzz_target;
use webpep_proto::headers::validate_field;
use webpep_proto::{Decoder, Encoder, Frame, HeaderLimits};

fuzz_target!(|data: &[u8]| {
    let Some((b0, mut rest)) = data.split_first() else {
        return;
    };
    let capacity = [0, 64, 300, 4096, 16384][usize::from(*b0 % 5)];
    let limits = HeaderLimits {
        max_fields: 1 + usize::from(*b0 % 8),
        max_bytes: 256 + 64 * usize::from(*b0),
    };
    let mut dec = Decoder::with_limits(capacity, limits);
    while let [kind, len, tail @ ..] = rest {
        let n = usize::from(*len).min(tail.len());
        let (payload, next) = tail.split_at(n);
        rest = next;
        let before = dec.inserted();
        if kind % 2 == 0 {
            let split = payload
                .first()
                .map_or(0, |&l| usize::from(l))
                .min(payload.len().saturating_sub(1));
            let (name, value) = payload.get(1..).unwrap_or_default().split_at(split);
            match dec.on_insert(name, value) {
                Ok(()) => assert_eq!(dec.inserted(), before + 1),
                Err(_) => assert_eq!(dec.inserted(), before),
            }
            continue;
        }
        let first = dec.decode(payload);
        assert_eq!(dec.inserted(), before);
        let _ = dec.take_ack();
        let Ok(list) = first else {
            continue;
        };
        assert_eq!(
            dec.decode(payload).as_ref(),
            Ok(&list),
            "decoding changed the table"
        );
        assert!(list.len() <= limits.max_fields);
        let bytes: usize = list.iter().map(|(n, v)| n.len() + v.len() + 32).sum();
        assert!(bytes <= limits.max_bytes);
        for (n, v) in &list {
            validate_field(n, v).expect("decoded an invalid field");
        }
        // Round trip through a fresh pair, twice (the second time with acknowledgments).
        let mut e2 = Encoder::new(capacity);
        let mut d2 = Decoder::new(capacity);
        for _ in 0..2 {
            let (block, inserts) = e2.encode(&list);
            for f in inserts {
                let Frame::Insert { name, value } = f else {
                    unreachable!()
                };
                d2.on_insert(&name, &value)
                    .expect("the encoder's own insertion");
            }
            assert_eq!(d2.decode(&block).as_ref(), Ok(&list));
            e2.on_ack(d2.inserted());
        }
    }
});
