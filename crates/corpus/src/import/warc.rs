//! WARC 1.0/1.1 import.
//!
//! The file may be plain, gzip-compressed per record (the usual `.warc.gz`) or as a whole.
//! `response` records carry HTTP responses (status line, headers, body; chunked transfer and
//! gzip/deflate content encodings are undone); `revisit` records of the identical-payload
//! profile reuse the payload of the response with the same digest. The first capture of a URL
//! wins. Every 2xx HTML response whose embedded objects (found by a tag/attribute scan of the
//! HTML and its stylesheets and frames) are in the archive becomes a page: the root, then those
//! objects in discovery order (a redirect in the archive brings its target along).
//! Decompression is bounded ([`Limits`]): a body's content coding is undone up to the object
//! limit, and the whole file and the decoded bodies together up to the import limit.

use std::collections::HashMap;
use std::fs;
use std::io::Read;
use std::path::Path;

use flate2::read::{DeflateDecoder, GzDecoder, MultiGzDecoder, ZlibDecoder};

use super::*;
use crate::scan::{discover, resolve};

struct Record {
    headers: Vec<(String, String)>,
    block: std::ops::Range<usize>,
    offset: usize,
}

impl Record {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

fn find(h: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    if from >= h.len() {
        return None;
    }
    h[from..]
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|p| p + from)
}

