"""A MIG profile and placement asked for by name (CreateSlice's ``profile`` and ``placement_start``,
what a DRA driver sends for a device it published) against the Slicer on a simulated dgx-a100
(A100 80 GB; GPUs 0 and 1 in MIG mode, 2-7 whole cards): what NVML shows after the call, and each
refusal with its code, field and words, changing nothing."""

from __future__ import annotations

import pytest

from runtimekit.state.slices import SliceError, SliceRequest

ONE_G = 19  # NVML GPU-instance profile id of 1g.10gb on A100
THREE_G = 9  # 3g.40gb


def named(profile: str, device: str = "0", placement_start: int | None = None, **kw: object) -> SliceRequest:
    fields: dict[str, object] = {"mode": "mig", "memory": "", "device": device, "owner_id": "dra:claim:0",
                                 "profile": profile, "placement_start": placement_start, **kw}
    return SliceRequest(**fields)  # type: ignore[arg-type]


async def refused(slicer, request: SliceRequest) -> SliceError:
    before = slicer.table().slices
    with pytest.raises(SliceError) as caught:
        await slicer.create(request)
    assert slicer.table().slices == before  # a refusal changes nothing
    return caught.value


async def test_a_named_profile_at_a_named_placement_is_made_exactly_there(rig) -> None:
    slicer, _, node = rig
    made = await slicer.create(named("1g.10gb", placement_start=3))
    (gi,) = node.gpu_instances(0)
    assert (gi.profile.id, gi.start) == (ONE_G, 3)
    assert (made.profile, made.profile_id, made.placement) == ("1g.10gb", ONE_G, (3, 1))
    assert (made.memory_mib, made.compute) == (9856, 14)  # what the profile gives: 1 of 7 compute slices
    assert (made.spec.profile, made.spec.placement_start, made.spec.memory_mib, made.spec.compute) == ("1g.10gb", 3, 0, 0)


async def test_a_named_profile_takes_the_placement_the_planner_would_and_memory_and_compute_may_be_given(rig) -> None:
    slicer, _, node = rig
    made = await slicer.create(named("3g.40gb", device="1", memory="20GiB", compute=30))
    assert (made.gpu.index, made.profile, made.placement) == (1, "3g.40gb", (4, 4))  # keeps a 4g.40gb possible at 0
    assert [(gi.profile.id, gi.start) for gi in node.gpu_instances(1)] == [(THREE_G, 4)]
    bigger = await slicer.create(named("2g.20gb", device="1", memory="1GiB", compute=10))
    assert bigger.profile == "2g.20gb"  # unnamed, 10 % with 1 GiB would be a 1g.10gb: the name is taken exactly
    assert bigger.placement == (0, 2) and bigger.memory_mib == 19968


async def test_an_instance_made_from_a_uuid_device_and_the_journal_keeps_the_spec(rig) -> None:
    slicer, _, node = rig
    uuid = slicer.table().devices[0].gpu.uuid
    made = await slicer.create(named("2g.20gb", device=uuid, placement_start=2))
    assert (made.gpu.index, made.placement) == (0, (2, 2))
    await slicer.close()
    await slicer.start()
    assert slicer.table().slices[made.id].spec == made.spec


async def test_a_profile_the_card_does_not_offer_is_invalid_and_the_card_names_its_own(rig) -> None:
    slicer, _, node = rig
    error = await refused(slicer, named("1g.5gb"))
    assert (error.code, error.field) == ("invalid_argument", "profile")
    assert str(error) == ("profile: one of the MIG profiles GPU 0 offers (1g.10gb, 1g.10gb+me, 1g.20gb, 2g.20gb, 3g.40gb, "
                          "4g.40gb, 7g.80gb), got '1g.5gb'")
    assert node.gpu_instances(0) == []


async def test_a_placement_the_profile_does_not_allow_is_invalid(rig) -> None:
    slicer, _, node = rig
    error = await refused(slicer, named("3g.40gb", placement_start=2))
    assert (error.code, error.field) == ("invalid_argument", "placement_start")
    assert str(error) == "placement_start: one of the placements of profile 3g.40gb (0, 4), got 2"
    error = await refused(slicer, named("1g.10gb", placement_start=7))  # 1g.10gb: 0-6; slice 7 only in wider ones
    assert (error.code, error.field) == ("invalid_argument", "placement_start")
    assert node.gpu_instances(0) == []


