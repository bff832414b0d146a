"""No time-shared slice goes on a GPU the kubelet allocated to a container (whole, or as a
time-slicing replica "GPU-…::N"): the slice would share a GPU promised to that pod. Against a
simulated dgx-a100 (GPUs 2-7 whole cards), with the allocations as attribution resolves them from
pod-resources rows."""

from __future__ import annotations

import pytest
from conftest import publish_verdict

from runtimekit.attribution.join import resolve_allocations
from runtimekit.attribution.types import AttributionSnapshot, Owner, SourceStatus
from runtimekit.state.slices import SliceError, SliceRequest

TRAINER_UID = "0b7c3f52-2d4e-4f8a-a1b6-6c9d2e8f4a10"


def tdm(compute: int, **kw: object) -> SliceRequest:
    return SliceRequest(**{"mode": "tdm", "compute": compute, "memory": "1GiB", "owner_id": "me", **kw})  # type: ignore[arg-type]


def allocate(state, *, kubelet_up: bool = True) -> None:
    """GPU 2 allocated whole to ml/trainer-0, GPU 3 as a time-slicing replica to ml/infer-0."""
    snapshot = state.view().snapshot
    uuid = {gpu.index: gpu.uuid for gpu in snapshot.gpus}
    rows = [(Owner("ml", "trainer-0", "main", TRAINER_UID), "nvidia.com/gpu", uuid[2]),
            (Owner("ml", "infer-0", "server", "5e3f8a0c-8d1e-4a55-9d0b-2f6a1c7e9b31"), "nvidia.com/gpu.shared",
             f"{uuid[3]}::1")]
    state.publish_attribution(AttributionSnapshot(
        refreshed_at=0.0, allocations=resolve_allocations(rows, snapshot),
        sources={"kubelet": SourceStatus(up=kubelet_up)}))


async def test_a_card_allocated_to_a_pod_takes_no_time_shared_slice(rig) -> None:
    slicer, state, _ = rig
    allocate(state)
    with pytest.raises(SliceError) as refused:
        await slicer.create(tdm(10, device="2"))
    assert (refused.value.code, refused.value.field) == ("failed_precondition", "device")
    assert str(refused.value) == ("device: GPU 2 takes no new work now, by the kubelet "
                                  "(GPU 2 is allocated to pod ml/trainer-0 (container main))")
    with pytest.raises(SliceError) as replica:
        await slicer.create(tdm(10, device="3"))
    assert "GPU 3 is allocated to pod ml/infer-0 (container server)" in str(replica.value)
    placed = {(await slicer.create(tdm(90))).gpu.index for _ in range(4)}  # any card: GPUs 4-7
    assert placed == {4, 5, 6, 7}
    with pytest.raises(SliceError) as full:
        await slicer.create(tdm(90))
    assert full.value.code == "resource_exhausted"  # 2 and 3 were never candidates


async def test_a_refusal_names_every_card_and_who_holds_it(rig) -> None:
    """GPUs 2 and 3 held by pods, 4-7 unhealthy: the refusal lists all six, by the kubelet and the
    health checker (the cards the health checker left out are named too)."""
    slicer, state, _ = rig
    allocate(state)
    publish_verdict(state, {index: "xid_119" for index in range(4, 8)})
    with pytest.raises(SliceError) as none:
        await slicer.create(tdm(10))
    message = str(none.value)
    assert message.startswith("device: every card in tdm mode takes no new work now, by the kubelet and the health "
                              "checker (GPU 2 is allocated to pod ml/trainer-0 (container main); GPU 3 is allocated")
    assert all(f"GPU {index} is unhealthy: xid_119" in message for index in range(4, 8))


async def test_while_the_kubelet_is_unknown_nothing_is_left_out(rig) -> None:
    slicer, state, _ = rig
    allocate(state, kubelet_up=False)  # what it last said may be stale: not held against a card
    assert (await slicer.create(tdm(10, device="2"))).gpu.index == 2


async def test_the_pod_holding_a_card_may_share_it_with_its_own_slice(rig) -> None:
    slicer, state, _ = rig
    allocate(state)
    own = await slicer.create(tdm(10, device="2", owner_id="", pod_uid=TRAINER_UID, container="main"))
    assert own.gpu.index == 2  # no promise to another pod is broken
    with pytest.raises(SliceError):
        await slicer.create(tdm(10, device="3", owner_id="", pod_uid=TRAINER_UID, container="main"))


async def test_a_gpu_shared_by_replicas_is_held_by_every_pod_of_them(rig) -> None:
    slicer, state, _ = rig
    snapshot = state.view().snapshot
    uuid = {gpu.index: gpu.uuid for gpu in snapshot.gpus}
    rows = [(Owner("ml", "trainer-0", "main", TRAINER_UID), "nvidia.com/gpu.shared", f"{uuid[4]}::0"),
            (Owner("ml", "infer-0", "server", "5e3f8a0c-8d1e-4a55-9d0b-2f6a1c7e9b31"), "nvidia.com/gpu.shared",
             f"{uuid[4]}::1")]
    state.publish_attribution(AttributionSnapshot(refreshed_at=0.0, allocations=resolve_allocations(rows, snapshot),
                                                  sources={"kubelet": SourceStatus(up=True)}))
    with pytest.raises(SliceError) as refused:  # the trainer holds a replica, but so does another pod
        await slicer.create(tdm(10, device="4", owner_id="", pod_uid=TRAINER_UID, container="main"))
    assert "GPU 4 is allocated to pod ml/infer-0 (container server)" in str(refused.value)
