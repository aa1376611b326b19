//! Watches the manifest directory: any event in it (a file written, renamed, removed; a mounted
//! ConfigMap swapping its `..data` link) becomes one "read it again" signal.

use std::path::{Path, PathBuf};

use notify::{RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::mpsc;

/// Room for one "the directory may have changed" signal: one waiting means a rescan is coming
/// anyway, so more are dropped rather than queued.
const DIR_EVENT_CAPACITY: usize = 1;

/// Why the directory cannot be watched.
#[derive(Debug, thiserror::Error)]
#[error("cannot watch ServiceEntry directory {}: {source} (does it exist?)", dir.display())]
pub struct WatchError {
    /// The directory.
    dir: PathBuf,
    /// notify's error.
    source: notify::Error,
}

/// A running watch; dropping it stops watching.
pub(crate) struct DirWatch {
    _watcher: RecommendedWatcher,
}

impl std::fmt::Debug for DirWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DirWatch")
    }
}

/// Starts watching `dir`; the receiver gets a signal whenever anything in it may have changed.
pub(crate) fn watch_dir(dir: &Path) -> Result<(DirWatch, mpsc::Receiver<()>), WatchError> {
    let (tx, rx) = mpsc::channel(DIR_EVENT_CAPACITY);
    let err = |source| WatchError {
        dir: dir.to_path_buf(),
        source,
    };
    let mut watcher = notify::recommended_watcher(move |_: notify::Result<notify::Event>| {
        // Full: a rescan is already due. Closed: the registry stopped. An error event may hide a
        // change, so it signals too.
        let _ = tx.try_send(());
    })
    .map_err(err)?;
    watcher
        .watch(dir, RecursiveMode::NonRecursive)
        .map_err(err)?;
    Ok((DirWatch { _watcher: watcher }, rx))
}
