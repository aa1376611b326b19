#!/usr/bin/env bash
# Fuzzes every cargo-fuzz target in fuzz/ (SEC-12) for FUZZ_SECONDS seconds each (default 20), on
# the stable toolchain. Installs cargo-fuzz first if it is missing. Exits non-zero, printing the
# input, when a target crashes (a panic, an allocation over the limit, a timeout); the input is kept
# in fuzz/artifacts/<target>/ (gitignored) to replay with `cargo fuzz run -s none <target> <file>`.
#
# Each target starts from a temporary copy of fuzz/corpus/<target>, so the run never writes into
# the repository; inputs worth keeping are added to fuzz/corpus/ by hand (then `cargo test --test
# fuzz_replay` replays them on every test run too).
#
# Measured from a clean clone on 2 busy cores: installing cargo-fuzz ~1 min (when missing), then
# 17.5 min, of which the cold build of all targets is 15.3 min and the six 20 s runs 2 min; a warm
# rebuild takes seconds.
#
#   ./scripts/fuzz.sh                               # every target, 20 s each (scripts/test.sh runs this)
#   FUZZ_SECONDS=300 ./scripts/fuzz.sh xds_delta    # one target, longer
set -euo pipefail
cd "$(dirname "$0")/../fuzz"

seconds="${FUZZ_SECONDS:-20}"

if ! command -v cargo-fuzz >/dev/null 2>&1; then
  echo "== installing cargo-fuzz (cargo install cargo-fuzz --locked)"
  cargo install cargo-fuzz --locked
fi

# -s none: no sanitizer. AddressSanitizer (cargo-fuzz's default) needs `-Zsanitizer`, which only
# nightly accepts; everything else cargo-fuzz passes (sancov coverage, `--cfg fuzzing`) is stable.
# The code under test forbids unsafe, so ASan would add little. -O with --debug-assertions: an
# optimised build (more inputs per second) that still panics on integer overflow and debug_assert!.
flags=(-s none -O --debug-assertions)
# Bounds per input: 16 KiB is far beyond any seed and enough for deep nesting; 1 GiB of memory (also
# the largest single allocation libFuzzer allows) and 20 s per input, else it is a finding.
bounds=(-max_len=16384 -rss_limit_mb=1024 -timeout=20)

echo "== cargo fuzz build ${flags[*]}"
cargo fuzz build "${flags[@]}"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
failed=()
targets=("$@")
if [ "${#targets[@]}" -eq 0 ]; then
  mapfile -t targets < <(cargo fuzz list)
fi
for target in "${targets[@]}"; do
  corpus="$work/corpus/$target"
  artifacts="$PWD/artifacts/$target/"
  mkdir -p "$corpus" "$artifacts"
  if [ -d "corpus/$target" ]; then
    cp -R "corpus/$target/." "$corpus/"
  fi
  log="$work/$target.log"
  echo "== cargo fuzz run ${flags[*]} $target <copy of corpus/$target> -- -max_total_time=$seconds ${bounds[*]}"
  if cargo fuzz run "${flags[@]}" "$target" "$corpus" -- \
    -max_total_time="$seconds" "${bounds[@]}" -artifact_prefix="$artifacts" \
    -print_final_stats=1 >"$log" 2>&1; then
    # libFuzzer's last status line (coverage reached, corpus size) and its run count.
    grep -E '^#[0-9]+' "$log" | tail -n 1
    grep -E '^Done ' "$log"
  else
    failed+=("$target")
    echo "!! $target failed; the end of its output:"
    tail -n 60 "$log"
    # The panic message, which a long backtrace may push out of the tail above.
    grep -m 1 -A 2 "panicked at" "$log" || true
    for crash in $(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log"); do
      echo "!! input $crash (base64):"
      base64 "$crash"
    done
  fi
done

if [ "${#failed[@]}" -gt 0 ]; then
  echo "fuzzing found problems in: ${failed[*]}" >&2
  exit 1
fi
echo "== fuzzing: every target ran ${seconds}s without a finding"
