//! Log output: text with colour only on a terminal (never with `NO_COLOR`), or JSON lines and
//! nothing else; an invalid filter directive is an error, not a silent fallback.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// Why logging cannot start.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// The filter does not parse.
    #[error(
        "invalid log filter {filter:?} (--log-level / RUST_LOG): {source}; \
         use e.g. `info` or `info,tributary::xds=debug`"
    )]
    Filter {
        /// What was given.
        filter: String,
        /// What the parser said.
        source: tracing_subscriber::filter::ParseError,
    },
}

/// How logs are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogFormat {
    /// JSON lines instead of text.
    pub json: bool,
    /// ANSI colours (text only).
    pub ansi: bool,
}

impl LogFormat {
    /// The format for this process: colour only when stdout is a terminal and `no_color` (the
    /// `NO_COLOR` variable, <https://no-color.org>) is unset or empty, and never in JSON.
    pub fn detect(json: bool, no_color: Option<&str>) -> Self {
        let no_color = no_color.is_some_and(|v| !v.is_empty());
        Self {
            json,
            ansi: !json && !no_color && std::io::stdout().is_terminal(),
        }
    }
}

/// Parses a filter strictly: every directive must be valid.
pub(super) fn parse_filter(filter: &str) -> Result<EnvFilter, LogError> {
    EnvFilter::builder()
        .parse(filter)
        .map_err(|source| LogError::Filter {
            filter: filter.to_string(),
            source,
        })
}

/// Installs the global subscriber.
pub(super) fn init(filter: &str, format: LogFormat) -> Result<(), LogError> {
    let filter = parse_filter(filter)?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(format.ansi);
    // A second init (tests) keeps the first subscriber.
    let _ = match format.json {
        true => builder.json().try_init(),
        false => builder.try_init(),
    };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_directives_are_errors() {
        assert!(parse_filter("info").is_ok());
        assert!(parse_filter("info,tributary::xds=debug").is_ok());
        for bad in ["info,tributary=loud", "=debug", "tributary[{=info"] {
            let err = parse_filter(bad).unwrap_err().to_string();
            assert!(err.contains(bad), "{bad}: {err}");
        }
    }

    #[test]
    fn no_colour_in_json_or_with_no_color() {
        assert!(!LogFormat::detect(true, None).ansi);
        assert!(!LogFormat::detect(false, Some("1")).ansi);
        // Test output is captured, not a terminal.
        assert!(!LogFormat::detect(false, None).ansi || std::io::stdout().is_terminal());
    }
}
