//! Importers: HAR 1.2 ([`import_har`]), WARC 1.0/1.1 ([`import_warc`]) and static directory
//! trees ([`import_dir`]). Each writes a corpus directory and returns it opened.
//!
//! Odd inputs never abort an import: an entry or record that cannot be used is skipped and
//! counted, and the counts are noted in the page's `source` (`...; warning: ...`). Only an
//! input that cannot be read at all (not JSON, not WARC, truncated compression, no usable
//! page) is an error, and the error names the file.

mod dir;
mod fit;
mod har;
mod warc;

#[cfg(test)]
mod limits_tests;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};

pub use dir::import_dir;
pub use har::{import_har, import_har_with};
pub use warc::import_warc;

use crate::model::*;
use crate::store::{Corpus, CorpusError, CorpusWriter};

/// Bodies are capped at this size (an import warning names each capped object).
pub const MAX_OBJECT_BYTES: u64 = 50_000_000;

/// One import stops with an error when its bodies (and a compressed WARC once decompressed)
/// pass this size: a HAR declaring thousands of huge objects or a gzip bomb must not fill
/// the disk or the memory.
pub const MAX_IMPORT_BYTES: u64 = 2 << 30;

/// The bounds of one import ([`MAX_OBJECT_BYTES`], [`MAX_IMPORT_BYTES`]); tests use small ones.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    /// A body's size, after any content decoding; larger ones are cut with a warning.
    pub(crate) object: u64,
    /// All stored bodies together, and a decompressed WARC; more is an error.
    pub(crate) total: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            object: MAX_OBJECT_BYTES,
            total: MAX_IMPORT_BYTES,
        }
    }
}

impl Limits {
    /// The error for an input that passes `total`.
    pub(crate) fn exceeded(&self, input: &Path, what: &str) -> CorpusError {
        CorpusError::Import {
            path: input.to_path_buf(),
            message: format!(
                "{what} more than {} bytes, the limit of one import (a decompression bomb, or an \
                 input to split)",
                self.total
            ),
        }
    }
}

/// How an import treats what it cannot reproduce as captured.
#[derive(Clone, Copy, Debug, Default)]
pub struct ImportOptions {
    /// Anything skipped, synthesized, merged or changed is an error ([`CorpusError::Import`]
    /// naming the input and every reason with its count) instead of a warning.
    pub strict: bool,
}

/// What an import did to its input besides copying it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Action {
    /// Entries, records or pages left out.
    Skipped,
    /// Bodies (or documents) the input lacked, made up of the declared type and size.
    Synthesized,
    /// Entries folded into others (runs of a page as its visits, repeated captures).
    Merged,
    /// Entries kept but not as captured (a 304 replayed as 200, a size estimated or capped, a
    /// coding this build cannot produce stored as another).
    Changed,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Skipped => "skipped",
            Action::Synthesized => "synthesized",
            Action::Merged => "merged",
            Action::Changed => "changed",
        }
    }

    /// The action a note's reason describes (by its wording: "... skipped", "... synthesized").
    fn of(reason: &str) -> Action {
        let r = reason.to_ascii_lowercase();
        if r.contains("skipped") {
            Action::Skipped
        } else if r.contains("synthesized") {
            Action::Synthesized
        } else if r.contains("visit") || r.contains("repeated") || r.contains("merged") {
            Action::Merged
        } else {
            Action::Changed
        }
    }
}

/// Counts per reason of what an import skipped, synthesized, merged or changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImportSummary {
    /// (action, reason, count), in the order first met.
    pub counts: Vec<(Action, String, usize)>,
}

impl ImportSummary {
    pub fn add(&mut self, action: Action, reason: &str, n: usize) {
        if n == 0 {
            return;
        }
        match self
            .counts
            .iter_mut()
            .find(|c| c.0 == action && c.1 == reason)
        {
            Some(c) => c.2 += n,
            None => self.counts.push((action, reason.to_string(), n)),
        }
    }

    /// Nothing skipped, synthesized, merged or changed.
    pub fn is_clean(&self) -> bool {
        self.counts.is_empty()
    }

    /// The count of one action, over its reasons.
    pub fn total(&self, action: Action) -> usize {
        self.counts
            .iter()
            .filter(|c| c.0 == action)
            .map(|c| c.2)
            .sum()
    }

    /// The count of one reason (any action).
    pub fn count(&self, reason: &str) -> usize {
        self.counts
            .iter()
            .filter(|c| c.1 == reason)
            .map(|c| c.2)
            .sum()
    }

