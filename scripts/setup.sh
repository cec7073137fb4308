#!/usr/bin/env bash
# Installs what specconsole and its lab need, saying what it installs:
#   apt (Debian): openssh-server (the lab's SSH hosts), tmux (console smoke tests), python3-venv,
#        sudo (the lab's deploy as a non-root user through sudo),
#        prometheus (the Prometheus source's tests scrape the lab's exporter doubles),
#        chromium and fonts-dejavu-core (the browser tests of `specconsole web`),
#        slurmctld, slurmd, slurm-client and munge (the lab's real Slurm cluster, `lab up --slurm`)
#   pip (into ./.venv): exactly requirements/dev.txt, a hashed lock (pip --require-hashes) of
#        specconsole's [dev] extras (textual, asyncssh, httpx, sniffio, prometheus_client, nvidia-ml-py,
#        msgspec, zstandard, docker-systemctl-replacement, torch 2.13.0 CPU, sglang-router 0.3.2 (the
#        real router in front of the lab's replicas, `lab up --serve N`), pytest, pytest-xdist, ruff,
#        mypy, import-linter, uv, textual-serve (`specconsole web`), playwright (drives Debian's chromium in
#        its tests)) and the build backend; then specconsole itself, editable, --no-deps
#   pip (into ./.venv-sglang): exactly requirements/sglang-0.5.23.txt: sglang 0.5.23 with a pinned CPU
#        set, --no-deps (its argument parser and resolution only: the lab's SGLang and the deploy's
#        host check ask it)
# A new release of anything changes nothing here until scripts/upgrade-deps.sh re-resolves the locks.
# Safe to run again: it skips what is already there (each venv remembers the lock it was built from).
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
[ -x /usr/sbin/sshd ] || command -v sshd >/dev/null 2>&1 || need_apt+=(openssh-server)
command -v tmux >/dev/null 2>&1 || need_apt+=(tmux)
command -v sudo >/dev/null 2>&1 || [ -x /usr/bin/sudo ] || need_apt+=(sudo)
command -v ssh-keygen >/dev/null 2>&1 || need_apt+=(openssh-client)
[ -x /usr/bin/prometheus ] || command -v prometheus >/dev/null 2>&1 || need_apt+=(prometheus)
# the browser tests of `specconsole web` (headless, driven by playwright; it downloads no browser)
[ -x /usr/bin/chromium ] || need_apt+=(chromium)
[ -f /usr/share/fonts/truetype/dejavu/DejaVuSansMono.ttf ] || need_apt+=(fonts-dejavu-core)
# the lab's Slurm cluster (a controller, two compute nodes, munge): Debian's Slurm
[ -x /usr/sbin/slurmctld ] || need_apt+=(slurmctld)
[ -x /usr/sbin/slurmd ] || need_apt+=(slurmd)
command -v squeue >/dev/null 2>&1 || need_apt+=(slurm-client)
[ -x /usr/sbin/munged ] || need_apt+=(munge)
PY=${PYTHON:-python3}
"$PY" -c 'import ensurepip, venv' >/dev/null 2>&1 || need_apt+=(python3-venv)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "==> apt-get install ${need_apt[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
else
  echo "==> system packages present (openssh-server, tmux, sudo, prometheus, chromium, slurm, munge)"
fi

"$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || {
  echo "specconsole needs Python >= 3.11 (found $("$PY" --version)); set PYTHON=python3.11" >&2; exit 2; }
