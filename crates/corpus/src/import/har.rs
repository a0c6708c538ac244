//! HAR 1.2 import.
//!
//! Pages come from `log.pages` (one page for the whole file when there are none); a page's
//! objects are its entries in file order (the first entry is the page's root). A later page
//! with the same root URL (another run of the same load, as WebPageTest records 3) is not a
//! page of its own: it becomes the page's next visit, each object whose body changed getting
//! a version (visit k gets run k's body) and objects new in it joining the page. Repeat views
//! (reloads with a warm cache: WebPageTest's `_cached` pages) are skipped, since the lab's
//! `-warm` configurations measure revisits. An entry gives
//! URL, MIME type, status and size; its body comes from `content.text` (base64 when
//! `content.encoding` says so) when present and of plausible size (between half and twice the
//! declared size), and is synthesized of the right type and size otherwise. The page's
//! document (its first 2xx HTML entry), when synthesized, references every other object of the
//! page so the loader discovers them. Odd entries: `data:` and other non-http(s) URLs are
//! skipped and counted; non-GET requests and failed entries (status 0) are skipped and
//! counted; 304s become 200s (bodies synthesized from the declared size; skipped when it is
//! unknown); redirects keep their `Location` and no body; 204/205 are kept bodiless; bodies
//! over [`MAX_OBJECT_BYTES`] are capped with a warning, and the import stops with an error
//! when the stored bodies pass [`MAX_IMPORT_BYTES`] in all.

use std::collections::HashMap;
use std::fs;
use std::path::Path;

use base64::Engine as _;
use serde_json::Value;

use super::fit;
use super::*;
use crate::rng::hash_str;
use crate::scan::relative_ref;

struct Item {
    url: String,
    status: u16,
    mime: String,
    headers: Vec<(String, String)>,
    size: u64,
    /// The body, when the HAR had a usable one.
    body: Option<Vec<u8>>,
    bodiless: bool,
    last_modified: String,
    /// The captured Content-Encoding (lowercase, not identity).
    coding: Option<String>,
    /// Captured body bytes on the wire (encoded), when the capture says.
    transfer: Option<u64>,
    /// Captured decoded size (`content.size`), when the capture says.
    content_size: Option<u64>,
}

impl Item {
    fn capture(&self) -> Capture {
        Capture {
            content_encoding: self.coding.clone(),
            transfer_size: self.transfer,
            content_size: self.content_size,
        }
    }
}

fn s<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

fn n(v: &Value, key: &str) -> Option<i64> {
    v.get(key)
        .and_then(|x| x.as_i64().or_else(|| x.as_f64().map(|f| f as i64)))
}

fn header(headers: &[(String, String)], name: &str) -> Option<String> {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.clone())
}

