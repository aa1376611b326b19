//! Watches the mock registry file for changes.
//!
//! We watch the file's *directory*, not the file: editors and `mv` replace a file by renaming a
//! new one over it, which ends a watch on the old inode. Events are filtered to the file's name
//! and to kinds that change what the file holds ([`changes_content`]), and reduced to a bare "it
//! may have changed" signal; the worker debounces and re-reads.
//!
//! The kind filter matters: inotify also reports opens, reads and closes, including the worker's
//! own re-read, so without it every read caused another read, forever.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use notify::event::{AccessKind, AccessMode, EventKind, ModifyKind};
use notify::{RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::mpsc;

/// Room for one "the file may have changed" signal. A signal already waiting means a reload is
/// coming anyway, so further ones are dropped rather than queued.
const FILE_EVENT_CAPACITY: usize = 1;

/// Why the file cannot be watched.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// The path has no file name (`/`, `..`).
    #[error("mock registry file {} does not name a file", .0.display())]
    NotAFile(PathBuf),
    /// notify could not watch the directory.
    #[error("cannot watch directory {} for mock registry file changes: {source} (does it exist?)", dir.display())]
    Notify {
        /// The directory.
        dir: PathBuf,
        /// notify's error.
        source: notify::Error,
    },
}

/// A running watch; dropping it stops watching.
#[derive(Debug)]
pub(crate) struct FileWatch {
    _watcher: RecommendedWatcher,
}

/// Starts watching `path`; the receiver gets a signal whenever it may have changed.
pub(crate) fn watch_file(path: &Path) -> Result<(FileWatch, mpsc::Receiver<()>), WatchError> {
    let name: OsString = path
        .file_name()
        .ok_or_else(|| WatchError::NotAFile(path.to_path_buf()))?
        .to_os_string();
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let (tx, rx) = mpsc::channel(FILE_EVENT_CAPACITY);
    let mut watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
        let relevant = match &res {
            Ok(event) => {
                changes_content(&event.kind)
                    && event
                        .paths
                        .iter()
                        .any(|p| p.file_name() == Some(name.as_os_str()))
            }
            // A watch error may hide a change: re-read to be safe.
            Err(_) => true,
        };
        if relevant {
            // Full means a reload is already pending; closed means the registry stopped.
            let _ = tx.try_send(());
        }
    })
    .map_err(|source| WatchError::Notify {
        dir: dir.clone(),
        source,
    })?;
    watcher
        .watch(&dir, RecursiveMode::NonRecursive)
        .map_err(|source| WatchError::Notify {
            dir: dir.clone(),
            source,
        })?;
    Ok((FileWatch { _watcher: watcher }, rx))
}

/// Whether an event of this kind can change what the file holds: created, written, closed after
/// writing, renamed (over or away), removed. Opens, reads, closes after reading and metadata
/// changes (`touch`, `chmod`) cannot; kinds a backend does not detail are taken as changes.
fn changes_content(kind: &EventKind) -> bool {
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        EventKind::Modify(ModifyKind::Metadata(_)) => false,
        EventKind::Create(_)
        | EventKind::Modify(_)
        | EventKind::Remove(_)
        | EventKind::Any
        | EventKind::Other => true,
    }
}

#[cfg(test)]
mod tests {
    use notify::event::{CreateKind, DataChange, MetadataKind, RenameMode};

    use super::*;

    #[test]
    fn only_content_changes_count() {
        for kind in [
            EventKind::Access(AccessKind::Open(AccessMode::Any)),
            EventKind::Access(AccessKind::Read),
            EventKind::Access(AccessKind::Close(AccessMode::Read)),
            EventKind::Modify(ModifyKind::Metadata(MetadataKind::Any)),
        ] {
            assert!(!changes_content(&kind), "{kind:?}");
        }
        for kind in [
            EventKind::Create(CreateKind::File),
            EventKind::Modify(ModifyKind::Data(DataChange::Any)),
            EventKind::Modify(ModifyKind::Name(RenameMode::To)),
            EventKind::Access(AccessKind::Close(AccessMode::Write)),
            EventKind::Remove(notify::event::RemoveKind::File),
            EventKind::Other,
        ] {
            assert!(changes_content(&kind), "{kind:?}");
        }
    }
}
