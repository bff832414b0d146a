"""The gang controller wired to the fake API server, for the controller's tests: the fake served on
a local port, a kubeconfig naming it, the real ``kubernetes`` client, the real placer, the
controller's informers running. ``settle()`` waits until the informers hold what the fake holds
(pods and nodes, by resourceVersion), then runs one decision round."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from typing import Any

from runtimekit.kube.gang.config import GangConfig, load
from runtimekit.kube.gang.controller import GangController
from runtimekit.kube.gang.gangs import GANG_LABEL, GANG_SIZE, GATE, JOBSET_NAME, RESTART_ATTEMPT
from runtimekit.kube.gang.kubeapi import ClusterApi
from runtimekit.kube.gang.placer import Placer
from runtimekit.kube.kubeclient import api_client
from tests.gang.fake_cluster_api import FakeClusterApi
from tests.kube_fakes import serve

SPINE, LEAF = "network.topology.nvidia.com/spine", "network.topology.nvidia.com/leaf"
MERGE = "application/merge-patch+json"
_clock = itertools.count()


def _created() -> str:
    n = next(_clock)
    return f"2026-01-01T{n // 3600 % 24:02d}:{n // 60 % 60:02d}:{n % 60:02d}Z"


def _pod(name: str, labels: dict, annotations: dict, gpus: int, owned: bool, node_selector: dict | None) -> dict:
    meta: dict[str, Any] = {"name": name, "namespace": "default", "labels": labels, "annotations": annotations,
                            "creationTimestamp": _created()}
    if owned:
        meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": f"{name}-job", "uid": f"uid-{name}-job",
                                    "controller": True}]
    spec: dict[str, Any] = {"schedulingGates": [{"name": GATE}], "containers": [
        {"name": "main", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}}]}
    if node_selector:
        spec["nodeSelector"] = node_selector
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def pod_group_pod(gang: str, index: int, size: int, gpus: int, owned: bool = False, node_selector: dict | None = None) -> dict:
    return _pod(f"{gang}-{index}", {GANG_LABEL: gang}, {GANG_SIZE: str(size)}, gpus, owned, node_selector)


def jobset_pod(jobset_name: str, index: int, gpus: int) -> dict:
    labels = {JOBSET_NAME: jobset_name, "jobset.sigs.k8s.io/replicatedjob-name": "w", RESTART_ATTEMPT: "0",
              "jobset.sigs.k8s.io/job-index": "0", "batch.kubernetes.io/job-completion-index": str(index)}
    return _pod(f"{jobset_name}-w-{index}", labels, {}, gpus, True, None)


def jobset(name: str, workers: int) -> dict:
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": name, "namespace": "default"},
            "spec": {"replicatedJobs": [{"name": "w", "replicas": 1, "template": {"spec": {
                "parallelism": workers, "completions": workers, "completionMode": "Indexed",
                "template": {"spec": {"containers": [{"name": "main", "image": "busybox"}]}}}}}]}}


def pinned_node(pod: dict) -> str | None:
    """The node a pod's required node affinity pins it to (the last metadata.name requirement), or None."""
    terms = (((pod["spec"].get("affinity") or {}).get("nodeAffinity") or {})
             .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or []
    pins = [r["values"][0] for term in terms for r in term.get("matchFields", []) if r["key"] == "metadata.name"]
    return pins[-1] if pins else None


class Rig:
    def __init__(self, api: FakeClusterApi, controller: GangController, config: GangConfig) -> None:
        self.api, self.controller, self.config = api, controller, config
        self.releases: list[tuple[int, int]] = []  # (round, release PATCHes in it)

    async def caught_up(self, timeout: float = 10.0) -> None:
        """Until every informer holds what the fake holds (by resourceVersion)."""
        view = self.controller.cluster
        wanted = [(view.pods, "pods"), ([view.nodes], "nodes"), ([view.slices] if view.slices else [], "resourceslices"),
                  ([view.claims] if view.claims else [], "resourceclaims")]
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            behind = False
            for informers, name in wanted:
                if not informers:
                    continue
                seen = {key: obj["metadata"]["resourceVersion"] for informer in informers for key, obj in informer.objects.items()}
                want = {key: obj["metadata"]["resourceVersion"] for key, obj in self.api.kinds[name].items.items()
                        if name != "pods" or {GANG_LABEL, JOBSET_NAME} & set(obj["metadata"].get("labels") or {})}
                behind = behind or seen != want
            if view.synced and not behind:
                return
            assert asyncio.get_running_loop().time() < deadline, "the informers did not catch up with the fake API server"
            await asyncio.sleep(0.01)

    async def settle(self) -> None:
        await self.caught_up()
        before = len(self.patches_of_spec())
        await self.controller.decide()
        self.releases.append((self.controller.rounds, len(self.patches_of_spec()) - before))
        await self.caught_up()

    def patches_of_spec(self) -> list:
        return [patch for patch in self.api.patches if patch[1] == MERGE]

    def rounds_releasing(self) -> list[int]:
        return [round_ for round_, count in self.releases if count]

    def condition(self, name: str, namespace: str = "default") -> dict:
        conditions = self.api.pod(namespace, name)["status"].get("conditions") or []
        return next(c for c in conditions if c["type"] == "runtimekit.io/GangPlaced")


async def start_rig(tmp_path: Path, settings: str = "") -> tuple[Rig, Any]:
    """A rig and its teardown coroutine function."""
    api = FakeClusterApi()
    runner, url = await serve(api.app)
    (tmp_path / "kubeconfig").write_text(api.kubeconfig(url))
    (tmp_path / "gang.yaml").write_text(f"kubernetes: {{kubeconfig: {tmp_path / 'kubeconfig'}}}\nwebhook: {{listen: null}}\n"
                                        f"tiers: {{keys: [{SPINE}, {LEAF}]}}\n{settings}")
    config = load(tmp_path / "gang.yaml")
    cluster_api = ClusterApi(api_client(config.kubernetes.kubeconfig))
    controller = GangController(cluster_api, Placer(config.tiers.tiers()), config)
    controller.cluster.start()
    rig = Rig(api, controller, config)

    async def stop() -> None:
        controller.cluster.stop()
        api.close()
        await runner.cleanup()

    return rig, stop
