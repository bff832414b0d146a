"""The gang controller with DRA: offers read from the driver's ResourceSlices less the devices
ResourceClaims hold, and each pod's demand from the ResourceClaimTemplate its claim is made from
(the fake API server validates slices, claims and templates with the schema of its release)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from runtimekit.kube.gang.gangs import GATE
from tests.gang.gang_rig import LEAF, SPINE, Rig, pinned_node, pod_group_pod, start_rig

DRIVER = "gpu.runtimekit.io"


@pytest.fixture
async def dra(tmp_path: Path) -> AsyncIterator[Rig]:
    started, stop = await start_rig(tmp_path, "offers: {source: resourceslices}\n")
    try:
        yield started
    finally:
        await stop()


def _slice(node: str) -> dict:
    gpus = [{"name": f"gpu-{i}", "attributes": {"type": {"string": "gpu"}, "nvlinkDomain": {"int": 0},
                                                 "resource.kubernetes.io/pcieRoot": {"string": f"pci0000:{i:02x}"}}} for i in range(8)]
    nic = {"name": "nic-mlx5-0", "attributes": {"type": {"string": "nic"}, "resource.kubernetes.io/pcieRoot": {"string": "pci0000:00"}}}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{node}-{DRIVER}"},
            "spec": {"driver": DRIVER, "nodeName": node, "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                     "devices": [*gpus, nic]}}


def _template(name: str, requests: list) -> dict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": name, "namespace": "default"},
            "spec": {"spec": {"devices": {"requests": requests}}}}


def _claim_holding(node: str, gpus: int) -> dict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": f"held-{node}", "namespace": "default"},
            "spec": {"devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": DRIVER, "count": gpus}}]}},
            "status": {"allocation": {"devices": {"results": [
                {"request": "g", "driver": DRIVER, "pool": node, "device": f"gpu-{i}"} for i in range(gpus)]}}}}


def _claiming_pod(gang: str, index: int, size: int, template: str) -> dict:
    pod = pod_group_pod(gang, index, size=size, gpus=0)
    pod["spec"]["resourceClaims"] = [{"name": "accelerators", "resourceClaimTemplateName": template}]
    pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": "accelerators"}]}
    return pod


async def test_offers_from_slices_less_allocated_claims_and_demand_from_the_template(dra: Rig) -> None:
    for i in range(3):
        dra.api.add_node(f"n{i}", {SPINE: "s1", LEAF: "l0"})
        dra.api.add("resourceslices", _slice(f"n{i}"))
    dra.api.add("resourceclaims", _claim_holding("n0", 4))
    dra.api.add("resourceclaimtemplates", _template("eight", [
        {"name": "gpus", "exactly": {"deviceClassName": DRIVER, "count": 8}},
        {"name": "nic", "exactly": {"deviceClassName": "nic.runtimekit.io"}}]))
    for i in range(2):
        dra.api.add_pod(_claiming_pod("g", i, 2, "eight"))
    await dra.settle()
    assert sorted(pinned_node(dra.api.pod("default", f"g-{i}")) for i in range(2)) == ["n1", "n2"], "n0 has 4 of 8 GPUs free"

    dra.api.add_pod(_claiming_pod("h", 0, 1, "eight"))
    await dra.settle()
    assert dra.api.pod("default", "h-0")["spec"]["schedulingGates"] == [{"name": GATE}]
    assert "1 pod of 8 GPUs + 1 NIC" in dra.condition("h-0")["message"]


@pytest.mark.parametrize("requests, message", [
    (None, "ResourceClaimTemplate default/missing not found"),
    ([{"name": "gpus", "exactly": {"deviceClassName": DRIVER, "allocationMode": "All"}}],
     "allocationMode: All has no fixed count"),
    ([{"name": "gpus", "firstAvailable": [{"name": "eight", "deviceClassName": DRIVER, "count": 8}]}],
     "firstAvailable: a prioritized list of GPUs or NICs has no fixed count"),
])
async def test_a_claim_without_a_fixed_device_count_is_refused_by_name(dra: Rig, requests: list | None, message: str) -> None:
    dra.api.add_node("n0", {SPINE: "s1", LEAF: "l0"})
    dra.api.add("resourceslices", _slice("n0"))
    if requests is not None:
        dra.api.add("resourceclaimtemplates", _template("missing", requests))
    dra.api.add_pod(_claiming_pod("g", 0, 1, "missing"))
    await dra.settle()
    condition = dra.condition("g-0")
    assert condition["reason"] == "InvalidGang" and message in condition["message"]
    assert dra.api.pod("default", "g-0")["spec"]["schedulingGates"] == [{"name": GATE}]
