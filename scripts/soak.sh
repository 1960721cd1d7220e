#!/usr/bin/env bash
# Soak: flowshift run for a bounded time (default 180 s) on a looped generated
# trace replayed at its own pace (0.2 Mpps, 1.5 s per lap), FW → NAT → sequence
# check with timeouts shorter than a lap and a small NAT port pool (flows expire
# and NAT ports are reused every lap), the random balancer moving shards
# and changing offload ratios every 5 ms. Samples the process's resident memory
# every 5 s and checks, at the end: memory flat (the last third's peak within 5 %
# + 8 MiB of the first third's), 0 reordered, in = out + drops.
# Usage: scripts/soak.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-180}
cargo build --release --quiet --bin flowshift
dir=out/soak
mkdir -p "$dir"
./target/release/flowshift gen -o "$dir/trace.pcap" --flows 20000 --packets 300000 \
  --active-flows 2000 --sizes imix --tcp-share 0.7 --rate 0.2mpps >/dev/null
cat >"$dir/chain.toml" <<'TOML'
[steering]
shards = 16
[table]
capacity = 8192
policy = "evict-unassured"
[[nf]]
kind = "firewall"
rules = "allow any 10.0.0.0/8 -> any"
[nf.timeouts]
syn_sent = "1s"
established = "3s"
fin_wait = "1s"
time_wait = "1s"
close = "1s"
[[nf]]
kind = "nat"
internal = "10.0.0.0/8"
external = ["203.0.113.1"]
ports = "1024-16383"
[nf.timeouts]
tcp_established = "3s"
tcp_transitory = "1s"
udp = "500ms"
icmp = "500ms"
[[nf]]
kind = "seqcheck"
TOML
./target/release/flowshift run --config "$dir/chain.toml" --input "$dir/trace.pcap" \
  --workers 2 --offloaders 1 --offload-ratio 0.25 --balancer random --period 5ms \
  --speed 1 --duration "${secs}s" --json "$dir/report.json" >"$dir/run.txt" 2>"$dir/run.err" &
pid=$!
: >"$dir/rss.txt"
t=0
while kill -0 "$pid" 2>/dev/null; do
  rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status" 2>/dev/null || true)
  [ -n "$rss" ] && echo "$t $rss" >>"$dir/rss.txt"
  sleep 5
  t=$((t + 5))
done
wait "$pid"
cat "$dir/run.txt"
python3 - "$dir/rss.txt" "$dir/report.json" <<'PY'
import json, sys
rss = [tuple(map(int, l.split())) for l in open(sys.argv[1]) if l.strip()]
r = json.load(open(sys.argv[2]))
print("RSS (MiB) every 5 s:", " ".join(f"{kb / 1024:.0f}" for _, kb in rss))
third = max(1, len(rss) // 3)
first, last = max(kb for _, kb in rss[:third]), max(kb for _, kb in rss[-third:])
drops = sum(r["drops"].values())
ok = True
def check(cond, what):
    global ok
    print(("ok   " if cond else "FAIL ") + what)
    ok &= cond
check(last <= first * 1.05 + 8 * 1024, f"memory flat: first third peak {first / 1024:.1f} MiB, last third peak {last / 1024:.1f} MiB")
check(r["reordered"] == 0, f"reordered {r['reordered']}")
check(r["packets_in"] == r["packets_out"] + drops, f"in {r['packets_in']} = out {r['packets_out']} + drops {drops} {r['drops']}")
print(f"flows {r['flows']}, migrations {r['migrations']}")
sys.exit(0 if ok else 1)
PY
