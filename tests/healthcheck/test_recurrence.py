"""Repairs that do not last: a GPU that begins needing a reset or a reboot for the third time within
the window gets ``gpu_fault_recurring`` (replace_node). By tables on the state machine, through the
state file, and once on a real agent of the simulated node (XID 119, a GPU reset, three times)."""

from __future__ import annotations

import json
import time

import pytest

from runtimekit.client import inject_remote, request_json
from runtimekit.gpu.types import XidEvent
from runtimekit.healthcheck.machine import MachineInput, MachineState, node_health, step
from runtimekit.healthcheck.policy import default_policy
from runtimekit.healthcheck.recurrence import RECURRING, RecurrenceRule
from runtimekit.healthcheck.resets import faults_seen_again
from runtimekit.healthcheck.statefile import decode, encode
from runtimekit.healthcheck.store import unknown_finding
from runtimekit.healthcheck.types import CRITICAL, REPLACE_NODE, UNHEALTHY
from tests.agent_process import start_agent

U0, U1 = "GPU-0", "GPU-1"
GPUS = ((0, U0), (1, U1))
DAY = 86400.0
RULE = RecurrenceRule(3, 7 * DAY, default_policy().node_finding(RECURRING, ""))


def xid_event(code: int, at: float, gpu: int = 0) -> XidEvent:
    return XidEvent(gpu, (U0, U1)[gpu], code, at)


def found(fault: str, uuid: str = U0, index: int = 0, instance: int | None = None):
    """The finding the detectors make of ``fault`` (a detector fault, or ``xid_<code>``), with its policy."""
    policy = default_policy()
    rule = policy.xid(int(fault[4:])).policy if fault.startswith("xid_") else None
    return policy.finding(index, uuid, fault, f"{fault} seen", instance, policy=rule)


GSP = found("xid_119")  # critical, drain_and_reset_gpu, clears on a GPU reset
LOST = found("gpu_lost")  # critical, reboot_node, clears on a reboot
REMAP = found("row_remap_pending")  # a warning a reset clears: routine, not an intervention


def evaluate(state: MachineState, now: float, *findings, resets=(), reboot=False) -> MachineState:
    data = MachineInput(now=now, findings=findings, gpus=GPUS, resets={uuid: now for uuid in resets}, boot_id_changed=reboot,
                        recurrence=RULE)
    return step(state, data).state


def recurring(state: MachineState, uuid: str = U0) -> bool:
    return any(f.fault == RECURRING for f in state.gpus[uuid].faults)


def repaired_cycles(times, fault=GSP, state: MachineState | None = None) -> MachineState:
    """At each time: the fault, then a GPU reset the next second (clearing it)."""
    state = state or MachineState()
    for t in times:
        state = evaluate(state, t, fault)
        state = evaluate(state, t + 1, resets=(fault.uuid,))
    return state


def test_the_third_intervention_within_the_window_asks_for_a_spare_node() -> None:
    state = repaired_cycles([0.0, DAY])
    assert state.gpus[U0].interventions == (0.0, DAY) and not recurring(state)
    state = evaluate(state, 2 * DAY, GSP)
    verdict = node_health(state, 2 * DAY).gpus[0]
    held = {f.fault: f for f in verdict.faults}
    assert held[RECURRING].severity == CRITICAL and held[RECURRING].action == REPLACE_NODE
    assert held[RECURRING].fault_class == "hardware" and held[RECURRING].schedulable is False
    assert "3 interventions within 7 d" in held[RECURRING].evidence and "xid_119" in held[RECURRING].evidence
    assert verdict.state == UNHEALTHY and verdict.action == REPLACE_NODE
    assert not recurring(state, U1)  # the other GPU's history is its own


def test_faults_held_together_or_raised_again_while_held_are_one_intervention() -> None:
    state = evaluate(MachineState(), 0.0, GSP, found("xid_120"))
    for t in (1.0, 2.0, 3.0):  # the same fault again, another one joining: still the first repair
        state = evaluate(state, t, GSP, found("xid_62"))
    assert state.gpus[U0].interventions == (0.0,)
    state = evaluate(state, 4.0, resets=(U0,))
    state = evaluate(state, 5.0, GSP)
    assert state.gpus[U0].interventions == (0.0, 5.0) and not recurring(state)


def test_interventions_older_than_the_window_do_not_count() -> None:
    state = repaired_cycles([0.0, DAY])
    state = evaluate(state, 7 * DAY + 1, GSP)  # the first is more than 7 days old
    assert state.gpus[U0].interventions == (DAY, 7 * DAY + 1) and not recurring(state)


@pytest.mark.parametrize("fault", [REMAP, found("xid_46", instance=1), found("xid_13")], ids=["warning", "instance-scoped", "application"])
def test_warnings_instance_faults_and_application_xids_are_not_interventions(fault) -> None:
    state = repaired_cycles([0.0, 1 * DAY, 2 * DAY, 3 * DAY], fault=fault)
    assert state.gpus[U0].interventions == () and not recurring(state)


