#!/usr/bin/env python3
"""Writes the provisionable Grafana dashboards of this folder from one description.

Run it after changing a panel: ``python dashboards/grafana/generate.py``. The JSON files are what
Grafana provisions (``deploy/grafana/``-style provisioning or an import); this script keeps the
variables, layout and datasource wiring the same across dashboards, and
``tests/dashboards/test_dashboard_queries.py`` evaluates every panel's query against a real
Prometheus scraping a simulated agent.

Every dashboard has the datasource as a variable (``$datasource``) and the variables ``node``,
``gpu``, ``namespace`` and ``pod``. ``node`` is the label the scrape configuration adds (the
agent never labels its series with a host name: relabel ``__meta_kubernetes_pod_node_name`` to
``node``, as the README shows).
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
NODE = 'node=~"$node"'
GPU = f'{NODE},gpu=~"$gpu"'
POD = f'{NODE},namespace=~"$namespace",pod=~"$pod"'


def events_in_range(by: str, counter: str) -> str:
    """Events a counter counted in the dashboard's range, by ``by``, its first ones included.

    The agent's event counters (XIDs, fault events, health transitions) have no series until the
    first event, which appears at 1 (or more): ``increase()`` alone never sees that step from
    nothing, so a GPU's first and often only XID 79 would count 0. A series that was absent at the
    range's start adds its first value in the range (``min_over_time``, the counter never falling
    in between but for an agent restart) to what ``increase()`` saw after it.
    """
    window = f"{counter}[$__range]"
    first = f"(min_over_time({window}) unless {counter} offset $__range)"
    return f"sum by ({by}) (increase({window}) + ({first} or increase({window}) * 0))"


# (title, panel type, unit, [(legend, expr), ...])
DASHBOARDS = {
    "runtimekit-cluster": ("Runtime Kit / Cluster overview", [
        ("GPUs by health state", "stat", "none", [("{{state}}", f"sum by (state) (runtimekit_gpu_health{{{NODE}}})")]),
        ("Nodes by health state", "stat", "none", [("{{state}}", f"sum by (state) (runtimekit_node_health{{{NODE}}})")]),
        ("Agents up", "stat", "none", [("{{node}}", f'sum by (node) (up{{job="runtimekit",{NODE}}})')]),
        ("GPU utilization (mean)", "timeseries", "percentunit",
         [("{{node}}", f"avg by (node) (runtimekit_gpu_utilization_ratio{{{NODE}}})")]),
        ("GPU memory used", "timeseries", "bytes", [("{{node}}", f"sum by (node) (runtimekit_gpu_memory_used_bytes{{{NODE}}})")]),
        ("Power draw", "timeseries", "watt", [("{{node}}", f"sum by (node) (runtimekit_gpu_power_draw_watts{{{NODE}}})")]),
        ("Energy per node (rate of the joules counter)", "timeseries", "watt",
         [("{{node}}", f"sum by (node) (rate(runtimekit_gpu_energy_joules_total{{{NODE}}}[$__rate_interval]))")]),
        ("Active faults", "table", "none",
         [("", f"sum by (node, gpu, fault, severity) (runtimekit_gpu_fault_active{{{NODE}}})")]),
        ("XIDs in the range", "table", "none",
         [("", events_in_range("node, gpu, xid", f"runtimekit_gpu_xid_errors_total{{{NODE}}}"))]),
        ("Samples stale (time since the last sample)", "timeseries", "s", [("{{node}}", f"max by (node) (time() - runtimekit_last_sample_timestamp_seconds{{{NODE}}})")]),
        ("Agent component restarts", "timeseries", "short", [("{{node}} {{component}}", f"increase(runtimekit_component_restarts_total{{{NODE}}}[$__rate_interval])")]),
    ]),
    "runtimekit-node": ("Runtime Kit / Node and card detail", [
        ("GPU utilization", "timeseries", "percentunit", [("GPU {{gpu}}", f"runtimekit_gpu_utilization_ratio{{{GPU}}}")]),
        ("Memory used", "timeseries", "bytes", [("GPU {{gpu}}", f"runtimekit_gpu_memory_used_bytes{{{GPU}}}")]),
        ("Memory total", "stat", "bytes", [("GPU {{gpu}}", f"runtimekit_gpu_memory_total_bytes{{{GPU}}}")]),
        ("Temperature", "timeseries", "celsius", [("GPU {{gpu}}", f"runtimekit_gpu_temperature_celsius{{{GPU}}}"),
                                                   ("HBM {{gpu}}", f"runtimekit_gpu_memory_temperature_celsius{{{GPU}}}")]),
        ("Power draw and limit", "timeseries", "watt", [("GPU {{gpu}}", f"runtimekit_gpu_power_draw_watts{{{GPU}}}"),
                                                         ("limit {{gpu}}", f"runtimekit_gpu_power_limit_watts{{{GPU}}}")]),
        ("SM clock", "timeseries", "hertz", [("GPU {{gpu}}", f'runtimekit_gpu_clock_hertz{{{GPU},clock="sm"}}')]),
        ("Clock event reasons active", "table", "none",
         [("", f"sum by (gpu, reason) (runtimekit_gpu_clock_event_active{{{GPU}}}) > 0")]),
        ("PCIe link width (current / max)", "table", "none",
         [("", f"runtimekit_gpu_pcie_link_width{{{GPU}}}"), ("", f"runtimekit_gpu_pcie_link_max_width{{{GPU}}}")]),
        ("PCIe traffic", "timeseries", "Bps",
         [("tx {{gpu}}", f"rate(runtimekit_gpu_pcie_tx_bytes_total{{{GPU}}}[$__rate_interval])"),
          ("rx {{gpu}}", f"rate(runtimekit_gpu_pcie_rx_bytes_total{{{GPU}}}[$__rate_interval])")]),
        ("NVLink traffic per GPU", "timeseries", "Bps",
         [("GPU {{gpu}}", f"sum by (gpu) (rate(runtimekit_gpu_nvlink_tx_bytes_total{{{GPU}}}[$__rate_interval]))")]),
        ("NVLink links up", "stat", "none", [("GPU {{gpu}}", f"sum by (gpu) (runtimekit_gpu_nvlink_up{{{GPU}}})")]),
        ("ECC errors", "table", "none", [("", f"runtimekit_gpu_ecc_errors{{{GPU}}}")]),
        ("Remapped rows pending", "stat", "none", [("GPU {{gpu}}", f"runtimekit_gpu_remapped_rows_pending{{{GPU}}}")]),
    ]),
    "runtimekit-pods": ("Runtime Kit / Pods and processes", [
        ("GPU memory by pod", "timeseries", "bytes",
         [("{{namespace}}/{{pod}}", f"sum by (namespace, pod) (runtimekit_pod_gpu_memory_used_bytes{{{POD}}})")]),
        ("GPU share by pod", "timeseries", "percentunit",
         [("{{namespace}}/{{pod}} GPU {{gpu}}", f"runtimekit_pod_gpu_utilization_ratio{{{POD}}}")]),
        ("Processes by pod", "stat", "none",
         [("{{namespace}}/{{pod}}", f"sum by (namespace, pod) (runtimekit_pod_gpu_processes{{{POD}}})")]),
        ("GPUs allocated with no process (idle allocations)", "table", "none",
         [("", f"runtimekit_pod_gpu_allocated{{{POD}}} unless on (namespace, pod, container, gpu) "
               f"runtimekit_pod_gpu_processes{{{POD}}}")]),
        ("Top processes by GPU memory", "table", "bytes",
         [("", f"topk(20, runtimekit_process_gpu_memory_bytes{{{POD}}})")]),
        ("Process CPU (cores)", "timeseries", "none",
         [("{{pod}} {{pid}}", f"rate(runtimekit_process_cpu_seconds_total{{{POD}}}[$__rate_interval])")]),
        ("Attribution sources up", "stat", "none",
         [("{{node}} {{source}}", f"runtimekit_attribution_source_up{{{NODE}}}")]),
    ]),
    "runtimekit-health": ("Runtime Kit / Health and faults", [
        ("GPU health", "table", "none", [("", f"runtimekit_gpu_health{{{GPU}}} == 1")]),
        ("Node health", "stat", "none", [("{{node}} {{state}}", f"runtimekit_node_health{{{NODE}}} == 1")]),
        ("Active faults", "table", "none", [("", f"runtimekit_gpu_fault_active{{{GPU}}}")]),
        ("Fault events in the range", "table", "none",
         [("", events_in_range("node, gpu, fault, severity", f"runtimekit_gpu_fault_events_total{{{GPU}}}"))]),
        ("Health transitions in the range", "table", "none",
         [("", events_in_range("node, gpu, from, to", f"runtimekit_health_transitions_total{{{GPU}}}"))]),
        ("XID rate", "timeseries", "none",
         [("GPU {{gpu}} XID {{xid}}", f"sum by (gpu, xid) (rate(runtimekit_gpu_xid_errors_total{{{GPU}}}[$__rate_interval]))")]),
        ("Health evaluation CPU", "timeseries", "s", [("{{node}}", f"runtimekit_health_evaluation_seconds{{{NODE}}}")]),
    ]),
    "runtimekit-slices": ("Runtime Kit / Slices: quota against use", [
        ("Slice memory: used against quota", "timeseries", "bytes",
         [("{{slice}} used", f"runtimekit_slice_memory_used_bytes{{{GPU}}}"),
          ("{{slice}} quota", f"runtimekit_slice_memory_quota_bytes{{{GPU}}}")]),
        ("Slice memory used, share of its quota", "timeseries", "percentunit",
         [("{{slice}}", f"runtimekit_slice_memory_used_bytes{{{GPU}}} / on (job, instance, slice) "
                        f"runtimekit_slice_memory_quota_bytes{{{GPU}}}")]),
        ("Slice compute: SM share against its compute share", "timeseries", "percentunit",
         [("{{slice}} SM share", f"runtimekit_slice_utilization_ratio{{{GPU}}}"),
          ("{{slice}} compute share", f"runtimekit_slice_compute_quota_ratio{{{GPU}}}")]),
        ("Slices by health state", "stat", "none", [("{{state}}", f"sum by (state) (runtimekit_slice_health{{{GPU}}})")]),
        ("Slice health", "table", "none", [("", f"runtimekit_slice_health{{{GPU}}} == 1")]),
        ("Slices", "table", "none", [("", f"runtimekit_slice_info{{{GPU}}}")]),
        ("Card slicing modes", "table", "none", [("", f"runtimekit_device_mode{{{GPU}}} == 1")]),
        ("MIG devices", "table", "none", [("", f"runtimekit_gpu_mig_device_info{{{GPU}}}")]),
    ]),
}


def _variable(name: str, query: str) -> dict:
    return {
        "name": name, "label": name, "type": "query", "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "query": {"query": query, "refId": f"{name}-var"}, "definition": query, "refresh": 2,
        "includeAll": True, "multi": True, "allValue": ".*", "current": {"text": "All", "value": "$__all"},
        "sort": 3,
    }


def _panel(index: int, title: str, kind: str, unit: str, targets: list[tuple[str, str]]) -> dict:
    width = 12 if kind in ("timeseries", "table") else 6
    return {
        "id": index + 1,
        "title": title,
        "type": kind,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": {"h": 8, "w": width, "x": (index * width) % 24, "y": (index // 2) * 8},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {},
        "targets": [
            {"refId": chr(ord("A") + i), "expr": expr, "legendFormat": legend, "range": kind == "timeseries",
             "instant": kind != "timeseries", "datasource": {"type": "prometheus", "uid": "${datasource}"}}
            for i, (legend, expr) in enumerate(targets)
        ],
    }


def dashboard(uid: str, title: str, panels: list) -> dict:
    return {
        "uid": uid,
        "title": title,
        "tags": ["runtimekit", "gpu"],
        "timezone": "utc",
        "schemaVersion": 39,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-1h", "to": "now"},
        "templating": {"list": [
            {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus",
             "current": {}, "hide": 0},
            _variable("node", "label_values(runtimekit_gpu_info, node)"),
            _variable("gpu", 'label_values(runtimekit_gpu_info{node=~"$node"}, gpu)'),
            _variable("namespace", 'label_values(runtimekit_pod_gpu_allocated{node=~"$node"}, namespace)'),
            _variable("pod", 'label_values(runtimekit_pod_gpu_allocated{node=~"$node",namespace=~"$namespace"}, pod)'),
        ]},
        "panels": [_panel(i, *panel) for i, panel in enumerate(panels)],
        "annotations": {"list": []},
    }


def main() -> None:
    for uid, (title, panels) in DASHBOARDS.items():
        path = HERE / f"{uid}.json"
        path.write_text(json.dumps(dashboard(uid, title, panels), indent=2) + "\n")
        print(f"wrote {path.relative_to(HERE.parent.parent)}")


if __name__ == "__main__":
    main()
