"""Roll a deploy over the replicas behind a router: canary, gate, the rest."""
