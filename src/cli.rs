//! Command-line flags and subcommands.

#![allow(
    clippy::disallowed_methods,
    reason = "the edge of the process: the environment is read here and passed down as values"
)]

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::bootstrap::{self, BootstrapOptions, BootstrapTls};

mod agent_args;
pub use agent_args::AgentArgs;

mod logging;
mod mock;
mod validate;

pub use logging::{LogError, LogFormat};
pub use mock::{FaultAction, MockAction, MockArgs};
pub use validate::ValidateArgs;

/// Where `tributary bootstrap --tls` points Envoy by default: the mTLS port on loopback.
const DEFAULT_TLS_BOOTSTRAP_ADDR: &str = "127.0.0.1:15012";
use crate::config::{Config, Overrides};

/// tributary: a multi-registry xDS control plane for Envoy.
///
/// With no arguments it serves a built-in demo mesh from the mock registry (xDS gRPC on
/// 127.0.0.1:15010, admin HTTP on 127.0.0.1:15014) and prints how to point an Envoy at it.
#[derive(Debug, Parser)]
#[command(version, about, long_about)]
pub struct Cli {
    /// Config file (YAML): registries, listen addresses, debounce settings. Flags override it.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Serve the mesh described in this mock-registry YAML file, reloading it when it changes.
    #[arg(long, value_name = "FILE")]
    pub mock_file: Option<PathBuf>,
    /// Address of the plaintext xDS gRPC server [default: 127.0.0.1:15010].
    #[arg(long, value_name = "ADDR")]
    pub xds_addr: Option<SocketAddr>,
    /// Address of the admin HTTP server (/ready, /metrics, /debug) [default: 127.0.0.1:15014].
    #[arg(long, value_name = "ADDR")]
    pub admin_addr: Option<SocketAddr>,
    /// Serve the mock registry's control API on this address (off unless set here or in the
    /// config's `control_api:`) [config default: 127.0.0.1:15016].
    #[arg(long, value_name = "ADDR")]
    pub control_addr: Option<SocketAddr>,
    /// Log filter, e.g. `info` or `info,tributary::xds=debug` (RUST_LOG syntax).
    #[arg(long, value_name = "FILTER", env = "RUST_LOG", default_value = "info")]
    pub log_level: String,
    /// Log as JSON lines instead of text (then standard output carries JSON only).
    #[arg(long)]
    pub log_json: bool,
    /// Kills a task on purpose, to test supervision: TASK or TASK@DELAY (aggregate, builder,
    /// admin, xds, registries, registry:NAME). Not for production; hidden from --help.
    #[arg(long, hide = true, value_name = "TASK[@DELAY]")]
    pub inject_panic: Option<crate::runtime::Faults>,
    /// A subcommand; none runs the control plane.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print an Envoy v3 bootstrap (ADS over gRPC to tributary) to standard output.
    ///
    /// `tributary bootstrap --node-id demo > envoy.yaml && envoy -c envoy.yaml`
    Bootstrap(BootstrapArgs),
    /// Run Envoy on a VM and keep it alive (pilot-agent): bootstrap, restarts, hot restart on
    /// certificate rotation, graceful drain, status port, optional Consul registration.
    ///
    /// `tributary agent --xds-addr tributary.mesh:15010 --consul-service web --consul-port 8080`
    Agent(Box<AgentArgs>),
    /// Check a config file, mock registry files or Istio YAML (ServiceEntry, WorkloadEntry,
    /// DestinationRule, VirtualService) without running them; print every problem as
    /// `file:line: message` and exit 1 if there is any.
    ///
    /// `tributary validate --config tributary.yaml ./istio-config/`
    Validate(ValidateArgs),
    /// Drive a running mock registry through its control API: list, get, upsert, delete,
    /// set-endpoints, fault.
    ///
    /// `tributary mock list` · `tributary mock upsert services.yaml` ·
    /// `tributary mock fault stall`
    Mock(MockArgs),
}

