"""slices.py: a node's offer from the DRA driver's ResourceSlices (API JSON as kubectl prints it),
less what ResourceClaims hold: NVLink groups from nvlinkDomain, NICs by PCIe root, absent and
tainted devices not free, a held MIG placement taking its whole GPU, only the pool's newest
generation counted, an incomplete pool refused."""

from __future__ import annotations

from typing import Any

import pytest

from runtimekit.kube.gang.offer import Offer, OfferError
from runtimekit.kube.gang.slices import allocated_devices, offer_from_slices

DRIVER = "gpu.runtimekit.io"


def gpu(index: int, domain: int | None, root: str = "pci0", **extra: Any) -> dict[str, Any]:
    attributes: dict[str, Any] = {"type": {"string": "gpu"}, "resource.kubernetes.io/pcieRoot": {"string": root}}
    if domain is not None:
        attributes["nvlinkDomain"] = {"int": domain}
    return {"name": f"gpu-{index}", "attributes": attributes, **extra}


def nic(name: str, root: str | None) -> dict[str, Any]:
    attributes: dict[str, Any] = {"type": {"string": "nic"}}
    if root:
        attributes["resource.kubernetes.io/pcieRoot"] = {"string": root}
    return {"name": f"nic-{name}", "attributes": attributes}


def resource_slice(node: str, devices: list[dict[str, Any]], generation: int = 1, count: int = 1, driver: str = DRIVER) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "spec": {"driver": driver, "nodeName": node, "pool": {"name": node, "generation": generation, "resourceSliceCount": count},
                     "devices": devices}}


def claim(node: str, *devices: str, driver: str = DRIVER) -> dict[str, Any]:
    results = [{"request": "r", "driver": driver, "pool": node, "device": d} for d in devices]
    return {"status": {"allocation": {"devices": {"results": results}}}}


def test_groups_from_nvlink_domains_and_nics_by_root() -> None:
    devices = [gpu(i, 0 if i < 4 else 4) for i in range(8)] + [gpu(8, None)] + [nic("mlx5-0", "pci0"), nic("mlx5-1", None)]
    offer = offer_from_slices([resource_slice("n1", devices)], "n1")
    assert offer == Offer.of({"nvlink-0": 4, "nvlink-4": 4, "alone-gpu-8": 1}, {"pci0": 1, "unknown": 1})


def test_claims_tainted_and_mig_held_devices_are_not_free() -> None:
    devices = [gpu(0, 0), gpu(1, 0, taints=[{"key": "k", "effect": "NoSchedule"}]), gpu(2, 0, taints=[{"key": "k", "effect": "PreferNoSchedule"}]),
               gpu(3, 0), gpu(4, 0), nic("mlx5-0", "pci0")]
    claims = [claim("n1", "gpu-0", "nic-mlx5-0"), claim("other", "gpu-3"), claim("n1", "gpu-3", driver="other.io"),
              claim("n1", "gpu-4-mig-1g10gb-19-0"), {"status": {}}]
    held = allocated_devices(claims, "n1")
    assert held == {"gpu-0", "nic-mlx5-0", "gpu-4-mig-1g10gb-19-0"}
    assert offer_from_slices([resource_slice("n1", devices)], "n1", held) == Offer.of({"nvlink-0": 2})  # gpu-2 and gpu-3


def test_only_the_newest_generation_of_the_node_pool_counts() -> None:
    old = resource_slice("n1", [gpu(0, 0), gpu(1, 0)], generation=1)
    new = resource_slice("n1", [gpu(0, 0)], generation=2)
    other = resource_slice("n2", [gpu(0, 0)], generation=9)
    foreign = resource_slice("n1", [gpu(5, 0)], generation=3, driver="gpu.nvidia.com")
    assert offer_from_slices([old, new, other, foreign], "n1").gpus_free == 1
    assert offer_from_slices([], "n1") == Offer()


def test_an_incomplete_pool_is_refused_to_be_read_again() -> None:
    part = resource_slice("n1", [gpu(0, 0)], generation=2, count=2)
    with pytest.raises(OfferError, match="pool n1 has 1 of its 2 slices at generation 2"):
        offer_from_slices([part], "n1")


@pytest.mark.parametrize(("device", "message"), [
    ({"name": "gpu-0", "attributes": {"nvlinkDomain": {"string": "x"}, "type": {"string": "gpu"}}},
     r"resourceslices\[0\].spec.devices\[0\].attributes.nvlinkDomain: must be \{int: ...\}"),
    ({"name": 7}, r"resourceslices\[0\].spec.devices\[0\].name: must be a non-empty string"),
    ({"name": "gpu-0", "taints": "x"}, r"resourceslices\[0\].spec.devices\[0\].taints: must be a list"),
])
def test_a_malformed_device_names_the_field(device: dict[str, Any], message: str) -> None:
    with pytest.raises(OfferError, match=message):
        offer_from_slices([resource_slice("n1", [device])], "n1")


def test_qualified_attribute_names_are_read_too() -> None:
    device = {"name": "gpu-0", "attributes": {f"{DRIVER}/type": {"string": "gpu"}, f"{DRIVER}/nvlinkDomain": {"int": 2}}}
    assert offer_from_slices([resource_slice("n1", [device])], "n1") == Offer.of({"nvlink-2": 1})
