//! Access to the admin's mutating call (`/debug/adsz?push=true`): off unless `admin.allow_push`;
//! with `admin.token_file`, the request must carry `Authorization: Bearer <token>`. Config
//! validation already refuses a push on a non-loopback admin without a token file.

use http::{HeaderMap, StatusCode, header};

use crate::config::AdminSettings;

/// Why a mutating call is refused: the status and the text the client gets.
#[derive(Debug, thiserror::Error)]
pub(super) enum Refusal {
    /// `admin.allow_push` is off.
    #[error("pushes through the admin API are disabled; set admin.allow_push: true to enable them")]
    Disabled,
    /// No or a wrong bearer token.
    #[error("a valid `Authorization: Bearer <token>` header is required (admin.token_file)")]
    Unauthorized,
    /// The token file cannot be read: refuse rather than open up.
    #[error("cannot read admin.token_file: {0}; refusing mutating calls")]
    TokenFile(std::io::Error),
}

impl Refusal {
    /// The HTTP status for this refusal.
    pub(super) fn status(&self) -> StatusCode {
        match self {
            Refusal::Disabled => StatusCode::FORBIDDEN,
            Refusal::Unauthorized => StatusCode::UNAUTHORIZED,
            Refusal::TokenFile(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }
}

/// Whether this request may call a mutating handler.
pub(super) fn authorize_mutation(
    settings: &AdminSettings,
    headers: &HeaderMap,
) -> Result<(), Refusal> {
    if !settings.allow_push {
        return Err(Refusal::Disabled);
    }
    let Some(path) = &settings.token_file else {
        return Ok(());
    };
    let expected = std::fs::read_to_string(path).map_err(Refusal::TokenFile)?;
    let expected = expected.trim();
    if expected.is_empty() {
        return Err(Refusal::TokenFile(std::io::Error::other(
            "the file is empty",
        )));
    }
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .ok_or(Refusal::Unauthorized)?;
    match constant_time_eq(given.as_bytes(), expected.as_bytes()) {
        true => Ok(()),
        false => Err(Refusal::Unauthorized),
    }
}

/// Compares without returning early at the first differing byte, so response timing does not
/// reveal how much of a guess was right.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
