"""The /sim/v1 control routes, the stdlib client and the argparse helpers."""

import argparse
import asyncio
import socket

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from runtimekit.client import AgentClientError, AgentRejectedError, inject_remote
from runtimekit.sim import FaultError
from runtimekit.sim.cli import agent_url
from runtimekit.sim.cli_args import add_fault_arguments, fault_params_from_args
from runtimekit.sim.control import add_control_routes, is_loopback


@web.middleware
async def _peer_from_header(request, handler):
    """Test hook: pretend the peer is the address in X-Peer."""
    peer = request.headers.get("X-Peer")
    return await handler(request.clone(remote=peer) if peer else request)


@pytest.fixture
async def client(node):
    app = web.Application(middlewares=[_peer_from_header])
    add_control_routes(app, node)
    async with TestClient(TestServer(app, host="127.0.0.1")) as c:
        yield c


async def test_inject_list_and_clear(client, node):
    r = await client.post("/sim/v1/faults", json={"gpu": 0, "fault": "xid", "params": {"xid": 79}})
    assert r.status == 200
    assert (await r.json())["fault"]["params"] == {"xid": 79}
    r = await client.get("/sim/v1/faults")
    body = await r.json()
    assert [f["fault"] for f in body["faults"]] == ["xid"] and "nvlink-crc" in body["kinds"]
    r = await client.delete("/sim/v1/faults", json={"gpu": 0, "fault": None})
    assert (await r.json()) == {"cleared": 1} and node.active_faults() == []


@pytest.mark.parametrize(
    "body, field",
    [
        ({"gpu": 0, "fault": "compute-mode", "params": {"mode": "sideways"}}, "params.mode"),
        ({"gpu": 99, "fault": "gpu-lost"}, "gpu"),
        ({"gpu": "0", "fault": "gpu-lost"}, "gpu"),
        ({"gpu": 0}, "fault"),
        ({"gpu": 0, "fault": "xid", "params": [79]}, "params"),
        ({"gpu": 0, "fault": "xid", "params": {"xid": 79, "when": 1}}, "params.when"),
    ],
)
async def test_bad_input_is_400_and_changes_nothing(client, node, body, field):
    r = await client.post("/sim/v1/faults", json=body)
    assert r.status == 400
    assert (await r.json())["error"].startswith(field)
    assert node.active_faults() == []


async def test_not_json_is_400(client):
    r = await client.post("/sim/v1/faults", data=b"{nope", headers={"Content-Type": "application/json"})
    assert r.status == 400 and "JSON" in (await r.json())["error"]


async def test_remote_peers_are_refused(client, node):
    for path in ("/sim/v1/faults", "/sim/v1/processes"):
        r = await client.post(path, json={"gpu": 0, "fault": "gpu-lost"}, headers={"X-Peer": "10.1.2.3"})
        assert r.status == 403 and "loopback" in (await r.json())["error"]
    assert node.active_faults() == []
    r = await client.get("/sim/v1/faults", headers={"X-Peer": "::1"})
    assert r.status == 200
    assert is_loopback("127.8.9.10") and is_loopback("::ffff:127.0.0.1") and not is_loopback(None)


async def test_processes_routes(client, node):
    r = await client.post("/sim/v1/processes", json={"gpu": 2, "used_memory_bytes": 1 << 30, "name": "job"})
    pid = (await r.json())["pid"]
    procs = (await (await client.get("/sim/v1/processes")).json())["processes"]
    mine = next(p for p in procs if p["pid"] == pid)
    assert {k: mine[k] for k in ("gpu", "name", "used_memory_bytes", "pod")} == {
        "gpu": 2, "name": "job", "used_memory_bytes": 1 << 30, "pod": None}
    r = await client.delete("/sim/v1/processes", json={"pid": pid})
    assert (await r.json()) == {"removed": pid}
    r = await client.delete("/sim/v1/processes", json={"pid": pid})
    assert r.status == 404
    r = await client.post("/sim/v1/processes", json={"gpu": 2, "used_memory_bytes": -1})
    assert r.status == 400 and "used_memory_bytes" in (await r.json())["error"]
    r = await client.post("/sim/v1/processes", json={"count": 16})
    assert (await r.json()) == {"count": 16}
    assert sum(p["name"] == "worker" for p in node.processes()) == 16


async def test_client_injects_clears_and_reports_errors(client, node):
    url = str(client.make_url("/"))
    answer = await asyncio.to_thread(inject_remote, url, 3, "nvlink-down", {"link": 2})
    assert answer["fault"]["params"] == {"link": 2}
    assert await asyncio.to_thread(inject_remote, url, 3, "nvlink-down", {}, True) == {"cleared": 1}
    with pytest.raises(AgentRejectedError, match="HTTP 400: params.mode") as info:
        await asyncio.to_thread(inject_remote, url, 0, "compute-mode", {"mode": "sideways"})
    assert isinstance(info.value, ValueError)


def test_client_unreachable():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(AgentClientError, match="unreachable"):
        inject_remote(f"http://127.0.0.1:{port}", 0, "gpu-lost", {}, timeout=1)


def test_cli_args():
    p = argparse.ArgumentParser()
    add_fault_arguments(p)
    args = p.parse_args(["--fault", "nvlink-crc", "--rate", "50", "--link", "3"])
    assert args.fault == "nvlink-crc"
    assert fault_params_from_args("nvlink-crc", args) == {"rate": 50.0, "link": 3}
    args = p.parse_args(["--fault", "xid", "--xid", "79"])
    assert fault_params_from_args("xid", args) == {"xid": 79}
    with pytest.raises(FaultError, match="--width: does not apply to xid"):
        fault_params_from_args("xid", p.parse_args(["--width", "4"]))
    with pytest.raises(SystemExit):
        p.parse_args(["--mode", "sideways"])


@pytest.mark.parametrize("given,url", [("127.0.0.1:9445", "http://127.0.0.1:9445"),
                                       ("http://127.0.0.1:9445", "http://127.0.0.1:9445"),
                                       ("https://node-7:9445/", "https://node-7:9445/")])
def test_the_agent_is_a_url_or_host_and_port_as_for_status(given, url):
    assert agent_url(given) == url


@pytest.mark.parametrize("given", ["ftp://127.0.0.1:9445", "127.0.0.1:0", "http://user:pw@127.0.0.1:9445", ":9445"])
def test_a_bad_agent_address_is_refused_naming_the_rule(given):
    with pytest.raises(argparse.ArgumentTypeError, match="must"):
        agent_url(given)
