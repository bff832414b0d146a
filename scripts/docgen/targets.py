"""Every generated file: its path under the repository and the function that makes its content."""

from __future__ import annotations

from collections.abc import Callable

from . import api_reference, config_reference, deploy_copies, metrics_reference


def targets() -> dict[str, Callable[[], str]]:
    """Path -> renderer, in the order scripts/gen-docs writes them (the metrics reference runs an
    agent on the simulated node, about ten seconds)."""
    found: dict[str, Callable[[], str]] = {
        "docs/reference/configuration.md": config_reference.render,
        "docs/reference/api.md": api_reference.render,
        "docs/reference/metrics.md": metrics_reference.render,
        str(deploy_copies.MONITORING / "prometheusrule.yaml"): deploy_copies.prometheus_rule,
    }
    for path, text in deploy_copies.dashboards().items():
        found[path] = lambda text=text: text  # type: ignore[misc]
    return found
