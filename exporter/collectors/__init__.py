"""One collector per file; each reads NodeState and yields fresh metric families."""
