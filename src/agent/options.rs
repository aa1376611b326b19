//! The agent's settings, resolved and validated (flags, environment and the optional file are
//! merged in `cli`; nothing here reads the environment).

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::bootstrap::{BootstrapOptions, BootstrapTls};

use super::AgentError;
use super::consul::ConsulRegistration;
use super::identity::Identity;

/// `node.cluster` of the agent's Envoy.
const NODE_CLUSTER: &str = "tributary-agent";

/// The mTLS files Envoy uses to reach tributary; they are watched for rotation.
#[derive(Debug, Clone)]
pub struct AgentTls {
    /// CA bundle tributary's certificate chains to.
    pub ca: PathBuf,
    /// This proxy's certificate chain.
    pub cert: PathBuf,
    /// This proxy's key.
    pub key: PathBuf,
    /// SNI (and DNS SAN) expected of tributary; `None`: the chain only.
    pub sni: Option<String>,
}

/// Everything `tributary agent` needs.
#[derive(Debug, Clone)]
pub struct AgentOptions {
    /// tributary's xDS host (IP or DNS name).
    pub xds_host: String,
    /// tributary's xDS port.
    pub xds_port: u16,
    /// mTLS to tributary.
    pub tls: Option<AgentTls>,
    /// The Envoy binary.
    pub envoy: PathBuf,
    /// An explicit node id instead of Istio's sidecar id.
    pub node_id: Option<String>,
    /// Who this VM is.
    pub identity: Identity,
    /// Where Envoy's listeners bind (node metadata `LISTENER_ADDRESS`); `None`: `0.0.0.0`.
    pub listener_address: Option<IpAddr>,
    /// The agent's status server.
    pub status_addr: SocketAddr,
    /// Envoy's admin port on 127.0.0.1.
    pub admin_port: u16,
    /// Where `envoy-rev<epoch>.json` is written.
    pub config_dir: PathBuf,
    /// Envoy's `--drain-time-s`, and the longest the agent waits for connections on shutdown.
    pub drain_time: Duration,
    /// Envoy's `--parent-shutdown-time-s`.
    pub parent_shutdown_time: Duration,
    /// Restarts in a row after abnormal exits.
    pub restart_budget: u32,
    /// The first restart's delay (doubling after).
    pub restart_initial_delay: Duration,
    /// Envoy's `--concurrency`.
    pub concurrency: Option<u32>,
    /// Envoy's `-l`.
    pub log_level: String,
    /// Envoy's `--base-id` (distinct per Envoy sharing a host).
    pub base_id: u32,
    /// Rotate certificates by hot restart (`false`: drain, then restart).
    pub hot_restart: bool,
    /// Delta xDS (default) or state of the world.
    pub delta: bool,
    /// Arguments passed to Envoy as they are.
    pub extra_args: Vec<String>,
    /// Register the VM's service in the local Consul agent.
    pub consul: Option<ConsulRegistration>,
}

impl AgentOptions {
    /// Checks what cannot work, with what to change.
    pub fn validate(&self) -> Result<(), AgentError> {
        let secs = |d: Duration, flag: &str| -> Result<u64, AgentError> {
            if d < Duration::from_secs(1) || d.subsec_nanos() != 0 {
                return Err(AgentError::Invalid(format!(
                    "{flag} must be whole seconds, at least 1s (Envoy takes seconds), not {}",
                    humantime::format_duration(d)
                )));
            }
            Ok(d.as_secs())
        };
        let drain = secs(self.drain_time, "--drain-time")?;
        let parent = secs(self.parent_shutdown_time, "--parent-shutdown-time")?;
        if parent <= drain {
            return Err(AgentError::Invalid(format!(
                "--parent-shutdown-time ({parent}s) must be longer than --drain-time ({drain}s)"
            )));
        }
        if self.node_id.as_deref() == Some("") {
            return Err(AgentError::Invalid("--node-id must not be empty".into()));
        }
        for (what, v) in [
            ("--workload", &self.identity.workload),
            ("--namespace", &self.identity.namespace),
        ] {
            if v.is_empty() || v.contains('~') {
                return Err(AgentError::Invalid(format!(
                    "{what} {v:?} must be non-empty and without '~'"
                )));
            }
        }
        if self.concurrency == Some(0) {
            return Err(AgentError::Invalid(
                "--concurrency must be at least 1".into(),
            ));
        }
        if let Some(c) = &self.consul {
            c.validate()?;
        }
        Ok(())
    }

    /// The node id Envoy presents.
    pub fn node_id(&self) -> String {
        self.node_id
            .clone()
            .unwrap_or_else(|| self.identity.node_id())
    }

