"""The alert-rule language, below ``config.py`` (which reads ``[[alerts]]`` and ``[alerting]``
through :mod:`.rules`); :mod:`specconsole.alerts` runs the rules.

- :mod:`.expr`: the condition language (a checked Python expression subset, walked, never ``eval``'d)
- :mod:`.names`: the figures a condition may read (their names; ``alerts/figures.py`` gives their values)
- :mod:`.rules`: ``[[alerts]]``, ``[alerting]`` and the shipped rules
"""
