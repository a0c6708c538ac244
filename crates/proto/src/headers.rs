//! Header compression across a connection, QPACK-like (RFC 9204) without blocked streams.
//!
//! Each direction has one table pair: the sender's [`Encoder`] and the receiver's [`Decoder`].
//! A header block refers to fields by index into a static table (common request and response
//! fields, fixed by the protocol version) or into a dynamic table both sides build from the
//! encoder's `Insert` frames, which travel in order on the encoder's control stream. The
//! dynamic table is the "separate string table" of GPRSWeb (paper 001): body bytes never pass
//! through it, so they cannot evict the header strings.
//!
//! No stream ever waits for the control stream: a block refers only to entries the decoder
//! has acknowledged processing (`table_ack` in its `Request`/`Response`/`HeadAck` frames).
//! A field not yet acknowledged goes literally, and its insertion is sent for next time.
//!
//! Eviction is FIFO by byte capacity (entry size = name + value + 32, as HPACK). Because the
//! control stream can overtake a request stream, an insertion could evict an entry a block
//! still in flight refers to; so the encoder never evicts an entry referenced by a block the
//! decoder has not yet acknowledged decoding (`HeadAck` frames carry the ids of decoded
//! blocks). Both sides use the same capacity ([`TABLE_CAPACITY`] in version 1), so both
//! tables evict the same entries at the same insertion.

use std::collections::{HashMap, VecDeque};

use crate::frame::{is_tchar, Frame};
use crate::varint::{self, Reader};
use crate::Error;

/// The dynamic table's capacity in protocol version 1 (both directions, both sides).
pub const TABLE_CAPACITY: usize = 16 << 10;

/// Per-entry overhead added to name and value lengths (as HPACK and QPACK).
pub const ENTRY_OVERHEAD: usize = 32;

/// Blocks the encoder keeps track of before it stops referring to the dynamic table (so a
/// peer that never acknowledges cannot make it hold unbounded state).
pub const MAX_OUTSTANDING_BLOCKS: usize = 256;

/// Fields never inserted into the dynamic table. The table's contents outlive the request
/// that put them there, and whether a guess is already in it shows in the size of later
/// blocks, so a page able to make requests on the same connection could probe for a
/// credential byte by byte (the CRIME/HPACK lesson); these go literally, every time.
pub const NEVER_INDEXED: &[&[u8]] = &[
    b"authorization",
    b"proxy-authorization",
    b"cookie",
    b"set-cookie",
];

/// Names whose values are per object or per moment (lengths, validators, dates): inserting
/// them would only push useful entries out. They still go by static name reference.
const VOLATILE: &[&[u8]] = &[
    b"content-length",
    b"date",
    b"etag",
    b"last-modified",
    b"expires",
    b"age",
    b"if-none-match",
    b"if-modified-since",
    b"range",
    b"content-range",
];

