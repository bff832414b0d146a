"""The plugin's own sockets: served again only when one is really gone or replaced (never for a
chmod, chown or relabel), a socket that cannot be made is tried again with backoff, and only
repeated failure ends the process, in one line.

``DevicePluginService.reconcile`` is called directly (no watch, no timer) against the fake
kubelet over real unix sockets, so every pass is one the test chose.
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from dp_kubelet import FakeKubelet

from runtimekit.kube.deviceplugin.config import load
from runtimekit.kube.deviceplugin.service import START_ATTEMPTS, DevicePluginService, PluginSocketError

GPU = "nvidia.com/gpu"
SOCKET = "runtimekit-nvidia.com_gpu.sock"


@pytest.fixture
async def kubelet(short_dir: Path) -> AsyncIterator[FakeKubelet]:
    started = FakeKubelet(str(short_dir / "device-plugins"))
    await started.start()
    try:
        yield started
    finally:
        await started.stop()


def service_of(kubelet: FakeKubelet, poll: float = 0.05) -> DevicePluginService:
    return DevicePluginService(load(None, {"agent_socket": os.path.join(kubelet.directory, "no-agent.sock"),
                                           "kubelet_socket": kubelet.socket_path, "kubelet_poll_seconds": poll}))


async def test_a_chmod_of_the_socket_does_not_restart_the_server(kubelet: FakeKubelet) -> None:
    service = service_of(kubelet)
    try:
        await service.reconcile()
        await kubelet.wait_registrations(1)
        await kubelet.wait_stream(GPU)
        await asyncio.sleep(0.2)
        assert kubelet.connections[GPU].lists.empty()  # no agent: nothing sent, not an empty list
        path = os.path.join(kubelet.directory, SOCKET)
        os.chmod(path, 0o600)  # a new change time, as chown and an SELinux relabel give too
        for _ in range(3):
            await service.reconcile()
        assert len(kubelet.registrations) == 1  # not registered again
        task = kubelet.connections[GPU].task
        assert kubelet.connections[GPU].streams == 1 and task is not None and not task.done()  # its stream lives
        assert service.plugins[GPU].server.absence() == ""

        os.unlink(path)  # really gone: served again and registered again
        assert service.plugins[GPU].server.absence() == "its socket is gone"
        await service.reconcile()
        await kubelet.wait_registrations(2)
    finally:
        await service.close()


async def test_a_socket_that_cannot_be_made_is_tried_again(kubelet: FakeKubelet, caplog: pytest.LogCaptureFixture
                                                           ) -> None:
    path = Path(kubelet.directory, SOCKET)
    path.write_text("in the way\n")  # not a socket: never removed, the server cannot start
    service = service_of(kubelet, poll=0.5)  # the first backoff: 0.5 s
    try:
        with caplog.at_level(logging.WARNING):
            await service.reconcile()  # no exception: the process goes on
        assert not service.plugins[GPU].server.running
        assert f"cannot serve {path}" in caplog.text and f"try 1 of {START_ATTEMPTS}" in caplog.text
        await service.reconcile()  # within the backoff: not tried again yet
        assert service.plugins[GPU].start_failures == 1
        path.unlink()
        while not service.plugins[GPU].server.running:
            await asyncio.sleep(0.05)
            await service.reconcile()
        assert service.plugins[GPU].start_failures == 0
        await kubelet.wait_registrations(1)
    finally:
        await service.close()


async def test_repeated_failure_ends_the_run(kubelet: FakeKubelet) -> None:
    Path(kubelet.directory, SOCKET).write_text("in the way\n")
    service = service_of(kubelet)
    with pytest.raises(PluginSocketError) as error:
        await asyncio.wait_for(service.run(), 10)
    assert f"failed {START_ATTEMPTS} times in a row" in str(error.value)
    assert service.plugins[GPU].start_failures == START_ATTEMPTS


def test_the_command_ends_in_one_line_on_repeated_failure(short_dir: Path) -> None:
    directory = short_dir / "plugins"
    directory.mkdir()
    (directory / SOCKET).write_text("a file, not a socket: never removed, so the plugin cannot serve there\n")
    config = short_dir / "plugin.yaml"
    config.write_text(f"kubelet_socket: {directory}/kubelet.sock\nagent_socket: {short_dir}/agent.sock\n"
                      "kubelet_poll_seconds: 0.05\nlog_level: error\n")
    done = subprocess.run([sys.executable, "-m", "runtimekit.kube.deviceplugin", "serve", "--config", str(config)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert done.stderr.splitlines()[-1].startswith(f"runtimekit: cannot serve the device plugin in {directory}: "
                                                   f"{directory}/{SOCKET}: failed {START_ATTEMPTS} times in a row")


@pytest.mark.parametrize("key", ["kubelet_socket", "plugin_dir"])
def test_a_socket_path_too_long_for_a_unix_socket_is_refused_at_start(short_dir: Path, key: str) -> None:
    """Not five gRPC bind errors and an exit 15 s later: the configuration is refused (exit 2)."""
    directory = short_dir / ("d" * 110)
    config = short_dir / "plugin.yaml"
    paths = {"kubelet_socket": f"{directory}/kubelet.sock", "plugin_dir": str(directory)}
    config.write_text(f"{key}: {paths[key]}\nagent_socket: {short_dir}/agent.sock\n")
    done = subprocess.run([sys.executable, "-m", "runtimekit.kube.deviceplugin", "serve", "--config", str(config)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"runtimekit: error: {key}: ") and len(done.stderr.splitlines()) == 1
    assert "unix socket path" in done.stderr and not directory.exists()


async def test_an_absent_kubelet_socket_is_said_once_and_its_arrival_too(short_dir: Path,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    kubelet = FakeKubelet(str(short_dir / "device-plugins"))  # not started yet: no socket
    os.makedirs(kubelet.directory)
    service = service_of(kubelet)
    caplog.set_level(logging.INFO, logger="runtimekit.kube.deviceplugin")
    try:
        for _ in range(3):
            await service.reconcile()
        absent = [r for r in caplog.records if "no kubelet socket at" in r.getMessage()]
        assert len(absent) == 1 and absent[0].levelno == logging.WARNING
        await kubelet.start()
        try:
            await service.reconcile()
            await kubelet.wait_registrations(1)
            assert sum("kubelet socket" in r.getMessage() and "appeared" in r.getMessage() for r in caplog.records) == 1
        finally:
            await kubelet.stop()
    finally:
        await service.close()
