#!/usr/bin/env bash
# Re-resolves the lock files in requirements/ (hashed, for pip --require-hashes) with uv, rebuilds
# .venv (and .venv-sglang) from them through scripts/setup.sh, and runs the whole suite.
#
#   scripts/upgrade-deps.sh                 every dependency to its newest release pyproject.toml allows
#   scripts/upgrade-deps.sh PKG [PKG...]    only these to their newest (the rest keep their pins)
#   scripts/upgrade-deps.sh --relock        no upgrade: re-resolve after editing pyproject.toml's lists
#                                           (new pins only where the old ones no longer fit)
#   --no-test                               skip the suite (it runs by default)
#
# The locks, all for CPython 3.11 on Linux x86_64 with glibc >= 2.36 (Debian 12: what CI and the lab run):
#   requirements/dev.txt      .venv: specconsole[dev] (the lab, the test tools) + requirements/build.in
#   requirements/console.txt  the console alone, the same pins (pip install --require-hashes -r it, then
#                             pip install --no-deps .), for an operator's machine
#   requirements/sglang-0.5.23.txt  .venv-sglang: sglang 0.5.23 --no-deps + its pinned CPU set
#                             (scripts/sglang_venv/requirements-0.5.23.txt; changing SGLang's version
#                             is editing that list, not an upgrade)
# torch 2.13.0 is the CPU build (+cpu), found in $TORCH_WHEELS (default /opt/wheels, where this
# project's machines keep it) or PyTorch's CPU index (TORCH_WHEELS=https://download.pytorch.org/whl/cpu).
# Afterwards: review `git diff requirements/`, commit the lock files with the suite's result.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=upgrade test=1 packages=()
for arg in "$@"; do
  case "$arg" in
    --relock) mode=relock ;;
    --no-test) test=0 ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
    -*) echo "upgrade-deps: unknown option $arg (see --help)" >&2; exit 2 ;;
    *) packages+=("$arg") ;;
  esac
done
[ -x .venv/bin/uv ] || { echo "upgrade-deps: .venv/bin/uv is missing: run scripts/setup.sh first" >&2; exit 2; }
TORCH_WHEELS=${TORCH_WHEELS:-/opt/wheels}
case "$TORCH_WHEELS" in
  http*) ;;
  *) ls "$TORCH_WHEELS"/torch-2.13.0+cpu-*.whl >/dev/null 2>&1 || {
       echo "upgrade-deps: no torch-2.13.0+cpu wheel in $TORCH_WHEELS: set TORCH_WHEELS to a folder holding it," \
            "or to https://download.pytorch.org/whl/cpu" >&2; exit 2; } ;;
esac

upgrade=()
if [ "$mode" = upgrade ]; then
  if [ ${#packages[@]} -eq 0 ]; then upgrade=(--upgrade)
  else for p in "${packages[@]}"; do upgrade+=(--upgrade-package "$p"); done; fi
fi
# uv is a resolver only: it does not read pip's configuration, so where torch's CPU build lives is said here
compile=(.venv/bin/uv pip compile --quiet --generate-hashes --python-version 3.11
         --python-platform x86_64-manylinux_2_36 --find-links "$TORCH_WHEELS" --no-strip-extras
         --custom-compile-command "scripts/upgrade-deps.sh")
before=$(mktemp -d)
cp requirements/*.txt "$before/" 2>/dev/null || true

echo "==> resolving requirements/dev.txt (${upgrade[*]:-keeping the current pins})"
"${compile[@]}" "${upgrade[@]}" pyproject.toml requirements/build.in --extra dev -o requirements/dev.txt
echo "==> resolving requirements/console.txt (the console alone, pins from dev.txt)"
"${compile[@]}" pyproject.toml -c requirements/dev.txt -o requirements/console.txt
echo "==> resolving requirements/sglang-0.5.23.txt (sglang 0.5.23 --no-deps + its pinned CPU set)"
"${compile[@]}" --no-deps scripts/sglang_venv/requirements-0.5.23.txt scripts/sglang_venv/sglang.in \
  -o requirements/sglang-0.5.23.txt

# uv 0.13 leaves out the hash of a find-links wheel when it resolves --no-deps (torch's CPU build
# above): every pin must carry one, so such a pin gets the sha256 of its wheel in $TORCH_WHEELS
.venv/bin/python - "$TORCH_WHEELS" requirements/*.txt <<'PY'
import hashlib, pathlib, re, sys
wheels, *locks = sys.argv[1:]
for lock in map(pathlib.Path, locks):
    lines, out = lock.read_text().splitlines(), []
    for i, line in enumerate(lines):
        pin = re.fullmatch(r"([A-Za-z0-9_.-]+)==(\S+)", line)
        if pin and not (i + 1 < len(lines) and lines[i + 1].lstrip().startswith("--hash=")):
            name, version = pin[1].replace("-", "_"), pin[2]
            files = sorted(pathlib.Path(wheels).glob(f"{name}-{version}-*.whl")) if "://" not in wheels else []
            if not files:
                sys.exit(f"upgrade-deps: {lock}: {line} has no hash and no wheel in {wheels} to take it from")
            line += " \\\n" + " \\\n".join(f"    --hash=sha256:{hashlib.sha256(f.read_bytes()).hexdigest()}"
                                       for f in files)
        out.append(line)
    lock.write_text("\n".join(out) + "\n")
PY

echo "==> what changed"
pins() { grep -E '^[A-Za-z0-9_.-]+(\[[^]]*\])?==' "$1" 2>/dev/null | sed 's/ .*//' | sort; }
changed=0
for f in requirements/*.txt; do
  delta=$(diff <(pins "$before/$(basename "$f")") <(pins "$f") | sed -n 's/^\([<>]\) /\1 /p') || true
  [ -z "$delta" ] && continue
  changed=1
  echo "  $(basename "$f") (< before, > after):"
  echo "$delta" | sed 's/^/    /'
done
[ "$changed" -eq 0 ] && echo "  nothing: every pin is as it was"
rm -rf "$before"

echo "==> rebuilding .venv and .venv-sglang from the new locks (scripts/setup.sh)"
bash scripts/setup.sh
if [ "$test" -eq 1 ]; then
  echo "==> the whole suite on the new locks (scripts/test.sh)"
  bash scripts/test.sh
fi
echo "==> done: review git diff requirements/ and commit the lock files"
