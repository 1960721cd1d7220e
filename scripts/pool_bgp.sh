#!/usr/bin/env bash
# The pool on BGP under load (needs root, BIRD 2 and iperf3):
#   bfd [SECONDS [IxM…]] for each BFD setting (interval ms × multiplier;
#                    default 2x3 5x3 10x3 10x5), a 3-node `pool run --routing bgp` for
#                    SECONDS (default 30) with iperf3 through every node's
#                    virtual IP and two busy loops beside it; prints how many
#                    sessions the router took down while every node lived
#                    (false failovers) — the fastest setting with none is the
#                    one to ship.
#   failover [ROUNDS [FILTER]] the failover test (crates/cli/tests/pool_bgp.rs:
#                    200 downloads through a controller kill -9, a node kill
#                    -9 and a drain; FILTER picks others: `link`, `split`,
#                    `plan`, `spill`, `split_by_hash`, `re_pairs`, or `_` for all) ROUNDS times (default 20) with
#                    two busy loops beside; prints each round's re-route
#                    times and the rounds that failed (a broken download, or
#                    a route of a living node that moved: a false failover);
#                    a failed round's nodes' logs are kept in
#                    out/pool_bgp.N/.
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-failover}
busy=()
stop_busy() { for p in "${busy[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap stop_busy EXIT
start_busy() {
  for _ in 1 2; do
    sh -c 'while :; do :; done' &
    busy+=($!)
  done
}
case "$what" in
bfd)
  secs=${2:-30}
  settings=("${@:3}")
  [ ${#settings[@]} -gt 0 ] || settings=(2x3 5x3 10x3 10x5)
  cargo build --release --quiet --bin flowshift
  out=out/pool_bfd
  mkdir -p "$out"
  start_busy
  printf '%-12s %-10s %s\n' "bfd" "detect" "false failovers"
  for s in "${settings[@]}"; do
    i=${s%x*}
    m=${s#*x}
    ./target/release/flowshift pool run --routing bgp --nodes 3 --prefix fsbf \
      --bfd-interval-ms "$i" --bfd-multiplier "$m" --duration "${secs}s" \
      --out "$out/run" --json "$out/$s.json" >"$out/$s.out" 2>&1 &
    pool=$!
    until grep -q "every BGP session established" "$out/$s.out" 2>/dev/null; do
      sleep 0.2
      kill -0 "$pool" 2>/dev/null || { cat "$out/$s.out"; exit 1; }
    done
    ip netns exec fsbf-s iperf3 -s -D -p 5201
    clients=()
    for v in 10 11 12; do
      ip netns exec fsbf-c iperf3 -c "198.51.100.$v" -p 5201 -t $((secs - 5)) -P 2 \
        >"$out/$s.iperf$v" 2>&1 &
      clients+=($!)
    done
    wait "$pool" || true
    wait "${clients[@]}" || true
    python3 - "$out/$s.json" "$s" "$((i * m))" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
down = [c for c in r["sessions"] if c["to"] == "down"]
print(f"{sys.argv[2]:<12} {sys.argv[3] + ' ms':<10} {len(down)}" + "".join(
    f"\n    node {c['node']} at {c['at_ms']:.0f} ms: {c['info']}" for c in down))
PY
  done
  ;;
failover)
  rounds=${2:-20}
  filter=${3:-pairs_fail_over}
  cargo test --quiet -p flowshift-cli --test pool_bgp --no-run
  start_busy
  failed=0
  for r in $(seq 1 "$rounds"); do
    if cargo test --quiet -p flowshift-cli --test pool_bgp -- --nocapture "$filter" \
      >"out/pool_bgp.$r.log" 2>&1; then
      ok=ok
    else
      ok=FAILED
      failed=$((failed + 1))
      mkdir -p "out/pool_bgp.$r"
      cp -r target/tmp/pool-bgp* "out/pool_bgp.$r/" 2>/dev/null || true
    fi
    echo "round $r: $ok"
    grep -oE "[0-9]+ (tenants|downloads).*" "out/pool_bgp.$r.log" | sed 's/^/  /'
  done
  echo "$failed of $rounds rounds failed (logs: out/pool_bgp.N.log)"
  [ "$failed" -eq 0 ]
  ;;
*)
  echo "usage: scripts/pool_bgp.sh bfd [SECONDS] | failover [ROUNDS]" >&2
  exit 2
  ;;
esac
