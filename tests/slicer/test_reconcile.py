"""Reconciliation on a simulated dgx-a100: orphan MIG instances, stray CDI specs, gone owners."""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType

import pytest

from runtimekit.attribution.types import AttributionSnapshot, DeviceAllocation, SourceStatus
from runtimekit.attribution.types import Owner as PodOwner
from runtimekit.gpu.mig import MigOpError
from runtimekit.gpu.nvml import GpuLostError
from runtimekit.slicer.journal import Journal, Record
from runtimekit.state import SLICES
from runtimekit.state.refs import GpuRef, MigRef
from runtimekit.state.slices import SliceError, SliceRequest, SliceSpec

POD_UID = "0b8e6b5c-1f7a-4c1e-9a53-3c8e2f1d7a10"

KUBELET_UP = MappingProxyType({"kubelet": SourceStatus(up=True, last_success=0.0)})


def orphan(node, gpu: int = 0) -> tuple[int, int]:
    """A GPU instance with one compute instance that no slice made (3g.40gb at 0)."""
    gi = node.create_gpu_instance(gpu, 9, 0)
    ci = node.create_compute_instance(gpu, gi.id, 2)
    return gi.id, ci.id


async def test_an_orphan_instance_lives_out_its_grace_then_is_destroyed(make_slicer) -> None:
    slicer, _, node = make_slicer(orphan_grace_seconds=3600)
    orphan(node)
    await slicer.start()
    assert (await slicer.reconcile()).orphans_destroyed == ()
    assert len(node.gpu_instances(0)) == 1
    await slicer.close()
    slicer, state, node = make_slicer(orphan_grace_seconds=0)  # the same node state, a new agent
    state.publish_attribution(AttributionSnapshot(refreshed_at=0.0, sources=KUBELET_UP))
    await slicer.start()
    assert node.gpu_instances(0) == []
    await slicer.close()


async def test_an_orphan_with_a_process_is_never_destroyed(make_slicer) -> None:
    slicer, state, node = make_slicer(orphan_grace_seconds=0)
    state.publish_attribution(AttributionSnapshot(refreshed_at=0.0, sources=KUBELET_UP))
    gi, ci = orphan(node)
    node.add_process(0, 1 << 30, gpu_instance=gi, compute_instance=ci)
    await slicer.start()
    await slicer.reconcile()
    assert [g.id for g in node.gpu_instances(0)] == [gi]
    assert len(node.gpu_instances(0)[0].cis) == 1
    await slicer.close()


async def test_a_stray_cdi_spec_is_removed_and_a_slices_kept(rig, tmp_path: Path) -> None:
    slicer, _, _ = rig
    made = await slicer.create(SliceRequest(mode="tdm", compute=10, memory="1GiB", owner_id="me"))
    stray = tmp_path / "cdi" / "runtimekit_io-slice-s-0123456789ab.json"
    stray.write_text("{}")
    assert (await slicer.reconcile()).specs_removed == ("s-0123456789ab",)
    assert [p.name for p in (tmp_path / "cdi").iterdir()] == [f"runtimekit_io-slice-{made.id}.json"]


async def test_a_slice_whose_pod_is_gone_is_reclaimed_only_when_the_pods_are_known(make_slicer) -> None:
    slicer, state, node = make_slicer(owner_grace_seconds=0)
    await slicer.start()
    pod = await slicer.create(SliceRequest(mode="mig", compute=10, memory="10GiB", pod_uid=POD_UID, container="main"))
    free = await slicer.create(SliceRequest(mode="tdm", compute=10, memory="1GiB", owner_id="me"))
    await slicer.reconcile()  # no attribution: unknown, nothing reclaimed
    state.publish_attribution(AttributionSnapshot(refreshed_at=0.0, sources=KUBELET_UP))  # the CRI runtime not listed yet: unknown
    await slicer.reconcile()
    assert set(slicer.table().slices) == {pod.id, free.id}
    state.publish_attribution(AttributionSnapshot(refreshed_at=0.0, sources=KUBELET_UP, pod_uids=frozenset({POD_UID})))
    await slicer.reconcile()
    assert set(slicer.table().slices) == {pod.id, free.id}
    state.publish_attribution(AttributionSnapshot(refreshed_at=0.0, sources=KUBELET_UP, pod_uids=frozenset()))
    await slicer.reconcile()
    assert set(slicer.table().slices) == {free.id}
    assert node.gpu_instances(pod.gpu.index) == []
    await slicer.close()


