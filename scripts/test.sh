#!/usr/bin/env bash
# The whole test suite: installs what the tests need (tshark), then runs every test
# of the workspace (unit, property, integration, tshark validation, stress, doc
# tests) and the loom model check of the shard move (separate build with --cfg loom).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cargo test --workspace --all-targets --quiet
cargo test --workspace --doc --quiet
echo "loom: the shard move under every interleaving (preemption bound 2; a few minutes)"
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test --release --quiet -p flowshift-runtime --lib loom
