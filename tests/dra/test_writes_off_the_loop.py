"""The driver's blocking writes (the checkpoint and the CDI specs: write, fsync, rename, fsync of the
directory) run in a worker thread, not on the event loop that answers the kubelet: checked by
recording the thread of every ``write_atomically`` (checkpoint) and ``sync_dir`` (CDI spec removal)
call during an unprepare. No agent runs (its socket is absent): a claim of NICs only needs none,
its checkpoint entry and NIC spec are what there is to write and remove.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from runtimekit.kube.agentclient import AgentClient
from runtimekit.kube.dra import cdi, checkpoint
from runtimekit.kube.dra.cdi import NicDevice, write_claim_spec
from runtimekit.kube.dra.checkpoint import COMPLETED, Checkpoint, ClaimEntry, DeviceEntry
from runtimekit.kube.dra.claims import ClaimRef
from runtimekit.kube.dra.prepare import ClaimPreparer
from tests.dra.dra_claims import NODE, ClaimStore
from tests.dra.dra_rig import NodeAgent, driver_config, short_directory


async def test_checkpoint_and_cdi_writes_run_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    loop_thread = threading.get_ident()
    threads: list[tuple[str, bool]] = []

    def recorded(name: str, real: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            threads.append((name, threading.get_ident() == loop_thread))
            return real(*args, **kwargs)
        return call

    with short_directory() as directory:
        config = driver_config(directory, NodeAgent(directory, "dgx-h100"))
        write_claim_spec(config.cdi_dir, "uid-1", [NicDevice("nic-mlx5-0", "mlx5_0", ("/dev/infiniband/uverbs0",))])
        store = Checkpoint.load(config.checkpoint_path)
        Path(config.checkpoint_path).parent.mkdir(parents=True, exist_ok=True)
        nic = DeviceEntry(request="nic", pool=NODE, device="nic-mlx5-0", position=0, kind="nic")
        store.put("uid-1", ClaimEntry("default", "one", COMPLETED, (nic,)))
        monkeypatch.setattr(checkpoint, "write_atomically", recorded("checkpoint", checkpoint.write_atomically))
        monkeypatch.setattr(cdi, "sync_dir", recorded("cdi", cdi.sync_dir))
        agent = AgentClient(config.agent_socket, 1.0)
        preparer = ClaimPreparer(config, agent, ClaimStore(), store)
        try:
            errors = await preparer.unprepare([ClaimRef("default", "uid-1", "one")])
        finally:
            await agent.close()
    assert errors == {"uid-1": ""}  # a claim of NICs only: unprepared without the agent
    assert {name for name, _ in threads} == {"checkpoint", "cdi"}
    assert [name for name, on_loop in threads if on_loop] == [], threads