# torch 2.13.0's CPU build (+cpu) is not on PyPI: this project's machines keep it in pip's find-links
# folder (/opt/wheels); elsewhere it comes from PyTorch's CPU index
torch_source=()
ls "${PIP_FIND_LINKS:-/opt/wheels}"/torch-2.13.0+cpu-*.whl >/dev/null 2>&1 \
  || torch_source=(--extra-index-url https://download.pytorch.org/whl/cpu)
lock_id() { sha256sum "$@" | sha256sum | cut -c1-16; }
pip_locked() {  # VENV LOCK: exactly what LOCK pins, every file checked against its hash
  local out
  if ! out=$("$1/bin/python" -m pip install -q --disable-pip-version-check --require-hashes --no-deps \
             "${torch_source[@]}" -r "$2" 2>&1); then
    echo "$out" | grep -v "^WARNING: Location" >&2
    echo "setup: pip could not install $2 into $1 (above)" >&2
    exit 1
  fi
  echo "$out" | grep -v "^WARNING: Location" | grep . || true
}

if [ ! -x .venv/bin/python ]; then
  echo "==> creating .venv with $("$PY" --version)"
  "$PY" -m venv .venv
fi
want=$(lock_id requirements/dev.txt)
if [ "$(cat .venv/.specconsole-lock 2>/dev/null)" != "$want" ]; then
  echo "==> pip install --require-hashes -r requirements/dev.txt into .venv ($(grep -cE '^[A-Za-z0-9_.-]+(\[[^]]*\])?==' \
requirements/dev.txt) locked packages), then specconsole itself (-e . --no-deps)"
  rm -f .venv/.specconsole-lock
  pip_locked .venv requirements/dev.txt
  .venv/bin/python -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e . 2>&1 \
    | grep -v "^WARNING: Location" || true
  .venv/bin/python -m pip check >/dev/null || { .venv/bin/python -m pip check >&2; echo "setup: .venv's" \
    "dependencies do not fit together (pip check above); re-resolve with scripts/upgrade-deps.sh --relock" >&2; exit 1; }
  echo "$want" >.venv/.specconsole-lock
else
  echo "==> .venv matches requirements/dev.txt"
  .venv/bin/python -c "import specconsole" 2>/dev/null || .venv/bin/python -m pip install -q \
    --disable-pip-version-check --no-deps --no-build-isolation -e . 2>&1 | grep -v "^WARNING: Location" || true
fi
.venv/bin/python -c "import specconsole, textual, asyncssh, torch" 2>/dev/null || {
  echo "setup: install failed" >&2; exit 1; }
# The tree's bytecode, as `pip install .` writes it for an installed package: an editable install
# writes none, and under PYTHONDONTWRITEBYTECODE=1 every console, lab host and CLI started by the
# tests (and the benches) would compile ~130 modules again (0.1-0.2 CPU-s a start).
.venv/bin/python -m compileall -q -j 0 src >/dev/null

# Real SGLang 0.5.23's argument parser and resolution, for the lab's serving hosts (their SGLang
# launcher runs under it, so the deploy's host check asks real SGLang) and the lab simulator's
# verdict. CPU-only, pinned and hashed (requirements/sglang-0.5.23.txt), installed with --no-deps
# (the full dependency set is CUDA's); see scripts/sglang_venv/ (torchvision stand-in, the lab's CUDA
# double) and ../shared/reference/sglang-on-cpu.md.
SGL=.venv-sglang
SGL_SITE=$SGL/lib/python$("$PY" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')/site-packages
want=$(lock_id requirements/sglang-0.5.23.txt)
if [ "$(cat "$SGL/.specconsole-lock" 2>/dev/null)" != "$want" ] \
    || ! "$SGL/bin/python" -c 'import sglang, torch' >/dev/null 2>&1; then
  echo "==> creating $SGL: pip install --require-hashes --no-deps -r requirements/sglang-0.5.23.txt" \
       "($(grep -cE '^[A-Za-z0-9_.-]+(\[[^]]*\])?==' requirements/sglang-0.5.23.txt) locked packages: sglang 0.5.23, torch CPU)"
  rm -rf "$SGL"
  "$PY" -m venv "$SGL"
  pip_locked "$SGL" requirements/sglang-0.5.23.txt
  echo "$want" >"$SGL/.specconsole-lock"
fi
rm -rf "$SGL_SITE/torchvision"
cp -r scripts/sglang_venv/torchvision scripts/sglang_venv/specconsole_lab_cuda.py \
  scripts/sglang_venv/specconsole_lab_cuda.pth "$SGL_SITE/"
"$SGL/bin/python" -c 'import sglang.srt.server_args' >/dev/null 2>&1 || {
  echo "setup: $SGL cannot import sglang.srt.server_args" >&2; "$SGL/bin/python" -c 'import sglang.srt.server_args'; exit 1; }
echo "==> $SGL: SGLang $("$SGL/bin/python" -c 'import sglang; print(sglang.__version__)' 2>/dev/null) imports"
echo "==> ready: .venv/bin/specconsole"
