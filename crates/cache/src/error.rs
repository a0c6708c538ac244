//! The cache's error type.

use std::path::PathBuf;

/// What can go wrong opening or writing the cache. Lookups never fail: a damaged entry is a miss.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// A file or directory operation failed.
    #[error("cache I/O on {path}: {source}")]
    Io {
        /// The file or directory involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The metadata index (redb) failed.
    #[error("cache index: {0}")]
    Index(#[from] Box<redb::Error>),
    /// A configuration value makes no sense (e.g. `max_bytes` of 0).
    #[error("cache configuration: {0}")]
    Config(String),
    /// The async runtime is shutting down: the operation never ran.
    #[error("cache: the runtime is shutting down")]
    ShuttingDown,
}

impl CacheError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        CacheError::Io {
            path: path.into(),
            source,
        }
    }
}

/// Convert any of redb's specific error types through its umbrella type.
pub(crate) fn index_err<E: Into<redb::Error>>(e: E) -> CacheError {
    CacheError::Index(Box::new(e.into()))
}
