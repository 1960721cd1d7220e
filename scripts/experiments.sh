#!/usr/bin/env bash
# The experiments of docs/EXPERIMENTS.md, in the simulator (the papers use 8–16
# cores; this machine has 2) and, for GranularNF's, the runtime.
# Usage: scripts/experiments.sh [fig12|fig12w|uc2|uc1|tablev|fig1|fig9|fig11|all]
# Traces and results go to out/exp/ (ignored by git). Needs a release build:
#   cargo build --release -p flowshift-cli
set -euo pipefail
cd "$(dirname "$0")/.."
fs=./target/release/flowshift
[ -x "$fs" ] || cargo build --release -p flowshift-cli
mkdir -p out/exp
what=${1:-all}
# the papers' NICs steer in hardware: model a 100 Mpps NIC, not this runtime's
# NIC-model thread
sim=(--sim --nic-mpps 100 --no-plots)

gen() { # name, flags…
  local f=out/exp/$1.pcap; shift
  [ -f "$f" ] || "$fs" gen -o "$f" "$@" >/dev/null
}

# RSS++ Fig. 12b's trace and chain (both runs of it use them): campus-like
# trace (bimodal sizes, ~80 K active flows, heavy tail, lifetimes growing with
# size so elephants send for long at moderate rates), one shard per bucket (512)
fig12_setup() {
  gen campus-sized --flows 400000 --active-flows 80000 --packets 4000000 --alpha 1.0 \
    --sizes campus --rate 15gbps --tcp-share 0.8 --lifetimes sized:0.7
  cat > out/exp/fig12.toml <<'EOF'
[steering]
buckets = 512
shards = 512
[table]
capacity = 4096
[[nf]]
kind = "firewall"
rules = "allow any 10.0.0.0/8 -> any"
[[nf]]
kind = "seqcheck"
[run]
period = "10ms"
[run.rsspp]
min_period_ns = 10000000
max_period_ns = 10000000
EOF
  # RULES=published: RSS++'s rounds as published (results as fig12p-*, fig12wp-*)
  if [[ ${RULES:-} == published ]]; then
    printf 'predict = false\nkeep_share = 0.0\nscale_thresholds = false\n' >> out/exp/fig12.toml
  fi
}
# the suffix of Fig. 12b's results: p for RSS++'s published rules
p=""
[[ ${RULES:-} == published ]] && p=p

# k: the speed (× the trace's own pace) per core that loads a core 50 % with
# the bundled model's chain, measured on one core at a quarter of the pace
# (for c cores, speed k·c)
fig12_k() {
  "$fs" compare "${sim[@]}" --config out/exp/fig12.toml --input out/exp/campus-sized.pcap \
    --cores 1 --speed 0.25 --duration 500ms --balancers static \
    --json out/exp/fig12-probe.json >/dev/null
  python3 -c 'import json; r = json.load(open("out/exp/fig12-probe.json"))[0]
print("%.4f" % (0.5 * 0.25 / r["per_core"][0]["load"]))'
}

if [[ $what == fig12 || $what == all ]]; then
  # RSS++ Fig. 12b at a fixed 10 ms period, ~50 % mean core load at every core
  # count (the paper scales the per-packet work with the cores; here the rate)
  fig12_setup
  k=$(fig12_k)
  echo "# speed per core for 50 % load: $k" | tee "out/exp/fig12$p.txt"
  for c in 2 4 8 12 16; do
    speed=$(awk -v c="$c" -v k="$k" 'BEGIN { printf "%.3f", k * c }')
    "$fs" compare "${sim[@]}" --config out/exp/fig12.toml --input out/exp/campus-sized.pcap \
      --cores "$c" --speed "$speed" --duration 2s --balancers static,rsspp \
      --json "out/exp/fig12$p-$c.json" | tee -a "out/exp/fig12$p.txt"
  done
fi

