"""What runs on a managed host rather than in the console: standard library only, and nothing
else from specconsole (an import contract in ``.importlinter`` holds this), since each file is
sent to the host as it is and run by the host's own Python.

- :mod:`.deploy_agent` (uploaded as ``agent.py``), :mod:`.deploy_agent_watch`,
  :mod:`.deploy_agent_router`: the deploy's host agent (``actions/deploy/execute.py``'s ``AGENT_FILES``)
- :mod:`.argcheck`: the preflight's check of a planned ExecStart against the host's own SGLang
  (``actions/deploy/host_check.py`` sends it on standard input; the lab's SGLang judge loads it too)
"""
