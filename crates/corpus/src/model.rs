//! The manifest's types.

use serde::{Deserialize, Serialize};

/// The current manifest format version.
pub const FORMAT_VERSION: u32 = 1;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub format_version: u32,
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// Every virtual domain the corpus uses (each gets its own address and DNS name in the lab).
    pub domains: Vec<String>,
    pub pages: Vec<Page>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Page {
    /// Short id used on the command line and in results (`cnn`, `top10-yahoo`, ...).
    pub id: String,
    /// The URL the loader starts from (the first object's URL).
    pub url: String,
    /// Where the page's structure came from (a paper table, a HAR file, ...).
    #[serde(default)]
    pub source: String,
    /// The objects' schemes are the ones the captured browser used (a HAR or WARC import):
    /// a browser model keeps them. False for generated pages, whose `http://` is a
    /// convention that a browser speaking HTTP/2 turns into `https://`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub captured_schemes: bool,
    /// The root document first, then every embedded object (in discovery order).
    pub objects: Vec<Object>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Object {
    /// Absolute `http://` or `https://` URL.
    pub url: String,
    /// MIME type with parameters, as sent in Content-Type (`text/html; charset=utf-8`).
    pub content_type: String,
    /// HTTP status (200, 301, 204, 404, ...).
    #[serde(default = "ok")]
    pub status: u16,
    /// Extra response headers to send (Cache-Control, Location, ...), in order. The server
    /// adds Content-Length, ETag, Last-Modified, Date itself.
    #[serde(default)]
    pub headers: Vec<(String, String)>,
    /// At least one version.
    pub versions: Vec<Version>,
}

/// The captured wire facts of one response.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Capture {
    /// The `Content-Encoding` the capture's response carried (`gzip`, `br`, `deflate`,
    /// `zstd`), lowercase; `None` for identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_encoding: Option<String>,
    /// Body bytes on the wire, as encoded (HAR `response.bodySize`, else `_transferSize` less
    /// the headers, else the Content-Length of an encoded response); `None` when unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transfer_size: Option<u64>,
    /// Decoded body size the capture declared (HAR `content.size`); `None` when unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_size: Option<u64>,
}

fn ok() -> u16 {
    200
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Version {
    /// SHA-256 of the body (hex): the file `bodies/<body>`. Empty for a bodiless response.
    pub body: String,
    /// Body length in bytes.
    pub size: u64,
    /// Strong validator (quoted, as sent): derived from the body hash unless given.
    pub etag: String,
    /// Last-Modified, as an HTTP date.
    pub last_modified: String,
    /// The body as the capture sent it, content-coded: served to clients that accept its
    /// coding (the identity body above to the others).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encoded: Option<Encoded>,
    /// What the capture recorded of this response on the real wire (absent in generated
    /// corpora and in corpora imported before it was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capture: Option<Capture>,
    /// Later responses the capture holds for the same URL in this visit, in capture order:
    /// the replay server answers the first request for the URL with the object (this
    /// version), the next one with `then[0]`, and so on, repeating the last (a redirect chain
    /// that comes back to the URL, then its 200). Their own `then` is empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub then: Vec<Response>,
}

/// One more captured response for an object's URL (see [`Version::then`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Response {
    pub content_type: String,
    #[serde(default = "ok")]
    pub status: u16,
    #[serde(default)]
    pub headers: Vec<(String, String)>,
    pub version: Version,
}

/// A content-coded copy of a version's body.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Encoded {
    /// The content coding, as sent in Content-Encoding (`gzip`, `deflate`).
    pub coding: String,
    /// SHA-256 of the encoded bytes: the file `bodies/<body>`.
    pub body: String,
    /// Encoded length in bytes.
    pub size: u64,
    /// The encoded representation's own strong validator.
    pub etag: String,
}

impl Manifest {
    pub fn page(&self, id: &str) -> Option<&Page> {
        self.pages.iter().find(|p| p.id == id)
    }
}

impl Page {
    /// Total bytes of version `visit` of every object.
    pub fn bytes(&self, visit: usize) -> u64 {
        self.objects.iter().map(|o| o.version(visit).size).sum()
    }

    /// Distinct hosts of the page's objects.
    pub fn domains(&self) -> Vec<String> {
        let mut d: Vec<String> = self
            .objects
            .iter()
            .filter_map(|o| host_of(&o.url).map(str::to_string))
            .collect();
        d.sort();
        d.dedup();
        d
    }
}

impl Object {
    /// The version visit `visit` (0-based) gets: the last one once visits outnumber versions.
    pub fn version(&self, visit: usize) -> &Version {
        &self.versions[visit.min(self.versions.len() - 1)]
    }

    /// Responses the capture holds for this URL at visit `visit`: 1 + `then`.
    pub fn responses(&self, visit: usize) -> usize {
        1 + self.version(visit).then.len()
    }
}

impl Version {
    /// Bytes a client that accepts the captured coding receives (the encoded size when there
    /// is an encoded copy, else the body's size).
    pub fn served_size(&self) -> u64 {
        self.encoded.as_ref().map_or(self.size, |e| e.size)
    }
}

/// The host part of an absolute http(s) URL.
pub fn host_of(url: &str) -> Option<&str> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))?;
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let hostport = &rest[..end];
    Some(hostport.split(':').next().unwrap_or(hostport))
}

/// The path-and-query part of an absolute URL (`/` when empty). For a URL with a query but
/// no path (`http://h?x=1`) this is `/`: use [`request_target`] for what to request or serve.
pub fn path_of(url: &str) -> &str {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .unwrap_or(url);
    match rest.find('/') {
        Some(i) => {
            let p = &rest[i..];
            p.split('#').next().unwrap_or(p)
        }
        None => "/",
    }
}

/// The request target of an absolute URL: path and query, `/` when the path is empty
/// (`http://h/a?b#f` → `/a?b`, `http://h?x=1` → `/?x=1`, `http://h` → `/`).
pub fn request_target(url: &str) -> std::borrow::Cow<'_, str> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .unwrap_or(url);
    let rest = rest.split('#').next().unwrap_or(rest);
    match rest.find(['/', '?']) {
        Some(i) if rest.as_bytes()[i] == b'/' => rest[i..].into(),
        Some(i) => format!("/{}", &rest[i..]).into(),
        None => "/".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_parts() {
        assert_eq!(host_of("http://www.cnn.com/a/b?x=1"), Some("www.cnn.com"));
        assert_eq!(host_of("https://a.b:8443"), Some("a.b"));
        assert_eq!(host_of("ftp://x"), None);
        assert_eq!(path_of("http://www.cnn.com/a/b?x=1#f"), "/a/b?x=1");
        assert_eq!(path_of("http://www.cnn.com"), "/");
        assert_eq!(request_target("http://h.test?x=1#f"), "/?x=1");
        assert_eq!(request_target("http://h.test/a?b#f"), "/a?b");
        assert_eq!(request_target("http://h.test"), "/");
    }
}