def test_a_fault_whose_xid_came_after_the_reset_is_raised_again_not_cleared() -> None:
    """The reset (seen at the sample at 10.0) happened at about 5.0; XID 119 came at 2.0 and again at
    8.0, after it: the reset clears the first occurrence, the second is held and is an intervention
    of its own. A fault refreshed after the reset without an XID of its own after it (a detector
    re-reading the sample before the reset, at an evaluation another GPU's XID started) clears."""
    state = evaluate(MachineState(), 2.0, GSP, found("recovery_gpu_reset"))
    state = evaluate(state, 8.0, GSP, found("recovery_gpu_reset"))  # an event-only evaluation after the reset
    again = faults_seen_again({U0: 5.0}, [xid_event(119, 2.0), xid_event(119, 8.0)], lambda code: f"xid_{code}")
    assert again == {U0: frozenset({"xid_119"})}
    result = step(state, MachineInput(now=10.0, gpus=GPUS, resets={U0: 5.0}, again=again, recurrence=RULE))
    held = {f.fault: f for f in result.state.gpus[U0].faults}
    assert set(held) == {"xid_119"} and held["xid_119"].first_seen == 10.0
    assert "again after the GPU reset" in held["xid_119"].evidence
    assert result.state.gpus[U0].state == UNHEALTHY and result.state.gpus[U0].interventions == (2.0, 10.0)
    assert sorted(f.fault for _, _, f in result.cleared) == ["recovery_gpu_reset", "xid_119"]
    assert [f.fault for _, _, f in result.new_faults] == ["xid_119"]
    assert result.state.fault_events_total[(U0, "xid_119", CRITICAL)] == 2


def test_only_an_xid_past_the_margin_after_its_own_gpus_reset_is_back() -> None:
    events = [xid_event(119, 5.3), xid_event(119, 6.0, gpu=1), xid_event(48, 9.0)]
    assert faults_seen_again({U0: 5.0}, events, lambda code: f"xid_{code}") == {U0: frozenset({"xid_48"})}
    assert faults_seen_again({}, events, lambda code: f"xid_{code}") == {}


def test_an_unreadable_health_state_is_no_intervention() -> None:
    """It makes every GPU critical until a reboot, but says nothing about the GPUs."""
    unknown = unknown_finding(0, U0, "health.json: not JSON")
    state = MachineState()
    for t in (0.0, DAY, 2 * DAY):
        state = evaluate(state, t, unknown)
        state = evaluate(state, t + 1, reboot=True)
    assert state.gpus[U0].interventions == () and not recurring(state)


def test_a_reboot_clears_the_fault_but_not_the_history() -> None:
    state = MachineState()
    for t in (0.0, DAY, 2 * DAY):  # a lost GPU, each time back after a reboot
        state = evaluate(state, t, LOST)
        state = evaluate(state, t + 1, reboot=True)
    assert not recurring(state)  # the reboot after the third cleared it
    assert len(state.gpus[U0].interventions) == 3
    state = evaluate(state, 3 * DAY, LOST)  # a fourth within the window: raised again at once
    assert recurring(state)
    assert len(state.gpus[U0].interventions) == 3  # only what can still count is kept


def test_a_gpu_reset_does_not_clear_it() -> None:
    state = repaired_cycles([0.0, DAY, 2 * DAY])
    assert recurring(state)  # the reset after the third intervention cleared xid_119 only
    assert node_health(state, 2 * DAY + 1).gpus[0].action == REPLACE_NODE


def test_the_history_survives_the_state_file() -> None:
    state = repaired_cycles([0.0, DAY])
    doc = json.loads(json.dumps(encode(state, 2, "boot", saved_at=2 * DAY)))
    loaded, _, _, bad = decode(doc)
    assert bad == [] and loaded.gpus[U0].interventions == (0.0, DAY)
    assert recurring(evaluate(loaded, 2 * DAY, GSP))
    for entry in doc["gpus"]:  # a file written before interventions were kept: none remembered
        del entry["interventions"]
    assert decode(doc)[0].gpus[U0].interventions == ()
    doc["gpus"][0]["interventions"] = ["yesterday", DAY, 1e300]  # an unreadable time is left out, the GPU read
    loaded, _, _, bad = decode(doc)
    assert bad == [] and loaded.gpus[U0].interventions == (DAY,)
    doc["gpus"][0]["interventions"] = "yesterday"
    assert decode(doc)[0].gpus[U0].interventions == ()


