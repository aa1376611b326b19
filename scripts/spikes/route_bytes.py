#!/usr/bin/env python3
"""Measurement, run by hand (not part of CI): the bytes one service add and one delete cost a
delta ADS client of a running tributary, per type. Usage:
route_bytes.py TRIBUTARY_BINARY [SERVICES] [--vhds]

With --vhds the client opts into VHDS (node metadata TRIBUTARY_VHDS) and subscribes to virtual
hosts as Envoy does (a wildcard request after its first route configuration); without it, the
script also prints what one virtual host would cost as a VHDS resource.

The mesh has the load tool's `medium` shape (`load/src/mesh.rs`: services `svc-NNNNN.load...`, two
HTTP ports 20000/20001, ten endpoints each, no VIPs), served from a mock file. Results are in
docs/architecture.md, "Route configurations for delta clients". Needs grpcio and xds-protos
(installed by scripts/test.sh).
"""
import json
import os
import queue
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import grpc
from google.protobuf import any_pb2
from envoy.config.core.v3 import base_pb2
from envoy.config.route.v3 import route_pb2
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2

PREFIX = "type.googleapis.com/envoy.config."
TYPES = {
    "cds": PREFIX + "cluster.v3.Cluster",
    "eds": PREFIX + "endpoint.v3.ClusterLoadAssignment",
    "lds": PREFIX + "listener.v3.Listener",
    "rds": PREFIX + "route.v3.RouteConfiguration",
    "vhds": PREFIX + "route.v3.VirtualHost",
}
PORTS = (20000, 20001)
SETTLE = 6.0  # seconds to collect the responses of one change


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def service(i):
    return {
        "hostname": f"svc-{i:05}.load.svc.cluster.local",
        "ports": [{"name": f"http-{p}", "port": port, "protocol": "HTTP"}
                  for p, port in enumerate(PORTS)],
        "endpoints": [
            {"address": f"10.{(n >> 16) & 255}.{(n >> 8) & 255}.{n & 255}",
             "ports": {f"http-{p}": 8000 + p for p in range(len(PORTS))}}
            for n in range(i * 10, i * 10 + 10)
        ],
    }


def wait_ready(admin):
    """Until tributary's /ready answers 200 (the mesh is loaded), at most a minute."""
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(f"http://{admin}/ready", timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit("tributary did not become ready within a minute")


def write_mesh(path, n):
    with open(path + ".tmp", "w") as f:
        json.dump({"services": [service(i) for i in range(n)]}, f)  # JSON is YAML
    os.rename(path + ".tmp", path)


class Client:
    """One delta ADS client: CDS, LDS wildcard, EDS of every cluster, RDS of both ports."""

    def __init__(self, addr, vhds):
        self.reqs = queue.Queue()
        self.resps = queue.Queue()
        self.node = base_pb2.Node(id="route-bytes", cluster="measure")
        if vhds:
            self.node.metadata.fields["TRIBUTARY_VHDS"].bool_value = True
        self.vhds = vhds
        channel = grpc.insecure_channel(addr, options=[("grpc.max_receive_message_length",
                                                        256 << 20)])
        stream = ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel).DeltaAggregatedResources(
            iter(self.reqs.get, None))
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()
        for t in ("cds", "lds"):
            self.ask(t)
        self.ask("rds", [str(p) for p in PORTS])

    def _read(self, stream):
        try:
            for r in stream:
                self.resps.put(r)
        except grpc.RpcError:
            pass

    def ask(self, t, names=()):
        self.reqs.put(discovery_pb2.DeltaDiscoveryRequest(
            node=self.node, type_url=TYPES[t], resource_names_subscribe=list(names)))

    def collect(self):
        """Bytes per type received within SETTLE seconds (all ACKed), and the route configs."""
        got, rcs = {}, []
        deadline = time.time() + SETTLE
        while time.time() < deadline:
            try:
                r = self.resps.get(timeout=0.2)
            except queue.Empty:
                continue
            self.reqs.put(discovery_pb2.DeltaDiscoveryRequest(type_url=r.type_url,
                                                              response_nonce=r.nonce))
            t = next(k for k, v in TYPES.items() if v == r.type_url)
            got[t] = got.get(t, 0) + r.ByteSize()
            if t == "rds" and self.vhds:
                # Envoy subscribes to virtual hosts once, with a wildcard, after its first
                # route configuration.
                self.vhds = False
                self.ask("vhds")
            if t == "rds":
                for res in r.resources:
                    rc = route_pb2.RouteConfiguration()
                    res.resource.Unpack(rc)
                    rcs.append(rc)
            if t == "cds" and r.resources:
                # EDS follows CDS: subscribe to the load assignment of every new cluster.
                self.ask("eds", [res.name for res in r.resources])
        return got, rcs


def vhds_entry(rc, vh):
    """A VirtualHost as one delta `Resource`, named `<route config>/<vhost>`, 16-hex version."""
    any_vh = any_pb2.Any()
    any_vh.Pack(vh)
    return discovery_pb2.Resource(name=f"{rc.name}/{vh.name}", version="0" * 16,
                                  resource=any_vh)


def main():
    if len([a for a in sys.argv[1:] if a != "--vhds"]) < 1:
        raise SystemExit(__doc__)
    args = [a for a in sys.argv[1:] if a != "--vhds"]
    vhds = "--vhds" in sys.argv
    binary, n = args[0], int(args[1]) if len(args) > 1 else 1000
    workdir = tempfile.mkdtemp(prefix="route-bytes-")
    mesh = os.path.join(workdir, "mesh.yaml")
    write_mesh(mesh, n)
    xds, admin = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    proc = subprocess.Popen([binary, "--mock-file", mesh, "--xds-addr", xds, "--admin-addr",
                             admin], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_ready(admin)
        client = Client(xds, vhds)
        initial, rcs = client.collect()
        print(f"{n} services, initial config per client by type: {initial}")
        for rc in rcs:
            print(f"route configuration {rc.name}: {rc.ByteSize()} B, "
                  f"{len(rc.virtual_hosts)} virtual hosts")
        entries = [vhds_entry(rc, vh).ByteSize() for rc in rcs for vh in rc.virtual_hosts]
        if entries:
            per_vh = sum(entries) / len(entries)
            print(f"one virtual host as a VHDS resource: {per_vh:.0f} B")
        for what, count in (("add", n + 1), ("delete", n)):
            write_mesh(mesh, count)
            got, _ = client.collect()
            rest = sum(v for k, v in got.items() if k != "rds")
            print(f"one service {what}: {sum(got.values())} B per client {got}; without RDS "
                  f"{rest} B")
    finally:
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    main()
