#!/usr/bin/env bash
# The whole test suite: installs what the build and tests need (tshark; cmake and
# libclang to build HiGHS), then runs every test of the workspace (unit, property,
# integration, tshark validation, stress, doc tests), then, side by side (each
# mostly uses one core), the loom model checks of the shard move and the
# offload-ratio change (separate build with --cfg loom) and every fuzz target for
# 10 s (cargo-fuzz, installed if missing; scripts/fuzz.sh for longer runs).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cargo test --workspace --all-targets --quiet
cargo test --workspace --doc --quiet
echo "loom: the shard move and the offload-ratio change under every interleaving (preemption bound 2; a few minutes), beside fuzzing"
mkdir -p target
loom_log=target/loom.log
(RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test --release --quiet -p flowshift-runtime --lib loom) >"$loom_log" 2>&1 &
loom=$!
fuzz_status=0
bash scripts/fuzz.sh 10 || fuzz_status=$?
loom_status=0
wait "$loom" || loom_status=$?
cat "$loom_log"
if [ "$loom_status" -ne 0 ] || [ "$fuzz_status" -ne 0 ]; then
  echo "loom exit $loom_status, fuzzing exit $fuzz_status" >&2
  exit 1
fi
