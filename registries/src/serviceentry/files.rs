//! The file source: a directory of manifest files, read whole on every change.
//!
//! - Files: `*.yaml`, `*.yml` and `*.json` directly in the directory (symlinks followed, as a
//!   mounted ConfigMap's are; hidden files and subdirectories skipped). Each may hold several
//!   documents; documents of other kinds are ignored.
//! - A file whose text did not change is not parsed again.
//! - A file with a document that cannot be read as an object at all (bad YAML, no kind, no name:
//!   typically a file caught half-written) is reported and keeps its last readable version
//!   whole. A readable but invalid object keeps its own last valid version (see `store`).
//! - A file that disappears takes its objects with it; a directory that cannot be listed is a
//!   failure of the source (the registry reports Degraded and keeps everything), never "no files".

pub(crate) mod watch;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::ServiceEntryConfig;
use super::catalog::{self, Catalog, Pods};
use super::convert::Context;
use super::parse::{Document, Unreadable, parse_document, split_documents};
use super::store::{Entry, Place};
use crate::registry::Rejection;

/// Extensions of the files that are read.
const EXTENSIONS: [&str; 3] = ["yaml", "yml", "json"];

/// One file as last read.
#[derive(Debug, Default)]
pub(crate) struct FileState {
    /// The text last read; an unchanged text is not parsed again.
    text: String,
    /// The objects of its last readable version, in document order.
    pub(crate) entries: Vec<Entry>,
    /// Why its current text cannot be read; `entries` are then from the last readable text.
    problem: Option<Unreadable>,
    /// Whether some version of it was readable (so `entries` are still being served).
    had_good: bool,
}

/// The watched directory's files.
#[derive(Debug)]
pub(crate) struct Directory {
    dir: PathBuf,
    default_namespace: String,
    files: BTreeMap<PathBuf, FileState>,
    /// Why the directory itself cannot be listed, while it cannot.
    problem: Option<String>,
}

impl Directory {
    pub(crate) fn new(dir: PathBuf, default_namespace: String) -> Self {
        Self {
            dir,
            default_namespace,
            files: BTreeMap::new(),
            problem: None,
        }
    }

    /// The directory.
    pub(crate) fn path(&self) -> &Path {
        &self.dir
    }

    /// Why the directory cannot be listed, if it cannot.
    pub(crate) fn problem(&self) -> Option<&str> {
        self.problem.as_deref()
    }

    /// Reads the directory again; returns whether anything changed (a file's text, the set of
    /// files, or whether the directory or a file can be read). A listing failure keeps every file
    /// as it was.
    pub(crate) fn rescan(&mut self) -> bool {
        let problem_before = self.problem.clone();
        let names = match list(&self.dir) {
            Ok(names) => names,
            Err(e) => {
                if self.problem.is_none() {
                    tracing::error!(dir = %self.dir.display(), error = %e,
                        "cannot list the ServiceEntry directory; serving what was read before");
                }
                self.problem = Some(format!(
                    "cannot list ServiceEntry directory {}: {e} (does it exist and is it readable?)",
                    self.dir.display()
                ));
                return self.problem != problem_before;
            }
        };
        let mut changed = self.problem.take().is_some();
        if changed {
            tracing::info!(dir = %self.dir.display(), "ServiceEntry directory readable again");
        }
        let mut old = std::mem::take(&mut self.files);
        for path in names {
            let previous = old.remove(&path);
            let text = match std::fs::read_to_string(&path) {
                Ok(t) => t,
                // Deleted between listing and reading: gone.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    let mut state = previous.unwrap_or_default();
                    let problem = Some(Unreadable {
                        line: None,
                        message: format!("cannot read the file: {e}"),
                    });
                    changed |= state.problem != problem;
                    state.problem = problem;
                    state.text.clear();
                    self.files.insert(path, state);
                    continue;
                }
            };
            let state = match previous {
                Some(p) if p.text == text => p,
                previous => {
                    changed = true;
                    self.read(&path, text, previous)
                }
            };
            self.files.insert(path, state);
        }
        for path in old.keys() {
            tracing::info!(file = %path.display(), "ServiceEntry file removed");
            changed = true;
        }
        changed
    }

    fn read(&self, path: &Path, text: String, previous: Option<FileState>) -> FileState {
        let previous = previous.unwrap_or_default();
        match parse_file(path, &text, &self.default_namespace, &previous.entries) {
            Ok(entries) => {
                count_changes(&previous.entries, &entries);
                if previous.problem.is_some() {
                    tracing::info!(file = %path.display(), "ServiceEntry file readable again");
                }
                FileState {
                    text,
                    entries,
                    problem: None,
                    had_good: true,
                }
            }
            Err(problem) => {
                tracing::warn!(file = %path.display(), line = problem.line, error = %problem.message,
                    "ServiceEntry file cannot be read; keeping its last readable version");
                FileState {
                    text,
                    problem: Some(problem),
                    ..previous
                }
            }
        }
    }

    /// Every object, files in path order, documents in file order.
    pub(crate) fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.files.values().flat_map(|f| f.entries.iter())
    }

    /// The files that cannot be read.
    pub(crate) fn rejections(&self) -> Vec<Rejection> {
        self.files
            .iter()
            .filter_map(|(path, f)| {
                let p = f.problem.as_ref()?;
                let place = Place::File {
                    path: path.clone(),
                    line: None,
                };
                Some(Rejection {
                    object: format!("file {}", path.display()),
                    source: place.at(p.line),
                    field: String::new(),
                    message: match f.had_good {
                        true => format!("{}; its last readable version is still served", p.message),
                        false => p.message.clone(),
                    },
                    serving_previous: f.had_good,
                })
            })
            .collect()
    }
}

