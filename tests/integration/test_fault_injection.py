"""Every simulator fault kind, injected into a running agent with ``runtimekit sim inject``.

Each case shows the metric that changes, and that it changes within two sampling cycles of the
injection — counted in the agent's own ``runtimekit_samples_total``, not in wall-clock time, so
the assertion holds on a slow machine. The command runs in this process (``runtimekit.cli.main``,
its parser built once before the first case): a new interpreter would spend more than one
0.5 s cycle starting up between the count and the injection. ``--clear`` then undoes what can be undone (counters
never go back).
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
import time

import pytest

from runtimekit import cli
from tests.agent_process import ROOT, start_agent

INTERVAL = "0.5"


@pytest.fixture(scope="module")
def agent(tmp_path_factory):
    agent = start_agent(tmp_path_factory.mktemp("faults"), "--sim", "dgx-h100", "--interval", INTERVAL,
                        "--sim-processes", "0", "--sim-load", "idle", "--seed", "7")
    cli.parser()  # its lazy imports now, not inside the first case's count
    yield agent
    agent.stop()


def inject(agent, gpu: int, *args: str) -> dict:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli.main(["sim", "inject", "--agent", agent.url, "--gpu", str(gpu), *args])
    assert code == 0, out.getvalue()
    return json.loads(out.getvalue())


def wait_for(agent, condition, started_at_cycle: float, timeout: float = 20.0):
    """Poll /metrics until ``condition(agent)`` holds; returns the cycles it took."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition(agent):
            return agent.samples_total() - started_at_cycle
        time.sleep(0.05)
    raise AssertionError(f"condition not met within {timeout} s; log:\n{agent.log()[-3000:]}")


def value(agent, name, gpu, **labels):
    return agent.value(name, gpu=str(gpu), **labels)


CASES = [
    # (fault args, gpu, condition after injection, condition after clear or None)
    (["--fault", "xid", "--xid", "13"], 0,
     lambda a: value(a, "runtimekit_gpu_xid_errors_total", 0, xid="13") == 1, None),
    (["--fault", "ecc-uncorrectable"], 1,
     lambda a: (value(a, "runtimekit_gpu_ecc_errors", 1, type="uncorrected", counter="volatile") or 0) >= 1
     and value(a, "runtimekit_gpu_xid_errors_total", 1, xid="48") == 1, None),
    (["--fault", "row-remap-pending"], 2,
     lambda a: value(a, "runtimekit_gpu_remapped_rows_pending", 2) == 1,
     lambda a: value(a, "runtimekit_gpu_remapped_rows_pending", 2) == 0),
    (["--fault", "row-remap-failure"], 3,
     lambda a: value(a, "runtimekit_gpu_remapped_rows_failure", 3) == 1,
     lambda a: value(a, "runtimekit_gpu_remapped_rows_failure", 3) == 0),
    (["--fault", "gpu-lost"], 4,
     lambda a: value(a, "runtimekit_gpu_lost", 4) == 1 and value(a, "runtimekit_gpu_power_draw_watts", 4) is None,
     lambda a: value(a, "runtimekit_gpu_lost", 4) == 0 and value(a, "runtimekit_gpu_power_draw_watts", 4) is not None),
    (["--fault", "nvlink-down", "--link", "5"], 5,
     lambda a: value(a, "runtimekit_gpu_nvlink_up", 5, link="5") == 0,
     lambda a: value(a, "runtimekit_gpu_nvlink_up", 5, link="5") == 1),
    (["--fault", "nvlink-crc", "--rate", "1000", "--link", "2"], 6,
     lambda a: (value(a, "runtimekit_gpu_nvlink_errors_total", 6, link="2", counter="crc_flit") or 0) > 0, None),
    (["--fault", "compute-mode", "--mode", "prohibited"], 7,
     lambda a: value(a, "runtimekit_gpu_compute_mode", 7, mode="prohibited") == 1,
     lambda a: value(a, "runtimekit_gpu_compute_mode", 7, mode="default") == 1),
    (["--fault", "driver-error"], 0,
     lambda a: (value(a, "runtimekit_gpu_reading_errors", 0) or 0) > 0
     and value(a, "runtimekit_gpu_power_draw_watts", 0) is None,
     lambda a: value(a, "runtimekit_gpu_power_draw_watts", 0) is not None),
    (["--fault", "thermal-slowdown"], 1,
     lambda a: value(a, "runtimekit_gpu_clock_event_active", 1, reason="hw_thermal_slowdown") == 1,
     lambda a: value(a, "runtimekit_gpu_clock_event_active", 1, reason="hw_thermal_slowdown") == 0),
    (["--fault", "power-brake"], 2,
     lambda a: value(a, "runtimekit_gpu_clock_event_active", 2, reason="hw_power_brake_slowdown") == 1,
     lambda a: value(a, "runtimekit_gpu_clock_event_active", 2, reason="hw_power_brake_slowdown") == 0),
    (["--fault", "pcie-downtrain", "--width", "8"], 3,
     lambda a: value(a, "runtimekit_gpu_pcie_link_width", 3) == 8,
     lambda a: value(a, "runtimekit_gpu_pcie_link_width", 3) == 16),
]


