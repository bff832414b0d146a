"""bench/slicer.py --quick runs as the README says and ends with one well-formed RESULT line (its
figures are checked for sense, not for speed: that is the benchmark's job)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULT = re.compile(r"RESULT acceptance_vs_optimum=(\S+) fragmentation=(\S+) decision_p50_ms=(\S+) "
                    r"decision_p99_ms=(\S+) traces=(\d+)")


def test_quick_run_prints_a_result_line() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "slicer.py"), "--quick"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert sum(line.startswith("RESULT ") for line in lines) == 1
    match = RESULT.fullmatch(lines[-1])
    assert match is not None, lines[-1]
    acceptance, fragmentation, p50, p99 = (float(match[i]) for i in range(1, 5))
    assert 0 < acceptance <= 1  # online can never beat the offline optimum
    assert 0 <= fragmentation <= 1
    assert 0 < p50 <= p99
    assert int(match[5]) > 0
