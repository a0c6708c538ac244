#![no_main]
//! The zstd coding of response bodies between the proxies (webpep-transport's coding.rs), as
//! the client decodes what the edge sends. Byte 0 picks the output piece size, byte 1 the
//! size of the pieces the coded bytes arrive in, byte 2 a declared length (0: none, else
//! 64 × byte); the rest is the coded body. Never panics; whether it decodes, and to what,
//! does not depend on how it arrives; what decodes is within the declared length. And the
//! rest, coded by the edge's encoder in pieces, decodes to itself.

use libfuzzer_sys::fuzz_target;
use webpep_transport::coding::{decode_all, BodyEncoder};

fuzz_target!(|data: &[u8]| {
    let [b0, b1, b2, rest @ ..] = data else {
        return;
    };
    let piece = 1 + 256 * usize::from(*b0);
    let step = 1 + usize::from(*b1);
    let limit = (*b2 != 0).then(|| 64 * u64::from(*b2));
    let whole = decode_all(&[rest], limit, piece);
    let cut: Vec<&[u8]> = rest.chunks(step).collect();
    let pieces = decode_all(&cut, limit, piece);
    match (&whole, &pieces) {
        (Ok(a), Ok(b)) => assert_eq!(a, b),
        (Err(_), Err(_)) => {}
        _ => panic!("{whole:?} whole, {pieces:?} in pieces of {step}"),
    }
    if let (Ok(out), Some(l)) = (&whole, limit) {
        assert!(out.len() as u64 <= l);
    }
    let mut enc = BodyEncoder::new().unwrap();
    let mut coded: Vec<Vec<u8>> = rest.chunks(step).map(|c| enc.encode(c).unwrap()).collect();
    coded.push(enc.finish().unwrap());
    let refs: Vec<&[u8]> = coded.iter().map(Vec::as_slice).collect();
    assert_eq!(decode_all(&refs, Some(rest.len() as u64), piece).unwrap(), rest);
});
