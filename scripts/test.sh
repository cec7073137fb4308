#!/usr/bin/env bash
# The whole test suite, set-up included (see scripts/setup.sh for what it installs).
# Extra arguments go to pytest, e.g. scripts/test.sh -k ssh
# pytest runs twice: the suite in parallel (pytest-xdist, SPECCONSOLE_TEST_WORKERS processes, 4 by
# default: most lab tests wait on hosts, not the CPU; the tests of one shared lab run on one worker,
# see xdist_group in tests/conftest.py), then the few tests marked `serial`, which assert time
# bounds, alone.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
echo "==> ruff check"
.venv/bin/ruff check src tests bench
echo "==> mypy (strict, src/specconsole)"
.venv/bin/mypy
echo "==> import contracts"
.venv/bin/lint-imports --no-cache
workers=${SPECCONSOLE_TEST_WORKERS:-4}
echo "==> pytest, in parallel ($workers workers)"
status=0
.venv/bin/pytest -n "$workers" --dist loadgroup --serial-part=skip "$@" || status=$?
echo "==> pytest, the tests that assert time bounds, alone"
serial=0
.venv/bin/pytest -p no:xdist --serial-part=only "$@" || serial=$?
[ "$serial" -eq 5 ] && serial=0  # the arguments selected none of them
[ "$status" -eq 5 ] && [ "$serial" -eq 0 ] && status=0
[ "$status" -ne 0 ] && exit "$status"
exit "$serial"
