//! One mesh for the traffic-rule proofs: a mock registry with `reviews.rules.local`, whose two
//! endpoints are labelled `version: v1` (zone us-east/zone-a, the proxy's own) and `version: v2`
//! (us-west/zone-b); a config source (a watched directory, or the CRDs of the fake API server)
//! holding the DestinationRules and VirtualServices; tributary and a real Envoy, SotW or delta.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use tributary_registries::kubernetes::fake::{FakeApiServer, ResourceType};
use tributary_registries::test_util::mcp_server::McpServer;

use super::upstream::{Upstream, get};
use crate::support::harness::{
    Envoy, Proc, Tributary, envoy_bin, eventually, free_port, loopback, replace_file, tributary_bin,
};

/// The service every proof routes to.
pub const HOST: &str = "reviews.rules.local";

/// A TCP service on the same two endpoints, for the `tcp`/`tls` route proofs.
pub const TCP_HOST: &str = "db.rules.local";

/// The proxy's locality (the node's), and the other one.
pub const LOCAL_ZONE: (&str, &str) = ("us-east", "zone-a");
pub const OTHER_ZONE: (&str, &str) = ("us-west", "zone-b");

/// How long a rule change may take to reach Envoy before a test gives up.
pub const CONVERGE: Duration = Duration::from_secs(15);

/// xDS flavour.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Mode {
    Sotw,
    Delta,
}

/// Where the rules come from.
pub enum Rules {
    Dir(PathBuf),
    /// Boxed: the fake server is large next to a path.
    Crds(Box<(FakeApiServer, [ResourceType; 4])>),
    /// The test MCP server (`xds://`).
    Mcp(Box<McpServer>),
}

/// The running mesh.
pub struct Mesh {
    /// Holds the files and logs until the mesh is dropped.
    _dir: tempfile::TempDir,
    pub port: u16,
    /// The port of [`TCP_HOST`].
    pub tcp_port: u16,
    pub v1: Upstream,
    pub v2: Upstream,
    pub mesh_file: PathBuf,
    pub rules: Rules,
    pub t: Tributary,
    pub envoy: Envoy,
}

/// A rule document of `kind` named `name` in namespace `default`, with `spec` (YAML indented for
/// it).
pub fn rule_doc(kind: &str, name: &str, spec: &str) -> String {
    format!(
        "apiVersion: networking.istio.io/v1
kind: {kind}
metadata: {{name: {name}, namespace: default}}
spec:
{spec}"
    )
}

/// The destination rule with subsets v1 and v2 by `version` label, plus `policy` (YAML of a
/// `trafficPolicy`, indented for it, or empty).
pub fn destination_rule(policy: &str) -> String {
    rule_doc(
        "DestinationRule",
        "reviews",
        &format!(
            "  host: {HOST}
{policy}  subsets:
  - name: v1
    labels: {{version: v1}}
  - name: v2
    labels: {{version: v2}}
"
        ),
    )
}

/// A virtual service for the host with `http` (YAML of the `http:` list items, indented for it).
pub fn virtual_service(http: &str) -> String {
    rule_doc(
        "VirtualService",
        "reviews",
        &format!("  hosts: [{HOST}]\n  http:\n{http}"),
    )
}

/// A route sending `w1` % to v1 and the rest to v2.
pub fn split(w1: u32) -> String {
    format!(
        "  - route:
    - destination: {{host: {HOST}, subset: v1}}
      weight: {w1}
    - destination: {{host: {HOST}, subset: v2}}
      weight: {}
",
        100 - w1
    )
}

impl Mesh {
    /// Starts everything with the rules in a watched directory (`fs://`).
    pub async fn with_dir(mode: Mode, rules: &[String]) -> Mesh {
        let dir = tempfile::tempdir().unwrap();
        let rules_dir = dir.path().join("istio");
        std::fs::create_dir(&rules_dir).unwrap();
        std::fs::write(rules_dir.join("rules.yaml"), rules.join("---\n")).unwrap();
        let source = format!("  - address: fs://{}\n", rules_dir.display());
        Self::start(dir, mode, &source, Rules::Dir(rules_dir)).await
    }

    /// Starts everything with the rules as CRDs of a fake API server (`k8s://`).
    pub async fn with_crds(mode: Mode, rules: &[String]) -> Mesh {
        let dir = tempfile::tempdir().unwrap();
        let server = FakeApiServer::start().await.expect("fake API server");
        let kubeconfig = dir.path().join("kubeconfig.yaml");
        server.write_kubeconfig(&kubeconfig).unwrap();
        let types = server.register_istio_networking("v1");
        let source = format!(
            "  - {{address: 'k8s://', kubeconfig: {}}}\n",
            kubeconfig.display()
        );
        let r = Rules::Crds(Box::new((server, types)));
        for doc in rules {
            r.apply(doc);
        }
        Self::start(dir, mode, &source, r).await
    }

