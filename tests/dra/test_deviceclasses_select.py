"""The shipped DeviceClasses (deploy/kubernetes/dra/deviceclasses.yaml) select only devices the
driver's prepare accepts for them, evaluated against devices as the publisher writes them
(kube/dra/devices.py ``inventory``):

- a whole GPU (gpu.runtimekit.io): a GPU without the slicer, or a TDM GPU with all of its compute;
  not a TDM GPU that slices made outside DRA partly hold (prepare refuses it: plan._whole);
- a TDM share (tdm.runtimekit.io): a GPU in mode "tdm" only; not a GPU without the slicer (no mode).

No CEL evaluator for Python is a dependency of this project: ``selects`` translates the few CEL
forms the classes use (``==``, ``&&``, ``||``, ``!``, ``'key' in map``, ``device.attributes[d].x``,
``device.capacity[d].x``, ``quantity.compareTo(quantity('N'))``) into Python and evaluates that; a
form it does not know fails the test, and so does a lookup of an absent attribute or capacity (a
CEL evaluation error, which aborts the allocation in the scheduler).
"""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.utils import parse_quantity

from runtimekit.kube.dra.devices import inventory
from tests.dra.publish_nodes import dra_owner, node, tdm_gpu, tdm_slice, topology

ROOT = Path(__file__).resolve().parents[2]
CLASSES = ROOT / "deploy" / "kubernetes" / "dra" / "deviceclasses.yaml"
DRIVER = "gpu.runtimekit.io"
_DOMAIN = r"\['(?P<domain>[a-z0-9.-]+)'\]"


def expressions() -> dict[str, str]:
    found = {}
    for doc in yaml.safe_load_all(CLASSES.read_text()):
        (selector,) = doc["spec"]["selectors"]
        found[doc["metadata"]["name"]] = selector["cel"]["expression"]
    return found


def _compare(left: Decimal, right: Decimal) -> int:
    return (left > right) - (left < right)


def selects(expression: str, device: dict[str, Any]) -> bool:
    """Whether the CEL ``expression`` selects ``device`` (a ResourceSlice device of DRIVER)."""
    python = expression
    python = re.sub(r"\.compareTo\(quantity\('([^']+)'\)\)", r".compare_to('\1')", python)
    python = re.sub(rf"'(\w+)' in device\.attributes{_DOMAIN}", r"'\1' in attributes['\g<domain>']", python)
    python = re.sub(rf"'(\w+)' in device\.capacity{_DOMAIN}", r"'\1' in capacity['\g<domain>']", python)
    python = re.sub(rf"device\.attributes{_DOMAIN}\.(\w+)", r"attributes['\g<domain>']['\2']", python)
    python = re.sub(rf"device\.capacity{_DOMAIN}\.(\w+)\.compare_to\('([^']+)'\)",
                    r"compare(capacity['\g<domain>']['\2'], quantity('\3'))", python)
    python = python.replace("&&", " and ").replace("||", " or ").replace("device.driver", "driver")
    python = re.sub(r"!(?!=)", " not ", python)
    assert "device." not in python and "compare_to" not in python, f"a CEL form this test cannot evaluate: {python}"
    attributes = {DRIVER: {name: next(iter(value.values())) for name, value in device.get("attributes", {}).items()
                           if "/" not in name}}
    capacity = {DRIVER: {name: parse_quantity(value["value"]) for name, value in device.get("capacity", {}).items()}}
    result = eval(python, {"__builtins__": {}}, {  # noqa: S307 - the shipped manifest, translated above
        "driver": DRIVER, "attributes": attributes, "capacity": capacity, "compare": _compare, "quantity": parse_quantity})
    assert isinstance(result, bool), python
    return result


def whole_tdm_gpu() -> dict[str, Any]:
    (gpu,) = inventory(node(tdm_gpu(0)), topology([0]), []).gpus
    return gpu.devices[0]


def tdm_gpu_partly_held_outside_dra() -> dict[str, Any]:
    (gpu,) = inventory(node(tdm_gpu(0)), topology([0]), [tdm_slice(0, "notebook-alice", 30, 8 << 30)]).gpus
    assert gpu.devices[0]["capacity"]["compute"]["value"] == "70"
    return gpu.devices[0]


def tdm_gpu_with_a_dra_share() -> dict[str, Any]:
    (gpu,) = inventory(node(tdm_gpu(0)), topology([0]), [tdm_slice(0, dra_owner(), 30, 8 << 30)]).gpus
    return gpu.devices[0]  # the scheduler counts what DRA's shares consume: published whole


def gpu_without_slicer() -> dict[str, Any]:
    gpu = tdm_gpu(0)
    gpu.mode = ""
    gpu.ClearField("capacity")
    slicer_off = node(gpu)
    slicer_off.slicer_enabled = False
    (found,) = inventory(slicer_off, topology([0]), []).gpus
    return found.devices[0]


@pytest.mark.parametrize("device_class,device,selected", [
    ("gpu.runtimekit.io", whole_tdm_gpu(), True),
    ("gpu.runtimekit.io", tdm_gpu_with_a_dra_share(), True),
    ("gpu.runtimekit.io", gpu_without_slicer(), True),
    ("gpu.runtimekit.io", tdm_gpu_partly_held_outside_dra(), False),
    ("tdm.runtimekit.io", whole_tdm_gpu(), True),
    ("tdm.runtimekit.io", tdm_gpu_partly_held_outside_dra(), True),
    ("tdm.runtimekit.io", gpu_without_slicer(), False),
], ids=["gpu-whole-tdm", "gpu-dra-share", "gpu-no-slicer", "gpu-held-outside", "tdm-whole", "tdm-held-outside",
        "tdm-no-slicer"])
def test_a_class_selects_only_devices_prepare_accepts_for_it(device_class: str, device: dict[str, Any],
                                                            selected: bool) -> None:
    assert selects(expressions()[device_class], device) is selected
