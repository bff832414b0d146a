"""The distance rule (runtimekit.state.distance): NVLink < a shared PCIe switch < the same NUMA
node < the same socket < system; unknown places never match."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from runtimekit.state.distance import links_between
from runtimekit.state.refs import GpuRef
from runtimekit.state.topology import GpuPlace, Link, NicPlace


def gpu(index: int, numa: int | None = 0, socket: int | None = 0, switches: tuple[str, ...] = (),
        nvlinks: dict[int, int] | None = None) -> GpuPlace:
    return GpuPlace(GpuRef(f"GPU-{index}", index), numa, socket, switches, MappingProxyType(nvlinks or {}))


def nic(numa: int | None = 0, socket: int | None = 0, switches: tuple[str, ...] = ()) -> NicPlace:
    return NicPlace("mlx5_0", "0000:1a:00.0", numa, socket, switches)


ROOT, LEAF_A, LEAF_B = "0000:16:00.0", "0000:17:00.0", "0000:18:00.0"


@pytest.mark.parametrize("a,b,expected", [
    (gpu(0, nvlinks={1: 18}), gpu(1, nvlinks={0: 18}), Link("nvlink", 18)),
    # a link read from one end only (the other end's read failed) still counts
    (gpu(0, nvlinks={1: 4}), gpu(1), Link("nvlink", 4)),
    # NVLink wins over everything else, even across sockets
    (gpu(0, 0, 0, nvlinks={1: 2}), gpu(1, 1, 1), Link("nvlink", 2)),
    # a shared switch anywhere on the path (PIX and PXB alike)
    (gpu(0, switches=(ROOT, LEAF_A)), gpu(1, switches=(ROOT, LEAF_B)), Link("pcie_switch")),
    (gpu(0, switches=(LEAF_A,)), gpu(1, switches=(LEAF_A,)), Link("pcie_switch")),
    (gpu(0, switches=(LEAF_A,)), gpu(1, switches=(LEAF_B,)), Link("numa")),
    (gpu(0, 0, 0), gpu(1, 1, 0), Link("socket")),
    (gpu(0, 0, 0), gpu(1, 1, 1), Link("system")),
    # unknown NUMA nodes and sockets never match
    (gpu(0, None, None), gpu(1, None, None), Link("system")),
    (gpu(0, None, 0), gpu(1, None, 0), Link("socket")),
    # GPU and NIC: no NVLink, the PCIe rule
    (gpu(0, switches=(LEAF_A,), nvlinks={1: 18}), nic(switches=(LEAF_A,)), Link("pcie_switch")),
    (gpu(0, 0, 0), nic(0, 0), Link("numa")),
    (gpu(0, 0, 0), nic(1, 1), Link("system")),
], ids=["nvlink", "nvlink-one-end", "nvlink-across-sockets", "pxb", "pix", "other-switch", "socket", "system",
        "unknown", "unknown-numa-same-socket", "nic-pix", "nic-numa", "nic-system"])
def test_links_between(a: GpuPlace, b: GpuPlace | NicPlace, expected: Link) -> None:
    assert links_between(a, b) == expected
    assert links_between(b, a) == expected


def test_more_nvlinks_are_nearer_and_any_nvlink_is_nearer_than_a_switch() -> None:
    few, many = links_between(gpu(0, nvlinks={1: 2}), gpu(1)), links_between(gpu(0, nvlinks={1: 18}), gpu(1))
    switch = links_between(gpu(0, switches=(LEAF_A,)), gpu(1, switches=(LEAF_A,)))
    assert many.cost < few.cost < switch.cost
