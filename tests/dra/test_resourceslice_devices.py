"""What the DRA driver publishes per device (kube/dra/devices.py), from hand-built runtimekit.v1
messages: a TDM GPU as one shareable device with consumable capacity, a MIG GPU as every
placement of every profile with memory-slice counters, NICs, the topology attributes, withdrawal
of GPUs that may not take work. Each published device is checked against the API server's rules
(tests/kube_resource_validation.py) by the layout tests; here the values are checked."""

from __future__ import annotations

import pytest

from runtimekit._proto.runtimekit.v1 import node_pb2
from runtimekit.kube.dra.devices import inventory, nvlink_domains, quantity_bytes, semver
from tests.dra.publish_nodes import (
    A100_PLACEMENTS,
    GiB,
    dra_owner,
    health,
    mig_gpu,
    mig_slice,
    nic,
    node,
    partition,
    tdm_gpu,
    tdm_slice,
    topology,
    unhealthy,
    uuid_of,
)


def devices_of(found, index):
    return {device["name"]: device for gpu in found.gpus if gpu.index == index for device in gpu.devices}


def test_a_tdm_gpu_is_one_device_with_its_attributes_and_consumable_capacity():
    found = inventory(node(tdm_gpu(0)), topology([0], nics=[nic("mlx5_0", "pci0000:10")]), [])
    (gpu,) = found.gpus
    assert gpu.counter_set is None
    (device,) = gpu.devices
    assert device == {
        "name": "gpu-0",
        "attributes": {
            "type": {"string": "gpu"}, "mode": {"string": "tdm"}, "uuid": {"string": uuid_of(0)}, "index": {"int": 0},
            "productName": {"string": "NVIDIA H100 80GB HBM3"}, "architecture": {"string": "hopper"},
            "driverVersion": {"version": "570.124.6"},
            "resource.kubernetes.io/pciBusID": {"string": "0000:18:00.0"},
            "resource.kubernetes.io/pcieRoot": {"string": "pci0000:10"},
            "numaNode": {"int": 0}, "cpuSocket": {"int": 0}, "nvlinkDomain": {"int": 0},
        },
        "capacity": {
            "compute": {"value": "100", "requestPolicy": {"default": "100", "validRange": {"min": "1", "max": "100", "step": "1"}}},
            "memory": {"value": "79Gi", "requestPolicy": {"default": "79Gi", "validRange": {"min": "128Mi", "max": "79Gi", "step": "128Mi"}}},
        },
        "allowMultipleAllocations": True,
    }
    assert found.withdrawn == {}


def test_slices_made_outside_dra_shrink_the_capacity_and_the_drivers_own_do_not():
    mine = [tdm_slice(0, "training-job", 30, 10 * GiB, "s-000000000001"),
            tdm_slice(0, dra_owner(), 50, 2 * GiB, "s-000000000002"),  # the scheduler counts it already
            tdm_slice(1, "elsewhere", 90, 70 * GiB, "s-000000000003")]
    found = inventory(node(tdm_gpu(0), tdm_gpu(1)), topology([0, 1]), mine)
    capacity = devices_of(found, 0)["gpu-0"]["capacity"]
    assert capacity["compute"]["value"] == "70"
    assert capacity["memory"]["value"] == "69Gi"
    assert capacity["memory"]["requestPolicy"]["validRange"]["max"] == "69Gi"
    assert devices_of(found, 1)["gpu-1"]["capacity"]["compute"]["value"] == "10"


def test_memory_off_the_128_mib_grid_keeps_its_value_and_rounds_the_policy_down():
    usable = 79 * GiB + 100 * 2**20  # not a multiple of 128 MiB
    capacity = devices_of(inventory(node(tdm_gpu(0, usable=usable)), topology([0]), []), 0)["gpu-0"]["capacity"]["memory"]
    assert capacity["value"] == f"{usable // 2**20}Mi"
    assert capacity["requestPolicy"]["default"] == capacity["requestPolicy"]["validRange"]["max"] == "79Gi"  # 632 x 128 MiB


def test_a_gpu_fully_held_by_other_slices_is_withdrawn():
    found = inventory(node(tdm_gpu(0)), topology([0]), [tdm_slice(0, "someone", 100, 10 * GiB)])
    assert found.gpus == ()
    assert "outside DRA" in found.withdrawn[0]