    /// Starts everything with the rules served by the test MCP server (`xds://`), which speaks
    /// delta unless `sotw_only` (the client then falls back to SotW).
    pub async fn with_mcp(mode: Mode, sotw_only: bool, rules: &[String]) -> Mesh {
        let dir = tempfile::tempdir().unwrap();
        let server = McpServer::start(!sotw_only).await.expect("test MCP server");
        let docs: Vec<&str> = rules.iter().map(String::as_str).collect();
        server.set_objects(&docs).expect("test rules map onto MCP");
        let source = format!("  - address: xds://{}\n", server.addr());
        Self::start(dir, mode, &source, Rules::Mcp(Box::new(server))).await
    }

    async fn start(dir: tempfile::TempDir, mode: Mode, sources: &str, rules: Rules) -> Mesh {
        let v1 = Upstream::start("127.0.0.1", "v1").await;
        let v2 = Upstream::start("127.0.0.1", "v2").await;
        let port = free_port();
        let tcp_port = free_port();
        let mesh_file = dir.path().join("mesh.yaml");
        std::fs::write(&mesh_file, mock_mesh((port, tcp_port), &v1, &v2, true)).unwrap();
        let (t, _) = Tributary::on_config(
            dir.path(),
            &format!(
                "registries:\n  - {{type: mock, name: mock, file: {}}}\nconfig_sources:\n{sources}\
                 debounce: {{debounce_after: 10ms, debounce_max: 100ms}}\n",
                mesh_file.display()
            ),
        )
        .await;
        let mut envoy = start_envoy(dir.path(), mode, t.xds).await;
        envoy.wait_live().await;
        Mesh {
            _dir: dir,
            port,
            tcp_port,
            v1,
            v2,
            mesh_file,
            rules,
            t,
            envoy,
        }
    }

    /// The listener of the service.
    pub fn listener(&self) -> SocketAddr {
        loopback(self.port)
    }

    /// Replaces the rules (all documents).
    pub fn set_rules(&self, docs: &[String]) {
        match &self.rules {
            Rules::Dir(d) => replace_file(&d.join("rules.yaml"), &docs.join("---\n")),
            Rules::Crds(_) => docs.iter().for_each(|d| self.rules.apply(d)),
            Rules::Mcp(server) => {
                let docs: Vec<&str> = docs.iter().map(String::as_str).collect();
                server.set_objects(&docs).expect("test rules map onto MCP");
            }
        }
    }

    /// Marks v1 healthy or unhealthy in the registry.
    pub fn set_v1_healthy(&self, healthy: bool) {
        replace_file(
            &self.mesh_file,
            &mock_mesh((self.port, self.tcp_port), &self.v1, &self.v2, healthy),
        );
    }

    /// `n` requests one after the other; answers by body (or `status:<code>` when not 200).
    pub async fn tally(&self, n: usize, headers: &[(&str, &str)]) -> BTreeMap<String, usize> {
        tally_at(self.listener(), HOST, n, headers).await
    }

    /// Waits until `n` consecutive requests all answer `want` (a body, or `status:<code>`).
    pub async fn settle(&self, headers: &[(&str, &str)], want: &str, n: usize) {
        settle_at(self.listener(), HOST, headers, want, n).await
    }

    /// Waits until Envoy holds a route with weighted clusters whose weights are `weights`
    /// (v1, v2), with no cluster warming.
    pub async fn wait_for_weights(&self, weights: (u64, u64)) {
        let subset = |s: &str| format!("outbound|{}|{s}|{HOST}", self.port);
        eventually(
            CONVERGE,
            &format!("weights {weights:?} in Envoy"),
            || async {
                let dump = self.envoy.config_dump().await;
                let w = weighted(&dump);
                let found = (
                    w.get(&subset("v1")).copied().unwrap_or(0),
                    w.get(&subset("v2")).copied().unwrap_or(0),
                );
                let warm = self.envoy.stat("cluster_manager.warming_clusters").await == 0;
                (found == weights && warm).then_some(())
            },
        )
        .await;
    }

    /// tributary's log tail and Envoy's, for failure messages.
    pub fn logs(&self) -> String {
        format!(
            "tributary:\n{}\nenvoy:\n{}",
            self.t.proc.tail(),
            self.envoy.proc.tail()
        )
    }
}

/// `n` requests to `proxy` with `Host: host`, one after the other; answers by body (or
/// `status:<code>` when not 200).
pub async fn tally_at(
    proxy: SocketAddr,
    host: &str,
    n: usize,
    headers: &[(&str, &str)],
) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for _ in 0..n {
        let key = match get(proxy, host, headers).await {
            Some((200, body)) => body,
            Some((status, _)) => format!("status:{status}"),
            None => "no answer".to_string(),
        };
        *out.entry(key).or_default() += 1;
    }
    out
}

