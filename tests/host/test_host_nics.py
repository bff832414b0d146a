"""runtimekit/host over a fixture sysfs tree: RDMA NICs read one at a time, and NUMA nodes one at a
time, so that one unreadable file costs one fact of one device; strict (raising) without ``errors``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runtimekit.host import RdmaNic, numa_nodes, rdma_nics

BAD = b"\xff\xfe400 Gb/sec\n"  # not UTF-8


def nic(root: Path, name: str, bus: str, numa: bytes, rate: bytes) -> None:
    """``class/infiniband/<name>`` with ``device`` -> the PCI function ``bus`` and port 1's rate."""
    function = root / "devices/pci0000:00" / bus
    function.mkdir(parents=True)
    (function / "numa_node").write_bytes(numa)
    ib = root / "class/infiniband" / name
    (ib / "ports/1").mkdir(parents=True)
    (ib / "ports/1/rate").write_bytes(rate)
    os.symlink(os.path.relpath(function, ib), ib / "device")


@pytest.fixture
def sys_root(tmp_path: Path) -> Path:
    nic(tmp_path, "mlx5_0", "0000:1a:00.0", b"0\n", b"400 Gb/sec (4X NDR)\n")
    nic(tmp_path, "mlx5_1", "0000:9a:00.0", b"1\n", BAD)
    nic(tmp_path, "mlx5_2", "0000:ba:00.0", BAD, b"200 Gb/sec (4X HDR)\n")
    for node, cpus in ((0, b"0-3\n"), (1, BAD), (2, b"8-11\n")):
        (tmp_path / f"devices/system/node/node{node}").mkdir(parents=True)
        (tmp_path / f"devices/system/node/node{node}/cpulist").write_bytes(cpus)
    return tmp_path


def test_one_nics_bad_rate_and_anothers_bad_numa_node_cost_those_facts_only(sys_root: Path) -> None:
    errors: list[str] = []
    assert rdma_nics(sys_root, errors) == [
        RdmaNic("mlx5_0", "0000:1a:00.0", 0, 400),
        RdmaNic("mlx5_1", "0000:9a:00.0", 1, 0),
        RdmaNic("mlx5_2", "0000:ba:00.0", None, 200),
    ]
    assert [error.split(" failed: ")[0] for error in errors] == [
        f"NIC mlx5_1: reading {sys_root}/class/infiniband/mlx5_1/ports/1/rate",
        f"NIC mlx5_2: reading {sys_root}/devices/pci0000:00/0000:ba:00.0/numa_node",
    ]
    assert all("'utf-8' codec can't decode" in error for error in errors)


def test_a_nic_whose_device_link_is_a_loop_is_left_out_and_said(sys_root: Path) -> None:
    loop = sys_root / "class/infiniband/mlx5_9"
    loop.mkdir()
    os.symlink("device", loop / "device")
    errors: list[str] = []
    assert [found.name for found in rdma_nics(sys_root, errors)] == ["mlx5_0", "mlx5_1", "mlx5_2"]
    assert len(errors) == 3 and errors[-1].startswith(f"NIC mlx5_9: reading {loop}/device failed:")


def test_one_unreadable_numa_node_is_left_out_and_said(sys_root: Path) -> None:
    errors: list[str] = []
    assert [(node.id, node.cpus) for node in numa_nodes(sys_root, errors)] == [(0, "0-3"), (2, "8-11")]
    assert len(errors) == 1 and errors[0].startswith(f"NUMA node 1: reading {sys_root}/devices/system/node/node1/cpulist failed:")


def test_without_errors_the_first_failure_is_raised(sys_root: Path) -> None:
    with pytest.raises(UnicodeDecodeError):
        rdma_nics(sys_root)
    with pytest.raises(UnicodeDecodeError):
        numa_nodes(sys_root)
