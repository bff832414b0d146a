"""Wiring and lifecycle of the node agent (``runtimekit serve``).

Each long-lived component is one cleanup context: it starts its tasks or threads, yields, then
stops them; aiohttp runs teardown exactly for the contexts whose startup ran. Order matters:
the simulator (when asked for) is installed below pynvml before NVML is first touched.
"""

from __future__ import annotations

import asyncio
import html
import logging
import os
import shutil
import signal
import tempfile
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from runtimekit import __version__
from runtimekit.config import Config
from runtimekit.gpu.events import XidWatcher
from runtimekit.gpu.nvml import NvmlSession
from runtimekit.gpu.reader import NodeReader
from runtimekit.sampler import Sampler
from runtimekit.state import NodeState

log = logging.getLogger(__name__)

CONFIG = web.AppKey("config", Config)
STATE = web.AppKey("state", NodeState)
SESSION = web.AppKey("session", NvmlSession)
SHUTDOWN_SECONDS = 4.5  # SIGTERM to exit, within the 5 s promised


def build_app(config: Config) -> web.Application:
    """The agent as an aiohttp application; nothing starts until the app does."""
    from runtimekit.exporter import ExpositionCache, add_exporter_routes, build_registry
    from runtimekit.healthcheck.api import add_health_routes

    app = web.Application()
    app[CONFIG] = config
    app[STATE] = NodeState()
    app[SESSION] = NvmlSession()
    if config.sim_scenario:
        _add_simulator(app, config)
    app.cleanup_ctx.append(_sampling_context)
    app.cleanup_ctx.append(_attribution_context)
    app.cleanup_ctx.append(_health_context)
    registry = build_registry(app[STATE], config.exporter_collectors, options={"process": _process_options(config)})
    cache = ExpositionCache(app[STATE], registry, sample_interval_seconds=config.sampling_interval_seconds)
    add_exporter_routes(app, cache)
    add_health_routes(app, app[STATE])
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz)
    app.router.add_get("/", _landing)
    return app


def _process_options(config: Config) -> dict[str, object]:
    """The process collector's options from the configuration (command line opt-in, redaction)."""
    options: dict[str, object] = {"cmdline": config.exporter_process_cmdline}
    if config.exporter_cmdline_redact is not None:
        options["cmdline_redact"] = config.exporter_cmdline_redact
    return options


def _add_simulator(app: web.Application, config: Config) -> None:
    """Install the simulated node below pynvml and expose its loopback-only control routes."""
    from runtimekit import sim
    from runtimekit.sim.control import add_control_routes
    from runtimekit.sim.host import SimulatedHost

    node = sim.SimulatedNode(sim.load_scenario(config.sim_scenario), seed=config.sim_seed, load=config.sim_load)
    node.set_pod_count(config.sim_pods)
    node.set_process_count(config.sim_processes)
    root = Path(tempfile.mkdtemp(prefix="runtimekit-sim-", dir=_memory_backed_tmp()))
    host = SimulatedHost(node, root)
    app[HOST_PATHS] = HostPaths(host.kubelet_socket, host.cri_socket, host.proc_root)
    add_control_routes(app, node, host)

    async def simulator_context(app: web.Application) -> AsyncIterator[None]:
        sim.install(node)
        try:
            await host.start()
        except BaseException:
            sim.uninstall()
            raise
        log.info("simulated node %r installed below pynvml (%d GPUs); kubelet, CRI and /proc under %s",
                 node.scenario.name, len(node.scenario.gpus), root)
        try:
            yield
        finally:
            await host.stop()
            sim.uninstall()
            shutil.rmtree(root, ignore_errors=True)

    app.cleanup_ctx.append(simulator_context)


def _memory_backed_tmp() -> str | None:
    """/dev/shm when writable (the simulated /proc is rewritten often: keep it off the disk)."""
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None


@asynccontextmanager
async def _owned_task(coroutine: Coroutine[Any, Any, None], name: str) -> AsyncIterator[asyncio.Task]:
    """Run ``coroutine`` as a task for the duration of the block; cancel and await it after."""
    task = asyncio.create_task(coroutine, name=name)
    try:
        yield task
    finally:
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task


async def _sampling_context(app: web.Application) -> AsyncIterator[None]:
    """The sampler task and the XID event thread, sharing one NVML session."""
    config, state, session = app[CONFIG], app[STATE], app[SESSION]
    reader = NodeReader(session, limits_refresh_seconds=config.sampling_limits_refresh_seconds)
    sampler = Sampler(
        reader,
        state,
        interval_seconds=config.sampling_interval_seconds,
        timeout_seconds=config.sampling_timeout_seconds,
        nvml_retry_seconds=config.sampling_nvml_retry_seconds,
    )
    watcher = XidWatcher(session, state.record_xid, rebuild_seconds=config.sampling_nvml_retry_seconds)
    watcher.start()
    try:
        async with _owned_task(sampler.run(), "runtimekit-sampler"):
            yield
    finally:
        await asyncio.get_running_loop().run_in_executor(None, watcher.stop)
        sampler.close()
        session.shutdown()


@dataclass(frozen=True, slots=True)
class HostPaths:
    """Where the node's attribution sources are: the real host's, or the simulated node's."""

    kubelet_socket: str
    cri_socket: str
    proc_root: str


