"""The live pods' UIDs the attribution publishes (what the slicer reclaims by): the pods with a ready
sandbox in the CRI runtime's ListPodSandbox. A crash-looping pod keeps its ready sandbox between
restarts, so it stays live with no running container; a pod that finished for good (Succeeded,
Failed) has only a stopped sandbox, so it is not live, though the runtime still lists its exited
containers until the pod is deleted. While the runtime cannot be asked, the set is unknown (None),
never empty; a last answer is kept for ``cache_seconds`` and the runtime is asked again every
``cri_refresh_seconds``."""

from __future__ import annotations

from runtimekit.attribution.attributor import Attributor
from runtimekit.attribution.cri import ContainerInfo, SandboxInfo
from runtimekit.attribution.errors import SourceError, SourceUnavailable
from runtimekit.attribution.podresources import PodDevices
from runtimekit.attribution.procfs import ProcessReader
from runtimekit.gpu.types import DriverInfo, NodeSnapshot
from runtimekit.state import NodeState

SNAPSHOT = NodeSnapshot(sampled_at=100.0, duration_seconds=0.01, nvml_up=True, nvml_error="",
                        driver=DriverInfo("550.54.15", "12.4", "12.550.54.15"), device_count=0, gpus=())


class Kubelet:
    async def list(self):
        return []

    async def close(self):
        return None


class Runtime:
    """A CRI runtime answering from plain lists; ``up`` False: nothing answers, ``sandboxes_up``
    False: only ListPodSandbox fails."""

    def __init__(self, containers=(), sandboxes=(), up=True):
        self.containers, self.sandboxes, self.up, self.sandboxes_up = list(containers), list(sandboxes), up, True
        self.asked: list[str] = []

    async def list_containers(self, *, running_only=True):
        self.asked.append(f"containers(running_only={running_only})")
        if not self.up:
            raise SourceUnavailable("cri", "/run/containerd/containerd.sock", "nothing answers")
        return [c for c in self.containers if c.state == "running" or not running_only]

    async def list_pod_sandboxes(self):
        self.asked.append("sandboxes")
        if not self.up:
            raise SourceUnavailable("cri", "/run/containerd/containerd.sock", "nothing answers")
        if not self.sandboxes_up:
            raise SourceError("cri", "/run/containerd/containerd.sock", "ListPodSandbox failed", "INTERNAL")
        return self.sandboxes

    async def close(self):
        return None


class Clock:
    def __init__(self, t=100.0):
        self.t = t

    def __call__(self):
        return self.t


def _attributor(runtime, tmp_path, clock=None, **kwargs) -> Attributor:
    kwargs.setdefault("cache_seconds", 0)
    return Attributor(NodeState(), kubelet=Kubelet(), cri=runtime, proc=ProcessReader(str(tmp_path)),  # type: ignore[arg-type]
                      clock=clock or Clock(), **kwargs)


def container(cid, pod, uid, state):
    return ContainerInfo(cid * 64, "main", pod, "prod", uid, state)


def sandbox(sid, pod, uid, ready):
    return SandboxInfo(sid * 64, pod, "prod", uid, ready)


async def test_a_crash_looping_pod_keeps_its_ready_sandbox_and_stays_live(tmp_path):
    runtime = Runtime([container("a", "web-0", "uid-running", "running"),
                       container("b", "train-0", "uid-crashlooping", "exited")],
                      [sandbox("1", "web-0", "uid-running", True), sandbox("2", "train-0", "uid-crashlooping", True)])
    attribution = await _attributor(runtime, tmp_path).attribute(SNAPSHOT)
    assert attribution.pod_uids == frozenset({"uid-running", "uid-crashlooping"})


async def test_a_finished_pod_with_a_stopped_sandbox_is_not_live_though_its_container_is_listed(tmp_path):
    """A Job pod that Succeeded (or a restartPolicy Never pod that Failed): the kubelet stopped its
    sandbox and keeps its exited container until the pod is deleted."""
    runtime = Runtime([container("a", "web-0", "uid-running", "running"),
                       container("b", "job-0", "uid-succeeded", "exited"),
                       container("c", "job-1", "uid-failed", "exited")],
                      [sandbox("1", "web-0", "uid-running", True), sandbox("2", "job-0", "uid-succeeded", False),
                       sandbox("3", "job-1", "uid-failed", False)])
    attribution = await _attributor(runtime, tmp_path).attribute(SNAPSHOT)
    assert attribution.pod_uids == frozenset({"uid-running"})


