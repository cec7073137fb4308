"""Everything about SGLang itself, below the sources and actions that use it.

- :mod:`~specconsole.sglang.client`: the HTTP client (``/health``, ``/server_info``,
  ``/metrics``, ``/generate``) and its one-line errors;
- :mod:`~specconsole.sglang.info` and :mod:`~specconsole.sglang.metrics`: reading
  ``/server_info`` and the Prometheus page;
- :mod:`~specconsole.sglang.flags`: the command line as the installed version spells it
  (learnt from its ``--help``);
- :mod:`~specconsole.sglang.unit` and :mod:`~specconsole.sglang.rebase`: reading and writing
  the systemd unit that runs it.
"""

from __future__ import annotations

from specconsole.sglang.client import SglangClient, SglangError
from specconsole.sglang.info import ServerInfo
from specconsole.sglang.metrics import SglangMetrics, parse_metrics

__all__ = ["ServerInfo", "SglangClient", "SglangError", "SglangMetrics", "parse_metrics"]
