"""The Slicer against a simulated dgx-a100 (A100 80 GB; GPUs 0 and 1 in MIG mode, 2-7 whole cards):
what NVML shows after each call, the card-mode rule, and refusals that change nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import publish_verdict

from runtimekit.state.slices import SliceError, SliceRequest


def mig(**kw: object) -> SliceRequest:
    return SliceRequest(**{"mode": "mig", "compute": 30, "memory": "20GiB", "owner_id": "me", **kw})  # type: ignore[arg-type]


def tdm(compute: int, memory: str, **kw: object) -> SliceRequest:
    return SliceRequest(**{"mode": "tdm", "compute": compute, "memory": memory, "owner_id": "me", **kw})  # type: ignore[arg-type]


async def test_mig_slice_is_an_instance_nvml_reports_and_delete_frees_it(rig) -> None:
    slicer, state, node = rig
    made = await slicer.create(mig())
    assert made.state == "ready" and made.gpu.index in (0, 1)
    gis = node.gpu_instances(made.gpu.index)
    assert [(gi.id, gi.profile.id, gi.start) for gi in gis] == [(made.mig.gpu_instance_id, made.profile_id, made.placement[0])]
    assert [ci.uuid for ci in gis[0].cis.values()] == [made.mig.uuid]
    assert state.view().slices.slices[made.id] == made  # published
    assert made.id in state.view().slices.devices[made.gpu.index].slices

    await slicer.delete(made.id)
    assert node.gpu_instances(made.gpu.index) == []
    assert made.id not in state.view().slices.slices
    assert state.view().slices.devices[made.gpu.index].memory_free_mib == state.view().slices.devices[made.gpu.index].usable_memory_mib


async def test_mig_slice_has_a_cdi_spec_naming_its_mig_device(rig, tmp_path: Path) -> None:
    slicer, _, _ = rig
    made = await slicer.create(mig())
    spec = json.loads((tmp_path / "cdi" / f"runtimekit_io-slice-{made.id}.json").read_text())
    assert spec["devices"][0]["containerEdits"]["env"] == [f"CUDA_VISIBLE_DEVICES={made.mig.uuid}",
                                                           f"NVIDIA_VISIBLE_DEVICES={made.mig.uuid}"]


async def test_tdm_50_percent_2gib_next_to_30_percent_8gib_on_one_card(rig, tmp_path: Path) -> None:
    slicer, state, _ = rig
    first = await slicer.create(tdm(50, "2GiB", device="3"))
    second = await slicer.create(tdm(30, "8GiB", device="3"))
    assert (first.gpu.index, second.gpu.index) == (3, 3)
    info = state.view().slices.devices[3]
    assert (info.mode, info.compute_free, info.usable_memory_mib - info.memory_free_mib) == ("tdm", 20, 10 * 1024)
    env = json.loads(Path(tmp_path / "cdi" / f"runtimekit_io-slice-{first.id}.json").read_text())["devices"][0]["containerEdits"]["env"]
    assert "CUDA_DEVICE_MEMORY_LIMIT=2048m" in env and "CUDA_DEVICE_SM_LIMIT=50" in env
    assert f"CUDA_VISIBLE_DEVICES={first.gpu.uuid}" in env


async def test_over_capacity_is_refused_and_changes_nothing(rig, tmp_path: Path) -> None:
    slicer, state, node = rig
    await slicer.create(tdm(80, "2GiB", device="4"))
    before = state.view().slices
    files = sorted((tmp_path / "cdi").iterdir())
    with pytest.raises(SliceError) as refused:
        await slicer.create(tdm(30, "2GiB", device="4"))
    assert (refused.value.code, refused.value.field) == ("resource_exhausted", "compute")
    with pytest.raises(SliceError) as too_big:  # no card can ever give it: no retry would succeed
        await slicer.create(tdm(10, "80GiB", device="4"))  # 80 GiB card less the 1 GiB reserve
    assert (too_big.value.code, str(too_big.value)) == (
        "invalid_argument", "memory: at most what the card can give slices (80896 MiB: 81920 MiB less the 1024 MiB "
        "reserve), got '80GiB'")
    assert slicer.table().slices == before.slices and sorted((tmp_path / "cdi").iterdir()) == files
    assert not (tmp_path / "slicer.db").stat().st_size == 0


async def test_mig_capacity_refused_when_the_card_is_full(rig) -> None:
    slicer, _, node = rig
    for index in (0, 1):
        await slicer.create(mig(compute=100, memory="78GiB", device=str(index)))
    with pytest.raises(SliceError) as refused:
        await slicer.create(mig(compute=10, memory="10GiB"))
    assert refused.value.code == "resource_exhausted"
    assert [len(node.gpu_instances(i)) for i in (0, 1)] == [1, 1]


async def test_tdm_on_a_mig_card_is_refused_with_the_way_out(rig) -> None:
    slicer, _, _ = rig
    with pytest.raises(SliceError) as refused:
        await slicer.create(tdm(50, "2GiB", device="0"))
    assert refused.value.code == "failed_precondition"
    assert str(refused.value) == ("device: GPU 0 is in MIG mode; TDM slices need a card in tdm mode "
                                  "(runtimekit device mode 0 tdm)")
    assert slicer.table().slices == {}
    await slicer.create(mig(device="0"))  # a card with a slice changes mode only once it has none
    with pytest.raises(SliceError) as held:
        await slicer.create(tdm(50, "2GiB", device="0"))
    assert "(delete its 1 slice(s), then runtimekit device mode 0 tdm)" in str(held.value)


async def test_mig_on_a_tdm_card_and_mig_with_no_mig_card_are_refused(rig) -> None:
    slicer, _, _ = rig
    with pytest.raises(SliceError) as refused:
        await slicer.create(mig(device="5"))
    assert refused.value.code == "failed_precondition" and "runtimekit device mode 5 mig" in str(refused.value)
    for index in (0, 1):
        await slicer.set_device_mode(str(index), "tdm")
    with pytest.raises(SliceError) as none:
        await slicer.create(mig())
    assert none.value.code == "failed_precondition" and "runtimekit device mode 0 mig cancels it" in str(none.value)


async def test_mode_change_with_slices_is_refused(rig) -> None:
    slicer, _, node = rig
    made = await slicer.create(mig(device="1"))
    with pytest.raises(SliceError) as refused:
        await slicer.set_device_mode("1", "tdm")
    assert refused.value.code == "failed_precondition" and made.id in str(refused.value)
    assert node.mig_mode(1) == (True, True)
    await slicer.create(tdm(10, "1GiB", device="6"))
    with pytest.raises(SliceError):
        await slicer.set_device_mode("6", "mig")
    assert node.mig_mode(6) == (False, False)


async def test_mode_change_is_pending_until_a_reset_and_the_card_takes_no_slice_meanwhile(rig) -> None:
    slicer, _, node = rig
    info = await slicer.set_device_mode("7", "mig")
    assert (info.mode, info.pending) == ("tdm", "mig")
    for request in (tdm(10, "1GiB", device="7"), mig(device="7")):
        with pytest.raises(SliceError) as refused:
            await slicer.create(request)
        assert refused.value.code == "failed_precondition" and "pending" in str(refused.value)
    node.reset_gpu(7)
    await slicer.reconcile()
    assert (slicer.table().devices[7].mode, slicer.table().devices[7].pending) == ("mig", None)
    assert (await slicer.create(mig(device="7"))).gpu.index == 7


async def test_an_instance_in_use_is_not_destroyed(rig) -> None:
    slicer, _, node = rig
    made = await slicer.create(mig(device="0"))
    pid = node.add_process(0, 1 << 30, gpu_instance=made.mig.gpu_instance_id, compute_instance=made.mig.compute_instance_id)
    with pytest.raises(SliceError) as refused:
        await slicer.delete(made.id)
    assert (refused.value.code, refused.value.field) == ("failed_precondition", "slice_id")
    assert len(node.gpu_instances(0)) == 1
    assert slicer.table().slices[made.id].state == "ready"
    node.remove_process(pid)
    await slicer.delete(made.id)
    assert node.gpu_instances(0) == []


async def test_unknown_slice_and_bad_requests(rig) -> None:
    slicer, _, _ = rig
    with pytest.raises(SliceError) as missing:
        await slicer.delete("s-000000000000")
    assert (missing.value.code, missing.value.field) == ("not_found", "slice_id")
    with pytest.raises(SliceError) as bad:
        await slicer.create(tdm(101, "2GiB"))
    assert (bad.value.code, bad.value.field) == ("invalid_argument", "compute")
    with pytest.raises(SliceError) as any_device:
        await slicer.set_device_mode("any", "mig")
    assert any_device.value.field == "device"


async def test_a_corrupt_journal_refuses_to_start_with_a_clear_error(make_slicer, tmp_path: Path) -> None:
    from runtimekit.slicer.journal import JournalError

    (tmp_path / "slicer.db").write_bytes(b"garbage " * 512)
    slicer, state, _ = make_slicer()
    with pytest.raises(JournalError, match="slicer.db: not a usable slicer journal"):
        await slicer.start()
    with pytest.raises(SliceError) as refused:
        await slicer.create(tdm(10, "1GiB"))
    assert refused.value.code == "unavailable"
    await slicer.close()


async def test_one_slicer_starts_again_after_close_with_its_slices(make_slicer) -> None:
    slicer, _, _ = make_slicer()
    await slicer.start()
    made = await slicer.create(tdm(10, "1GiB"))
    await slicer.close()
    with pytest.raises(SliceError) as stopped:
        await slicer.create(tdm(10, "1GiB"))
    assert stopped.value.code == "unavailable"
    await slicer.start()
    assert list(slicer.table().slices) == [made.id]
    await slicer.close()


async def test_a_stale_gpu_index_in_the_journal_is_resolved_by_the_gpus_uuid(make_slicer, tmp_path: Path) -> None:
    """NVML's numbering changed since the slice was made (a card added or removed): the journal's
    index names another GPU now, with an instance of the same profile at the same placement. The
    delete goes to the slice's GPU, found by its UUID, and leaves the other GPU's instance alone."""
    from runtimekit.slicer.journal import Journal

    slicer, _, node = make_slicer()
    await slicer.start()
    made = await slicer.create(mig(device="0"))
    await slicer.close()
    (ours,) = node.gpu_instances(0)
    other = node.create_gpu_instance(1, made.profile_id, made.placement[0])
    node.create_compute_instance(1, other.id, next(iter(ours.cis.values())).profile.id)
    journal = Journal.in_state_dir(tmp_path)
    journal.update(made.id, gpu_index=1)
    journal.close()

    slicer, _, node = make_slicer()  # the same driver state, a new agent
    await slicer.start()
    await slicer.delete(made.id)
    assert node.gpu_instances(0) == []
    assert [gi.id for gi in node.gpu_instances(1)] == [other.id]
    await slicer.close()


async def test_deleting_a_mig_slice_whose_gpu_is_not_on_the_node_is_refused_and_changes_nothing(rig) -> None:
    from dataclasses import replace

    from runtimekit.state.node import SamplerStats

    slicer, state, node = rig
    made = await slicer.create(mig(device="0"))
    sample = state.view().snapshot
    state.publish_snapshot(replace(sample, gpus=tuple(g for g in sample.gpus if g.index != 0)), SamplerStats())
    with pytest.raises(SliceError) as refused:
        await slicer.delete(made.id)
    assert (refused.value.code, refused.value.field) == ("failed_precondition", "slice_id")
    assert made.gpu.uuid in str(refused.value)
    assert slicer.table().slices[made.id].state == "ready" and len(node.gpu_instances(0)) == 1


async def test_close_waits_for_the_change_in_flight_and_later_calls_are_unavailable(rig) -> None:
    """A create waiting on the lock when close is called either runs on the open journal, before
    close, or is refused as unavailable: never a step on a closed journal. The executor is held
    (a gate) so the order of the queued steps is fixed, and the event loop is held (waiting on the
    executor) so that close cannot finish in between."""
    import asyncio
    import threading

    slicer, _, _ = rig
    gate = threading.Event()
    executor = slicer._executor
    held = executor.submit(gate.wait)
    await slicer._lock.acquire()  # a change in flight
    create = asyncio.create_task(slicer.create(tdm(10, "1GiB")))
    await asyncio.sleep(0)
    close = asyncio.create_task(slicer.close())
    await asyncio.sleep(0)
    slicer._lock.release()
    for _ in range(3):
        await asyncio.sleep(0)
    drained = executor.submit(lambda: None)
    gate.set()
    drained.result(timeout=10)  # everything queued so far has run, the loop held meanwhile
    held.result()
    try:
        made = await create
    except SliceError as error:
        assert error.code == "unavailable"
    else:
        assert made.state == "ready"
    await close
    with pytest.raises(SliceError) as after:
        await slicer.create(tdm(10, "1GiB"))
    assert after.value.code == "unavailable"


async def test_device_any_checks_the_memory_of_the_largest_card_of_the_requested_mode(tmp_path: Path, uninstall) -> None:
    """GPUs 0-1 (MIG) have 80 GB, 2-7 (TDM) 40 GB: a 60 GiB TDM slice fits no TDM card at all."""
    from dataclasses import replace

    from slicer_driver import build

    from runtimekit import sim

    scenario = sim.load_scenario("dgx-a100")
    gpus = tuple(g if g.index < 2 else replace(g, model=replace(g.model, memory_total_mib=40960)) for g in scenario.gpus)
    node = sim.SimulatedNode(replace(scenario, gpus=gpus), seed=1, load="idle")
    slicer, _, _ = build(tmp_path, node)
    await slicer.start()
    try:
        with pytest.raises(SliceError) as refused:
            await slicer.create(tdm(10, "60GiB"))
        assert (refused.value.code, refused.value.field) == ("invalid_argument", "memory")
        assert "40960 MiB" in str(refused.value)
    finally:
        await slicer.close()


@pytest.mark.parametrize("device", ["8", "GPU-00000000-0000-0000-0000-000000000000"])
async def test_a_device_the_node_does_not_have_is_not_found(rig, device: str) -> None:
    slicer, _, _ = rig
    for attempt in (slicer.create(tdm(10, "1GiB", device=device)), slicer.set_device_mode(device, "mig")):
        with pytest.raises(SliceError) as refused:
            await attempt
        assert (refused.value.code, refused.value.field) == ("not_found", "device")
        assert str(refused.value) == f"device: no usable GPU {device} on this node (GPUs: 0, 1, 2, 3, 4, 5, 6, 7)"


@pytest.mark.parametrize("device", ["", "any", "-1", "abc", "1024"])
async def test_a_mode_change_names_one_card_and_says_so(rig, device: str) -> None:
    slicer, _, _ = rig
    with pytest.raises(SliceError) as refused:
        await slicer.set_device_mode(device, "mig")
    assert (refused.value.code, refused.value.field) == ("invalid_argument", "device")
    assert str(refused.value) == ("device: a GPU index 0-1023 or a GPU UUID (GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx): "
                                  f"a mode is set per card, got {device!r}")


async def test_asking_a_card_with_slices_for_the_mode_it_has_changes_nothing_and_is_not_refused(rig) -> None:
    slicer, _, node = rig
    await slicer.create(mig(device="1"))
    info = await slicer.set_device_mode("1", "mig")
    assert (info.mode, info.pending) == ("mig", None) and node.mig_mode(1) == (True, True)


async def test_no_mig_card_names_a_way_out_that_would_be_accepted(rig) -> None:
    """The hint never names a card with slices: a change to cancel, a card to switch, a reset to wait for."""
    slicer, _, node = rig

    async def hint() -> str:
        with pytest.raises(SliceError) as refused:
            await slicer.create(mig())
        assert (refused.value.code, refused.value.field) == ("failed_precondition", "mode")
        return str(refused.value)

    for index in (0, 1):
        await slicer.set_device_mode(str(index), "tdm")  # the two MIG cards, leaving MIG at their next reset
    assert await hint() == "mode: every card in mig mode has a mode change pending; runtimekit device mode 0 mig cancels it"
    for index in (0, 1):
        node.reset_gpu(index)
    await slicer.reconcile()
    made = [await slicer.create(tdm(10, "1GiB", device=str(index))) for index in range(8)]
    assert await hint() == ("mode: no card is in mig mode, and every card that could be has slices (GPU 0, 1, 2, 3, 4, "
                            "5, 6, 7): a card's mode changes only when it has none")
    await slicer.delete(made[5].id)
    assert await hint() == ("mode: no card is in mig mode; switch a card with no slices: runtimekit device mode 5 mig "
                            "(it takes effect after a GPU reset)")
    await slicer.set_device_mode("5", "mig")
    assert await hint() == "mode: no card is in mig mode yet; GPU 5 will be after a GPU reset (its mode change is pending)"


async def test_no_slice_goes_to_a_card_the_health_checker_allows_no_new_work_on(rig) -> None:
    slicer, state, _ = rig
    publish_verdict(state, {2: "gpu_lost"})
    with pytest.raises(SliceError) as refused:
        await slicer.create(tdm(10, "1GiB", device="2"))
    assert (refused.value.code, refused.value.field) == ("failed_precondition", "device")
    assert str(refused.value) == ("device: GPU 2 takes no new work now, by the health checker "
                                  "(GPU 2 is unhealthy: gpu_lost)")
    placed = {(await slicer.create(tdm(90, "1GiB"))).gpu.index for _ in range(5)}  # any card: never GPU 2
    assert 2 not in placed and len(placed) == 5
    publish_verdict(state, {index: "row_remap_failure" for index in range(2, 8)})  # every TDM card
    with pytest.raises(SliceError) as none:
        await slicer.create(tdm(10, "1GiB"))
    assert str(none.value).startswith("device: every card in tdm mode takes no new work now, by the health checker "
                                      "(GPU 2 is unhealthy: row_remap_failure; GPU 3 is unhealthy: row_remap_failure;")
    publish_verdict(state, {})
    assert (await slicer.create(tdm(10, "1GiB", device="2"))).gpu.index == 2  # healthy again: taken
