"""Reconciliation on a simulated dgx-a100: orphan MIG instances, stray CDI specs, gone owners."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from runtimekit.state.slices import SliceRequest

POD_UID = "0b8e6b5c-1f7a-4c1e-9a53-3c8e2f1d7a10"


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
    slicer, _, node = make_slicer(orphan_grace_seconds=0)  # the same node state, a new agent
    await slicer.start()
    assert node.gpu_instances(0) == []
    await slicer.close()


async def test_an_orphan_with_a_process_is_never_destroyed(make_slicer) -> None:
    slicer, _, node = make_slicer(orphan_grace_seconds=0)
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
    state.publish_attribution(SimpleNamespace(pod_uids=frozenset({POD_UID})))
    await slicer.reconcile()
    assert set(slicer.table().slices) == {pod.id, free.id}
    state.publish_attribution(SimpleNamespace(pod_uids=frozenset()))
    await slicer.reconcile()
    assert set(slicer.table().slices) == {free.id}
    assert node.gpu_instances(pod.gpu.index) == []
    await slicer.close()
