"""An ApiServer on a real unix socket over a real NodeState and the fake slicer (api_fakes.py),
with a client stub on the running event loop."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc.aio
from api_fakes import FakeSlicer, make_state

from runtimekit import config as config_module
from runtimekit._proto.runtimekit.v1 import service_pb2_grpc
from runtimekit.api import ApiServer
from runtimekit.state import NodeState
from runtimekit.topology.allocator import allocate


def api_config(directory: Path, **overrides: Any) -> config_module.Config:
    """The agent's configuration with its state (and so its socket) in ``directory``."""
    return config_module.load(None, {"state_dir": str(directory), **overrides})


@dataclass
class Api:
    server: ApiServer
    state: NodeState
    slicer: FakeSlicer | None
    stub: Any  # service_pb2_grpc.AgentServiceStub
    channel: grpc.aio.Channel


async def serve(directory: Path, *, slicer: bool = True) -> AsyncIterator[Api]:
    """Serve until the generator is closed; then the channel is closed and the server stopped."""
    state = make_state()
    fake = FakeSlicer(state) if slicer else None
    server = ApiServer(state, fake, api_config(directory), allocate)
    await server.start()
    channel = grpc.aio.insecure_channel(f"unix:{server.socket_path}")
    try:
        yield Api(server, state, fake, service_pb2_grpc.AgentServiceStub(channel), channel)
    finally:
        await channel.close()
        await server.stop()
