"""The topology families: distances in both directions, NICs, and one build per discovery."""

from __future__ import annotations

import dataclasses
from types import MappingProxyType

from exporter_factories import make_gpu, make_snapshot, make_state, uuid_for

from runtimekit.exporter.collectors.topology import GBPS_TO_BYTES, TopologyCollector
from runtimekit.state import SamplerStats
from runtimekit.state.distance import links_between
from runtimekit.state.refs import GpuRef, PciAddress
from runtimekit.state.topology import GpuPlace, NicPlace, Topology

SWITCH = "0000:16:00.0"


def two_gpus_one_nic(discovered_at: float) -> Topology:
    """GPUs 0 and 1 with 4 NVLinks between them under one PCIe switch, and a NIC beside them."""
    gpus = tuple(GpuPlace(GpuRef(uuid_for(i), i, PciAddress(0, 0x18 + i, 0, 0)), 0, 0, (SWITCH,),
                          MappingProxyType({1 - i: 4})) for i in range(2))
    nic = NicPlace("mlx5_0", "0000:1a:00.0", 0, 0, (SWITCH,), 400)
    return Topology(gpus, (nic,), MappingProxyType({(0, 1): links_between(*gpus)}),
                    MappingProxyType({(g.ref.index, nic.name): links_between(g, nic) for g in gpus}), discovered_at, ())


def samples(families) -> dict[str, list[tuple[dict[str, str], float]]]:
    return {f.name: [(dict(s.labels), s.value) for s in f.samples] for f in families}


def test_families_are_built_once_per_discovery_and_follow_a_new_one():
    snapshot = make_snapshot((make_gpu(0), make_gpu(1)))
    state = make_state(snapshot)
    collector = TopologyCollector()
    assert list(collector.collect(state.view())) == []  # nothing before the first discovery
    state.publish_topology(two_gpus_one_nic(100.0))
    first = list(collector.collect(state.view()))
    got = samples(first)
    cost = links_between(*two_gpus_one_nic(100.0).gpus).cost
    assert got["runtimekit_gpu_link_cost"] == [
        ({"gpu": "0", "uuid": uuid_for(0), "peer": "1", "level": "nvlink"}, cost),
        ({"gpu": "1", "uuid": uuid_for(1), "peer": "0", "level": "nvlink"}, cost),
    ]
    assert [value for _, value in got["runtimekit_gpu_link_nvlinks"]] == [4, 4]
    assert got["runtimekit_nic_rate_bytes_per_second"] == [({"nic": "mlx5_0"}, 400 * GBPS_TO_BYTES)]
    assert got["runtimekit_topology_discovered_timestamp_seconds"] == [({}, 100.0)]

    state.publish_snapshot(snapshot, SamplerStats(cycles_total=2))  # another topic moved: the same families
    again = list(collector.collect(state.view()))
    assert all(a is b for a, b in zip(again, first, strict=True))

    state.publish_topology(dataclasses.replace(two_gpus_one_nic(200.0), errors=("NIC mlx5_9: unreadable",)))
    rediscovered = samples(collector.collect(state.view()))
    assert rediscovered["runtimekit_topology_discovered_timestamp_seconds"] == [({}, 200.0)]
    assert rediscovered["runtimekit_topology_errors"] == [({}, 1.0)]