# Dyssect's use cases as the paper runs them: a NAT and a payload-scanning IDS
# (4 content rules; the IDS walks every payload byte), 1 001 B packets (the
# paper's CAIDA average), NIC queues of 4 096 descriptors (as on the papers'
# testbeds). The cost model is measured on this chain and workload
# (`calibrate`), so δ, what an offloaded packet leaves on its working core, is
# the runtime's, not assumed; the simulator gives it to Dyssect's MILP.
uc_setup() {
  cat > out/exp/uc.toml <<'EOF'
[[nf]]
kind = "nat"
internal = "10.0.0.0/8"
external = ["203.0.113.0/24"]
[[nf]]
kind = "ids"
rules = '''
alert tcp any any -> any any (msg:"shellcode"; content:"|90 90 90 90 90 90|"; sid:1;)
alert tcp any any -> any any (msg:"passwd"; content:"/etc/passwd"; sid:2;)
alert tcp any any -> any any (msg:"cmd"; content:"cmd.exe"; sid:3;)
alert tcp any any -> any any (msg:"sql"; content:"UNION SELECT"; sid:4;)
'''
[run]
ring_size = 4096
EOF
  gen uc-calib --flows 20000 --active-flows 20000 --packets 200000 --alpha 1.1 \
    --sizes fixed:1001 --rate 5mpps --tcp-share 1.0 --lifetimes equal
  [ -f out/exp/model-uc.toml ] || "$fs" calibrate --config out/exp/uc.toml \
    --input out/exp/uc-calib.pcap --out out/exp/model-uc.toml >/dev/null
}

if [[ $what == fig12w || $what == all ]]; then
  # Fig. 12b as the paper runs it: the trace at its own pace, a per-packet work
  # W that grows with the cores (k × cores × the chain's cost, k as in fig12,
  # added to the firewall's price in a copy of the bundled model; where k ×
  # cores < 1 the trace is slowed instead), RSS++'s own 100 ms period with its
  # backoff (up to 1 s)
  fig12_setup
  sed -e 's/^period = .*/period = "100ms"/' -e 's/^min_period_ns = .*/min_period_ns = 100000000/' \
    -e 's/^max_period_ns = .*/max_period_ns = 1000000000/' out/exp/fig12.toml > out/exp/fig12w.toml
  k=$(fig12_k)
  echo "# speed per core for 50 % load: $k" | tee "out/exp/fig12w$p.txt"
  for c in 2 4 8 12 16; do
    python3 - "$c" "$k" <<'EOF'
import re, sys
c, k = int(sys.argv[1]), float(sys.argv[2])
s = open('crates/sim/default-model.toml').read()
num = lambda k: float(re.search(rf'^{k} = (\S+)', s, re.M).group(1))
chain = num('overhead_ns') + num('firewall') + num('seqcheck')
extra = max(k * c - 1.0, 0.0) * chain
s = re.sub(r'^firewall = \S+', f'firewall = {num("firewall") + extra}', s, flags=re.M)
open(f'out/exp/model-w{c}.toml', 'w').write(s)
EOF
    speed=$(awk -v c="$c" -v k="$k" 'BEGIN { s = k * c; if (s > 1) s = 1; printf "%.3f", s }')
    "$fs" compare "${sim[@]}" --model "out/exp/model-w$c.toml" --config out/exp/fig12w.toml \
      --input out/exp/campus-sized.pcap --cores "$c" --speed "$speed" --duration 5s \
      --balancers static,rsspp --json "out/exp/fig12w$p-$c.json" | tee -a "out/exp/fig12w$p.txt"
  done
fi

