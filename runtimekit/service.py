"""Wiring and lifecycle of the node agent (``runtimekit serve``): the composition root.

The agent is an aiohttp application whose one cleanup context runs the component table
(``runtimekit.components``) under a supervisor (``runtimekit.supervisor``): each component starts in
order, is restarted with backoff when it dies, and is stopped in reverse order. Components the
command line registers (the simulated node) come first, with their routes; without them the agent
has no simulator code, keys or routes. NVML is shut down last, in a thread of its own.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import traceback
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass

from aiohttp import web

from runtimekit.components import Shared, component_table, shutdown_nvml
from runtimekit.config import Config
from runtimekit.exporter import ExpositionCache, add_exporter_routes, build_collector_set
from runtimekit.gpu.nvml import NvmlSession
from runtimekit.healthcheck.api import add_health_routes
from runtimekit.listener import serve_app
from runtimekit.slicer.manager import Slicer
from runtimekit.state import NodeState
from runtimekit.statuspage import add_status_routes
from runtimekit.supervisor import ComponentSpec, Supervisor
from runtimekit.topology.routes import add_topology_routes

CONFIG = web.AppKey("config", Config)
STATE = web.AppKey("state", NodeState)
SESSION = web.AppKey("session", NvmlSession)
SUPERVISOR = web.AppKey("supervisor", Supervisor)
DESCRIPTION = web.AppKey("description", str)
NVML_SHUTDOWN_SECONDS = 1.0

log = logging.getLogger("runtimekit")


@dataclass(frozen=True, slots=True)
class Registration:
    """A component the command line adds in front of the agent's own (the simulated node):
    its table row, its HTTP routes, and what the landing page says the node is."""

    spec: ComponentSpec
    add_routes: Callable[[web.Application], None] | None = None
    description: str = ""


def build_app(config: Config, registrations: Sequence[Registration] = ()) -> web.Application:
    """The agent as an aiohttp application; nothing starts until the app does."""
    app = web.Application()
    state, session = NodeState(), NvmlSession()
    app[CONFIG], app[STATE], app[SESSION] = config, state, session
    app[DESCRIPTION] = next((r.description for r in registrations if r.description), "this node")
    collectors = build_collector_set(config.exporter.collectors, options={"process": _process_options(config)})
    cache = ExpositionCache(state, collectors, sample_interval_seconds=config.sampling.interval_seconds)
    slicer = Slicer(state, session, config.slicer, config.state_dir) if config.slicer.enabled else None
    specs = [r.spec for r in registrations] + component_table(Shared(config, state, session, cache, slicer))
    app[SUPERVISOR] = Supervisor(
        state,
        specs,
        initial_backoff_seconds=config.components.initial_backoff_seconds,
        max_backoff_seconds=config.components.max_backoff_seconds,
    )
    app.cleanup_ctx.append(_components_context)
    for registration in registrations:
        if registration.add_routes is not None:
            registration.add_routes(app)
    add_exporter_routes(app, cache)
    add_health_routes(app, state)
    add_topology_routes(app, state)
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz)
    add_status_routes(app, state, app[DESCRIPTION])  # / and /api/v1/node
    return app


def _process_options(config: Config) -> dict[str, object]:
    """The process collector's options from the configuration (command line opt-in, redaction)."""
    options: dict[str, object] = {"cmdline": config.exporter.process_cmdline}
    if config.exporter.cmdline_redact is not None:
        options["cmdline_redact"] = config.exporter.cmdline_redact
    return options


async def _components_context(app: web.Application) -> AsyncIterator[None]:
    supervisor = app[SUPERVISOR]
    try:
        await supervisor.start()
        yield
    finally:
        await supervisor.stop()
        await asyncio.get_running_loop().run_in_executor(
            None, shutdown_nvml, app[SESSION], NVML_SHUTDOWN_SECONDS
        )


async def _healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok\n")


async def _readyz(request: web.Request) -> web.Response:
    ready, why = request.app[STATE].view().ready
    if not ready:
        return web.Response(status=503, text=f"not ready: {why}\n")
    return web.Response(text="ready\n")


async def serve(
    config: Config,
    registrations: Sequence[Registration] = (),
    *,
    on_listening: Callable[[str], None] | None = None,
) -> None:
    """Run the agent until SIGTERM or SIGINT; stop cleanly within the listener's SHUTDOWN_SECONDS. The listener
    (``runtimekit.listener``) applies ``config.listener``: read deadlines, a connection cap, one line
    when out of descriptors, client errors counted."""
    asyncio.get_running_loop().set_exception_handler(_grpc_teardown_race_is_quiet)
    app = build_app(config, registrations)
    await serve_app(app, config.listen_host, config.listen_port, config.listener,
                    on_listening=on_listening)


def _grpc_teardown_race_is_quiet(loop: asyncio.AbstractEventLoop, context: dict[str, object]) -> None:
    """The loop's handler of errors no task caught: grpcio's asyncio poller can read its event
    descriptor once more after grpc closed it while the agent stops (OSError EBADF raised in
    ``PollerCompletionQueue._handle_events``, a callback of grpc's, not ours). That is logged at
    debug, not as an error with a traceback; anything else goes to the loop's default handler."""
    error = context.get("exception")
    if isinstance(error, OSError) and error.errno == errno.EBADF and error.__traceback__ is not None:
        frames = traceback.extract_tb(error.__traceback__)
        if frames and frames[-1].name == "_handle_events" and "completion_queue" in frames[-1].filename:
            log.debug("grpc's poller read its closed descriptor while stopping: %s", error)
            return
    loop.default_exception_handler(context)
