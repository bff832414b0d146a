"""Supervised components: each long-lived part of the agent runs under one supervisor that logs its
death with the traceback, restarts it with exponential backoff, and says so.

A component is built fresh by its factory for every start and exposes three coroutines:
``start()``, its set-up (the next component of the table is started only after it returned: the
simulator is installed below pynvml before anything touches NVML); ``run()``, the long-lived work
(it never returns while healthy: returning or raising means it died); and ``close()``, which
releases what it holds (threads, sockets) after ``start`` or ``run`` ended, whatever the reason. The supervisor publishes each component's status (up, restarts, last error) to the
node state's ``components`` topic on every change, so ``runtimekit_component_up{component}``,
``runtimekit_component_restarts_total{component}`` and ``/readyz`` read one view like everything
else. Backoff: ``initial_backoff_seconds`` doubling to ``max_backoff_seconds``, back to the
initial value once a start has stayed up for ``stable_seconds``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Protocol

from runtimekit.state import ComponentStatus, NodeState

log = logging.getLogger("runtimekit.supervisor")


class Component(Protocol):
    """A long-lived part of the agent; see the module docstring."""

    async def start(self) -> None: ...

    async def run(self) -> None: ...

    async def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class ComponentSpec:
    """One row of the component table.

    ``required``: the node is not ready (``/readyz`` 503) while this component is down.
    ``build`` makes a fresh component for each start (configuration is read by the table's builder).
    """

    name: str
    build: Callable[[], Component]
    required: bool = True
    description: str = ""


class Supervisor:
    """Runs the components of a table, in order, each as one owned task that restarts it."""

    def __init__(
        self,
        state: NodeState,
        specs: Sequence[ComponentSpec],
        *,
        initial_backoff_seconds: float = 0.5,
        max_backoff_seconds: float = 30.0,
        stable_seconds: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        names = [spec.name for spec in specs]
        if len(set(names)) != len(names):
            raise ValueError(f"components: names must be unique, got {names}")
        self._state = state
        self._specs = tuple(specs)
        self._initial = initial_backoff_seconds
        self._max = max_backoff_seconds
        self._stable = stable_seconds
        self._clock = clock
        self._status = {spec.name: ComponentStatus(spec.name, required=spec.required) for spec in specs}
        self._tasks: list[asyncio.Task[None]] = []
        self._start_refused: dict[str, str] = {}  # component -> the OSError its last start failed with

    async def start(self) -> None:
        """Start every component, in table order (each start is awaited: the simulator, say, is
        installed before anything touches NVML)."""
        self._publish()
        for spec in self._specs:
            started = asyncio.get_running_loop().create_future()
            self._tasks.append(asyncio.create_task(self._keep(spec, started), name=f"runtimekit-{spec.name}"))
            await started

    async def stop(self) -> None:
        """Stop every component, in reverse order; each one's ``close`` runs."""
        for task in reversed(self._tasks):
            task.cancel()
            with suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()

    async def _keep(self, spec: ComponentSpec, started: asyncio.Future[None]) -> None:
        delay = self._initial
        while True:
            began = self._clock()
            try:
                component = spec.build()
            except Exception as error:  # noqa: BLE001 - a component's fault never takes down the rest
                log.exception("component %s could not be built; retrying in %.1f s", spec.name, delay)
                self._down(spec.name, error)
            else:
                running = False
                try:
                    await component.start()
                    running = True
                    self._set(spec.name, up=True)
                    if not started.done():
                        started.set_result(None)
                    await component.run()
                    raise RuntimeError("run() returned")
                except asyncio.CancelledError:
                    await self._close(spec.name, component)
                    self._set(spec.name, up=False)
                    raise
                except Exception as error:  # noqa: BLE001
                    self._log_failure(spec.name, error, running, delay)
                    await self._close(spec.name, component)
                    self._down(spec.name, error)
            if not started.done():
                started.set_result(None)  # the table goes on: a failed start is retried here
            if self._clock() - began >= self._stable:
                delay = self._initial
            await asyncio.sleep(delay)
            delay = min(delay * 2, self._max)

    def _log_failure(self, name: str, error: Exception, running: bool, delay: float) -> None:
        """A component that died, or failed to start for a bug: its traceback. One that could not
        start for a reason the system gives (an OSError: a port or socket in use, a permission):
        one line, said again only when the reason changes (the traceback at debug level)."""
        if running or not isinstance(error, OSError):
            log.error("component %s %s; restarting in %.1f s", name, "died" if running else "failed to start", delay,
                      exc_info=error)
            return
        reason = str(error) or type(error).__name__
        level = logging.DEBUG if self._start_refused.get(name) == reason else logging.ERROR
        self._start_refused[name] = reason
        log.log(level, "component %s cannot start: %s; trying again with backoff (now %.1f s)", name, reason, delay)
        log.debug("component %s start failure", name, exc_info=error)

    async def _close(self, name: str, component: Component) -> None:
        try:
            await component.close()
        except Exception:  # noqa: BLE001
            log.exception("component %s failed to close", name)

    def _down(self, name: str, error: BaseException) -> None:
        status = self._status[name]
        self._status[name] = replace(
            status, up=False, restarts_total=status.restarts_total + 1, last_error=f"{type(error).__name__}: {error}"
        )
        self._publish()

    def _set(self, name: str, *, up: bool) -> None:
        self._status[name] = replace(self._status[name], up=up)
        if up:
            self._start_refused.pop(name, None)
            log.info("component %s started", name)
        self._publish()

    def _publish(self) -> None:
        self._state.publish_components(MappingProxyType(dict(self._status)))
