#!/usr/bin/env python3
"""Spike, run by hand (not part of CI): does a real Envoy take virtual hosts over VHDS on the delta
ADS stream, and on what terms? Findings and the design they lead to: docs/architecture.md,
"Route configurations for delta clients".

A minimal delta ADS server (this file, grpcio + the Envoy protos of `xds-protos`, both installed by
scripts/test.sh with grpcio-csds) serves one Envoy (`envoy` on PATH or ENVOY_BIN) on loopback and
checks, phase by phase:

  A. a route configuration whose `vhds.config_source` is `ads: {}` is accepted on a delta ADS
     stream, and Envoy then subscribes to VirtualHost with an empty (wildcard) subscription, not
     with route configuration names or `<route config>/<host>` aliases;
  B. virtual hosts pushed without any request (no on-demand filter) route, and an inline `*`
     virtual host of the same route configuration keeps answering every other Host;
  C. a virtual host added later routes; D. one removed by its name stops routing;
  E. for a route configuration added later (second listener): a virtual host sent before it, and
     an empty VirtualHost response after it, leave its listener warming (no socket);
  F. a virtual host of its namespace sent after it releases the listener and routes.

Exits 0 when every phase behaved as stated, 1 otherwise; bounded (~1 min).
"""
import os
import queue
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from concurrent import futures

import grpc
from google.protobuf import any_pb2
from envoy.config.listener.v3 import listener_pb2
from envoy.config.route.v3 import route_components_pb2, route_pb2
from envoy.extensions.filters.http.router.v3 import router_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import (
    http_connection_manager_pb2 as hcm_pb2,
)
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2

PREFIX = "type.googleapis.com/envoy."
LDS = PREFIX + "config.listener.v3.Listener"
RDS = PREFIX + "config.route.v3.RouteConfiguration"
VHDS = PREFIX + "config.route.v3.VirtualHost"
CDS = PREFIX + "config.cluster.v3.Cluster"
V3 = 2  # ApiVersion.V3
WAIT = 10.0  # seconds any one expectation may take


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def packed(msg):
    out = any_pb2.Any()
    out.Pack(msg)
    return out


def listener(name, port, route_config):
    hcm = hcm_pb2.HttpConnectionManager(stat_prefix=name)
    hcm.rds.route_config_name = route_config
    hcm.rds.config_source.ads.SetInParent()
    hcm.rds.config_source.resource_api_version = V3
    router = hcm.http_filters.add(name="router")
    router.typed_config.CopyFrom(packed(router_pb2.Router()))
    out = listener_pb2.Listener(name=name)
    out.address.socket_address.address = "127.0.0.1"
    out.address.socket_address.port_value = port
    out.filter_chains.add().filters.add(name="hcm").typed_config.CopyFrom(packed(hcm))
    return out


def answer(vh, status, body):
    route = vh.routes.add()
    route.match.prefix = "/"
    route.direct_response.status = status
    route.direct_response.body.inline_string = body


def route_config(name):
    """A route configuration whose virtual hosts come over VHDS on ADS, plus an inline `*`."""
    rc = route_pb2.RouteConfiguration(name=name)
    rc.vhds.config_source.ads.SetInParent()
    rc.vhds.config_source.resource_api_version = V3
    catch_all = rc.virtual_hosts.add(name="catch-all", domains=["*"])
    answer(catch_all, 404, "catch-all")
    return rc


def virtual_host(route_config_name, host):
    """VHDS names a virtual host `<route config>/<host>`; Envoy removes by the `name` field."""
    vh = route_components_pb2.VirtualHost(name=f"{route_config_name}/{host}", domains=[host])
    answer(vh, 200, host)
    return vh


def resource(msg, version="1"):
    return discovery_pb2.Resource(name=msg.name, version=version, resource=packed(msg))


class Ads(ads_pb2_grpc.AggregatedDiscoveryServiceServicer):
    """One delta ADS stream; the test drives what it sends, and sees every request."""

    def __init__(self, listeners, route_configs):
        self.listeners = listeners
        self.route_configs = route_configs
        self.requests = queue.Queue()
        self.out = queue.Queue()
        self.nonce = 0

    def send(self, type_url, resources=(), removed=()):
        self.nonce += 1
        self.out.put(
            discovery_pb2.DeltaDiscoveryResponse(
                type_url=type_url,
                resources=list(resources),
                removed_resources=list(removed),
                nonce=str(self.nonce),
                system_version_info="spike",
            )
        )

    def DeltaAggregatedResources(self, request_iterator, context):
        def read():
            try:
                for req in request_iterator:
                    self.requests.put(req)
                    if req.response_nonce or req.error_detail.message:
                        continue
                    if req.type_url == CDS:
                        self.send(CDS)
                    elif req.type_url == LDS:
                        self.send(LDS, [resource(self.listeners[0])])
                    elif req.type_url == RDS:
                        wanted = [self.route_configs[n] for n in req.resource_names_subscribe]
                        self.send(RDS, [resource(rc) for rc in wanted])
            except grpc.RpcError:
                pass
            self.out.put(None)

        threading.Thread(target=read, daemon=True).start()
        while (msg := self.out.get()) is not None:
            yield msg

    def expect_request(self, type_url, what):
        deadline = time.time() + WAIT
        while time.time() < deadline:
            try:
                req = self.requests.get(timeout=0.2)
            except queue.Empty:
                continue
            if req.error_detail.message:
                raise SystemExit(f"Envoy NACKed {req.type_url}: {req.error_detail.message}")
            if req.type_url == type_url and not req.response_nonce:
                return req
        raise SystemExit(f"no {what} request within {WAIT}s")


