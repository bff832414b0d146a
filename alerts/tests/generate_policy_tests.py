"""Writes alerts/tests/runtimekit_policy_test.yml: promtool unit tests of the alerts that route on
the fault policy's labels (action, class, severity) and of the agent's self alerts.

    .venv/bin/python alerts/tests/generate_policy_tests.py

Each case names a fault with the labels the agent exports for it (healthcheck/policy.yaml), so a
firing case checks the routing, and a quiet case checks that a fault of another action, class or
severity does not reach the alert (a contained ECC error never reaches node replacement).
Annotations are rendered here from the rule's templates with the case's labels: `{{ $labels.x }}`,
branches on labels (`{{ if eq $labels.x "v" }}…{{ else if eq $labels.y "w" }}…{{ else }}…{{ end }}`,
not nested) and the pods block; anything else in a template is an error here.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from runtimekit.healthcheck.policy import default_policy  # noqa: E402
from runtimekit.healthcheck.store import unknown_finding  # noqa: E402

RULES = ROOT / "alerts" / "runtimekit.rules.yml"
TARGET = ROOT / "alerts" / "tests" / "runtimekit_policy_test.yml"
TARGET_LABELS = {"job": "runtimekit", "instance": "10.0.4.17:9445", "node": "gpu-node-07"}
GPU = {"gpu": "3", "uuid": "GPU-5a1c9e2b-0d4f-4e1a-9b7c-3f2e8d6a1b03"}
POD = {"namespace": "training", "pod": "llama-ft-0", "container": "trainer", "resource": "nvidia.com/gpu",
       "device_id": GPU["uuid"]}
PODS_BLOCK_START = "Pods on this GPU: {{ range"
PODS_RENDERED = "Pods on this GPU: training/llama-ft-0 (pods and processes: GET http://10.0.4.17:9445/api/v1/health)."

# alert -> (firing fault, quiet fault): faults of the policy, exported with its labels.
GPU_CASES = {
    "RuntimeKitGPURebootNode": ("gpu_lost", "ecc_uncorrectable"),
    "RuntimeKitGPUReplaceNode": ("row_remap_failure", "ecc_contained"),
    "RuntimeKitGPUReplaceNodePlanned": ("remapped_rows_exhausted", "row_remap_failure"),
    "RuntimeKitGPUDrainAndReset": ("ecc_uncorrectable", "ecc_contained"),
    "RuntimeKitGPUResetWhenIdle": ("ecc_contained", "ecc_uncorrectable"),
    "RuntimeKitGPUPowerBrake": ("power_brake", "thermal_slowdown_sustained"),
    "RuntimeKitGPUThermalSlowdown": ("thermal_slowdown_sustained", "power_brake"),
    "RuntimeKitGPUComputeModeProhibited": ("compute_mode_prohibited", "compute_mode_drift"),
    "RuntimeKitGPUComputeModeDrift": ("compute_mode_drift", "compute_mode_prohibited"),
}
EXTRA_GPU_CASES = [  # (alert, fault, fires): more routing checks
    ("RuntimeKitGPUDrainAndReset", "row_remap_pending", False),  # follows XID 94: the same warning
    ("RuntimeKitGPUReplaceNode", "row_remap_pending", False),
    ("RuntimeKitGPURebootNode", "ecc_contained", False),
    ("RuntimeKitGPUResetWhenIdle", "row_remap_pending", True),
    ("RuntimeKitGPUDrainAndReset", "nvlink_recovery_errors", True),
    ("RuntimeKitGPUResetWhenIdle", "nvlink_errors", False),  # a low link-error rate: watched, not alerted
    ("RuntimeKitGPUThermalSlowdown", "thermal_slowdown", False),  # warning level: not alerted
    ("RuntimeKitGPUReplaceNode", "retired_pages_limit", True),
    ("RuntimeKitGPUReplaceNode", "gpu_fault_recurring", True),  # class hardware: repairs that do not last
    ("RuntimeKitGPURebootNode", "gpu_fault_recurring", False),
    ("RuntimeKitGPUDrainAndReset", "gpu_fault_recurring", False),
]
_UNREADABLE = unknown_finding(0, GPU["uuid"], "")
# (alert, fault labels) of faults not in policy.yaml, all firing: the store's health_state_unreadable
# (fixed in code, healthcheck/store.py), and labels no fault of today's policy has, for a
# description's branch that only a future policy entry would take.
OTHER_LABEL_CASES = [
    ("RuntimeKitGPURebootNode", {"fault": _UNREADABLE.fault, "severity": _UNREADABLE.severity,
                                 "action": _UNREADABLE.action, "class": _UNREADABLE.fault_class}),
    ("RuntimeKitGPUReplaceNode", {"fault": "xid_999", "severity": "critical", "action": "replace_node", "class": "bus"}),
]
_COND = r'eq \$labels\.(\w+) "([^"]*)"'
_IF_BLOCK = re.compile(r"\{\{ if " + _COND + r" \}\}(.*?)\{\{ end \}\}", re.S)
_ELSE = re.compile(r"\{\{ else(?: if " + _COND + r")? \}\}")


def series(name: str, labels: dict[str, str]) -> str:
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


def _branch(block: re.Match[str], labels: dict[str, str]) -> str:
    """The text of the first branch of an if / else if / else block whose condition holds."""
    conditions: list[tuple[str, str] | None] = [(block.group(1), block.group(2))]
    body, texts, pos = block.group(3), [], 0
    for other in _ELSE.finditer(body):
        texts.append(body[pos:other.start()])
        conditions.append((other.group(1), other.group(2)) if other.group(1) else None)
        pos = other.end()
    texts.append(body[pos:])
    for condition, text in zip(conditions, texts, strict=True):
        if condition is None or labels.get(condition[0]) == condition[1]:
            return text
    return ""


def render(template: str, labels: dict[str, str]) -> str:
    if PODS_BLOCK_START in template:
        template = template[:template.index(PODS_BLOCK_START)] + PODS_RENDERED
    template = _IF_BLOCK.sub(lambda block: _branch(block, labels), template)
    for key, value in labels.items():
        template = template.replace(f"{{{{ $labels.{key} }}}}", value)
    if "{{ if" in template or "{{ else" in template:
        raise ValueError(f"a template construct this generator cannot render: {template!r}")
    return template


def rules() -> dict[str, dict]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {r["alert"]: r for g in groups for r in g["rules"] if "alert" in r}


def fault_labels(fault: str) -> dict[str, str]:
    p = default_policy().fault(fault)
    return {**TARGET_LABELS, **GPU, "fault": fault, "severity": p.severity, "action": p.action, "class": p.fault_class}


def gpu_case(alert: str, fault: str, fires: bool, rule: dict, labels: dict[str, str] | None = None) -> dict:
    labels = labels or fault_labels(fault)
    wait = {"0s": 1, "1m": 2, "5m": 6, "15m": 16}[rule["for"]]
    case: dict = {
        "name": f"{alert} {'fires on' if fires else 'does not fire on'} {fault} "
                f"({labels['severity']}, action {labels['action']}, class {labels['class']})",
        "interval": "1m",
        "input_series": [
            {"series": series("runtimekit_gpu_fault_active", labels), "values": "1x30"},
            {"series": series("runtimekit_pod_gpu_allocated", {**TARGET_LABELS, **GPU, **POD}), "values": "1x30"},
        ],
        "alert_rule_test": [],
    }
    if not fires:
        case["alert_rule_test"].append({"eval_time": "25m", "alertname": alert, "exp_alerts": []})
        return case
    if wait > 1:
        case["alert_rule_test"].append({"eval_time": f"{wait - 2}m", "alertname": alert, "exp_alerts": []})
    expected = {**labels, "severity": rule["labels"]["severity"], "action": rule["labels"]["action"]}
    case["alert_rule_test"].append({"eval_time": f"{wait}m", "alertname": alert, "exp_alerts": [{
        "exp_labels": expected,
        "exp_annotations": {k: render(v, expected) for k, v in rule["annotations"].items()},
    }]})
    return case


def agent_cases(all_rules: dict[str, dict]) -> list[dict]:
    out = []
    for alert, metric, extra, bad, good, wait in (
        ("RuntimeKitAgentComponentDown", "runtimekit_component_up", {"component": "xid_watcher"}, "0x30", "1x30", 6),
        ("RuntimeKitCollectorFailing", "runtimekit_collector_success", {"collector": "nvlink"}, "0x30", "1x30", 11),
        ("RuntimeKitHealthCheckFailing", "runtimekit_node_fault_active",
         {"fault": "health_check_failed", "severity": "warning", "action": "none", "class": "agent"}, "1x30", "_x30", 6),
    ):
        rule = all_rules[alert]
        labels = {**TARGET_LABELS, **extra}
        expected = {**labels, **rule["labels"]}
        out.append({
            "name": f"{alert} fires", "interval": "1m",
            "input_series": [{"series": series(metric, labels), "values": bad}],
            "alert_rule_test": [
                {"eval_time": f"{wait - 2}m", "alertname": alert, "exp_alerts": []},
                {"eval_time": f"{wait}m", "alertname": alert, "exp_alerts": [{
                    "exp_labels": expected,
                    "exp_annotations": {k: render(v, expected) for k, v in rule["annotations"].items()}}]},
            ],
        })
        out.append({
            "name": f"{alert} does not fire", "interval": "1m",
            "input_series": [{"series": series(metric, labels), "values": good}],
            "alert_rule_test": [{"eval_time": "25m", "alertname": alert, "exp_alerts": []}],
        })
    # Stale samples: the last sample's unix time stops at 60 s; time() runs on.
    rule = all_rules["RuntimeKitAgentSamplesStale"]
    expected = {**TARGET_LABELS, **rule["labels"]}
    description = render(rule["annotations"]["description"], expected).replace(
        "{{ $value | humanizeDuration }}", "3m 0s")
    stamp = series("runtimekit_last_sample_timestamp_seconds", TARGET_LABELS)
    out.append({
        "name": "RuntimeKitAgentSamplesStale fires when the last sample stops advancing", "interval": "1m",
        "input_series": [{"series": stamp, "values": "0+60x1 60x30"}],
        "alert_rule_test": [
            {"eval_time": "2m", "alertname": "RuntimeKitAgentSamplesStale", "exp_alerts": []},
            {"eval_time": "4m", "alertname": "RuntimeKitAgentSamplesStale", "exp_alerts": [{
                "exp_labels": expected,
                "exp_annotations": {**{k: render(v, expected) for k, v in rule["annotations"].items()},
                                    "description": description}}]},
        ],
    })
    out.append({
        "name": "RuntimeKitAgentSamplesStale does not fire while samples advance", "interval": "1m",
        "input_series": [{"series": stamp, "values": "0+60x30"}],
        "alert_rule_test": [{"eval_time": "25m", "alertname": "RuntimeKitAgentSamplesStale", "exp_alerts": []}],
    })
    return out


def document() -> str:
    """The file's text, as ``main`` writes it (the tests compare it with the committed file)."""
    all_rules = rules()
    tests = []
    for alert, (firing, quiet) in GPU_CASES.items():
        tests.append(gpu_case(alert, firing, True, all_rules[alert]))
        tests.append(gpu_case(alert, quiet, False, all_rules[alert]))
    for alert, fault, fires in EXTRA_GPU_CASES:
        tests.append(gpu_case(alert, fault, fires, all_rules[alert]))
    for alert, labels in OTHER_LABEL_CASES:
        tests.append(gpu_case(alert, labels["fault"], True, all_rules[alert], {**TARGET_LABELS, **GPU, **labels}))
    tests += agent_cases(all_rules)
    doc = {"rule_files": ["../runtimekit.rules.yml"], "evaluation_interval": "1m", "tests": tests}
    header = ("# Generated by alerts/tests/generate_policy_tests.py from the rules and healthcheck/policy.yaml:\n"
              "# do not edit; run `promtool test rules alerts/tests/*.yml`.\n")
    return header + yaml.safe_dump(doc, sort_keys=False, width=200, allow_unicode=True)


def main() -> None:
    TARGET.write_text(document())


if __name__ == "__main__":
    main()
