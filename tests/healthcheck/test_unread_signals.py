"""A sample that cannot read a fault's signal never clears it, and a signal back before it is
confirmed again starts the clearing over: the marks (``Finding.hold``) through the real
detectors and the real state machine, and the machine's own rules for them."""

from __future__ import annotations

from health_factories import ERR, STEP, T0, make_gpu, make_input, make_snapshot, uuid_for, with_

from runtimekit.gpu.types import NodeSnapshot
from runtimekit.healthcheck.detectors import readable_gpus, run_detectors
from runtimekit.healthcheck.detectors.memory_leak import memory_leak
from runtimekit.healthcheck.machine import MachineInput, MachineState, step
from runtimekit.healthcheck.types import (
    CLEARS_WHEN_CLEAN,
    CRITICAL,
    HEALTHY,
    NONE,
    RECOVERING,
    SEEN_AGAIN,
    UNHEALTHY,
    UNREAD,
    Finding,
)

U0 = uuid_for(0)
GPUS = ((0, U0),)
BRAKE, CLEAN = 0x8 | 0x80, 0x0  # the bits hardware reports for an external power brake


def mark(hold: str, fault: str = "power_brake") -> Finding:
    return Finding(0, U0, fault, CRITICAL, NONE, "a mark", CLEARS_WHEN_CLEAN, hold=hold)


def states(samples, judged=None) -> list[str]:
    """GPU 0's state after each sample (a tuple of findings) through the machine, 3 clean samples to clear."""
    state, out = MachineState(), []
    for t, findings in enumerate(samples):
        data = MachineInput(now=T0 + t, findings=tuple(findings), gpus=GPUS, clean_samples=3,
                            judged=judged(t) if judged else None)
        state = step(state, data).state
        out.append(state.gpus[U0].state)
    return out


RAISED = (Finding(0, U0, "power_brake", CRITICAL, NONE, "brake", CLEARS_WHEN_CLEAN),)


def test_an_unread_mark_neither_raises_nor_counts_a_clean_sample() -> None:
    assert states([(mark(UNREAD),)] * 3) == [HEALTHY] * 3  # nothing held: nothing raised
    seen = states([RAISED, (), *[(mark(UNREAD),)] * 5, (), ()])
    assert seen == [UNHEALTHY, RECOVERING, *[RECOVERING] * 5, RECOVERING, HEALTHY]  # 1 + 2 clean samples


def test_a_seen_again_mark_starts_the_count_again_and_raises_nothing_new() -> None:
    assert states([(mark(SEEN_AGAIN),)] * 3) == [HEALTHY] * 3
    # flapping faster than the clean samples: never back to healthy
    flapping = states([RAISED, *[(), (mark(SEEN_AGAIN),)] * 6])
    assert HEALTHY not in flapping and flapping[-1] == UNHEALTHY
    assert states([RAISED, (), (mark(SEEN_AGAIN),), (), (), ()])[-1] == HEALTHY


def test_a_gpu_not_judged_keeps_its_faults() -> None:
    unjudged_from = 2  # samples 2..6: the GPU could not be read (NVML down, GPU lost)
    seen = states([RAISED, (), *[()] * 5, (), ()],
                  judged=lambda t: frozenset() if unjudged_from <= t < 7 else frozenset({U0}))
    assert seen == [UNHEALTHY, RECOVERING, *[RECOVERING] * 5, RECOVERING, HEALTHY]


def node(reasons, at: float) -> NodeSnapshot:
    return make_snapshot(with_(make_gpu(0, at=at), "clocks", event_reasons=reasons), at=at)


def verdicts(reasons: list) -> list[str]:
    """GPU 0's state after each sample of clock event reasons, through every detector and the
    machine as the checker drives them (3 clean samples to clear, a 3 s power-brake threshold)."""
    detector_states: dict = {}
    machine, previous, out = MachineState(), None, []
    for n, value in enumerate(reasons):
        snapshot = node(value, T0 + n * STEP)
        detector_states, found = run_detectors(detector_states, make_input(snapshot, previous, now=snapshot.sampled_at))
        machine = step(machine, MachineInput(
            now=snapshot.sampled_at, findings=tuple(found), gpus=GPUS, clean_samples=3, inventory=True,
            judged=frozenset(uuid for uuid, _ in readable_gpus(snapshot)))).state
        out.append(machine.gpus[U0].state)
        previous = snapshot
    return out


def test_a_power_brake_whose_reasons_become_unreadable_stays_held() -> None:
    seen = verdicts([BRAKE, BRAKE, *[ERR] * 5, CLEAN, CLEAN, CLEAN])
    assert seen[1:7] == [UNHEALTHY] * 6  # unreadable: not a clean sample (it was 3 and healthy)
    assert seen[7:] == [RECOVERING, RECOVERING, HEALTHY]


def test_a_flapping_power_brake_never_clears() -> None:
    seen = verdicts([BRAKE, BRAKE, *[CLEAN, BRAKE] * 5])
    assert HEALTHY not in seen[1:]


def test_a_gpu_reset_into_mig_mode_marks_no_orphan_or_ghost_it_cannot_judge() -> None:
    """Orphaned memory and a ghost are not judged in MIG mode: their runs end there, and no mark
    keeps a fault raised before from clearing."""
    def gpu(at: float, mig: bool):
        idle = with_(with_(make_gpu(0, at=at, processes=()), "memory", used_bytes=4 << 30), "utilization", gpu=1.0)
        return with_(idle, "modes", mig_mode_current=mig)

    snapshots = [make_snapshot(gpu(T0 + n * STEP, n >= 3), make_gpu(1, at=T0 + n * STEP), at=T0 + n * STEP) for n in range(6)]
    state, previous = None, None
    for n, snapshot in enumerate(snapshots):
        state, found = memory_leak(state, make_input(snapshot, previous, now=snapshot.sampled_at))
        previous = snapshot
        ours = {f.fault for f in found if f.gpu_index == 0}
        assert ours == ({"memory_orphaned", "gpu_ghost_busy"} if 0 < n < 3 else set() if n >= 3 else ours), n
