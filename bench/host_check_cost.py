"""What SGLang's own check costs a deploy: a cold ``PYTHON - ARGS`` check (what preflight runs on a
serving host: the unit's interpreter imports SGLang) against the lab's warm judge (one process that
imported SGLang once and forks per check), on the same command lines, in one process.

    .venv/bin/python bench/host_check_cost.py [--runs 3]

Prints wall and CPU seconds per check (CPU: the child processes' user+sys) and the ratio.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from specconsole.lab.doubles import sglang_judge
from specconsole.lab.parts.environment import judge_env, write_draft_model, write_target_model

ARGCHECK = Path(sglang_judge.__file__).resolve().parents[2] / "remote" / "argcheck.py"


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    python = sglang_judge.sglang_python()
    if python is None:
        print(sglang_judge.missing_message(), file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        target, draft = write_target_model(root / "target"), write_draft_model(root / "draft")
        argv = ["--model-path", str(target), "--tp-size", "2", "--speculative-algorithm", "DFLASH",
                "--speculative-draft-model-path", str(draft), "--speculative-draft-window-size", "64"]
        env = {**os.environ, **judge_env(root / "hf-home")}
        cold_wall, cold_cpu = [], []
        for _ in range(args.runs):
            t0, c0 = time.monotonic(), children_cpu()
            out = subprocess.run([python, "-", *argv], input=ARGCHECK.read_text(), capture_output=True, text=True,
                                 env=env, check=False).stdout
            cold_wall.append(time.monotonic() - t0)
            cold_cpu.append(children_cpu() - c0)
            assert '"verdict": "accepted"' in out, out[-500:]
        sock = str(root / "judge.sock")
        t0, c0 = time.monotonic(), children_cpu()
        judge = subprocess.Popen([python, sglang_judge.__file__, "serve", sock], env=env,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while not os.path.exists(sock):
            time.sleep(0.05)
        warm_up = time.monotonic() - t0
        os.environ[sglang_judge.SOCKET_ENV] = sock
        warm_wall = []
        for _ in range(args.runs * 3):
            t0 = time.monotonic()
            verdict = sglang_judge.ask(argv)
            warm_wall.append(time.monotonic() - t0)
            assert verdict["verdict"] == "accepted", verdict
        judge.terminate()
        judge.wait()
    cw, cc, ww = statistics.median(cold_wall), statistics.median(cold_cpu), statistics.median(warm_wall)
    print(f"cold check (PYTHON - ARGS, imports SGLang): median {cw:.2f}s wall, {cc:.2f}s CPU over {args.runs} runs")
    print(f"warm judge: start-up {warm_up:.2f}s once, then median {ww * 1000:.0f} ms a check over {len(warm_wall)}")
    print(f"ratio cold/warm (wall): {cw / ww:.0f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