async def test_a_placement_overlapping_a_slices_partition_is_a_failed_precondition_naming_the_slice(rig) -> None:
    slicer, _, node = rig
    first = await slicer.create(named("3g.40gb", placement_start=4))
    error = await refused(slicer, named("1g.10gb", placement_start=5))
    assert (error.code, error.field) == ("failed_precondition", "placement_start")
    gi = first.mig.gpu_instance_id
    assert str(error) == (f"placement_start: 1g.10gb at 5 takes memory slices 5-5 of GPU 0, held by GPU instance {gi} at "
                          f"memory slices 4-7 (slice {first.id}); free placements of 1g.10gb: 0, 1, 2, 3")
    assert len(node.gpu_instances(0)) == 1


async def test_a_placement_overlapping_a_partition_made_outside_the_agent_says_so(rig) -> None:
    slicer, _, node = rig
    outside = node.create_gpu_instance(1, ONE_G, 0)
    error = await refused(slicer, named("7g.80gb", device="1", placement_start=0))
    assert (error.code, error.field) == ("failed_precondition", "placement_start")
    assert (f"held by GPU instance {outside.id} at memory slices 0-0 (no slice of this agent: made outside it); "
            "free placements of 7g.80gb: none") in str(error)


async def test_no_free_placement_for_a_named_profile_without_a_start_is_resource_exhausted(rig) -> None:
    slicer, _, _ = rig
    await slicer.create(named("4g.40gb"))
    error = await refused(slicer, named("4g.40gb"))
    assert error.code == "resource_exhausted" and "GPU 0: no free placement for 4g.40gb" in str(error)


@pytest.mark.parametrize(("changes", "field", "words"), [
    ({"memory": "20GiB"}, "memory", "memory: at most the memory of profile 1g.10gb (9856 MiB), got '20GiB'"),
    ({"compute": 15}, "compute", "compute: at most the compute of profile 1g.10gb (1 of 7 compute slices: 14 %), got 15 %"),
])
async def test_memory_or_compute_beyond_the_named_profile_is_invalid(rig, changes: dict[str, object], field: str,
                                                                   words: str) -> None:
    slicer, _, _ = rig
    error = await refused(slicer, named("1g.10gb", **changes))
    assert (error.code, error.field, str(error)) == ("invalid_argument", field, words)


@pytest.mark.parametrize(("request_", "field", "words"), [
    (named("1g.10gb", mode="tdm", memory="1GiB"), "profile", "only with mode 'mig'"),
    (named("1g.10gb", device=""), "profile", "only with a device given as a GPU index or UUID"),
    (named("1g.10gb", device="any"), "profile", "not device 'any'"),
    (named("", placement_start=0, memory="1GiB"), "placement_start", "only with a profile"),
    (named("1g 10gb"), "profile", "a MIG profile's name"),
    (named("", memory=""), "memory", "NGiB or NMiB"),  # no profile: memory is required
])
async def test_request_rules_of_profile_and_placement_are_invalid_arguments(rig, request_: SliceRequest, field: str,
                                                                            words: str) -> None:
    slicer, _, _ = rig
    error = await refused(slicer, request_)
    assert (error.code, error.field) == ("invalid_argument", field) and words in str(error)


async def test_a_named_profile_on_a_tdm_card_is_the_card_mode_rule(rig) -> None:
    slicer, _, _ = rig
    error = await refused(slicer, named("1g.10gb", device="3"))
    assert (error.code, error.field) == ("failed_precondition", "device")
    assert "GPU 3 is in tdm mode; MIG slices need a card in MIG mode" in str(error)


async def test_cards_report_their_profiles_and_slices_in_either_mode(rig) -> None:
    slicer, _, node = rig
    devices = slicer.table().devices
    a100 = devices[0]
    assert [p.name for p in sorted(a100.profiles, key=lambda p: p.id)] == [
        "7g.80gb", "4g.40gb", "3g.40gb", "2g.20gb", "1g.20gb", "1g.10gb", "1g.10gb+me"]
    assert (a100.memory_slices, a100.compute_slices) == (8, 7)
    one_g = next(p for p in a100.profiles if p.name == "1g.10gb")
    assert (one_g.id, one_g.compute_slices, one_g.memory_slices, one_g.memory_mib, one_g.placements) == (
        ONE_G, 1, 1, 9856, (0, 1, 2, 3, 4, 5, 6))
    # GPU 2 has never been in MIG mode under this agent: NVML lists no profiles outside MIG mode
    assert (devices[2].mig_capable, devices[2].profiles, devices[2].memory_slices) == (True, (), 0)
    # GPU 0 back to tdm keeps what it offers once it is in MIG mode again
    await slicer.set_device_mode("0", "tdm")
    node.reset_gpu(0)
    await slicer.reconcile()
    back = slicer.table().devices[0]
    assert (back.mode, back.profiles, back.memory_slices, back.compute_slices) == ("tdm", a100.profiles, 8, 7)
