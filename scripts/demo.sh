#!/usr/bin/env bash
# Set up (see scripts/setup.sh for what it installs) and start the demo: two SSH hosts on
# loopback, a real torchrun training job, SGLang (simulated) under systemctl, and the console
# on top. Quitting the console (q) stops everything the demo started.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/specconsole demo "$@"
