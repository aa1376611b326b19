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
use tokio::sync::mpsc;

/// A running watch; dropping it stops watching.
pub(crate) use crate::support::file_watch::DirWatch as FileWatch;

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
    let relevant = move |event: &notify::Event| {
        changes_content(&event.kind)
            && event
                .paths
                .iter()
                .any(|p| p.file_name() == Some(name.as_os_str()))
    };
    crate::support::file_watch::watch_dir(&dir, relevant)
        .map_err(|source| WatchError::Notify { dir, source })
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