@pytest.mark.parametrize("sampled", [True, False], ids=["mig-device-sampled", "mig-device-not-sampled-yet"])
async def test_an_orphan_the_kubelet_allocated_to_a_pod_is_kept(make_slicer, sampled: bool) -> None:
    """The pod's container has not started a CUDA process yet: the instance is in use all the same.
    Matched by the MIG identity attribution found, or by the allocated device id (a MIG UUID) alone."""
    slicer, state, node = make_slicer(orphan_grace_seconds=0)
    gi, ci = orphan(node)
    (instance,) = node.gpu_instances(0)
    mig_uuid = instance.cis[ci].uuid
    gpu = GpuRef(state.view().snapshot.gpus[0].identity.uuid, 0)
    allocation = DeviceAllocation(PodOwner("ns", "pod", "main", POD_UID), "nvidia.com/mig-3g.40gb", mig_uuid, gpu.uuid, 0,
                                  MigRef(gpu, gi, ci, mig_uuid) if sampled else None)
    state.publish_attribution(AttributionSnapshot(refreshed_at=0.0, sources=KUBELET_UP, allocations=(allocation,)))
    await slicer.start()
    assert (await slicer.reconcile()).orphans_destroyed == ()
    assert [g.id for g in node.gpu_instances(0)] == [gi]
    state.publish_attribution(AttributionSnapshot(refreshed_at=0.0, sources=KUBELET_UP))  # the pod is gone
    assert len((await slicer.reconcile()).orphans_destroyed) == 1
    assert node.gpu_instances(0) == []
    await slicer.close()


async def test_no_orphan_is_destroyed_while_the_attribution_is_unknown(make_slicer) -> None:
    slicer, state, node = make_slicer(orphan_grace_seconds=0)
    gi, _ = orphan(node)
    await slicer.start()  # no attribution yet: which pods hold which instance is unknown
    assert (await slicer.reconcile()).orphans_destroyed == ()
    assert [g.id for g in node.gpu_instances(0)] == [gi]
    state.publish_attribution(AttributionSnapshot(refreshed_at=0.0, sources=KUBELET_UP))
    await slicer.reconcile()
    assert node.gpu_instances(0) == []
    await slicer.close()


async def test_a_rollback_by_placement_keeps_an_instance_that_has_a_compute_instance(make_slicer, tmp_path: Path) -> None:
    """A slice journaled ``creating`` with no GPU instance id (killed before NVML answered, or before
    its instance was made) intends 3g.40gb at 0; someone else made an instance there with a compute
    instance, which the slice never made (its compute instance comes after its id is journaled).
    Rolling back forgets the slice and leaves that instance alone."""
    slicer, state, node = make_slicer()
    gi, _ = orphan(node)
    spec = SliceSpec(mode="mig", compute=30, memory_mib=20480)
    journal = Journal.in_state_dir(tmp_path)
    journal.insert(Record(id="s-0123456789ab", phase="creating", spec=spec, gpu_uuid=state.view().snapshot.gpus[0].identity.uuid,
                          gpu_index=0, created_at=0.0, compute=42, memory_mib=40192, profile="3g.40gb", profile_id=9,
                          start=0, size=4))
    journal.close()
    await slicer.start()
    assert slicer.table().slices == {}
    assert [g.id for g in node.gpu_instances(0)] == [gi] and len(node.gpu_instances(0)[0].cis) == 1
    await slicer.close()


async def test_no_orphan_is_destroyed_while_the_kubelet_is_down(make_slicer) -> None:
    """With the kubelet's source down its allocations read empty: an instance it handed a pod would look free."""
    slicer, state, node = make_slicer(orphan_grace_seconds=0)
    gi, _ = orphan(node)
    await slicer.start()
    down = MappingProxyType({"kubelet": SourceStatus(up=False, error="nothing answers")})
    state.publish_attribution(AttributionSnapshot(refreshed_at=0.0, sources=down))
    assert (await slicer.reconcile()).orphans_destroyed == ()
    assert [g.id for g in node.gpu_instances(0)] == [gi]


