//! Where and how the mock registry's control API (`tributary.mock.v1.MockRegistry`) is served.
//!
//! The control API rewrites the mesh and injects faults, so it is never on an xDS port: it is off
//! unless `control_api:` is configured (or `--control-addr` given), then served on its own
//! listener, loopback by default ([`DEFAULT_CONTROL_ADDR`]). A bearer token read from a file
//! can be required on any address, and must be when the listener is reachable beyond loopback
//! (docs/hardening.md, "The control API").
//!
//! It does not do mTLS client authentication (the xDS mTLS port's certificates identify proxies,
//! not operators) or per-method authorization: a caller with the token may call every method.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tonic::metadata::MetadataMap;
use tonic::service::Routes;
use tonic::service::interceptor::InterceptedService;
use tonic::{Request, Status};
use tributary_registries::mock::MockControl;

/// The default control API address: on loopback, next to istiod's familiar ports (15010 plaintext
/// xDS, 15012 mTLS xDS, 15014 monitoring) on one that Istio leaves unused.
pub const DEFAULT_CONTROL_ADDR: &str = "127.0.0.1:15016";

/// Shortest token accepted: 16 bytes, so a token cannot be guessed by trying.
pub const MIN_TOKEN_BYTES: usize = 16;

/// Largest token file read (a token is a line, not a document).
const MAX_TOKEN_FILE_BYTES: u64 = 4096;

/// The `control_api:` section of the config file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ControlApiConfig {
    /// Where the control API listens [default: 127.0.0.1:15016].
    #[serde(default = "default_addr")]
    pub addr: SocketAddr,
    /// A file holding the bearer token every call must carry (`authorization: Bearer <token>`);
    /// surrounding whitespace is ignored. Required when `addr` is not a loopback address.
    #[serde(default)]
    pub token_file: Option<PathBuf>,
}

impl Default for ControlApiConfig {
    fn default() -> Self {
        Self {
            addr: default_addr(),
            token_file: None,
        }
    }
}

fn default_addr() -> SocketAddr {
    DEFAULT_CONTROL_ADDR
        .parse()
        .expect("constant address parses")
}

/// Why the control API cannot be served as configured.
#[derive(Debug, thiserror::Error)]
pub enum ControlApiError {
    /// A non-loopback address without a token.
    #[error(
        "control_api.addr {0} is reachable beyond loopback: set control_api.token_file, or listen on 127.0.0.1"
    )]
    Unauthenticated(SocketAddr),
    /// The token file cannot be read.
    #[error("cannot read control_api.token_file {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The token is too short (or the file empty).
    #[error("control_api.token_file {} holds {len} bytes of token; at least {MIN_TOKEN_BYTES} are needed", path.display())]
    WeakToken {
        /// The file.
        path: PathBuf,
        /// The token's length.
        len: usize,
    },
}

impl ControlApiConfig {
    /// Checks what can be checked without reading files.
    pub fn validate(&self) -> Result<(), ControlApiError> {
        if !self.addr.ip().is_loopback() && self.token_file.is_none() {
            return Err(ControlApiError::Unauthenticated(self.addr));
        }
        Ok(())
    }

    /// Reads the token, if one is configured.
    pub fn load_token(&self) -> Result<Option<Token>, ControlApiError> {
        self.token_file.as_deref().map(Token::read).transpose()
    }
}

/// A bearer token callers must present.
#[derive(Clone)]
pub struct Token(Arc<[u8]>);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

impl Token {
    /// Reads a token file.
    pub fn read(path: &Path) -> Result<Token, ControlApiError> {
        use std::io::Read;
        let read_error = |source| ControlApiError::Read {
            path: path.to_owned(),
            source,
        };
        let mut text = String::new();
        std::fs::File::open(path)
            .map_err(read_error)?
            .take(MAX_TOKEN_FILE_BYTES)
            .read_to_string(&mut text)
            .map_err(read_error)?;
        let token = text.trim();
        if token.len() < MIN_TOKEN_BYTES {
            return Err(ControlApiError::WeakToken {
                path: path.to_owned(),
                len: token.len(),
            });
        }
        Ok(Token(Arc::from(token.as_bytes())))
    }

    /// Whether `metadata` carries `authorization: Bearer <this token>`. The comparison takes the
    /// same time wherever the first differing byte is.
    fn admits(&self, metadata: &MetadataMap) -> bool {
        let Some(presented) = metadata
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
        else {
            return false;
        };
        let presented = presented.trim().as_bytes();
        presented.len() == self.0.len()
            && presented
                .iter()
                .zip(self.0.iter())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    }
}

/// The control service as routes of its own server, behind the token check when there is a token.
pub fn routes(control: MockControl, token: Option<Token>) -> Routes {
    let check = move |req: Request<()>| match &token {
        None => Ok(req),
        Some(token) if token.admits(req.metadata()) => Ok(req),
        Some(_) => Err(Status::unauthenticated(
            "the mock control API needs `authorization: Bearer <token>` with the token in control_api.token_file",
        )),
    };
    // Reflection (for grpcurl and friends) answers the same callers as the API itself.
    let (reflection, reflection_alpha) = tributary_registries::mock::reflection_services();
    Routes::new(InterceptedService::new(
        control.into_server(),
        check.clone(),
    ))
    .add_service(InterceptedService::new(reflection, check.clone()))
    .add_service(InterceptedService::new(reflection_alpha, check))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn beyond_loopback_needs_a_token_and_tokens_must_be_strong() {
        let c: ControlApiConfig = serde_yaml::from_str("{}").unwrap();
        assert_eq!(c.addr, default_addr());
        assert!(c.validate().is_ok());
        let open: ControlApiConfig = serde_yaml::from_str("addr: 0.0.0.0:15016").unwrap();
        let err = open.validate().unwrap_err().to_string();
        assert!(err.contains("token_file"), "{err}");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "short\n").unwrap();
        let err = Token::read(&path).unwrap_err().to_string();
        assert!(err.contains("at least 16"), "{err}");
        std::fs::write(&path, "  0123456789abcdef0123\n").unwrap();
        let token = Token::read(&path).unwrap();
        assert!(!format!("{token:?}").contains("0123"));
        let mut md = MetadataMap::new();
        assert!(!token.admits(&md));
        md.insert(
            "authorization",
            "Bearer 0123456789abcdef0124".parse().unwrap(),
        );
        assert!(!token.admits(&md));
        md.insert(
            "authorization",
            "Bearer 0123456789abcdef012".parse().unwrap(),
        );
        assert!(!token.admits(&md));
        md.insert(
            "authorization",
            "Bearer 0123456789abcdef0123".parse().unwrap(),
        );
        assert!(token.admits(&md));
        md.insert("authorization", "0123456789abcdef0123".parse().unwrap());
        assert!(!token.admits(&md));
    }
}
