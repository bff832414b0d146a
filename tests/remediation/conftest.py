"""Fakes for the remediation tests: a Kubernetes API and a replacement endpoint on 127.0.0.1, and
the service as a real process (``start_service``) for the crash tests."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

import aiohttp
import pytest

from tests.agent_process import ROOT
from tests.kube_fakes import FakeKube, FakeReplacement, serve  # noqa: F401 (re-exported to the tests)

AUTH = {"Authorization": "Bearer s3cret"}


def alert_body(fingerprint="fp1", starts="2026-01-01T00:00:00Z", status="firing", node="gpu-1",
               action="replace_node") -> dict:
    """An Alertmanager webhook body (version 4) with one alert labelled as the shipped rules label
    theirs (alerts/runtimekit.rules.yml): ``node``, ``gpu`` (index), ``uuid``, ``severity``, ``action``."""
    return {"version": "4", "status": status, "receiver": "rk", "groupKey": "{}:{}", "truncatedAlerts": 0,
            "groupLabels": {}, "commonLabels": {}, "extra": 1,
            "alerts": [{"status": status, "labels": {"alertname": "RuntimeKitGPULost", "node": node, "action": action,
                                                      "severity": "critical", "gpu": "2,3", "uuid": "GPU-a,GPU-b"},
                        "annotations": {}, "startsAt": starts, "endsAt": "0001-01-01T00:00:00Z",
                        "generatorURL": "http://prom", "fingerprint": fingerprint}]}


@pytest.fixture
async def fakes(tmp_path):
    kube, repl = FakeKube(), FakeReplacement()
    kr, kurl = await serve(kube.app)
    rr, rurl = await serve(repl.app)
    (tmp_path / "kubeconfig").write_text(kube.kubeconfig(kurl))
    (tmp_path / "token").write_text("s3cret\n")
    yield kube, repl, rurl + "/replace"
    await kr.cleanup()
    await rr.cleanup()


def write_config(tmp_path, replacement_url, **extra) -> str:
    import yaml

    data = {"listen": "127.0.0.1:0", "db_path": str(tmp_path / "j.db"), "auth": {"token_file": str(tmp_path / "token")},
            "kubernetes": {"kubeconfig": str(tmp_path / "kubeconfig")},
            "replacement": {"url": replacement_url, "backoff_seconds": 0.01},
            "worker_interval_seconds": 0.05, "breaker": {"max_nodes": 10, "max_percent": 100}, **extra}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def spawn_service(config: str) -> subprocess.Popen:
    """``python -m runtimekit.kube.remediation serve`` (its worker may act before /healthz answers)."""
    return subprocess.Popen([sys.executable, "-m", "runtimekit.kube.remediation", "serve", "--config", config],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


async def start_service(config: str, port: int) -> subprocess.Popen:
    """The service, once /healthz answers."""
    process = spawn_service(config)
    deadline = time.monotonic() + 20
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            assert process.poll() is None, process.stderr.read().decode()
            try:
                async with session.get(f"http://127.0.0.1:{port}/healthz") as response:
                    if response.status == 200:
                        return process
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    process.kill()
    raise AssertionError("the remediation service did not start")


async def post_alert(port: int, body: dict) -> int:
    async with aiohttp.ClientSession() as session:
        async with session.post(f"http://127.0.0.1:{port}/api/v1/alerts", json=body, headers=AUTH) as response:
            return response.status


async def get_actions(port: int) -> list[dict]:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://127.0.0.1:{port}/api/v1/actions", headers=AUTH) as response:
            return (await response.json())["actions"]


async def wait_for(condition, seconds: float = 15.0, what: str = "the condition") -> None:
    """Poll ``condition()`` (sync or async) every 50 ms until it is true; AssertionError naming ``what``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = condition()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


class Killed(BaseException):
    """The process dies: nothing after this point runs, no handler sees it."""


class DiesAfterThePatch:
    """A NodeApi of a process that dies (raises Killed) as soon as one of its PATCHes took effect
    at the API server, before the answer reaches anything: the crash between a PATCH and the
    journal commit, in process."""

    def __init__(self, api, kube: FakeKube) -> None:
        self.api, self.kube = api, kube

    def __getattr__(self, name: str):
        async def call(*args, **kwargs):
            before = len(self.kube.patches)
            result = await getattr(self.api, name)(*args, **kwargs)
            if len(self.kube.patches) > before:
                raise Killed
            return result
        return call


async def stop_service(process: subprocess.Popen, *, kill: bool = False) -> None:
    """SIGTERM (SIGKILL with ``kill``) the service and reap it without blocking the event loop: the
    fake API server runs on this loop, and a service stopping mid-request waits for its answer."""
    if kill:
        process.kill()
    else:
        process.terminate()
    await asyncio.to_thread(process.wait, 10)


async def wait_dead(process: subprocess.Popen, seconds: float = 15.0) -> None:
    await wait_for(lambda: process.poll() is not None, seconds, "the service to die")