/// The manifest files in `dir`, sorted.
fn list(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let manifest = !name.starts_with('.')
            && name
                .rsplit_once('.')
                .is_some_and(|(_, ext)| EXTENSIONS.contains(&ext));
        let path = entry.path();
        // `is_file` follows symlinks, as a mounted ConfigMap's keys are.
        if manifest && path.is_file() {
            out.push(path);
        }
    }
    out.sort();
    Ok(out)
}

/// What one manifest file defines, read exactly as the directory source reads each of its files
/// (`parse_file`: split, parse, validate, REG-11) and converted exactly as the worker converts
/// what it holds (`catalog::build`, here with no other file and no pods). `Err` says why the file
/// cannot be read at all (line and message). For tools that check a manifest, and the fuzz targets
/// (SEC-12), which feed it untrusted text.
pub fn read_manifest(
    config: &ServiceEntryConfig,
    path: &Path,
    text: &str,
) -> Result<Catalog, String> {
    let entries =
        parse_file(path, text, &config.default_namespace, &[]).map_err(|u| match u.line {
            Some(line) => format!("{}:{line}: {}", path.display(), u.message),
            None => format!("{}: {}", path.display(), u.message),
        })?;
    let ctx = Context {
        origin: config.origin(),
        trust_domain: config.trust_domain.clone(),
    };
    Ok(catalog::build(&entries, &Pods::default(), &ctx))
}

/// Every problem of one manifest file, one line each: why it cannot be read (`file:line: message`)
/// or each object it rejects (`file: object: field: message`). What `tributary validate` prints.
pub fn manifest_problems(config: &ServiceEntryConfig, path: &Path, text: &str) -> Vec<String> {
    match read_manifest(config, path, text) {
        Err(e) => vec![e],
        Ok(catalog) => catalog
            .rejections
            .iter()
            .map(|r| format!("{}: {}: {}: {}", r.source, r.object, r.field, r.message))
            .collect(),
    }
}

/// Every problem of the manifest files the registry's directory holds (the files the directory
/// source reads, read the same way), for [`crate::config::AdapterConfig::source_problems`].
pub(crate) fn directory_problems(config: &ServiceEntryConfig) -> Vec<String> {
    let Some(dir) = &config.directory else {
        return Vec::new();
    };
    let files = match list(dir) {
        Ok(files) => files,
        Err(e) => {
            return vec![format!(
                "service_entry registry {:?}: directory {}: {e}",
                config.name,
                dir.display()
            )];
        }
    };
    files
        .iter()
        .flat_map(|f| match std::fs::read_to_string(f) {
            Ok(text) => manifest_problems(config, f, &text),
            Err(e) => vec![format!("{}: cannot read: {e}", f.display())],
        })
        .collect()
}

/// Counts a file's objects that appeared, changed or went away (`pilot_k8s_cfg_events`).
fn count_changes(before: &[Entry], after: &[Entry]) {
    use crate::metrics::{ObjectEvent, config_event};
    let old: std::collections::BTreeMap<_, _> = before.iter().map(|b| (&b.key, b)).collect();
    for e in after {
        match old.get(&e.key) {
            Some(b) if b.valid == e.valid && b.problems == e.problems => {}
            Some(_) => config_event(e.key.kind.name(), ObjectEvent::Update),
            None => config_event(e.key.kind.name(), ObjectEvent::Add),
        }
    }
    let new: std::collections::BTreeSet<_> = after.iter().map(|e| &e.key).collect();
    for b in before.iter().filter(|b| !new.contains(&b.key)) {
        config_event(b.key.kind.name(), ObjectEvent::Delete);
    }
}

/// Parses every document of a file; the first unreadable document makes the whole file
/// unreadable. `previous` lends last valid versions to objects that became invalid.
pub(crate) fn parse_file(
    path: &Path,
    text: &str,
    default_namespace: &str,
    previous: &[Entry],
) -> Result<Vec<Entry>, Unreadable> {
    let mut entries = Vec::new();
    for (line, doc) in split_documents(text) {
        let parsed = match parse_document(&doc, Some(line), default_namespace, true)? {
            Document::Empty | Document::Ignored => continue,
            Document::Object(p) => *p,
        };
        let before = previous.iter().find(|e| e.key == parsed.key);
        let place = Place::File {
            path: path.to_path_buf(),
            line: Some(line),
        };
        entries.push(Entry::new(parsed, place, before));
    }
    Ok(entries)
}

#[cfg(test)]
mod tests;