/// Converts one entry; `Ok(None)` when it is skipped (counted in `notes`).
fn entry(e: &Value, notes: &mut Notes) -> Result<Option<Item>, String> {
    let req = e.get("request").ok_or("entry without request")?;
    let raw_url = s(req, "url").ok_or("entry without request.url")?;
    let lower = raw_url.trim_start().to_ascii_lowercase();
    if lower.starts_with("data:") {
        notes.count("data: URLs skipped");
        return Ok(None);
    }
    if !lower.starts_with("http://") && !lower.starts_with("https://") {
        notes.count("non-http(s) URLs skipped");
        return Ok(None);
    }
    let mut url = url::Url::parse(raw_url.trim()).map_err(|e| format!("bad URL {raw_url}: {e}"))?;
    url.set_fragment(None);
    let url = url.to_string();
    let method = s(req, "method").unwrap_or("GET").to_ascii_uppercase();
    if method != "GET" && method != "HEAD" {
        notes.count("non-GET requests skipped");
        return Ok(None);
    }
    let resp = e.get("response").ok_or("entry without response")?;
    let mut status = n(resp, "status").unwrap_or(0);
    if status <= 0 || status > 999 {
        notes.count("failed entries (no response) skipped");
        return Ok(None);
    }
    if (100..200).contains(&status) {
        notes.count("1xx entries skipped");
        return Ok(None);
    }
    let all_headers: Vec<(String, String)> = resp
        .get("headers")
        .and_then(Value::as_array)
        .map(|hs| {
            hs.iter()
                .filter_map(|h| Some((s(h, "name")?.to_string(), s(h, "value")?.to_string())))
                .collect()
        })
        .unwrap_or_default();
    let content = resp.get("content").cloned().unwrap_or(Value::Null);
    let mut mime = s(&content, "mimeType")
        .filter(|m| !m.trim().is_empty())
        .map(str::to_string)
        .or_else(|| header(&all_headers, "content-type"))
        .unwrap_or_else(|| guess_type(&url).to_string());
    if mime.trim().is_empty() {
        mime = "application/octet-stream".into();
    }
    let mut headers: Vec<(String, String)> = all_headers
        .iter()
        .filter(|(k, _)| keep_header(k) && !k.eq_ignore_ascii_case("location"))
        .cloned()
        .collect();
    let last_modified = header(&all_headers, "last-modified")
        .and_then(|d| normalize_http_date(&d))
        .or_else(|| s(e, "startedDateTime").and_then(rfc3339_to_http))
        .unwrap_or_else(|| DEFAULT_DATE.to_string());
    let coding = header(&all_headers, "content-encoding")
        .map(|e| e.trim().to_ascii_lowercase())
        .filter(|e| !e.is_empty() && e != "identity");
    let encoded = coding.is_some();
    let headers_size = n(resp, "headersSize").filter(|&x| x > 0).unwrap_or(0);
    // Body bytes on the wire: bodySize, else _transferSize (or WebPageTest's per-entry
    // _bytesIn) less the headers, else an encoded response's Content-Length.
    let transfer = n(resp, "bodySize")
        .filter(|&x| x > 0)
        .or_else(|| {
            n(resp, "_transferSize")
                .or_else(|| {
                    e.get("_bytesIn").and_then(|x| {
                        x.as_str()
                            .and_then(|t| t.trim().parse().ok())
                            .or(x.as_i64())
                    })
                })
                .map(|t| t - headers_size)
                .filter(|&x| x > 0 && headers_size > 0)
        })
        .or_else(|| {
            encoded
                .then(|| header(&all_headers, "content-length")?.trim().parse().ok())
                .flatten()
        })
        .map(|x| x as u64);
    let text_like = {
        let m = mime.to_ascii_lowercase();
        m.starts_with("text/")
            || m.contains("javascript")
            || m.contains("json")
            || m.contains("xml")
            || m.contains("ecmascript")
    };
    let content_size = n(&content, "size").filter(|&x| x > 0).map(|x| x as u64);
    // Some tools record the transfer size as content.size: an encoded text body no larger
    // than its compressed transfer is not its decoded size.
    let content_size_credible = match (content_size, transfer) {
        (Some(c), Some(t)) => !(encoded && text_like && c <= t),
        _ => true,
    };
    let declared = match content_size.filter(|_| content_size_credible) {
        Some(x) => x,
        None => {
            // Some tools (WebPageTest) leave content.size at 0: fall back on the transfer
            // size, estimating the decoded size of compressed text as 3x.
            let transfer = n(resp, "bodySize")
                .filter(|&x| x > 0)
                .or_else(|| {
                    header(&all_headers, "content-length").and_then(|l| l.trim().parse().ok())
                })
                .unwrap_or(0)
                .max(0) as u64;
            if transfer > 0 && encoded && text_like {
                notes.count("sizes estimated as 3x the compressed transfer size");
                transfer * 3
            } else {
                transfer
            }
        }
    };

    if status == 304 {
        if declared == 0 {
            notes.count("304 entries without a size skipped");
            return Ok(None);
        }
        notes.count("304 entries replayed as 200");
        status = 200;
    }
    let status = status as u16;
    let redirect = (300..400).contains(&status);
    if redirect {
        let loc = header(&all_headers, "location").or_else(|| {
            s(resp, "redirectURL")
                .filter(|l| !l.is_empty())
                .map(str::to_string)
        });
        match loc {
            Some(l) => headers.push(("Location".into(), l)),
            None => notes.note_as(
                "redirects without a Location",
                format!("redirect {url} has no Location"),
            ),
        }
    }
    let bodiless = redirect || status == 204 || status == 205 || method == "HEAD";
    if bodiless {
        return Ok(Some(Item {
            url,
            status,
            mime,
            headers,
            size: 0,
            body: None,
            bodiless: true,
            last_modified,
            coding: None,
            transfer,
            content_size,
        }));
    }
    let mut size = declared;
    if size > MAX_OBJECT_BYTES {
        notes.note_as(
            "bodies capped",
            format!("{url} declared {size} bytes, capped at {MAX_OBJECT_BYTES}"),
        );
        size = MAX_OBJECT_BYTES;
    }
    // The body, when present, decodable and plausible.
    let mut body = None;
    if let Some(t) = s(&content, "text") {
        let decoded = if s(&content, "encoding")
            .map(|x| x.eq_ignore_ascii_case("base64"))
            .unwrap_or(false)
        {
            let compact: String = t.chars().filter(|c| !c.is_whitespace()).collect();
            match base64::engine::general_purpose::STANDARD.decode(compact.as_bytes()) {
                Ok(b) => Some(b),
                Err(_) => {
                    notes.count("bodies with broken base64 synthesized instead");
                    None
                }
            }
        } else {
            Some(t.as_bytes().to_vec())
        };
        if let Some(b) = decoded {
            let len = b.len() as u64;
            let plausible = len > 0
                && len <= MAX_OBJECT_BYTES
                && (declared == 0 || (len * 2 >= declared.min(size) && len <= declared * 2));
            if plausible {
                size = len;
                // The body is stored decoded.
                headers.retain(|(k, _)| !k.eq_ignore_ascii_case("content-encoding"));
                body = Some(b);
            } else if !b.is_empty() {
                notes.count("bodies of implausible size synthesized instead");
            }
        }
    }
    Ok(Some(Item {
        url,
        status,
        mime,
        headers,
        size,
        body,
        bodiless: false,
        last_modified,
        coding,
        transfer,
        content_size,
    }))
}

