"""Writes deploy/kubernetes/monitoring/prometheusrule.yaml from alerts/runtimekit.rules.yml.

    .venv/bin/python alerts/generate_prometheusrule.py

The PrometheusRule (monitoring.coreos.com/v1, for the Prometheus Operator) carries exactly the
groups of the plain rule file; tests/alerts/test_alert_rules.py checks that they are identical.
"""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "alerts" / "runtimekit.rules.yml"
TARGET = ROOT / "deploy" / "kubernetes" / "monitoring" / "prometheusrule.yaml"


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def render() -> str:
    groups = yaml.safe_load(SOURCE.read_text())["groups"]
    doc = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "runtimekit",
            "namespace": "runtimekit",
            "labels": {"app.kubernetes.io/name": "runtimekit-agent", "app.kubernetes.io/component": "alerts"},
        },
        "spec": {"groups": groups},
    }
    header = "# Generated from alerts/runtimekit.rules.yml by alerts/generate_prometheusrule.py: do not edit.\n"
    return header + yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=120, allow_unicode=True)


if __name__ == "__main__":
    TARGET.write_text(render())
