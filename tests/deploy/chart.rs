//! The Helm chart, rendered by Helm itself: defaults, each TLS source, and every optional part.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

use serde::Deserialize;
use serde_yaml::Value;
use tributary::config::Config;

use super::tools::{self, Helm};
use super::{read, root};

/// TLS from a Secret the user made.
const EXISTING_SECRET: &str = r#"{"tls": {"enabled": true, "existingSecret": "mesh-tls"}}"#;
/// TLS from a cert-manager Certificate.
const CERT_MANAGER: &str = r#"{"tls": {"enabled": true, "certManager": {"enabled": true,
    "issuerRef": {"name": "mesh-ca", "kind": "ClusterIssuer"}}}}"#;
/// Every optional part on, and the scheduling and logging values set.
const OPTIONS: &str = r#"{
  "autoscaling": {"enabled": true, "minReplicas": 3, "maxReplicas": 7},
  "networkPolicy": {"enabled": true, "kubeletCIDRs": ["10.20.0.0/16"]},
  "log": {"level": "debug,tributary::xds=trace", "json": false},
  "nodeSelector": {"kubernetes.io/os": "linux"},
  "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "mesh", "effect": "NoSchedule"}],
  "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100,
    "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
      "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "tributary"}}}}]}}
}"#;
/// What deploy/kubernetes/tributary.yaml starts with, above Helm's output.
const PLAIN_HEADER: &str = "# Rendered from deploy/helm/tributary with its default values (release tributary,\n\
     # namespace tributary-system) by Helm. Regenerate: TRIBUTARY_BLESS=1 cargo test --test deploy\n";

/// The chart rendered with values over its defaults; `None` when Helm cannot be installed here.
fn render(values: &[&str]) -> Option<String> {
    let run = Helm::find()?.template(values);
    assert!(run.ok, "helm template {values:?} failed: {}", run.stderr);
    Some(run.stdout)
}

fn docs(text: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(text)
        .map(|d| Value::deserialize(d).expect("rendered YAML parses"))
        .filter(|v| !v.is_null())
        .collect()
}

fn kind<'a>(docs: &'a [Value], k: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == k)
        .unwrap_or_else(|| panic!("no {k} rendered"))
}

fn kinds(docs: &[Value]) -> BTreeSet<&str> {
    docs.iter().filter_map(|d| d["kind"].as_str()).collect()
}

fn strings(v: &Value) -> Vec<&str> {
    v.as_sequence()
        .unwrap_or_else(|| panic!("not a list: {v:?}"))
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect()
}

/// The tributary config in the rendered ConfigMap, parsed as tributary parses it.
fn config(docs: &[Value]) -> Config {
    let cm = kind(docs, "ConfigMap");
    Config::from_yaml(cm["data"]["config.yaml"].as_str().unwrap())
        .expect("tributary accepts the chart's config")
}

fn container(docs: &[Value]) -> &Value {
    &kind(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
}

fn mount<'a>(docs: &'a [Value], volume: &str) -> Option<&'a str> {
    container(docs)["volumeMounts"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|m| m["name"] == volume)
        .map(|m| m["mountPath"].as_str().unwrap())
}

fn volume<'a>(docs: &'a [Value], name: &str) -> Option<&'a Value> {
    kind(docs, "Deployment")["spec"]["template"]["spec"]["volumes"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|v| v["name"] == name)
}

#[test]
fn plain_manifests_are_the_chart_rendered_by_helm() {
    // DEPLOY-1
    let Some(rendered) = render(&[]) else { return };
    let rendered = format!("{PLAIN_HEADER}{rendered}");
    let path = root().join("deploy/kubernetes/tributary.yaml");
    if std::env::var_os("TRIBUTARY_BLESS").is_some() {
        std::fs::write(&path, &rendered).unwrap();
    }
    assert_eq!(
        read(&path),
        rendered,
        "deploy/kubernetes/tributary.yaml is stale: TRIBUTARY_BLESS=1 cargo test --test deploy"
    );
}

#[test]
fn helm_lint_passes() {
    // DEPLOY-1
    let Some(helm) = Helm::find() else { return };
    let run = helm.lint();
    assert!(run.ok, "helm lint:\n{}{}", run.stdout, run.stderr);
    assert!(
        run.stdout.contains("1 chart(s) linted, 0 failing"),
        "{}",
        run.stdout
    );
}

