"""One detector that raises fails only its own probe, and a saved detector state that a detector
cannot use is dropped, not fed back for ever: through the real ``run_detectors``, the real
``HealthChecker`` and its real store.

Before, one raising detector stopped them all (the XID and lost-card checks included), and a bad
``detectors`` entry in health.json (a hand edit, a downgrade) failed every evaluation after every
restart: a GPU that fell off the bus stayed healthy and schedulable.
"""

from __future__ import annotations

import json

import pytest
from health_factories import T0, make_gpu, make_input, make_lost_gpu, make_snapshot
from test_health_checker import boot_id, publish, start, until  # noqa: F401 - boot_id is a fixture

from runtimekit.gpu.types import XidEvent
from runtimekit.healthcheck import detectors as detectors_module
from runtimekit.healthcheck.checker import CHECK_FAILED
from runtimekit.healthcheck.detectors import DETECTORS, DetectorsFailed, run_detectors
from runtimekit.healthcheck.types import CLEARS_WHEN_CLEAN, HEALTHY, WARNING, DetectorInput, Finding
from runtimekit.state import NodeState
from runtimekit.state.health import STATE_UNREADABLE

GPUS = (make_gpu(0), make_gpu(1))


class Hot:
    """A detector of the fault ``hot`` on GPU 0 while ``on``; raises while ``broken``."""

    name = "hot"

    def __init__(self) -> None:
        self.on, self.broken = False, False

    def __call__(self, state, data: DetectorInput):
        if self.broken:
            raise RuntimeError("hot detector bug")
        gpu = data.snapshot.gpus[0]
        found = [Finding(gpu.index, gpu.uuid, "hot", WARNING, "none", "hot", CLEARS_WHEN_CLEAN)] if self.on else []
        return state, found


def data_with(snapshot) -> DetectorInput:
    return make_input(snapshot, None, now=snapshot.sampled_at)


def sample(at: float, *gpus):
    """A sample of GPUs 0 and 1 (or ``gpus``) at T0 + ``at`` seconds."""
    return make_snapshot(*(gpus or GPUS), at=T0 + at)


async def evaluated(running, count: int) -> None:
    await until(lambda: running.checker.evaluations >= count)


def test_a_raising_detector_leaves_the_others_findings_and_keeps_its_own_state(monkeypatch) -> None:
    hot = Hot()
    hot.broken = True
    monkeypatch.setattr(detectors_module, "DETECTORS", (hot, *DETECTORS))
    lost = sample(10.0, make_gpu(0), make_lost_gpu(1))
    with pytest.raises(DetectorsFailed) as failed:
        run_detectors({"hot": "before"}, data_with(lost))
    assert set(failed.value.failed) == {"hot"} and "hot detector bug" in failed.value.failed["hot"]
    assert failed.value.dropped == {}  # it raised on a fresh state too: a bug, not its state
    assert failed.value.states["hot"] == "before"  # kept as it was given
    assert ("gpu_lost", 1) in {(f.fault, f.gpu_index) for f in failed.value.findings}  # lost_card still ran


def test_a_state_the_detector_cannot_use_is_dropped_and_the_detector_runs_fresh() -> None:
    snapshot = sample(10.0)
    states, _ = run_detectors({}, data_with(snapshot))
    poisoned = {**states, "lost_card": {"known": {"GPU-x": 5}}}  # what a hand edit leaves
    lost = sample(11.0, make_gpu(0), make_lost_gpu(1))
    with pytest.raises(DetectorsFailed) as failed:
        run_detectors(poisoned, data_with(lost))
    assert set(failed.value.dropped) == {"lost_card"} and failed.value.failed == {}
    assert failed.value.states["lost_card"] != poisoned["lost_card"]  # a fresh state, saved in its place
    again, _ = run_detectors(failed.value.states, data_with(lost))  # and it is usable
    assert "lost_card" in again
    assert ("gpu_lost", 1) in {(f.fault, f.gpu_index) for f in failed.value.findings}


async def test_a_broken_detector_does_not_silence_xid_79_and_clears_nothing(tmp_path, boot_id, monkeypatch):  # noqa: F811
    hot = Hot()
    monkeypatch.setattr(detectors_module, "DETECTORS", (hot, *DETECTORS))
    state = NodeState()
    running = await start(state, run_detectors, tmp_path, boot_id, clean_samples=1)
    hot.on = True
    await publish(state, sample(1.0))
    await until(lambda: state.health is not None and state.health.gpus[0].faults)
    hot.on, hot.broken = False, True
    for n, t in enumerate((2.0, 3.0, 4.0)):  # one clean sample would clear "hot": none counts while its detector fails
        await publish(state, sample(t))
        await evaluated(running, 2 + n)
    assert [f.fault for f in state.health.gpus[0].faults] == ["hot"]
    assert [f.fault for f in state.health.faults] == [CHECK_FAILED]
    assert "hot detector failed: RuntimeError: hot detector bug" in state.health.faults[0].evidence
    state.record_xid(XidEvent(gpu_index=1, uuid=GPUS[1].uuid, xid=79, received_at=T0 + 5.0))
    await until(lambda: state.health.gpus[1].state != HEALTHY)
    assert not state.health.gpus[1].schedulable
    assert any(f.fault.startswith("xid_79") or f.fault == "gpu_lost" for f in state.health.gpus[1].faults)
    hot.broken = False
    done = running.checker.evaluations
    for n, t in enumerate((6.0, 7.0)):
        await publish(state, sample(t))
        await evaluated(running, done + 1 + n)
    assert state.health.gpus[0].faults == () and state.health.faults == ()  # a working probe clears again
    await running.stop()


