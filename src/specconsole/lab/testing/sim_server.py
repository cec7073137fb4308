"""Start the lab's SGLang simulator as a subprocess on a free loopback port (tests and bench).

``with SimServer(["--speculative-algorithm", "NEXTN"], step_ms=1) as sim: sim.url`` starts
``python -m specconsole.lab.doubles.sglang_sim serve --model-path ... --host 127.0.0.1 --port P ARGS``,
waits for ``/health`` 200 and stops it (SIGTERM, then SIGKILL) on exit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType

import httpx

from specconsole.lab.parts.state import free_port


def dflash_draft_dir(root: str | os.PathLike[str], block_size: int = 16) -> str:
    """A draft-model folder the simulator accepts for DFLASH (``config.json`` with ``block_size``)."""
    d = Path(root) / f"dflash-b{block_size}"
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps({"architectures": ["DFlashDraftModel"], "block_size": block_size,
                                               "model_type": "qwen3"}))
    return str(d)


class SimServer:
    def __init__(self, args: list[str] | None = None, *, step_ms: float = 1.0, startup_s: float = 0.05,
                 model_path: str = "Qwen/Qwen3-8B", ready_timeout_s: float = 20.0) -> None:
        self.args = list(args or [])
        self.step_ms = step_ms
        self.startup_s = startup_s
        self.model_path = model_path
        self.ready_timeout_s = ready_timeout_s
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: tempfile._TemporaryFileWrapper[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> SimServer:
        self.port = free_port()
        env = dict(os.environ, SGLANG_SIM_STARTUP_S=str(self.startup_s), SGLANG_SIM_STEP_MS=str(self.step_ms),
                   SGLANG_SIM_LOAD="0")
        env.pop("SGLANG_SIM_FAIL", None)
        cmd = [sys.executable, "-m", "specconsole.lab.doubles.sglang_sim", "serve", "--model-path", self.model_path,
               "--host", "127.0.0.1", "--port", str(self.port), *self.args]
        self._log = tempfile.NamedTemporaryFile(prefix="sglang-sim-", suffix=".log")  # noqa: SIM115
        self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=self._log)
        deadline = time.monotonic() + self.ready_timeout_s
        with httpx.Client(trust_env=False, timeout=1.0) as c:
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"simulator exited {self.proc.returncode}: {self.log_tail()}")
                try:
                    if c.get(f"{self.url}/health").status_code == 200:
                        return self
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"simulator not healthy after {self.ready_timeout_s:g}s: {self.log_tail()}")
                time.sleep(0.03)

    def log_tail(self, n: int = 5) -> str:
        if self._log is None:
            return ""
        self._log.flush()
        lines = Path(self._log.name).read_text(errors="replace").splitlines()
        return " | ".join(lines[-n:])

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> SimServer:
        return self.start()

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
