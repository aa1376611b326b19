//! Test PKI made at test time with rcgen: CAs, a server certificate for tributary, client
//! certificates with SPIFFE URI SANs (valid, expired, from a foreign CA), written as PEM files; and
//! a tonic channel that speaks mTLS with them.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use hyper_util::rt::TokioIo;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose,
    SanType, date_time_ymd,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tonic::transport::{Channel, Endpoint, Uri};

/// The DNS name in tributary's test server certificate (used as SNI).
pub const SERVER_NAME: &str = "tributary.test";

/// A CA that signs certificates.
pub struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
    pub pem: String,
}

/// A certificate and its key, as PEM.
pub struct Leaf {
    pub cert: String,
    pub key: String,
}

impl Ca {
    pub fn new(name: &str) -> Ca {
        let mut p = CertificateParams::default();
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name.push(DnType::CommonName, name);
        p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let issuer = CertifiedIssuer::self_signed(p, KeyPair::generate().expect("key"))
            .expect("self-signed CA");
        let pem = issuer.pem();
        Ca { issuer, pem }
    }

    fn sign(&self, p: CertificateParams) -> Leaf {
        let key = KeyPair::generate().expect("key");
        let cert = p.signed_by(&key, &self.issuer).expect("sign");
        Leaf {
            cert: cert.pem(),
            key: key.serialize_pem(),
        }
    }

    /// tributary's server certificate: DNS `tributary.test` and IP 127.0.0.1.
    pub fn server(&self) -> Leaf {
        let mut p = CertificateParams::new(vec![SERVER_NAME.to_string()]).expect("params");
        p.subject_alt_names
            .push(SanType::IpAddress("127.0.0.1".parse().expect("ip")));
        self.sign(p)
    }

    /// A workload certificate with SPIFFE ID `spiffe`.
    pub fn client(&self, spiffe: &str) -> Leaf {
        let mut p = CertificateParams::default();
        p.subject_alt_names = vec![SanType::URI(spiffe.try_into().expect("ia5"))];
        self.sign(p)
    }

    /// Like [`Self::client`], valid only in 2020.
    pub fn expired_client(&self, spiffe: &str) -> Leaf {
        let mut p = CertificateParams::default();
        p.subject_alt_names = vec![SanType::URI(spiffe.try_into().expect("ia5"))];
        p.not_before = date_time_ymd(2020, 1, 1);
        p.not_after = date_time_ymd(2020, 12, 31);
        self.sign(p)
    }
}

/// Writes `text` to `dir/name`, atomically (rename), and returns the path.
pub fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, text).expect("write pem");
    std::fs::rename(&tmp, &path).expect("rename pem");
    path
}

/// The client flags (`--tls-ca`, `--tls-cert`, `--tls-key`, `--tls-sni`) with which Envoy or the
/// agent dial tributary over mTLS presenting `cert`/`key` and trusting `ca`.
pub fn client_tls_flags<'a>(ca: &'a Path, cert: &'a Path, key: &'a Path) -> [&'a str; 8] {
    let text = |p: &'a Path| p.to_str().expect("test paths are UTF-8");
    [
        "--tls-ca",
        text(ca),
        "--tls-cert",
        text(cert),
        "--tls-key",
        text(key),
        "--tls-sni",
        SERVER_NAME,
    ]
}

impl Ca {
    /// Writes a server certificate of this CA (`server.crt`, `server.key`, `ca.crt`) into `dir`,
    /// and `tributary.yaml` serving mTLS on `tls_addr` with them (trust domain `cluster.local`).
    /// Returns the config file.
    pub fn write_tls_config(&self, dir: &Path, tls_addr: std::net::SocketAddr) -> PathBuf {
        let server = self.server();
        let config = format!(
            "tls:\n  addr: {tls_addr}\n  cert: {}\n  key: {}\n  client_ca: {}\n  trust_domain: cluster.local\n",
            write(dir, "server.crt", &server.cert).display(),
            write(dir, "server.key", &server.key).display(),
            write(dir, "ca.crt", &self.pem).display(),
        );
        write(dir, "tributary.yaml", &config)
    }
}

/// A rustls client config trusting `ca_pem`, presenting `leaf` if given, offering ALPN h2.
pub fn client_config(ca_pem: &str, leaf: Option<&Leaf>) -> Arc<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.expect("ca pem")).expect("add root");
    }
    let b = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots);
    let mut c = match leaf {
        Some(l) => {
            let chain = CertificateDer::pem_slice_iter(l.cert.as_bytes())
                .collect::<Result<Vec<_>, _>>()
                .expect("cert pem");
            let key = PrivateKeyDer::from_pem_slice(l.key.as_bytes()).expect("key pem");
            b.with_client_auth_cert(chain, key).expect("client cert")
        }
        None => b.with_no_client_auth(),
    };
    c.alpn_protocols = vec![b"h2".to_vec()];
    Arc::new(c)
}

/// A gRPC channel to `addr` over TLS with `config` (connects lazily).
pub fn channel(addr: std::net::SocketAddr, config: Arc<rustls::ClientConfig>) -> Channel {
    let connector = tower::service_fn(move |_: Uri| {
        let config = Arc::clone(&config);
        async move {
            let tcp = tokio::net::TcpStream::connect(addr).await?;
            let name = ServerName::try_from(SERVER_NAME).expect("server name");
            let tls = tokio_rustls::TlsConnector::from(config)
                .connect(name, tcp)
                .await?;
            Ok::<_, std::io::Error>(TokioIo::new(tls))
        }
    });
    Endpoint::from_static("http://tributary.test").connect_with_connector_lazy(connector)
}
