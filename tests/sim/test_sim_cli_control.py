"""``runtimekit sim ...`` against the control routes: what it sends is what the API takes (JSON with
its Content-Type), and ``inject --clear`` refuses options it would otherwise ignore."""

import asyncio

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from runtimekit.cli import main
from runtimekit.sim.control import add_control_routes


@pytest.fixture
async def agent(node):
    app = web.Application()
    add_control_routes(app, node)
    async with TestClient(TestServer(app, host="127.0.0.1")) as c:
        yield str(c.make_url("/")).rstrip("/")


async def _cli(*argv):
    return await asyncio.to_thread(main, list(argv))


async def test_every_sim_command_is_taken_by_the_strict_api(agent, node, capsys):
    assert await _cli("sim", "inject", "--agent", agent, "--gpu", "5", "--fault", "nvlink-down", "--link", "5") == 0
    assert await _cli("sim", "inject", "--agent", agent, "--gpu", "5", "--clear", "--fault", "nvlink-down") == 0
    assert await _cli("sim", "process", "add", "--agent", agent, "--gpu", "1", "--bytes", "1024") == 0
    assert await _cli("sim", "process", "list", "--agent", agent) == 0
    assert await _cli("sim", "pod", "add", "--agent", agent, "--name", "p", "--gpus", "2") == 0
    assert await _cli("sim", "pod", "finish", "--agent", agent, "--name", "p", "--phase", "Failed") == 0
    assert [pod.phase for pod in node.pods() if pod.name == "p"] == ["Failed"]
    assert await _cli("sim", "pod", "finish", "--agent", agent, "--name", "p") == 2  # finished pods stay finished (400)
    assert await _cli("sim", "pod", "delete", "--agent", agent, "--name", "p") == 0
    assert await _cli("sim", "reboot", "--agent", agent) == 0
    assert node.boots == 1 and node.active_faults() == []
    node.set_process_count(0)
    node.inject(6, "gpu-lost")
    assert await _cli("sim", "reset", "--agent", agent, "--gpu", "6") == 2
    assert "reboot" in capsys.readouterr().err


@pytest.mark.parametrize("argv, option", [
    (["--fault", "nvlink-down", "--link", "5"], "--link"),
    (["--xid", "13"], "--xid"),
    (["--fault", "nvlink-crc", "--rate", "5"], "--rate"),
])
async def test_clear_refuses_parameter_options(agent, node, capsys, argv, option):
    node.inject(5, "nvlink-down", link=1)
    node.inject(5, "nvlink-down", link=5)
    node.inject(5, "power-brake")
    code = await _cli("sim", "inject", "--agent", agent, "--gpu", "5", "--clear", *argv)
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(f"runtimekit: error: {option}: ") and "--clear" in err, err
    assert len(node.active_faults()) == 3