@pytest.mark.parametrize("args, gpu, shows, cleared", CASES, ids=[c[0][1] for c in CASES])
def test_fault_shows_within_two_cycles_and_clears(agent, args, gpu, shows, cleared):
    assert not shows(agent), "the fault's signal is there before injection"
    before = agent.samples_total()
    inject(agent, gpu, *args)
    cycles = wait_for(agent, shows, before)
    assert cycles <= 2, f"took {cycles} sampling cycles"
    inject(agent, gpu, "--fault", args[1], "--clear")
    if cleared is not None:
        wait_for(agent, cleared, agent.samples_total())


def test_memory_leak_holds_memory_with_no_process(agent):
    used = lambda a: value(a, "runtimekit_gpu_memory_used_bytes", 6)  # noqa: E731
    baseline = used(agent)
    before = agent.samples_total()
    inject(agent, 6, "--fault", "memory-leak", "--bytes", str(8 << 30))
    cycles = wait_for(agent, lambda a: used(a) >= baseline + (8 << 30) * 0.99, before)
    assert cycles <= 2
    inject(agent, 6, "--fault", "memory-leak", "--clear")
    wait_for(agent, lambda a: used(a) < baseline + (1 << 30), agent.samples_total())


def test_xid_79_loses_one_gpu_and_the_other_seven_keep_flowing(agent):
    energy = {gpu: value(agent, "runtimekit_gpu_energy_joules_total", gpu) for gpu in range(8)}
    before = agent.samples_total()
    inject(agent, 3, "--fault", "xid", "--xid", "79")
    cycles = wait_for(agent, lambda a: value(a, "runtimekit_gpu_lost", 3) == 1
                      and value(a, "runtimekit_gpu_xid_errors_total", 3, xid="79") == 1, before)
    assert cycles <= 2
    # two more cycles later, every other GPU still reports fresh, growing readings
    wait_for(agent, lambda a: a.samples_total() >= before + cycles + 2, before)
    for gpu in (0, 1, 2, 4, 5, 6, 7):
        assert value(agent, "runtimekit_gpu_lost", gpu) == 0
        assert value(agent, "runtimekit_gpu_energy_joules_total", gpu) > energy[gpu]
    assert value(agent, "runtimekit_gpu_energy_joules_total", 3) is None
    inject(agent, 3, "--clear")


def test_inject_rejects_bad_input_and_changes_nothing(agent):
    command = [sys.executable, "-m", "runtimekit.cli", "sim", "inject", "--agent", agent.url]
    bad_gpu = subprocess.run([*command, "--gpu", "99", "--fault", "gpu-lost"], cwd=ROOT, capture_output=True,
                             text=True, timeout=30)
    assert bad_gpu.returncode == 2 and "gpu" in bad_gpu.stderr
    bad_mode = subprocess.run([*command, "--gpu", "0", "--fault", "compute-mode", "--mode", "sideways"], cwd=ROOT,
                              capture_output=True, text=True, timeout=30)
    assert bad_mode.returncode == 2 and "mode" in bad_mode.stderr
    assert value(agent, "runtimekit_gpu_lost", 99) is None
    assert value(agent, "runtimekit_gpu_compute_mode", 0, mode="default") == 1
