"""The device plugin's pure parts, table-driven: which devices and health it advertises
(inventory.units), the preferred-allocation fallback and the check of the agent's choice, and the
resource names the kubelet accepts."""

from __future__ import annotations

import pytest
from dp_agent import MIG_CARD, gpu_uuid, make_health, make_node, mig_slice, mig_uuid

from runtimekit._proto.runtimekit.v1 import node_pb2
from runtimekit.kube.deviceplugin.allocation import choice_problem, fallback
from runtimekit.kube.deviceplugin.config import load
from runtimekit.kube.deviceplugin.inventory import units
from runtimekit.kube.deviceplugin.names import mig_resource, resource_name_problem

CONFIG = load()


def health_of(found, device_id: str) -> str:
    return next(unit.health for unit in found if unit.id == device_id)


def test_whole_gpus_and_mig_devices_by_resource() -> None:
    found = units(make_node(), make_health(), CONFIG)
    assert [(unit.id, unit.resource) for unit in found] == [
        *((gpu_uuid(index), "nvidia.com/gpu") for index in range(MIG_CARD)),
        (mig_uuid(MIG_CARD, 1), "nvidia.com/mig-3g.40gb"), (mig_uuid(MIG_CARD, 2), "nvidia.com/mig-3g.40gb"),
        (mig_uuid(MIG_CARD, 7), "nvidia.com/mig-1g.10gb"),
    ]
    assert all(unit.healthy for unit in found)
    assert [unit.id for unit in units(make_node(), make_health(), load(None, {"mig": False}))] == [
        gpu_uuid(index) for index in range(MIG_CARD)]


def _no_verdict(health: node_pb2.NodeHealth, node: node_pb2.Node) -> None:
    health.Clear()


def _lost(health: node_pb2.NodeHealth, node: node_pb2.Node) -> None:
    node.devices[0].lost = True


def _suspect_unschedulable(health: node_pb2.NodeHealth, node: node_pb2.Node) -> None:
    health.devices[0].health.state, health.devices[0].health.schedulable = node_pb2.HEALTH_STATE_SUSPECT, False


def _suspect_schedulable(health: node_pb2.NodeHealth, node: node_pb2.Node) -> None:
    health.devices[0].health.state = node_pb2.HEALTH_STATE_SUSPECT


def _slice_unhealthy(health: node_pb2.NodeHealth, node: node_pb2.Node) -> None:
    item = health.slices.add(slice_id="s-000000000001", partition_gpu_instance_id=7, state=node_pb2.HEALTH_STATE_UNHEALTHY)
    item.ref.uuid = gpu_uuid(MIG_CARD)


def _partition_fault(severity: str):
    def change(health: node_pb2.NodeHealth, node: node_pb2.Node) -> None:
        health.devices[MIG_CARD].health.partition_faults.add(fault="xid_13", severity=severity, partition_gpu_instance_id=7)
    return change


def _card_unhealthy(health: node_pb2.NodeHealth, node: node_pb2.Node) -> None:
    health.devices[MIG_CARD].health.state = node_pb2.HEALTH_STATE_UNHEALTHY


@pytest.mark.parametrize("change,device,expected", [
    (_no_verdict, gpu_uuid(0), "Healthy"),  # before the health checker's first verdict
    (_lost, gpu_uuid(0), "Unhealthy"),
    (_suspect_unschedulable, gpu_uuid(0), "Unhealthy"),  # a fault whose policy forbids new work
    (_suspect_schedulable, gpu_uuid(0), "Healthy"),
    (_slice_unhealthy, mig_uuid(MIG_CARD, 7), "Unhealthy"),
    (_slice_unhealthy, mig_uuid(MIG_CARD, 1), "Healthy"),  # another partition of the card
    (_partition_fault("critical"), mig_uuid(MIG_CARD, 7), "Unhealthy"),
    (_partition_fault("info"), mig_uuid(MIG_CARD, 7), "Healthy"),
    (_card_unhealthy, mig_uuid(MIG_CARD, 1), "Unhealthy"),  # a card's verdict reaches its partitions
], ids=lambda value: getattr(value, "__name__", str(value)))
def test_health_policy(change, device: str, expected: str) -> None:
    node, health = make_node(), make_health()
    change(health, node)
    assert health_of(units(node, health, CONFIG), device) == expected


