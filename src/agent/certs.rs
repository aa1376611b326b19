//! Watches the certificate, key and CA files: a change of their content (written in place or
//! renamed over, as rotation tools do) is one rotation.

use std::path::PathBuf;
use std::time::Duration;

use notify::{RecursiveMode, Watcher};
use tokio::sync::mpsc;
use xxhash_rust::xxh3::xxh3_64;

use super::AgentError;

/// Events are gathered this long before the files are read, so a rotation that writes the
/// certificate and then the key is one restart, not two.
const SETTLE: Duration = Duration::from_millis(200);

/// Wake-ups waiting to be seen; one is enough (the files are re-read anyway).
const WAKE_CAPACITY: usize = 1;

/// The watch; dropping it stops watching.
pub(super) struct CertWatch {
    files: Vec<PathBuf>,
    last: u64,
    wake: mpsc::Receiver<()>,
    /// A wake-up was seen; the files are read at this time.
    settle_until: Option<tokio::time::Instant>,
    _watcher: Option<notify::RecommendedWatcher>,
}

impl std::fmt::Debug for CertWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertWatch")
            .field("files", &self.files)
            .finish()
    }
}

impl CertWatch {
    /// Watches `files` (none: never fires).
    pub(super) fn new(files: Vec<PathBuf>) -> Result<Self, AgentError> {
        let (tx, wake) = mpsc::channel(WAKE_CAPACITY);
        let last = fingerprint(&files);
        if files.is_empty() {
            return Ok(Self {
                files,
                last,
                wake,
                settle_until: None,
                _watcher: None,
            });
        }
        let watch_error = |e: notify::Error| AgentError::Watch(e.to_string());
        let mut watcher = notify::recommended_watcher(move |_event| {
            let _ = tx.try_send(());
        })
        .map_err(watch_error)?;
        let mut dirs: Vec<PathBuf> = files
            .iter()
            .map(|f| match f.parent() {
                Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
                _ => PathBuf::from("."),
            })
            .collect();
        dirs.sort();
        dirs.dedup();
        for d in &dirs {
            watcher
                .watch(d, RecursiveMode::NonRecursive)
                .map_err(watch_error)?;
        }
        Ok(Self {
            files,
            last,
            wake,
            settle_until: None,
            _watcher: Some(watcher),
        })
    }

    /// Resolves when the files' content changed since the last time it resolved. Cancel-safe: a
    /// wake-up seen before the future was dropped is remembered in `settle_until`.
    pub(super) async fn changed(&mut self) {
        loop {
            let until = match self.settle_until {
                Some(t) => t,
                None => {
                    if self.wake.recv().await.is_none() {
                        return std::future::pending().await;
                    }
                    *self
                        .settle_until
                        .insert(tokio::time::Instant::now() + SETTLE)
                }
            };
            tokio::time::sleep_until(until).await;
            self.settle_until = None;
            while self.wake.try_recv().is_ok() {}
            let now = fingerprint(&self.files);
            if now != self.last {
                self.last = now;
                return;
            }
        }
    }
}

/// One hash over every file's content (a missing file counts as empty, mid-rename).
fn fingerprint(files: &[PathBuf]) -> u64 {
    let mut all = Vec::new();
    for f in files {
        all.extend(std::fs::read(f).unwrap_or_default());
        all.push(0);
    }
    xxh3_64(&all)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_rename_over_a_watched_file_is_a_change_and_a_touch_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let cert = dir.path().join("cert.pem");
        std::fs::write(&cert, "one").unwrap();
        let mut w = CertWatch::new(vec![cert.clone()]).unwrap();
        // Same content again: no rotation.
        std::fs::write(&cert, "one").unwrap();
        let quiet = tokio::time::timeout(Duration::from_millis(600), w.changed()).await;
        assert!(quiet.is_err(), "unchanged content must not rotate");
        let tmp = dir.path().join("cert.tmp");
        std::fs::write(&tmp, "two").unwrap();
        std::fs::rename(&tmp, &cert).unwrap();
        tokio::time::timeout(Duration::from_secs(5), w.changed())
            .await
            .expect("a renamed-over certificate is a rotation");
    }

    #[tokio::test]
    async fn a_change_seen_by_a_dropped_wait_is_not_lost() {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("key.pem");
        std::fs::write(&key, "one").unwrap();
        let mut w = CertWatch::new(vec![key.clone()]).unwrap();
        std::fs::write(&key, "two").unwrap();
        // The first wait sees the event, then is dropped while settling (as when another branch
        // of the agent's select wins).
        let early = tokio::time::timeout(SETTLE / 2 + Duration::from_millis(50), w.changed()).await;
        assert!(early.is_err(), "still settling");
        tokio::time::timeout(Duration::from_secs(5), w.changed())
            .await
            .expect("the change seen before the drop still counts");
    }
}