/// The version of item `k`: its body (from the HAR, else synthesized; the page's document
/// referencing the rest of the page), with a copy in the captured coding and the capture's
/// numbers.
fn item_version(
    b: &mut Builder,
    items: &[Item],
    k: usize,
    doc: Option<usize>,
    title: &str,
    synthesized: &mut usize,
    notes: &mut Notes,
) -> Result<Version, CorpusError> {
    let it = &items[k];
    let body: Vec<u8> = if it.bodiless {
        Vec::new()
    } else if let Some(body) = &it.body {
        body.clone()
    } else {
        *synthesized += usize::from(it.size > 0);
        let seed = hash_str(&it.url);
        // Encoded text the capture gives a transfer size for is made to compress to it.
        let target = it
            .coding
            .as_deref()
            .filter(|c| crate::store::ENCODABLE.contains(c))
            .and(it.transfer);
        if Some(k) == doc {
            let mut seen = std::collections::HashSet::new();
            let refs: Vec<(String, String)> = items
                .iter()
                .enumerate()
                .filter(|&(j, x)| j > k && x.status < 400 && x.url != it.url)
                .filter(|(_, x)| seen.insert(x.url.as_str()))
                .map(|(_, x)| (relative_ref(&it.url, &x.url), x.mime.clone()))
                .collect();
            fit::html(seed, it.size as usize, title, &refs, target)
        } else {
            match fit::body(&it.mime, it.size as usize, seed, target) {
                Ok(x) => x,
                Err(e) => {
                    notes.note_as(
                        "bodies synthesized as random bytes",
                        format!("{}: {e}; random bytes instead", it.url),
                    );
                    crate::images::binary_blob(seed, it.size as usize, &it.mime)
                }
            }
        }
    };
    let coding = it.coding.as_deref().filter(|_| !body.is_empty());
    let stored = match coding {
        Some(c) if crate::store::ENCODABLE.contains(&c) => Some(c),
        Some(c) => {
            notes.count(&format!(
                "{c}-encoded responses stored gzip-encoded (this build has no {c} encoder)"
            ));
            Some("gzip")
        }
        None => None,
    };
    let mut v = b.make_version(&body, stored, &it.last_modified)?;
    v.capture = Some(it.capture());
    Ok(v)
}

/// Whether a HAR page is a reload with a warm cache: WebPageTest marks its repeat views with
/// `_cached` and says so in the title.
fn is_repeat_view(page: &Value) -> bool {
    let cached = match page.get("_cached") {
        Some(Value::Bool(b)) => *b,
        Some(Value::Number(x)) => x.as_f64().is_some_and(|x| x != 0.0),
        Some(Value::String(x)) => x.trim() == "1" || x.trim().eq_ignore_ascii_case("true"),
        _ => false,
    };
    cached || s(page, "title").is_some_and(|t| t.to_ascii_lowercase().contains("repeat view"))
}

/// Imports a HAR 1.2 file as corpus `name` in `out_dir`.
pub fn import_har(path: &Path, out_dir: &Path, name: &str) -> Result<Corpus, CorpusError> {
    import_har_limited(path, out_dir, name, Limits::default())
}

