"""Issue #11's third Done-when point, end to end with real processes: ``runtimekit topo`` on
``runtimekit serve --sim dgx-h100`` shows NVLink between every GPU pair (through the NVSwitch) and
each GPU's own NIC on its PCIe switch; on the PCIe-only scenario, ``runtimekit topo allocate
--count 2`` returns two GPUs under one PCIe switch."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.agent_process import ROOT, start_agent

#: The DGX H100 user guide's GPU -> compute NIC table (runtimekit/sim/scenarios/dgx-h100.yaml).
OWN_NIC = ["mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11"]


def runtimekit(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runtimekit.cli", *argv], cwd=ROOT, capture_output=True, text=True, timeout=60)


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A short path: the agent's unix socket lives in its state directory (108 bytes at most)."""
    path = Path(tempfile.mkdtemp(prefix="rk-dw-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_topo_on_a_simulated_dgx_h100_shows_nvlink_everywhere_and_each_gpus_own_nic(short_dir: Path) -> None:
    agent = start_agent(short_dir, "--sim", "dgx-h100")
    try:
        deadline = time.monotonic() + 30
        while agent.get("/api/v1/topology")[0] != 200:  # discovered after the first sample
            assert time.monotonic() < deadline, agent.log()
            time.sleep(0.1)
        shown = runtimekit("topo", "--state-dir", str(short_dir / "state"))
    finally:
        agent.stop()
    assert (shown.returncode, shown.stderr) == (0, ""), shown.stderr
    lines = shown.stdout.splitlines()
    header = lines[0].split()
    assert header == [f"GPU{i}" for i in range(8)] + [f"NIC{i}" for i in range(8)] + ["NUMA", "Socket", "PCIe-Root"]
    rows = {line.split()[0]: line.split()[1:] for line in lines[1:17]}
    nic_names = dict(line.strip().split(": ") for line in lines if line.startswith("  NIC"))
    for gpu in range(8):
        cells = rows[f"GPU{gpu}"]
        assert [cells[peer] for peer in range(8) if peer != gpu] == ["NV18"] * 7, cells
        own = [f"NIC{n}" for n in range(8) if cells[8 + n] == "PIX"]
        assert [nic_names[nic] for nic in own] == [OWN_NIC[gpu]], cells


def test_topo_allocate_two_on_the_pcie_server_takes_two_gpus_under_one_switch() -> None:
    chosen = runtimekit("topo", "allocate", "--scenario", "pcie-inference", "--count", "2", "-o", "json")
    assert chosen.returncode == 0, chosen.stderr
    gpus = json.loads(chosen.stdout)["gpus"]
    from runtimekit.sim import load_scenario

    switches = {g.index: g.pcie_switch for g in load_scenario("pcie-inference").gpus}
    assert len(gpus) == 2 and switches[gpus[0]] == switches[gpus[1]]
