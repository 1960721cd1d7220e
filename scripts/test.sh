#!/usr/bin/env bash
# The whole test suite: installs what the tests need (tshark), then runs every test
# of the workspace (unit, property, integration, tshark validation, doc tests).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cargo test --workspace --all-targets --quiet
cargo test --workspace --doc --quiet
