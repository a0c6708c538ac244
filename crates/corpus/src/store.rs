//! Reading and writing a corpus directory.

use std::collections::HashMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::model::*;

#[derive(Debug, thiserror::Error)]
pub enum CorpusError {
    #[error("{path}: {message}")]
    Io { path: PathBuf, message: String },
    #[error("{path}: corrupt manifest: {message}")]
    Manifest { path: PathBuf, message: String },
    #[error("{path}: missing body {body} of {url}")]
    MissingBody {
        path: PathBuf,
        body: String,
        url: String,
    },
    #[error("{path}: body {body} does not match its hash")]
    CorruptBody { path: PathBuf, body: String },
    /// An input file (HAR, WARC, directory) that cannot be imported at all.
    #[error("{path}: cannot import: {message}")]
    Import { path: PathBuf, message: String },
    /// Storing a body would pass the writer's limit ([`CorpusWriter::with_limit`]).
    #[error("{path}: the bodies would pass {limit} bytes")]
    OverLimit { path: PathBuf, limit: u64 },
    /// Content generation failed (an image encoder error, an impossible parameter).
    #[error("generating content: {message}")]
    Generate { message: String },
}

pub(crate) fn io(path: &Path, e: std::io::Error) -> CorpusError {
    CorpusError::Io {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

/// A corpus directory with its manifest loaded.
#[derive(Clone, Debug)]
pub struct Corpus {
    pub dir: PathBuf,
    pub manifest: Manifest,
}

/// SHA-256 of `bytes`, lowercase hex.
pub fn body_hash(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

impl Corpus {
    /// Opens `dir`, parsing and checking the manifest (not the bodies: see [`Corpus::body`]).
    pub fn open(dir: &Path) -> Result<Corpus, CorpusError> {
        let path = dir.join("manifest.json");
        let text = fs::read_to_string(&path).map_err(|e| io(&path, e))?;
        let manifest: Manifest =
            serde_json::from_str(&text).map_err(|e| CorpusError::Manifest {
                path: path.clone(),
                message: e.to_string(),
            })?;
        let bad = |message: String| CorpusError::Manifest {
            path: path.clone(),
            message,
        };
        if manifest.format_version != FORMAT_VERSION {
            return Err(bad(format!(
                "format_version {} (this webpep reads {FORMAT_VERSION})",
                manifest.format_version
            )));
        }
        for p in &manifest.pages {
            if p.objects.is_empty() {
                return Err(bad(format!("page {} has no objects", p.id)));
            }
            for o in &p.objects {
                if o.versions.is_empty() {
                    return Err(bad(format!("{} has no versions", o.url)));
                }
                if host_of(&o.url).is_none() {
                    return Err(bad(format!("{} is not an absolute http(s) URL", o.url)));
                }
            }
        }
        Ok(Corpus {
            dir: dir.to_path_buf(),
            manifest,
        })
    }

    /// Reads a body and checks its hash. An empty `body` is an empty body.
    pub fn body(&self, hash: &str) -> Result<Vec<u8>, CorpusError> {
        if hash.is_empty() {
            return Ok(Vec::new());
        }
        let path = self.dir.join("bodies").join(hash);
        let bytes = fs::read(&path).map_err(|e| io(&path, e))?;
        if body_hash(&bytes) != hash {
            return Err(CorpusError::CorruptBody {
                path,
                body: hash.to_string(),
            });
        }
        Ok(bytes)
    }
}

/// Builds a corpus directory: add bodies, then write the manifest.
pub struct CorpusWriter {
    dir: PathBuf,
    written: HashMap<String, u64>,
    /// Bytes of the distinct bodies written, and the most allowed.
    total: u64,
    limit: u64,
}

impl CorpusWriter {
    pub fn create(dir: &Path) -> Result<CorpusWriter, CorpusError> {
        let bodies = dir.join("bodies");
        fs::create_dir_all(&bodies).map_err(|e| io(&bodies, e))?;
        Ok(CorpusWriter {
            dir: dir.to_path_buf(),
            written: HashMap::new(),
            total: 0,
            limit: u64::MAX,
        })
    }

    /// Refuses (with [`CorpusError::OverLimit`], before writing) a body that would take the
    /// distinct bodies past `limit` bytes.
    pub fn with_limit(mut self, limit: u64) -> CorpusWriter {
        self.limit = limit;
        self
    }

    /// Stores a body (once per content) and returns its hash.
    pub fn add_body(&mut self, bytes: &[u8]) -> Result<String, CorpusError> {
        if bytes.is_empty() {
            return Ok(String::new());
        }
        let h = body_hash(bytes);
        if !self.written.contains_key(&h) {
            let len = bytes.len() as u64;
            if self.total.saturating_add(len) > self.limit {
                return Err(CorpusError::OverLimit {
                    path: self.dir.clone(),
                    limit: self.limit,
                });
            }
            self.total += len;
            let path = self.dir.join("bodies").join(&h);
            write_atomic(&path, bytes)?;
            self.written.insert(h.clone(), bytes.len() as u64);
        }
        Ok(h)
    }

    /// A [`Version`] for `bytes` (stored), with an ETag derived from the hash.
    pub fn version(&mut self, bytes: &[u8], last_modified: &str) -> Result<Version, CorpusError> {
        let body = self.add_body(bytes)?;
        Ok(Version {
            etag: format!("\"{}\"", &body_hash(bytes)[..16]),
            body,
            size: bytes.len() as u64,
            last_modified: last_modified.to_string(),
            encoded: None,
            capture: None,
            then: Vec::new(),
        })
    }

    /// A [`Version`] for `bytes` (stored) with an [`Encoded`] copy in `coding` (stored too),
    /// when this build can encode it ([`encode_body`]); without one otherwise.
    pub fn encoded_version(
        &mut self,
        bytes: &[u8],
        coding: &str,
        last_modified: &str,
    ) -> Result<Version, CorpusError> {
        let mut v = self.version(bytes, last_modified)?;
        if bytes.is_empty() {
            return Ok(v);
        }
        if let Some(enc) = encode_body(coding, bytes) {
            let body = self.add_body(&enc)?;
            v.encoded = Some(Encoded {
                coding: coding.to_ascii_lowercase(),
                etag: format!("\"{}\"", &body[..16]),
                body,
                size: enc.len() as u64,
            });
        }
        Ok(v)
    }

    pub fn finish(self, manifest: &Manifest) -> Result<Corpus, CorpusError> {
        let path = self.dir.join("manifest.json");
        let text = serde_json::to_vec_pretty(manifest).map_err(|e| CorpusError::Manifest {
            path: path.clone(),
            message: e.to_string(),
        })?;
        write_atomic(&path, &text)?;
        Corpus::open(&self.dir)
    }
}

/// The content codings [`encode_body`] can produce.
pub const ENCODABLE: &[&str] = &["gzip", "x-gzip", "deflate"];

/// `bytes` content-coded with `coding` (`gzip` at level 6, what servers' defaults and
/// `gzip` itself use; `deflate` as HTTP means it, a zlib stream), or `None` for a coding this
/// build cannot produce (`br`, `zstd`).
pub fn encode_body(coding: &str, bytes: &[u8]) -> Option<Vec<u8>> {
    use flate2::write::{GzEncoder, ZlibEncoder};
    use flate2::Compression;
    let level = Compression::new(6);
    match coding.trim().to_ascii_lowercase().as_str() {
        "gzip" | "x-gzip" => {
            let mut e = GzEncoder::new(Vec::new(), level);
            e.write_all(bytes).ok()?;
            e.finish().ok()
        }
        "deflate" => {
            let mut e = ZlibEncoder::new(Vec::new(), level);
            e.write_all(bytes).ok()?;
            e.finish().ok()
        }
        _ => None,
    }
}

/// `bytes` decoded from `coding` (`gzip`, `deflate` as a zlib stream or raw), or `None` when
/// it does not decode or the coding is not one this build reads.
pub fn decode_body(coding: &str, bytes: &[u8]) -> Option<Vec<u8>> {
    use std::io::Read;
    let mut out = Vec::new();
    match coding.trim().to_ascii_lowercase().as_str() {
        "gzip" | "x-gzip" => flate2::read::MultiGzDecoder::new(bytes)
            .read_to_end(&mut out)
            .ok()?,
        "deflate" => match flate2::read::ZlibDecoder::new(bytes).read_to_end(&mut out) {
            Ok(n) => n,
            Err(_) => {
                out.clear();
                flate2::read::DeflateDecoder::new(bytes)
                    .read_to_end(&mut out)
                    .ok()?
            }
        },
        "identity" | "" => {
            out.extend_from_slice(bytes);
            out.len()
        }
        _ => return None,
    };
    Some(out)
}

/// Writes through a temporary file and a rename, so a crash never leaves a torn file.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), CorpusError> {
    webpep_files::write_atomic(path, bytes, webpep_files::Access::Public).map_err(|e| match e {
        webpep_files::FileError::Io { path, source } => io(&path, source),
        other => io(path, std::io::Error::other(other.to_string())),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_corruption() {
        let dir = std::env::temp_dir().join(format!("webpep-corpus-test-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let mut w = CorpusWriter::create(&dir).unwrap();
        let v = w
            .version(b"<html></html>", "Mon, 01 Jan 2024 00:00:00 GMT")
            .unwrap();
        let m = Manifest {
            format_version: FORMAT_VERSION,
            name: "t".into(),
            description: String::new(),
            domains: vec!["www.example.test".into()],
            pages: vec![Page {
                id: "p".into(),
                url: "http://www.example.test/".into(),
                source: "test".into(),
                captured_schemes: false,
                objects: vec![Object {
                    url: "http://www.example.test/".into(),
                    content_type: "text/html".into(),
                    status: 200,
                    headers: vec![],
                    versions: vec![v.clone()],
                }],
            }],
        };
        let c = w.finish(&m).unwrap();
        assert_eq!(c.manifest, m);
        assert_eq!(c.body(&v.body).unwrap(), b"<html></html>");
        fs::write(dir.join("bodies").join(&v.body), b"tampered").unwrap();
        assert!(matches!(
            c.body(&v.body),
            Err(CorpusError::CorruptBody { .. })
        ));
        fs::remove_file(dir.join("bodies").join(&v.body)).unwrap();
        assert!(matches!(c.body(&v.body), Err(CorpusError::Io { .. })));
        fs::write(dir.join("manifest.json"), b"{").unwrap();
        let e = Corpus::open(&dir).unwrap_err().to_string();
        assert!(e.contains("manifest.json") && e.contains("corrupt"), "{e}");
        let _ = fs::remove_dir_all(&dir);
    }
}
