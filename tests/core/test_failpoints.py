"""Failpoints: an armed name SIGKILLs the process there; any other name does nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from runtimekit.failpoints import ENV

SCRIPT = """
from runtimekit.failpoints import failpoint
failpoint("slicer.create.other")
print("before", flush=True)
failpoint("slicer.create.journaled")
print("after", flush=True)
"""


def run(armed: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != ENV}
    if armed is not None:
        env[ENV] = armed
    return subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=60)


def test_an_armed_failpoint_kills_the_process_there() -> None:
    result = run(" slicer.delete.journaled , slicer.create.journaled")
    assert result.returncode == -signal.SIGKILL
    assert result.stdout == "before\n"


def test_unarmed_failpoints_do_nothing() -> None:
    for armed in (None, "", "slicer.create", "slicer.create.journaled.x"):
        result = run(armed)
        assert result.returncode == 0, result.stderr
        assert result.stdout == "before\nafter\n"