#[test]
fn defaults_start_without_any_secret_and_serve_plaintext_xds_to_the_mesh() {
    let Some(text) = render(&[]) else { return };
    let docs = docs(&text);
    for d in &docs {
        assert!(
            d["apiVersion"].is_string() && d["kind"].is_string(),
            "{d:?}"
        );
        assert!(d["metadata"]["name"].is_string(), "{d:?}");
    }
    let want: BTreeSet<&str> = [
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "Service",
        "Deployment",
        "PodDisruptionBudget",
    ]
    .into();
    assert_eq!(kinds(&docs), want, "optional parts are off by default");

    // DEPLOY-2: no Secret is needed; plaintext xDS is the mesh's, opted into explicitly.
    let config = config(&docs);
    assert!(config.tls.is_none());
    assert!(config.xds_addr.ip().is_unspecified() && config.xds_addr.port() == 15010);
    assert!(config.insecure_plaintext_xds);
    assert!(volume(&docs, "tls").is_none() && mount(&docs, "tls").is_none());

    // Deployment: readiness on /ready, hardened container, service account, scrape annotations.
    let dep = kind(&docs, "Deployment");
    let pod = &dep["spec"]["template"];
    let c = container(&docs);
    assert_eq!(dep["spec"]["replicas"], 2);
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/ready");
    assert_eq!(c["readinessProbe"]["httpGet"]["port"], 15014);
    let sc = &c["securityContext"];
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["runAsNonRoot"], true);
    assert_eq!(sc["capabilities"]["drop"][0], "ALL");
    assert_eq!(pod["spec"]["serviceAccountName"], "tributary");
    let ann = &pod["metadata"]["annotations"];
    assert_eq!(ann["prometheus.io/scrape"], "true");
    assert_eq!(ann["prometheus.io/port"], "15014");
    assert_eq!(ann["sidecar.istio.io/inject"], "false");
    assert_eq!(
        dep["spec"]["selector"]["matchLabels"],
        pod["metadata"]["labels"]
    );

    // DEPLOY-4: log values become the binary's flags.
    let args = strings(&c["args"]);
    let config_dir = mount(&docs, "config").unwrap();
    assert_eq!(
        args,
        [
            "--config",
            &format!("{config_dir}/config.yaml"),
            "--log-level",
            "info",
            "--log-json"
        ]
    );
    binary_accepts(&args);

    // Shutdown fits in the termination grace period.
    let grace = pod["spec"]["terminationGracePeriodSeconds"]
        .as_u64()
        .unwrap();
    let shutdown = config.shutdown.drain_delay + config.shutdown.grace_period;
    assert!(shutdown.as_secs() < grace, "{shutdown:?} vs {grace}s");

    // Service: istiod's port names.
    let svc = kind(&docs, "Service");
    let ports: Vec<(&str, u64)> = svc["spec"]["ports"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|p| (p["name"].as_str().unwrap(), p["port"].as_u64().unwrap()))
        .collect();
    assert_eq!(
        ports,
        [
            ("grpc-xds", 15010),
            ("https-xds", 15012),
            ("http-monitoring", 15014)
        ]
    );
    assert_eq!(svc["spec"]["selector"], pod["metadata"]["labels"]);

    rbac_is_exactly_the_watched_kinds(&docs);

    let pdb = kind(&docs, "PodDisruptionBudget");
    assert_eq!(pdb["spec"]["selector"], dep["spec"]["selector"]);
}

