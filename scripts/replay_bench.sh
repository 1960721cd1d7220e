#!/usr/bin/env bash
# Replay in bounded memory: generates a capture of SIZE_GB (default 10) and
# one of 1 GB with the same flows and packet sizes, then, in ROUNDS rounds
# (default 3), replays each at full speed through the default chain on 2
# working cores: the small one held in memory (`--replay-memory 2GiB`) and
# looped SIZE_GB times (as many packets as the large one), the large one
# streamed. Prints each run's rate and peak resident memory, the
# medians, and the ratio of the streamed rate to the in-memory one measured
# in the same rounds. The captures are deleted at the end.
# Usage: scripts/replay_bench.sh [SIZE_GB] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
gb=${1:-10}
rounds=${2:-3}
cargo build --release --quiet --bin flowshift
dir=out/replay_bench
mkdir -p "$dir"
trap 'rm -f "$dir"/big.pcap "$dir"/small.pcap' EXIT
# campus sizes average about 0.95 KB a packet (pcap record included)
per_gb=1050000
./target/release/flowshift gen -o "$dir/small.pcap" --flows 20000 \
  --packets "$per_gb" --seed 7 >/dev/null
./target/release/flowshift gen -o "$dir/big.pcap" --flows 20000 \
  --packets $((per_gb * gb)) --seed 7 >/dev/null
ls -l "$dir"/small.pcap "$dir"/big.pcap
# written back and read once: the rounds measure the replay, not the disk
sync
cat "$dir"/big.pcap "$dir"/small.pcap >/dev/null
: >"$dir/rows.txt"
for r in $(seq 1 "$rounds"); do
  for kind in memory streamed; do
    if [ "$kind" = memory ]; then f=small.pcap; m=2GiB; l=$gb; else f=big.pcap; m=64MiB; l=1; fi
    ./target/release/flowshift run --input "$dir/$f" --workers 2 --replay-memory "$m" --loops "$l" \
      --json "$dir/$kind.json" >/dev/null 2>"$dir/$kind.err"
    python3 - "$dir/$kind.json" "$kind" "$r" <<'PY' | tee -a "$dir/rows.txt"
import json, sys
r = json.load(open(sys.argv[1]))
mpps = r["throughput"]["mpps"]
print(f"{sys.argv[2]} {sys.argv[3]} {r['packets_in']} {mpps:.3f} {r['memory']['max_rss'] / 2**20:.0f}")
PY
  done
done
python3 - "$dir/rows.txt" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
by = {}
for kind, rnd, pkts, mpps, rss in rows:
    by.setdefault(kind, []).append((int(rnd), float(mpps), float(rss)))
ratios = [s[1] / m[1] for m, s in zip(by["memory"], by["streamed"])]
for kind, v in by.items():
    print(f"{kind:9} median {statistics.median(x[1] for x in v):.3f} Mpps, "
          f"peak RSS max {max(x[2] for x in v):.0f} MiB")
print(f"streamed / in memory, per round: {' '.join(f'{x:.2f}' for x in ratios)}; "
      f"median {statistics.median(ratios):.2f}")
PY
