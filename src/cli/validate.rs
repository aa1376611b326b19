//! `tributary validate [--config F] [FILE|DIR ...]`: checks a config file (and the files its
//! registries and config sources name), mock registry files and Istio YAML (ServiceEntry,
//! WorkloadEntry, DestinationRule, VirtualService) without running anything, prints every
//! problem as `file:line: message`, and fails when there is any (as `istioctl analyze` and
//! `envoy --mode validate` do).
//!
//! A file's kind is recognised by its content: documents with `kind: ServiceEntry` or
//! `WorkloadEntry`, or any `networking.istio.io` `apiVersion`, are Istio config, a top-level `services:` is a mock registry file, anything
//! else must be a tributary config file.

use std::path::{Path, PathBuf};

use clap::Args;
use tributary_registries::mock::MockConfig;
use tributary_registries::serviceentry::{ServiceEntryConfig, manifest_problems};

use crate::config::{Config, ConfigError};

/// File name endings read from a directory.
const EXTENSIONS: &[&str] = &["yaml", "yml", "json"];

/// Flags of `tributary validate`.
#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// A tributary config file; the mock files and ServiceEntry directories it names are checked
    /// too.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Files or directories (their `.yaml`, `.yml` and `.json` files) to check: mock registry
    /// files, Istio manifests (ServiceEntry, WorkloadEntry, DestinationRule, VirtualService) or
    /// config files.
    #[arg(value_name = "PATH")]
    pub paths: Vec<PathBuf>,
}

/// What kind of file a text is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Istio,
    Mock,
    Config,
}

impl ValidateArgs {
    /// Every problem found, each `file[:line]: message`.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.config.is_none() && self.paths.is_empty() {
            out.push("nothing to validate: give --config FILE and/or files or directories".into());
        }
        if let Some(path) = &self.config {
            check_config(path, &mut out);
        }
        for path in &self.paths {
            match files_under(path) {
                Ok(files) => files.iter().for_each(|f| check_file(f, &mut out)),
                Err(e) => out.push(format!("{}: {e}", path.display())),
            }
        }
        out
    }

    /// Prints the problems; `Err` when there is any (the process then exits 1).
    pub fn run(&self) -> anyhow::Result<()> {
        let problems = self.problems();
        for p in &problems {
            println!("{p}");
        }
        match problems.len() {
            0 => {
                println!("no validation issues found");
                Ok(())
            }
            n => anyhow::bail!("{n} validation problem(s) found"),
        }
    }
}

/// The files a path stands for: itself, or a directory's manifest files (sorted, not recursive).
fn files_under(path: &Path) -> std::io::Result<Vec<PathBuf>> {
    if !path.is_dir() {
        std::fs::metadata(path)?;
        return Ok(vec![path.to_path_buf()]);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(path)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .filter(|p| {
            p.extension()
                .and_then(|e| e.to_str())
                .is_some_and(|e| EXTENSIONS.contains(&e))
        })
        .collect();
    files.sort();
    Ok(files)
}

fn check_file(path: &Path, out: &mut Vec<String>) {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => return out.push(format!("{}: cannot read: {e}", path.display())),
    };
    match classify(&text) {
        Kind::Istio => out.extend(manifest_problems(
            &ServiceEntryConfig::default(),
            path,
            &text,
        )),
        Kind::Mock => {
            let mock = MockConfig {
                file: Some(path.to_path_buf()),
                ..MockConfig::default()
            };
            if let Err(e) = mock.check_file() {
                out.push(e.to_string());
            }
        }
        Kind::Config => check_config(path, out),
    }
}

/// Recognises a file by its documents' top-level keys.
fn classify(text: &str) -> Kind {
    let mut kind = Kind::Config;
    for doc in serde_yaml::Deserializer::from_str(text) {
        // After a syntax error the document iterator does not advance: stop there (the file's
        // check then reports the error with its line).
        let Ok(value) = <serde_yaml::Value as serde::Deserialize>::deserialize(doc) else {
            break;
        };
        let Some(map) = value.as_mapping() else {
            continue;
        };
        let key = |k: &str| map.get(k).and_then(|v| v.as_str()).map(str::to_string);
        if matches!(
            key("kind").as_deref(),
            Some("ServiceEntry" | "WorkloadEntry")
        ) || key("apiVersion").is_some_and(|v| v.starts_with("networking.istio.io/"))
        {
            return Kind::Istio;
        }
        if map.contains_key("services") && !map.contains_key("registries") {
            kind = Kind::Mock;
        }
    }
    kind
}

fn check_config(path: &Path, out: &mut Vec<String>) {
    let config = match Config::from_file(path) {
        Ok(c) => c,
        Err(ConfigError::Parse { path, source }) => {
            let line = source.location().map(|l| format!(":{}", l.line()));
            return out.push(format!(
                "{}{}: {source}",
                path.display(),
                line.unwrap_or_default()
            ));
        }
        Err(e) => return out.push(format!("{}: {e}", path.display())),
    };
    if let Err(e) = config.check_sources() {
        out.push(format!("{}: {e}", path.display()));
    }
    // Every file each registry reads (`config_sources` entries too, as the registries they run
    // as), as the registry itself reads it.
    for r in &config.all_registries() {
        out.extend(r.source_problems());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_recognised_by_content() {
        let se = "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: a}\n";
        assert_eq!(classify(se), Kind::Istio);
        assert_eq!(
            classify("---\n{}\n---\n".to_string().as_str()),
            Kind::Config
        );
        assert_eq!(classify("services:\n- hostname: a.b\n"), Kind::Mock);
        assert_eq!(classify("registries: []\nservices: []\n"), Kind::Config);
        assert_eq!(classify("xds_addr: 127.0.0.1:1\n"), Kind::Config);
        assert_eq!(
            classify("registries: [\n"),
            Kind::Config,
            "ends on a syntax error"
        );
    }
}
