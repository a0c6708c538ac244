//! QUIC variable-length integers (RFC 9000 §16): the two high bits of the first byte give the
//! length (1, 2, 4 or 8 bytes), the rest is the value, big-endian. Values up to 2^62 − 1.

use crate::Error;

/// The largest value a varint holds: 2^62 − 1.
pub const MAX: u64 = (1 << 62) - 1;

/// Appends `value` in the shortest encoding.
///
/// # Panics
/// When `value` is over [`MAX`]: every value webpep encodes (lengths, counts, codes) is far
/// below it, so a larger one is a bug in the caller, not input.
pub fn encode(value: u64, out: &mut Vec<u8>) {
    assert!(value <= MAX, "varint value {value} is over 2^62 - 1");
    if value < 1 << 6 {
        out.push(value as u8);
    } else if value < 1 << 14 {
        out.extend_from_slice(&((value as u16) | 0x4000).to_be_bytes());
    } else if value < 1 << 30 {
        out.extend_from_slice(&((value as u32) | 0x8000_0000).to_be_bytes());
    } else {
        out.extend_from_slice(&(value | 0xc000_0000_0000_0000).to_be_bytes());
    }
}

/// How many bytes [`encode`] writes for `value`.
pub fn len(value: u64) -> usize {
    match value {
        v if v < 1 << 6 => 1,
        v if v < 1 << 14 => 2,
        v if v < 1 << 30 => 4,
        _ => 8,
    }
}

/// Reads a varint from the start of `bytes`: the value and the bytes it took, or `None` when
/// `bytes` ends inside it (more are needed). Any encoding of the right length is accepted,
/// minimal or not, as RFC 9000 allows; no byte string is an error, the `Result` is there so
/// that callers treat this like every other reader in the crate.
pub fn decode(bytes: &[u8]) -> Result<Option<(u64, usize)>, Error> {
    let Some(&first) = bytes.first() else {
        return Ok(None);
    };
    let n = 1usize << (first >> 6);
    let Some(b) = bytes.get(..n) else {
        return Ok(None);
    };
    let mut v = u64::from(first & 0x3f);
    for &byte in &b[1..] {
        v = (v << 8) | u64::from(byte);
    }
    Ok(Some((v, n)))
}

/// A cursor over a complete payload: a varint or a slice that runs past its end is a malformed
/// frame (`what` names the frame), never a request for more bytes.
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
    what: &'static str,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8], what: &'static str) -> Self {
        Reader { bytes, what }
    }

    pub(crate) fn varint(&mut self) -> Result<u64, Error> {
        match decode(self.bytes)? {
            Some((v, n)) => {
                self.bytes = &self.bytes[n..];
                Ok(v)
            }
            None => Err(self.malformed("a varint runs past the end")),
        }
    }

    /// A varint length, then that many bytes (checked against what is there before use).
    pub(crate) fn bytes_with_len(&mut self) -> Result<&'a [u8], Error> {
        let len = self.varint()?;
        if len > self.bytes.len() as u64 {
            return Err(self.malformed("a length runs past the end"));
        }
        let (head, rest) = self.bytes.split_at(len as usize);
        self.bytes = rest;
        Ok(head)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, Error> {
        let (&b, rest) = self
            .bytes
            .split_first()
            .ok_or_else(|| self.malformed("a byte is missing"))?;
        self.bytes = rest;
        Ok(b)
    }

    pub(crate) fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.bytes)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    pub(crate) fn malformed(&self, reason: &'static str) -> Error {
        Error::Malformed {
            what: self.what,
            reason,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc_9000_examples() {
        // RFC 9000 Appendix A.1.
        for (hex, v) in [
            ("c2197c5eff14e88c", 151_288_809_941_952_652u64),
            ("9d7f3e7d", 494_878_333),
            ("7bbd", 15_293),
            ("25", 37),
        ] {
            let bytes: Vec<u8> = (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                .collect();
            assert_eq!(decode(&bytes).unwrap(), Some((v, bytes.len())));
            let mut out = Vec::new();
            encode(v, &mut out);
            assert_eq!(out, bytes);
            assert_eq!(len(v), bytes.len());
        }
        // A non-minimal encoding of 37 is accepted.
        assert_eq!(decode(&[0x40, 0x25]).unwrap(), Some((37, 2)));
    }

    #[test]
    fn truncated_needs_more() {
        assert_eq!(decode(&[]).unwrap(), None);
        assert_eq!(decode(&[0xc2, 0x19, 0x7c]).unwrap(), None);
        assert_eq!(decode(&[0x40]).unwrap(), None);
        assert!(Reader::new(&[0x80, 1], "test").varint().is_err());
    }

    #[test]
    fn boundaries() {
        for v in [0, 63, 64, 16383, 16384, (1 << 30) - 1, 1 << 30, MAX] {
            let mut out = Vec::new();
            encode(v, &mut out);
            assert_eq!(out.len(), len(v));
            assert_eq!(decode(&out).unwrap(), Some((v, out.len())));
        }
    }

    #[test]
    #[should_panic(expected = "over 2^62")]
    fn over_max_is_a_caller_bug() {
        encode(MAX + 1, &mut Vec::new());
    }
}
