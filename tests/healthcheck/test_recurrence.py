"""Repairs that do not last: a GPU that begins needing a reset or a reboot for the third time within
the window gets ``gpu_fault_recurring`` (replace_node). By tables on the state machine, through the
state file, and once on a real agent of the simulated node (XID 119, a GPU reset, three times)."""

from __future__ import annotations

import json
import time

import pytest

from runtimekit.client import inject_remote, request_json
from runtimekit.healthcheck.machine import MachineInput, MachineState, node_health, step
from runtimekit.healthcheck.policy import default_policy
from runtimekit.healthcheck.recurrence import RECURRING, RecurrenceRule
from runtimekit.healthcheck.statefile import decode, encode
from runtimekit.healthcheck.store import unknown_finding
from runtimekit.healthcheck.types import CRITICAL, REPLACE_NODE, UNHEALTHY
from tests.agent_process import start_agent

U0, U1 = "GPU-0", "GPU-1"
GPUS = ((0, U0), (1, U1))
DAY = 86400.0
RULE = RecurrenceRule(3, 7 * DAY, default_policy().node_finding(RECURRING, ""))


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


def test_a_fault_seen_after_the_reset_is_raised_again_not_cleared() -> None:
    """The reset (seen at the sample at 10.0) happened at about 5.0; XID 119 was seen at 2.0 and
    again at 8.0, after it: the reset clears the first occurrence, the second is held and is an
    intervention of its own. Seen within the margin after the reset, it is taken as before it."""
    state = evaluate(MachineState(), 2.0, GSP)
    state = evaluate(state, 8.0, GSP)  # an event-only evaluation between the reset and the sample
    data = MachineInput(now=10.0, gpus=GPUS, resets={U0: 5.0}, recurrence=RULE)
    result = step(state, data)
    held = {f.fault: f for f in result.state.gpus[U0].faults}
    assert held["xid_119"].first_seen == 10.0 and "again after the GPU reset" in held["xid_119"].evidence
    assert result.state.gpus[U0].state == UNHEALTHY and result.state.gpus[U0].interventions == (2.0, 10.0)
    assert [f.fault for _, _, f in result.cleared] == ["xid_119"] and [f.fault for _, _, f in result.new_faults] == ["xid_119"]
    assert result.state.fault_events_total[(U0, "xid_119", CRITICAL)] == 2
    just_after = step(evaluate(MachineState(), 5.3, GSP), data).state  # within 0.5 s of the reset
    assert just_after.gpus[U0].faults == () and just_after.gpus[U0].interventions == (5.3,)


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
    doc["gpus"][0]["interventions"] = ["yesterday"]
    assert decode(doc)[3] == [(0, U0, "interventions: not a time in unix seconds (1970 to 2100): 'yesterday'")]


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
    agent = start_agent(tmp_path, "--sim", "dgx-h100", "--interval", "2", "--sim-processes", "0", "--sim-load", "idle")
    try:
        faults, wait = agent.gpu_faults, agent.wait_for
        wait(lambda: agent.samples_total() >= 3)  # the energy counter has run longer than an interval
        inject_remote(agent.url, 2, "xid", {"xid": 119})
        wait(lambda: "xid_119" in faults(2))
        request_json("POST", agent.url + "/sim/v1/reset", {"gpu": 2}, 5.0)
        time.sleep(1.0)
        inject_remote(agent.url, 2, "xid", {"xid": 119})
        after = agent.samples_total()
        wait(lambda: agent.samples_total() >= after + 2)  # the reset is seen, and a sample after it
        assert "xid_119" in faults(2), agent.log()[-3000:]
        assert agent.value("runtimekit_gpu_fault_events_total", gpu="2", fault="xid_119") == 2.0
    finally:
        agent.stop()
