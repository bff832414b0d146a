"""The topology's state types (runtimekit/state/topology.py): links compare by cost, never by the
alphabetical order of their level names; NIC links are listed in one order by every API."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from runtimekit.state.refs import GpuRef
from runtimekit.state.topology import GpuPlace, Link, NicPlace, Topology


def test_links_do_not_order_by_their_fields() -> None:
    """Declared order=True, Link("numa") < Link("nvlink", 18) held ("numa" < "nvlink") and more links
    sorted as farther; nearness is ``cost`` only."""
    with pytest.raises(TypeError):
        sorted([Link("nvlink", 18), Link("numa")])  # type: ignore[type-var]
    assert Link("nvlink", 18).cost < Link("nvlink", 2).cost < Link("pcie_switch").cost < Link("numa").cost


def test_nic_links_are_listed_by_gpu_then_the_nics_order_unknown_names_last() -> None:
    gpus = (GpuPlace(GpuRef("GPU-0", 0)), GpuPlace(GpuRef("GPU-1", 1)))
    nics = (NicPlace("mlx5_10", "0000:1a:00.0"), NicPlace("mlx5_2", "0000:1b:00.0"))
    links = {(1, "mlx5_2"): Link("numa"), (0, "zz"): Link("system"), (0, "mlx5_2"): Link("socket"),
             (0, "mlx5_10"): Link("pcie_switch"), (0, "aa"): Link("system")}
    topology = Topology(gpus, nics, nic_links=MappingProxyType(links))
    assert [pair for pair, _ in topology.nic_links_in_order()] == [
        (0, "mlx5_10"), (0, "mlx5_2"), (0, "aa"), (0, "zz"), (1, "mlx5_2")]