async def test_a_pass_that_changes_nothing_publishes_nothing(rig) -> None:
    """The reconciler passes every few seconds; a new version of an unchanged slice table would
    wake every reader and make the rendered exposition stale (an extra render per scrape)."""
    slicer, state, _ = rig
    before = state.view().versions.get(SLICES, 0)
    assert before > 0, "the table is published at start"
    await slicer.reconcile()
    await slicer.reconcile()
    assert state.view().versions.get(SLICES, 0) == before
    made = await slicer.create(SliceRequest(mode="tdm", compute=10, memory="1GiB", owner_id="me"))
    assert state.view().versions.get(SLICES, 0) > before
    assert made.id in state.view().slices.slices


async def test_a_gpu_lost_in_the_middle_of_a_pass_fails_that_pass_not_the_slicer(make_slicer, monkeypatch) -> None:
    """The GPU falls off the bus between reading the cards and destroying an instance (the MIG
    calls let GpuLostError through): the pass ends, the record says why, the next pass goes on."""
    slicer, state, node = make_slicer(orphan_grace_seconds=0)
    await slicer.start()  # no attribution yet: no orphan is destroyed at the start
    made = await slicer.create(SliceRequest(mode="mig", compute=30, memory="20GiB", owner_id="me", device="0"))
    orphan(node, gpu=1)

    def lost(*_: object) -> None:
        raise GpuLostError("GPU is lost (NVML_ERROR_GPU_IS_LOST)")

    monkeypatch.setattr(type(slicer._mig), "destroy_compute_instance", lost)
    with pytest.raises(SliceError) as refused:  # left deleting, for the reconciler
        await slicer.delete(made.id)
    assert refused.value.code == "unavailable"
    state.publish_attribution(AttributionSnapshot(refreshed_at=0.0, sources=KUBELET_UP))  # orphans may go now
    outcome = await slicer.reconcile()
    assert outcome.finished == () and outcome.orphans_destroyed == ()
    assert "GPU is lost" in slicer.table().slices[made.id].reason
    monkeypatch.undo()
    outcome = await slicer.reconcile()
    assert outcome.finished == (made.id,) and len(outcome.orphans_destroyed) == 1
    await slicer.close()


async def test_deleting_a_slice_left_creating_destroys_the_instance_it_made(make_slicer, tmp_path: Path, monkeypatch) -> None:
    """A create made its GPU instance but never journaled its id, and the rollback was refused: the
    slice is left ``creating``. Deleting it destroys that instance (found by its intended placement),
    as the reconciler's rollback would; it used to be forgotten with its instance left behind."""
    slicer, state, node = make_slicer()
    made = node.create_gpu_instance(0, 9, 0)  # what the create made before the kill: no compute instance
    spec = SliceSpec(mode="mig", compute=30, memory_mib=20480)
    journal = Journal.in_state_dir(tmp_path)
    journal.insert(Record(id="s-0123456789ab", phase="creating", spec=spec, gpu_uuid=state.view().snapshot.gpus[0].identity.uuid,
                          gpu_index=0, created_at=0.0, compute=42, memory_mib=40192, profile="3g.40gb", profile_id=9,
                          start=0, size=4))
    journal.close()

    def refused(*_: object) -> None:
        raise MigOpError("error", "nvmlGpuInstanceDestroy: NVML_ERROR_UNKNOWN")

    monkeypatch.setattr(type(slicer._mig), "destroy_gpu_instance", refused)
    await slicer.start()  # the rollback is refused: the slice stays creating
    assert slicer.table().slices["s-0123456789ab"].state == "creating"
    monkeypatch.undo()
    await slicer.delete("s-0123456789ab")
    assert slicer.table().slices == {} and made.id not in [g.id for g in node.gpu_instances(0)]
    await slicer.close()
