//! The watched directory of remote-cluster kubeconfigs: one file per cluster, the file name
//! (without `.yaml`, `.yml` or `.kubeconfig`) is the cluster id. Works with a Kubernetes Secret
//! mounted as a volume (its keys are files; updates swap a hidden `..data` link).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tokio::sync::mpsc;

use crate::model::ClusterId;
use crate::support::file_watch::DirWatch;
use crate::support::kube_client::Credentials;

/// Why the directory cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum DirError {
    /// It cannot be listed.
    #[error("cannot list remote cluster directory {}: {source} (does it exist?)", dir.display())]
    List {
        /// The directory.
        dir: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// notify cannot watch it.
    #[error("cannot watch remote cluster directory {}: {source}", dir.display())]
    Watch {
        /// The directory.
        dir: PathBuf,
        /// notify's error.
        source: notify::Error,
    },
}

/// Watches `dir`; the receiver gets a signal whenever anything in it may have changed.
pub(crate) fn watch_dir(dir: &Path) -> Result<(DirWatch, mpsc::Receiver<()>), DirError> {
    crate::support::file_watch::watch_dir(dir, |_| true).map_err(|source| DirError::Watch {
        dir: dir.to_path_buf(),
        source,
    })
}

/// The cluster id a file name stands for, or `None` for files to ignore.
pub(crate) fn cluster_id(file_name: &str) -> Option<ClusterId> {
    if file_name.starts_with('.') || file_name.is_empty() {
        return None;
    }
    let id = [".yaml", ".yml", ".kubeconfig"]
        .iter()
        .find_map(|ext| file_name.strip_suffix(ext))
        .unwrap_or(file_name);
    (!id.is_empty()).then(|| ClusterId::new(id))
}

/// Every cluster in `dir`: its credentials, or why its file is unusable.
pub(crate) fn scan(
    dir: &Path,
) -> Result<BTreeMap<ClusterId, Result<Credentials, String>>, DirError> {
    let list = |source| DirError::List {
        dir: dir.to_path_buf(),
        source,
    };
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(dir).map_err(list)? {
        let entry = entry.map_err(list)?;
        let path = entry.path();
        // Follows symlinks, as a mounted Secret's keys are.
        if !path.is_file() {
            continue;
        }
        let Some(id) = entry.file_name().to_str().and_then(cluster_id) else {
            continue;
        };
        out.insert(
            id,
            Credentials::from_file(&path, None).map_err(|e| e.to_string()),
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_to_cluster_ids() {
        assert_eq!(cluster_id("east.yaml"), Some(ClusterId::new("east")));
        assert_eq!(cluster_id("west"), Some(ClusterId::new("west")));
        assert_eq!(cluster_id("c1.kubeconfig"), Some(ClusterId::new("c1")));
        assert_eq!(cluster_id("..data"), None);
        assert_eq!(cluster_id(".hidden.yaml"), None);
    }

    #[test]
    fn scan_reports_bad_files_per_cluster() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("bad.yaml"), "clusters: [").unwrap();
        std::fs::write(dir.path().join(".ignored"), "x").unwrap();
        std::fs::create_dir(dir.path().join("subdir")).unwrap();
        let found = scan(dir.path()).unwrap();
        assert_eq!(found.len(), 1);
        let err = found[&ClusterId::new("bad")].as_ref().unwrap_err();
        assert!(err.contains("bad.yaml"), "{err}");
        assert!(scan(&dir.path().join("missing")).is_err());
    }
}
