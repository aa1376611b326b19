//! The server's TLS material, swappable at run time (SEC-15).
//!
//! rustls asks a [`ResolvesServerCert`] for the certificate and a [`ClientCertVerifier`] for the
//! client check on every handshake; both here read the current material from an [`ArcSwap`], so a
//! reload changes what the next handshake sees and nothing else. Established connections keep the
//! keys they negotiated.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::CryptoProvider;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{
    DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig, SignatureScheme,
};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use tokio_util::sync::CancellationToken;

use super::{TlsConfig, TlsError};

/// The material of one load, and the file bytes it came from (to notice changes).
struct Material {
    key: Arc<CertifiedKey>,
    verifier: Arc<dyn ClientCertVerifier>,
    files: [Vec<u8>; 3],
}

/// Server TLS whose certificate and trust bundle can be reloaded.
#[derive(Clone)]
pub struct ServerTls {
    config: Arc<TlsConfig>,
    provider: Arc<CryptoProvider>,
    current: Arc<ArcSwap<Material>>,
    server: Arc<ServerConfig>,
}

impl std::fmt::Debug for ServerTls {
    /// Names the files only: nothing secret in debug output (SEC-7).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("cert", &self.config.cert)
            .field("client_ca", &self.config.client_ca)
            .finish_non_exhaustive()
    }
}

impl ServerTls {
    /// Loads the files named by `config`; fails naming the file that is wrong.
    pub fn load(config: &TlsConfig) -> Result<Self, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let material = load_material(config, &provider)?;
        let current = Arc::new(ArcSwap::from_pointee(material));
        let mut server = ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
            .with_client_cert_verifier(Arc::new(Verifier(Arc::clone(&current))))
            .with_cert_resolver(Arc::new(Resolver(Arc::clone(&current))));
        // gRPC is HTTP/2 only.
        server.alpn_protocols = vec![b"h2".to_vec()];
        Ok(Self {
            config: Arc::new(config.clone()),
            provider,
            current,
            server: Arc::new(server),
        })
    }

    /// The rustls config every handshake uses.
    pub fn server_config(&self) -> Arc<ServerConfig> {
        Arc::clone(&self.server)
    }

    /// The settings this was loaded from.
    pub fn config(&self) -> &TlsConfig {
        &self.config
    }

    /// Re-reads the files; swaps in new material if any changed and all of it is valid. Returns
    /// whether it swapped. Invalid new files leave the old material in place.
    pub fn reload(&self) -> Result<bool, TlsError> {
        let files = read_files(&self.config)?;
        if files == self.current.load().files {
            return Ok(false);
        }
        let material = load_material(&self.config, &self.provider)?;
        self.current.store(Arc::new(material));
        Ok(true)
    }
}

/// Checks the files every `reload_interval` until `shutdown` (SEC-15).
pub async fn run_reloader(tls: ServerTls, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(tls.config.reload_interval.max(Duration::from_millis(10)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => match tls.reload() {
                Ok(true) => tracing::info!(cert = %tls.config.cert.display(), "reloaded TLS certificate and trust bundle"),
                Ok(false) => {}
                Err(e) => tracing::warn!(error = %e, "TLS files changed but cannot be used; keeping the previous ones"),
            },
        }
    }
}

fn read(what: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        what,
        path: path.to_owned(),
        source,
    })
}

fn read_files(c: &TlsConfig) -> Result<[Vec<u8>; 3], TlsError> {
    Ok([
        read("certificate", &c.cert)?,
        read("private key", &c.key)?,
        read("trust bundle", &c.client_ca)?,
    ])
}

fn pem_error(what: &'static str, path: &Path, detail: impl ToString) -> TlsError {
    TlsError::Pem {
        what,
        path: path.to_owned(),
        detail: detail.to_string(),
    }
}

fn load_material(c: &TlsConfig, provider: &CryptoProvider) -> Result<Material, TlsError> {
    let files = read_files(c)?;
    let [cert_pem, key_pem, ca_pem] = &files;
    let chain = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_error("certificate", &c.cert, e))?;
    if chain.is_empty() {
        return Err(pem_error("certificate", &c.cert, "no CERTIFICATE block"));
    }
    // The parser's error never echoes key bytes (SEC-7).
    let key =
        PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| pem_error("private key", &c.key, e))?;
    let signing = provider.key_provider.load_private_key(key)?;
    let key = Arc::new(CertifiedKey::new(chain, signing));
    key.keys_match()?;

    let mut roots = RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(ca_pem) {
        let ca = ca.map_err(|e| pem_error("CA certificate", &c.client_ca, e))?;
        roots.add(ca)?;
    }
    if roots.is_empty() {
        return Err(pem_error(
            "CA certificate",
            &c.client_ca,
            "no CERTIFICATE block",
        ));
    }
    let verifier =
        WebPkiClientVerifier::builder_with_provider(Arc::new(roots), Arc::new(provider.clone()))
            .build()
            .map_err(|source| TlsError::TrustBundle {
                path: c.client_ca.clone(),
                source,
            })?;
    Ok(Material {
        key,
        verifier,
        files,
    })
}

#[derive(Debug)]
struct Resolver(Arc<ArcSwap<Material>>);

impl std::fmt::Debug for Material {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Material { .. }")
    }
}

impl ResolvesServerCert for Resolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(Arc::clone(&self.0.load().key))
    }
}

/// Verifies client certificates with the current trust bundle; a client certificate is mandatory.
#[derive(Debug)]
struct Verifier(Arc<ArcSwap<Material>>);

/// The TLS 1.2 and 1.3 handshake signature checks have one signature; both go to the verifier
/// loaded at the time of the handshake.
macro_rules! delegate_signature_checks {
    ($($check:ident),+) => {$(
        fn $check(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            self.0.load().verifier.$check(message, cert, dss)
        }
    )+};
}

impl ClientCertVerifier for Verifier {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        // The hints would have to outlive a reload; clients send their certificate without them.
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.0
            .load()
            .verifier
            .verify_client_cert(end_entity, intermediates, now)
    }

    delegate_signature_checks!(verify_tls12_signature, verify_tls13_signature);

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.load().verifier.supported_verify_schemes()
    }
}
