#!/usr/bin/env bash
# The pool test bed: client — router (ECMP over resilient nexthop groups) — N
# flowshift nodes — server, each in its network namespace.
#   bash scripts/pool.sh up [NODES] [PREFIX]     build it and leave it up (prints how to run each node)
#   bash scripts/pool.sh down [NODES] [PREFIX]   delete it
# The same as `flowshift bed up|down --pool NODES [--prefix PREFIX]` with the binary alone.
# Needs root (network namespaces); installs iproute2 and ethtool if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cargo run --quiet --release -p flowshift-cli -- bed "${1:-up}" --pool "${2:-3}" --prefix "${3:-fsp}"
