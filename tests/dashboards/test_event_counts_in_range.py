"""The "... in the range" panels count an event counter's first events, evaluated by promtool.

The agent's event counters (XIDs, fault events, health transitions) have no series before the
first event and appear at 1; ``increase()`` alone counts that first step as 0, so a GPU whose one
and only XID 79 came inside the range would show none. Each panel's own query (from the dashboard
JSON, variables filled in) is evaluated by Debian's ``promtool test rules`` on two series: one
that appears at 1 inside the range (one event), one that stood at 2 all along (none).
"""

from __future__ import annotations

import json
import re
import subprocess

import pytest
import yaml

from tests.dashboards.test_dashboard_queries import DASHBOARDS, VARIABLES, substitute

RANGE_MINUTES = 10
COUNTED = ("runtimekit_gpu_xid_errors_total", "runtimekit_gpu_fault_events_total",
           "runtimekit_health_transitions_total")


def in_range_panels() -> list[tuple[str, str]]:
    """(panel title, query) of every panel that counts events of an event counter over the range."""
    found = []
    for path in DASHBOARDS:
        for panel in json.loads(path.read_text(encoding="utf-8"))["panels"]:
            for target in panel.get("targets", []):
                if "$__range" in target["expr"] and any(name in target["expr"] for name in COUNTED):
                    found.append((panel["title"], target["expr"]))
    return found


def test_every_event_counter_has_an_in_range_panel():
    counted = {name for _, expr in in_range_panels() for name in COUNTED if name in expr}
    assert counted == set(COUNTED)


@pytest.mark.parametrize(("title", "expr"), in_range_panels(), ids=lambda value: value[:40])
def test_a_series_that_appears_inside_the_range_counts_its_first_events(title, expr, tmp_path, require_tool):
    counter = next(name for name in COUNTED if name in expr)
    grouped = re.search(r"sum by \(([^)]*)\)", expr).group(1).replace(" ", "").split(",")
    other = {"gpu": "0", "xid": "79", "fault": "gpu_lost", "severity": "critical", "from": "healthy",
             "to": "unhealthy", "node": "n1"}
    fresh = {name: other[name] for name in grouped}
    standing = {**fresh, "gpu": "1"}

    def series(labels: dict[str, str]) -> str:
        return counter + "{" + ",".join(f'{k}="{v}"' for k, v in {**labels, "uuid": "GPU-" + labels["gpu"]}.items()) + "}"

    def sample(labels: dict[str, str], value: int) -> dict:
        return {"labels": "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}", "value": value}

    ends = 2 * RANGE_MINUTES
    test = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [
                # absent until 15m (inside the 10m range that ends at 20m), then one event
                {"series": series(fresh), "values": f"_x15 1x{ends - 15}"},
                # two events long before the range, none in it
                {"series": series(standing), "values": f"2x{ends}"},
            ],
            "promql_expr_test": [{
                "expr": substitute(expr).replace(VARIABLES["$__range"], f"{RANGE_MINUTES}m"),
                "eval_time": f"{ends}m",
                "exp_samples": [sample(fresh, 1), sample(standing, 0)],
            }],
        }],
    }
    path = tmp_path / "panel_test.yml"
    path.write_text(yaml.safe_dump(test), encoding="utf-8")
    done = subprocess.run([require_tool("promtool"), "test", "rules", str(path)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, f"{title}: {done.stdout}{done.stderr}"