/// The static table of version 1: (name, value), value empty where only the name is common.
pub const STATIC_TABLE: &[(&str, &str)] = &[
    ("accept", ""),
    ("accept", "*/*"),
    ("accept", "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,image/apng,*/*;q=0.8,application/signed-exchange;v=b3;q=0.7"),
    ("accept", "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"),
    ("accept", "image/avif,image/webp,image/apng,image/svg+xml,image/*,*/*;q=0.8"),
    ("accept", "text/css,*/*;q=0.1"),
    ("accept", "application/json"),
    ("accept-encoding", "gzip, deflate"),
    ("accept-encoding", "gzip, deflate, br"),
    ("accept-encoding", "gzip, deflate, br, zstd"),
    ("accept-language", ""),
    ("accept-language", "en-US,en;q=0.9"),
    ("accept-ranges", "bytes"),
    ("access-control-allow-credentials", "true"),
    ("access-control-allow-origin", "*"),
    ("age", "0"),
    ("authorization", ""),
    ("cache-control", ""),
    ("cache-control", "no-cache"),
    ("cache-control", "max-age=0"),
    ("cache-control", "no-store"),
    ("cache-control", "private"),
    ("cache-control", "public, max-age=31536000"),
    ("connection", "keep-alive"),
    ("connection", "close"),
    ("content-encoding", "gzip"),
    ("content-encoding", "br"),
    ("content-encoding", "zstd"),
    ("content-length", ""),
    ("content-length", "0"),
    ("content-range", ""),
    ("content-type", ""),
    ("content-type", "text/html; charset=utf-8"),
    ("content-type", "text/html"),
    ("content-type", "text/css"),
    ("content-type", "text/plain"),
    ("content-type", "application/javascript"),
    ("content-type", "application/json"),
    ("content-type", "application/x-www-form-urlencoded"),
    ("content-type", "image/jpeg"),
    ("content-type", "image/png"),
    ("content-type", "image/gif"),
    ("content-type", "image/webp"),
    ("content-type", "image/svg+xml"),
    ("content-type", "font/woff2"),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("expires", ""),
    ("host", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("keep-alive", ""),
    ("last-modified", ""),
    ("location", ""),
    ("origin", ""),
    ("pragma", "no-cache"),
    ("proxy-authorization", ""),
    ("proxy-connection", "keep-alive"),
    ("range", ""),
    ("referer", ""),
    ("sec-ch-ua", ""),
    ("sec-ch-ua-mobile", "?0"),
    ("sec-ch-ua-mobile", "?1"),
    ("sec-ch-ua-platform", ""),
    ("sec-fetch-dest", "document"),
    ("sec-fetch-dest", "empty"),
    ("sec-fetch-dest", "image"),
    ("sec-fetch-dest", "script"),
    ("sec-fetch-dest", "style"),
    ("sec-fetch-mode", "cors"),
    ("sec-fetch-mode", "navigate"),
    ("sec-fetch-mode", "no-cors"),
    ("sec-fetch-site", "cross-site"),
    ("sec-fetch-site", "none"),
    ("sec-fetch-site", "same-origin"),
    ("sec-fetch-site", "same-site"),
    ("sec-fetch-user", "?1"),
    ("server", ""),
    ("set-cookie", ""),
    ("strict-transport-security", "max-age=31536000"),
    ("transfer-encoding", "chunked"),
    ("upgrade-insecure-requests", "1"),
    ("user-agent", ""),
    ("vary", "accept-encoding"),
    ("vary", "origin"),
    ("via", ""),
    ("x-content-type-options", "nosniff"),
    ("x-forwarded-for", ""),
    ("x-requested-with", "XMLHttpRequest"),
];

/// One header field as the decoder gives it: (name, value).
pub type HeaderField = (Vec<u8>, Vec<u8>);

/// Limits on what a [`Decoder`] produces from one header block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderLimits {
    /// Most fields in one block.
    pub max_fields: usize,
    /// Most bytes in one block's fields, counted as name + value + 32 per field.
    pub max_bytes: usize,
}

impl Default for HeaderLimits {
    fn default() -> Self {
        HeaderLimits {
            max_fields: 256,
            max_bytes: 64 << 10,
        }
    }
}

fn entry_size(name: &[u8], value: &[u8]) -> usize {
    name.len() + value.len() + ENTRY_OVERHEAD
}

fn is_never_indexed(name: &[u8]) -> bool {
    NEVER_INDEXED.contains(&name)
}

/// A name must be a lower-case token; a value must hold no CR, LF or NUL (it becomes an
/// HTTP/1 line at the other end). Leading and trailing white space are left to HTTP.
pub fn validate_field(name: &[u8], value: &[u8]) -> Result<(), Error> {
    if name.is_empty() || !name.iter().all(|&b| is_tchar(b) && !b.is_ascii_uppercase()) {
        return Err(Error::InvalidField("a name that is not a lower-case token"));
    }
    if value.iter().any(|&b| matches!(b, b'\r' | b'\n' | 0)) {
        return Err(Error::InvalidField("a value with CR, LF or NUL"));
    }
    Ok(())
}

