"""Every Kubernetes call of the remediation service carries a deadline: an API server that accepted
the connection and never answers (a half-open connection: the request sent, no answer, no reset)
fails the call, so the worker journals the step as failed and goes on, and a SIGTERM is not held
behind a call that cannot end.

The fake Kubernetes API (tests/kube_fakes.py, because a real API server cannot run here) with one
kind of request held unanswered (``hold_requests``); the node API's deadline is shortened.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from runtimekit.kube.remediation.nodes import KubernetesNodeApi
from tests.kube_fakes import FakeKube, hold_requests, serve

DEADLINE = (0.5, 0.5)  # (connect, read) in this test
LONGEST_CALL = 20.0  # far beyond what a call with that deadline takes, urllib3's own retries included

CALLS: dict[str, tuple[str, str, Callable[[KubernetesNodeApi], Awaitable[object]]]] = {
    "get_node": ("GET", "/api/v1/nodes/gpu-2", lambda api: api.get_node("gpu-2")),
    "patch_node": ("PATCH", "/api/v1/nodes/gpu-2",
                   lambda api: api.patch_node("gpu-2", "1", {"unschedulable": True}, {})),
    "count_nodes": ("GET", "/api/v1/nodes", lambda api: api.count_nodes()),
    "list_pods_on_node": ("GET", "/api/v1/pods", lambda api: api.list_pods_on_node("gpu-2")),
    "evict": ("POST", "/api/v1/namespaces/team/pods/job-0/eviction", lambda api: api.evict("team", "job-0")),
}


@pytest.mark.parametrize("call", sorted(CALLS))
async def test_a_request_left_unanswered_fails_the_call(tmp_path: Path, call: str) -> None:
    method, path, invoke = CALLS[call]
    kube = FakeKube()
    kube.add_pod("gpu-2", "team", "job-0")
    released = hold_requests(kube.app, lambda request: request.method == method and request.path == path)
    runner, url = await serve(kube.app)
    (tmp_path / "kubeconfig").write_text(kube.kubeconfig(url))
    api = KubernetesNodeApi(str(tmp_path / "kubeconfig"), request_timeout=DEADLINE)
    try:
        with pytest.raises(Exception) as failed:
            await asyncio.wait_for(invoke(api), LONGEST_CALL)
        assert not isinstance(failed.value, TimeoutError), f"{call} waited without a deadline"
        assert "timed out" in str(failed.value).lower() or "timeout" in type(failed.value).__name__.lower(), \
            f"{call} failed for another reason: {failed.value!r}"
    finally:
        released.set()
        await runner.cleanup()