/// Flags of `tributary bootstrap`.
#[derive(Debug, Args)]
pub struct BootstrapArgs {
    /// The Envoy node id (required by tributary; unique per proxy helps /debug/syncz).
    #[arg(long)]
    pub node_id: String,
    /// The Envoy node cluster.
    #[arg(long, default_value = "tributary")]
    pub cluster: String,
    /// tributary's xDS address as HOST:PORT (a name is resolved by Envoy) [default:
    /// 127.0.0.1:15010, or 127.0.0.1:15012 with --tls].
    #[arg(long)]
    pub xds_addr: Option<String>,
    /// Envoy's admin port on 127.0.0.1.
    #[arg(long, default_value_t = 15000)]
    pub admin_port: u16,
    /// Bind this node's listeners to this address instead of 0.0.0.0 (sets node metadata
    /// `LISTENER_ADDRESS`), so several Envoys can share one machine, e.g. 127.0.0.2.
    #[arg(long, value_name = "IP")]
    pub listener_address: Option<IpAddr>,
    /// Use incremental (delta) xDS: `api_type: DELTA_GRPC`. Envoy then receives only what changed.
    #[arg(long)]
    pub delta: bool,
    /// Take virtual hosts over VHDS (sets node metadata `TRIBUTARY_VHDS: true`): a service add or
    /// delete then sends one virtual host per port, not each port's whole route configuration.
    /// Needs --delta and an Envoy that accepts VHDS on its delta ADS stream (2026 and later).
    #[arg(long, requires = "delta")]
    pub vhds: bool,
    /// Poll CDS and LDS as REST-JSON (`POST /v3/discovery:*` over HTTP/1.1) instead of ADS over
    /// gRPC; EDS and RDS follow over REST too.
    #[arg(long, conflicts_with_all = ["delta", "tls"])]
    pub rest: bool,
    /// Connect to tributary's mTLS xDS port (15012): needs --tls-ca, --tls-cert and --tls-key.
    #[arg(long, requires_all = ["tls_ca", "tls_cert", "tls_key"])]
    pub tls: bool,
    /// CA bundle (PEM) that tributary's server certificate must chain to.
    #[arg(long, value_name = "FILE", requires = "tls")]
    pub tls_ca: Option<PathBuf>,
    /// This proxy's client certificate chain (PEM), e.g. with a SPIFFE URI SAN.
    #[arg(long, value_name = "FILE", requires = "tls")]
    pub tls_cert: Option<PathBuf>,
    /// This proxy's private key (PEM).
    #[arg(long, value_name = "FILE", requires = "tls")]
    pub tls_key: Option<PathBuf>,
    /// Server name sent as SNI and required as a DNS SAN of tributary's certificate [default: the
    /// host of --xds-addr when it is a name].
    #[arg(long, value_name = "NAME", requires = "tls")]
    pub tls_sni: Option<String>,
}

impl BootstrapArgs {
    /// The bootstrap options these flags describe.
    pub fn options(&self) -> anyhow::Result<BootstrapOptions> {
        if self.node_id.is_empty() {
            anyhow::bail!("--node-id must not be empty: tributary refuses proxies without one");
        }
        let addr = match (&self.xds_addr, self.tls) {
            (Some(a), _) => a.clone(),
            (None, false) => crate::config::DEFAULT_XDS_ADDR.to_string(),
            (None, true) => DEFAULT_TLS_BOOTSTRAP_ADDR.to_string(),
        };
        let (host, port) = addr
            .rsplit_once(':')
            .ok_or_else(|| anyhow::anyhow!("--xds-addr {addr:?} must be HOST:PORT"))?;
        let port: u16 = port
            .parse()
            .map_err(|_| anyhow::anyhow!("--xds-addr {addr:?}: {port:?} is not a port"))?;
        let tls = match (&self.tls_ca, &self.tls_cert, &self.tls_key) {
            (Some(ca), Some(cert), Some(key)) if self.tls => Some(BootstrapTls {
                ca: ca.clone(),
                cert: cert.clone(),
                key: key.clone(),
                sni: self.tls_sni.clone().or_else(|| {
                    let bare = host.trim_start_matches('[').trim_end_matches(']');
                    bare.parse::<IpAddr>().is_err().then(|| bare.to_string())
                }),
            }),
            _ => None,
        };
        Ok(BootstrapOptions {
            node_id: self.node_id.clone(),
            cluster: self.cluster.clone(),
            xds_host: host.to_string(),
            xds_port: port,
            admin_port: self.admin_port,
            listener_address: self.listener_address,
            delta: self.delta,
            rest: self.rest,
            tls,
            metadata: self
                .vhds
                .then(|| {
                    (
                        crate::xds::VHDS_KEY.to_string(),
                        serde_json::Value::Bool(true),
                    )
                })
                .into_iter()
                .collect(),
        })
    }
}

impl Cli {
    /// The configuration: the file if given, then the flags on top.
    pub fn config(&self) -> anyhow::Result<Config> {
        let mut config = match &self.config {
            Some(path) => Config::from_file(path)?,
            None => Config::default(),
        };
        config.apply_overrides(self.overrides());
        config.apply_env(|k| std::env::var(k).ok());
        config.validate()?;
        config.check_sources()?;
        Ok(config)
    }

    /// The values given as flags, which win over the file.
    pub fn overrides(&self) -> Overrides {
        Overrides {
            xds_addr: self.xds_addr,
            admin_addr: self.admin_addr,
            mock_file: self.mock_file.clone(),
            control_addr: self.control_addr,
        }
    }

    /// Installs the tracing subscriber; an invalid filter is an error.
    pub fn init_tracing(&self) -> Result<(), LogError> {
        let no_color = std::env::var("NO_COLOR").ok();
        let format = LogFormat::detect(self.log_json, no_color.as_deref());
        logging::init(&self.log_level, format)
    }

    /// Runs what the flags ask for.
    pub async fn run(self) -> anyhow::Result<()> {
        match &self.command {
            Some(Command::Bootstrap(args)) => {
                print!("{}", bootstrap::render(&args.options()?));
                Ok(())
            }
            Some(Command::Agent(args)) => {
                let options = args.options(std::env::vars())?;
                Ok(crate::agent::run(options).await?)
            }
            Some(Command::Validate(args)) => args.run(),
            Some(Command::Mock(args)) => args.run().await,
            None => {
                let source = self
                    .config
                    .clone()
                    .map(|path| crate::runtime::ConfigSource {
                        path,
                        overrides: self.overrides(),
                        env: std::env::vars().collect(),
                    });
                let faults = self.inject_panic.clone().unwrap_or_default();
                crate::runtime::run_with_faults(self.config()?, source, faults, self.log_json).await
            }
        }
    }
}
