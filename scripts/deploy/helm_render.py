#!/usr/bin/env python3
"""Render or lint a Helm chart with real Helm (PyPI helm-sdkpy: Helm's Go SDK as a C library).

helm-sdkpy exposes `install` but not `template`, and an install talks to an API server. So the
render runs an install with the in-memory release driver (HELM_DRIVER=memory) against a small
loopback endpoint that only answers what an install asks of a cluster: the server version, API
discovery for the kinds the chart uses, "not found" for the pre-install existence checks, and an
echo for each create. Nothing is applied anywhere; the release's manifest is Helm's own rendering,
the same text `helm template` prints (`---` + `# Source:` per template).

    helm_render.py template CHART [--release R] [--namespace NS] [--values FILE]... [--set-json J]...
    helm_render.py lint CHART

`template` prints the manifest on stdout; `lint` prints Helm's lint messages and exits 1 on any
error or warning. A chart that does not render exits 1 with Helm's message on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import yaml

# (group, version, kind, plural, namespaced): every kind the tributary chart can render.
KINDS = [
    ("", "v1", "ServiceAccount", "serviceaccounts", True),
    ("", "v1", "ConfigMap", "configmaps", True),
    ("", "v1", "Service", "services", True),
    ("", "v1", "Secret", "secrets", True),
    ("", "v1", "Namespace", "namespaces", False),
    ("apps", "v1", "Deployment", "deployments", True),
    ("policy", "v1", "PodDisruptionBudget", "poddisruptionbudgets", True),
    ("autoscaling", "v2", "HorizontalPodAutoscaler", "horizontalpodautoscalers", True),
    ("networking.k8s.io", "v1", "NetworkPolicy", "networkpolicies", True),
    ("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", False),
    ("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", "clusterrolebindings", False),
    ("rbac.authorization.k8s.io", "v1", "Role", "roles", True),
    ("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings", True),
    ("cert-manager.io", "v1", "Certificate", "certificates", True),
]
KUBE_VERSION = {"major": "1", "minor": "34", "gitVersion": "v1.34.0", "platform": "linux/amd64"}
VERBS = ["create", "delete", "get", "list", "patch", "update", "watch"]


def group_version(group: str, version: str) -> str:
    return f"{group}/{version}" if group else version


def resource_list(group: str, version: str) -> dict:
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version(group, version),
        "resources": [
            {"name": plural, "singularName": kind.lower(), "namespaced": namespaced,
             "kind": kind, "verbs": VERBS}
            for (g, v, kind, plural, namespaced) in KINDS
            if (g, v) == (group, version)
        ],
    }


def group_list() -> dict:
    groups: dict[str, list[str]] = {}
    for (g, v, *_rest) in KINDS:
        if g and v not in groups.setdefault(g, []):
            groups[g].append(v)
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [
            {
                "name": g,
                "versions": [{"groupVersion": f"{g}/{v}", "version": v} for v in vs],
                "preferredVersion": {"groupVersion": f"{g}/{vs[0]}", "version": vs[0]},
            }
            for g, vs in groups.items()
        ],
    }


class ApiEndpoint(BaseHTTPRequestHandler):
    """Answers an install's requests; every other request is a 404 Status."""

    def log_message(self, *_args):  # quiet: stderr is for Helm's errors
        pass

    def send_json(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def not_found(self) -> None:
        self.send_json(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                             "reason": "NotFound", "code": 404, "message": "not found"})

    def do_GET(self):  # noqa: N802 (http.server's naming)
        path = self.path.split("?", 1)[0].rstrip("/")
        if path == "/version":
            return self.send_json(200, KUBE_VERSION)
        if path == "/api":
            return self.send_json(200, {"kind": "APIVersions", "versions": ["v1"],
                                        "serverAddressByClientCIDRs": []})
        if path == "/apis":
            return self.send_json(200, group_list())
        parts = path.strip("/").split("/")
        if parts == ["api", "v1"]:
            return self.send_json(200, resource_list("", "v1"))
        if len(parts) == 3 and parts[0] == "apis":
            listing = resource_list(parts[1], parts[2])
            if listing["resources"]:
                return self.send_json(200, listing)
        return self.not_found()

    def do_POST(self):  # noqa: N802
        length = int(self.headers.get("Content-Length", "0"))
        body = json.loads(self.rfile.read(length) or b"{}")
        body.setdefault("metadata", {})["resourceVersion"] = "1"
        self.send_json(201, body)