/// Header block end: (index of the blank line, length of the terminator).
fn header_end(d: &[u8], from: usize) -> Option<(usize, usize)> {
    let crlf = find(d, b"\r\n\r\n", from).map(|i| (i, 4));
    let lf = find(d, b"\n\n", from).map(|i| (i, 2));
    match (crlf, lf) {
        (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
        (a, b) => a.or(b),
    }
}

fn parse_headers(text: &str) -> (String, Vec<(String, String)>) {
    let mut lines = text.split('\n').map(|l| l.trim_end_matches('\r'));
    let first = lines.next().unwrap_or("").to_string();
    let mut headers: Vec<(String, String)> = Vec::new();
    for l in lines {
        if l.starts_with([' ', '\t']) {
            if let Some(last) = headers.last_mut() {
                last.1.push(' ');
                last.1.push_str(l.trim());
            }
            continue;
        }
        if let Some((k, v)) = l.split_once(':') {
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    (first, headers)
}

fn parse_records(d: &[u8]) -> Result<Vec<Record>, String> {
    let mut out = Vec::new();
    let mut pos = 0;
    loop {
        while pos < d.len() && (d[pos] == b'\r' || d[pos] == b'\n') {
            pos += 1;
        }
        if pos >= d.len() {
            break;
        }
        if !d[pos..].starts_with(b"WARC/") {
            return Err(format!("no WARC record at byte {pos}"));
        }
        let (he, tl) = header_end(d, pos)
            .ok_or_else(|| format!("record at byte {pos} is truncated (headers never end)"))?;
        let (version, headers) = parse_headers(&String::from_utf8_lossy(&d[pos..he]));
        let version = version.trim();
        if version != "WARC/1.0" && version != "WARC/1.1" && version != "WARC/0.18" {
            return Err(format!(
                "record at byte {pos}: unsupported version {version}"
            ));
        }
        let len: usize = headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
            .and_then(|(_, v)| v.trim().parse().ok())
            .ok_or_else(|| format!("record at byte {pos} has no valid Content-Length"))?;
        let start = he + tl;
        let end = start
            .checked_add(len)
            .filter(|&e| e <= d.len())
            .ok_or_else(|| {
                format!(
                    "record at byte {pos} is truncated (Content-Length {len}, {} bytes left)",
                    d.len() - start.min(d.len())
                )
            })?;
        out.push(Record {
            headers,
            block: start..end,
            offset: pos,
        });
        pos = end;
    }
    Ok(out)
}

fn dechunk(b: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    loop {
        let le = find(b, b"\n", i)?;
        let line = String::from_utf8_lossy(&b[i..le]);
        let size_s = line
            .trim()
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_string();
        let n = usize::from_str_radix(&size_s, 16).ok()?;
        i = le + 1;
        if n == 0 {
            return Some(out);
        }
        let end = i.checked_add(n)?;
        if end > b.len() {
            return None;
        }
        out.extend_from_slice(&b[i..end]);
        i = end;
        if b[i..].starts_with(b"\r\n") {
            i += 2;
        } else if b[i..].starts_with(b"\n") {
            i += 1;
        }
    }
}

/// Undoes a content encoding, stopping one byte past `limit` (the caller cuts the body to the
/// limit with a warning), so a compressed bomb costs at most that much memory.
fn decode(enc: &str, b: &[u8], limit: u64) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let cap = limit.saturating_add(1);
    match enc.trim().to_ascii_lowercase().as_str() {
        "gzip" | "x-gzip" => GzDecoder::new(b).take(cap).read_to_end(&mut out).ok()?,
        "deflate" => match ZlibDecoder::new(b).take(cap).read_to_end(&mut out) {
            Ok(n) => n,
            Err(_) => {
                out.clear();
                DeflateDecoder::new(b)
                    .take(cap)
                    .read_to_end(&mut out)
                    .ok()?
            }
        },
        "identity" | "" => return Some(b.to_vec()),
        _ => return None,
    };
    Some(out)
}

struct Resp {
    status: u16,
    mime: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    last_modified: String,
}

type Headers = Vec<(String, String)>;

/// Parses an HTTP response message: (status, headers, raw body).
fn parse_http(b: &[u8]) -> Option<(u16, Headers, &[u8])> {
    let (he, tl) = header_end(b, 0)?;
    let (status_line, headers) = parse_headers(&String::from_utf8_lossy(&b[..he]));
    let mut parts = status_line.split_whitespace();
    let proto = parts.next()?;
    if !proto.starts_with("HTTP/") {
        return None;
    }
    let status: u16 = parts.next()?.parse().ok()?;
    Some((status, headers, &b[he + tl..]))
}

fn hget<'a>(h: &'a [(String, String)], name: &str) -> Option<&'a str> {
    h.iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// Imports a WARC file as corpus `name` in `out_dir`.
pub fn import_warc(path: &Path, out_dir: &Path, name: &str) -> Result<Corpus, CorpusError> {
    import_warc_limited(path, out_dir, name, Limits::default())
}

pub(crate) fn import_warc_limited(
    path: &Path,
    out_dir: &Path,
    name: &str,
    limits: Limits,
) -> Result<Corpus, CorpusError> {
    let bad = |message: String| CorpusError::Import {
        path: path.to_path_buf(),
        message,
    };
    let raw = fs::read(path).map_err(|e| crate::store::io(path, e))?;
    let data = if raw.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        MultiGzDecoder::new(&raw[..])
            .take(limits.total.saturating_add(1))
            .read_to_end(&mut out)
            .map_err(|e| bad(format!("truncated or corrupt gzip data: {e}")))?;
        if out.len() as u64 > limits.total {
            return Err(limits.exceeded(path, "the gzip data decompresses to"));
        }
        out
    } else {
        raw
    };
    let records = parse_records(&data).map_err(|m| bad(format!("not a valid WARC file: {m}")))?;
    let file = path
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();

    let mut notes = Notes::default();
    let mut by_digest: HashMap<String, (Vec<u8>, String)> = HashMap::new();
    let mut resps: Vec<(String, Resp)> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut held = 0u64;
    for r in &records {
        let typ = r.header("WARC-Type").unwrap_or("").to_ascii_lowercase();
        if typ != "response" && typ != "revisit" {
            continue;
        }
        let Some(target) = r.header("WARC-Target-URI") else {
            notes.count("records without WARC-Target-URI skipped");
            continue;
        };
        let target = target.trim().trim_start_matches('<').trim_end_matches('>');
        let Ok(mut u) = url::Url::parse(target) else {
            notes.count("records with a bad target URI skipped");
            continue;
        };
        if u.scheme() != "http" && u.scheme() != "https" {
            continue;
        }
        u.set_fragment(None);
        let url = u.to_string();
        let Some((status, headers, raw_body)) = parse_http(&data[r.block.clone()]) else {
            notes.note_as(
                "records without a parsable HTTP response skipped",
                format!(
                    "record at byte {} ({url}) has no parsable HTTP response",
                    r.offset
                ),
            );
            continue;
        };
        let digest = r.header("WARC-Payload-Digest").map(str::to_string);
        let mut keep: Vec<(String, String)> = headers
            .iter()
            .filter(|(k, _)| keep_header(k))
            .cloned()
            .collect();
        let mime = hget(&headers, "content-type")
            .map(str::to_string)
            .unwrap_or_else(|| guess_type(&url).to_string());
        let body: Vec<u8> = if typ == "revisit" {
            match digest.as_ref().and_then(|d| by_digest.get(d)) {
                Some((b, _)) => b.clone(),
                None => {
                    notes.count("revisit records without an earlier payload skipped");
                    continue;
                }
            }
        } else {
            let mut b = raw_body.to_vec();
            if hget(&headers, "transfer-encoding")
                .map(|t| t.to_ascii_lowercase().contains("chunked"))
                .unwrap_or(false)
            {
                // Many WARC writers store the body already de-chunked but keep the header.
                match dechunk(&b) {
                    Some(x) => b = x,
                    None => {
                        notes.count("bodies stored de-chunked despite Transfer-Encoding: chunked")
                    }
                }
            }
            if let Some(enc) = hget(&headers, "content-encoding") {
                match decode(enc, &b, limits.object) {
                    Some(x) => b = x,
                    None => {
                        notes.note_as(
                            "bodies stored in a content coding this build cannot decode",
                            format!("{url}: content encoding {enc} kept"),
                        );
                        keep.push(("Content-Encoding".into(), enc.to_string()));
                    }
                }
            }
            b
        };
        // Decoded bodies are held in memory until the pages are built: bound them together.
        held += body.len() as u64;
        if held > limits.total {
            return Err(limits.exceeded(path, "the response bodies decode to"));
        }
        if let Some(d) = &digest {
            if typ == "response" {
                by_digest
                    .entry(d.clone())
                    .or_insert_with(|| (body.clone(), mime.clone()));
            }
        }
        if index.contains_key(&url) {
            notes.count("repeated captures of a URL (first kept)");
            continue;
        }
        if (100..200).contains(&status) {
            continue;
        }
        let bodiless = (300..400).contains(&status) || status == 204 || status == 205;
        let mut body = if bodiless { Vec::new() } else { body };
        if body.len() as u64 > limits.object {
            notes.note_as(
                "bodies capped",
                format!(
                    "{url}: {} bytes or more, capped at {}",
                    body.len(),
                    limits.object
                ),
            );
            body.truncate(limits.object as usize);
        }
        let last_modified = hget(&headers, "last-modified")
            .and_then(normalize_http_date)
            .or_else(|| r.header("WARC-Date").and_then(rfc3339_to_http))
            .unwrap_or_else(|| DEFAULT_DATE.to_string());
        index.insert(url.clone(), resps.len());
        resps.push((
            url,
            Resp {
                status,
                mime,
                headers: keep,
                body,
                last_modified,
            },
        ));
    }

    // Pages.
    let get = |u: &str| -> Option<(String, Vec<u8>)> {
        let r = &resps[*index.get(u)?].1;
        (200..300)
            .contains(&r.status)
            .then(|| (r.mime.clone(), r.body.clone()))
    };
    let mut plans: Vec<(usize, Vec<usize>, usize)> = Vec::new(); // (root, objects, missing)
    for (i, (url, r)) in resps.iter().enumerate() {
        if !(200..300).contains(&r.status) || !is_html(&r.mime) {
            continue;
        }
        let found = discover(url, &get);
        let mut objs = Vec::new();
        let mut missing = 0;
        for d in found.iter().skip(1) {
            match index.get(&d.url) {
                Some(&k) => {
                    if !objs.contains(&k) {
                        objs.push(k);
                    }
                    // A redirect brings its target.
                    let rr = &resps[k].1;
                    if (300..400).contains(&rr.status) {
                        if let Some(t) =
                            hget(&rr.headers, "location").and_then(|l| resolve(&d.url, l))
                        {
                            if let Some(&tk) = index.get(&t) {
                                if !objs.contains(&tk) && tk != i {
                                    objs.push(tk);
                                }
                            }
                        }
                    }
                }
                None => missing += 1,
            }
        }
        plans.push((i, objs, missing));
    }
    let any_embedded = plans.iter().any(|p| !p.1.is_empty());
    let single = plans
        .iter()
        .filter(|p| !any_embedded || !p.1.is_empty())
        .count()
        == 1;
    let root_hosts: std::collections::BTreeSet<&str> = plans
        .iter()
        .filter(|p| !any_embedded || !p.1.is_empty())
        .filter_map(|p| crate::model::host_of(&resps[p.0].0))
        .collect();
    let many_hosts = root_hosts.len() > 1;
    let mut b = Builder::new(out_dir, path, limits)?;
    b.absorb(&notes);
    let global = notes.render();
    for (root, objs, missing) in plans {
        if any_embedded && objs.is_empty() {
            continue;
        }
        let mut objects = Vec::with_capacity(objs.len() + 1);
        for k in std::iter::once(root).chain(objs) {
            let (url, r) = &resps[k];
            objects.push(b.add_object(
                url,
                &r.mime,
                r.status,
                r.headers.clone(),
                &r.body,
                &r.last_modified,
            )?);
        }
        let root_url = &resps[root].0;
        let id = if single {
            b.unique_id(name)
        } else {
            let path = crate::model::path_of(root_url);
            let path = path.split('?').next().unwrap_or(path);
            let p = slug(path);
            let p = if p.is_empty() { "index".to_string() } else { p };
            if many_hosts {
                let host = crate::model::host_of(root_url).unwrap_or("");
                let host = host.strip_prefix("www.").unwrap_or(host);
                b.unique_id(&format!("{name}-{}-{p}", slug(host)))
            } else {
                b.unique_id(&format!("{name}-{p}"))
            }
        };
        let miss = if missing > 0 {
            format!("; warning: {missing} embedded references not in the archive")
        } else {
            String::new()
        };
        b.add_page(id, format!("WARC {file}: {root_url}{miss}"), true, objects);
    }
    let desc = format!(
        "Imported from WARC {file}: {} records, {} HTTP responses, {} pages{global}",
        records.len(),
        resps.len(),
        b.page_count()
    );
    b.finish(path, name, desc, &[])
}
