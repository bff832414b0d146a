"""The publisher against an API server that stops answering mid-request (a half-open connection:
the request sent, no answer, no reset): every Kubernetes call it makes carries a deadline, so the
round fails (and is retried) instead of hanging for good with an XID-79 GPU still published.

The fake resource.k8s.io/v1 API server (tests/kube_fake_resource.py) with one kind of request held
unanswered (``hold_requests``); the publisher's deadline is shortened.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from runtimekit.kube.dra.config import load
from runtimekit.kube.dra.publisher import Publisher
from runtimekit.kube.kubeclient import api_client
from tests.dra.publish_nodes import NODE, AgentView, node, tdm_gpu, topology, unhealthy
from tests.kube_fake_resource import FakeResourceApi
from tests.kube_fakes import hold_requests, serve

DEADLINE = (0.5, 0.5)  # the publisher's (connect, read) deadline in this test
LONGEST_ROUND = 30.0  # far beyond what a round with that deadline takes, retries included


@pytest.mark.parametrize("method,path", [
    ("GET", "/version"),  # the layout
    ("GET", f"/api/v1/nodes/{NODE}"),  # the owner's uid
    ("GET", "/apis/resource.k8s.io/v1/resourceslices"),  # list the pool
    ("POST", "/apis/resource.k8s.io/v1/resourceslices"),  # create
    ("PUT", "/apis/resource.k8s.io/v1/resourceslices/"),  # replace (after a GPU falls off the bus)
])
async def test_a_request_left_unanswered_fails_the_round(tmp_path: Path, method: str, path: str) -> None:
    api = FakeResourceApi(version="v1.35.0", nodes=(NODE,))
    held: list[tuple[str, str]] = []
    released = hold_requests(api.app, lambda request: bool(held) and request.method == held[0][0]
                             and request.path.startswith(held[0][1]))
    runner, url = await serve(api.app)
    (tmp_path / "kubeconfig").write_text(api.kubeconfig(url))
    client = api_client(str(tmp_path / "kubeconfig"))
    view = AgentView(node(tdm_gpu(0), tdm_gpu(1)), topology(range(2)))
    publisher = Publisher(client, view.snapshot, load(None, {"node_name": NODE}), request_timeout=DEADLINE)
    try:
        if method == "PUT":
            await publisher.publish()
            view.node.devices[1].health.CopyFrom(unhealthy())
        held.append((method, path))
        with pytest.raises(Exception) as failed:
            await asyncio.wait_for(publisher.publish(), LONGEST_ROUND)
        assert not isinstance(failed.value, TimeoutError), "the publisher waited without a deadline"
    finally:
        released.set()
        client.close()
        await runner.cleanup()
