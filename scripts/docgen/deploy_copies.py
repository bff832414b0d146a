"""The files deploy/kubernetes/monitoring/ holds as copies, because kustomize reads no file outside
a kustomization's folder: the PrometheusRule made from alerts/runtimekit.rules.yml (by
alerts/generate_prometheusrule.py's own ``render``) and the Grafana dashboards of dashboards/grafana/.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MONITORING = Path("deploy/kubernetes/monitoring")
DASHBOARDS = ROOT / "dashboards" / "grafana"


def prometheus_rule() -> str:
    """The PrometheusRule of the alert rules, exactly as alerts/generate_prometheusrule.py makes it."""
    spec = importlib.util.spec_from_file_location("generate_prometheusrule", ROOT / "alerts" / "generate_prometheusrule.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text: str = module.render()
    return text


def dashboards() -> dict[str, str]:
    """Path under the repository -> content, one per dashboard of dashboards/grafana."""
    return {str(MONITORING / "dashboards" / path.name): path.read_text() for path in sorted(DASHBOARDS.glob("*.json"))}
