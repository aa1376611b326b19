#!/usr/bin/env bash
# A gRPC greeter called through tributary by a proxyless grpcio client (no Envoy), end to end:
# the client resolves xds:///greeter.demo.local:18090 over ADS, calls backend-a, follows an
# endpoint change to backend-b, and the example shows the client's status over CSDS.
#
#   ./examples/proxyless-grpc/run.sh
#
# Needs: cargo, python3 with `pip install grpcio grpcio-csds`. Uses 127.0.0.1 ports 15010/15014
# (tributary) and 50051/50052 (the two greeter backends). The greeter, the client and the CSDS
# reader are the scripts the tests use (tests/proxyless/).
set -euo pipefail
cd "$(dirname "$0")/../.."
. examples/lib.sh
scripts=tests/proxyless
python3 -c 'import grpc, grpc_csds' 2>/dev/null || fail "python3 needs: pip install grpcio grpcio-csds"

mesh() { # mesh <backend port>
  cat >"$work/mesh.yaml.tmp" <<YAML
services:
  - hostname: greeter.demo.local
    ports: [{name: grpc, port: 18090, protocol: GRPC}]
    endpoints:
      - {address: 127.0.0.1, ports: {grpc: $1}, locality: us-east/zone-a}
YAML
  mv "$work/mesh.yaml.tmp" "$work/mesh.yaml"
}

step "building tributary"
cargo build --quiet --bin tributary

step "starting two greeter backends (grpcio) on 127.0.0.1:50051 and :50052"
python3 $scripts/greeter_server.py --ignore-stdin --serve 127.0.0.1:50051=backend-a \
  --serve 127.0.0.1:50052=backend-b </dev/null >"$work/greeters.log" 2>&1 &
pids+=($!)

step "starting tributary on a mock file: greeter.demo.local:18090 -> backend-a"
mesh 50051
start_tributary --mock-file "$work/mesh.yaml"

step "the gRPC bootstrap the client reads (GRPC_XDS_BOOTSTRAP)"
cat >"$work/bootstrap.json" <<JSON
{"xds_servers": [{"server_uri": "127.0.0.1:15010", "channel_creds": [{"type": "insecure"}],
                  "server_features": ["xds_v3"]}],
 "node": {"id": "greeter-client", "cluster": "demo", "locality": {"zone": "zone-a"}}}
JSON
cat "$work/bootstrap.json"

step "calling xds:///greeter.demo.local:18090 (one JSON line per call)"
GRPC_XDS_BOOTSTRAP="$work/bootstrap.json" python3 $scripts/client.py \
  --target xds:///greeter.demo.local:18090 --interval-ms 200 --seconds 30 --ignore-stdin \
  </dev/null >"$work/calls.log" 2>"$work/client.log" &
pids+=($!)
for _ in $(seq 100); do grep -q backend-a "$work/calls.log" 2>/dev/null && break; sleep 0.1; done
grep -q backend-a "$work/calls.log" || fail "no call reached backend-a"
grep backend-a "$work/calls.log" | head -1

step "moving the endpoint to backend-b"
mesh 50052
for _ in $(seq 50); do grep -q backend-b "$work/calls.log" && break; sleep 0.1; done
grep -q backend-b "$work/calls.log" || fail "calls did not move to backend-b"
grep backend-b "$work/calls.log" | head -1

step "what the client holds, over CSDS"
python3 $scripts/csds_client.py --server 127.0.0.1:15010 --node-prefix greeter-client | python3 -m json.tool

step "done: the proxyless client followed tributary without any sidecar"