/// [`import_har`] with options, returning what the import skipped, synthesized, merged or
/// changed; with `strict`, any of those is an error naming the file and the reasons.
pub fn import_har_with(
    path: &Path,
    out_dir: &Path,
    name: &str,
    options: ImportOptions,
) -> Result<(Corpus, ImportSummary), CorpusError> {
    import_har_full(path, out_dir, name, Limits::default(), options)
}

pub(crate) fn import_har_limited(
    path: &Path,
    out_dir: &Path,
    name: &str,
    limits: Limits,
) -> Result<Corpus, CorpusError> {
    import_har_full(path, out_dir, name, limits, ImportOptions::default()).map(|(c, _)| c)
}

fn import_har_full(
    path: &Path,
    out_dir: &Path,
    name: &str,
    limits: Limits,
    options: ImportOptions,
) -> Result<(Corpus, ImportSummary), CorpusError> {
    let bad = |message: String| CorpusError::Import {
        path: path.to_path_buf(),
        message,
    };
    let raw = fs::read(path).map_err(|e| crate::store::io(path, e))?;
    let raw = raw.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(&raw);
    let v: Value =
        serde_json::from_slice(raw).map_err(|e| bad(format!("not a HAR file (JSON: {e})")))?;
    let log = v
        .get("log")
        .ok_or_else(|| bad("not a HAR file: no \"log\" object".into()))?;
    if let Some(ver) = log.get("version") {
        let ok = ver
            .as_str()
            .is_some_and(|x| x.trim() == "1" || x.trim().starts_with("1."));
        if !ok {
            return Err(bad(format!(
                "not HAR 1.x: log.version is {ver} (this webpep reads HAR 1.1 and 1.2)"
            )));
        }
    }
    let entries = log
        .get("entries")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("not a HAR file: no \"log.entries\" array".into()))?;
    let file = path
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();

    // Pages and their entries.
    struct PageIn<'a> {
        har_id: Option<String>,
        title: String,
        /// A reload with a warm cache (WebPageTest's repeat view).
        repeat_view: bool,
        entries: Vec<&'a Value>,
    }
    let mut pages: Vec<PageIn> = log
        .get("pages")
        .and_then(Value::as_array)
        .map(|ps| {
            ps.iter()
                .map(|p| PageIn {
                    har_id: s(p, "id").map(str::to_string),
                    title: s(p, "title").unwrap_or("").to_string(),
                    repeat_view: is_repeat_view(p),
                    entries: Vec::new(),
                })
                .collect()
        })
        .unwrap_or_default();
    let mut orphans = 0;
    if pages.is_empty() {
        pages.push(PageIn {
            har_id: None,
            title: String::new(),
            repeat_view: false,
            entries: entries.iter().collect(),
        });
    } else {
        for e in entries {
            let pr = s(e, "pageref");
            match pages
                .iter_mut()
                .position(|p| p.har_id.is_some() && p.har_id.as_deref() == pr)
            {
                Some(i) => pages[i].entries.push(e),
                None => {
                    orphans += 1;
                    pages[0].entries.push(e);
                }
            }
        }
    }

    let mut b = Builder::new(out_dir, path, limits)?;
    // One page id without a number when every page is a load of the same URL.
    let roots: std::collections::HashSet<&str> = pages
        .iter()
        .filter(|p| !p.repeat_view)
        .filter_map(|p| p.entries.first().and_then(|e| s(e.get("request")?, "url")))
        .collect();
    let single = pages.len() == 1 || roots.len() == 1;
    let mut skipped_pages = 0;
    let mut repeat_views = 0;
    let mut further_runs = 0;
    let mut later_responses = 0;
    // Root URL → (index of the imported page, runs of it so far).
    let mut runs: HashMap<String, (usize, usize)> = HashMap::new();
    // A file of repeat views alone is imported as it is.
    let first_views = pages.iter().any(|p| !p.repeat_view);
    for (pi, p) in pages.iter().enumerate() {
        if p.repeat_view && first_views {
            repeat_views += 1;
            continue;
        }
        let mut notes = Notes::default();
        if pi == 0 && orphans > 0 {
            notes.note_as(
                "entries without a known pageref put in the first page",
                format!("{orphans} entries without a known pageref put in this page"),
            );
        }
        let mut items: Vec<Item> = Vec::new();
        for (ei, e) in p.entries.iter().enumerate() {
            match entry(e, &mut notes) {
                Ok(Some(it)) => items.push(it),
                Ok(None) => {}
                Err(m) => notes.note_as(
                    "malformed entries skipped",
                    format!("entry {ei} skipped: {m}"),
                ),
            }
        }
        if items.is_empty() {
            skipped_pages += 1;
            continue;
        }
        // Every entry for a URL is kept, in capture order: the first is the object, the later
        // ones its `then` responses.
        let mut order: Vec<usize> = Vec::new();
        let mut later: HashMap<&str, Vec<usize>> = HashMap::new();
        for (k, it) in items.iter().enumerate() {
            match later.get_mut(it.url.as_str()) {
                Some(v) => v.push(k),
                None => {
                    later.insert(&it.url, Vec::new());
                    order.push(k);
                }
            }
        }
        later_responses += later.values().map(Vec::len).sum::<usize>();
        // The document: the first 2xx HTML response.
        let doc = items
            .iter()
            .position(|i| (200..300).contains(&i.status) && is_html(&i.mime) && !i.bodiless);
        // A later run of a page already imported (same root URL) becomes its next version.
        let run_of = runs.get(&items[0].url).copied();
        let run = run_of.map_or(0, |(_, n)| n);
        let mut synthesized = 0;
        let mut objects = Vec::with_capacity(order.len());
        for &k in &order {
            let it = &items[k];
            let known = b.get(&it.url).cloned();
            if let (Some(o), None) = (&known, run_of) {
                objects.push(o.clone());
                continue;
            }
            let mut v = item_version(
                &mut b,
                &items,
                k,
                doc,
                &p.title,
                &mut synthesized,
                &mut notes,
            )?;
            for &j in &later[it.url.as_str()] {
                let x = &items[j];
                let version = item_version(
                    &mut b,
                    &items,
                    j,
                    doc,
                    &p.title,
                    &mut synthesized,
                    &mut notes,
                )?;
                v.then.push(Response {
                    content_type: x.mime.clone(),
                    status: x.status,
                    headers: x.headers.clone(),
                    version,
                });
            }
            if let Some(o) = known {
                b.add_run_version_with(&it.url, run, v);
                objects.push(o);
                continue;
            }
            objects.push(b.add_object_version(&it.url, &it.mime, it.status, it.headers.clone(), v));
        }
        notes.count_n(
            "bodies not in the HAR synthesized of the declared type and size",
            synthesized,
        );
        b.absorb(&notes);
        if let Some((index, n)) = run_of {
            further_runs += 1;
            runs.insert(items[0].url.clone(), (index, n + 1));
            let note = format!(
                "; HAR page {} imported as visit {} (objects whose body changed got a version)",
                p.har_id.as_deref().unwrap_or("(none)"),
                n + 1
            );
            b.extend_page(index, objects, &note);
            continue;
        }
        runs.insert(items[0].url.clone(), (b.page_count(), 1));
        let id = if single {
            b.unique_id(name)
        } else {
            b.unique_id(&format!("{name}-{}", pi + 1))
        };
        let title = if p.title.is_empty() {
            String::new()
        } else {
            format!(" \"{}\"", p.title)
        };
        let source = format!(
            "HAR {file} page {}{title}{}",
            p.har_id.as_deref().unwrap_or("(none)"),
            notes.render()
        );
        b.add_page(id, source, true, objects);
    }
    let mut desc = format!(
        "Imported from HAR {file}: {} pages of {} entries",
        b.page_count(),
        entries.len()
    );
    if later_responses > 0 {
        desc.push_str(&format!(
            "; {later_responses} later responses for a URL already requested kept in capture \
             order (the replay server answers its requests with them in turn)"
        ));
    }
    if skipped_pages > 0 {
        desc.push_str(&format!(
            "; {skipped_pages} pages without usable entries skipped"
        ));
    }
    b.summary.add(
        Action::Skipped,
        "HAR pages without usable entries skipped",
        skipped_pages,
    );
    b.summary.add(
        Action::Merged,
        "further loads of a page merged as its later visits",
        further_runs,
    );
    b.summary.add(
        Action::Skipped,
        "repeat views (reloads with a warm cache) skipped",
        repeat_views,
    );
    if further_runs > 0 {
        desc.push_str(&format!(
            "; {further_runs} further loads of a page already imported became its later \
             visits (versions)"
        ));
    }
    if repeat_views > 0 {
        desc.push_str(&format!(
            "; {repeat_views} repeat views (reloads with a warm cache) skipped: the lab's \
             -warm configurations measure revisits"
        ));
    }
    b.finish_with(path, name, desc, &[], options)
}
