//! A strict reader for the few fields of an X.509 certificate that a CA store needs: the
//! subject (raw, and as attributes), the public key, the validity, basic constraints, key usage
//! and the subject key identifier. Everything else is skipped, not interpreted. The input is
//! untrusted (a `ca.pem` anyone could have edited), so every length is checked and nothing
//! panics; the fuzz target `ca_store` drives this through [`crate::CaStore::from_pem`].

use time::{Date, Month, OffsetDateTime, PrimitiveDateTime, Time};

const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const BOOLEAN: u8 = 0x01;
const INTEGER: u8 = 0x02;
const BIT_STRING: u8 = 0x03;
const OCTET_STRING: u8 = 0x04;
const OID: u8 = 0x06;
const UTC_TIME: u8 = 0x17;
const GENERALIZED_TIME: u8 = 0x18;
const VERSION: u8 = 0xa0;
const EXTENSIONS: u8 = 0xa3;

/// id-ce-basicConstraints, id-ce-keyUsage, id-ce-subjectKeyIdentifier (2.5.29.19, .15, .14).
const BASIC_CONSTRAINTS: &[u8] = &[0x55, 0x1d, 0x13];
const KEY_USAGE: &[u8] = &[0x55, 0x1d, 0x0f];
const SUBJECT_KEY_ID: &[u8] = &[0x55, 0x1d, 0x0e];

/// What was wrong with the certificate, in words for an error message.
pub type DerError = &'static str;

/// One attribute of the subject: its type (OID arcs) and its value's tag and bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attribute {
    pub oid: Vec<u64>,
    pub tag: u8,
    pub value: Vec<u8>,
}

/// The fields of a certificate that a CA store uses.
#[derive(Debug, Clone)]
pub struct CertFields {
    /// The subject Name, the whole DER element (what an issued certificate's issuer must equal).
    pub subject_der: Vec<u8>,
    /// The subject's relative distinguished names, each a list of attributes.
    pub subject: Vec<Vec<Attribute>>,
    /// The SubjectPublicKeyInfo, the whole DER element.
    pub spki_der: Vec<u8>,
    pub not_before: OffsetDateTime,
    pub not_after: OffsetDateTime,
    /// basicConstraints with cA = TRUE.
    pub is_ca: bool,
    /// No keyUsage extension, or one that allows keyCertSign.
    pub may_sign_certs: bool,
    pub subject_key_id: Option<Vec<u8>>,
}

/// A cursor over DER elements.
struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Reader { rest: bytes }
    }

    fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }

    fn peek_tag(&self) -> Option<u8> {
        self.rest.first().copied()
    }

    /// The next element: its tag, its contents and its whole encoding.
    fn element(&mut self) -> Result<(u8, &'a [u8], &'a [u8]), DerError> {
        let input = self.rest;
        let (&tag, after_tag) = input.split_first().ok_or("truncated")?;
        if tag & 0x1f == 0x1f {
            return Err("multi-byte tags are not used in certificates");
        }
        let (&first, after_len) = after_tag.split_first().ok_or("truncated")?;
        let (len, after_len) = match first {
            0..=0x7f => (first as usize, after_len),
            0x81..=0x84 => {
                let n = (first & 0x7f) as usize;
                if after_len.len() < n {
                    return Err("truncated");
                }
                let (bytes, after) = after_len.split_at(n);
                if bytes[0] == 0 {
                    return Err("length not in its shortest form");
                }
                let len = bytes.iter().fold(0usize, |acc, &b| (acc << 8) | b as usize);
                if len < 0x80 {
                    return Err("length not in its shortest form");
                }
                (len, after)
            }
            _ => return Err("indefinite or oversized length"),
        };
        if after_len.len() < len {
            return Err("truncated");
        }
        let (contents, rest) = after_len.split_at(len);
        let whole_len = input.len() - rest.len();
        self.rest = rest;
        Ok((tag, contents, &input[..whole_len]))
    }

    /// The contents of the next element, which must have tag `tag`.
    fn expect(&mut self, tag: u8, what: DerError) -> Result<&'a [u8], DerError> {
        match self.element()? {
            (t, contents, _) if t == tag => Ok(contents),
            _ => Err(what),
        }
    }

    /// Like [`Reader::expect`], but returns the element's whole encoding.
    fn expect_whole(&mut self, tag: u8, what: DerError) -> Result<&'a [u8], DerError> {
        match self.element()? {
            (t, _, whole) if t == tag => Ok(whole),
            _ => Err(what),
        }
    }

    fn finish(&self, what: DerError) -> Result<(), DerError> {
        if self.is_empty() {
            Ok(())
        } else {
            Err(what)
        }
    }
}

