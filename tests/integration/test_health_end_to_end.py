"""The health checker end to end: a real agent on the simulated DGX H100, every simulator fault kind.

For each fault, ``GET /api/v1/health`` and ``runtimekit_gpu_health`` change for exactly the affected
GPU within two sampling cycles (counted in the agent's own ``runtimekit_samples_total``, so the
assertion holds on a slow machine; the observed count may include the next sample, whose verdict
is still being made); after ``--clear`` a fault that clears on clean samples returns
the GPU to healthy, and a sticky one (GPU reset / node reboot) keeps it where it is — the simulator
cannot reset a GPU, and nothing but a reset or reboot may clear those. XID 13 once changes nothing,
five bursts do. Restarting the agent (same state directory, same seed) keeps an unhealthy GPU
unhealthy.

Faults are injected through the simulator's control API with the client ``runtimekit sim inject``
uses (``inject_remote``), which saves a Python start-up per injection. The detectors' confirmation
windows (durations in seconds, which still need two readings; bursts 10 s apart; the wait for an
XID 94 to explain an ECC counter jump) are shortened by a thresholds file so that "within
two cycles" and "five bursts" fit in a test; the defaults are exercised by the detectors' own tests.
"""

from __future__ import annotations

import json
import time

import pytest

from runtimekit.client import inject_remote
from tests.agent_process import Agent, parse_samples, start_agent

INTERVAL = "0.3"
GPUS = 8
THRESHOLDS = """\
ecc:
  contained_xid_window_seconds: 0.3
driver:
  error_seconds: 0
  app_xid_burst_seconds: 0.2
memory_leak:
  orphan_seconds: 0
  require_visible_processes: false
thermal_power:
  thermal_seconds: 0
  power_brake_seconds: 0
pcie:
  degraded_seconds: 0
  replay_window_seconds: 0.6  # at least the sampling interval (0.3 s)
"""


@pytest.fixture(scope="module")
def config_file(tmp_path_factory):
    folder = tmp_path_factory.mktemp("health-config")
    (folder / "thresholds.yaml").write_text(THRESHOLDS)
    path = folder / "runtimekit.yaml"
    path.write_text(json.dumps({"health": {"thresholds": str(folder / "thresholds.yaml")}}))
    return path


def launch(folder, config_file) -> Agent:
    return start_agent(folder, "--config", str(config_file), "--sim", "dgx-h100", "--interval", INTERVAL,
                       "--sim-processes", "0", "--sim-load", "idle", "--seed", "7")


@pytest.fixture(scope="module")
def agent(tmp_path_factory, config_file):
    agent = launch(tmp_path_factory.mktemp("health"), config_file)
    wait_until(agent, lambda view: view is not None)
    yield agent
    agent.stop()


class View:
    """One look at the agent: the health API and the metrics, fetched together."""

    def __init__(self, agent: Agent):
        status, _, body = agent.get("/api/v1/health")
        self.api = json.loads(body) if status == 200 else None
        self.samples = parse_samples(agent.metrics_text())

    @property
    def cycles(self) -> float:
        return self.samples.get(("runtimekit_samples_total", frozenset()), 0.0)

    def api_state(self, gpu: int) -> str:
        return self.api["gpus"][gpu]["state"]

    def metric_state(self, gpu: int) -> str | None:
        states = [dict(labels)["state"] for (name, labels), value in self.samples.items()
                  if name == "runtimekit_gpu_health" and dict(labels)["gpu"] == str(gpu) and value == 1.0]
        return states[0] if len(states) == 1 else None

    def state(self, gpu: int) -> str | None:
        """The GPU's state when the API and the metric agree (None otherwise)."""
        api = self.api_state(gpu)
        return api if api == self.metric_state(gpu) else None

    def states(self) -> list[str | None]:
        return [self.state(gpu) for gpu in range(GPUS)]

    def faults(self, gpu: int) -> dict[str, dict]:
        return {f["fault"]: f for f in self.api["gpus"][gpu]["faults"]}


