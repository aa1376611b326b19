//! Watches the manifest directory: any event in it (a file written, renamed, removed; a mounted
//! ConfigMap swapping its `..data` link) becomes one "read it again" signal.

use std::path::{Path, PathBuf};

use tokio::sync::mpsc;

pub(crate) use crate::support::file_watch::DirWatch;

/// Why the directory cannot be watched.
#[derive(Debug, thiserror::Error)]
#[error("cannot watch ServiceEntry directory {}: {source} (does it exist?)", dir.display())]
pub struct WatchError {
    /// The directory.
    dir: PathBuf,
    /// notify's error.
    source: notify::Error,
}

/// Starts watching `dir`; the receiver gets a signal whenever anything in it may have changed.
pub(crate) fn watch_dir(dir: &Path) -> Result<(DirWatch, mpsc::Receiver<()>), WatchError> {
    crate::support::file_watch::watch_dir(dir, |_| true).map_err(|source| WatchError {
        dir: dir.to_path_buf(),
        source,
    })
}
