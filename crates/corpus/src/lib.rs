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
//!
//! Conventions the generators and importers follow:
//! - `Page.objects` lists the root first, then the embedded objects in the order a browser
//!   discovers them ([`scan::discover`]): what the root references, then what those reference
//!   (stylesheets' `url()`/`@import`, frames' images).
//! - An object that does not change between visits has a single version.
//! - A bodiless response (a redirect, a 204) has one version with an empty `body` and size 0;
//!   a redirect carries its `Location` in `headers`.
//! - `Page.source` says where the structure came from, followed by any import warnings
//!   (`; warning: ...`).
//!
//! # Corpora
//! - [`paper_sites`]: the built-in `paper-sites` corpus, generated deterministically from a seed
//!   from the papers' page tables.
//! - [`import`]: HAR 1.2, WARC 1.0/1.1 and static-directory importers.
//! - [`list`]: the per-page summary `webpep lab corpus list` prints.

pub mod images;
pub mod import;
pub mod model;
pub mod paper_sites;
pub mod rng;
pub mod scan;
pub mod store;
pub mod synth;
pub mod text;
pub mod words;

pub use model::*;
pub use store::{body_hash, Corpus, CorpusError, CorpusWriter};

/// One line of `webpep lab corpus list`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PageSummary {
    pub id: String,
    /// Objects, the root document included.
    pub objects: usize,
    /// Distinct hosts the page's objects live on.
    pub domains: usize,
    /// Body bytes of the first visit (version 0 of every object).
    pub bytes: u64,
    /// Distinct visits the page has (its objects' most versions; visit k gets version k).
    pub versions: usize,
}

/// The pages of a corpus with their object count, domain count, bytes and versions, in
/// manifest order.
pub fn list(corpus: &Corpus) -> Vec<PageSummary> {
    corpus
        .manifest
        .pages
        .iter()
        .map(|p| PageSummary {
            id: p.id.clone(),
            objects: p.objects.len(),
            domains: p.domains().len(),
            bytes: p.bytes(0),
            versions: p
                .objects
                .iter()
                .map(|o| o.versions.len())
                .max()
                .unwrap_or(1),
        })
        .collect()
}
