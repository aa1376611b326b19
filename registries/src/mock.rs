//! PLACEHOLDER: the mock registry lands here.
use std::path::PathBuf;

/// Placeholder.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MockConfig {
    /// Placeholder.
    pub name: String,
    /// Placeholder.
    pub file: Option<PathBuf>,
}

impl Default for MockConfig {
    fn default() -> Self {
        Self { name: "mock".into(), file: None }
    }
}
