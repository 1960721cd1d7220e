#!/usr/bin/env bash
# The main job on a generated default: build flowshift, generate the default trace
# into out/ (ignored by git) and summarise it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cargo build --release --quiet --bin flowshift
mkdir -p out
./target/release/flowshift gen -o out/default.pcap
./target/release/flowshift trace stats out/default.pcap
