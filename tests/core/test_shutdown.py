"""nvmlShutdown never runs on the event loop and never holds up the agent's exit: a sampling cycle
stuck in the driver can block it, so it gets a thread of its own and a time limit."""

from __future__ import annotations

import logging
import threading
import time

from runtimekit.components import shutdown_nvml


class StuckSession:
    def __init__(self) -> None:
        self.release = threading.Event()
        self.called_from: list[str] = []

    def shutdown(self) -> None:
        self.called_from.append(threading.current_thread().name)
        self.release.wait(10)  # the driver is busy with a cycle that never returns


def test_a_stuck_nvml_shutdown_is_abandoned_after_its_time_limit(caplog) -> None:
    session = StuckSession()
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="runtimekit.components"):
        shutdown_nvml(session, 0.2)  # type: ignore[arg-type]
    assert time.monotonic() - started < 2.0
    assert session.called_from and session.called_from[0].startswith("runtimekit-nvml-shutdown")
    assert "nvmlShutdown did not return" in caplog.text
    session.release.set()


def test_a_prompt_shutdown_is_waited_for() -> None:
    session = StuckSession()
    session.release.set()
    shutdown_nvml(session, 5.0)  # type: ignore[arg-type]
    assert len(session.called_from) == 1
