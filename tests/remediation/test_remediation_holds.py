"""The ownership policy of cordons and taints (holds.py), table-tested, and the write that applies
it: one PATCH guarded by the resourceVersion read, read again when the Node changed meanwhile."""

from __future__ import annotations

import aiohttp
import pytest
from conftest import write_config

from runtimekit.kube.remediation.actions import WRITE_TRIES, StepFailed, Steps
from runtimekit.kube.remediation.config import load
from runtimekit.kube.remediation.holds import CORDON, CORDONED_BY, TAINTED_BY, Write, claim, release, taint_mark
from runtimekit.kube.remediation.journal import Action
from runtimekit.kube.remediation.nodes import KubernetesNodeApi

OURS = {"key": "runtimekit.io/gpu-unhealthy", "value": "true", "effect": "NoSchedule"}
OTHER = {"key": "example.com/maintenance", "value": "x", "effect": "NoExecute"}
TAINT = taint_mark(OURS)
CORDONED = {"unschedulable": True, "taints": []}
FREE = {"unschedulable": False, "taints": []}


@pytest.mark.parametrize(("mark", "spec", "annotation", "write", "by_us"), [
    # an unmarked node: the mark and this step as its only holder (stale holders dropped)
    (CORDON, FREE, None, Write({"unschedulable": True}, {CORDONED_BY: "rk-a"}), True),
    (CORDON, FREE, "rk-old", Write({"unschedulable": True}, {CORDONED_BY: "rk-a"}), True),
    # marked by someone else (no annotation): left alone, never ours
    (CORDON, CORDONED, None, None, False),
    (TAINT, {"taints": [{**OURS, "value": "ops"}]}, None, None, False),
    # run again after a crash: already a holder, nothing to write
    (CORDON, CORDONED, "rk-a", None, True),
    # held by another alert of this service: join it, spec unchanged
    (CORDON, CORDONED, "rk-b", Write({}, {CORDONED_BY: "rk-a,rk-b"}), True),
    # a taint is added to the others, never in their place
    (TAINT, {"taints": [OTHER]}, None, Write({"taints": [OTHER, OURS]}, {TAINTED_BY: "rk-a"}), True),
])
def test_claim(mark, spec, annotation, write, by_us):
    decision = claim(mark, spec, annotation, "rk-a")
    assert decision.write == write
    assert decision.result[f"{mark.done}_by_us"] is by_us


@pytest.mark.parametrize(("mark", "spec", "annotation", "needed", "write"), [
    # not a holder (someone else's mark, or released already before a crash): nothing
    (CORDON, CORDONED, None, [], None),
    (CORDON, CORDONED, "rk-b", ["rk-b"], None),
    # the last holder: the mark and the annotation go, in one PATCH
    (CORDON, CORDONED, "rk-a", [], Write({"unschedulable": False}, {CORDONED_BY: None})),
    (CORDON, CORDONED, "rk-a,rk-gone", [], Write({"unschedulable": False}, {CORDONED_BY: None})),
    (TAINT, {"taints": [OTHER, OURS]}, "rk-a", [], Write({"taints": [OTHER]}, {TAINTED_BY: None})),
    # another alert on the node still fires: it becomes the holder, the mark stays
    (CORDON, CORDONED, "rk-a", ["rk-b"], Write({}, {CORDONED_BY: "rk-b"})),
    (TAINT, {"taints": [OURS]}, "rk-a,rk-b", ["rk-c", "rk-b"], Write({}, {TAINTED_BY: "rk-b,rk-c"})),
])
def test_release(mark, spec, annotation, needed, write):
    assert release(mark, spec, annotation, "rk-a", needed).write == write


def _action(kind: str) -> Action:
    return Action(1, "fp1", "2026-01-01T00:00:00Z", "gpu-2", kind, "pending", 0, "rk-a", None, 0.0, 0.0)


@pytest.mark.parametrize("kind", ["cordon", "taint"])
async def test_a_node_changed_between_the_read_and_the_patch_is_read_again(fakes, tmp_path, kind):
    """A person cordons (or taints) the node just after the step read it: the step's PATCH, made
    for the old version, is refused (409), and the step reads again and leaves their mark alone."""
    kube, _, url = fakes
    node = kube.nodes["gpu-2"]

    def someone_else(method: str, path: str) -> None:
        if method == "GET" and path == "/api/v1/nodes/gpu-2" and kube.on_request is not None:
            kube.on_request = None
            node["spec"].update({"unschedulable": True} if kind == "cordon" else {"taints": [{**OURS, "value": "ops"}]})
            node["metadata"]["resourceVersion"] = str(int(node["metadata"]["resourceVersion"]) + 1)

    kube.on_request = someone_else
    config = load(write_config(tmp_path, url))
    async with aiohttp.ClientSession() as session:
        result = await Steps(config, KubernetesNodeApi(str(tmp_path / "kubeconfig")), session).run(_action(kind), {})
    assert result[f"{kind}ed_by_us"] is False and result[f"already_{kind}ed"] is True
    assert node["metadata"].get("annotations", {}) == {}
    assert len(kube.patches) == 1  # the refused one


async def test_a_node_that_keeps_changing_fails_the_step_after_write_tries(fakes, tmp_path):
    kube, _, url = fakes
    node = kube.nodes["gpu-2"]

    def churn(method: str, path: str) -> None:  # a heartbeat between every read and write
        if method == "GET":
            node["metadata"]["resourceVersion"] = str(int(node["metadata"]["resourceVersion"]) + 1)

    kube.on_request = churn
    config = load(write_config(tmp_path, url))
    async with aiohttp.ClientSession() as session:
        with pytest.raises(StepFailed, match=f"changed under each of {WRITE_TRIES} writes"):
            await Steps(config, KubernetesNodeApi(str(tmp_path / "kubeconfig")), session).run(_action("cordon"), {})
    assert not node["spec"].get("unschedulable") and len(kube.patches) == WRITE_TRIES
