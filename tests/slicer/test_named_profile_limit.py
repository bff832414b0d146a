"""A MIG profile's instance limit through the Slicer on a simulated dgx-a100 (GPUs 0 and 1 in MIG
mode): a second ``1g.10gb+me`` on one card (NVML's instanceCount is 1, slicing.md §3) is refused by
the planner, resource_exhausted naming the limit and the slice holding it, before anything is
journaled or made, never NVML's INSUFFICIENT_RESOURCES rolled back."""

from __future__ import annotations

import pytest

from runtimekit.state.slices import SliceError, SliceRequest

MEDIA = 20  # NVML GPU-instance profile id of 1g.10gb+me on A100


def media(placement_start: int | None = None, device: str = "1") -> SliceRequest:
    return SliceRequest(mode="mig", memory="", device=device, owner_id="a", profile="1g.10gb+me",
                        placement_start=placement_start)


@pytest.mark.parametrize("placement_start", [1, None])
async def test_a_second_media_instance_is_refused_before_anything_is_made(rig, placement_start: int | None) -> None:
    slicer, _, node = rig
    first = await slicer.create(media(0))
    before = slicer.table().slices
    with pytest.raises(SliceError) as caught:
        await slicer.create(media(placement_start))
    error = caught.value
    assert (error.code, error.field) == ("resource_exhausted", "profile")
    gi = first.mig.gpu_instance_id
    assert str(error) == ("profile: 1g.10gb+me allows at most 1 GPU instance(s) on one GPU (the driver's instanceCount), "
                          f"and GPU 1 has 1: GPU instance {gi} at memory slices 0-0 (slice {first.id})")
    assert "NVML" not in str(error)
    assert slicer.table().slices == before
    assert [(gi.profile.id, gi.start) for gi in node.gpu_instances(1)] == [(MEDIA, 0)]


async def test_the_limit_is_per_card(rig) -> None:
    slicer, _, _ = rig
    await slicer.create(media(0))
    assert (await slicer.create(media(3, device="0"))).placement == (3, 1)  # GPU 0 had none


async def test_an_instance_made_outside_the_agent_holds_the_limit_too(rig) -> None:
    slicer, _, node = rig
    outside = node.create_gpu_instance(1, MEDIA, 2)
    with pytest.raises(SliceError) as caught:
        await slicer.create(media(5))
    assert caught.value.code == "resource_exhausted"
    assert str(caught.value).endswith(f"GPU 1 has 1: GPU instance {outside.id} at memory slices 2-2 "
                                      "(no slice of this agent: made outside it)")
