//! The errors of the mock file format: every one names where (file, line, service, field).

use std::fmt;
use std::path::PathBuf;

use super::Seg;

/// A path to a field, relative to wherever the service came from (`ports[1].port`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FieldPath(pub(crate) Vec<Seg>);

impl FieldPath {
    pub(super) fn key(mut self, key: &str) -> Self {
        self.0.push(Seg::Key(key.to_string()));
        self
    }

    pub(super) fn index(mut self, index: usize) -> Self {
        self.0.push(Seg::Index(index));
        self
    }

    /// `prefix` followed by this path.
    pub(crate) fn under(&self, prefix: &[Seg]) -> FieldPath {
        FieldPath(
            prefix
                .iter()
                .cloned()
                .chain(self.0.iter().cloned())
                .collect(),
        )
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        crate::support::yaml_locate::write_path(f, &self.0)
    }
}

/// A field of one service that fails a check.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("service {hostname:?}: {field}: {message}")]
pub struct InvalidField {
    /// The service's hostname as written (it may itself be the bad field).
    pub hostname: String,
    /// The bad field, relative to the service.
    pub field: FieldPath,
    /// What is wrong with it.
    pub message: String,
}

/// Why a list of services is not acceptable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// One service has a bad field.
    #[error("services[{index}]: {source}")]
    Invalid {
        /// The service's position in the list.
        index: usize,
        /// What is wrong.
        source: InvalidField,
    },
    /// Two services have the same hostname.
    #[error("hostname {hostname:?} is defined twice, by services[{first}] and services[{second}]")]
    DuplicateHostname {
        /// The hostname (lower-cased).
        hostname: String,
        /// The first definition's position.
        first: usize,
        /// The second definition's position.
        second: usize,
    },
}

/// Why a mock registry file cannot be used. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The file cannot be read (missing, a directory, no permission).
    #[error("cannot read mock registry file {}: {source} (does it exist and is it readable?)", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why reading failed.
        source: std::io::Error,
    },
    /// The file is larger than `MAX_FILE_BYTES`.
    #[error("mock registry file {} is larger than the {limit}-byte limit; serve a mesh this big from a real registry", path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The limit, in bytes.
        limit: u64,
    },
    /// The file nests `[`/`{` deeper than `MAX_FLOW_DEPTH`.
    #[error("{}:{line}: `[`/`{{` nested deeper than {limit} (a mock file needs 2 or 3; brackets in comments and strings count too)", path.display())]
    TooDeep {
        /// The file.
        path: PathBuf,
        /// The line where the limit was passed.
        line: usize,
        /// The limit.
        limit: usize,
    },
    /// The file is not valid YAML or does not match the format (unknown field, bad protocol, ...).
    #[error("{}:{}: {}{message}", path.display(), line_text(*line), service_text(hostname.as_deref()))]
    Syntax {
        /// The file.
        path: PathBuf,
        /// 1-based line, when known.
        line: Option<usize>,
        /// The service the error is in, when known.
        hostname: Option<String>,
        /// serde_yaml's message, which starts with the field path (`services[0].ports[0].protocol`).
        message: String,
    },
    /// A service fails a check (port 0, duplicate port, unknown endpoint port name, ...).
    #[error("{}:{}: service {hostname:?}: {field}: {message}", path.display(), line_text(*line))]
    Invalid {
        /// The file.
        path: PathBuf,
        /// 1-based line of the bad field, when known.
        line: Option<usize>,
        /// The service's hostname as written.
        hostname: String,
        /// The bad field from the top of the file (`services[2].ports[1].port`).
        field: FieldPath,
        /// What is wrong.
        message: String,
    },
    /// Two services have the same hostname.
    #[error(
        "{}:{}: hostname {hostname:?} is defined twice: services[{first}] (line {}) and services[{second}] (line {})",
        path.display(), line_text(*second_line), line_text(*first_line), line_text(*second_line)
    )]
    DuplicateHostname {
        /// The file.
        path: PathBuf,
        /// The hostname (lower-cased).
        hostname: String,
        /// The first definition's position and line.
        first: usize,
        /// Line of the first definition's hostname.
        first_line: Option<usize>,
        /// The second definition's position.
        second: usize,
        /// Line of the second definition's hostname.
        second_line: Option<usize>,
    },
}

fn line_text(line: Option<usize>) -> String {
    line.map_or_else(|| "?".to_string(), |l| l.to_string())
}

fn service_text(hostname: Option<&str>) -> String {
    hostname.map_or_else(String::new, |h| format!("service {h:?}: "))
}
