"""Only an API server that says the ResourceClaim does not exist makes it "gone": a 404 whose
Status has reason NotFound and names the claim (details.name, details.kind "resourceclaims"), as
the fake resource.k8s.io/v1 API server (tests/kube_fake_resource.py) answers for a claim it lacks.
A 404 of another kind (an API server that does not serve resource.k8s.io/v1 answers "the server
could not find the requested resource" with no details; a proxy's plain page) is a read error:
the cleanup must not unprepare claims, and delete slices, under running pods for it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from aiohttp import web

from runtimekit.kube.dra.claims import ClaimReadError, KubernetesClaimReader
from runtimekit.kube.kubeclient import api_client
from tests.kube_fake_resource import FakeResourceApi
from tests.kube_fakes import serve

NO_SUCH_GROUP = {"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure", "reason": "NotFound",
                 "message": "the server could not find the requested resource", "details": {}, "code": 404}
OTHER_CLAIM = {**NO_SUCH_GROUP, "message": 'resourceclaims.resource.k8s.io "other" not found',
               "details": {"name": "other", "group": "resource.k8s.io", "kind": "resourceclaims"}}


async def test_a_missing_claim_is_none(tmp_path: Path) -> None:
    api = FakeResourceApi()
    runner, url = await serve(api.app)
    (tmp_path / "kubeconfig").write_text(api.kubeconfig(url))
    client = api_client(str(tmp_path / "kubeconfig"))
    try:
        assert await KubernetesClaimReader(client).read("default", "gone") is None
    finally:
        client.close()
        await runner.cleanup()


@pytest.mark.parametrize("body,content_type", [
    (json.dumps(NO_SUCH_GROUP), "application/json"),
    (json.dumps(OTHER_CLAIM), "application/json"),
    ("404 page not found", "text/plain"),
], ids=["group-not-served", "another-name", "plain-page"])
async def test_another_404_is_a_read_error(tmp_path: Path, body: str, content_type: str) -> None:
    async def answer(request: web.Request) -> web.Response:
        return web.Response(status=404, text=body, content_type=content_type)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    runner, url = await serve(app)
    (tmp_path / "kubeconfig").write_text(FakeResourceApi().kubeconfig(url))
    client = api_client(str(tmp_path / "kubeconfig"))
    try:
        with pytest.raises(ClaimReadError, match="GET ResourceClaim default/mine: HTTP 404"):
            await KubernetesClaimReader(client).read("default", "mine")
    finally:
        client.close()
        await runner.cleanup()