async def test_a_saved_lost_card_state_it_cannot_use_makes_every_gpu_unknown_not_healthy(tmp_path, boot_id):  # noqa: F811
    state = NodeState()
    running = await start(state, run_detectors, tmp_path, boot_id)
    await publish(state, sample(1.0))
    await until(lambda: state.health is not None)
    await running.stop()
    path = tmp_path / "state" / "health.json"
    saved = json.loads(path.read_text())
    saved["detectors"]["lost_card"] = {"known": {"GPU-x": 5}}
    path.write_text(json.dumps(saved))

    for restart in range(2):  # the bad state is not written back: the second start is clean of it
        state = NodeState()
        running = await start(state, run_detectors, tmp_path, boot_id)
        await publish(state, sample(10.0 + restart, make_gpu(0), make_lost_gpu(1)))
        await until(lambda state=state: state.health is not None and state.health.gpus)
        gpus = {g.index: g for g in state.health.gpus}
        assert not gpus[1].schedulable and gpus[1].state != HEALTHY
        assert "gpu_lost" in {f.fault for f in gpus[1].faults}
        assert not gpus[0].schedulable  # what the dropped state knew is lost: unknown, as an unreadable file
        assert STATE_UNREADABLE in {f.fault for f in state.health.faults}
        await running.stop()
    assert json.loads(path.read_text())["detectors"]["lost_card"] != {"known": {"GPU-x": 5}}


class Flaky:
    """A real detector that raises while ``broken`` (with ``on_state_only``: only when given a state,
    so that it works from a fresh one)."""

    def __init__(self, detector, on_state_only: bool = False) -> None:
        self.detector, self.name, self.broken, self.on_state_only = detector, detector.name, False, on_state_only

    def __call__(self, state, data: DetectorInput):
        if self.broken and (state is not None or not self.on_state_only):
            raise RuntimeError(f"{self.name} bug")
        return self.detector(state, data)


async def test_an_xid_that_arrives_while_its_detector_fails_is_judged_once_it_works(tmp_path, boot_id, monkeypatch):  # noqa: F811
    driver = Flaky(next(d for d in DETECTORS if d.name == "driver"))
    monkeypatch.setattr(detectors_module, "DETECTORS", tuple(driver if d.name == "driver" else d for d in DETECTORS))
    state = NodeState()
    running = await start(state, run_detectors, tmp_path, boot_id)
    await publish(state, sample(1.0))
    await evaluated(running, 1)
    driver.broken = True
    state.record_xid(XidEvent(gpu_index=1, uuid=GPUS[1].uuid, xid=119, received_at=T0 + 1.5))  # GSP RPC timeout
    await evaluated(running, 2)
    assert state.health.gpus[1].state == HEALTHY  # not judged yet: its detector failed
    driver.broken = False
    done = running.checker.evaluations
    await publish(state, sample(2.0))
    await evaluated(running, done + 1)
    assert "xid_119" in {f.fault for f in state.health.gpus[1].faults}
    assert not state.health.gpus[1].schedulable
    await running.stop()


async def test_a_raise_on_a_state_the_detector_built_itself_is_a_failure_not_every_gpu_unknown(tmp_path, boot_id, monkeypatch):  # noqa: F811
    lost_card = Flaky(next(d for d in DETECTORS if d.name == "lost_card"), on_state_only=True)
    monkeypatch.setattr(detectors_module, "DETECTORS", tuple(lost_card if d.name == "lost_card" else d for d in DETECTORS))
    state = NodeState()
    running = await start(state, run_detectors, tmp_path, boot_id, clean_samples=1)
    for n, t in enumerate((1.0, 2.0)):  # the lost_card detector builds its state (the GPUs known) in memory
        await publish(state, sample(t))
        await evaluated(running, n + 1)
    assert running.checker._detector_states["lost_card"] is not None
    lost_card.broken = True
    await publish(state, sample(3.0))
    await evaluated(running, 3)
    assert [f.fault for f in state.health.faults] == [CHECK_FAILED]
    assert all(g.schedulable for g in state.health.gpus)  # a bug is a failed probe, not a lost state
    lost_card.broken = False
    for n, t in enumerate((4.0, 5.0)):
        await publish(state, sample(t))
        await evaluated(running, 4 + n)
    assert state.health.faults == () and all(g.state == HEALTHY for g in state.health.gpus)
    await running.stop()