    /// One line per reason, grouped by action: `skipped: 3 data: URLs skipped`.
    pub fn render(&self) -> String {
        let mut rows = self.counts.clone();
        rows.sort_by_key(|c| c.0);
        rows.iter()
            .map(|(a, r, n)| format!("{}: {n} {r}", a.as_str()))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The reasons on one line, for an error message.
    fn one_line(&self) -> String {
        self.render().replace('\n', "; ")
    }
}

/// Last-Modified when the input gives none: 2024-01-01.
pub(crate) const DEFAULT_DATE: &str = "Mon, 01 Jan 2024 00:00:00 GMT";

/// Response headers worth replaying (the server adds Content-Length, ETag, Last-Modified and
/// Date itself; bodies are stored decoded, so Content-Encoding is dropped when decoded).
pub(crate) fn keep_header(name: &str) -> bool {
    matches!(
        name.to_ascii_lowercase().as_str(),
        "cache-control"
            | "expires"
            | "location"
            | "vary"
            | "content-language"
            | "access-control-allow-origin"
            | "content-disposition"
    )
}

/// Collects objects (first one per URL wins) and pages, then writes the corpus.
pub(crate) struct Builder {
    pub(crate) summary: ImportSummary,
    w: CorpusWriter,
    input: PathBuf,
    limits: Limits,
    objects: HashMap<String, Object>,
    pages: Vec<Page>,
    ids: HashSet<String>,
    domains: BTreeSet<String>,
}

impl Builder {
    pub(crate) fn new(
        out_dir: &Path,
        input: &Path,
        limits: Limits,
    ) -> Result<Builder, CorpusError> {
        Ok(Builder {
            summary: ImportSummary::default(),
            w: CorpusWriter::create(out_dir)?.with_limit(limits.total),
            input: input.to_path_buf(),
            limits,
            objects: HashMap::new(),
            pages: Vec::new(),
            ids: HashSet::new(),
            domains: BTreeSet::new(),
        })
    }

    pub(crate) fn get(&self, url: &str) -> Option<&Object> {
        self.objects.get(url)
    }

    /// Stores a one-version object (or returns the one already stored under `url`).
    pub(crate) fn add_object(
        &mut self,
        url: &str,
        content_type: &str,
        status: u16,
        headers: Vec<(String, String)>,
        body: &[u8],
        last_modified: &str,
    ) -> Result<Object, CorpusError> {
        if let Some(o) = self.objects.get(url) {
            return Ok(o.clone());
        }
        let v = self.w.version(body, last_modified).map_err(|e| match e {
            CorpusError::OverLimit { .. } => {
                self.limits.exceeded(&self.input, "the bodies come to")
            }
            e => e,
        })?;
        let o = Object {
            url: url.to_string(),
            content_type: content_type.to_string(),
            status,
            headers,
            versions: vec![v],
        };
        self.objects.insert(url.to_string(), o.clone());
        Ok(o)
    }

    /// Counts a page's notes in the summary.
    pub(crate) fn absorb(&mut self, notes: &Notes) {
        for (what, n) in &notes.counts {
            self.summary.add(Action::of(what), what, *n);
        }
        for (what, n) in &notes.reasons {
            self.summary.add(Action::of(what), what, *n);
        }
    }

    /// A version of `body` (stored), with a copy encoded in `coding` when one is given and
    /// this build can produce it.
    pub(crate) fn make_version(
        &mut self,
        body: &[u8],
        coding: Option<&str>,
        last_modified: &str,
    ) -> Result<Version, CorpusError> {
        let r = match coding {
            Some(c) => self.w.encoded_version(body, c, last_modified),
            None => self.w.version(body, last_modified),
        };
        r.map_err(|e| match e {
            CorpusError::OverLimit { .. } => {
                self.limits.exceeded(&self.input, "the bodies come to")
            }
            e => e,
        })
    }

    /// Stores an object with the version given (or returns the one already stored under
    /// `url`).
    pub(crate) fn add_object_version(
        &mut self,
        url: &str,
        content_type: &str,
        status: u16,
        headers: Vec<(String, String)>,
        version: Version,
    ) -> Object {
        if let Some(o) = self.objects.get(url) {
            return o.clone();
        }
        let o = Object {
            url: url.to_string(),
            content_type: content_type.to_string(),
            status,
            headers,
            versions: vec![version],
        };
        self.objects.insert(url.to_string(), o.clone());
        o
    }

    /// Gives the object under `url` version `v` for run `run` (0-based) when its content
    /// (body, later responses) differs from its last version's: earlier runs keep theirs.
    pub(crate) fn add_run_version_with(&mut self, url: &str, run: usize, v: Version) {
        let Some(o) = self.objects.get_mut(url) else {
            return;
        };
        let last = o.versions.last().cloned().expect("an object has a version");
        let key = |v: &Version| -> Vec<(u16, String)> {
            std::iter::once((0, v.body.clone()))
                .chain(v.then.iter().map(|r| (r.status, r.version.body.clone())))
                .collect()
        };
        if key(&last) == key(&v) {
            return;
        }
        while o.versions.len() < run {
            o.versions.push(last.clone());
        }
        o.versions.push(v);
    }

