"""What is reachable without the network: every unix socket we create is mode 0600 whatever the
umask; the simulator's control routes exist only when the simulator is registered and answer
loopback peers only; no production code runs a shell."""

from __future__ import annotations

import ast
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request
from grpc_health.v1 import health, health_pb2_grpc  # type: ignore[import-untyped]

from runtimekit import config as config_module
from runtimekit.api import ApiServer
from runtimekit.grpc_unix import UnixGrpcServer
from runtimekit.service import build_app
from runtimekit.sim.control import add_control_routes
from tests.agent_process import ROOT
from tests.api.api_fakes import make_state

PRODUCTION = ("runtimekit", "exporter", "healthcheck", "slicer", "topology", "kube")
SHELL_CALLS = {("os", "system"), ("os", "popen"), ("asyncio", "create_subprocess_shell"),
               ("subprocess", "getoutput"), ("subprocess", "getstatusoutput")}


@pytest.fixture
def open_umask() -> Iterator[None]:
    """The loosest umask: a socket's mode must not depend on it."""
    previous = os.umask(0)
    yield
    os.umask(previous)


class HealthOnly(UnixGrpcServer):
    def _add_servicers(self, server) -> None:
        health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)


def _mode(path: str) -> int:
    info = os.stat(path)
    assert stat.S_ISSOCK(info.st_mode)
    return stat.S_IMODE(info.st_mode)


async def test_the_api_socket_is_0600_whatever_the_umask(short_dir, open_umask):
    server = ApiServer(make_state(), None, config_module.load(None, {"state_dir": str(short_dir)}))
    await server.start()
    try:
        assert _mode(server.socket_path) == 0o600
    finally:
        await server.stop()


async def test_every_unix_grpc_server_socket_is_0600_whatever_the_umask(short_dir, open_umask):
    async with HealthOnly(str(short_dir / "plugin.sock")) as server:
        assert _mode(server.socket_path) == 0o600
        assert sorted(os.listdir(short_dir)) == ["plugin.sock"]  # the private folder it was bound in is gone


def test_the_agent_without_the_simulator_has_no_simulator_routes(short_dir):
    app = build_app(config_module.load(None, {"state_dir": str(short_dir)}))
    paths = {resource.canonical for resource in app.router.resources()}
    assert "/metrics" in paths
    assert not [path for path in paths if path.startswith("/sim")]


async def test_every_simulator_route_refuses_a_peer_that_is_not_loopback():
    app = web.Application()
    add_control_routes(app, node=None, host=None)  # never reached: every route refuses first
    routes = [route for route in app.router.routes() if route.method != "HEAD"]
    assert len(routes) >= 10
    for route in routes:
        path = route.resource.canonical if route.resource else ""
        request = make_mocked_request(route.method, path, app=app, transport=_Transport("10.1.2.3"))
        response = await route.handler(request)
        assert response.status == 403, f"{route.method} {path}"
        request = make_mocked_request(route.method, path, app=app, transport=_Transport("192.168.0.9"))
        assert (await route.handler(request)).status == 403


class _Transport:
    def __init__(self, host: str) -> None:
        self._peer = (host, 40000)

    def get_extra_info(self, name: str, default: object = None) -> object:
        return self._peer if name == "peername" else default

    def is_closing(self) -> bool:
        return False


def _shell_uses(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if not isinstance(node, ast.Call):
            continue
        if any(k.arg == "shell" and not (isinstance(k.value, ast.Constant) and k.value.value is False)
               for k in node.keywords):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: shell=")
        function = node.func
        if isinstance(function, ast.Attribute) and isinstance(function.value, ast.Name):
            if (function.value.id, function.attr) in SHELL_CALLS:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {function.value.id}.{function.attr}")
    return found


def test_no_production_code_runs_a_shell():
    sources = [path for room in PRODUCTION for path in (ROOT / room).rglob("*.py")
               if "_proto" not in path.parts and not (room == "runtimekit" and path.parts[len(ROOT.parts) + 1]
                                                       in ("exporter", "healthcheck", "slicer", "topology", "kube"))]
    assert len(sources) > 100
    assert [use for path in sources for use in _shell_uses(path)] == []
