//! Page corpora for the lab (DESIGN §7.3): what the replay server serves and the page loader
//! loads.
//!
//! # On-disk format (version 1)
//! A corpus is a directory:
//! ```text
//! CORPUS/manifest.json     the structure (below)
//! CORPUS/bodies/<sha256>   every body, named by the SHA-256 of its bytes (stored once)
//! ```
//! `manifest.json` is a [`Manifest`]: its name, the virtual domains, and the pages. A page is a
//! root URL plus the objects the page embeds (the root document is itself an object, listed
//! first). Every object has one or more versions: visit k of a page gets version
//! `min(k, versions-1)` of each object (for cache and delta experiments). An object is keyed by
//! its URL (scheme, host, path and query); the same URL in two pages is the same object.

pub mod model;
pub mod store;

pub use model::*;
pub use store::{body_hash, Corpus, CorpusError, CorpusWriter};
