//! `tributary agent`: pilot-agent for VMs. It writes Envoy's bootstrap (the same generator as
//! `tributary bootstrap`), starts Envoy and keeps it alive (restart budget with doubling delays),
//! hot-restarts it with a new epoch when its certificates rotate, drains it on SIGTERM/SIGINT,
//! serves readiness and metrics on a status port, and optionally registers the VM's service in
//! the local Consul agent.
//!
//! It shares nothing with the control plane: it is a separate process that only talks to
//! tributary through Envoy (xDS), to Envoy through its admin API, and to Consul over HTTP.

mod budget;
mod certs;
mod consul;
mod drain;
mod envoy;
mod identity;
mod metrics;
mod options;
mod status;
mod supervisor;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use tokio::task::JoinSet;
use tracing::{Instrument, info, info_span};

pub use consul::{ConsulFileSection, ConsulRegistration, DEFAULT_CONSUL_ADDR};
pub use identity::{Identity, default_route_ip, parse_labels};
pub use options::{AgentOptions, AgentTls};

/// Why the agent could not run or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// A setting that cannot work.
    #[error("invalid agent settings: {0}")]
    Invalid(String),
    /// The IP could not be detected.
    #[error("cannot find this host's IP from its default route ({0}); pass --ip or INSTANCE_IP")]
    NoIp(String),
    /// A file could not be read or written.
    #[error("{}: {error}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        error: String,
    },
    /// Envoy could not be started at all.
    #[error("cannot start Envoy {}: {error} (is it installed? pass --envoy PATH)", envoy.display())]
    Spawn {
        /// The binary.
        envoy: PathBuf,
        /// What went wrong.
        error: String,
    },
    /// Envoy kept exiting abnormally until the restart budget was spent.
    #[error(
        "Envoy exited abnormally {starts} times in a row (restart budget of {budget} spent); last exit: {status}; Envoy's last output:\n{tail}"
    )]
    EnvoyKeepsFailing {
        /// Starts in a row that failed (the first plus the budget).
        starts: u32,
        /// The budget.
        budget: u32,
        /// The last exit status.
        status: String,
        /// Envoy's last output lines.
        tail: String,
    },
    /// Envoy's admin API did not answer as expected.
    #[error("Envoy admin: {0}")]
    Admin(String),
    /// The status server could not listen.
    #[error("status server cannot listen on {addr}: {error} (is another agent running?)")]
    Status {
        /// The address.
        addr: std::net::SocketAddr,
        /// What went wrong.
        error: String,
    },
    /// The Consul agent refused or did not answer.
    #[error("Consul agent at {address}: {error} (is the local Consul agent reachable?)")]
    Consul {
        /// Its address.
        address: String,
        /// What went wrong.
        error: String,
    },
    /// Watching the certificate files failed.
    #[error("cannot watch the certificate files: {0}")]
    Watch(String),
    /// Signal handlers could not be installed.
    #[error("cannot handle signals: {0}")]
    Signal(String),
}

/// Runs the agent until SIGTERM/SIGINT (drained, `Ok`), a clean Envoy exit (`Ok`), or a spent
/// restart budget (`Err`, naming Envoy's last output).
pub async fn run(o: AgentOptions) -> Result<(), AgentError> {
    o.validate()?;
    std::fs::create_dir_all(&o.config_dir).map_err(|e| AgentError::File {
        path: o.config_dir.clone(),
        error: e.to_string(),
    })?;
    let service_account = match &o.tls {
        Some(t) => identity::service_account(&t.cert)?,
        None => None,
    };
    let listener = tokio::net::TcpListener::bind(o.status_addr)
        .await
        .map_err(|e| AgentError::Status {
            addr: o.status_addr,
            error: e.to_string(),
        })?;
    let admin = envoy::Admin::new(o.admin_port);
    let metrics = Arc::new(metrics::AgentMetrics::default());
    let draining = Arc::new(AtomicBool::new(false));
    let mut tasks = JoinSet::new();
    let state = status::StatusState {
        admin: admin.clone(),
        metrics: Arc::clone(&metrics),
        draining: Arc::clone(&draining),
    };
    tasks.spawn(
        status::serve(listener, state).instrument(info_span!("status", addr = %o.status_addr)),
    );
    let registrar = o.consul.clone().map(consul::Registrar::new);
    if let Some(r) = registrar.clone() {
        tasks.spawn(
            async move { r.register_until_done().await }.instrument(info_span!("consul_register")),
        );
    }
    info!(node_id = %o.node_id(), xds = %format!("{}:{}", o.xds_host, o.xds_port), status = %o.status_addr, "agent starting");
    let stop = supervisor::StopHooks {
        draining,
        registrar,
    };
    let outcome = supervisor::Supervisor::new(o, service_account, admin, metrics, stop)
        .run()
        .await;
    tasks.shutdown().await;
    let how = outcome?;
    info!(?how, "agent stopped");
    Ok(())
}
