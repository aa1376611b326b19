//! Flags (and their environment variables) of `tributary agent`, resolved into
//! [`AgentOptions`]. This is the only place the agent's environment is read.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use serde::Deserialize;

use crate::agent::{
    AgentOptions, AgentTls, ConsulFileSection, ConsulRegistration, Identity, default_route_ip,
    parse_labels,
};

/// Prefix of the environment variables that become node metadata, as in Istio.
const META_PREFIX: &str = "ISTIO_META_";

fn duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{s:?} is not a duration like 45s: {e}"))
}

/// Flags of `tributary agent`.
#[derive(Debug, Args)]
pub struct AgentArgs {
    /// tributary's xDS address as HOST:PORT (a name is resolved by Envoy).
    #[arg(long, env = "TRIBUTARY_XDS_ADDR", value_name = "HOST:PORT")]
    pub xds_addr: String,
    /// CA bundle (PEM) tributary's certificate chains to; with --tls-cert and --tls-key, Envoy
    /// uses mTLS and the three files are watched for rotation.
    #[arg(long, value_name = "FILE", requires_all = ["tls_cert", "tls_key"])]
    pub tls_ca: Option<PathBuf>,
    /// This proxy's certificate chain (PEM); its SPIFFE ID gives SERVICE_ACCOUNT.
    #[arg(long, value_name = "FILE", requires_all = ["tls_ca", "tls_key"])]
    pub tls_cert: Option<PathBuf>,
    /// This proxy's private key (PEM).
    #[arg(long, value_name = "FILE", requires_all = ["tls_ca", "tls_cert"])]
    pub tls_key: Option<PathBuf>,
    /// SNI and DNS SAN expected of tributary [default: the host of --xds-addr when a name].
    #[arg(long, value_name = "NAME")]
    pub tls_sni: Option<String>,
    /// The Envoy binary [default: `envoy` on PATH].
    #[arg(long, env = "ENVOY_BINARY", default_value = "envoy")]
    pub envoy: PathBuf,
    /// Node id [default: `sidecar~IP~WORKLOAD.NAMESPACE~NAMESPACE.svc.cluster.local`].
    #[arg(long)]
    pub node_id: Option<String>,
    /// Workload name.
    #[arg(long, env = "POD_NAME", default_value = "vm")]
    pub workload: String,
    /// Namespace.
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    pub namespace: String,
    /// This VM's IP [default: the source address of the default route].
    #[arg(long, env = "INSTANCE_IP")]
    pub ip: Option<IpAddr>,
    /// Workload labels, k=v,k2=v2 or a JSON object as Istio's ISTIO_METAJSON_LABELS (node
    /// metadata LABELS).
    #[arg(long, env = "ISTIO_METAJSON_LABELS", default_value = "")]
    pub labels: String,
    /// CLUSTER_ID node metadata.
    #[arg(long, env = "CLUSTER_ID", default_value = "Kubernetes")]
    pub cluster_id: String,
    /// Bind Envoy's listeners to this address (node metadata LISTENER_ADDRESS) [default: 0.0.0.0].
    #[arg(long, value_name = "IP")]
    pub listener_address: Option<IpAddr>,
    /// The agent's status server: /healthz/ready, /stats/prometheus.
    #[arg(long, default_value = "127.0.0.1:15021")]
    pub status_addr: SocketAddr,
    /// Envoy's admin port on 127.0.0.1.
    #[arg(long, default_value_t = 15000)]
    pub envoy_admin_port: u16,
    /// Where `envoy-rev<epoch>.json` is written.
    #[arg(long, default_value = "/var/lib/tributary/proxy")]
    pub config_dir: PathBuf,
    /// Envoy's drain time, and the longest a shutdown waits for connections (whole seconds).
    #[arg(long, default_value = "45s", value_parser = duration)]
    pub drain_time: Duration,
    /// How long a hot-restarted Envoy's parent lives (whole seconds, more than --drain-time).
    #[arg(long, default_value = "60s", value_parser = duration)]
    pub parent_shutdown_time: Duration,
    /// Restarts in a row after abnormal exits before the agent gives up.
    #[arg(long, default_value_t = 10)]
    pub restart_budget: u32,
    /// Delay before the first restart; it doubles for each next one.
    #[arg(long, default_value = "200ms", value_parser = duration)]
    pub restart_initial_delay: Duration,
    /// Envoy's worker threads.
    #[arg(long)]
    pub concurrency: Option<u32>,
    /// Envoy's log level.
    #[arg(long = "log-level", default_value = "warning")]
    pub envoy_log_level: String,
    /// Envoy's --base-id (distinct for each Envoy that hot-restarts on the same host).
    #[arg(long, default_value_t = 0)]
    pub base_id: u32,
    /// Rotate certificates by drain-then-restart instead of hot restart.
    #[arg(long)]
    pub no_hot_restart: bool,
    /// State-of-the-world xDS instead of delta.
    #[arg(long)]
    pub sotw: bool,
    /// A YAML file with a `consul:` section (flags override it).
    #[arg(long, env = "TRIBUTARY_AGENT_CONFIG", value_name = "FILE")]
    pub config_file: Option<PathBuf>,
    /// The local Consul agent [default: http://127.0.0.1:8500].
    #[arg(long, env = "CONSUL_HTTP_ADDR")]
    pub consul_addr: Option<String>,
    /// Consul ACL token.
    #[arg(long, env = "CONSUL_HTTP_TOKEN", hide_env_values = true)]
    pub consul_token: Option<String>,
    /// Register this service in Consul (registration is off without it).
    #[arg(long)]
    pub consul_service: Option<String>,
    /// The Consul instance id (default: `<service>-<ip>`).
    #[arg(long)]
    pub consul_id: Option<String>,
    /// The application's port.
    #[arg(long)]
    pub consul_port: Option<u16>,
    /// Consul tags, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub consul_tags: Vec<String>,
    /// Meta.protocol: http, http2, grpc or tcp [default: http].
    #[arg(long)]
    pub consul_protocol: Option<String>,
    /// The check URL [default: this agent's /healthz/ready].
    #[arg(long)]
    pub consul_check_url: Option<String>,
    /// The check interval [default: 10s].
    #[arg(long, value_parser = duration)]
    pub consul_check_interval: Option<Duration>,
    /// Arguments after `--` go to Envoy unchanged.
    #[arg(last = true)]
    pub envoy_args: Vec<String>,
}

