"""Alerts: rules over each host's figures, an engine that fires and resolves them, and their delivery.

- :mod:`specconsole.alert_rules`: the rule language (conditions, figure names, ``[[alerts]]``),
  below ``config.py``, which reads the rules through it
- :mod:`.figures`: the values of the figures a condition reads, from one
  :class:`~specconsole.monitor.HostStatus`
- :mod:`.engine`: :class:`~.engine.AlertEngine`, pure (the clock is passed in); each firing and
  resolving is an :class:`~specconsole.base.events.Event` with ``source="alert"``
- :mod:`.baseline`: ``eval.accept_len``, from the eval results store
- :mod:`.delivery`: tmux ``display-message`` and the webhook (a bounded queue, a background task)

Nothing is imported here.
"""
