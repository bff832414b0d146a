"""The device plugin under test, between a fake agent (dp_agent.py) and a fake kubelet
(dp_kubelet.py), all on real unix sockets in one short directory."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dp_agent import FakeAgent
from dp_kubelet import FakeKubelet

from runtimekit.kube.deviceplugin.config import load
from runtimekit.kube.deviceplugin.service import DevicePluginService


@dataclass
class Rig:
    agent: FakeAgent
    kubelet: FakeKubelet
    service: DevicePluginService
    task: asyncio.Task[None]


async def start_rig(directory: Path, *, start_agent: bool = True, **overrides: Any) -> Rig:
    """The rig, its service running; ``start_agent=False`` leaves the agent for the test to start."""
    agent = FakeAgent(str(directory / "agent.sock"))
    if start_agent:
        await agent.start()
    kubelet = FakeKubelet(str(directory / "device-plugins"))
    await kubelet.start()
    config = load(None, {"agent_socket": agent.socket_path, "kubelet_socket": kubelet.socket_path,
                         "health_poll_seconds": 0.1, "kubelet_poll_seconds": 0.05, **overrides})
    service = DevicePluginService(config)
    return Rig(agent, kubelet, service, asyncio.create_task(service.run()))


async def stop_rig(rig: Rig) -> None:
    rig.task.cancel()
    await asyncio.gather(rig.task, return_exceptions=True)
    await rig.kubelet.stop()
    await rig.agent.stop()
