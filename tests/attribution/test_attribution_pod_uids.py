"""The live pods' UIDs the attribution publishes (what the slicer reclaims by): every container the
CRI runtime lists counts, an exited one too — a crash-looping pod has no running container between
restarts, yet it is still there and must keep its slices. While the runtime cannot be asked, the
set is unknown (None), never empty."""

from __future__ import annotations

from runtimekit.attribution.attributor import Attributor
from runtimekit.attribution.cri import ContainerInfo
from runtimekit.attribution.errors import SourceUnavailable
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
    def __init__(self, containers, up=True):
        self.containers, self.up, self.asked = containers, up, []

    async def list_containers(self, *, running_only=True):
        self.asked.append(running_only)
        if not self.up:
            raise SourceUnavailable("cri", "/run/containerd/containerd.sock", "nothing answers")
        return [c for c in self.containers if c.state == "running" or not running_only]

    async def close(self):
        return None


def _attributor(runtime, tmp_path) -> Attributor:
    return Attributor(NodeState(), kubelet=Kubelet(), cri=runtime, proc=ProcessReader(str(tmp_path)),  # type: ignore[arg-type]
                      cache_seconds=0, clock=lambda: 100.0)


async def test_a_pod_whose_only_container_exited_is_still_live(tmp_path):
    runtime = Runtime([ContainerInfo("a" * 64, "app", "web-0", "prod", "uid-running", "running"),
                       ContainerInfo("b" * 64, "trainer", "job-0", "prod", "uid-crashlooping", "exited")])
    attribution = await _attributor(runtime, tmp_path).attribute(SNAPSHOT)
    assert attribution.pod_uids == frozenset({"uid-running", "uid-crashlooping"})
    assert runtime.asked == [False]


async def test_pods_are_unknown_while_the_runtime_cannot_be_asked(tmp_path):
    attribution = await _attributor(Runtime([], up=False), tmp_path).attribute(SNAPSHOT)
    assert attribution.pod_uids is None


