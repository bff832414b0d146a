"""SIGKILL at every step of create and delete, TDM and MIG, and of the recovery after such a crash, in a
real process; a restart converges.

Each case runs ``slicer_driver.py`` (a Slicer on a simulated dgx-a100 with its journal in a state
folder) as a real process with ``RUNTIMEKIT_FAILPOINTS`` naming one step: the process kills itself
there, SIGKILL, no cleanup. The simulated node's MIG state outlives the process as a driver's does
(the driver script persists it after every MIG call, before the call returns). A second process
starts the slicer on the same folder (recovery) and the checks read what it left: every GPU
instance belongs to a slice (no leak), a committed slice is still there (none lost), and the CDI
folder holds exactly the slices' specs (no stray file).

Why a driver script rather than ``runtimekit serve``: the simulated node lives inside the agent's
process and dies with it, and a whole agent takes seconds to start per case; the script runs the
production Slicer with the same journal, NVML layer and failpoints in well under a second.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
DRIVER = HERE / "slicer_driver.py"

CREATE_STEPS = {
    "mig": ["journaled", "gpu_instance", "gpu_instance_recorded", "compute_instance", "compute_instance_recorded",
            "cdi_written", "committed"],
    "tdm": ["journaled", "cdi_written", "committed"],
}
DELETE_STEPS = {
    "mig": ["journaled", "compute_instance", "compute_instance_recorded", "gpu_instance", "gpu_instance_recorded",
            "cdi_removed"],
    "tdm": ["journaled", "cdi_removed"],
}
# A restart's recovery finishes or rolls back a slice with the delete's steps, under its own names.
RECOVER_STEPS = DELETE_STEPS["mig"][1:]


def drive(state_dir: Path, *args: str, failpoint: str = "") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "RUNTIMEKIT_FAILPOINTS"}
    if failpoint:
        env["RUNTIMEKIT_FAILPOINTS"] = failpoint
    return subprocess.run([sys.executable, str(DRIVER), str(state_dir), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)


def table(run: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.strip().splitlines()[-1])


def instances(state_dir: Path) -> list[tuple[int, int]]:
    """(GPU index, GPU instance id) of every instance the simulated driver holds."""
    saved = json.loads((state_dir / "simulated-mig.json").read_text())
    return sorted((gpu["index"], gi["id"]) for gpu in saved["gpus"] for gi in gpu["gpu_instances"])


def converged(state_dir: Path) -> dict[str, Any]:
    """Restart, then check: no leaked instance, no stray CDI spec, every slice ready."""
    after = table(drive(state_dir, "none"))
    slices = after["slices"]
    assert all(s["state"] == "ready" for s in slices.values()), slices
    assert instances(state_dir) == sorted((s["gpu"], s["gi"]) for s in slices.values() if s["gi"] is not None)
    specs = sorted(p.name for p in (state_dir / "cdi").glob("*")) if (state_dir / "cdi").exists() else []
    assert specs == sorted(f"runtimekit_io-slice-{i}.json" for i in slices)
    return slices


@pytest.mark.parametrize(("mode", "step"), [(m, s) for m, steps in CREATE_STEPS.items() for s in steps])
def test_sigkill_during_create_then_restart_converges(tmp_path: Path, mode: str, step: str) -> None:
    killed = drive(tmp_path, f"create-{mode}", failpoint=f"slicer.create.{step}")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    slices = converged(tmp_path)
    # Committed: the slice stays (lost otherwise). Before: rolled back, the caller got no answer.
    assert len(slices) == (1 if step == "committed" else 0)


@pytest.mark.parametrize(("mode", "step"), [(m, s) for m, steps in DELETE_STEPS.items() for s in steps])
def test_sigkill_during_delete_then_restart_converges(tmp_path: Path, mode: str, step: str) -> None:
    kept = table(drive(tmp_path, f"create-{mode}"))["slices"]  # one slice that stays through it all
    made = table(drive(tmp_path, f"create-{mode}"))["slices"]
    (victim,) = set(made) - set(kept)
    killed = drive(tmp_path, "delete", victim, failpoint=f"slicer.delete.{step}")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    slices = converged(tmp_path)
    assert set(slices) == set(kept)  # the deleted one finished, the other untouched


@pytest.mark.parametrize("first", ["create", "delete"])
@pytest.mark.parametrize("step", RECOVER_STEPS)
def test_sigkill_during_the_recovery_of_a_crash_then_restart_converges(tmp_path: Path, first: str, step: str) -> None:
    """A crash while a restart recovers from a crash: the first kill leaves a MIG slice half made (every
    part made, not committed) or half deleted (nothing destroyed yet); the restart dies at one step of
    finishing it; a third start converges."""
    kept = table(drive(tmp_path, "create-mig"))["slices"]
    if first == "create":
        killed = drive(tmp_path, "create-mig", failpoint="slicer.create.cdi_written")
    else:
        (victim,) = set(table(drive(tmp_path, "create-mig"))["slices"]) - set(kept)
        killed = drive(tmp_path, "delete", victim, failpoint="slicer.delete.journaled")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    recovering = drive(tmp_path, "none", failpoint=f"slicer.recover.{step}")
    assert recovering.returncode == -signal.SIGKILL, recovering.stderr  # every step is reached: it died there
    assert set(converged(tmp_path)) == set(kept)


def test_a_failed_create_rolls_back_without_firing_the_delete_failpoints(tmp_path: Path) -> None:
    """The CDI spec cannot be written (its folder is a file): the MIG instance made is rolled back at
    once. Rolling back is not a delete asked for: the delete steps' failpoints, armed, do not fire."""
    (tmp_path / "cdi").write_text("")
    armed = [f"slicer.{kind}.{step}" for kind in ("delete", "recover") for step in DELETE_STEPS["mig"]]
    run = drive(tmp_path, "create-mig", failpoint=",".join(armed))
    after = table(run)
    assert after["error"].startswith("unavailable: creating the slice failed, nothing was kept")
    assert after["slices"] == {} and instances(tmp_path) == []
