"""Planning a claim (kube/dra/plan.py), pure: the claim's allocation results and the agent's node in,
what to make per device out, or a ClaimError naming the claim, the request, the device, the field
and the rule. The node is built by hand as GetNode answers on an A100 node (GPU 0 in MIG mode with
the A100 80GB profiles, GPUs 1-3 in TDM mode) with two RDMA NICs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from runtimekit._proto.runtimekit.v1 import node_pb2, slice_pb2
from runtimekit.kube.dra.claims import ClaimError, parse_claim
from runtimekit.kube.dra.names import owner_id
from runtimekit.kube.dra.plan import Planned, plan_claim
from tests.dra.dra_claims import DRIVER, NODE, Alloc, Config, ref_of, resource_claim, slice_config

GIB = 1 << 30
KIND = "nvidia.com/gpu"
OTHER_UID = "0c0c0c0c-1111-2222-3333-444444444444"
# (name, profile id, compute slices, memory bytes, placements): an A100 80GB's GPU-instance profiles.
PROFILES = [("7g.80gb", 0, 7, 84288733184, [0]), ("3g.40gb", 9, 3, 42144366592, [0, 4]),
            ("1g.10gb", 19, 1, 10334765056, [0, 1, 2, 3, 4, 5, 6])]


def uuid_of(index: int) -> str:
    return f"GPU-{index:08d}-0000-0000-0000-000000000000"


def gpu(index: int, mode: str = "tdm", lost: bool = False) -> node_pb2.Device:
    device = node_pb2.Device(ref=slice_pb2.DeviceRef(kind="gpu", vendor="nvidia", uuid=uuid_of(index), index=index),
                             memory_bytes=80 * GIB, mode=mode, lost=lost, partition_capable=True)
    if mode == "mig":
        device.partition_memory_slices, device.partition_compute_slices = 8, 7
        for name, profile_id, compute, memory, placements in PROFILES:
            device.partition_profiles.add(profile_id=profile_id, name=name, compute_slices=compute, memory_bytes=memory,
                                          placements=placements)
    return device


NODE_PB = node_pb2.Node(devices=[gpu(0, "mig"), gpu(1), gpu(2), gpu(3, lost=True)], slicer_enabled=True)
TOPOLOGY = node_pb2.Topology(nics=[
    node_pb2.Nic(name="mlx5_0", device_nodes=["/dev/infiniband/uverbs0", "/dev/infiniband/rdma_cm"]),
    node_pb2.Nic(name="mlx5_1", device_nodes=["/dev/infiniband/uverbs1", "/dev/infiniband/rdma_cm"])])


def agent_slice(slice_id: str, index: int, owner: str) -> slice_pb2.Slice:
    return slice_pb2.Slice(id=slice_id, mode="tdm", device=slice_pb2.DeviceRef(uuid=uuid_of(index), index=index),
                           owner=slice_pb2.Owner(owner_id=owner))


def plan(obj: dict[str, Any], slices: Sequence[slice_pb2.Slice] = (), held: dict[str, str] | None = None,
         topology: node_pb2.Topology | None = TOPOLOGY) -> list[Planned]:
    ref = ref_of(obj)
    return plan_claim(ref, parse_claim(ref, obj), driver=DRIVER, pool=NODE, node=NODE_PB, topology=topology,
                      slices=slices, whole_gpu_cdi_kind=KIND, held=held)


def refusal(obj: dict[str, Any], **kwargs: Any) -> str:
    with pytest.raises(ClaimError) as caught:
        plan(obj, **kwargs)
    message = str(caught.value)
    assert message.startswith(str(ref_of(obj))), message  # the claim is named first
    return message


def share(device: str = "gpu-1", consumed: dict[str, str] | None = None, **config: Any) -> dict[str, Any]:
    configs = [Config(slice_config(**config), ("share",))]
    return resource_claim("share", [Alloc("share", device, "tdm", consumed=consumed)], configs=configs)


# -- TDM shares ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("claim", "compute", "memory_mib"), [
    (share(compute=50, memory="2GiB"), 50, 2048),  # all from the SliceConfig
    (share(memory="2GiB"), 0, 2048),  # no compute: unlimited
    (share(consumed={"compute": "50", "memory": "2Gi"}), 50, 2048),  # all from consumedCapacity
    (share(consumed={"compute": "50", "memory": "3000Mi"}), 50, 2944),  # memory rounded down to 128 MiB
    (share(consumed={"compute": "50", "memory": "2147483648"}, compute=30), 30, 2048),  # less than consumed: the config's
    (share(consumed={"compute": "50", "memory": "4Gi"}, memory="1GiB"), 50, 1024),
])
def test_a_tdm_share_takes_its_amounts_from_the_config_else_from_consumed_capacity(
        claim: dict[str, Any], compute: int, memory_mib: int) -> None:
    [planned] = plan(claim)
    assert (planned.kind, planned.gpu_index, planned.gpu_uuid, planned.compute, planned.memory_mib) == (
        "tdm", 1, uuid_of(1), compute, memory_mib)
    assert planned.makes_slice and planned.cdi_ids == ()


def test_the_device_classes_empty_slice_config_makes_a_share_of_what_was_consumed() -> None:
    claim = resource_claim("cls", [Alloc("share", "gpu-2", "tdm", consumed={"compute": "25", "memory": "1Gi"})],
                           class_configs=[Config(slice_config())])
    [planned] = plan(claim)
    assert (planned.kind, planned.compute, planned.memory_mib) == ("tdm", 25, 1024)


@pytest.mark.parametrize(("claim", "words"), [
    (share(consumed={"compute": "50", "memory": "2Gi"}, compute=60),
     "SliceConfig compute: must be at most the allocated consumedCapacity.compute (50), got 60"),
    (share(consumed={"compute": "50", "memory": "2Gi"}, memory="4GiB"),
     "SliceConfig memory: must be at most the allocated consumedCapacity.memory (2147483648 bytes), got 4096MiB"),
    (share(compute=50), "SliceConfig memory: required for a TDM share"),
    (share(consumed={"memory": "100Mi"}), "consumedCapacity.memory: must be at least 128 MiB"),
    (share(consumed={"memory": "lots"}), "consumedCapacity.memory: must be a quantity, got 'lots'"),
    (share(compute=500), "parameters.compute: must be between 1 and 100, got 500"),
])
def test_a_share_that_cannot_be_made_as_asked_is_refused(claim: dict[str, Any], words: str) -> None:
    message = refusal(claim)
    assert "request share, device gpu-1" in message and words in message, message


def test_a_bad_slice_config_names_its_entry_and_field() -> None:
    message = refusal(share(compute=50, memory="2GiB", sharing="mps"))
    assert "status.allocation.devices.config[0] (FromClaim) opaque parameters.sharing: unknown key" in message


# -- whole GPUs ----------------------------------------------------------------------------------

def whole(device: str = "gpu-2", **alloc: Any) -> dict[str, Any]:
    return resource_claim("whole", [Alloc("gpu", device, **alloc)])


def test_a_whole_gpu_is_named_by_its_cdi_device_and_makes_no_slice() -> None:
    [planned] = plan(whole())
    assert (planned.kind, planned.gpu_index, planned.makes_slice, planned.cdi_ids) == (
        "gpu", 2, False, (f"{KIND}={uuid_of(2)}",))


def test_with_the_agents_slicer_off_a_gpu_has_no_mode_and_is_prepared_whole_but_never_shared() -> None:
    node = node_pb2.Node(devices=[gpu(0, mode=""), gpu(1, mode="")], slicer_enabled=False)
    claim = whole("gpu-1")
    [planned] = plan_claim(ref_of(claim), parse_claim(ref_of(claim), claim), driver=DRIVER, pool=NODE, node=node,
                           topology=TOPOLOGY, slices=(), whole_gpu_cdi_kind=KIND)
    assert (planned.kind, planned.gpu_index, planned.cdi_ids) == ("gpu", 1, (f"{KIND}={uuid_of(1)}",))
    claim = share(compute=50, memory="2GiB")
    with pytest.raises(ClaimError, match="GPU 1 is in mode 'none', the device needs 'tdm'"):
        plan_claim(ref_of(claim), parse_claim(ref_of(claim), claim), driver=DRIVER, pool=NODE, node=node,
                   topology=TOPOLOGY, slices=(), whole_gpu_cdi_kind=KIND)


def test_a_whole_gpu_is_refused_while_slices_that_are_not_the_drivers_are_on_it() -> None:
    message = refusal(whole(), slices=[agent_slice("s-0000000000aa", 2, "notebook"), agent_slice("s-0000000000bb", 1, "x")])
    assert "a whole GPU needs GPU 2 free, but the agent holds slices on it that are not this driver's: s-0000000000aa" in message
    assert "s-0000000000bb" not in message  # on another GPU


def test_a_whole_gpu_is_refused_while_another_claim_holds_a_share_unless_admin_access() -> None:
    slices = [agent_slice("s-0000000000cc", 2, owner_id(OTHER_UID, 0, DRIVER, "0123456789abcdef"))]
    assert f"claims {OTHER_UID} hold shares of it (allocated twice?)" in refusal(whole(), slices=slices)
    old_form = [agent_slice("s-0000000000dd", 2, f"dra:{OTHER_UID}:0")]  # made before owners named the driver
    assert f"claims {OTHER_UID} hold shares of it (allocated twice?)" in refusal(whole(), slices=old_form)
    [planned] = plan(whole(admin_access=True), slices=slices)  # monitoring: adminAccess shares the device
    assert planned.kind == "gpu"


def test_a_whole_gpu_already_held_whole_by_another_claim_is_refused_unless_admin_access() -> None:
    held = {"gpu-2": f"claim default/other ({OTHER_UID})"}
    assert f"GPU 2 is prepared whole for claim default/other ({OTHER_UID}) (allocated twice?)" in refusal(whole(), held=held)
    assert plan(whole(admin_access=True), held=held)[0].kind == "gpu"
    assert "prepared whole" in refusal(share("gpu-2", memory="1GiB"), held=held)  # nor a share of it
    assert plan(whole("gpu-1"), held=held)[0].kind == "gpu"  # another GPU


def test_a_part_of_a_gpu_without_a_slice_config_is_refused() -> None:
    claim = resource_claim("part", [Alloc("gpu", "gpu-2", "tdm", consumed={"compute": "50", "memory": "2Gi"})])
    assert "consumedCapacity.compute is 50, a part of the GPU: a part is a TDM share and needs a SliceConfig" in refusal(claim)


# -- MIG placements ------------------------------------------------------------------------------

def mig(device: str, **config: Any) -> dict[str, Any]:
    configs = [Config(slice_config(**config))] if config else []
    return resource_claim("mig", [Alloc("mig", device, "mig")], configs=configs)


def test_a_mig_device_is_made_at_its_placement_with_its_profile() -> None:
    [planned] = plan(mig("gpu-0-mig-1g10gb-19-3"))
    assert (planned.kind, planned.gpu_index, planned.profile, planned.placement_start, planned.compute, planned.memory_mib) == (
        "mig", 0, "1g.10gb", 3, 0, 0)
    [planned] = plan(mig("gpu-0-mig-3g40gb-9-4", compute=40, memory="20GiB"))
    assert (planned.profile, planned.placement_start, planned.compute, planned.memory_mib) == ("3g.40gb", 4, 40, 20480)


@pytest.mark.parametrize(("claim", "words"), [
    (mig("gpu-0-mig-1g10gb-20-0"), "GPU 0 offers no MIG profile 1g10gb with id 20"),
    (mig("gpu-0-mig-3g40gb-9-2"), "placement 2 is none of profile 3g.40gb's (0, 4)"),
    (mig("gpu-1-mig-1g10gb-19-0"), "GPU 1 is in mode 'tdm', the device needs 'mig'"),
    (mig("gpu-0-mig-1g10gb-19-0", compute=20), "SliceConfig compute: must fit profile 1g.10gb (at most 14 %), got 20"),
    (mig("gpu-0-mig-1g10gb-19-0", memory="16GiB"), "SliceConfig memory: must fit profile 1g.10gb (9856 MiB), got 16384MiB"),
    (whole("gpu-0"), "GPU 0 is in mode 'mig', the device needs 'tdm'"),
    (whole("gpu-3"), "GPU 3 is lost"),
    (whole("gpu-9"), "the node has no GPU 9"),
])
def test_a_device_the_node_cannot_give_is_refused(claim: dict[str, Any], words: str) -> None:
    assert words in refusal(claim)


# -- NICs and the rest ---------------------------------------------------------------------------

def test_a_nic_gets_its_device_nodes_and_takes_no_slice_config() -> None:
    claim = resource_claim("nics", [Alloc("nic", "nic-mlx5-1", "nic")], configs=[Config({"not": "a SliceConfig"})])
    [planned] = plan(claim)
    assert (planned.kind, planned.nic, planned.device_nodes, planned.makes_slice) == (
        "nic", "mlx5_1", ("/dev/infiniband/uverbs1", "/dev/infiniband/rdma_cm"), False)
    assert "the node has no RDMA NIC of that name" in refusal(resource_claim("nics", [Alloc("nic", "nic-mlx5-7", "nic")]))


def test_a_nic_another_claim_holds_is_refused_unless_admin_access() -> None:
    held = {"nic-mlx5-0": f"claim default/c6 ({OTHER_UID})"}
    message = refusal(resource_claim("c9", [Alloc("nic", "nic-mlx5-0", "nic")]), held=held)
    assert message.endswith(f"request nic, device nic-mlx5-0: NIC mlx5_0 is prepared for claim default/c6 ({OTHER_UID}) "
                            "(allocated twice?)"), message
    assert plan(resource_claim("watch", [Alloc("nic", "nic-mlx5-0", "nic", admin_access=True)]), held=held)[0].kind == "nic"
    assert plan(resource_claim("c9", [Alloc("nic", "nic-mlx5-1", "nic")]), held=held)[0].nic == "mlx5_1"


def test_only_this_drivers_results_are_planned_in_order_with_their_positions() -> None:
    claim = resource_claim("mixed", [Alloc("theirs", "gpu-0", driver="gpu.nvidia.com"), Alloc("gpu", "gpu-1"),
                                     Alloc("nic", "nic-mlx5-0", "nic")])
    assert [(p.kind, p.result.position) for p in plan(claim)] == [("gpu", 1), ("nic", 2)]
    assert plan(resource_claim("none", [Alloc("theirs", "gpu-0", driver="gpu.nvidia.com")])) == []


@pytest.mark.parametrize(("alloc", "words"), [
    (Alloc("gpu", "gpu-1", pool="node-b"), "pool node-b is not this node's (node-a)"),
    (Alloc("gpu", "gpu-01"), "not a device this driver publishes"),
    (Alloc("gpu", "fpga-0"), "not a device this driver publishes"),
])
def test_a_result_that_is_not_this_nodes_device_is_refused(alloc: Alloc, words: str) -> None:
    assert words in refusal(resource_claim("odd", [alloc]))


def test_nothing_is_planned_when_one_device_of_the_claim_is_refused() -> None:
    claim = resource_claim("half", [Alloc("ok", "gpu-1"), Alloc("bad", "gpu-9")])
    assert "request bad, device gpu-9: the node has no GPU 9" in refusal(claim)
