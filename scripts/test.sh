#!/usr/bin/env bash
# The whole test suite: installs what the build and tests need (tshark; cmake and
# libclang to build HiGHS), checks the code's shape (scripts/structure.py), then
# runs every test of the workspace (unit, property,
# integration, tshark validation, stress, doc tests) while the fuzz targets build
# beside them, then the loom model checks of the shard move and the offload-ratio
# change (separate build with --cfg loom) beside every fuzz target for 5 s
# (scripts/fuzz.sh for longer runs). Each side mostly keeps one core busy.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
# Incremental caches would double the build's footprint on a fresh clone, which
# never reuses them; the free space is printed so a full disk is seen at once.
export CARGO_INCREMENTAL=0
df -h . | tail -1 | awk '{print "disk: " $4 " free of " $2}'
# Tests that need root, network namespaces or eBPF note here whether they ran
# or skipped (netio::testbed::privileged); FLOWSHIFT_REQUIRE_PRIVILEGED=1 (CI)
# turns a skip into a failure.
export FLOWSHIFT_PRIVILEGED_LOG="$PWD/target/privileged.log"
mkdir -p target
rm -f "$FLOWSHIFT_PRIVILEGED_LOG"
privileged_summary() {
  local ran skipped
  ran=$( (grep '^ran' "$FLOWSHIFT_PRIVILEGED_LOG" 2>/dev/null || true) | cut -f2 | sort -u | wc -l)
  skipped=$( (grep '^skipped' "$FLOWSHIFT_PRIVILEGED_LOG" 2>/dev/null || true) | cut -f2 | sort -u | wc -l)
  echo "privileged tests (root, network namespaces, eBPF): $ran ran, $skipped skipped"
  if [ "$skipped" != "0" ]; then
    echo "WARNING: privileged tests were SKIPPED — they did not run:" >&2
    grep '^skipped' "$FLOWSHIFT_PRIVILEGED_LOG" | sort -u >&2
  fi
}
trap privileged_summary EXIT
# no function over 120 lines, no circle of files inside a crate
python3 scripts/structure.py
cargo test --workspace --all-targets --quiet --no-run
FLOWSHIFT_BIN=target/debug/flowshift bash scripts/fuzz.sh --quick --build-only >target/fuzz-build.log 2>&1 &
fuzz_build=$!
cargo test --workspace --all-targets --quiet
cargo test --workspace --doc --quiet
if ! wait "$fuzz_build"; then
  cat target/fuzz-build.log >&2
  exit 1
fi
echo "loom: the shard move and the offload-ratio change under every interleaving (preemption bound 2; a few minutes), beside fuzzing"
loom_log=target/loom.log
(RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test --release --quiet -p flowshift-runtime --lib loom) </dev/null >"$loom_log" 2>&1 &
loom=$!
fuzz_status=0
bash scripts/fuzz.sh --run-only 5 || fuzz_status=$?
loom_status=0
wait "$loom" || loom_status=$?
cat "$loom_log"
if [ "$loom_status" -ne 0 ] || [ "$fuzz_status" -ne 0 ]; then
  echo "loom exit $loom_status, fuzzing exit $fuzz_status" >&2
  exit 1
fi