HOST_PATHS = web.AppKey("host_paths", HostPaths)


async def _attribution_context(app: web.Application) -> AsyncIterator[None]:
    """The attributor task: owners of GPU processes and devices, after each sampling cycle."""
    from runtimekit.attribution.attributor import Attributor
    from runtimekit.attribution.cri import CriClient
    from runtimekit.attribution.podresources import PodResourcesClient
    from runtimekit.attribution.procfs import ProcessReader

    config = app[CONFIG]
    if not config.attribution_enabled:
        yield
        return
    paths = app.get(HOST_PATHS) or HostPaths(
        config.attribution_kubelet_socket, config.attribution_cri_socket, config.attribution_proc_root
    )
    timeout = config.attribution_timeout_seconds
    attributor = Attributor(
        app[STATE],
        kubelet=PodResourcesClient(paths.kubelet_socket, timeout),
        cri=CriClient(paths.cri_socket, timeout),
        proc=ProcessReader(paths.proc_root),
        refresh_seconds=config.attribution_refresh_seconds or 0.0,
        cri_refresh_seconds=config.attribution_cri_refresh_seconds,
        cache_seconds=config.attribution_cache_seconds,
        max_processes_per_gpu=config.attribution_max_processes_per_gpu,
        process_refresh_seconds=config.attribution_process_refresh_seconds,
    )
    try:
        async with _owned_task(attributor.run(), "runtimekit-attributor"):
            yield
    finally:
        await attributor.close()


async def _health_context(app: web.Application) -> AsyncIterator[None]:
    """The health checker task: detectors on every sample and XID, the state machine, the store.

    The detectors and their thresholds are imported here, at start-up, so that a bad thresholds
    file stops the agent before it serves (like any configuration error)."""
    config = app[CONFIG]
    if not config.health_enabled:
        log.info("health checker disabled (health.enabled: false)")
        yield
        return
    from runtimekit.healthcheck.checker import HealthChecker
    from runtimekit.healthcheck.detectors import run_detectors
    from runtimekit.healthcheck.store import HealthStore
    from runtimekit.healthcheck.thresholds import load_thresholds

    thresholds = load_thresholds(config.health_thresholds)
    checker = HealthChecker(
        app[STATE],
        run_detectors,
        thresholds=thresholds,
        store=HealthStore(config.state_dir, boot_id_path=config.health_boot_id_path),
        clean_samples=config.health_clean_samples_to_clear or thresholds["machine"]["clean_samples"],
        timeout_seconds=config.health_evaluation_timeout_seconds,
        expected_gpus=config.health_expected_gpus,
    )
    await checker.load()
    try:
        async with _owned_task(checker.run(), "runtimekit-health"):
            yield
    finally:
        await asyncio.get_running_loop().run_in_executor(None, checker.close)


async def _healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok\n")


async def _readyz(request: web.Request) -> web.Response:
    snapshot = request.app[STATE].snapshot
    if snapshot is None:
        return web.Response(status=503, text="not ready: no snapshot yet\n")
    return web.Response(text="ready\n")


async def _landing(request: web.Request) -> web.Response:
    config, snapshot = request.app[CONFIG], request.app[STATE].snapshot
    if snapshot is None:
        status = "waiting for the first sample"
    elif not snapshot.nvml_up:
        status = f"NVML unavailable: {snapshot.nvml_error}"
    else:
        status = f"{snapshot.device_count} GPUs"
    node = f"simulated node <code>{html.escape(config.sim_scenario)}</code>" if config.sim_scenario else "this node"
    body = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>Runtime Kit</title></head>
<body><h1>Runtime Kit {__version__}</h1>
<p>GPU node agent on {node}: {html.escape(status)}.</p>
<ul>
<li><a href="/metrics">/metrics</a> — Prometheus metrics</li>
<li><a href="/healthz">/healthz</a> — alive</li>
<li><a href="/readyz">/readyz</a> — ready once the first snapshot exists</li>
<li><a href="/api/v1/health">/api/v1/health</a> — health verdict per GPU, active faults, affected pods</li>
</ul></body></html>
"""
    return web.Response(text=body, content_type="text/html")


async def serve(config: Config, *, on_listening: Callable[[str], None] | None = None) -> None:
    """Run the agent until SIGTERM or SIGINT; stop cleanly within SHUTDOWN_SECONDS."""
    app = build_app(config)
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, config.listen_host, config.listen_port)
        await site.start()
        address = _address(site)
        log.info("listening on %s", address)
        if on_listening:
            on_listening(address)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        await stop.wait()
        log.info("stopping")
    finally:
        try:
            await asyncio.wait_for(runner.cleanup(), SHUTDOWN_SECONDS)
        except TimeoutError:
            log.error("shutdown took longer than %.1f s; exiting anyway", SHUTDOWN_SECONDS)


def _address(site: web.TCPSite) -> str:
    server = site._server  # aiohttp keeps the bound sockets here; needed for port 0
    sockets = getattr(server, "sockets", None) or []
    if sockets:
        host, port = sockets[0].getsockname()[:2]
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{port}"
    return site.name