def test_a_mig_gpu_publishes_every_placement_with_its_memory_slice_counters():
    found = inventory(node(mig_gpu(1)), topology([1]), [])
    (gpu,) = found.gpus
    names = [device["name"] for device in gpu.devices]
    assert len(names) == A100_PLACEMENTS and names == sorted(names)
    assert {"gpu-1-mig-1g5gb-19-0", "gpu-1-mig-1g5gbme-20-6", "gpu-1-mig-3g20gb-9-4", "gpu-1-mig-7g40gb-0-0"} <= set(names)
    assert "gpu-1" not in names  # no whole device in MIG mode
    assert gpu.counter_set == {"name": "gpu-1-counter-set", "counters": {f"memory-slice-{i}": {"value": "1"} for i in range(8)}}
    device = devices_of(found, 1)["gpu-1-mig-3g20gb-9-4"]
    assert device["consumesCounters"] == [{"counterSet": "gpu-1-counter-set",
                                           "counters": {f"memory-slice-{i}": {"value": "1"} for i in (4, 5, 6, 7)}}]
    assert device["capacity"] == {"memory": {"value": "19968Mi"}, "computeSlices": {"value": "3"}}
    attributes = device["attributes"]
    assert attributes["type"] == {"string": "mig"} and attributes["profile"] == {"string": "3g.20gb"}
    assert attributes["parentUUID"] == {"string": uuid_of(1)} and attributes["parentIndex"] == {"int": 1}
    assert attributes["resource.kubernetes.io/pcieRoot"] == {"string": "pci0000:20"}
    assert attributes["architecture"] == {"string": "ampere"} and attributes["numaNode"] == {"int": 0}
    assert "allowMultipleAllocations" not in device


def test_placements_overlapping_a_partition_dra_did_not_make_are_withdrawn_and_dras_own_stay():
    foreign = mig_gpu(0, [partition(1, 9, 0)])  # a 3g.20gb at memory slices 0-3, made by someone else
    names = set(devices_of(inventory(node(foreign), topology([0]), []), 0))
    assert "gpu-0-mig-3g20gb-9-4" in names and "gpu-0-mig-1g5gb-19-4" in names
    assert not names & {"gpu-0-mig-3g20gb-9-0", "gpu-0-mig-1g5gb-19-3", "gpu-0-mig-4g20gb-5-0", "gpu-0-mig-7g40gb-0-0",
                        "gpu-0-mig-2g10gb-14-2"}
    # The same partition made for a claim: every placement stays (the scheduler's counters hold it).
    ours = inventory(node(mig_gpu(0, [partition(1, 9, 0)])), topology([0]), [mig_slice(0, dra_owner(), 1)])
    assert len(devices_of(ours, 0)) == A100_PLACEMENTS
    # Made by another slice owner of the agent: withdrawn as well.
    others = inventory(node(mig_gpu(0, [partition(1, 9, 0)])), topology([0]), [mig_slice(0, "notebook", 1)])
    assert set(devices_of(others, 0)) == names


def test_a_partition_of_unknown_size_withdraws_every_placement():
    found = inventory(node(mig_gpu(0, [partition(3, 999, 2)])), topology([0]), [])
    assert found.gpus == () and found.withdrawn == {}


@pytest.mark.parametrize(("change", "reason"), [
    (lambda d: d.health.CopyFrom(unhealthy()), "UNHEALTHY"),
    (lambda d: d.health.CopyFrom(health(node_pb2.HEALTH_STATE_SUSPECT, False, "thermal")), "not schedulable"),
    (lambda d: setattr(d, "lost", True), "lost"),
    (lambda d: setattr(d, "pending_mode", "mig"), "waits for a reset"),
], ids=["unhealthy", "not-schedulable", "lost", "mode-change-pending"])
def test_a_gpu_that_may_not_take_work_is_withdrawn_with_all_its_devices(change, reason):
    gpus = [tdm_gpu(0), mig_gpu(1)]
    for gpu in gpus:
        change(gpu)
    found = inventory(node(*gpus), topology([0, 1]), [])
    assert found.gpus == ()
    assert reason in found.withdrawn[0] and reason in found.withdrawn[1]


def test_a_gpu_the_kubelet_gave_a_pod_is_withdrawn_until_the_pod_is_gone():
    gpus = [tdm_gpu(0), mig_gpu(1), tdm_gpu(2)]
    gpus[0].held_by_pods.extend(["batch/eval-3", "ml/infer-0"])  # time-slicing replicas of it
    gpus[1].held_by_pods.append("ml/trainer-0")  # whole
    found = inventory(node(*gpus), topology([0, 1, 2]), [])
    assert [g.index for g in found.gpus] == [2]
    assert found.withdrawn == {0: "the kubelet allocated it to pods batch/eval-3, ml/infer-0",
                               1: "the kubelet allocated it to pod ml/trainer-0"}
    for gpu in gpus:
        gpu.ClearField("held_by_pods")
    again = inventory(node(*gpus), topology([0, 1, 2]), [])
    assert [g.index for g in again.gpus] == [0, 1, 2] and again.withdrawn == {}


@pytest.mark.parametrize("verdict", [
    None, health(node_pb2.HEALTH_STATE_UNSPECIFIED, False), health(node_pb2.HEALTH_STATE_SUSPECT, True, "ecc"),
    health(node_pb2.HEALTH_STATE_RECOVERING, True)], ids=["no-verdict", "unspecified", "suspect", "recovering"])
