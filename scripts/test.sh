#!/usr/bin/env bash
# The whole test suite, set-up included (see scripts/setup.sh for what it installs).
# Extra arguments go to pytest, e.g. scripts/test.sh -k ssh
# pytest runs twice, side by side: the suite in parallel (pytest-xdist, SPECCONSOLE_TEST_WORKERS
# processes, 4 by default: most lab tests wait on hosts, not the CPU; the tests of one shared lab
# run on one worker, see xdist_group in tests/conftest.py) at idle CPU priority, and the few tests
# marked `serial`, which assert time bounds, one at a time at normal priority.
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
parallel=(.venv/bin/pytest -n "$workers" --dist loadgroup --serial-part=skip "$@")
serial=(.venv/bin/pytest -p no:xdist --serial-part=only "$@")

# An idle cpu cgroup (cpu.idle = 1) for the parallel part: its processes, and every process they
# start in sessions of their own, get the CPU only when the serial tests leave it, so those measure
# their time bounds as on a quiet machine while the rest runs beside them. (chrt --idle or nice would
# not do: the kernel's autogroups give each new session a full share.) Prints its folder, or nothing
# where none can be made (no root, no cgroup cpu controller): the two parts then run one after the other.
idle_cgroup() {
  local base cg
  for base in /sys/fs/cgroup/cpu /sys/fs/cgroup; do
    cg="$base/specconsole-tests.$$"
    [ -w "$base" ] && mkdir "$cg" 2>/dev/null || continue
    if echo 1 >"$cg/cpu.idle" 2>/dev/null; then echo "$cg"; return; fi
    rmdir "$cg"
  done
}

started=$SECONDS
status=0 serial_status=0
cg=$(idle_cgroup)
if [ -n "$cg" ]; then
  serial_log=$(mktemp -t specconsole-serial.XXXXXX)
  echo "==> pytest: the tests that assert time bounds, one at a time, beside the rest ($workers workers, in the idle cgroup $cg)"
  "${serial[@]}" >"$serial_log" 2>&1 &
  serial_pid=$!
  # the cgroup goes once the last process in it has (the shared SGLang judge ends within a second);
  # what the tests left running past 5 s is named, then killed
  trap 'kill "$serial_pid" 2>/dev/null || true; rm -f "$serial_log"
        for _ in $(seq 50); do rmdir "$cg" 2>/dev/null && break; sleep 0.1; done
        if [ -d "$cg" ]; then
          while read -r pid; do echo "==> left running by the tests: $pid $(tr "\0" " " <"/proc/$pid/cmdline" 2>/dev/null | cut -c1-160)"
            kill -9 "$pid" 2>/dev/null || true; done <"$cg/cgroup.procs"
          sleep 0.5; rmdir "$cg" 2>/dev/null || true
        fi' EXIT
  sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$cg" "${parallel[@]}" || status=$?
  wait "$serial_pid" || serial_status=$?
  echo "==> pytest, the tests that assert time bounds (they ran beside the above):"
  cat "$serial_log"
else
  echo "==> pytest, in parallel ($workers workers)"
  "${parallel[@]}" || status=$?
  echo "==> pytest, the tests that assert time bounds, alone"
  "${serial[@]}" || serial_status=$?
fi
echo "==> pytest: $((SECONDS - started)) s wall in all"
[ "$serial_status" -eq 5 ] && serial_status=0  # the arguments selected none of them
[ "$status" -eq 5 ] && [ "$serial_status" -eq 0 ] && status=0
[ "$status" -ne 0 ] && exit "$status"
exit "$serial_status"
