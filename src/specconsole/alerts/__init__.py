"""Alerts: rules over each host's figures, an engine that fires and resolves them, and their delivery.

- :mod:`.expr`: the condition language (a checked Python expression subset, walked, never ``eval``'d)
- :mod:`.names`, :mod:`.figures`: the figures a condition reads (their names; their values) from
  one :class:`~specconsole.monitor.HostStatus`
- :mod:`.rules`: ``[[alerts]]``, ``[alerting]`` and the shipped rules
- :mod:`.engine`: :class:`~.engine.AlertEngine`, pure (the clock is passed in); each firing and
  resolving is an :class:`~specconsole.events.Event` with ``source="alert"``
- :mod:`.baseline`: ``eval.accept_len``, from the eval results store
- :mod:`.delivery`: tmux ``display-message`` and the webhook (a bounded queue, a background task)

Nothing is imported here: ``config.py`` imports :mod:`.rules`, which the engine's own imports
of the config would otherwise make circular.
"""