/// Waits until `n` consecutive requests to `proxy` with `Host: host` all answer `want`.
pub async fn settle_at(
    proxy: SocketAddr,
    host: &str,
    headers: &[(&str, &str)],
    want: &str,
    n: usize,
) {
    eventually(
        CONVERGE,
        &format!("{n} answers of {want} for {host}"),
        || async {
            let t = tally_at(proxy, host, n, headers).await;
            (t.get(want) == Some(&n)).then_some(())
        },
    )
    .await;
}

impl Rules {
    /// Creates or updates a rule as a CRD.
    pub fn apply(&self, yaml: &str) {
        let Rules::Crds(crds) = self else {
            panic!("not a CRD source");
        };
        let (server, types) = &**crds;
        let v: Value = serde_yaml::from_str(yaml).expect("test rules parse");
        let kind = v["kind"].as_str().expect("a kind");
        let rt = types
            .iter()
            .find(|t| t.kind == kind)
            .expect("an Istio networking kind");
        server.apply_json(rt, v).expect("the fake accepts it");
    }
}

/// The mock registry's file: the HTTP service on `ports.0` and the TCP service on `ports.1`, each
/// with the two labelled endpoints.
fn mock_mesh(ports: (u16, u16), v1: &Upstream, v2: &Upstream, v1_healthy: bool) -> String {
    let endpoints = |port_name: &str| {
        let ep = |u: &Upstream, version: &str, (region, zone): (&str, &str), healthy: bool| {
            format!(
                "      - {{address: {}, ports: {{{port_name}: {}}}, labels: {{version: {version}}}, \
                 locality: {region}/{zone}, health: {}}}\n",
                u.addr.ip(),
                u.addr.port(),
                if healthy { "healthy" } else { "unhealthy" }
            )
        };
        ep(v1, "v1", LOCAL_ZONE, v1_healthy) + &ep(v2, "v2", OTHER_ZONE, true)
    };
    format!(
        "services:\n  - hostname: {HOST}\n    ports: [{{name: http, port: {}, protocol: HTTP}}]\n    \
         endpoints:\n{}  - hostname: {TCP_HOST}\n    ports: [{{name: tcp, port: {}, \
         protocol: TCP}}]\n    endpoints:\n{}",
        ports.0,
        endpoints("http"),
        ports.1,
        endpoints("tcp")
    )
}

/// Envoy on the bootstrap `tributary bootstrap` prints, with the node's locality set to
/// [`LOCAL_ZONE`] (istiod reads a proxy's locality from its node).
async fn start_envoy(dir: &Path, mode: Mode, xds: SocketAddr) -> Envoy {
    let admin_port = free_port();
    let mut args = vec!["--listener-address", "127.0.0.1"];
    if mode == Mode::Delta {
        args.push("--delta");
    }
    let out = Command::new(tributary_bin())
        .args(["bootstrap", "--node-id", "rules", "--xds-addr"])
        .arg(xds.to_string())
        .arg("--admin-port")
        .arg(admin_port.to_string())
        .args(&args)
        .output()
        .expect("tributary bootstrap runs");
    assert!(out.status.success(), "bootstrap failed");
    let text = String::from_utf8(out.stdout).expect("bootstrap is text");
    let (region, zone) = LOCAL_ZONE;
    let text = text.replacen(
        "  cluster: \"tributary\"\n",
        &format!("  cluster: \"tributary\"\n  locality: {{ region: {region}, zone: {zone} }}\n"),
        1,
    );
    assert!(text.contains("locality:"), "node locality set:\n{text}");
    let path = dir.join("envoy.yaml");
    std::fs::write(&path, text).expect("write bootstrap");
    let mut cmd = Command::new(envoy_bin());
    cmd.arg("-c")
        .arg(&path)
        .args(["--disable-hot-restart", "--drain-time-s", "1", "-l", "info"]);
    Envoy {
        proc: Proc::spawn("envoy", &mut cmd, dir),
        admin: loopback(admin_port),
    }
}

/// Cluster name → weight over every weighted route Envoy holds.
fn weighted(dump: &Value) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dump];
    while let Some(v) = stack.pop() {
        match v {
            Value::Object(m) => {
                if let Some(clusters) = m
                    .get("weighted_clusters")
                    .and_then(|w| w["clusters"].as_array())
                {
                    for c in clusters {
                        if let (Some(name), Some(w)) = (c["name"].as_str(), c["weight"].as_u64()) {
                            out.insert(name.to_string(), w);
                        }
                    }
                }
                stack.extend(m.values());
            }
            Value::Array(a) => stack.extend(a),
            _ => {}
        }
    }
    out
}
