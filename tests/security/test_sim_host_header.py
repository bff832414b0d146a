"""The simulator's control routes answer only requests whose ``Host`` names the node itself
(localhost, a loopback address, or the agent's own listen host): a page whose name an attacker
rebinds to 127.0.0.1 (DNS rebinding) is same-origin with the agent, so its JSON POSTs pass the
loopback-peer and Content-Type checks; its ``Host`` header still names the attacker's domain."""

from __future__ import annotations

import http.client
import json
import socket
from collections.abc import Iterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from runtimekit import config as config_module
from runtimekit.service import CONFIG
from runtimekit.sim import SimulatedNode, load_scenario
from runtimekit.sim.control import add_control_routes
from tests.agent_process import Agent, start_agent

FAULT = {"gpu": 3, "fault": "xid", "params": {"xid": 31}}
JSON = {"Content-Type": "application/json"}


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Agent]:
    served = start_agent(tmp_path_factory.mktemp("sim-host"), "--sim", "dgx-h100", "--interval", "0.2")
    yield served
    served.stop()


def call(agent: Agent, method: str, path: str, host: str | None, body: dict | None = None) -> tuple[int, dict]:
    """``method path`` on the agent with ``host`` as the Host header; None: no Host header, in
    HTTP/1.0 (HTTP/1.1 without one is refused by aiohttp's parser before any route)."""
    port = int(agent.url.rsplit(":", 1)[1])
    data = json.dumps(body).encode() if body is not None else b""
    head = [f"{method} {path} HTTP/{'1.1' if host is not None else '1.0'}", "Content-Type: application/json",
            f"Content-Length: {len(data)}", "Connection: close", *([f"Host: {host}"] if host is not None else [])]
    with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
        connection.sendall("\r\n".join(head).encode() + b"\r\n\r\n" + data)
        response = http.client.HTTPResponse(connection)
        response.begin()
        return response.status, json.loads(response.read())


def faults(agent: Agent) -> list:
    status, body = call(agent, "GET", "/sim/v1/faults", "127.0.0.1")
    assert status == 200, body
    return body["faults"]


@pytest.mark.parametrize("host", ["attacker.example", "attacker.example:{port}", "localhost.attacker.example:{port}",
                                  "127.0.0.1.nip.io:{port}", "evil@localhost:{port}", "localhost:{port}:1", "[::1",
                                  "", None])
def test_a_host_that_is_not_the_node_is_refused_403_and_changes_nothing(agent, host):
    """A rebound name (POST /sim/v1/faults and /reboot, GET /sim/v1/host: all served before), and
    Host values that only look like loopback, or none at all."""
    port = agent.url.rsplit(":", 1)[1]
    value = None if host is None else host.format(port=port)
    for method, path, body in (("POST", "/sim/v1/faults", FAULT), ("POST", "/sim/v1/reboot", {}),
                               ("GET", "/sim/v1/host", None)):
        status, answer = call(agent, method, path, value, body)
        assert status == 403, (method, path, answer)
        assert "Host" in answer["error"] and "DNS rebinding" in answer["error"]
    assert faults(agent) == []


@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "localhost:{port}", "LocalHost", "[::1]:{port}", "127.8.9.10",
                                  "[::ffff:127.0.0.1]:{port}", "localhost.:{port}", socket.gethostname() + ":{port}"])
def test_loopback_hosts_are_served(agent, host):
    status, answer = call(agent, "POST", "/sim/v1/faults", host.format(port=agent.url.rsplit(":", 1)[1]), FAULT)
    assert status == 200, answer
    status, answer = call(agent, "DELETE", "/sim/v1/faults", "localhost", {"gpu": 3, "fault": None})
    assert (status, answer) == (200, {"cleared": 1})


@pytest.mark.parametrize("listen, allowed, refused", [
    ("gpu-node.example:9445", "GPU-NODE.example:9445", "other-node.example:9445"),
    ("[fd00::7]:9445", "[fd00::7]:9445", "[fd00::8]:9445"),
])
async def test_the_agents_own_listen_host_is_served(listen, allowed, refused):
    """An agent told to listen on a name (or an address) is reached by that name too."""
    app = web.Application()
    app[CONFIG] = config_module.load(None, {"listen": listen})
    node = SimulatedNode(load_scenario("dgx-h100"), seed=7)
    add_control_routes(app, node)
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        assert (await client.get("/sim/v1/faults", headers={"Host": allowed})).status == 200
        response = await client.get("/sim/v1/faults", headers={"Host": refused})
        assert response.status == 403 and "DNS rebinding" in (await response.json())["error"]