/// DEPLOY-5: get, list and watch (as README documents) on exactly the kinds the Kubernetes and
/// ServiceEntry registries watch, nothing else.
fn rbac_is_exactly_the_watched_kinds(docs: &[Value]) {
    let role = kind(docs, "ClusterRole");
    let mut granted = BTreeSet::new();
    for rule in role["rules"].as_sequence().unwrap() {
        assert_eq!(
            strings(&rule["verbs"]),
            ["get", "list", "watch"],
            "read-only"
        );
        for g in strings(&rule["apiGroups"]) {
            for r in strings(&rule["resources"]) {
                granted.insert(format!("{g}/{r}"));
            }
        }
    }
    let want: BTreeSet<String> = [
        "/services",
        "/pods",
        "/nodes",
        "discovery.k8s.io/endpointslices",
        "networking.istio.io/serviceentries",
        "networking.istio.io/workloadentries",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    assert_eq!(granted, want);
    let binding = kind(docs, "ClusterRoleBinding");
    assert_eq!(binding["roleRef"]["name"], role["metadata"]["name"]);
    assert_eq!(binding["subjects"][0]["name"], "tributary");
}

/// The chart's container args are flags the binary knows (clap rejects an unknown flag before it
/// gets to `--help`).
fn binary_accepts(args: &[&str]) {
    let out = Command::new(env!("CARGO_BIN_EXE_tributary"))
        .args(args)
        .arg("--help")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "tributary {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// With TLS on, the config's certificate paths are in the mounted Secret, and plaintext xDS is
/// back on loopback.
fn tls_is_mounted_from(docs: &[Value], secret: &str) {
    let config = config(docs);
    let tls = config.tls.as_ref().expect("mTLS configured");
    assert_eq!(tls.addr.port(), 15012);
    assert!(config.xds_addr.ip().is_loopback(), "DEPLOY-3");
    assert!(!config.insecure_plaintext_xds);
    let dir = mount(docs, "tls").expect("the TLS Secret is mounted");
    assert!(tls.cert.starts_with(dir) && tls.key.starts_with(dir));
    assert!(tls.client_ca.starts_with(dir));
    assert_eq!(volume(docs, "tls").unwrap()["secret"]["secretName"], secret);
}

#[test]
fn tls_from_an_existing_secret() {
    // DEPLOY-3
    let Some(text) = render(&[EXISTING_SECRET]) else {
        return;
    };
    let docs = docs(&text);
    tls_is_mounted_from(&docs, "mesh-tls");
    assert!(!kinds(&docs).contains("Certificate"));
}

#[test]
fn tls_from_a_cert_manager_certificate() {
    // DEPLOY-3
    let Some(text) = render(&[CERT_MANAGER]) else {
        return;
    };
    let docs = docs(&text);
    let cert = kind(&docs, "Certificate");
    assert_eq!(cert["apiVersion"], "cert-manager.io/v1");
    let secret = cert["spec"]["secretName"].as_str().unwrap();
    tls_is_mounted_from(&docs, secret);
    let names = strings(&cert["spec"]["dnsNames"]);
    let svc = kind(&docs, "Service");
    let svc_dns = format!(
        "{}.{}.svc",
        svc["metadata"]["name"].as_str().unwrap(),
        svc["metadata"]["namespace"].as_str().unwrap()
    );
    assert!(names.contains(&svc_dns.as_str()), "{names:?}");
    let issuer = &cert["spec"]["issuerRef"];
    assert_eq!(issuer["name"], "mesh-ca");
    assert_eq!(issuer["kind"], "ClusterIssuer");
    assert_eq!(issuer["group"], "cert-manager.io");
    assert!(strings(&cert["spec"]["usages"]).contains(&"server auth"));
}

#[test]
fn tls_without_a_certificate_source_is_a_clear_error() {
    // DEPLOY-3
    let Some(helm) = Helm::find() else { return };
    let run = helm.template(&[r#"{"tls": {"enabled": true}}"#]);
    assert!(!run.ok, "rendered without a certificate: {}", run.stdout);
    assert!(run.stderr.contains("tls.existingSecret"), "{}", run.stderr);
    let run = helm.template(&[r#"{"tls": {"enabled": true, "certManager": {"enabled": true}}}"#]);
    assert!(!run.ok, "rendered without an issuer: {}", run.stdout);
    assert!(run.stderr.contains("issuerRef.name"), "{}", run.stderr);
}

#[test]
fn autoscaling_network_policy_scheduling_and_log_values() {
    let Some(text) = render(&[OPTIONS]) else {
        return;
    };
    let docs = docs(&text);
    let values: serde_json::Value = serde_json::from_str(OPTIONS).unwrap();
    let dep = kind(&docs, "Deployment");
    let pod = &dep["spec"]["template"];

    // DEPLOY-6: the HPA owns the replica count.
    let hpa = kind(&docs, "HorizontalPodAutoscaler");
    assert_eq!(hpa["apiVersion"], "autoscaling/v2");
    assert_eq!(hpa["spec"]["scaleTargetRef"]["kind"], "Deployment");
    assert_eq!(
        hpa["spec"]["scaleTargetRef"]["name"],
        dep["metadata"]["name"]
    );
    assert_eq!(hpa["spec"]["minReplicas"], 3);
    assert_eq!(hpa["spec"]["maxReplicas"], 7);
    assert_eq!(hpa["spec"]["metrics"][0]["resource"]["name"], "cpu");
    assert!(
        dep["spec"].get("replicas").is_none(),
        "replicas left to the HPA"
    );

    // DEPLOY-7: xDS open to every source, admin only to Prometheus and the kubelet.
    let np = kind(&docs, "NetworkPolicy");
    assert_eq!(
        np["spec"]["podSelector"]["matchLabels"],
        pod["metadata"]["labels"]
    );
    assert_eq!(strings(&np["spec"]["policyTypes"]), ["Ingress"]);
    let named: Vec<(&str, u64)> = container(&docs)["ports"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap(),
                p["containerPort"].as_u64().unwrap(),
            )
        })
        .collect();
    let port_numbers = |rule: &Value| -> BTreeSet<u64> {
        rule["ports"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|p| {
                let name = p["port"].as_str().unwrap();
                named
                    .iter()
                    .find(|(n, _)| *n == name)
                    .expect("a container port")
                    .1
            })
            .collect()
    };
    let rules = np["spec"]["ingress"].as_sequence().unwrap();
    assert_eq!(rules.len(), 2);
    assert_eq!(port_numbers(&rules[0]), [15010, 15012].into());
    assert!(rules[0].get("from").is_none(), "xDS from anywhere");
    assert_eq!(port_numbers(&rules[1]), [15014].into());
    let from = rules[1]["from"].as_sequence().unwrap();
    assert_eq!(from.len(), 2, "{from:?}");
    assert_eq!(
        from[0]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
        "monitoring"
    );
    assert_eq!(
        from[0]["podSelector"]["matchLabels"]["app.kubernetes.io/name"],
        "prometheus"
    );
    assert_eq!(from[1]["ipBlock"]["cidr"], "10.20.0.0/16");

    // Scheduling values pass through as given.
    let spec = &pod["spec"];
    for key in ["nodeSelector", "tolerations", "affinity"] {
        let rendered: serde_json::Value =
            serde_json::to_value(&spec[key]).expect("YAML maps convert to JSON");
        assert_eq!(rendered, values[key], "{key}");
    }

    // DEPLOY-4: text logs at the given filter.
    let args = strings(&container(&docs)["args"]);
    assert_eq!(args[2..], ["--log-level", "debug,tributary::xds=trace"]);
    binary_accepts(&args);
}

#[test]
fn renders_and_plain_manifests_pass_kubernetes_validate() {
    // DEPLOY-1
    let dir = tempfile::tempdir().unwrap();
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("deploy/kubernetes"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(!files.is_empty());
    for (name, values) in [
        ("defaults", &[][..]),
        ("existing-secret", &[EXISTING_SECRET][..]),
        ("cert-manager", &[CERT_MANAGER][..]),
        ("options", &[OPTIONS, EXISTING_SECRET][..]),
    ] {
        if let Some(text) = render(values) {
            let f = dir.path().join(format!("{name}.yaml"));
            std::fs::write(&f, text).unwrap();
            files.push(f);
        }
    }
    let Some(run) = tools::kubernetes_validate(&files) else {
        return;
    };
    assert!(run.ok, "kubernetes-validate:\n{}{}", run.stdout, run.stderr);
    for resource in ["deployment/tributary", "clusterrole/tributary-reader"] {
        assert!(
            run.stdout
                .contains(&format!("passed for resource {resource}")),
            "{}",
            run.stdout
        );
    }

    // The validator is live: a field of the wrong type and an unknown field are rejected.
    let plain = read(&root().join("deploy/kubernetes/tributary.yaml"));
    for (what, from, to) in [
        ("wrong type", "replicas: 2", "replicas: two"),
        ("unknown field", "replicas: 2", "replica: 2"),
    ] {
        assert!(plain.contains(from));
        let broken = dir.path().join("broken.yaml");
        std::fs::write(&broken, plain.replacen(from, to, 1)).unwrap();
        let run = tools::kubernetes_validate(&[broken]).unwrap();
        assert!(!run.ok, "{what} accepted:\n{}", run.stdout);
    }
}
