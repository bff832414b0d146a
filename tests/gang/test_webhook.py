"""The admission webhook (kube/gang/webhook.py): which pods it gates, the patch it answers (applied
as the API server applies it, then the pod created in the validating fake API server), malformed
reviews answered 400 with the field named; and the webhook as the service serves it (serve.py:
the project's listener under the web configuration file ``listener.web_config_file``) with
certificates the openssl CLI makes: HTTPS, a renewed certificate served without a restart, client
certificates required, basic auth, a body over the limit."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import ssl
import subprocess
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from runtimekit.kube.gang.config import check_webhook_web_config, load
from runtimekit.kube.gang.gangs import GANG_LABEL, GATE, JOBSET_NAME
from runtimekit.kube.gang.serve import serve_webhook
from runtimekit.kube.gang.webhook import MAX_REVIEW_BYTES, make_app, review_answer
from runtimekit.listener import Listener
from tests.gang.fake_cluster_api import FakeClusterApi
from tests.gang.fake_patches import apply_json_patch
from tests.security.pki import USER, basic, client_context, make_pki, user_hash, write_web_config

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


def self_signed(openssl: str, folder: Path, name: str) -> tuple[Path, Path]:
    """``name``.pem and ``name``.key in ``folder``: a self-signed P-256 certificate for IP:127.0.0.1."""
    subprocess.run([openssl, "req", "-x509", *CURVE, "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "1",
                    "-subj", f"/CN={name}", "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True, cwd=folder)
    return folder / f"{name}.pem", folder / f"{name}.key"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory, require_tool: Callable[..., str]) -> Path:
    """A CA, a server certificate it signed (IP:127.0.0.1), a client certificate it signed, and a
    client certificate of another CA (tests/security/pki.py)."""
    return make_pki(require_tool("openssl", "openssl"), tmp_path_factory.mktemp("pki"))


@asynccontextmanager
async def webhook(tmp_path: Path, web_config: Path) -> AsyncIterator[Listener]:
    """The webhook as ``runtimekit gang serve`` serves it, on a free port, under ``web_config``."""
    (tmp_path / "gang.yaml").write_text(yaml.safe_dump({
        "webhook": {"listen": "127.0.0.1:0"}, "listener": {"web_config_file": str(web_config)}}))
    config = load(tmp_path / "gang.yaml")
    check_webhook_web_config(config)
    async with serve_webhook(config) as listener:
        assert listener.address.startswith("https://127.0.0.1:")
        yield listener


async def call(listener: Listener, context: ssl.SSLContext, path: str = "/mutate", **options: Any) -> tuple[int, Any]:
    """(status, JSON body or text) of one request on a new connection; POST of a gang pod's review
    to /mutate unless ``options`` give a body."""
    if path == "/mutate" and "data" not in options:
        options.setdefault("json", review(pod({GANG_LABEL: "g"})))
    async with aiohttp.ClientSession() as session:
        async with session.request("POST" if path == "/mutate" else "GET", listener.address + path, ssl=context,
                                   **options) as answer:
            if answer.content_type == "application/json" and answer.status == 200:
                return answer.status, await answer.json()
            return answer.status, await answer.text()


def gated(body: Any) -> bool:
    return isinstance(body, dict) and "patch" in body["response"]


async def test_https_from_the_web_config_follows_a_renewed_certificate(tmp_path: Path, require_tool: Callable[..., str]) -> None:
    openssl = require_tool("openssl", "openssl")
    for name in ("first", "second"):
        self_signed(openssl, tmp_path, name)
    for suffix in ("pem", "key"):
        (tmp_path / f"tls.{suffix}").write_bytes((tmp_path / f"first.{suffix}").read_bytes())
    web_config = tmp_path / "web.yml"  # relative paths: from the web configuration file's folder
    web_config.write_text("tls_server_config: {cert_file: tls.pem, key_file: tls.key}\n")
    trust = {name: ssl.create_default_context(cafile=str(tmp_path / f"{name}.pem")) for name in ("first", "second")}
    async with webhook(tmp_path, web_config) as listener:
        status, body = await call(listener, trust["first"])
        assert status == 200 and gated(body)
        assert await call(listener, trust["first"], "/healthz") == (200, "ok\n")
        for suffix in ("key", "pem"):  # replaced as a Secret's files are: new files renamed into place
            (tmp_path / f"new.{suffix}").write_bytes((tmp_path / f"second.{suffix}").read_bytes())
            os.replace(tmp_path / f"new.{suffix}", tmp_path / f"tls.{suffix}")
        status, body = await call(listener, trust["second"])
        assert status == 200 and gated(body), "the renewed certificate serves the next connection"
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            await call(listener, trust["first"])


async def test_client_certificates_required_refuse_a_client_without_one(pki: Path, tmp_path: Path) -> None:
    """The API server can present a client certificate to webhooks (its admission configuration's
    kubeconfig); with RequireAndVerifyClientCert only a certificate of the client CA gets in."""
    async with webhook(tmp_path, write_web_config(tmp_path / "web.yml", pki, mtls=True)) as listener:
        status, body = await call(listener, client_context(pki, "client"))
        assert status == 200 and gated(body)
        for refused in (None, "rogue"):  # no certificate; one of a CA the webhook does not trust
            with pytest.raises(aiohttp.ClientError):
                await call(listener, client_context(pki, refused))


async def test_basic_auth_users_need_credentials_but_not_on_healthz(pki: Path, tmp_path: Path) -> None:
    web_config = write_web_config(tmp_path / "web.yml", pki, users={USER: user_hash()})
    async with webhook(tmp_path, web_config) as listener:
        context = client_context(pki, None)
        status, body = await call(listener, context)
        assert status == 401 and "missing or wrong credentials" in body
        assert (await call(listener, context, headers={"Authorization": basic(password="wrong")}))[0] == 401
        status, body = await call(listener, context, headers={"Authorization": basic()})
        assert status == 200 and gated(body)
        assert await call(listener, context, "/healthz") == (200, "ok\n"), "a kubelet probe carries no credentials"


async def test_a_review_over_the_size_limit_is_413_before_its_body_is_read(pki: Path, tmp_path: Path) -> None:
    async with webhook(tmp_path, write_web_config(tmp_path / "web.yml", pki)) as listener:
        port = int(listener.address.rsplit(":", 1)[1])
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_context(pki, None))
        try:  # the headers only: the declared length alone is refused
            writer.write(f"POST /mutate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                         f"Content-Length: {MAX_REVIEW_BYTES + 1}\r\n\r\n".encode())
            status_line = await asyncio.wait_for(reader.readline(), 10)
        finally:
            writer.close()
        assert status_line.split()[1] == b"413"
        status, body = await call(listener, client_context(pki, None), data=b"{" + b" " * (MAX_REVIEW_BYTES // 2) + b"}",
                                  headers={"Content-Type": "application/json"})
        assert status == 400 and body.startswith("apiVersion/kind: must be"), "a body under the limit is read"
