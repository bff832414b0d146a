"""Temporary files left by a writer SIGKILLed between its fsync and its rename (health.json, the DRA
checkpoint) are removed when the file's owner takes it over at start, after its directory lock: the
health store's load, the DRA driver's preparer. The live file, another file's temporary files, a
set-aside copy, a folder or a link of that name pattern stay; a plain reader of the checkpoint (a
tool, a test, while the driver may be writing) removes nothing.

Each leftover comes from a real process killed inside the rename, plus one named as an older
version named them (``.NAME.tmp-PID``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from runtimekit.healthcheck.machine import MachineState
from runtimekit.healthcheck.store import FILE_NAME, HealthStore
from runtimekit.kube.agentclient import AgentClient
from runtimekit.kube.dra.checkpoint import COMPLETED, Checkpoint, ClaimEntry, DeviceEntry
from runtimekit.kube.dra.prepare import ClaimPreparer
from tests.agent_process import ROOT
from tests.dra.dra_claims import NODE, ClaimStore
from tests.dra.dra_rig import NodeAgent, driver_config, short_directory

NIC = DeviceEntry(request="nic", pool=NODE, device="nic-mlx5-0", position=0, kind="nic")
KILLED_IN_RENAME = "import os, signal; os.replace = lambda *args: os.kill(os.getpid(), signal.SIGKILL); "


def _crash_while_writing(code: str) -> None:
    """Run ``code`` in a process that is SIGKILLed when it renames its temporary file."""
    done = subprocess.run([sys.executable, "-c", KILLED_IN_RENAME + code], cwd=ROOT, timeout=30)
    assert done.returncode == -signal.SIGKILL


def _plant_others(folder: Path, name: str) -> set[str]:
    """An older version's leftover (removed) and files that must stay; the names that must stay."""
    (folder / f".{name}.tmp-4242").write_text("{")
    (folder / f".{name}.tmp-folder").mkdir()
    (folder / f".{name}.tmp-link").symlink_to(folder / name)
    (folder / f".other-{name}.tmp-1").write_text("{")
    (folder / f"{name}.corrupt-1").write_text("{")
    return {name, f".{name}.tmp-folder", f".{name}.tmp-link", f".other-{name}.tmp-1", f"{name}.corrupt-1"}


def test_the_health_store_removes_a_killed_writers_temporary_files_at_load(tmp_path: Path) -> None:
    boot_id = tmp_path / "boot_id"
    boot_id.write_text("boot-1\n")
    state_dir = tmp_path / "state"
    HealthStore(state_dir, boot_id_path=str(boot_id)).save(MachineState(), 8)
    live = (state_dir / FILE_NAME).read_bytes()
    _crash_while_writing("from runtimekit.healthcheck.store import HealthStore; "
                         "from runtimekit.healthcheck.machine import MachineState; "
                         f"HealthStore({str(state_dir)!r}, boot_id_path={str(boot_id)!r}).save(MachineState(), 4)")
    kept = _plant_others(state_dir, FILE_NAME)
    assert len(os.listdir(state_dir)) == len(kept) + 2  # the killed writer's temporary file is there

    loaded = HealthStore(state_dir, boot_id_path=str(boot_id)).load()
    assert set(os.listdir(state_dir)) == kept
    assert (state_dir / FILE_NAME).read_bytes() == live and loaded.expected_gpus == 8


async def test_the_dra_driver_removes_a_killed_writers_temporary_files_when_it_takes_the_checkpoint() -> None:
    with short_directory() as directory:
        config = driver_config(directory, NodeAgent(directory, "dgx-h100"))
        Checkpoint.load(config.checkpoint_path).put("uid-1", ClaimEntry("default", "one", COMPLETED, (NIC,)))
        plugin = Path(config.checkpoint_path).parent
        live = Path(config.checkpoint_path).read_bytes()
        _crash_while_writing("from runtimekit.kube.dra.checkpoint import Checkpoint, ClaimEntry; "
                             f"Checkpoint.load({config.checkpoint_path!r}).drop('uid-1')")
        kept = _plant_others(plugin, Path(config.checkpoint_path).name)
        leftovers = len(os.listdir(plugin))

        checkpoint = Checkpoint.load(config.checkpoint_path)  # a reader: it may run beside a driver
        assert len(os.listdir(plugin)) == leftovers
        agent = AgentClient(config.agent_socket, 1.0)
        ClaimPreparer(config, agent, ClaimStore(), checkpoint)  # the driver, holding the directory's lock
        await agent.close()
        assert set(os.listdir(plugin)) == kept
        assert Path(config.checkpoint_path).read_bytes() == live and list(checkpoint.claims) == ["uid-1"]