@pytest.mark.parametrize("slices,mig_slices,gone", [
    ({1: ["s-000000000001"]}, [], [gpu_uuid(1)]),  # a card with a "tdm" slice: not advertised whole
    ({1: ["s-000000000001", "s-000000000002"]}, [], [gpu_uuid(1)]),
    ({MIG_CARD: ["s-000000000003"]}, [("s-000000000003", 7)], [mig_uuid(MIG_CARD, 7)]),  # a slice's partition
    ({MIG_CARD: ["s-000000000003", "s-000000000004"]}, [("s-000000000003", 1), ("s-000000000004", 2)],
     [mig_uuid(MIG_CARD, 1), mig_uuid(MIG_CARD, 2)]),
    ({MIG_CARD: ["s-000000000005"]}, [("s-000000000005", None)], []),  # its partition not made yet
    ({}, [], []),
])
def test_devices_that_hold_slices_are_not_advertised(slices: dict[int, list[str]],
                                                     mig_slices: list[tuple[str, int | None]], gone: list[str]) -> None:
    node = make_node()
    for index, ids in slices.items():
        node.devices[index].slice_ids.extend(ids)
    listed = []
    for slice_id, gpu_instance in mig_slices:
        item = mig_slice(slice_id, gpu_instance or 0)
        if gpu_instance is None:
            item.ClearField("partition")
        listed.append(item)
    everything = [unit.id for unit in units(make_node(), make_health(), CONFIG)]
    found = [unit.id for unit in units(node, make_health(), CONFIG, listed)]
    assert found == [device for device in everything if device not in gone]


def test_numa_nodes_of_whole_gpus_and_mig_devices() -> None:
    found = units(make_node(), make_health(), CONFIG, numa={gpu_uuid(0): 0, gpu_uuid(MIG_CARD): 1})
    assert {unit.id: unit.numa_node for unit in found} == {
        gpu_uuid(0): 0, gpu_uuid(1): None, gpu_uuid(2): None, gpu_uuid(3): None,
        mig_uuid(MIG_CARD, 1): 1, mig_uuid(MIG_CARD, 2): 1, mig_uuid(MIG_CARD, 7): 1}


def test_a_partition_not_made_yet_is_not_advertised() -> None:
    node = make_node()
    node.devices[MIG_CARD].partitions.add(gpu_instance_id=9, profile="1g.10gb")  # no UUID yet
    assert len(units(node, make_health(), CONFIG)) == MIG_CARD + 3


@pytest.mark.parametrize("available,must,size,expected", [
    (["a", "b", "c"], [], 2, ["a", "b"]),
    (["a", "b", "c"], ["c"], 2, ["c", "a"]),
    (["a", "b"], ["b", "b"], 1, ["b"]),  # each once
    (["a"], [], 3, ["a"]),  # fewer than asked exist: what there is
    ([], [], 0, []),
])
def test_fallback(available: list[str], must: list[str], size: int, expected: list[str]) -> None:
    assert fallback(available, must, size) == expected


@pytest.mark.parametrize("chosen,problem", [
    (["a", "c"], ""),
    (["a"], "it chose 1 devices (a), 2 distinct were asked for"),
    (["a", "a"], "it chose 2 devices (a, a), 2 distinct were asked for"),
    (["a", "z"], "it chose devices the kubelet did not offer: z"),
    (["b", "c"], "it left out must-include devices: a"),
])
def test_the_agents_choice_is_checked(chosen: list[str], problem: str) -> None:
    assert choice_problem(chosen, ["a", "b", "c"], ["a"], 2) == problem


@pytest.mark.parametrize("name,ok", [
    ("nvidia.com/gpu", True), ("nvidia.com/mig-3g.40gb", True), ("gpu", False), ("Nvidia.com/gpu", False),
    ("kubernetes.io/gpu", False), ("nvidia.com/-gpu", False), ("nvidia.com/" + "g" * 64, False),
])
def test_resource_names(name: str, ok: bool) -> None:
    assert (resource_name_problem(name) is None) == ok


def test_a_profile_is_made_a_valid_resource_name() -> None:
    assert mig_resource("nvidia.com/mig-", "1g.10gb+me") == "nvidia.com/mig-1g.10gb.me"
    assert resource_name_problem(mig_resource("nvidia.com/mig-", "1g.10gb+me")) is None
