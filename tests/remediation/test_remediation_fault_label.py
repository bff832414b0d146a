"""The spare-node request names the agent's fault (the alert's ``fault`` label, as the shipped GPU
alerts carry it), and the alert's name when the alert has no such label (node-level alerts)."""

from __future__ import annotations

import pytest

from runtimekit.kube.remediation.actions import replacement_body
from runtimekit.kube.remediation.config import load
from runtimekit.kube.remediation.journal import Action

ACTION = Action(1, "fp1", "2026-01-01T00:00:00Z", "gpu-1", "replace", "pending", 0, "rk-1", None, 0.0, 0.0)
GPU_ALERT = {"alertname": "RuntimeKitGPUReplaceNode", "fault": "row_remap_failure", "node": "gpu-1",
             "action": "replace_node", "gpu": "3", "uuid": "GPU-c"}
NODE_ALERT = {"alertname": "RuntimeKitNodeNVMLDown", "node": "gpu-1", "action": "reboot_node"}


def _fault(labels: dict, **overrides) -> str:
    config = load(None, {"auth.token_file": "t", **overrides})
    return replacement_body(config, ACTION, labels)["fault"]


@pytest.mark.parametrize("labels,fault", [
    (GPU_ALERT, "row_remap_failure"),
    ({**GPU_ALERT, "fault": "gpu_fault_recurring"}, "gpu_fault_recurring"),
    (NODE_ALERT, "RuntimeKitNodeNVMLDown"),  # no fault label: the alert's name
    ({**NODE_ALERT, "fault": ""}, "RuntimeKitNodeNVMLDown"),  # an empty one says nothing either
], ids=["gpu-fault", "recurring", "node-alert", "empty-fault"])
def test_the_request_names_the_fault_else_the_alert(labels, fault):
    assert _fault(labels) == fault


def test_fault_label_names_another_label():
    assert _fault(GPU_ALERT, fault_label="alertname") == "RuntimeKitGPUReplaceNode"
    assert _fault({**NODE_ALERT, "reason": "nvml_down"}, fault_label="reason") == "nvml_down"
