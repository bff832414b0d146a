"""Every write and read of the gang service's ``ClusterApi`` carries a deadline: an API server that
accepted the connection and never answers (a half-open connection: the request sent, no answer,
no reset) fails the call with an ``ApiError`` (status 0) instead of holding the decision loop.

The fake Kubernetes API (tests/gang/fake_cluster_api.py, because a real API server cannot run
here) with one kind of request held unanswered (``hold_requests``); the deadline is shortened.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from runtimekit.kube.gang.kubeapi import ApiError, ClusterApi
from runtimekit.kube.kubeclient import api_client
from tests.gang.fake_cluster_api import FakeClusterApi
from tests.kube_fakes import hold_requests, serve

DEADLINE = (0.5, 0.5)  # (connect, read) in this test
LONGEST_CALL = 20.0  # far beyond what a call with that deadline takes, urllib3's own retries included
POD = {"apiVersion": "v1", "kind": "Pod", "namespace": "default", "name": "worker-0", "uid": "u-1"}

CALLS: dict[str, tuple[str, str, Callable[[ClusterApi], Awaitable[object]]]] = {
    "set_condition": ("PATCH", "/api/v1/namespaces/default/pods/worker-0/status",
                      lambda api: api.set_condition("default", "worker-0", {"type": "runtimekit.io/Gang",
                                                                             "status": "False"})),
    "event": ("POST", "/api/v1/namespaces/default/events",
              lambda api: api.event(POD, "Normal", "Placed", "placed", "2026-01-01T00:00:00Z")),
    "read_jobset": ("GET", "/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets/train",
                    lambda api: api.read_jobset("default", "train")),
}


@pytest.mark.parametrize("call", sorted(CALLS))
async def test_a_request_left_unanswered_fails_the_call(tmp_path: Path, call: str) -> None:
    method, path, invoke = CALLS[call]
    fake = FakeClusterApi()
    released = hold_requests(fake.app, lambda request: request.method == method and request.path == path)
    runner, url = await serve(fake.app)
    (tmp_path / "kubeconfig").write_text(fake.kubeconfig(url))
    client = api_client(str(tmp_path / "kubeconfig"))
    api = ClusterApi(client, request_timeout=DEADLINE)
    try:
        with pytest.raises(ApiError) as failed:
            await asyncio.wait_for(invoke(api), LONGEST_CALL)
        assert failed.value.status == 0, failed.value  # no answer, not a refusal
        assert "timed out" in str(failed.value).lower(), failed.value
    finally:
        released.set()
        fake.close()
        client.close()
        await runner.cleanup()
