"""The agent's real start path after a crash: ``runtimekit serve --sim dgx-a100`` killed (SIGKILL,
``RUNTIMEKIT_FAILPOINTS``) in the middle of ``runtimekit slice create``, then started again without
the failpoint, converges: no instance leaked in the simulated driver (its saved layout,
STATE_DIR/simulated-mig.json, the driver's own state that outlives the agent), no stray CDI file,
no half-made slice in ``runtimekit slice list``.

One case per mode, each at the step that leaves the most behind (the in-process driver,
tests/slicer/test_slicer_crash.py, covers every step); a whole agent takes seconds to start.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.agent_process import ROOT, start_agent, without_pods

CASES = [
    # A GPU instance made and journaled, no compute instance yet.
    ("mig", ["--compute", "30", "--memory", "10GiB"], "slicer.create.gpu_instance_recorded"),
    # The CDI spec written, the slice not yet committed.
    ("tdm", ["--compute", "50", "--memory", "2GiB", "--device", "2"], "slicer.create.cdi_written"),
]


def cli(state_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runtimekit.cli", *args, "--state-dir", str(state_dir)],
                          cwd=ROOT, capture_output=True, text=True, timeout=30)


def slices(state_dir: Path) -> list[dict[str, Any]]:
    listed = cli(state_dir, "slice", "list", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    return json.loads(listed.stdout).get("slices", [])


def driver_instances(state_dir: Path) -> list[tuple[int, int]]:
    saved = json.loads((state_dir / "simulated-mig.json").read_text())
    return [(gpu["index"], gi["id"]) for gpu in saved["gpus"] for gi in gpu["gpu_instances"]]


@pytest.mark.parametrize(("mode", "flags", "failpoint"), CASES, ids=[case[0] for case in CASES])
def test_an_agent_killed_while_creating_a_slice_converges_after_a_restart(tmp_path: Path, mode: str, flags: list[str],
                                                                          failpoint: str) -> None:
    cdi_dir = tmp_path / "cdi"
    config = tmp_path / "runtimekit.yaml"
    config.write_text(f"slicer:\n  cdi_dir: {cdi_dir}\n  reconcile_seconds: 0.2\n")
    state_dir = tmp_path / "state"
    args = ("--sim", without_pods("dgx-a100", tmp_path), "--config", str(config), "--sim-load", "idle")
    clean = {k: v for k, v in os.environ.items() if k != "RUNTIMEKIT_FAILPOINTS"}

    doomed = start_agent(tmp_path, *args, env={**clean, "RUNTIMEKIT_FAILPOINTS": failpoint})
    try:
        create = cli(state_dir, "slice", "create", "--mode", mode, *flags, "--owner", "crash-test")
        assert doomed.process.wait(10) == -signal.SIGKILL, doomed.log()
    finally:
        doomed.stop(signal.SIGKILL)  # nothing to do when the failpoint fired
    assert create.returncode != 0 and "Traceback" not in create.stderr
    left = list(cdi_dir.glob("*.json")) if mode == "tdm" else driver_instances(state_dir)
    assert left, "the kill left something behind for the restart to clean up"

    agent = start_agent(tmp_path, *args, env=clean)
    try:
        deadline = time.monotonic() + 15
        while (slices(state_dir) or driver_instances(state_dir) or list(cdi_dir.glob("*.json"))) \
                and time.monotonic() < deadline:
            time.sleep(0.2)
        assert slices(state_dir) == []
        assert driver_instances(state_dir) == []
        assert list(cdi_dir.glob("*.json")) == []
    finally:
        agent.stop()