def get(port, host):
    """(status, body) of GET / with this Host, or (None, reason) when nothing answers."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}/", headers={"Host": host})
    try:
        with urllib.request.urlopen(req, timeout=2) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError as e:
        return None, str(e)


def eventually(port, host, want, what):
    deadline = time.time() + WAIT
    got = None
    while time.time() < deadline:
        got = get(port, host)
        if got == want:
            print(f"ok   {what}: Host {host} -> {got}")
            return
        time.sleep(0.2)
    raise SystemExit(f"FAIL {what}: Host {host} -> {got}, wanted {want}")


def stays(port, host, secs, what):
    """Nothing listens on `port` for `secs` (the listener is warming)."""
    deadline = time.time() + secs
    while time.time() < deadline:
        got = get(port, host)
        if got[0] is not None:
            raise SystemExit(f"FAIL {what}: Host {host} -> {got}, wanted no listener")
        time.sleep(0.3)
    print(f"ok   {what}: no listener on {port} for {secs}s (warming)")


def main():
    envoy = os.environ.get("ENVOY_BIN") or shutil.which("envoy")
    if not envoy:
        raise SystemExit("envoy not found: put it on PATH or set ENVOY_BIN")
    xds, admin, p1, p2 = (free_port() for _ in range(4))
    ads = Ads([listener("l1", p1, "r1"), listener("l2", p2, "r2")],
              {"r1": route_config("r1"), "r2": route_config("r2")})
    server = grpc.server(futures.ThreadPoolExecutor(4))
    ads_pb2_grpc.add_AggregatedDiscoveryServiceServicer_to_server(ads, server)
    server.add_insecure_port(f"127.0.0.1:{xds}")
    server.start()
    bootstrap = f"""
node: {{id: vhds-spike, cluster: spike}}
admin: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {admin}}}}}}}
dynamic_resources:
  ads_config: {{api_type: DELTA_GRPC, transport_api_version: V3,
               grpc_services: [{{envoy_grpc: {{cluster_name: xds}}}}]}}
  cds_config: {{ads: {{}}, resource_api_version: V3}}
  lds_config: {{ads: {{}}, resource_api_version: V3}}
static_resources:
  clusters:
  - name: xds
    type: STATIC
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {{http2_protocol_options: {{}}}}
    load_assignment:
      cluster_name: xds
      endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{socket_address:
        {{address: 127.0.0.1, port_value: {xds}}}}}}}}}]}}]
"""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(bootstrap)
    proc = subprocess.Popen([envoy, "-c", f.name, "--disable-hot-restart", "-l", "warn",
                             "--base-id", str(os.getpid() % 60000)])
    try:
        rds = ads.expect_request(RDS, "RouteConfiguration")
        print(f"ok   RDS subscribe {list(rds.resource_names_subscribe)}")
        vhds = ads.expect_request(VHDS, "VirtualHost")
        print("ok   A: route configuration with vhds {ads: {}} accepted; VirtualHost request "
              f"subscribe={list(vhds.resource_names_subscribe)} (empty = wildcard)")
        if list(vhds.resource_names_subscribe):
            raise SystemExit("FAIL A: expected a wildcard VirtualHost subscription")
        ads.send(VHDS, [resource(virtual_host("r1", "a.example"))])
        eventually(p1, "a.example", (200, "a.example"), "B: pushed virtual host routes")
        eventually(p1, "other.example", (404, "catch-all"), "B: inline * still answers")
        ads.send(VHDS, [resource(virtual_host("r1", "b.example"))])
        eventually(p1, "b.example", (200, "b.example"), "C: virtual host added later routes")
        ads.send(VHDS, removed=["r1/a.example"])
        eventually(p1, "a.example", (404, "catch-all"), "D: removed virtual host stops routing")
        ads.send(VHDS, [resource(virtual_host("r2", "x.example"))])
        ads.send(LDS, [resource(ads.listeners[0]), resource(ads.listeners[1])])
        rds2 = ads.expect_request(RDS, "RouteConfiguration r2")
        print(f"ok   RDS subscribe {list(rds2.resource_names_subscribe)} (second listener)")
        ads.send(VHDS)  # empty: does it end r2's VHDS initialisation?
        stays(p2, "x.example", 4, "E: vhost sent before r2 and an empty response after it")
        ads.send(VHDS, [resource(virtual_host("r2", "x.example"), "2")])
        eventually(p2, "x.example", (200, "x.example"), "F: vhost sent after r2 routes")
        print("all phases behaved as stated")
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        server.stop(0)
        os.unlink(f.name)


if __name__ == "__main__":
    sys.exit(main())
