"""Golden exposition files: the full /metrics text of each simulated scenario, byte for byte.

Regenerate with ``.venv/bin/python -m pytest tests/golden --update-golden`` and review the diff
(node_exporter's ``end-to-end-test.sh -u``). What is pinned is listed in golden_render.py.
"""

from __future__ import annotations

import difflib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

from golden_render import CASES, render  # noqa: E402

SCENARIOS = tuple(CASES)  # every sim.list_scenarios() scenario, plus degraded variants
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


def golden_path(scenario: str) -> Path:
    return HERE / f"{scenario}.prom"


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_exposition_matches_golden_file(scenario, update_golden):
    body = render(scenario)
    path = golden_path(scenario)
    if update_golden:
        path.write_bytes(body)
        return
    assert path.exists(), f"{path.name} is missing; run pytest tests/golden --update-golden"
    golden = path.read_bytes()
    if body != golden:
        diff = "".join(difflib.unified_diff(
            golden.decode().splitlines(keepends=True), body.decode().splitlines(keepends=True),
            f"{path.name} (golden)", f"{path.name} (now)", n=1,
        ))
        pytest.fail(f"exposition differs from {path.name}; if intended, rerun with --update-golden\n{diff[:6000]}")


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_render_is_stable_in_process_and_across_processes(scenario):
    first = render(scenario)
    assert render(scenario) == first
    # Another interpreter, another hash seed: no dict/set ordering or id() leaks into the output.
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONHASHSEED": "12345"}
    result = subprocess.run(
        [sys.executable, str(HERE / "golden_render.py"), scenario], cwd=ROOT, env=env, capture_output=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout == first


@pytest.mark.skipif(not Path(PROMTOOL).exists(), reason="promtool is not installed")
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_golden_file_passes_promtool_silently(scenario):
    path = golden_path(scenario)
    assert path.exists(), f"{path.name} is missing; run pytest tests/golden --update-golden"
    result = subprocess.run([PROMTOOL, "check", "metrics"], input=path.read_bytes(), capture_output=True, timeout=60)
    assert (result.returncode, result.stdout.decode(), result.stderr.decode()) == (0, "", "")


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_golden_file_shows_the_pinned_conditions(scenario):
    """A reviewer's checklist for the golden content itself (guards against regenerating junk)."""
    text = golden_path(scenario).read_text()
    assert 'runtimekit_build_info{python_version="3.11.0",version="0.0.0+golden"} 1.0' in text
    assert "runtimekit_nvml_up 1.0" in text
    assert "runtimekit_snapshot_age_seconds 2.0" in text
    assert "runtimekit_gpus 8.0" in text
    assert 'runtimekit_gpu_xid_errors_total{gpu="1",' in text and 'xid="13"} 1.0' in text
    assert "runtimekit_collector_success{collector=" in text and 'runtimekit_collector_success{collector="self"} 1.0' in text
    assert 'runtimekit_collector_duration_seconds{collector="self"} 0.0\n' in text  # the pinned timer
    assert "NaN" not in text and "-1.0\n" not in text
    lost = {"dgx-h100-xid-79": {5}}.get(scenario, set())
    for gpu in range(8):
        assert f'runtimekit_gpu_lost{{gpu="{gpu}",' in text
        assert (f'runtimekit_gpu_power_draw_watts{{gpu="{gpu}",' in text) is (gpu not in lost)
        if gpu in lost:
            assert f'runtimekit_gpu_xid_errors_total{{gpu="{gpu}",' in text and 'xid="79"} 1.0' in text