    /// Adds objects to page `index` (the ones a later run of it has and earlier runs had not)
    /// and a note to its source.
    pub(crate) fn extend_page(&mut self, index: usize, objects: Vec<Object>, note: &str) {
        for o in &objects {
            if let Some(h) = host_of(&o.url) {
                self.domains.insert(h.to_string());
            }
        }
        let p = &mut self.pages[index];
        for o in objects {
            if !p.objects.iter().any(|x| x.url == o.url) {
                p.objects.push(o);
            }
        }
        p.source.push_str(note);
    }

    /// `base` made unique among the page ids so far.
    pub(crate) fn unique_id(&mut self, base: &str) -> String {
        let base = if base.is_empty() { "page" } else { base };
        let mut id = base.to_string();
        let mut k = 2;
        while self.ids.contains(&id) {
            id = format!("{base}-{k}");
            k += 1;
        }
        self.ids.insert(id.clone());
        id
    }

    /// Adds a page; `captured_schemes`: its URLs' schemes are what a browser used (see
    /// [`Page::captured_schemes`]).
    pub(crate) fn add_page(
        &mut self,
        id: String,
        source: String,
        captured_schemes: bool,
        objects: Vec<Object>,
    ) {
        if objects.is_empty() {
            return;
        }
        for o in &objects {
            if let Some(h) = host_of(&o.url) {
                self.domains.insert(h.to_string());
            }
        }
        self.pages.push(Page {
            id,
            url: objects[0].url.clone(),
            source,
            captured_schemes,
            objects,
        });
    }

    pub(crate) fn page_count(&self) -> usize {
        self.pages.len()
    }

    pub(crate) fn finish(
        self,
        input: &Path,
        name: &str,
        description: String,
        extra_domains: &[String],
    ) -> Result<Corpus, CorpusError> {
        self.finish_with(
            input,
            name,
            description,
            extra_domains,
            ImportOptions::default(),
        )
        .map(|(c, _)| c)
    }

    /// [`Builder::finish`], returning the summary too; `strict` refuses (before writing the
    /// manifest) an import that skipped, synthesized, merged or changed anything.
    pub(crate) fn finish_with(
        self,
        input: &Path,
        name: &str,
        description: String,
        extra_domains: &[String],
        options: ImportOptions,
    ) -> Result<(Corpus, ImportSummary), CorpusError> {
        if options.strict && !self.summary.is_clean() {
            return Err(CorpusError::Import {
                path: input.to_path_buf(),
                message: format!(
                    "--strict: the import would not be faithful: {}",
                    self.summary.one_line()
                ),
            });
        }
        if self.pages.is_empty() {
            return Err(CorpusError::Import {
                path: input.to_path_buf(),
                message: "no page could be imported".into(),
            });
        }
        let mut domains = self.domains;
        domains.extend(extra_domains.iter().cloned());
        // Pages hold copies taken when they were added; versions added since are in the map.
        let mut pages = self.pages;
        for o in pages.iter_mut().flat_map(|p| p.objects.iter_mut()) {
            if let Some(cur) = self.objects.get(&o.url) {
                o.versions.clone_from(&cur.versions);
            }
        }
        let manifest = Manifest {
            format_version: FORMAT_VERSION,
            name: name.to_string(),
            description,
            domains: domains.into_iter().collect(),
            pages,
        };
        Ok((self.w.finish(&manifest)?, self.summary))
    }
}

/// Counted oddities of one page's import, rendered as `; warning: ...` notes.
#[derive(Default, Debug)]
pub(crate) struct Notes {
    counts: Vec<(String, usize)>,
    lines: Vec<String>,
    /// Reasons of the free-form notes, counted for the summary (not rendered).
    reasons: Vec<(String, usize)>,
}

impl Notes {
    /// A free-form note, counted in the summary under `reason`.
    pub(crate) fn note_as(&mut self, reason: &str, line: String) {
        match self.reasons.iter_mut().find(|c| c.0 == reason) {
            Some(c) => c.1 += 1,
            None => self.reasons.push((reason.to_string(), 1)),
        }
        self.note(line);
    }

    pub(crate) fn count(&mut self, what: &str) {
        match self.counts.iter_mut().find(|c| c.0 == what) {
            Some(c) => c.1 += 1,
            None => self.counts.push((what.to_string(), 1)),
        }
    }

    /// `n` more of `what` (none when `n` is 0).
    pub(crate) fn count_n(&mut self, what: &str, n: usize) {
        if n == 0 {
            return;
        }
        match self.counts.iter_mut().find(|c| c.0 == what) {
            Some(c) => c.1 += n,
            None => self.counts.push((what.to_string(), n)),
        }
    }

