"""MIG device ids from the kubelet reach their parent GPU and instance; pod usage is per MIG instance.

Driven end to end where it matters: the simulated dgx-a100 (GPUs 0 and 1 start in MIG mode) read by
the real NodeReader, the kubelet's pod-resources answer over a unix socket, the Attributor's pass,
and the pod collector's series.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from runtimekit import sim
from runtimekit.attribution.attributor import Attributor
from runtimekit.attribution.cri import CriClient
from runtimekit.attribution.join import join_processes, resolve_allocations
from runtimekit.attribution.podresources import PodResourcesClient
from runtimekit.attribution.procfs import ProcessReader
from runtimekit.attribution.types import Owner, ProcessFacts
from runtimekit.exporter.collectors.pod import PodCollector
from runtimekit.gpu.reader import NodeReader
from runtimekit.gpu.types import is_available
from runtimekit.sim.kubelet import FakePodResourcesServer
from runtimekit.sim.mig_profiles import ci_profiles
from runtimekit.sim.pods import SimContainer, SimDevice, SimPod
from runtimekit.state import NodeState

GiB = 1 << 30
MIG_RESOURCE = "nvidia.com/mig-3g.40gb"
OWNER = Owner(namespace="ml", pod="infer-0", container="server")


@pytest.fixture
def a100():
    """The dgx-a100 scenario installed below pynvml, with two 3g.40gb instances on GPU 0 (in MIG
    mode from the scenario); yields (node, [(GI, CI), ...])."""
    node = sim.SimulatedNode(sim.load_scenario("dgx-a100"), seed=1, clock=lambda: 1_750_000_000.0, load="idle")
    sim.install(node)
    try:
        instances = []
        for start in (0, 4):
            gi = node.create_gpu_instance(0, 9, start)  # 3g.40gb
            full = next(p for p in ci_profiles(gi.profile) if p.compute_slices == gi.profile.compute_slices)
            instances.append((gi, node.create_compute_instance(0, gi.id, full.id)))
        yield node, instances
    finally:
        sim.uninstall()


def sample():
    reader = NodeReader(clock=lambda: 1_750_000_000.0)
    try:
        return reader.sample()
    finally:
        reader.close()


def test_a_mig_device_id_resolves_to_its_parent_gpu_and_instance(a100):
    _, [(gi, ci), _] = a100
    snapshot = sample()
    gpu0, gpu2 = snapshot.gpus[0], snapshot.gpus[2]
    rows = [(OWNER, MIG_RESOURCE, ci.uuid), (OWNER, "nvidia.com/gpu", gpu2.uuid),
            (OWNER, MIG_RESOURCE, "MIG-00000000-0000-0000-0000-000000000000")]
    by_id = {a.device_id: a for a in resolve_allocations(rows, snapshot)}
    mig = by_id[ci.uuid]
    assert (mig.gpu_uuid, mig.gpu_index) == (gpu0.uuid, 0)
    assert mig.mig is not None and (mig.mig.gpu_instance_id, mig.mig.compute_instance_id) == (gi.id, ci.id)
    assert (by_id[gpu2.uuid].gpu_index, by_id[gpu2.uuid].mig) == (2, None)
    unknown = by_id["MIG-00000000-0000-0000-0000-000000000000"]  # no sampled MIG device has it
    assert (unknown.gpu_uuid, unknown.gpu_index, unknown.mig) == (None, None, None)


def test_pod_usage_is_per_mig_instance(a100):
    node, [(gi_a, ci_a), (gi_b, ci_b)] = a100
    pids = [node.add_process(0, 3 * GiB, gpu_instance=gi.id, compute_instance=ci.id) for gi, ci in ((gi_a, ci_a), (gi_b, ci_b))]
    pids.append(node.add_process(0, 1 * GiB, gpu_instance=gi_b.id, compute_instance=ci_b.id))
    facts = {pid: ProcessFacts(pid, "python", ("python",), 1.0, GiB, OWNER) for pid in pids}
    _, pods, _ = join_processes(sample(), facts, 256)
    usage = {(p.gpu_index, p.gpu_instance_id, p.compute_instance_id): p for p in pods}
    assert set(usage) == {(0, gi_a.id, ci_a.id), (0, gi_b.id, ci_b.id)}
    assert usage[(0, gi_b.id, ci_b.id)].used_memory_bytes == 4 * GiB and usage[(0, gi_b.id, ci_b.id)].processes == 2
    assert not is_available(usage[(0, gi_a.id, ci_a.id)].sm_utilization)  # not attributable in MIG


async def test_kubelet_mig_id_reaches_the_parent_gpus_pod_series(a100, tmp_path):
    _, [(gi, ci), _] = a100
    pod = SimPod("infer-0", "ml", "11111111-2222-3333-4444-555555555555",
                 (SimContainer("server", "a" * 64, (SimDevice(MIG_RESOURCE, ci.uuid),)),))
    server = FakePodResourcesServer(lambda: (pod,), str(tmp_path / "kubelet.sock"))
    await server.start()
    state = NodeState()
    attributor = Attributor(state, kubelet=PodResourcesClient(str(tmp_path / "kubelet.sock")),
                            cri=CriClient(str(tmp_path / "no-cri.sock")), proc=ProcessReader(str(tmp_path)))
    try:
        snapshot = sample()
        parent = snapshot.gpus[0].uuid
        # A cycle before the instance was sampled: the id cannot be placed yet. The kubelet's answer
        # stays the same; the next cycle, with the MIG device sampled, places it.
        before = replace(snapshot, gpus=(replace(snapshot.gpus[0], mig_devices=()), *snapshot.gpus[1:]))
        [early] = (await attributor.attribute(before)).allocations
        assert (early.gpu_uuid, early.gpu_index) == (None, None)
        await attributor.attribute(snapshot)
    finally:
        await attributor.close()
        await server.stop()

    allocated = next(f for f in PodCollector().collect(state.view()) if f.name == "runtimekit_pod_gpu_allocated")
    [series] = allocated.samples
    assert series.labels == {
        "namespace": "ml", "pod": "infer-0", "container": "server", "resource": MIG_RESOURCE, "device_id": ci.uuid,
        "gpu": "0", "uuid": parent, "gpu_instance": str(gi.id), "compute_instance": str(ci.id),
    }
    assert series.value == 1.0
