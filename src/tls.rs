//! xDS over mutual TLS (istiod's `https-xds` port, 15012).
//!
//! What it does:
//! - loads the server certificate chain, its key and the client trust bundle from PEM files and
//!   builds a rustls server config (ring provider, TLS 1.2+, ALPN `h2`) that requires a client
//!   certificate verified against the bundle (SEC-1);
//! - reloads those files when their contents change, swapping the material atomically: new
//!   handshakes use the new certificate and bundle, established connections are untouched (SEC-15,
//!   `reload.rs`);
//! - accepts TCP connections, runs handshakes off the accept loop with a timeout (SEC-11) and hands
//!   the xDS connection loop finished TLS streams that carry the peer's SPIFFE identity
//!   (`accept.rs`);
//! - checks a stream's claimed node identity against that SPIFFE identity (SEC-2, `identity.rs`);
//!   the xDS layer turns a mismatch into `PERMISSION_DENIED`.
//!
//! What it does not do: JWT authentication, certificate issuance (no CA), OCSP/CRL checks.

mod accept;
mod identity;
mod reload;

pub use accept::{TlsConn, XdsConnectInfo, incoming};
pub use identity::{IdentityError, IdentityMapping, PeerIdentity, spiffe_ids};
pub use reload::{ServerTls, run_reloader};

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The default mTLS xDS address: istiod's `https-xds` port on every interface, since this port is
/// the authenticated one that proxies on other machines use.
pub const DEFAULT_TLS_XDS_ADDR: &str = "0.0.0.0:15012";

/// How often the certificate, key and bundle files are checked for changes. Kubernetes updates a
/// mounted Secret within about a minute; checking every 5 s adds little to that and costs three
/// small file reads.
pub const DEFAULT_RELOAD_INTERVAL: Duration = Duration::from_secs(5);

/// How long a client may take to finish the TLS handshake. A real proxy needs a few round trips
/// (milliseconds); 10 s tolerates a congested link while bounding half-open handshakes (SEC-11).
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why TLS material cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("cannot read {what} {path}: {source}")]
    Read {
        /// Which file: certificate, key, trust bundle.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A PEM file holds no usable item of the kind expected.
    #[error("{path} holds no {what} (expected PEM): {detail}")]
    Pem {
        /// What was expected.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// What the PEM parser said.
        detail: String,
    },
    /// rustls refused the key or the configuration.
    #[error("TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
    /// The trust bundle cannot verify client certificates.
    #[error("trust bundle {path}: {source}")]
    TrustBundle {
        /// The bundle file.
        path: PathBuf,
        /// What rustls said.
        source: rustls::server::VerifierBuilderError,
    },
}

/// The `tls:` section of the config file: serve xDS over mTLS.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// Where the mTLS xDS server listens [default: 0.0.0.0:15012].
    #[serde(default = "default_addr")]
    pub addr: SocketAddr,
    /// The server certificate chain (PEM, leaf first).
    pub cert: PathBuf,
    /// The server's private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// CA certificates that client certificates must chain to (PEM; several during CA rotation).
    pub client_ca: PathBuf,
    /// How a proxy's claimed node identity is bound to its certificate's SPIFFE ID (SEC-2).
    #[serde(default)]
    pub identity: IdentityMapping,
    /// Accept only SPIFFE IDs of this trust domain (e.g. `cluster.local`); unset accepts any that
    /// the bundle verifies.
    #[serde(default)]
    pub trust_domain: Option<String>,
    /// How often the files are checked for changes.
    #[serde(default = "default_reload", with = "tributary_registries::duration")]
    pub reload_interval: Duration,
    /// Longest TLS handshake allowed.
    #[serde(default = "default_handshake", with = "tributary_registries::duration")]
    pub handshake_timeout: Duration,
}

fn default_addr() -> SocketAddr {
    DEFAULT_TLS_XDS_ADDR
        .parse()
        .expect("constant address parses")
}

fn default_reload() -> Duration {
    DEFAULT_RELOAD_INTERVAL
}

fn default_handshake() -> Duration {
    DEFAULT_HANDSHAKE_TIMEOUT
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_fill_in() {
        let c: TlsConfig =
            serde_yaml::from_str("cert: /c.pem\nkey: /k.pem\nclient_ca: /ca.pem\n").unwrap();
        assert_eq!(c.addr.port(), 15012);
        assert_eq!(c.identity, IdentityMapping::Istio);
        assert_eq!(c.reload_interval, DEFAULT_RELOAD_INTERVAL);
        let e = serde_yaml::from_str::<TlsConfig>("cert: /c\nkey: /k\nclient_ca: /a\nca: x\n")
            .unwrap_err();
        assert!(e.to_string().contains("ca"), "{e}");
    }
}
