#!/usr/bin/env bash
# The whole test suite, set-up included (see scripts/setup.sh for what it installs).
# Extra arguments go to pytest, e.g. scripts/test.sh -k ssh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
echo "==> ruff check"
.venv/bin/ruff check src tests bench
echo "==> mypy (strict, src/specconsole)"
.venv/bin/mypy
echo "==> import contracts"
.venv/bin/lint-imports --no-cache
echo "==> pytest"
exec .venv/bin/pytest "$@"
