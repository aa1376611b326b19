#!/usr/bin/env bash
# A short cargo-fuzz run of every target in fuzz/ (SEC-12). Measured here: building the targets
# takes ~3 min with warm dependencies (~30 min cold on 2 busy cores); 20 s per target ran 2.0M
# (xds_sotw), 2.0M (xds_delta), 0.21M (mock_file) and 0.25M (config_yaml) inputs without a crash. Needs the nightly toolchain; installs
# cargo-fuzz from crates.io if missing. Not part of scripts/test.sh: building the targets with
# sanitizers compiles the whole dependency tree again on nightly (10+ minutes on 2 cores), so CI
# runs the same target bodies on stable through `cargo test --test fuzz_replay` instead.
#
#   ./scripts/fuzz.sh            # 30 s per target
#   FUZZ_SECONDS=300 ./scripts/fuzz.sh xds_delta
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
seconds="${FUZZ_SECONDS:-30}"
rustup toolchain list | grep -q '^nightly' || { echo "needs the nightly toolchain (rustup toolchain install nightly)" >&2; exit 1; }
command -v cargo-fuzz >/dev/null 2>&1 || cargo +nightly install cargo-fuzz --locked
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(xds_sotw xds_delta mock_file config_yaml)
for t in "${targets[@]}"; do
  mkdir -p "corpus/$t"
  echo "== fuzz $t for ${seconds}s"
  cargo +nightly fuzz run -O "$t" "corpus/$t" -- -max_total_time="$seconds" -rss_limit_mb=2048
done
