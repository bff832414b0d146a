"""Golden exposition files: the full served /metrics text of each simulated scenario, byte for byte
(card, process, pod, attribution and health families, rendered through the exporter's route).

Regenerate with ``.venv/bin/python -m pytest tests/golden --update-golden`` and review the diff
(node_exporter's ``end-to-end-test.sh -u``). What is served and what is pinned is listed in
golden_render.py.
"""

from __future__ import annotations

import difflib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

from golden_render import CASES, render  # noqa: E402

from runtimekit import sim  # noqa: E402

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


@pytest.mark.tool("promtool")
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
    assert "runtimekit_last_sample_timestamp_seconds 1.7500003e+09\n" in text  # SAMPLED_AT
    assert "runtimekit_attribution_last_refresh_timestamp_seconds 1.7500003e+09\n" in text
    assert "_age_seconds" not in text  # timestamps, never ages: a cached exposition stays true
    gpus = len(sim.load_scenario(CASES[scenario][0]).gpus)
    assert f"runtimekit_gpus {gpus:.1f}" in text
    assert 'runtimekit_gpu_xid_errors_total{gpu="1",' in text and 'xid="13"} 1.0' in text
    assert "runtimekit_collector_success{collector=" in text and 'runtimekit_collector_success{collector="self"} 1.0' in text
    assert 'runtimekit_collector_duration_seconds{collector="self"} 0.0\n' in text  # the pinned timer
    assert "NaN" not in text and "-1.0\n" not in text
    # The attribution families, from the simulator's fake kubelet, CRI runtime and /proc.
    for source in ("kubelet", "cri", "procfs"):
        assert f'runtimekit_attribution_source_up{{source="{source}"}} 1.0' in text
    assert 'runtimekit_process_gpu_memory_bytes{' in text and 'namespace="sim",pid="' in text
    assert 'runtimekit_pod_gpu_allocated{compute_instance="",container="worker",device_id="' in text
    assert 'pod="sim-pod-0003"' in text
    assert 'runtimekit_process_info{command="python -m torch.distributed.run train.py --config llama.yaml --wandb-api-key=<redacted>"' in text
    assert "sim-secret" not in text
    # The health families, from the real detectors and state machine: XID 13 is an application fault.
    assert re.search(r'runtimekit_gpu_fault_active\{[^}]*fault="xid_13",gpu="1",severity="info",', text)
    assert "runtimekit_health_evaluation_seconds 0.0\n" in text
    assert 'runtimekit_exposition_renders_total{trigger="scrape"} 1.0\n' in text
    lost = {"dgx-h100-xid-79": {5}}.get(scenario, set())
    for gpu in range(gpus):
        assert f'runtimekit_gpu_lost{{gpu="{gpu}",' in text
        assert (f'runtimekit_gpu_power_draw_watts{{gpu="{gpu}",' in text) is (gpu not in lost)
        health = "unhealthy" if gpu in lost else "healthy"
        assert re.search(rf'runtimekit_gpu_health\{{gpu="{gpu}",state="{health}",uuid="[^"]+"\}} 1\.0', text)
        if gpu in lost:
            assert f'runtimekit_gpu_xid_errors_total{{gpu="{gpu}",' in text and 'xid="79"} 1.0' in text
    node = "unhealthy" if lost else "healthy"
    assert f'runtimekit_node_health{{state="{node}"}} 1.0' in text
    # MIG: dgx-a100 starts GPUs 0 and 1 in MIG mode (healthy, as above); dgx-a100-mig has instances on GPU 0.
    mig = CASES[scenario][0] == "dgx-a100"
    mig_capable = all(gpu.model.mig_capable for gpu in sim.load_scenario(CASES[scenario][0]).gpus)
    mode = re.search(r'runtimekit_gpu_mig_mode\{gpu="0",state="current",uuid="[^"]+"\} (\S+)\n', text)
    assert (mode.group(1) if mode else None) == ({True: "1.0", False: "0.0"}[mig] if mig_capable else None)
    assert ('runtimekit_gpu_mig_devices{gpu="1",' in text) is mig
    if scenario == "dgx-a100-mig":
        assert re.search(r'runtimekit_gpu_mig_device_info\{compute_instance="0",gpu="0",gpu_instance="1",mig_uuid="MIG-[^"]+",'
                         r'profile="3g.40gb",uuid="[^"]+"\} 1\.0', text)
        assert re.search(r'runtimekit_pod_gpu_memory_used_bytes\{compute_instance="0",container="server",gpu="0",'
                         r'gpu_instance="1",namespace="ml",pod="infer-0",uuid="[^"]+"\} 6\.442450944e\+09', text)
        assert 'runtimekit_process_gpu_sm_utilization_ratio{compute_instance="0"' not in text  # not in MIG