/// The block id a header block carries, if it refers to the dynamic table (what
/// [`Encoder::on_block_cancelled`] takes).
pub fn block_id(block: &[u8]) -> Option<u64> {
    let mut r = Reader::new(block, "header block");
    let base = r.varint().ok()?;
    if base == 0 {
        return None;
    }
    r.varint().ok()
}

// Field line representations: the first byte's high bits say which, the rest of it starts an
// integer (prefix bits, continued by a varint when all ones).
const STATIC_FIELD: u8 = 0x80; // 1xxxxxxx: static entry, 7-bit prefix
const DYNAMIC_FIELD: u8 = 0x40; // 01xxxxxx: dynamic entry (relative), 6-bit prefix
const STATIC_NAME: u8 = 0x20; // 001xxxxx: static name (5-bit prefix), literal value
const DYNAMIC_NAME: u8 = 0x10; // 0001xxxx: dynamic name (relative, 4-bit prefix), literal value
const LITERAL: u8 = 0x01; // 00000001: literal name, literal value

fn put_int(out: &mut Vec<u8>, tag: u8, bits: u32, v: u64) {
    let max = (1u64 << bits) - 1;
    if v < max {
        out.push(tag | v as u8);
    } else {
        out.push(tag | max as u8);
        varint::encode(v - max, out);
    }
}

fn get_int(first: u8, bits: u32, r: &mut Reader<'_>) -> Result<u64, Error> {
    let max = (1u64 << bits) - 1;
    let low = u64::from(first) & max;
    if low < max {
        Ok(low)
    } else {
        Ok(r.varint()? + max)
    }
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    varint::encode(bytes.len() as u64, out);
    out.extend_from_slice(bytes);
}

#[derive(Debug, Clone)]
struct Entry {
    name: Vec<u8>,
    value: Vec<u8>,
    /// Outstanding blocks referring to it (encoder side only).
    pins: u32,
}

/// A dynamic table: FIFO, entries numbered by insertion from 0.
#[derive(Debug, Clone)]
struct Table {
    entries: VecDeque<Entry>,
    /// The absolute index of `entries[0]`.
    first: u64,
    size: usize,
    capacity: usize,
}

impl Table {
    fn new(capacity: usize) -> Self {
        Table {
            entries: VecDeque::new(),
            first: 0,
            size: 0,
            capacity,
        }
    }

    fn inserted(&self) -> u64 {
        self.first + self.entries.len() as u64
    }

    fn get(&self, abs: u64) -> Option<&Entry> {
        let i = abs.checked_sub(self.first)?;
        self.entries.get(usize::try_from(i).ok()?)
    }

    fn get_mut(&mut self, abs: u64) -> Option<&mut Entry> {
        let i = abs.checked_sub(self.first)?;
        self.entries.get_mut(usize::try_from(i).ok()?)
    }

    /// Whether inserting an entry of `size` bytes would evict a pinned entry.
    fn insert_would_evict_pinned(&self, size: usize) -> bool {
        let mut free = self.capacity - self.size;
        for e in &self.entries {
            if free >= size {
                return false;
            }
            if e.pins > 0 {
                return true;
            }
            free += entry_size(&e.name, &e.value);
        }
        free < size
    }

    /// Inserts, evicting from the front until it fits (`size <= capacity` is checked by the
    /// caller).
    fn insert(&mut self, name: Vec<u8>, value: Vec<u8>) {
        let size = entry_size(&name, &value);
        while self.capacity - self.size < size {
            let Some(e) = self.entries.pop_front() else {
                break;
            };
            self.size -= entry_size(&e.name, &e.value);
            self.first += 1;
        }
        self.size += size;
        self.entries.push_back(Entry {
            name,
            value,
            pins: 0,
        });
    }
}

/// The sending side of one direction's header compression.
#[derive(Debug, Clone)]
pub struct Encoder {
    table: Table,
    /// Insertions the peer has acknowledged processing.
    acked: u64,
    /// Outstanding blocks that refer to the dynamic table: id → absolute indices referenced.
    blocks: HashMap<u64, Vec<u64>>,
    next_block: u64,
}