async def test_a_pod_is_live_while_any_of_its_sandboxes_is_ready(tmp_path):
    """A sandbox that died is replaced by a new attempt; the old one stays listed, not ready."""
    runtime = Runtime([], [sandbox("1", "web-0", "uid-web", False), sandbox("2", "web-0", "uid-web", True)])
    attribution = await _attributor(runtime, tmp_path).attribute(SNAPSHOT)
    assert attribution.pod_uids == frozenset({"uid-web"})


async def test_a_starting_pod_is_live_before_its_first_container(tmp_path):
    """RunPodSandbox comes before any container is created (image pulls take time)."""
    runtime = Runtime([], [sandbox("1", "train-0", "uid-starting", True)])
    attribution = await _attributor(runtime, tmp_path).attribute(SNAPSHOT)
    assert attribution.pod_uids == frozenset({"uid-starting"})


async def test_a_deleted_pod_is_gone(tmp_path):
    runtime = Runtime([container("a", "web-0", "uid-web", "running"), container("b", "web-0", "uid-old", "exited")],
                      [sandbox("1", "web-0", "uid-web", True), sandbox("2", "web-0", "uid-old", False)])  # made again
    clock = Clock()
    attributor = _attributor(runtime, tmp_path, clock, cri_refresh_seconds=1)
    assert (await attributor.attribute(SNAPSHOT)).pod_uids == frozenset({"uid-web"})
    runtime.containers, runtime.sandboxes = [], []
    clock.t += 1
    assert (await attributor.attribute(SNAPSHOT)).pod_uids == frozenset()


async def test_pods_are_unknown_while_the_runtime_cannot_be_asked(tmp_path):
    attribution = await _attributor(Runtime(up=False), tmp_path).attribute(SNAPSHOT)
    assert attribution.pod_uids is None


async def test_pods_are_unknown_when_only_the_sandbox_list_fails(tmp_path):
    """Containers alone cannot tell a finished pod from a crash-looping one: no guess."""
    runtime = Runtime([container("a", "web-0", "uid-web", "running")])
    runtime.sandboxes_up = False
    attributor = _attributor(runtime, tmp_path)
    attribution = await attributor.attribute(SNAPSHOT)
    assert attribution.pod_uids is None
    assert not attribution.sources["cri"].up and "ListPodSandbox" in attribution.sources["cri"].error


async def test_the_last_answer_is_kept_for_cache_seconds_then_unknown(tmp_path):
    runtime = Runtime([], [sandbox("1", "web-0", "uid-web", True)])
    clock = Clock()
    attributor = _attributor(runtime, tmp_path, clock, cri_refresh_seconds=1, cache_seconds=10)
    assert (await attributor.attribute(SNAPSHOT)).pod_uids == frozenset({"uid-web"})
    runtime.up = False
    clock.t += 5
    assert (await attributor.attribute(SNAPSHOT)).pod_uids == frozenset({"uid-web"})
    clock.t += 6  # 11 s after the last answer
    assert (await attributor.attribute(SNAPSHOT)).pod_uids is None


async def test_sandboxes_are_listed_every_cri_refresh_seconds_not_every_cycle(tmp_path):
    runtime = Runtime([], [sandbox("1", "job-0", "uid-job", True)])
    clock = Clock()
    attributor = _attributor(runtime, tmp_path, clock, cri_refresh_seconds=30)
    await attributor.attribute(SNAPSHOT)
    runtime.sandboxes = [sandbox("1", "job-0", "uid-job", False)]  # the job finished
    clock.t += 29
    assert (await attributor.attribute(SNAPSHOT)).pod_uids == frozenset({"uid-job"})
    clock.t += 1
    assert (await attributor.attribute(SNAPSHOT)).pod_uids == frozenset()
    assert runtime.asked == ["containers(running_only=False)", "sandboxes"] * 2


async def test_the_kubelets_allocations_carry_the_pods_uid_from_the_runtime(tmp_path):
    """pod-resources names a pod by namespace and name only; the runtime's containers give its UID
    (what a slice's owner names), "" while the runtime does not know the pod."""

    class Allocating(Kubelet):
        async def list(self):
            return [PodDevices("web-0", "prod", "main", "nvidia.com/gpu", ("GPU-a",)),
                    PodDevices("new-0", "prod", "main", "nvidia.com/gpu", ("GPU-b",))]

    runtime = Runtime([container("a", "web-0", "uid-web", "running")], [sandbox("1", "web-0", "uid-web", True)])
    attributor = Attributor(NodeState(), kubelet=Allocating(), cri=runtime, proc=ProcessReader(str(tmp_path)),  # type: ignore[arg-type]
                            clock=Clock(), cache_seconds=0)
    attribution = await attributor.attribute(SNAPSHOT)
    assert {a.owner.pod: a.owner.pod_uid for a in attribution.allocations} == {"web-0": "uid-web", "new-0": ""}