/// Reads the fields of a DER certificate.
pub fn read_certificate(der: &[u8]) -> Result<CertFields, DerError> {
    let mut outer = Reader::new(der);
    let cert = outer.expect(SEQUENCE, "not a certificate (no outer SEQUENCE)")?;
    outer.finish("bytes after the certificate")?;
    let mut cert = Reader::new(cert);
    let tbs = cert.expect(SEQUENCE, "no tbsCertificate")?;
    cert.expect(SEQUENCE, "no signatureAlgorithm")?;
    cert.expect(BIT_STRING, "no signature")?;
    cert.finish("bytes after the signature")?;

    let mut tbs = Reader::new(tbs);
    if tbs.peek_tag() == Some(VERSION) {
        tbs.element()?;
    }
    tbs.expect(INTEGER, "no serial number")?;
    tbs.expect(SEQUENCE, "no signature algorithm in tbsCertificate")?;
    tbs.expect(SEQUENCE, "no issuer")?;
    let mut validity = Reader::new(tbs.expect(SEQUENCE, "no validity")?);
    let not_before = read_time(&mut validity)?;
    let not_after = read_time(&mut validity)?;
    validity.finish("bytes after the validity")?;
    let subject_der = tbs.expect_whole(SEQUENCE, "no subject")?;
    let subject = read_name(subject_der)?;
    let spki_der = tbs.expect_whole(SEQUENCE, "no subjectPublicKeyInfo")?;

    let mut fields = CertFields {
        subject_der: subject_der.to_vec(),
        subject,
        spki_der: spki_der.to_vec(),
        not_before,
        not_after,
        is_ca: false,
        may_sign_certs: true,
        subject_key_id: None,
    };
    while let Some(tag) = tbs.peek_tag() {
        let (_, contents, _) = tbs.element()?;
        if tag == EXTENSIONS {
            let mut wrapper = Reader::new(contents);
            let list = wrapper.expect(SEQUENCE, "extensions are not a SEQUENCE")?;
            wrapper.finish("bytes after the extensions")?;
            read_extensions(list, &mut fields)?;
        }
    }
    Ok(fields)
}

/// When a certificate (DER) stops being valid; `None` when it cannot be read. The edge caps
/// how long a response from an `https://` origin may be reused with its origin's chain.
pub fn certificate_expiry(der: &[u8]) -> Option<std::time::SystemTime> {
    read_certificate(der).ok().map(|f| f.not_after.into())
}

fn read_extensions(list: &[u8], fields: &mut CertFields) -> Result<(), DerError> {
    let mut list = Reader::new(list);
    let mut seen: Vec<&[u8]> = Vec::new();
    while !list.is_empty() {
        let mut ext = Reader::new(list.expect(SEQUENCE, "an extension is not a SEQUENCE")?);
        let oid = ext.expect(OID, "an extension has no OID")?;
        if seen.contains(&oid) {
            return Err("an extension appears twice");
        }
        seen.push(oid);
        if ext.peek_tag() == Some(BOOLEAN) {
            ext.element()?;
        }
        let value = ext.expect(OCTET_STRING, "an extension has no value")?;
        ext.finish("bytes after an extension's value")?;
        if oid == BASIC_CONSTRAINTS {
            fields.is_ca = read_basic_constraints(value)?;
        } else if oid == KEY_USAGE {
            fields.may_sign_certs = read_key_cert_sign(value)?;
        } else if oid == SUBJECT_KEY_ID {
            let mut r = Reader::new(value);
            let id = r.expect(OCTET_STRING, "subjectKeyIdentifier is not an OCTET STRING")?;
            r.finish("bytes after the subjectKeyIdentifier")?;
            fields.subject_key_id = Some(id.to_vec());
        }
    }
    Ok(())
}

/// basicConstraints ::= SEQUENCE { cA BOOLEAN DEFAULT FALSE, pathLenConstraint INTEGER OPTIONAL }
fn read_basic_constraints(value: &[u8]) -> Result<bool, DerError> {
    let mut outer = Reader::new(value);
    let mut seq = Reader::new(outer.expect(SEQUENCE, "basicConstraints is not a SEQUENCE")?);
    outer.finish("bytes after basicConstraints")?;
    let mut is_ca = false;
    if seq.peek_tag() == Some(BOOLEAN) {
        let flag = seq.expect(BOOLEAN, "basicConstraints cA")?;
        is_ca = match flag {
            [0xff] => true,
            [0x00] => false,
            _ => return Err("basicConstraints cA is not a DER BOOLEAN"),
        };
    }
    if seq.peek_tag() == Some(INTEGER) {
        seq.element()?;
    }
    seq.finish("bytes after basicConstraints' fields")?;
    Ok(is_ca)
}

/// Whether keyUsage (a BIT STRING) has bit 5, keyCertSign.
fn read_key_cert_sign(value: &[u8]) -> Result<bool, DerError> {
    let mut r = Reader::new(value);
    let bits = r.expect(BIT_STRING, "keyUsage is not a BIT STRING")?;
    r.finish("bytes after keyUsage")?;
    match bits {
        [unused, first, ..] if *unused < 8 => Ok(first & 0x04 != 0),
        [0] => Ok(false),
        _ => Err("keyUsage is not a valid BIT STRING"),
    }
}