/// The agent's optional file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct AgentFile {
    /// Consul registration.
    #[serde(default)]
    consul: ConsulFileSection,
}

impl AgentArgs {
    /// The options these flags, the file and `env` (the process environment) describe.
    pub fn options(
        &self,
        env: impl Iterator<Item = (String, String)>,
    ) -> anyhow::Result<AgentOptions> {
        let (host, port) = self
            .xds_addr
            .rsplit_once(':')
            .ok_or_else(|| anyhow::anyhow!("--xds-addr {:?} must be HOST:PORT", self.xds_addr))?;
        let xds_port: u16 = port.parse().map_err(|_| {
            anyhow::anyhow!("--xds-addr {:?}: {port:?} is not a port", self.xds_addr)
        })?;
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let tls = match (&self.tls_ca, &self.tls_cert, &self.tls_key) {
            (Some(ca), Some(cert), Some(key)) => Some(AgentTls {
                ca: ca.clone(),
                cert: cert.clone(),
                key: key.clone(),
                sni: self
                    .tls_sni
                    .clone()
                    .or_else(|| bare.parse::<IpAddr>().is_err().then(|| bare.to_string())),
            }),
            _ => None,
        };
        let ip = match self.ip {
            Some(ip) => ip,
            None => default_route_ip()?,
        };
        let extra: BTreeMap<String, String> = env
            .filter_map(|(k, v)| Some((k.strip_prefix(META_PREFIX)?.to_string(), v)))
            .filter(|(k, _)| !k.is_empty())
            .collect();
        let file: AgentFile = match &self.config_file {
            Some(p) => {
                let text = std::fs::read_to_string(p)
                    .map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?;
                serde_yaml::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?
            }
            None => AgentFile::default(),
        };
        let mut c = file.consul;
        let or = |flag: &Option<String>, file: Option<String>| flag.clone().or(file);
        c.address = or(&self.consul_addr, c.address);
        c.token = or(&self.consul_token, c.token);
        c.service = or(&self.consul_service, c.service);
        c.id = or(&self.consul_id, c.id);
        c.protocol = or(&self.consul_protocol, c.protocol);
        c.check_url = or(&self.consul_check_url, c.check_url);
        c.port = self.consul_port.or(c.port);
        c.check_interval = self.consul_check_interval.or(c.check_interval);
        if !self.consul_tags.is_empty() {
            c.tags = self.consul_tags.clone();
        }
        let ready_url = format!("http://{}/healthz/ready", self.status_addr);
        let consul = ConsulRegistration::resolve(c, ip, ready_url)?;
        let o = AgentOptions {
            xds_host: host.to_string(),
            xds_port,
            tls,
            envoy: self.envoy.clone(),
            node_id: self.node_id.clone(),
            identity: Identity {
                ip,
                workload: self.workload.clone(),
                namespace: self.namespace.clone(),
                labels: match self.labels.trim_start().starts_with('{') {
                    true => serde_json::from_str(&self.labels).map_err(|e| {
                        anyhow::anyhow!("--labels is not a JSON object of strings: {e}")
                    })?,
                    false => parse_labels(&self.labels)?,
                },
                cluster_id: self.cluster_id.clone(),
                extra,
            },
            listener_address: self.listener_address,
            status_addr: self.status_addr,
            admin_port: self.envoy_admin_port,
            config_dir: self.config_dir.clone(),
            drain_time: self.drain_time,
            parent_shutdown_time: self.parent_shutdown_time,
            restart_budget: self.restart_budget,
            restart_initial_delay: self.restart_initial_delay,
            concurrency: self.concurrency,
            log_level: self.envoy_log_level.clone(),
            base_id: self.base_id,
            hot_restart: !self.no_hot_restart,
            delta: !self.sotw,
            extra_args: self.envoy_args.clone(),
            consul,
        };
        o.validate()?;
        Ok(o)
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};

