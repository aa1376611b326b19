//! Watching a directory for changes, reduced to a bare "it may have changed" signal; the adapter's
//! worker debounces (with tokio's clock, so tests pause it) and reads again.
//!
//! notify delivers events on its own thread; each relevant one becomes a `try_send` into a channel
//! with room for one signal: one already waiting means a read is coming anyway, so further ones
//! are dropped rather than queued. An error event may hide a change, so it signals too.

use std::path::Path;

use notify::{Event, RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::mpsc;

/// Room for one "it may have changed" signal (see the module docs).
const SIGNAL_CAPACITY: usize = 1;

/// A running watch; dropping it stops watching.
pub(crate) struct DirWatch {
    _watcher: RecommendedWatcher,
}

impl std::fmt::Debug for DirWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DirWatch")
    }
}

/// Watches `dir` (not its subdirectories); the receiver gets a signal for every event `relevant`
/// accepts, and for every watch error.
pub(crate) fn watch_dir(
    dir: &Path,
    relevant: impl Fn(&Event) -> bool + Send + 'static,
) -> Result<(DirWatch, mpsc::Receiver<()>), notify::Error> {
    let (tx, rx) = mpsc::channel(SIGNAL_CAPACITY);
    let mut watcher = notify::recommended_watcher(move |res: notify::Result<Event>| {
        if res.as_ref().map_or(true, &relevant) {
            // Full: a read is already due. Closed: the registry stopped.
            let _ = tx.try_send(());
        }
    })?;
    watcher.watch(dir, RecursiveMode::NonRecursive)?;
    Ok((DirWatch { _watcher: watcher }, rx))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// Long enough for inotify to deliver on a loaded machine; the test ends as soon as it does.
    const DELIVERY: Duration = Duration::from_secs(10);

    #[tokio::test]
    async fn a_relevant_event_signals_and_a_missing_directory_fails() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (_watch, mut rx) = watch_dir(dir.path(), |e: &Event| {
            e.paths.iter().any(|p| p.ends_with("wanted.yaml"))
        })
        .expect("watch");
        std::fs::write(dir.path().join("other.yaml"), "x").expect("write");
        std::fs::write(dir.path().join("wanted.yaml"), "x").expect("write");
        tokio::time::timeout(DELIVERY, rx.recv())
            .await
            .expect("a signal for wanted.yaml")
            .expect("channel open");
        assert!(
            watch_dir(&dir.path().join("missing"), |_: &Event| true).is_err(),
            "a missing directory cannot be watched"
        );
    }
}
