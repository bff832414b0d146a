"""Node names from alerts: refused before any call unless they are valid Kubernetes node names.

An alert's node label is checked where the webhook body is parsed (one place); an alert naming an
invalid node is refused (listed in the answer, counted, never journaled), and its neighbours in the
same notification are still taken. KubernetesNodeApi checks again before it builds a path, and
FakeKube records every request, so the tests prove no request was made from such a name.
"""

import asyncio

import pytest
from aiohttp.test_utils import TestClient, TestServer
from conftest import alert_body, write_config

from runtimekit.kube.remediation.config import load
from runtimekit.kube.remediation.names import InvalidName, name_problem
from runtimekit.kube.remediation.nodes import KubernetesNodeApi
from runtimekit.kube.remediation.server import JOURNAL, make_app

AUTH = {"Authorization": "Bearer s3cret"}
HOSTILE = ["a/b", "..", ".", "gpu-1/../..", "ünï-node", "x" * 300, "GPU-1", "-gpu", "gpu-", "a..b",
           "gpu 1", "gpu-1\n", "%2e%2e", "a" * 64 + ".example"]


@pytest.mark.parametrize("name", ["gpu-1", "ip-10-0-0-1.ec2.internal", "a", "0", "a" * 63 + "." + "b" * 63,
                                  ".".join(["a" * 63] * 3 + ["b" * 61])])
def test_valid_node_names(name):
    assert name_problem(name) is None


@pytest.mark.parametrize("name", [*HOSTILE, ""])
def test_invalid_node_names(name):
    assert name_problem(name)


async def test_alerts_naming_invalid_nodes_are_refused_before_any_call(fakes, tmp_path):
    kube, repl, url = fakes
    body = alert_body(fingerprint="ok", node="gpu-2")
    for i, name in enumerate(HOSTILE):
        body["alerts"].append({**alert_body(fingerprint=f"bad{i}", node=name)["alerts"][0]})
    client = TestClient(TestServer(make_app(load(write_config(tmp_path, url)))))
    await client.start_server()
    app = client.server.app
    try:
        response = await client.post("/api/v1/alerts", json=body, headers=AUTH)
        assert response.status == 200
        answer = await response.json()
        assert answer["new"] == 1 and answer["actions"] == 3
        refused = {r["fingerprint"]: r["error"] for r in answer["refused"]}
        assert set(refused) == {f"bad{i}" for i in range(len(HOSTILE))}
        assert refused["bad0"].startswith("alerts[1].labels.node: must be a DNS-1123 subdomain")
        for _ in range(100):
            if repl.calls and not app[JOURNAL].pending():
                break
            await asyncio.sleep(0.05)
        assert {a.node for a in app[JOURNAL].actions()} == {"gpu-2"}
        assert [key for key in repl.replacements] and all(b["node"] == "gpu-2" for _, b in repl.calls)
        paths = {path for _, path in kube.requests}
        # nothing else reached the API (the node list: only if the breaker needed the cluster's size)
        assert paths - {"/api/v1/nodes"} == {"/api/v1/nodes/gpu-2"}, paths
        metrics = await (await client.get("/metrics", headers=AUTH)).text()
        assert f"runtimekit_remediation_alerts_refused_total {len(HOSTILE)}" in metrics
    finally:
        await client.close()


@pytest.mark.parametrize("name", ["..", ".", "a/b", "x" * 300])
async def test_the_node_api_refuses_an_invalid_name_before_building_a_path(fakes, tmp_path, name):
    kube = fakes[0]
    api = KubernetesNodeApi(str(tmp_path / "kubeconfig"))
    for call in (api.get_node(name), api.patch_node(name, "1", {"unschedulable": True}, {}),
                 api.list_pods_on_node(name), api.evict("ml", name)):
        with pytest.raises(InvalidName, match="must be"):
            await call
    assert kube.requests == []