    pub(crate) fn note(&mut self, line: String) {
        if self.lines.len() < 20 {
            self.lines.push(line);
        } else if self.lines.len() == 20 {
            self.lines.push("more warnings not shown".into());
        }
    }

    pub(crate) fn render(&self) -> String {
        let mut s = String::new();
        for (what, n) in &self.counts {
            s.push_str(&format!("; warning: {n} {what}"));
        }
        for l in &self.lines {
            s.push_str("; warning: ");
            s.push_str(l);
        }
        s
    }
}

/// A page-id-friendly version of `s`: lowercase letters, digits and dashes.
pub(crate) fn slug(s: &str) -> String {
    let mut out = String::new();
    let mut dash = false;
    for c in s.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
            dash = false;
        } else if !dash && !out.is_empty() {
            out.push('-');
            dash = true;
        }
    }
    while out.ends_with('-') {
        out.pop();
    }
    out
}

/// A MIME type guessed from a URL's or file's extension.
pub(crate) fn guess_type(path: &str) -> &'static str {
    let p = path
        .split(['?', '#'])
        .next()
        .unwrap_or(path)
        .to_ascii_lowercase();
    let file = p.rsplit('/').next().unwrap_or(&p);
    if file.contains(".html.") || file.contains(".htm.") {
        return "text/html";
    }
    let ext = file.rsplit('.').next().unwrap_or("");
    match ext {
        "html" | "htm" | "xhtml" | "shtml" => "text/html",
        "css" => "text/css",
        "js" | "mjs" => "application/javascript",
        "json" => "application/json",
        "png" => "image/png",
        "gif" => "image/gif",
        "jpg" | "jpeg" | "jpe" => "image/jpeg",
        "svg" => "image/svg+xml",
        "webp" => "image/webp",
        "ico" => "image/x-icon",
        "txt" => "text/plain",
        "xml" => "application/xml",
        "pdf" => "application/pdf",
        "woff" => "font/woff",
        "woff2" => "font/woff2",
        "ttf" => "font/ttf",
        "otf" => "font/otf",
        "mp4" => "video/mp4",
        _ => "application/octet-stream",
    }
}

/// Whether a MIME type or file name is HTML.
pub(crate) fn is_html(mime: &str) -> bool {
    let m = mime.to_ascii_lowercase();
    m.contains("text/html") || m.contains("xhtml")
}

/// An HTTP date from a Unix time.
pub(crate) fn http_date(secs: u64) -> String {
    httpdate::fmt_http_date(std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs))
}

/// A valid HTTP date normalized, or `None`.
pub(crate) fn normalize_http_date(s: &str) -> Option<String> {
    httpdate::parse_http_date(s.trim())
        .ok()
        .map(httpdate::fmt_http_date)
}

/// Days since 1970-01-01 of a civil date.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// An RFC 3339 / ISO 8601 timestamp (HAR `startedDateTime`, WARC-Date) as an HTTP date.
pub(crate) fn rfc3339_to_http(s: &str) -> Option<String> {
    let s = s.trim();
    let b = s.as_bytes();
    if b.len() < 19 {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> { s.get(r)?.parse().ok() };
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, se) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || se > 60 {
        return None;
    }
    let mut rest = s.get(19..)?;
    if rest.starts_with('.') {
        let n = rest[1..].bytes().take_while(u8::is_ascii_digit).count();
        rest = &rest[1 + n..];
    }
    let offset = if rest.is_empty() || rest.eq_ignore_ascii_case("z") {
        0
    } else {
        let sign = match rest.as_bytes()[0] {
            b'+' => 1,
            b'-' => -1,
            _ => return None,
        };
        let oh: i64 = rest.get(1..3)?.parse().ok()?;
        let om: i64 = rest.get(4..6).unwrap_or("00").parse().ok()?;
        sign * (oh * 3600 + om * 60)
    };
    let t = days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + se - offset;
    if t < 0 {
        return None;
    }
    Some(http_date(t as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helpers() {
        assert_eq!(
            rfc3339_to_http("2015-08-20T14:50:21.123Z").as_deref(),
            Some("Thu, 20 Aug 2015 14:50:21 GMT")
        );
        assert_eq!(
            rfc3339_to_http("2015-08-20T16:50:21+02:00").as_deref(),
            Some("Thu, 20 Aug 2015 14:50:21 GMT")
        );
        assert_eq!(rfc3339_to_http("yesterday"), None);
        assert_eq!(slug("Run 1, First View"), "run-1-first-view");
        assert_eq!(guess_type("/manual/index.html.en"), "text/html");
        assert_eq!(guess_type("/a/b.PNG?x"), "image/png");
        assert_eq!(
            normalize_http_date("Sun, 06 Nov 1994 08:49:37 GMT").as_deref(),
            Some("Sun, 06 Nov 1994 08:49:37 GMT")
        );
    }
}
