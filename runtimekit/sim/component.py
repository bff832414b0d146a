"""The simulated node as a component the command line registers (``runtimekit serve --sim``).

The production agent knows nothing of it: its ``sim.*`` configuration keys (``SIM_SCHEMA``) exist
only when the command line registers it, and so do its control routes (``/sim/v1/...``, loopback
only). Its host paths — the fake kubelet's and CRI runtime's sockets, the fixture /proc and /sys
trees, the boot id file — are handed to the agent as ordinary configuration, so the production attribution
and health code reads them as it would a real node's.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import os
import shutil
import tempfile
from pathlib import Path

from runtimekit import sim
from runtimekit.config import Config, Key, SlicerConfig, TopologyConfig, between
from runtimekit.service import Registration
from runtimekit.sim.control import add_control_routes
from runtimekit.sim.host import SimulatedHost
from runtimekit.sim.mig_layout import MigLayoutFile
from runtimekit.supervisor import ComponentSpec

log = logging.getLogger("runtimekit.sim")

SIM_SCHEMA: dict[str, Key] = {
    "sim.scenario": Key(str, "dgx-h100", "the simulated node's scenario: a built-in name or a scenario YAML path"),
    "sim.seed": Key((int, type(None)), None, "seed for the simulated node's live behaviour (None: the scenario's)"),
    "sim.load": Key(
        (str, type(None)), None, "simulated workload (None: the scenario's)", allowed=("training", "busy", "idle", None)
    ),
    "sim.processes": Key(int, 16, "simulated GPU processes kept running on the node", between(0, 100_000)),
    "sim.pods": Key(
        int, 0, "extra simulated pods sharing the GPUs (time-sliced), running the simulated processes",
        between(0, 10_000),
    ),
}


class Simulation:
    """One simulated node and the host around it, for the lifetime of one ``serve``."""

    def __init__(self, config: Config) -> None:
        extra = config.extra
        self.node = sim.SimulatedNode(
            sim.load_scenario(extra["sim.scenario"]), seed=extra["sim.seed"], load=extra["sim.load"]
        )
        self.node.set_pod_count(extra["sim.pods"])
        self.node.set_process_count(extra["sim.processes"])
        self.root = _host_root(config.state_dir)
        # The simulated node's boot id lives in the agent's state directory: it stays the same across
        # agent restarts (sticky faults stay), and changes only with `runtimekit sim reboot`.
        try:
            self.host = SimulatedHost(self.node, self.root, boot_id_path=str(Path(config.state_dir) / "simulated-boot-id"))
            # The simulated driver's MIG modes and instances outlive the agent's process, as a
            # real driver's do: kept in the state directory, restored at the next start.
            MigLayoutFile(Path(config.state_dir) / "simulated-mig.json").attach(self.node)
        except BaseException:
            self.remove()
            raise

    def configure(self, config: Config) -> Config:
        """The agent's configuration with the simulated host's paths in place of the real node's."""
        attribution = dataclasses.replace(
            config.attribution,
            kubelet_socket=self.host.kubelet_socket,
            cri_socket=self.host.cri_socket,
            proc_root=self.host.proc_root,
        )
        health = dataclasses.replace(config.health, boot_id_path=self.host.boot_id_path)
        # CDI specifications of TDM slices go to the simulated host, unless configured elsewhere.
        slicer = config.slicer
        if slicer.cdi_dir == SlicerConfig().cdi_dir:
            slicer = dataclasses.replace(slicer, cdi_dir=str(self.root / "cdi"))
        # Topology discovery reads the simulated host's sysfs tree, unless configured elsewhere.
        topology = config.topology
        if topology.sys_root == TopologyConfig().sys_root:
            topology = dataclasses.replace(topology, sys_root=self.host.sys_root)
        return dataclasses.replace(config, attribution=attribution, health=health, slicer=slicer, topology=topology)

    def registration(self) -> Registration:
        return Registration(
            ComponentSpec("simulator", lambda: SimulatorComponent(self), True, "the simulated node below pynvml"),
            add_routes=lambda app: add_control_routes(app, self.node, self.host),
            description=f"simulated node {self.node.scenario.name}",
        )

    def remove(self) -> None:
        """Delete the simulated host's files (after the agent stopped)."""
        shutil.rmtree(self.root, ignore_errors=True)


class SimulatorComponent:
    """Installs the fake NVML library below pynvml and serves the fake kubelet and CRI runtime
    (and writes /proc) from the simulated host's own thread, which ``start`` starts and ``close``
    ends (``SimulatedHost.start(own_thread=True)``)."""

    def __init__(self, simulation: Simulation) -> None:
        self.simulation = simulation
        self.started = False

    async def start(self) -> None:
        node, host = self.simulation.node, self.simulation.host
        sim.install(node)
        # The host side (fake kubelet and CRI servers, /proc writes) in a thread of its own: on a real
        # node it is other programs' work, and there it can be told apart from the agent's (its
        # native thread id is in GET /sim/v1/host). The fake NVML library stays in the agent's
        # threads, as libnvidia-ml does.
        await host.start(own_thread=True)
        self.started = True
        log.info("simulated node %r installed below pynvml (%d GPUs); kubelet, CRI and /proc under %s,"
                 " served by thread %s", node.scenario.name, len(node.scenario.gpus), self.simulation.root,
                 host.thread_id)

    async def run(self) -> None:
        await asyncio.Event().wait()  # serves (from start's servers and the installed library) until cancelled

    async def close(self) -> None:
        if self.started:
            self.started = False
            await self.simulation.host.stop()
        sim.uninstall()


def _memory_backed_tmp() -> str:
    """/dev/shm when writable (the simulated /proc is rewritten often: keep it off the disk), else
    the temporary directory."""
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else tempfile.gettempdir()


def _host_root(state_dir: str) -> Path:
    """A fresh, empty directory for the simulated host's files, named after the agent's state
    directory (``runtimekit-sim-<16 hex digits of its path's SHA-256>``): the same on every start
    of that agent, so what a killed agent left behind (sockets, the /proc tree) is removed by its
    next start instead of piling up in /dev/shm. Two agents never share a state directory."""
    digest = hashlib.sha256(str(Path(state_dir).resolve()).encode("utf-8", "surrogateescape")).hexdigest()[:16]
    root = Path(_memory_backed_tmp()) / f"runtimekit-sim-{digest}"
    if root.is_symlink() or root.is_file():
        root.unlink()
    elif root.exists():
        log.info("removing %s, left behind by a simulated node that did not stop cleanly", root)
        shutil.rmtree(root)
    root.mkdir(mode=0o700)
    return root