impl Encoder {
    /// An encoder whose table holds `capacity` bytes (the peer's decoder must use the same).
    pub fn new(capacity: usize) -> Self {
        Encoder {
            table: Table::new(capacity),
            acked: 0,
            blocks: HashMap::new(),
            next_block: 0,
        }
    }

    /// Encodes one header list: the block for the head frame, and the insertions to send on
    /// the control stream (in order, before or after the block: the block never depends on
    /// them). Names should be lower case (the tables match bytes exactly, and the decoder
    /// refuses upper-case names).
    pub fn encode<N: AsRef<[u8]>, V: AsRef<[u8]>>(
        &mut self,
        fields: &[(N, V)],
    ) -> (Vec<u8>, Vec<Frame>) {
        let can_refer = self.blocks.len() < MAX_OUTSTANDING_BLOCKS;
        let base = if can_refer { self.acked } else { 0 };
        let mut lines = Vec::new();
        let mut refs: Vec<u64> = Vec::new();
        let mut inserts = Vec::new();
        for (name, value) in fields {
            let (name, value) = (name.as_ref(), value.as_ref());
            if let Some(i) = STATIC_TABLE
                .iter()
                .position(|(n, v)| n.as_bytes() == name && v.as_bytes() == value)
            {
                put_int(&mut lines, STATIC_FIELD, 7, i as u64);
                continue;
            }
            let sensitive = is_never_indexed(name);
            if !sensitive && base > 0 {
                if let Some(abs) = self.find(base, |e| e.name == name && e.value == value) {
                    put_int(&mut lines, DYNAMIC_FIELD, 6, base - 1 - abs);
                    self.pin(abs, &mut refs);
                    continue;
                }
            }
            if !sensitive && self.worth_inserting(name, value) {
                self.table.insert(name.to_vec(), value.to_vec());
                inserts.push(Frame::Insert {
                    name: name.to_vec(),
                    value: value.to_vec(),
                });
            }
            if let Some(i) = STATIC_TABLE.iter().position(|(n, _)| n.as_bytes() == name) {
                put_int(&mut lines, STATIC_NAME, 5, i as u64);
            } else if let Some(abs) = (base > 0)
                .then(|| self.find(base, |e| e.name == name))
                .flatten()
            {
                put_int(&mut lines, DYNAMIC_NAME, 4, base - 1 - abs);
                self.pin(abs, &mut refs);
            } else {
                lines.push(LITERAL);
                put_bytes(&mut lines, name);
            }
            put_bytes(&mut lines, value);
        }
        let mut block = Vec::with_capacity(lines.len() + 4);
        if refs.is_empty() {
            varint::encode(0, &mut block);
        } else {
            let id = self.next_block;
            self.next_block += 1;
            self.blocks.insert(id, refs);
            varint::encode(base, &mut block);
            varint::encode(id, &mut block);
        }
        block.extend_from_slice(&lines);
        (block, inserts)
    }

    /// The newest live entry below `base` matching `pred` (newest: the last to be evicted).
    fn find(&self, base: u64, pred: impl Fn(&Entry) -> bool) -> Option<u64> {
        let end = base.min(self.table.inserted());
        (self.table.first..end)
            .rev()
            .find(|&abs| self.table.get(abs).is_some_and(&pred))
    }

    fn pin(&mut self, abs: u64, refs: &mut Vec<u64>) {
        if let Some(e) = self.table.get_mut(abs) {
            e.pins += 1;
            refs.push(abs);
        }
    }

    fn worth_inserting(&self, name: &[u8], value: &[u8]) -> bool {
        let size = entry_size(name, value);
        size <= self.table.capacity / 4
            && !VOLATILE.contains(&name)
            && !self
                .table
                .entries
                .iter()
                .any(|e| e.name == name && e.value == value)
            && !self.table.insert_would_evict_pinned(size)
    }

