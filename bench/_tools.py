"""What the bench scripts share: checking for the programs they drive."""

from __future__ import annotations

import shutil
import sys


def missing(tool: str, install: str = "") -> bool:
    """True, after saying so on stderr, when ``tool`` is not on PATH (``install``: how to get it)."""
    if shutil.which(tool):
        return False
    print(f"bench: needs {tool}" + (f" ({install})" if install else ""), file=sys.stderr)
    return True