def start_endpoint() -> tuple[ThreadingHTTPServer, str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), ApiEndpoint)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def kubeconfig(url: str, namespace: str) -> str:
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "render",
        "clusters": [{"name": "render", "cluster": {"server": url}}],
        "users": [{"name": "render", "user": {}}],
        "contexts": [{"name": "render",
                      "context": {"cluster": "render", "user": "render", "namespace": namespace}}],
    })


def merge(into: dict, extra: dict) -> dict:
    """Helm's coalescing of several --values files: maps merge, anything else replaces."""
    for k, v in extra.items():
        if isinstance(v, dict) and isinstance(into.get(k), dict):
            merge(into[k], v)
        else:
            into[k] = v
    return into


HELM_HOMES = ("HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME")
SCRATCH = "TRIBUTARY_HELM_SCRATCH"


def isolated_or_reexec() -> str:
    """Helm's cache/config/data in a scratch directory and releases in memory (HELM_DRIVER=memory),
    never in the user's home or a cluster. Helm's Go runtime reads the environment the process
    started with, so the first run sets it and re-executes itself; returns the scratch directory."""
    scratch = os.environ.get(SCRATCH)
    if scratch and os.environ.get("HELM_DRIVER") == "memory":
        return scratch
    scratch = tempfile.mkdtemp(prefix="helm-sdkpy-")
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    env.update({SCRATCH: scratch, "HELM_DRIVER": "memory"})
    env.update({var: os.path.join(scratch, var.lower()) for var in HELM_HOMES})
    os.execve(sys.executable, [sys.executable, *sys.argv], env)
    raise AssertionError("unreachable")


def template(args: argparse.Namespace) -> int:
    import helm_sdkpy

    values: dict = {}
    for f in args.values:
        with open(f, encoding="utf-8") as fh:
            merge(values, yaml.safe_load(fh) or {})
    for j in args.set_json:
        merge(values, json.loads(j))
    server, url = start_endpoint()
    try:
        kc = os.path.join(os.environ[SCRATCH], "kubeconfig")
        with open(kc, "w", encoding="utf-8") as fh:
            fh.write(kubeconfig(url, args.namespace))
        config = helm_sdkpy.Configuration(namespace=args.namespace, kubeconfig=kc)
        release = asyncio.run(helm_sdkpy.Install(config).run(
            args.release, os.path.abspath(args.chart), values=values or None,
            wait=False, timeout=60))
    except helm_sdkpy.HelmError as e:
        print(f"helm: {e}", file=sys.stderr)
        return 1
    finally:
        server.shutdown()
    sys.stdout.write(release["manifest"])
    return 0


# Helm's lint severities (pkg/lint/support): what `helm lint` prints before each message.
SEVERITIES = {0: "UNKNOWN", 1: "INFO", 2: "WARNING", 3: "ERROR"}
FIRST_FAILING_SEVERITY = 2


def lint(args: argparse.Namespace) -> int:
    import helm_sdkpy

    config = helm_sdkpy.Configuration(namespace="default")
    try:
        result = asyncio.run(helm_sdkpy.Lint(config).run(os.path.abspath(args.chart)))
    except helm_sdkpy.HelmError as e:
        print(f"helm lint: {e}", file=sys.stderr)
        return 1
    failing = 0
    for m in result.get("Messages") or []:
        sev = m.get("Severity", 0)
        # helm-sdkpy serialises the Go error as {}: the path and severity are what is left.
        print(f"[{SEVERITIES.get(sev, sev)}] {m.get('Path')}: {m.get('Err') or ''}")
        failing += sev >= FIRST_FAILING_SEVERITY
    for e in result.get("Errors") or []:
        print(f"[ERROR] {e}")
        failing += 1
    print(f"helm lint: {result.get('TotalChartsLinted', 0)} chart(s) linted, {failing} failing")
    return 1 if failing else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("template", help="print the rendered manifests")
    t.add_argument("chart")
    t.add_argument("--release", default="tributary")
    t.add_argument("--namespace", default="tributary-system")
    t.add_argument("--values", action="append", default=[], metavar="FILE")
    t.add_argument("--set-json", action="append", default=[], metavar="JSON")
    t.set_defaults(run=template)
    li = sub.add_parser("lint", help="helm lint")
    li.add_argument("chart")
    li.set_defaults(run=lint)
    args = p.parse_args()
    scratch = isolated_or_reexec()
    try:
        return args.run(args)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
