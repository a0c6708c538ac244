//! Files webpep writes whole: corpora, certificates and keys, credentials.
//!
//! Each is written to a temporary file beside it, synced, and renamed over the old one, so a
//! crash never leaves a torn file; a private one (a key) is created with mode 0600, so it is
//! never readable by others, not even for a moment.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Who may read the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// The process's umask decides (as for any file).
    Public,
    /// Its owner only (0600).
    Private,
}

/// Writes `bytes` to `path` atomically. The error names the file it concerns.
pub fn write_atomic(path: &Path, bytes: &[u8], access: Access) -> Result<(), FileError> {
    let tmp = path.with_extension("tmp");
    // A leftover temporary file (a crash mid-write) is removed, not reused: opened again it
    // would keep whatever permissions it had, and a private file must be created 0600.
    match fs::remove_file(&tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(source) => return Err(FileError::Io { path: tmp, source }),
    }
    let mut options = fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    if access == Access::Private {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    #[cfg(not(unix))]
    let _ = access;
    let write = || -> io::Result<()> {
        let mut f = options.open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()
    };
    if let Err(source) = write() {
        let _ = fs::remove_file(&tmp);
        return Err(FileError::Io { path: tmp, source });
    }
    fs::rename(&tmp, path).map_err(|source| FileError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Reads a file that holds a secret, refusing one that other users can read or write.
pub fn read_private(path: &Path) -> Result<String, FileError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(path)
            .map_err(|source| FileError::Io {
                path: path.to_path_buf(),
                source,
            })?
            .permissions()
            .mode()
            & 0o777;
        if mode & 0o077 != 0 {
            return Err(FileError::TooOpen {
                path: path.to_path_buf(),
                mode,
            });
        }
    }
    fs::read_to_string(path).map_err(|source| FileError::Io {
        path: path.to_path_buf(),
        source,
    })
}

#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("{path}: {source}", path = path.display())]
    Io { path: PathBuf, source: io::Error },
    #[error(
        "{path} can be read by other users (mode {mode:o}); it holds a secret: chmod 600 it",
        path = path.display()
    )]
    TooOpen { path: PathBuf, mode: u32 },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_files_are_0600_and_readable_ones_are_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("key.pem");
        write_atomic(&key, b"secret", Access::Private).unwrap();
        let mode = fs::metadata(&key).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(read_private(&key).unwrap(), "secret");
        // Written again, the new content replaces the old whole, still 0600.
        write_atomic(&key, b"other", Access::Private).unwrap();
        assert_eq!(read_private(&key).unwrap(), "other");
        fs::set_permissions(&key, fs::Permissions::from_mode(0o640)).unwrap();
        let err = read_private(&key).unwrap_err();
        assert!(
            matches!(err, FileError::TooOpen { mode: 0o640, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("key.pem"));
        // A temporary file left world-readable by a crash is not reused.
        let tmp = key.with_extension("tmp");
        fs::write(&tmp, b"stale").unwrap();
        fs::set_permissions(&tmp, fs::Permissions::from_mode(0o666)).unwrap();
        write_atomic(&key, b"third", Access::Private).unwrap();
        let mode = fs::metadata(&key).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert!(!tmp.exists());
    }

    #[test]
    fn a_failed_write_names_the_file_and_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing-dir").join("f");
        let err = write_atomic(&path, b"x", Access::Public).unwrap_err();
        assert!(err.to_string().contains("missing-dir"), "{err}");
        assert!(!dir.path().join("missing-dir").exists());
    }
}
