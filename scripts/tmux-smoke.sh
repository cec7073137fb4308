#!/usr/bin/env bash
# Drive the demo in a detached tmux session like an operator would (send-keys, capture-pane):
# start it, see both hosts' values, kill training (k), deploy DFLASH window 16 (d), quit (q),
# and check that nothing the demo started is left running.
# Usage: scripts/tmux-smoke.sh [--quick]   (--quick: only check the screen fills, then quit)
set -euo pipefail
cd "$(dirname "$0")/.."
SC=${SPECCONSOLE:-.venv/bin/specconsole}
DIR=$(mktemp -d /tmp/specconsole-smoke.XXXXXX)/demo/state
S=specconsole-smoke-$$
QUICK=${1:-}
say() { echo "[$(date +%H:%M:%S)] smoke: $*"; }
tm() { tmux -L "$S" -f /dev/null "$@"; }  # a tmux server of its own: no other session or option touches it
screen() { tm capture-pane -p -t "$S" -S -60; }
wait_for() {  # wait_for PATTERN SECONDS WHAT
  local deadline=$((SECONDS + $2))
  while [ $SECONDS -lt $deadline ]; do
    if screen | grep -qE "$1"; then say "saw $3"; return 0; fi
    sleep 0.5
  done
  say "FAILED waiting ${2}s for $3 (/$1/); the screen was:"; screen; return 1
}
cleanup() {
  tm kill-server 2>/dev/null || true
  "$SC" lab down --dir "$DIR" >/dev/null 2>&1 || true
}
trap cleanup EXIT

say "starting the demo in tmux session $S (160x48, tmux -L $S), lab in $DIR"
tm new-session -d -s "$S" -x 160 -y 48 "$SC demo --dir $DIR --sglang-startup 1; echo DEMO-EXITED \$?; sleep 600"
wait_for "H200" 120 "GPU rows"
wait_for "gen [0-9.]+k? tok/s" 60 "tokens/s on the serving pane"
wait_for "step [0-9,]+/" 90 "the training step"
if [ "$QUICK" != "--quick" ]; then
  tm send-keys -t "$S" k
  wait_for "Kill training on train\?" 60 "the kill dialog"
  tm send-keys -t "$S" Tab Enter
  wait_for "training job stopped on train" 90 "the job stopped"
  tm send-keys -t "$S" d
  wait_for "DFLASH draft window" 30 "the deploy form"
  wait_for "algorithms from the host|offering" 60 "the algorithm choices"
  for _ in 1 2 3 4; do tm send-keys -t "$S" Enter; sleep 0.3; done  # Enter: field by field, then Plan
  wait_for "Deploy to serve\?" 60 "the deploy plan"
  tm send-keys -t "$S" Tab Enter
  wait_for "deployed: " 120 "the deploy to finish"
  PORT=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['sglang_port'])" "$DIR/state.json")
  INFO=$(python3 -c "import urllib.request,sys; print(urllib.request.urlopen(f'http://127.0.0.1:{sys.argv[1]}/server_info').read().decode())" "$PORT")
  echo "$INFO" | grep -q '"speculative_algorithm": "DFLASH"' || { say "FAILED: /server_info is not DFLASH"; exit 1; }
  echo "$INFO" | grep -q '"speculative_draft_window_size": 16' || { say "FAILED: window is not 16"; exit 1; }
  say "/server_info: DFLASH, draft window 16"
  wait_for "window 16" 30 "the serving pane reporting window 16"
fi
tm send-keys -t "$S" q
wait_for "DEMO-EXITED 0" 60 "the demo to exit cleanly"
sleep 1
LEFT=$(python3 - "$DIR" "$$" <<'PY'
import os, sys
needle, shell = sys.argv[1], int(sys.argv[2])
skip = {os.getpid(), os.getppid(), shell}
for d in os.listdir("/proc"):
    if d.isdigit() and int(d) not in skip:
        try:
            cmd = open(f"/proc/{d}/cmdline", "rb").read().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        if needle in cmd and "tmux" not in cmd:
            print(d, cmd[:160])
PY
)
if [ -n "$LEFT" ]; then
  say "FAILED: processes of the demo are still running:"; echo "$LEFT"; exit 1
fi
say "OK: nothing of the demo is left running"
