#!/usr/bin/env bash
# The network-namespace test bed: client — veth — flowshift — veth — server.
#   bash scripts/netns.sh up [PREFIX]     build it and leave it up (prints how to run flowshift in it)
#   bash scripts/netns.sh down [PREFIX]   delete it
# The same as `flowshift bed up|down [--prefix PREFIX]` with the binary alone.
# Needs root (network namespaces); installs iproute2 and ethtool if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cargo run --quiet --release -p flowshift-cli -- bed "${1:-up}" --prefix "${2:-fs}"
