#!/usr/bin/env bash
# The pool test bed: client — router (ECMP over resilient nexthop groups) — N
# flowshift nodes — server, each in its network namespace.
#   bash scripts/pool.sh up [NODES] [PREFIX]     build it and leave it up (prints how to run each node)
#   bash scripts/pool.sh down [NODES] [PREFIX]   delete it
# Needs root (network namespaces); installs iproute2 and ethtool if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cargo run --quiet -p flowshift-netio --example poolbed -- "${1:-up}" "${2:-3}" "${3:-fsp}"
