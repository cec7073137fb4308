"""A dependency's warnings stay off the operator's terminal; ``SPECCONSOLE_DEBUG=1`` shows them.

A library release can start warning at import (cryptography 51 made asyncssh 2.24 print ten
``CryptographyDeprecationWarning: DSA is deprecated`` lines on every command), and each of those
lines lands between the operator and the one line the CLI says. The entry point
(:func:`specconsole.launch.main`) calls :func:`quiet` first: the warnings a library raises about
itself (deprecations, future changes, its own ``UserWarning`` subclasses such as cryptography's)
are ignored by category *and* by the module they are attributed to, so specconsole's own
warnings, and any other category, still show. With ``SPECCONSOLE_DEBUG=1`` nothing is filtered
and every warning is shown once per place (Python's ``default`` action).
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Mapping

#: The environment variable that shows every warning.
DEBUG_ENV = "SPECCONSOLE_DEBUG"

#: The libraries the console and its CLI import (top-level module names). A warning is attributed
#: to the module whose code called ``warnings.warn`` at the caller's ``stacklevel``: asyncssh's
#: own modules for cryptography's deprecation of DSA, hence both names.
DEPENDENCIES = (
    "anyio", "asyncssh", "cryptography", "h11", "httpcore", "httpx", "idna", "markdown_it", "msgspec",
    "platformdirs", "prometheus_client", "pygments", "pynvml", "rich", "sniffio", "textual", "torch",
    "typing_extensions", "zstandard",
)

#: What a library says about itself: its deprecations and coming changes, and ``UserWarning``, the
#: base of libraries' own warning classes (``cryptography.utils.CryptographyDeprecationWarning``).
CATEGORIES: tuple[type[Warning], ...] = (DeprecationWarning, PendingDeprecationWarning, FutureWarning, UserWarning)


def module_pattern(names: tuple[str, ...] = DEPENDENCIES) -> str:
    """The regular expression of ``names`` and their submodules (``asyncssh``, ``asyncssh.crypto.dsa``)."""
    return rf"(?:{'|'.join(re.escape(n) for n in names)})(?:\..*)?\Z"


def quiet(environ: Mapping[str, str] = os.environ) -> bool:
    """Filter the dependencies' warnings, unless ``SPECCONSOLE_DEBUG=1`` asks to see every warning
    (then the ``default`` action shows them, deprecations included). True when filtered."""
    if environ.get(DEBUG_ENV) == "1":
        warnings.simplefilter("default")
        return False
    pattern = module_pattern()
    for category in CATEGORIES:
        warnings.filterwarnings("ignore", category=category, module=pattern)
    return True