    /// The peer has processed `count` of this encoder's insertions (its `table_ack`). Counts
    /// only grow; one above what was sent is a broken peer and is taken as what was sent.
    pub fn on_ack(&mut self, count: u64) {
        self.acked = self.acked.max(count.min(self.table.inserted()));
    }

    /// The peer has decoded these blocks (its `HeadAck`): their entries may be evicted again.
    /// Unknown ids (already released) are ignored.
    pub fn on_block_ack(&mut self, ids: &[u64]) {
        for id in ids {
            self.release(*id);
        }
    }

    /// A `HeadAck` frame's contents: [`Encoder::on_ack`] and [`Encoder::on_block_ack`].
    pub fn on_head_ack(&mut self, table_ack: u64, blocks: &[u64]) {
        self.on_ack(table_ack);
        self.on_block_ack(blocks);
    }

    /// The block (by [`block_id`]) will never be decoded: the peer reset or stopped its stream
    /// before reading the head. Only call it then; a block the peer may still decode must stay
    /// pinned until its `HeadAck`.
    pub fn on_block_cancelled(&mut self, id: u64) {
        self.release(id);
    }

    fn release(&mut self, id: u64) {
        for abs in self.blocks.remove(&id).unwrap_or_default() {
            if let Some(e) = self.table.get_mut(abs) {
                e.pins = e.pins.saturating_sub(1);
            }
        }
    }

    /// Insertions sent so far.
    pub fn inserted(&self) -> u64 {
        self.table.inserted()
    }

    /// Blocks that refer to the dynamic table and are not yet acknowledged.
    pub fn outstanding_blocks(&self) -> usize {
        self.blocks.len()
    }
}

/// The receiving side of one direction's header compression.
#[derive(Debug, Clone)]
pub struct Decoder {
    table: Table,
    limits: HeaderLimits,
    /// Ids of blocks decoded since the last [`Decoder::take_ack`].
    decoded: Vec<u64>,
}

impl Decoder {
    /// A decoder whose table holds `capacity` bytes (the peer's encoder must use the same),
    /// with the default [`HeaderLimits`].
    pub fn new(capacity: usize) -> Self {
        Self::with_limits(capacity, HeaderLimits::default())
    }

    pub fn with_limits(capacity: usize, limits: HeaderLimits) -> Self {
        Decoder {
            table: Table::new(capacity),
            limits,
            decoded: Vec::new(),
        }
    }

    /// An `Insert` frame from the peer's control stream. An error here breaks the table
    /// shared with the peer, so it is a connection error.
    pub fn on_insert(&mut self, name: &[u8], value: &[u8]) -> Result<(), Error> {
        validate_field(name, value)?;
        let size = entry_size(name, value);
        if size > self.table.capacity {
            return Err(Error::EntryTooLarge {
                size,
                capacity: self.table.capacity,
            });
        }
        self.table.insert(name.to_vec(), value.to_vec());
        Ok(())
    }

    /// Insertions processed: the `table_ack` to send.
    pub fn inserted(&self) -> u64 {
        self.table.inserted()
    }

    /// A `HeadAck` to send on the control stream when blocks that refer to the table have
    /// been decoded since the last call (`None` otherwise). Sending it lets the peer's encoder
    /// evict the entries those blocks referred to.
    pub fn take_ack(&mut self) -> Option<Frame> {
        if self.decoded.is_empty() {
            return None;
        }
        Some(Frame::HeadAck {
            table_ack: self.inserted(),
            blocks: std::mem::take(&mut self.decoded),
        })
    }