def wait_until(agent: Agent, condition, timeout: float = 20.0) -> View:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            view = View(agent)
            if view.api is not None and condition(view):
                return view
        except (KeyError, IndexError, TypeError):
            pass
        time.sleep(0.03)
    raise AssertionError(f"condition not met within {timeout} s; log:\n{agent.log()[-4000:]}")


def inject(agent: Agent, gpu: int, fault: str, **params) -> None:
    inject_remote(agent.url, gpu, fault, params)


def clear(agent: Agent, gpu: int, fault: str) -> None:
    inject_remote(agent.url, gpu, fault, {}, clear=True)


def xid_to_verdict_seconds(log: str, xid: int, gpu: int) -> float:
    """Seconds between the event thread's "XID n on GPU g" line and the health transition line."""
    def stamp(line: str) -> float:
        day, clock = line.split()[:2]
        seconds, millis = clock.split(",")
        h, m, s = map(int, seconds.split(":"))
        return h * 3600 + m * 60 + s + int(millis) / 1000
    lines = log.splitlines()
    event = next(line for line in lines if f"XID {xid} on GPU {gpu} " in line)
    verdict = next(line for line in lines if f"runtimekit.health: GPU {gpu} (" in line and "healthy → " in line)
    return stamp(verdict) - stamp(event)


STICKY, CLEAN = "sticky", "clean"
# (fault kind, params, GPU, expected state, expected fault, clears). Sticky cases each get their own
# GPU of the shared agent (they stay unhealthy); clean cases share GPUs 6 and 7, which they leave healthy.
CASES = [
    ("xid", {"xid": 79}, 0, "unhealthy", "gpu_lost", STICKY),
    ("xid", {"xid": 48}, 1, "unhealthy", "ecc_uncorrectable", STICKY),
    ("ecc-uncorrectable", {}, 2, "unhealthy", "ecc_uncorrectable", STICKY),
    ("row-remap-pending", {}, 3, "suspect", "row_remap_pending", STICKY),
    ("row-remap-failure", {}, 4, "unhealthy", "row_remap_failure", STICKY),
    ("gpu-lost", {}, 5, "unhealthy", "gpu_lost", STICKY),
    ("nvlink-down", {"link": 5}, 6, "unhealthy", "nvlink_down", CLEAN),
    ("nvlink-crc", {"rate": 1000.0, "link": 2}, 7, "unhealthy", "nvlink_error_storm", CLEAN),
    ("compute-mode", {"mode": "prohibited"}, 6, "unhealthy", "compute_mode_prohibited", CLEAN),
    ("memory-leak", {"bytes": 8 << 30}, 7, "suspect", "memory_orphaned", CLEAN),
    ("driver-error", {}, 6, "suspect", "nvml_errors", CLEAN),
    ("thermal-slowdown", {}, 7, "suspect", "thermal_slowdown", CLEAN),
    ("power-brake", {}, 6, "unhealthy", "power_brake", CLEAN),
    ("pcie-downtrain", {"width": 8}, 7, "suspect", "pcie_width_degraded", CLEAN),
    ("pcie-replays", {"rate": 100.0}, 6, "suspect", "pcie_replay_rate", CLEAN),
]


@pytest.mark.parametrize("fault, params, gpu, expected, fault_name, clears", CASES,
                         ids=[f"{c[0]}{c[1].get('xid', '')}" for c in CASES])
def test_fault_changes_exactly_its_gpu_within_two_cycles_and_clears_by_its_rule(
        agent, fault, params, gpu, expected, fault_name, clears):
    before = wait_until(agent, lambda v: v.state(gpu) == "healthy")
    others = {i: s for i, s in enumerate(before.states()) if i != gpu}
    inject(agent, gpu, fault, **params)
    try:
        after = _judged_within_two_cycles(agent, before, gpu, fault, params, expected, fault_name, clears, others)
    finally:  # a failed case must not leave its fault for the next case on the same GPU
        clear(agent, gpu, fault)
    if clears == CLEAN:
        wait_until(agent, lambda v: v.state(gpu) == "healthy" and not v.faults(gpu))
    else:  # cleared at the source: still held past clean_samples (3)
        later = wait_until(agent, lambda v: v.cycles >= after.cycles + 4)
        assert later.state(gpu) == expected and fault_name in later.faults(gpu)


