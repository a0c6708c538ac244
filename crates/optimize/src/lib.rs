//! webpep's content optimizations, each one module behind a small API (DESIGN §3, §10).

pub mod compress;
pub mod rewrite;
pub mod transcode;