    fn args(extra: &[&str]) -> AgentArgs {
        let base = ["tributary", "agent", "--xds-addr", "tributary.mesh:15012"];
        let cli = Cli::try_parse_from(base.iter().chain(extra)).unwrap();
        match cli.command {
            Some(Command::Agent(a)) => *a,
            other => panic!("not the agent: {other:?}"),
        }
    }

    // AGENT-1: ISTIO_META_* become metadata; labels take k=v or Istio's JSON; SNI defaults to the
    // xDS host name; the file's consul section is overridden by flags.
    #[test]
    fn flags_env_and_file_resolve_into_options() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("agent.yaml");
        std::fs::write(
            &file,
            "consul:\n  service: billing\n  port: 8080\n  tags: [a]\n  check_interval: 5s\n",
        )
        .unwrap();
        let a = args(&[
            "--ip",
            "10.0.0.9",
            "--labels",
            r#"{"app": "billing"}"#,
            "--tls-ca",
            "ca.pem",
            "--tls-cert",
            "cert.pem",
            "--tls-key",
            "key.pem",
            "--config-file",
            file.to_str().unwrap(),
            "--consul-port",
            "9090",
            "--",
            "--component-log-level",
            "upstream:debug",
        ]);
        let env = [
            ("ISTIO_META_MESH_ID".to_string(), "mesh1".to_string()),
            ("HOME".to_string(), "/root".to_string()),
        ];
        let o = a.options(env.into_iter()).unwrap();
        assert_eq!(o.identity.extra["MESH_ID"], "mesh1");
        assert_eq!(o.identity.extra.len(), 1);
        assert_eq!(o.identity.labels["app"], "billing");
        assert_eq!(o.xds_host, "tributary.mesh");
        assert_eq!(
            o.tls.as_ref().unwrap().sni.as_deref(),
            Some("tributary.mesh")
        );
        assert_eq!(o.extra_args, ["--component-log-level", "upstream:debug"]);
        let c = o.consul.unwrap();
        assert_eq!((c.service.as_str(), c.port), ("billing", 9090));
        assert_eq!(c.tags, ["a"]);
        assert_eq!(c.check_interval, Duration::from_secs(5));
        assert_eq!(c.check_url, "http://127.0.0.1:15021/healthz/ready");
        assert_eq!(c.id, "billing-10.0.0.9");
        assert!(o.delta && o.hot_restart);
    }

    #[test]
    fn bad_values_are_refused_with_the_flag_named() {
        let e = args(&["--ip", "10.0.0.9", "--labels", "oops"])
            .options(std::iter::empty())
            .unwrap_err();
        assert!(e.to_string().contains("key=value"), "{e}");
        let e = args(&["--ip", "10.0.0.9", "--drain-time", "60s"])
            .options(std::iter::empty())
            .unwrap_err();
        assert!(e.to_string().contains("--parent-shutdown-time"), "{e}");
        let bad = Cli::try_parse_from(["tributary", "agent", "--xds-addr", "x:1", "--tls-ca", "c"]);
        assert!(bad.is_err(), "--tls-ca needs --tls-cert and --tls-key");
    }
}
