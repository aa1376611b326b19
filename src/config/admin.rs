//! Settings of the admin HTTP server (`admin_addr`, istiod's monitoring port 15014): connection
//! limits and who may call its one mutating handler, `/debug/adsz?push=true`.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Longest accepted `header_read_timeout`: past this a slow client holds a slot for minutes.
const MAX_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(300);

/// The admin server's limits and access rules.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdminSettings {
    /// Serve `/debug/adsz?push=true` (push everything to every proxy). Off by default: it is the
    /// admin's only mutating call. Beyond loopback it also needs `token_file`.
    pub allow_push: bool,
    /// A file holding a bearer token (surrounding whitespace ignored). When set, mutating calls
    /// must send `Authorization: Bearer <token>`. The file is read per call, so a rotated Secret
    /// takes effect without a restart.
    pub token_file: Option<PathBuf>,
    /// Most admin connections open at once; further ones are closed on accept (Prometheus, a
    /// kubelet probe and a few operators need a handful).
    pub max_connections: usize,
    /// How long a client may take to send a request's headers before the connection is closed.
    #[serde(with = "super::duration")]
    pub header_read_timeout: Duration,
}

impl Default for AdminSettings {
    fn default() -> Self {
        Self {
            allow_push: false,
            token_file: None,
            max_connections: 256,
            header_read_timeout: Duration::from_secs(10),
        }
    }
}

impl AdminSettings {
    /// Checks the settings against where the admin listens: a push beyond loopback needs a
    /// token; limits must be usable.
    pub fn validate(&self, admin_on_loopback: bool) -> Result<(), String> {
        if self.allow_push && !admin_on_loopback && self.token_file.is_none() {
            return Err(
                "admin.allow_push on a non-loopback admin_addr needs admin.token_file: \
                 anyone who reaches the port could push to every proxy"
                    .to_string(),
            );
        }
        if self.max_connections == 0 {
            return Err("admin.max_connections must be at least 1".to_string());
        }
        if self.header_read_timeout.is_zero() || self.header_read_timeout > MAX_HEADER_READ_TIMEOUT
        {
            return Err(format!(
                "admin.header_read_timeout must be between 1ms and {MAX_HEADER_READ_TIMEOUT:?}, not {:?}",
                self.header_read_timeout
            ));
        }
        Ok(())
    }
}