def _judged_within_two_cycles(agent, before, gpu, fault, params, expected, fault_name, clears, others) -> View:
    """The fault is judged from at most the second sample after the injection (a sample in flight
    when it lands may miss it). The view is observed, not the verdict's own sample: it may already
    count the next sample, whose verdict is still being made, so the observed count may be one
    more — never two more."""
    after = wait_until(agent, lambda v: v.state(gpu) == expected and fault_name in v.faults(gpu))
    assert after.cycles - before.cycles <= 3, f"took {after.cycles - before.cycles} sampling cycles"
    assert {i: s for i, s in enumerate(after.states()) if i != gpu} == others, "another GPU changed"
    active = after.faults(gpu)[fault_name]
    assert active["clears"] in (("gpu_reset", "node_reboot") if clears == STICKY else ("clean_samples",))
    assert after.api["node"]["state"] in ("suspect", "unhealthy")
    if fault == "xid":  # the event path: XID received -> verdict published, from the agent's log
        latency = xid_to_verdict_seconds(agent.log(), params["xid"], gpu)
        print(f"XID {params['xid']} on GPU {gpu}: verdict {latency * 1000:.0f} ms after the event")
        assert latency < 1.0  # the budget is 100 ms; the log has millisecond stamps, CI machines vary
    return after


def test_transitions_and_fault_events_are_counted(agent):
    view = View(agent)
    events = {dict(labels)["fault"] for (name, labels), value in view.samples.items()
              if name == "runtimekit_gpu_fault_events_total" and value >= 1}
    assert {"gpu_lost", "ecc_uncorrectable", "nvlink_down", "power_brake"} <= events
    back = [v for (name, labels), v in view.samples.items()
            if name == "runtimekit_health_transitions_total" and dict(labels)["to"] == "healthy"]
    assert back and all(v >= 1 for v in back)


@pytest.fixture
def fresh(tmp_path, config_file):
    agent = launch(tmp_path, config_file)
    wait_until(agent, lambda view: view is not None)
    yield agent
    agent.stop()


def test_xid_13_once_changes_nothing_five_bursts_do(fresh):
    inject(fresh, 2, "xid", xid=13)
    seen = wait_until(fresh, lambda v: v.samples.get(
        ("runtimekit_gpu_xid_errors_total", frozenset({("gpu", "2"), ("uuid", v.api["gpus"][2]["uuid"]), ("xid", "13")}))) == 1)
    later = wait_until(fresh, lambda v: v.cycles >= seen.cycles + 3)
    assert later.states() == ["healthy"] * GPUS
    for _ in range(4):
        time.sleep(0.35)  # bursts are XIDs more than app_xid_burst_seconds (0.2 s here) apart
        inject(fresh, 2, "xid", xid=13)
    view = wait_until(fresh, lambda v: v.state(2) != "healthy")
    assert [f for f in view.faults(2) if f.startswith("xid_13")], view.faults(2)
    assert [view.state(i) for i in range(GPUS) if i != 2] == ["healthy"] * (GPUS - 1)


def test_restart_keeps_an_unhealthy_gpu_unhealthy(tmp_path, config_file):
    agent = launch(tmp_path, config_file)
    try:
        wait_until(agent, lambda v: True)
        inject(agent, 4, "xid", xid=79)
        view = wait_until(agent, lambda v: v.state(4) == "unhealthy")
        first_seen = view.faults(4)["gpu_lost"]["first_seen_unix"]
    finally:
        agent.stop()
    assert (tmp_path / "state" / "health.json").exists()
    again = launch(tmp_path, config_file)  # same state dir, same seed; the simulated GPU 4 is fine again
    try:
        view = wait_until(again, lambda v: True)
        assert view.state(4) == "unhealthy", view.api["gpus"][4]
        assert view.faults(4)["gpu_lost"]["first_seen_unix"] == first_seen
        assert [view.state(i) for i in range(GPUS) if i != 4] == ["healthy"] * (GPUS - 1)
        later = wait_until(again, lambda v: v.cycles >= view.cycles + 6)
        assert later.state(4) == "unhealthy"
        assert "remembered health: GPU 4" in again.log()
    finally:
        again.stop()
