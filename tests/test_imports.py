"""Heavy packages are imported only where used: never when the console or a headless command starts."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("torch", "sglang", "numpy")


def loaded_after(code: str) -> set[str]:
    probe = f"{code}\nimport sys\nprint(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})))"
    res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    return set(res.stdout.split())


def test_console_start_up_imports_no_heavy_package() -> None:
    assert loaded_after("import specconsole.cli as c; c.build_parser(); import specconsole.ui.console.app") == set()


def test_headless_modules_import_no_heavy_package() -> None:
    code = ("import specconsole.monitor, specconsole.report, specconsole.actions.kill.training, "
            "specconsole.actions.deploy.preflight, "
            "specconsole.eval.cli, specconsole.sources.gpu, specconsole.sources.sglang, specconsole.sources.training, "
            "specconsole.sglang.flags, specconsole.sglang.unit, specconsole.sglang.rebase")
    assert loaded_after(code) == set()

