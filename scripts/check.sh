#!/usr/bin/env bash
# What STYLE asks of every change, enforced: formatting, clippy with warnings denied on every
# target, rustdoc with warnings denied (broken intra-doc links), and docs/ that resolve (every cited
# rule id defined, no reference outside the repository). `.ci/run` calls it before the tests.
# Clippy enforces the lints of Cargo.toml's [workspace.lints] (`unreachable_pub`, `missing_docs`,
# no `unwrap`, ...) and the std items clippy.toml bans (environment reads below the edge, blocking
# sleeps).
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== cargo fmt --check"
cargo fmt --all -- --check
# `cargo fmt` follows `mod` items only: the modules `src/lib.rs` declares through its
# `internal_modules!` macro (and theirs) are checked file by file.
echo "== rustfmt --check src/"
git ls-files -z 'src/*.rs' | xargs -0 rustfmt --edition 2024 --check

echo "== cargo clippy --workspace --all-targets -- -D warnings"
cargo clippy --workspace --all-targets --locked -- -D warnings

echo "== cargo doc --workspace --no-deps (warnings denied)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked --quiet

echo "== scripts/check-docs.sh"
./scripts/check-docs.sh
