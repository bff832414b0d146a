"""runtimekit/host's PCIe root complex over fixture sysfs trees laid out as Linux lays them out:
``bus/pci/devices/<address>`` a relative link into ``devices/pci<domain>:<bus>/...``; the root is the
first component below ``devices/``, as k8s.io/dynamic-resource-allocation's resolvePCIeRoot reads it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runtimekit.host import pci_device_dir, pcie_root


def function(sys_root: Path, *path: str) -> None:
    """A PCI function at ``devices/<path...>`` and its ``bus/pci/devices`` link (relative, as sysfs's)."""
    directory = sys_root.joinpath("devices", *path)
    directory.mkdir(parents=True)
    link = sys_root / "bus/pci/devices" / path[-1]
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(os.path.relpath(directory, link.parent))


@pytest.fixture
def sys_root(tmp_path: Path) -> Path:
    root = tmp_path / "sys"
    # a GPU below a switch (root port 15:01.0, upstream 16:00.0, downstream 17:00.0), as on a DGX H100
    function(root, "pci0000:15", "0000:15:01.0", "0000:16:00.0", "0000:17:00.0", "0000:18:00.0")
    function(root, "pci0000:15", "0000:15:01.0", "0000:16:00.0", "0000:17:01.0", "0000:1a:00.0")
    function(root, "platform", "soc", "0000:00:00.0")  # not below a host bridge
    return root


@pytest.mark.parametrize(("bus_id", "root"), [
    ("0000:18:00.0", "pci0000:15"),
    ("00000000:1A:00.0", "pci0000:15"),  # NVML's spelling: 8-digit domain, upper case
])
def test_the_root_is_the_host_bridge_the_devices_path_starts_at(sys_root: Path, bus_id: str, root: str) -> None:
    assert pcie_root(bus_id, sys_root) == root


def test_a_gpu_and_the_nic_under_its_switch_share_a_root(sys_root: Path) -> None:
    assert pcie_root("0000:18:00.0", sys_root) == pcie_root("0000:1a:00.0", sys_root)


@pytest.mark.parametrize("bus_id", ["0000:00:00.0", "0000:99:00.0", "not a bus id"])
def test_no_root_below_no_host_bridge_for_an_absent_device_or_a_bad_address(sys_root: Path, bus_id: str) -> None:
    assert pcie_root(bus_id, sys_root) is None


def test_a_sys_root_reached_through_a_symlink_is_read_alike(sys_root: Path, tmp_path: Path) -> None:
    linked = tmp_path / "linked-sys"
    linked.symlink_to(sys_root)
    assert pci_device_dir("0000:18:00.0", linked) is not None
    assert pcie_root("0000:18:00.0", linked) == "pci0000:15"