def test_the_agent_asks_for_a_spare_node_after_the_third_reset(tmp_path) -> None:
    """XID 119 on GPU 2, then the GPU reset, three times: the agent raises gpu_fault_recurring and exports it
    with the action and class the alerts route on."""
    agent = start_agent(tmp_path, "--sim", "dgx-h100", "--interval", "0.3", "--sim-processes", "0", "--sim-load", "idle")
    try:
        faults, wait = agent.gpu_faults, agent.wait_for
        # The agent sees a reset as the energy counter (since the driver loaded, or the last reset)
        # going backwards between two samples: before each reset, let the counter run longer than a
        # sample interval, as it has on a real node, or the reset would not show.
        for cycle in range(3):
            time.sleep(1.0)
            inject_remote(agent.url, 2, "xid", {"xid": 119})
            wait(lambda: "xid_119" in faults(2))
            assert (RECURRING in faults(2)) == (cycle == 2)
            request_json("POST", agent.url + "/sim/v1/reset", {"gpu": 2}, 5.0)
            wait(lambda: "xid_119" not in faults(2))
        assert set(faults(2)) == {RECURRING} and faults(1) == {}
        metric = ('runtimekit_gpu_fault_active{action="replace_node",class="hardware",'
                  f'fault="{RECURRING}",gpu="2",')
        assert any(line.startswith(metric) and line.endswith(" 1.0") for line in agent.metrics_text().splitlines())
    finally:
        agent.stop()


def test_the_agent_keeps_an_xid_that_came_after_the_reset_before_the_next_sample(tmp_path) -> None:
    """XID 119, a GPU reset, and XID 119 again a second later — before the sample that shows the
    reset: the second XID stays (and is the GPU's second intervention), it is not cleared with the first."""
    agent = start_agent(tmp_path, "--sim", "dgx-h100", "--interval", "3", "--sim-processes", "0", "--sim-load", "idle")
    try:
        faults, wait = agent.gpu_faults, agent.wait_for
        wait(lambda: agent.samples_total() >= 2)  # the energy counter has run longer than an interval
        inject_remote(agent.url, 2, "xid", {"xid": 119})
        wait(lambda: "xid_119" in faults(2))
        before = agent.samples_total()
        wait(lambda: agent.samples_total() > before)  # just after a sample: the next is about 3 s away
        request_json("POST", agent.url + "/sim/v1/reset", {"gpu": 2}, 5.0)
        time.sleep(1.0)
        inject_remote(agent.url, 2, "xid", {"xid": 119})  # before the sample that shows the reset
        after = agent.samples_total()
        wait(lambda: agent.samples_total() >= after + 2)  # the reset is seen, and a sample after it
        assert "xid_119" in faults(2), agent.log()[-3000:]
        assert agent.value("runtimekit_gpu_fault_events_total", gpu="2", fault="xid_119") == 2.0
    finally:
        agent.stop()


async def test_a_sampled_fault_refreshed_by_another_gpus_xid_after_a_reset_clears(tmp_path) -> None:
    """recovery_gpu_reset on GPU 0; the GPU is reset; an application XID on GPU 1 starts an
    evaluation between the reset and the next sample (the detectors re-read the sample before the
    reset then). The sample after the reset clears the fault, and no second intervention begins."""
    from health_factories import make_gpu, make_snapshot, uuid_for

    from runtimekit.gpu.types import Power
    from runtimekit.healthcheck.checker import HealthChecker
    from runtimekit.healthcheck.detectors import run_detectors
    from runtimekit.healthcheck.store import HealthStore
    from runtimekit.healthcheck.thresholds import load_thresholds
    from runtimekit.state import NodeState, SamplerStats

    def sample(at: float, joules: float, action: str):
        gpus = (make_gpu(i, at=at, recovery_action=action if i == 0 else "none",
                         power=Power(draw_watts=100.0, limit_watts=700.0, energy_joules=joules if i == 0 else 1e6 + at))
                for i in (0, 1))
        return make_snapshot(*gpus, at=at)

    (tmp_path / "boot_id").write_text("boot-1\n")
    state, thresholds = NodeState(), load_thresholds()
    checker = HealthChecker(state, run_detectors, thresholds=thresholds,
                            store=HealthStore(tmp_path / "state", boot_id_path=str(tmp_path / "boot_id")))
    await checker.load()
    t0 = time.time()
    state.publish_snapshot(sample(t0, 1e6, "gpu_reset"), SamplerStats(cycles_total=1))
    assert await checker.evaluate()
    recovery = lambda: "recovery_gpu_reset" in {f.fault for f in checker.machine.gpus[uuid_for(0)].faults}  # noqa: E731
    assert recovery()
    state.record_xid(XidEvent(1, uuid_for(1), 13, t0 + 2.0))  # the reset was at t0 + 0.5
    assert await checker.evaluate()
    state.publish_snapshot(sample(t0 + 3.0, 250.0, "none"), SamplerStats(cycles_total=2))  # 2.5 s at 100 W since
    assert await checker.evaluate()
    assert not recovery() and len(checker.machine.gpus[uuid_for(0)].interventions) == 1
    checker.close()