    /// The bootstrap, through the same generator as `tributary bootstrap`.
    pub fn bootstrap(&self, service_account: Option<&str>) -> BootstrapOptions {
        BootstrapOptions {
            node_id: self.node_id(),
            cluster: NODE_CLUSTER.to_string(),
            xds_host: self.xds_host.clone(),
            xds_port: self.xds_port,
            admin_port: self.admin_port,
            listener_address: self.listener_address,
            delta: self.delta,
            rest: false,
            tls: self.tls.as_ref().map(|t| BootstrapTls {
                ca: t.ca.clone(),
                cert: t.cert.clone(),
                key: t.key.clone(),
                sni: t.sni.clone(),
            }),
            metadata: self.identity.metadata(service_account),
        }
    }

    /// Envoy's command line for `epoch` with bootstrap `config`.
    pub fn envoy_args(&self, config: &Path, epoch: u32) -> Vec<String> {
        let mut a: Vec<String> = vec![
            "-c".into(),
            config.display().to_string(),
            "--restart-epoch".into(),
            epoch.to_string(),
            "--drain-time-s".into(),
            self.drain_time.as_secs().to_string(),
            "--parent-shutdown-time-s".into(),
            self.parent_shutdown_time.as_secs().to_string(),
            // Every connection is asked to close at once when draining (hot restart or shutdown),
            // so the parent's connections move to the new Envoy as soon as their requests end.
            "--drain-strategy".into(),
            "immediate".into(),
            "-l".into(),
            self.log_level.clone(),
        ];
        match self.hot_restart {
            true => a.extend(["--base-id".into(), self.base_id.to_string()]),
            false => a.push("--disable-hot-restart".into()),
        }
        if let Some(c) = self.concurrency {
            a.extend(["--concurrency".into(), c.to_string()]);
        }
        a.extend(self.extra_args.iter().cloned());
        a
    }

    /// The certificate, key and CA files watched for rotation.
    pub fn watched_files(&self) -> Vec<PathBuf> {
        self.tls
            .iter()
            .flat_map(|t| [t.cert.clone(), t.key.clone(), t.ca.clone()])
            .collect()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::BTreeMap;

    use super::*;

    pub(crate) fn options() -> AgentOptions {
        AgentOptions {
            xds_host: "127.0.0.1".into(),
            xds_port: 15010,
            tls: None,
            envoy: "envoy".into(),
            node_id: None,
            identity: Identity {
                ip: "127.0.0.2".parse().unwrap(),
                workload: "app".into(),
                namespace: "vm".into(),
                labels: BTreeMap::new(),
                cluster_id: "Kubernetes".into(),
                extra: BTreeMap::new(),
            },
            listener_address: None,
            status_addr: "127.0.0.1:15021".parse().unwrap(),
            admin_port: 15000,
            config_dir: "/tmp".into(),
            drain_time: Duration::from_secs(45),
            parent_shutdown_time: Duration::from_secs(60),
            restart_budget: 10,
            restart_initial_delay: Duration::from_millis(200),
            concurrency: None,
            log_level: "info".into(),
            base_id: 0,
            hot_restart: true,
            delta: true,
            extra_args: vec!["--component-log-level".into(), "upstream:debug".into()],
            consul: None,
        }
    }

    #[test]
    fn envoy_gets_epoch_base_id_and_drain_times() {
        let o = options();
        let a = o.envoy_args(Path::new("/d/envoy-rev3.json"), 3).join(" ");
        assert!(
            a.starts_with("-c /d/envoy-rev3.json --restart-epoch 3"),
            "{a}"
        );
        assert!(
            a.contains("--drain-time-s 45 --parent-shutdown-time-s 60"),
            "{a}"
        );
        assert!(a.contains("--base-id 0"), "{a}");
        assert!(a.ends_with("--component-log-level upstream:debug"), "{a}");
        let cold = AgentOptions {
            hot_restart: false,
            ..options()
        };
        assert!(
            cold.envoy_args(Path::new("x"), 0)
                .contains(&"--disable-hot-restart".into())
        );
    }

    #[test]
    fn validation_names_the_flag() {
        let bad = AgentOptions {
            parent_shutdown_time: Duration::from_secs(45),
            ..options()
        };
        assert!(
            bad.validate()
                .unwrap_err()
                .to_string()
                .contains("--parent-shutdown-time")
        );
        let bad = AgentOptions {
            drain_time: Duration::from_millis(1500),
            ..options()
        };
        assert!(
            bad.validate()
                .unwrap_err()
                .to_string()
                .contains("whole seconds")
        );
        assert!(options().validate().is_ok());
        let b = options().bootstrap(Some("sa"));
        assert_eq!(b.node_id, "sidecar~127.0.0.2~app.vm~vm.svc.cluster.local");
        assert_eq!(b.metadata["SERVICE_ACCOUNT"], "sa");
        assert!(b.delta);
    }
}
