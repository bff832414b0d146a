"""The admission webhook (kube/gang/webhook.py): which pods it gates, the patch it answers (applied
as the API server applies it, then the pod created in the validating fake API server), malformed
reviews answered 400 with the field named, and the service over HTTPS with a certificate the
openssl CLI makes, reloaded when its files change."""

from __future__ import annotations

import base64
import json
import ssl
import subprocess
from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest

from runtimekit.kube.gang.gangs import GANG_LABEL, GATE, JOBSET_NAME
from runtimekit.kube.gang.webhook import TlsFiles, make_app, review_answer
from tests.gang.fake_cluster_api import FakeClusterApi
from tests.gang.fake_patches import apply_json_patch

CURVE = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


def review(pod: dict, operation: str = "CREATE", namespace: str = "default") -> dict:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"}, "namespace": namespace, "operation": operation,
        "object": pod}}


def pod(labels: dict, gates: list | None = None, node: str | None = None) -> dict:
    spec: dict = {"containers": [{"name": "main", "image": "busybox"}]}
    if gates is not None:
        spec["schedulingGates"] = gates
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "w-", "namespace": "default", "labels": labels},
            "spec": spec}


def patched(answer: dict, original: dict) -> dict:
    response = answer["response"]
    assert response["allowed"] is True and response["uid"] == "705ab4f5-6393-11e8-b7cc-42010a800002"
    if "patch" not in response:
        return original
    assert response["patchType"] == "JSONPatch"
    return apply_json_patch(original, json.loads(base64.b64decode(response["patch"])))


@pytest.mark.parametrize("labels, gates, node, expected", [
    ({JOBSET_NAME: "train"}, None, None, [{"name": GATE}]),
    ({GANG_LABEL: "g"}, [{"name": "example.com/quota"}], None, [{"name": "example.com/quota"}, {"name": GATE}]),
    ({GANG_LABEL: "g"}, [{"name": GATE}], None, [{"name": GATE}]),
    ({"app": "web"}, None, None, None),
    ({JOBSET_NAME: "train"}, None, "n0", None),
])
def test_gang_pods_are_gated_and_others_left_alone(labels: dict, gates: list | None, node: str | None,
                                                    expected: list | None) -> None:
    original = pod(labels, gates, node)
    result = patched(review_answer(review(original)), original)
    assert result["spec"].get("schedulingGates") == expected
    if node is None:  # what the API server would then store: valid, and still gated as answered
        api = FakeClusterApi()
        stored = api.add_pod({**result, "metadata": {**result["metadata"], "name": "w-1"}})
        assert stored["spec"].get("schedulingGates") == expected


def test_only_pod_creations_in_the_configured_namespaces_are_gated() -> None:
    original = pod({GANG_LABEL: "g"})
    assert "patch" not in review_answer(review(original, namespace="other"), namespaces=("ml",))["response"]
    assert "patch" in review_answer(review(original, namespace="ml"), namespaces=("ml",))["response"]
    assert "patch" not in review_answer(review(original, operation="UPDATE"))["response"]


@pytest.mark.parametrize("body, message", [
    (b"{not json", "the body is not JSON"),
    (b"[]", "the body must be an AdmissionReview object"),
    (json.dumps({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}).encode(), "apiVersion/kind: must be"),
    (json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}).encode(), "request: required"),
    (json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": ""}}).encode(),
     "request.uid: required"),
    (json.dumps(review("a pod")).encode(), "request.object: a Pod CREATE must carry the pod"),
    (json.dumps(review({"metadata": {"labels": {GANG_LABEL: "g"}}, "spec": {"schedulingGates": "x"}})).encode(),
     "request.object.spec.schedulingGates: must be a list"),
])
async def test_malformed_reviews_get_a_400_naming_the_field(aiohttp_free_client: Callable, body: bytes, message: str) -> None:
    client = await aiohttp_free_client(make_app())
    response = await client.post("/mutate", data=body, headers={"Content-Type": "application/json"})
    assert response.status == 400
    text = await response.text()
    assert text.startswith(message) and "Traceback" not in text


@pytest.fixture
async def aiohttp_free_client():
    """A plain-HTTP client of an app on a local port (the TLS test below covers HTTPS)."""
    from aiohttp.test_utils import TestClient, TestServer

    clients: list[TestClient] = []

    async def make(app):
        client = TestClient(TestServer(app))
        await client.start_server()
        clients.append(client)
        return client

    yield make
    for client in clients:
        await client.close()


def _certificate(openssl: str, folder: Path, name: str) -> None:
    subprocess.run([openssl, "req", "-x509", *CURVE, "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "1",
                    "-subj", f"/CN={name}", "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True, cwd=folder)


async def test_the_webhook_over_https_reloads_a_renewed_certificate(tmp_path: Path, require_tool: Callable[..., str]) -> None:
    openssl = require_tool("openssl", "openssl")
    for name in ("first", "second"):
        _certificate(openssl, tmp_path, name)
    (tmp_path / "tls.pem").write_bytes((tmp_path / "first.pem").read_bytes())
    (tmp_path / "tls.key").write_bytes((tmp_path / "first.key").read_bytes())
    tls = TlsFiles(str(tmp_path / "tls.pem"), str(tmp_path / "tls.key"))
    runner = aiohttp.web.AppRunner(make_app())
    await runner.setup()
    await aiohttp.web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls.context).start()
    port = runner.addresses[0][1]

    async def served_by(name: str) -> dict:
        trust = ssl.create_default_context(cafile=str(tmp_path / f"{name}.pem"))
        async with aiohttp.ClientSession() as session:
            async with session.post(f"https://127.0.0.1:{port}/mutate", json=review(pod({GANG_LABEL: "g"})), ssl=trust) as answer:
                assert answer.status == 200
                return await answer.json()

    try:
        assert "patch" in (await served_by("first"))["response"]
        assert not tls.reload_if_changed()
        (tmp_path / "tls.key").write_bytes((tmp_path / "second.key").read_bytes())
        (tmp_path / "tls.pem").write_bytes((tmp_path / "second.pem").read_bytes())
        assert tls.reload_if_changed()
        assert "patch" in (await served_by("second"))["response"]
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            await served_by("first")
        (tmp_path / "tls.key").write_text("not a key")
        assert not tls.reload_if_changed(), "a broken key is not loaded: the certificate served before stays"
        assert "patch" in (await served_by("second"))["response"]
    finally:
        await runner.cleanup()
