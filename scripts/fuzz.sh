#!/usr/bin/env bash
# Coverage-guided fuzzing (cargo-fuzz, libFuzzer, stable toolchain with
# `--sanitizer none`) of every parser that takes outside bytes:
#   packet      frames: the single parse and the read-back/re-emit
#   chain       frame sequences through FW→NAT→IDS→monitor→seqcheck and LB→router
#   capture     pcap and pcapng files
#   rules       ACL (against naive first match), routes (against LPM), IDS rules
#   config      chain configurations (built and run) and trace specs
#   ids_stream  the IDS matcher across random packet splits (against whole-buffer)
# Corpora start from the repository's own inputs (scripts/fuzz_seeds.py) and grow
# in fuzz/corpus/ (ignored); a crash is written to fuzz/artifacts/<target>/ and
# fails the script — turn each into a regression test.
# Usage: scripts/fuzz.sh [SECONDS_PER_TARGET (default 60)] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(packet chain capture rules config ids_stream)

cargo fuzz --version >/dev/null 2>&1 || cargo install cargo-fuzz --locked --quiet
cargo build --quiet -p flowshift-cli
seeds=$(mktemp -d)
trap 'rm -rf "$seeds"' EXIT
./target/debug/flowshift gen -o "$seeds/gen.pcap" --flows 40 --packets 400 --ipv6-share 0.3 --tcp-share 0.7 --sizes imix >/dev/null 2>&1
./target/debug/flowshift gen -o "$seeds/gen.pcapng" --flows 5 --packets 30 >/dev/null 2>&1
python3 scripts/fuzz_seeds.py "$seeds/gen.pcap" "$seeds/gen.pcapng" fuzz/corpus

(cd fuzz && cargo fuzz build --sanitizer none --release)
status=0
for t in "${targets[@]}"; do
  mkdir -p "fuzz/corpus/$t"
  log="fuzz/artifacts/$t.log"
  mkdir -p fuzz/artifacts
  if (cd fuzz && cargo fuzz run --sanitizer none --release "$t" -- \
        -max_total_time="$secs" -max_len=4096 -rss_limit_mb=2048 -timeout=60 -print_final_stats=1) >"$log" 2>&1; then
    runs=$(grep -oE '^stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' || echo "?")
    cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -1 || true)
    echo "fuzz $t: ${secs}s, $runs executions, $cov, 0 crashes"
  else
    echo "fuzz $t: FAILED — see $log and fuzz/artifacts/$t/" >&2
    tail -30 "$log" >&2
    status=1
  fi
done
exit $status
