"""``specconsole web``: the console in a browser, through textual-serve, behind a per-launch token.

:mod:`.access` decides who may open a session (the token, the Host and Origin headers, the cap on
sessions) and knows nothing of HTTP libraries; :mod:`.server` serves the page and runs one console
process per browser session (read-only unless ``--allow-actions``), logging each session in the
audit log. Imported only by that command: aiohttp and textual-serve never load at console start-up.
"""
