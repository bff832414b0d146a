"""Alertmanager webhook receiver that remediates GPU nodes: payload → journal → ladder, with a breaker.

Run it as ``runtimekit remediate serve`` (or ``python -m runtimekit.kube.remediation serve``);
docs/remediation.md describes it. Importing this package loads neither aiohttp's server nor the
``kubernetes`` client: the modules that need them import them.
"""
