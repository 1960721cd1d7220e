#!/usr/bin/env bash
# The main job on a generated default: build flowshift and run the default chain
# (stateful firewall → NAT → sequence check) on 2 working cores and 1 offloading
# core over the default generated trace, with the testing balancer moving a random
# shard and changing a random offload ratio every 10 ms while traffic flows. The
# report shows 0 reordered packets and in = out + drops; results go to out/
# (ignored by git). The first build compiles the HiGHS solver (a few minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cargo build --release --quiet --bin flowshift
mkdir -p out
./target/release/flowshift run --workers 2 --offloaders 1 --offload-ratio 0.25 --balancer random --period 10ms --json out/run.json
echo "report written to out/run.json"
