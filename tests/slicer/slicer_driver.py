"""A slicer on a simulated node, in this process or as a real one (``python slicer_driver.py``).

The simulated node lives in the process that installs it; a real driver keeps MIG instances across
the death of the process that made them. So that a SIGKILLed slicer leaves its instances behind as
a real driver would, the simulator's ``MigLayoutFile`` (what ``runtimekit serve --sim`` uses) saves
the node's MIG state (modes, GPU and compute instances with their ids and UUIDs) after every MIG
change, before the NVML call returns, and a new process reads it back. Only the MIG state persists
(processes and faults do not).

As a script: ``slicer_driver.py STATE_DIR OPERATION [ARG]`` builds the node (scenario dgx-a100),
the node state with one sample, and a Slicer on STATE_DIR (CDI specs in STATE_DIR/cdi), starts it
(recovery), performs one operation and prints the slice table as JSON on the last line:
``create-mig``, ``create-tdm``, ``delete SLICE_ID``, ``none`` (start and recover only); a refusal
is printed with the table (``error``: its code and message).
RUNTIMEKIT_FAILPOINTS in the environment kills it at that step.
"""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pynvml

from runtimekit import sim
from runtimekit.config import SlicerConfig
from runtimekit.gpu.nvml import NvmlSession
from runtimekit.gpu.reader import NodeReader
from runtimekit.sim.mig_layout import MigLayoutFile
from runtimekit.slicer.manager import Slicer
from runtimekit.state import NodeState
from runtimekit.state.node import SamplerStats
from runtimekit.state.slices import SliceError, SliceRequest

SCENARIO = "dgx-a100"
MIG_FILE = "simulated-mig.json"


def build(state_dir: Path, node: sim.SimulatedNode | None = None, **config: Any) -> tuple[Slicer, NodeState, sim.SimulatedNode]:
    """A Slicer on ``state_dir`` over a simulated dgx-a100 (installed below pynvml; the caller
    uninstalls it), with its MIG state persisted, and a node state holding one sample."""
    if node is None:
        node = sim.SimulatedNode(sim.load_scenario(SCENARIO), seed=1, load="idle")
    MigLayoutFile(state_dir / MIG_FILE).attach(node)
    sim.install(node)
    session = NvmlSession()
    session.init()
    state = NodeState()
    sample(state, session)
    settings = replace(SlicerConfig(), cdi_dir=str(state_dir / "cdi"), **config)
    return Slicer(state, session, settings, str(state_dir)), state, node


def sample(state: NodeState, session: NvmlSession) -> None:
    """Publish one sample of the node (what the sampler does every cycle)."""
    state.publish_snapshot(NodeReader(session).sample(), SamplerStats())


def table_json(slicer: Slicer) -> dict[str, Any]:
    table = slicer.table()
    return {
        "slices": {i: {"state": s.state, "gpu": s.gpu.index, "gi": s.mig.gpu_instance_id if s.mig else None,
                       "profile": s.profile, "reason": s.reason} for i, s in table.slices.items()},
        "devices": {str(i): {"mode": d.mode, "slices": list(d.slices)} for i, d in table.devices.items()},
    }


async def main(state_dir: Path, operation: str, argument: str) -> None:
    slicer, _, _ = build(state_dir)
    await slicer.start()
    error = ""
    try:
        try:
            if operation == "create-mig":
                await slicer.create(SliceRequest(mode="mig", compute=30, memory="10GiB", owner_id="crash-test"))
            elif operation == "create-tdm":
                await slicer.create(SliceRequest(mode="tdm", compute=50, memory="2GiB", device="2", owner_id="crash-test"))
            elif operation == "delete":
                await slicer.delete(argument)
        except SliceError as refused:
            error = f"{refused.code}: {refused}"
        print(json.dumps({**table_json(slicer), "error": error}))
    finally:
        await slicer.close()
        pynvml.nvmlShutdown()


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else ""))
