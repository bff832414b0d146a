"""The supervisor on its own: a component that raises, returns or fails to start is logged with its
traceback (one line, said once, when the start fails for a reason the system gives: an OSError),
closed, restarted with backoff, counted, and published to the state."""

from __future__ import annotations

import asyncio
import logging

import pytest

from runtimekit.state import NodeState
from runtimekit.supervisor import ComponentSpec, Supervisor


class Flaky:
    """Raises in ``where`` (start or run) for the first ``failures`` builds, then runs for good."""

    builds = 0
    closes = 0

    def __init__(self, where: str, failures: int) -> None:
        type(self).builds += 1
        self.number = type(self).builds
        self.where, self.failures = where, failures

    async def start(self) -> None:
        if self.where == "start" and self.number <= self.failures:
            raise RuntimeError(f"start failure {self.number}")
        if self.where == "refused" and self.number <= self.failures:
            raise OSError(98, "Address already in use")

    async def run(self) -> None:
        if self.where == "run" and self.number <= self.failures:
            raise RuntimeError(f"run failure {self.number}")
        if self.where == "return" and self.number <= self.failures:
            return
        await asyncio.Event().wait()

    async def close(self) -> None:
        type(self).closes += 1


def flaky(where: str, failures: int) -> type[Flaky]:
    """A fresh subclass, so that each test has its own build and close counters."""
    return type("Flaky", (Flaky,), {"builds": 0, "closes": 0})


_sleep = asyncio.sleep  # taken before any test patches asyncio.sleep


async def wait_for(predicate, timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await _sleep(0.005)


@pytest.mark.parametrize("where", ["run", "start", "return"])
async def test_a_dying_component_is_logged_restarted_counted_and_published(where, caplog) -> None:
    kind = flaky(where, failures=2)
    state = NodeState()
    supervisor = Supervisor(
        state, [ComponentSpec("worker", lambda: kind(where, 2))], initial_backoff_seconds=0.01, max_backoff_seconds=0.02
    )
    with caplog.at_level(logging.ERROR, logger="runtimekit.supervisor"):
        await supervisor.start()
        await wait_for(lambda: kind.builds == 3 and state.view().components["worker"].up)
    status = state.view().components["worker"]
    assert status.restarts_total == 2
    assert status.up
    died = [r for r in caplog.records if "component worker" in r.getMessage()]
    assert len(died) == 2
    if where != "return":
        assert all(r.exc_info is not None for r in died)  # the traceback is in the log
        assert "failure 2" in status.last_error
    else:
        assert "returned" in status.last_error
    await supervisor.stop()
    assert kind.closes == 3  # every build that started was closed, the last one at stop
    assert not state.view().components["worker"].up


async def test_a_component_that_cannot_be_built_does_not_stop_the_table() -> None:
    state = NodeState()
    started: list[str] = []

    class Good:
        async def start(self) -> None:
            started.append("good")

        async def run(self) -> None:
            await asyncio.Event().wait()

        async def close(self) -> None:
            return None

    def broken() -> Good:
        raise ValueError("bad configuration")

    supervisor = Supervisor(
        state, [ComponentSpec("broken", broken), ComponentSpec("good", Good)], initial_backoff_seconds=0.01
    )
    await supervisor.start()
    await wait_for(lambda: state.view().components["broken"].restarts_total >= 2)
    assert started == ["good"]
    assert state.view().ready == (False, "no snapshot yet")
    await supervisor.stop()


async def test_backoff_doubles_to_its_cap(monkeypatch) -> None:
    delays: list[float] = []

    async def record(delay: float) -> None:
        delays.append(delay)
        await _sleep(0)

    monkeypatch.setattr("runtimekit.supervisor.asyncio.sleep", record)
    kind = flaky("run", failures=5)
    state = NodeState()
    supervisor = Supervisor(
        state, [ComponentSpec("worker", lambda: kind("run", 5))], initial_backoff_seconds=1.0, max_backoff_seconds=4.0
    )
    await supervisor.start()
    await wait_for(lambda: kind.builds == 6)
    await supervisor.stop()
    assert delays[:5] == [1.0, 2.0, 4.0, 4.0, 4.0]


async def test_a_start_the_system_refuses_is_one_line_said_once(caplog) -> None:
    """A port or socket in use (OSError at start) is not a bug: one line without a traceback, not
    repeated at every retry while the reason stays the same; the component is still counted down."""
    kind = flaky("refused", failures=4)
    state = NodeState()
    supervisor = Supervisor(
        state, [ComponentSpec("api", lambda: kind("refused", 4))], initial_backoff_seconds=0.01, max_backoff_seconds=0.02
    )
    with caplog.at_level(logging.ERROR, logger="runtimekit.supervisor"):
        await supervisor.start()
        await wait_for(lambda: kind.builds == 5 and state.view().components["api"].up)
    await supervisor.stop()
    said = [r for r in caplog.records if "component api" in r.getMessage()]
    assert len(said) == 1, [r.getMessage() for r in said]
    assert "cannot start: [Errno 98] Address already in use" in said[0].getMessage()
    assert said[0].exc_info is None
    assert state.view().components["api"].restarts_total == 4


def test_component_names_are_unique() -> None:
    with pytest.raises(ValueError, match="unique"):
        Supervisor(NodeState(), [ComponentSpec("a", Flaky), ComponentSpec("a", Flaky)])


async def test_a_stuck_start_is_cancelled_at_stop() -> None:
    class Stuck:
        async def start(self) -> None:
            await asyncio.Event().wait()

        async def run(self) -> None:  # pragma: no cover - never reached
            return None

        async def close(self) -> None:
            return None

    supervisor = Supervisor(NodeState(), [ComponentSpec("stuck", Stuck)])
    task = asyncio.create_task(supervisor.start())
    await asyncio.sleep(0.05)
    assert not task.done()
    task.cancel()
    await supervisor.stop()
