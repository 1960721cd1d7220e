#!/usr/bin/env bash
# Coverage-guided fuzzing (libFuzzer through libfuzzer-sys, on the stable
# toolchain: the targets are built with the coverage flags `cargo fuzz build
# --sanitizer none` uses, so cargo-fuzz is not needed — `cargo fuzz run` works
# in fuzz/ too) of every parser that takes outside bytes:
#   packet      frames: the single parse and the read-back/re-emit
#   chain       frame sequences through FW→NAT→IDS→monitor→seqcheck and LB→router
#   capture     pcap and pcapng files
#   rules       ACL (against naive first match), routes (against LPM), IDS rules
#   config      chain configurations (built and run) and trace specs
#   ids_stream  the IDS matcher across random packet splits (against whole-buffer)
#   pool        pool messages: opened with the key, consumed by a node (orders, copies, entries)
#   upf         PFCP datagrams to the UPF's endpoint, frames through a UPF with a session
# Corpora start from the repository's own inputs (scripts/fuzz_seeds.py) and grow
# in fuzz/corpus/ (ignored); a crash is written to fuzz/artifacts/<target>/ and
# fails the script — turn each into a regression test.
# Usage: scripts/fuzz.sh [--quick] [--build-only | --run-only] [SECONDS_PER_TARGET (default 60)] [TARGET...]
#   --quick       build at opt-level 1 without debug info (quicker to build: the suite's short runs)
#   FLOWSHIFT_BIN a flowshift binary to make the seeds with (else it is built)
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0 build=1 run=1
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1 ;;
    --build-only) run=0 ;;
    --run-only) build=0 ;;
    *) break ;;
  esac
  shift
done
secs=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(packet chain capture rules config ids_stream pool upf)
triple=$(rustc -vV | sed -n 's/^host: //p')
bin=fuzz/target/$triple/release

if [ $build -eq 1 ]; then
  flowshift=${FLOWSHIFT_BIN:-}
  if [ -z "$flowshift" ]; then
    cargo build --quiet -p flowshift-cli
    flowshift=./target/debug/flowshift
  fi
  seeds=$(mktemp -d)
  trap 'rm -rf "$seeds"' EXIT
  "$flowshift" gen -o "$seeds/gen.pcap" --flows 40 --packets 400 --ipv6-share 0.3 --tcp-share 0.7 --sizes imix >/dev/null 2>&1
  "$flowshift" gen -o "$seeds/gen.pcapng" --flows 5 --packets 30 >/dev/null 2>&1
  python3 scripts/fuzz_seeds.py "$seeds/gen.pcap" "$seeds/gen.pcapng" fuzz/corpus
  if [ $quick -eq 1 ]; then
    export CARGO_PROFILE_RELEASE_DEBUG=0 CARGO_PROFILE_RELEASE_OPT_LEVEL=1
  fi
  # the flags of `cargo fuzz build --sanitizer none`
  RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing" \
    cargo build --quiet --release --manifest-path fuzz/Cargo.toml --target "$triple" --bins
fi
[ $run -eq 1 ] || exit 0

status=0
mkdir -p fuzz/artifacts
for t in "${targets[@]}"; do
  mkdir -p "fuzz/corpus/$t" "fuzz/artifacts/$t"
  log="fuzz/artifacts/$t.log"
  if "$bin/$t" -artifact_prefix="fuzz/artifacts/$t/" -max_total_time="$secs" -max_len=4096 \
       -rss_limit_mb=2048 -timeout=60 -print_final_stats=1 "fuzz/corpus/$t" >"$log" 2>&1; then
    runs=$(grep -oE '^stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' || echo "?")
    cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -1 || true)
    echo "fuzz $t: ${secs}s, $runs executions, $cov, 0 crashes"
  else
    echo "fuzz $t: FAILED — see $log and fuzz/artifacts/$t/" >&2
    grep -v '^ ' "$log" | tail -30 >&2
    status=1
  fi
done
exit $status