/// Name ::= SEQUENCE OF SET OF SEQUENCE { type OID, value ANY }
fn read_name(whole: &[u8]) -> Result<Vec<Vec<Attribute>>, DerError> {
    let mut outer = Reader::new(whole);
    let mut rdns = Reader::new(outer.expect(SEQUENCE, "the subject is not a SEQUENCE")?);
    let mut name = Vec::new();
    while !rdns.is_empty() {
        let mut set = Reader::new(rdns.expect(SET, "a subject RDN is not a SET")?);
        let mut rdn = Vec::new();
        while !set.is_empty() {
            let mut atv = Reader::new(set.expect(SEQUENCE, "a subject attribute is malformed")?);
            let oid = read_oid(atv.expect(OID, "a subject attribute has no type")?)?;
            let (tag, value, _) = atv.element()?;
            atv.finish("bytes after a subject attribute")?;
            rdn.push(Attribute {
                oid,
                tag,
                value: value.to_vec(),
            });
        }
        name.push(rdn);
    }
    Ok(name)
}

/// OID contents → arcs. Sub-identifiers are limited to 56 bits, more than any real OID uses.
fn read_oid(bytes: &[u8]) -> Result<Vec<u64>, DerError> {
    let mut subids = Vec::new();
    let mut value: u64 = 0;
    let mut digits = 0;
    for &b in bytes {
        if digits == 0 && b == 0x80 {
            return Err("an OID is not in its shortest form");
        }
        digits += 1;
        if digits > 8 {
            return Err("an OID sub-identifier is too large");
        }
        value = (value << 7) | u64::from(b & 0x7f);
        if b & 0x80 == 0 {
            subids.push(value);
            value = 0;
            digits = 0;
        }
    }
    if digits != 0 || subids.is_empty() {
        return Err("an OID is truncated");
    }
    let first = subids[0];
    let (a, b) = match first {
        0..=39 => (0, first),
        40..=79 => (1, first - 40),
        _ => (2, first - 80),
    };
    let mut arcs = vec![a, b];
    arcs.extend_from_slice(&subids[1..]);
    Ok(arcs)
}

/// UTCTime `YYMMDDHHMMSSZ` or GeneralizedTime `YYYYMMDDHHMMSSZ`, as RFC 5280 requires them.
fn read_time(r: &mut Reader<'_>) -> Result<OffsetDateTime, DerError> {
    let (tag, text, _) = r.element()?;
    let (year, rest) = match (tag, text.len()) {
        (UTC_TIME, 13) => {
            let yy = digits(&text[..2])?;
            (if yy < 50 { 2000 + yy } else { 1900 + yy }, &text[2..])
        }
        (GENERALIZED_TIME, 15) => (digits(&text[..4])?, &text[4..]),
        _ => return Err("a validity time is not a UTCTime or GeneralizedTime in UTC"),
    };
    if rest[10] != b'Z' {
        return Err("a validity time is not in UTC");
    }
    let field = |i: usize| digits(&rest[i..i + 2]).map(|v| v as u8);
    let month = Month::try_from(field(0)?).map_err(|_| "a validity time has a bad month")?;
    let date = Date::from_calendar_date(year as i32, month, field(2)?)
        .map_err(|_| "a validity time has a bad date")?;
    let time = Time::from_hms(field(4)?, field(6)?, field(8)?)
        .map_err(|_| "a validity time has a bad time of day")?;
    Ok(PrimitiveDateTime::new(date, time).assume_utc())
}

fn digits(bytes: &[u8]) -> Result<u32, DerError> {
    bytes.iter().try_fold(0u32, |acc, &b| {
        if b.is_ascii_digit() {
            Ok(acc * 10 + u32::from(b - b'0'))
        } else {
            Err("a validity time has a non-digit")
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_must_be_minimal_and_within_the_input() {
        assert!(Reader::new(&[0x30, 0x81, 0x05]).element().is_err());
        assert!(Reader::new(&[0x30, 0x03, 0x01]).element().is_err());
        assert!(Reader::new(&[0x30, 0x80]).element().is_err());
        assert!(Reader::new(&[0x1f, 0x01, 0x00]).element().is_err());
        let (tag, contents, whole) = Reader::new(&[0x04, 0x01, 0xaa, 0x00]).element().unwrap();
        assert_eq!(
            (tag, contents, whole),
            (0x04, &[0xaa][..], &[0x04, 0x01, 0xaa][..])
        );
    }

    #[test]
    fn oids_and_times() {
        assert_eq!(read_oid(&[0x55, 0x04, 0x03]).unwrap(), vec![2, 5, 4, 3]);
        assert_eq!(
            read_oid(&[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d]).unwrap(),
            vec![1, 2, 840, 113549]
        );
        assert!(read_oid(&[0x55, 0x84]).is_err());
        assert!(read_oid(&[0x80, 0x01]).is_err());
        let mut utc = Reader::new(b"\x17\x0d491231235959Z");
        assert_eq!(read_time(&mut utc).unwrap().year(), 2049);
        let mut gen = Reader::new(b"\x18\x0f20500101000000Z");
        assert_eq!(read_time(&mut gen).unwrap().unix_timestamp(), 2_524_608_000);
        assert!(read_time(&mut Reader::new(b"\x17\x0d491331235959Z")).is_err());
        assert!(read_time(&mut Reader::new(b"\x17\x0d4912312359590")).is_err());
    }
}
