"""A slicer journal the agent cannot use stops ``runtimekit serve`` before anything starts: exit
code 2 and one line naming the file and the rule, never a traceback or a restart loop."""

from __future__ import annotations

import subprocess
import sys

from tests.agent_process import ROOT, free_port


def test_a_corrupt_journal_is_refused_at_start_by_name(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    (state / "slicer.db").write_bytes(b"this is not an SQLite database" * 100)
    done = subprocess.run([sys.executable, "-m", "runtimekit.cli", "serve", "--sim", "dgx-a100", "--state-dir", str(state),
                           "--listen", f"127.0.0.1:{free_port()}"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "slicer.db" in done.stderr and "Traceback" not in done.stderr
    assert (state / "slicer.db").read_bytes().startswith(b"this is not"), "the file is kept for a person to look at"