    /// Decodes a header block. It changes nothing in the table, so an error is the stream's
    /// alone (reset that request); the connection's table stays good.
    pub fn decode(&mut self, block: &[u8]) -> Result<Vec<HeaderField>, Error> {
        let mut r = Reader::new(block, "header block");
        let base = r.varint()?;
        if base > 0 {
            let id = r.varint()?;
            // Acknowledged whether or not the rest decodes: either way this block is done
            // with the table. Bounded, for a caller that never takes its acks (an honest
            // encoder has at most MAX_OUTSTANDING_BLOCKS outstanding).
            if self.decoded.len() < 4 * MAX_OUTSTANDING_BLOCKS {
                self.decoded.push(id);
            }
            if base > self.table.inserted() {
                return Err(Error::Unacknowledged {
                    required: base,
                    inserted: self.table.inserted(),
                });
            }
        }
        let mut fields = Vec::new();
        let mut bytes = 0usize;
        while !r.is_empty() {
            let first = r.u8()?;
            let (name, value): (&[u8], &[u8]) = if first & STATIC_FIELD != 0 {
                let (n, v) = self.static_entry(get_int(first, 7, &mut r)?)?;
                (n.as_bytes(), v.as_bytes())
            } else if first & DYNAMIC_FIELD != 0 {
                let e = self.dynamic_entry(base, get_int(first, 6, &mut r)?)?;
                (&e.name, &e.value)
            } else if first & STATIC_NAME != 0 {
                let (n, _) = self.static_entry(get_int(first, 5, &mut r)?)?;
                let value = r.bytes_with_len()?;
                validate_field(b"x", value)?;
                (n.as_bytes(), value)
            } else if first & DYNAMIC_NAME != 0 {
                let e = self.dynamic_entry(base, get_int(first, 4, &mut r)?)?;
                let value = r.bytes_with_len()?;
                validate_field(b"x", value)?;
                (&e.name, value)
            } else if first == LITERAL {
                let name = r.bytes_with_len()?;
                let value = r.bytes_with_len()?;
                validate_field(name, value)?;
                (name, value)
            } else {
                return Err(r.malformed("unknown field line representation"));
            };
            if fields.len() >= self.limits.max_fields {
                return Err(Error::TooManyFields {
                    limit: self.limits.max_fields,
                });
            }
            bytes += entry_size(name, value);
            if bytes > self.limits.max_bytes {
                return Err(Error::HeaderListTooLarge {
                    limit: self.limits.max_bytes,
                });
            }
            fields.push((name.to_vec(), value.to_vec()));
        }
        Ok(fields)
    }

    fn static_entry(&self, index: u64) -> Result<(&'static str, &'static str), Error> {
        usize::try_from(index)
            .ok()
            .and_then(|i| STATIC_TABLE.get(i))
            .copied()
            .ok_or(Error::StaticIndex {
                index,
                len: STATIC_TABLE.len(),
            })
    }

    fn dynamic_entry(&self, base: u64, rel: u64) -> Result<&Entry, Error> {
        let err = |index| Error::DynamicIndex {
            index,
            first: self.table.first,
            inserted: self.table.inserted(),
        };
        let Some(abs) = base.checked_sub(1).and_then(|b| b.checked_sub(rel)) else {
            // Past the block's base: an entry the encoder had no acknowledgment for.
            return Err(Error::Malformed {
                what: "header block",
                reason: "a dynamic reference past the block's base",
            });
        };
        self.table.get(abs).ok_or_else(|| err(abs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_table_fits_and_is_valid() {
        assert!(STATIC_TABLE.len() < 127, "{}", STATIC_TABLE.len());
        for (n, v) in STATIC_TABLE {
            validate_field(n.as_bytes(), v.as_bytes()).unwrap();
        }
        // No duplicate entries.
        for (i, a) in STATIC_TABLE.iter().enumerate() {
            assert!(!STATIC_TABLE[i + 1..].contains(a), "{a:?} twice");
        }
    }

    #[test]
    fn prefix_ints_round_trip() {
        for bits in [4, 5, 6, 7] {
            for v in [
                0,
                1,
                14,
                15,
                16,
                30,
                31,
                62,
                63,
                64,
                126,
                127,
                128,
                1000,
                1 << 40,
            ] {
                let mut out = Vec::new();
                put_int(&mut out, 0, bits, v);
                let mut r = Reader::new(&out[1..], "t");
                assert_eq!(get_int(out[0], bits, &mut r).unwrap(), v, "{bits} {v}");
                assert!(r.is_empty());
            }
        }
    }
}