def test_a_gpu_without_a_verdict_against_it_is_published(verdict):
    gpu = tdm_gpu(0)
    if verdict is not None:
        gpu.health.CopyFrom(verdict)
    assert [g.index for g in inventory(node(gpu), topology([0]), []).gpus] == [0]


def test_a_gpu_with_the_slicer_off_is_a_whole_gpu_for_one_claim():
    gpu = tdm_gpu(2)
    gpu.mode = ""
    gpu.ClearField("capacity")
    slicer_off = node(gpu)
    slicer_off.slicer_enabled = False
    (device,) = devices_of(inventory(slicer_off, topology([2]), []), 2).values()
    assert device["capacity"] == {"memory": {"value": "80Gi"}}
    assert "mode" not in device["attributes"] and "allowMultipleAllocations" not in device


def test_a_gpu_the_starting_agents_slicer_has_not_reported_is_withdrawn():
    gpu = tdm_gpu(2)
    gpu.mode = ""  # GetNode before the slicer's first look at the GPU: no mode, no capacity
    gpu.ClearField("capacity")
    found = inventory(node(gpu, tdm_gpu(3)), topology([2, 3]), [])
    assert [g.index for g in found.gpus] == [3]
    assert found.withdrawn == {2: "the agent's slicer has not reported its mode yet"}


def test_rdma_nics_carry_the_same_topology_attributes_as_gpus():
    nics = [nic("mlx5_1", "pci0000:10", numa=1, rate=0), nic("mlx5_0", "pci0000:10", numa=0)]
    found = inventory(node(tdm_gpu(0)), topology([0], nics=nics), [])
    assert [n["name"] for n in found.nics] == ["nic-mlx5-0", "nic-mlx5-1"]
    assert found.nics[0]["attributes"] == {
        "type": {"string": "nic"}, "name": {"string": "mlx5_0"}, "rateGbps": {"int": 400},
        "resource.kubernetes.io/pciBusID": {"string": "0000:1a:00.0"},
        "resource.kubernetes.io/pcieRoot": {"string": "pci0000:10"}, "numaNode": {"int": 0}, "cpuSocket": {"int": 0}}
    assert "rateGbps" not in found.nics[1]["attributes"]  # unknown rate: omitted, never 0
    gpu_root = devices_of(found, 0)["gpu-0"]["attributes"]["resource.kubernetes.io/pcieRoot"]
    assert gpu_root == found.nics[0]["attributes"]["resource.kubernetes.io/pcieRoot"]  # matchAttribute pairs them


def test_nvlink_domains_on_an_nvswitch_node_and_on_pairwise_nvlink():
    everything = [(a, b) for a in range(8) for b in range(8) if a < b]
    assert nvlink_domains(topology(range(8), everything)) == {i: 0 for i in range(8)}
    pairs = topology(range(4), [(0, 1), (2, 3)])
    assert nvlink_domains(pairs) == {0: 0, 1: 0, 2: 2, 3: 2}
    assert nvlink_domains(topology(range(3))) == {0: 0, 1: 1, 2: 2}  # no NVLink: each its own
    chain = topology(range(4), [(2, 3), (1, 3)])  # joined through GPU 3
    assert nvlink_domains(chain) == {0: 0, 1: 1, 2: 1, 3: 1}
    found = inventory(node(tdm_gpu(2), tdm_gpu(3)), pairs, [])
    assert {g.index: g.devices[0]["attributes"]["nvlinkDomain"] for g in found.gpus} == {2: {"int": 2}, 3: {"int": 2}}


@pytest.mark.parametrize(("text", "version"), [
    ("550.54.15", "550.54.15"), ("570.124.06", "570.124.6"), ("535.104", "535.104.0"), ("560", "560.0.0"),
    ("", None), ("r570", None), ("570.124.06.1", None)])
def test_the_driver_version_as_semver(text, version):
    assert semver(text) == version


def test_an_unparseable_driver_version_is_omitted_not_published_wrong():
    attributes = devices_of(inventory(node(tdm_gpu(0), driver_version="unknown"), topology([0]), []), 0)["gpu-0"]["attributes"]
    assert "driverVersion" not in attributes


def test_unknown_places_and_long_names_are_handled():
    gpu = tdm_gpu(0, model="N" * 80)
    gpu.ref.pci_address = "00000000:18:00.0"  # NVML's 8-digit domain: not the standard attribute's form
    found = inventory(node(gpu), node_pb2.Topology(), [])
    attributes = devices_of(found, 0)["gpu-0"]["attributes"]
    assert attributes["productName"] == {"string": "N" * 64}
    assert not {"resource.kubernetes.io/pciBusID", "resource.kubernetes.io/pcieRoot", "numaNode", "cpuSocket"} & set(attributes)
    assert attributes["nvlinkDomain"] == {"int": 0}


@pytest.mark.parametrize(("amount", "text"), [(80 * GiB, "80Gi"), (128 * 2**20, "128Mi"), (1536, "1536"), (2048, "2Ki"), (0, "0")])
def test_byte_quantities(amount, text):
    assert quantity_bytes(amount) == text
