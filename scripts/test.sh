#!/usr/bin/env bash
# The whole test suite: installs what the build and tests need (tshark; cmake and
# libclang to build HiGHS), then runs every test of the workspace (unit, property,
# integration, tshark validation, stress, doc tests) and the loom model checks of
# the shard move and the offload-ratio change (separate build with --cfg loom).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cargo test --workspace --all-targets --quiet
cargo test --workspace --doc --quiet
echo "loom: the shard move and the offload-ratio change under every interleaving (preemption bound 2; a few minutes)"
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test --release --quiet -p flowshift-runtime --lib loom
