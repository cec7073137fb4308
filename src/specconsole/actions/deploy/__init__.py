"""Redeploy one SGLang host: preflight, the plan, the host agent that executes it."""