if [[ $what == uc2 || $what == all ]]; then
  # Dyssect Use Case II: Zipf α 0.7…1.1 over 100 K flows, 8 cores (dyssect: 7
  # working + 1 offloading) at ≈ 90 % of their capacity, 16 shards for static
  # RSS and Dyssect and 128 for RSS++, Dyssect with the balance model (Table
  # IV) and no long timescale, ε = 100 ms; RSS++ also as the paper ran it, its
  # NFs each looking their flows up (`/per-nf`, priced by `calibrate`)
  uc_setup
  { cat out/exp/uc.toml; printf '[run.dyssect]\nobjective = "balance"\nlong_timescale = false\n'; } \
    > out/exp/uc2.toml
  : > out/exp/uc2.txt
  for a in 0.7 0.8 0.9 1.0 1.1; do
    gen "uc2-$a" --flows 100000 --active-flows 100000 --packets 2000000 --alpha "$a" \
      --sizes fixed:1001 --rate 5mpps --tcp-share 1.0 --lifetimes equal
    echo "# alpha $a" | tee -a out/exp/uc2.txt
    "$fs" compare "${sim[@]}" --model out/exp/model-uc.toml --config out/exp/uc2.toml \
      --input "out/exp/uc2-$a.pcap" --cores 8 --offloaders 1 --offload-select heaviest \
      --speed 0.9 --period 100ms --duration 4s \
      --balancers static@16,rsspp@128,rsspp@128/per-nf,dyssect@16 \
      --json "out/exp/uc2-$a.json" | tee -a out/exp/uc2.txt
  done
fi

if [[ $what == uc1 || $what == all ]]; then
  # Dyssect Use Case I: a priority class (0.1 % of the traffic, in the shortest
  # flows) and a regular one, Zipf α 1.1 over 100 K flows; p99.5 latency of the
  # priority class, dyssect (Tables II and III, τ = 1 s, ε = 100 ms) vs rsspp,
  # offered at 50–90 % of the 8 cores' capacity
  # (both scale their cores: RSS++ with its autoscale, Dyssect with Table II,
  # as the paper's Figure 4b compares the cores they use)
  uc_setup
  { cat out/exp/uc.toml; printf '[run.rsspp]\nautoscale = true\n'; } > out/exp/uc1.toml
  gen uc1 --flows 100000 --active-flows 100000 --packets 2000000 --alpha 1.1 \
    --sizes fixed:1001 --rate 5mpps --tcp-share 1.0 --lifetimes equal --priority-traffic 0.001
  : > out/exp/uc1.txt
  for s in 0.5 0.7 0.8 0.9; do
    echo "# speed $s (offered $(awk -v s="$s" 'BEGIN { print 5 * s }') Mpps)" | tee -a out/exp/uc1.txt
    "$fs" compare "${sim[@]}" --model out/exp/model-uc.toml --config out/exp/uc1.toml \
      --input out/exp/uc1.pcap --cores 8 --offloaders 1 --offload-select heaviest \
      --speed "$s" --period 100ms --duration 4s --balancers rsspp@128,dyssect@16 \
      --json "out/exp/uc1-$s.json" | tee -a out/exp/uc1.txt
  done
fi

if [[ $what == tablev || $what == all ]]; then
  # Dyssect Table V: shard migrations over 60 s (the paper's run length) at
  # batch 1, Use Case II's setup, α 0.7, 0.9 and 1.1
  uc_setup
  { cat out/exp/uc.toml; printf '[run.dyssect]\nobjective = "balance"\nlong_timescale = false\n'; } \
    > out/exp/uc2.toml
  : > out/exp/tablev.txt
  for a in 0.7 0.9 1.1; do
    gen "uc2-$a" --flows 100000 --active-flows 100000 --packets 2000000 --alpha "$a" \
      --sizes fixed:1001 --rate 5mpps --tcp-share 1.0 --lifetimes equal
    echo "# alpha $a, 60 s" | tee -a out/exp/tablev.txt
    "$fs" compare "${sim[@]}" --model out/exp/model-uc.toml --config out/exp/uc2.toml \
      --input "out/exp/uc2-$a.pcap" --cores 8 --offloaders 1 --offload-select heaviest \
      --speed 0.9 --period 100ms --duration 60s --balancers rsspp@128,dyssect@16 \
      --json "out/exp/tablev-$a.json" | tee -a out/exp/tablev.txt
  done
