"""The simulated host in a thread of its own (``SimulatedHost.start(own_thread=True)``, as under
``runtimekit serve --sim``): the fake kubelet and CRI answer from that thread, /proc is written
there and still before NVML shows a process, the thread is named by ``GET /sim/v1/host``, and
stop ends it (start again works)."""

from __future__ import annotations

import asyncio
import logging
import shutil
import tempfile
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from runtimekit.attribution.cri import CriClient
from runtimekit.attribution.podresources import PodResourcesClient
from runtimekit.sim import SimulatedNode
from runtimekit.sim.control import add_control_routes
from runtimekit.sim.host import THREAD_NAME, SimulatedHost


@pytest.fixture
def root() -> Iterator[Path]:
    # Short: unix socket paths are limited to 107 bytes.
    path = Path(tempfile.mkdtemp(prefix="rk-host-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
async def host(node: SimulatedNode, root: Path) -> AsyncIterator[SimulatedHost]:
    node.set_pod_count(4)
    node.set_process_count(8)
    h = SimulatedHost(node, root)
    await h.start(own_thread=True)
    try:
        yield h
    finally:
        await h.stop()


def _threads_named(name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == name]


async def test_the_host_runs_in_a_thread_of_its_own(host: SimulatedHost) -> None:
    assert host.in_own_thread
    assert isinstance(host.thread_id, int) and host.thread_id != threading.get_native_id()
    assert Path(f"/proc/self/task/{host.thread_id}/stat").is_file()
    [thread] = _threads_named(THREAD_NAME)
    assert thread.native_id == host.thread_id


async def test_servers_answer_from_the_host_thread(host: SimulatedHost, node: SimulatedNode, monkeypatch) -> None:
    seen: set[int] = set()
    pods = node.pods

    def recording_pods():
        seen.add(threading.get_native_id())
        return pods()

    monkeypatch.setattr(host.kubelet, "pods", recording_pods)
    monkeypatch.setattr(host.cri, "pods", recording_pods)
    kubelet = PodResourcesClient(host.kubelet_socket, 5.0)
    cri = CriClient(host.cri_socket, 5.0)
    try:
        listed = await kubelet.list()
        assert {d.pod_name for d in listed} == {p.name for p in node.pods() if any(c.devices for c in p.containers)}
        assert len(await cri.list_containers()) == sum(len(p.containers) for p in node.pods())
        assert seen == {host.thread_id}
    finally:
        await kubelet.close()
        await cri.close()


async def test_proc_is_written_on_the_host_thread_before_nvml_shows_the_process(
    host: SimulatedHost, node: SimulatedNode, root: Path, monkeypatch
) -> None:
    writers: list[int] = []
    sync = host.sync_proc

    def recording_sync(processes):
        writers.append(threading.get_native_id())
        sync(processes)

    monkeypatch.setattr(host, "sync_proc", recording_sync)
    pid = node.add_process(3, 1 << 30)
    seen: dict[str, bool] = {}

    def nvml_thread() -> None:  # as the agent's sampler thread asks the fake NVML
        on_gpu = [p["pid"] for p in node.processes_on(3)]
        seen["listed"] = pid in on_gpu
        seen["in_proc"] = (root / "proc" / str(pid) / "stat").is_file()

    await asyncio.to_thread(nvml_thread)
    assert seen == {"listed": True, "in_proc": True}
    assert writers and set(writers) == {host.thread_id}

    node.remove_process(pid)
    await asyncio.to_thread(node.processes)
    assert not (root / "proc" / str(pid)).exists()
    assert set(writers) == {host.thread_id}


async def test_proc_write_errors_never_reach_the_nvml_caller_and_are_logged_once(
    host: SimulatedHost, node: SimulatedNode, monkeypatch, caplog
) -> None:
    """The host side failing (no descriptor left, /dev/shm full) is not a driver error: the fake
    NVML call still answers, and the failure is logged once until a write works again."""
    caplog.set_level(logging.INFO, logger="runtimekit.sim.host")
    sync = host.sync_proc

    def broken(processes):
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(host, "sync_proc", broken)
    pids = [node.add_process(0, 1 << 20) for _ in range(3)]
    for _ in range(3):
        listed = await asyncio.to_thread(node.processes_on, 0)
        assert set(pids) <= {p["pid"] for p in listed}
    assert caplog.text.count("cannot write its /proc tree") == 1
    monkeypatch.setattr(host, "sync_proc", sync)
    node.add_process(0, 1 << 20)
    await asyncio.to_thread(node.processes)
    assert caplog.text.count("writes its /proc tree again") == 1


async def test_control_api_names_the_thread_and_drives_the_host(host: SimulatedHost, node: SimulatedNode) -> None:
    app = web.Application()
    add_control_routes(app, node, host)
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        r = await client.get("/sim/v1/host")
        assert r.status == 200
        body = await r.json()
        assert body["thread_id"] == host.thread_id and body["thread_name"] == THREAD_NAME
        assert body["sources"] == {"kubelet": True, "cri": True}
        assert body["proc_root"] == host.proc_root and body["kubelet_socket"] == host.kubelet_socket

        r = await client.post("/sim/v1/sources", json={"source": "cri", "running": False})
        assert r.status == 200 and not host.cri.running
        assert not Path(host.cri_socket).exists()
        r = await client.post("/sim/v1/sources", json={"source": "cri", "running": True})
        assert r.status == 200 and host.cri.running

        old = host.boot_id
        r = await client.post("/sim/v1/reboot", json={})
        assert r.status == 200 and (await r.json())["boot_id"] == host.boot_id != old


async def test_host_route_without_a_host_is_404(node: SimulatedNode) -> None:
    app = web.Application()
    add_control_routes(app, node)
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        r = await client.get("/sim/v1/host")
        assert r.status == 404


async def test_host_route_in_the_callers_thread_has_no_thread_id(node: SimulatedNode, root: Path) -> None:
    host = SimulatedHost(node, root)
    await host.start()
    try:
        assert host.thread_id is None and not host.in_own_thread
        assert host.info()["thread_id"] is None and host.info()["thread_name"] is None
    finally:
        await host.stop()


async def test_stop_ends_the_thread_and_start_again_works(node: SimulatedNode, root: Path) -> None:
    before = len(_threads_named(THREAD_NAME))
    host = SimulatedHost(node, root)
    for _ in range(2):
        await host.start(own_thread=True)
        first = host.thread_id
        assert len(_threads_named(THREAD_NAME)) == before + 1
        with pytest.raises(RuntimeError):
            await host.start(own_thread=True)
        await host.stop()
        assert host.thread_id is None and node.on_processes_changed is None
        assert len(_threads_named(THREAD_NAME)) == before
        assert not Path(host.kubelet_socket).exists() and not Path(host.cri_socket).exists()
        assert first is not None
    # Without the thread, /proc is written in the thread that changed the process list.
    await host.start()
    try:
        pid = node.add_process(1, 1 << 20)
        node.processes()
        assert (root / "proc" / str(pid)).is_dir()
    finally:
        await host.stop()