fi

if [[ $what == fig1 || $what == all ]]; then
  # Dyssect Fig. 1: one core runs a NAT over 1 M Zipf α 1.1 flows in bursts of
  # 32, in memory, with 1 … 128 shards (each table sized for its share)
  "$fs" bench-shards --json out/exp/fig1.json | tee out/exp/fig1.txt
fi

if [[ $what == fig9 || $what == all ]]; then
  # GranularNF Fig. 9: the load balancer's control component re-placed while
  # traffic flows. 3 s of traffic through the runtime (one worker: with the
  # NIC-model thread that is this machine's two CPUs); from 1 s to
  # 2 s a policy request every 5 ms (a backend down, then up: the Maglev table
  # rebuilt each time); the director (`placement = "auto"`) moves the
  # component to its core and back. Throughput per 100 ms from the report's
  # 10 ms windows, the director's decisions from its log.
  gen fig9 --flows 20000 --packets 600000 --rate 0.2mpps --tcp-share 1.0 --sizes fixed:128 \
    --server 198.18.0.1:443 --lifetimes equal
  {
    printf '[[nf]]\nkind = "lb"\nplacement = "auto"\n'
    printf 'snat = ["192.0.2.10", "192.0.2.11", "192.0.2.12", "192.0.2.13"]\n'
    printf '[[nf.service]]\nvip = "198.18.0.1:443"\n'
    printf 'backends = ["10.1.0.1:8443", "10.1.0.2:8443", "10.1.0.3:8443", "10.1.0.4:8443"]\n'
    for i in $(seq 0 199); do
      printf '[[nf.health]]\nat = "%dms"\nservice = "198.18.0.1:443"\n' $((1000 + 5 * i))
      printf 'backend = "10.1.0.%d:8443"\nup = %s\n' $(( (i / 2) % 4 + 1 )) "$([ $((i % 2)) = 1 ] && echo true || echo false)"
    done
  } > out/exp/fig9.toml
  "$fs" run --config out/exp/fig9.toml --input out/exp/fig9.pcap --speed 1 --workers 1 \
    --json out/exp/fig9.json > out/exp/fig9.txt 2> out/exp/fig9.log
  grep director out/exp/fig9.log | tee -a out/exp/fig9.txt
  python3 - <<'PY' | tee -a out/exp/fig9.txt
import json
r = json.load(open('out/exp/fig9.json'))
w = r['windows']
print('t (s)   Mpps  (100 ms bins)')
for i in range(0, len(w), 10):
    b = w[i:i + 10]
    n = sum(sum(x['packets']) for x in b)
    dt = (b[-1]['t_ns'] - (w[i - 1]['t_ns'] if i else 0)) / 1e9
    print(f"{b[-1]['t_ns'] / 1e9:5.2f}  {n / dt / 1e6:5.3f}")
print('dropped', sum(r['drops'].values()), 'of', r['packets_in'])
PY
  # the same run with the component fixed inline and fixed on its core: the
  # packets' latency is what the placement changes
  for p in inline core auto; do
    sed "s/placement = \"auto\"/placement = \"$p\"/" out/exp/fig9.toml > "out/exp/fig9-$p.toml"
    printf '%-6s ' "$p" | tee -a out/exp/fig9.txt
    "$fs" run --config "out/exp/fig9-$p.toml" --input out/exp/fig9.pcap --speed 1 --workers 1 \
      2>/dev/null | grep -E '^latency +all' | tee -a out/exp/fig9.txt
  done
fi

if [[ $what == fig11 || $what == all ]]; then
  # GranularNF Fig. 11: the IDS's matching inline or on its core over the
  # share of packets scanned × the payload's size, the director's pick in
  # each cell, and a run moved live to it (docs/EXPERIMENTS.md §9)
  "$fs" bench --placement --packets 100000 --rounds 5 --json out/exp/fig11.json \
    | tee out/exp/fig11.txt
fi
