"""The ``runtimekit`` command line. Exit codes: ``runtimekit.cli_args``."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import threading
import time
from collections.abc import Sequence

from runtimekit import __version__
from runtimekit import config as config_module
from runtimekit._compat import UnsupportedVersion, check_versions
from runtimekit.cli_args import EXIT_OUTPUT_CLOSED, EXIT_USAGE
from runtimekit.gc_tuning import tuned_for_serving
from runtimekit.slicer.journal import Journal, JournalError
from runtimekit.state.topology import Topology
from runtimekit.state_dir import check_state_dir, lock_state_dir


def _serve_parser(commands: argparse._SubParsersAction) -> None:
    serve = commands.add_parser("serve", help="run the node agent")
    serve.add_argument("--config", metavar="FILE", help="YAML configuration file")
    serve.add_argument("--sim", metavar="SCENARIO", help="run on a simulated node (a built-in name or a YAML file)")
    serve.add_argument("--listen", metavar="HOST:PORT", help=f"listen address (default 0.0.0.0:{config_module.DEFAULT_PORT})")
    serve.add_argument("--state-dir", metavar="DIR", help="directory for state that survives restarts")
    serve.add_argument("--interval", type=float, metavar="SECONDS", help="sampling interval (default 1)")
    serve.add_argument("--seed", type=int, help="seed of the simulated node")
    serve.add_argument("--sim-load", choices=("training", "busy", "idle"), help="simulated workload")
    serve.add_argument("--sim-processes", type=int, metavar="N", help="simulated GPU processes to keep running")
    serve.add_argument("--sim-pods", type=int, metavar="N", help="extra simulated pods sharing the GPUs")
    serve.add_argument("--log-level", choices=("debug", "info", "warning", "error"))
    serve.set_defaults(handler=_run_serve)


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="runtimekit", description="GPU node agent: exporter, health checker, slicer")
    root.add_argument("--version", action="version", version=f"runtimekit {__version__}")
    commands = root.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _serve_parser(commands)
    from runtimekit.sim.cli import add_sim_parser  # sim: the simulated node; only here is the simulator registered

    add_sim_parser(commands)
    from runtimekit.kube.remediation.cli import add_remediate_parser

    add_remediate_parser(commands)
    from runtimekit.kube.deviceplugin.cli import add_device_plugin_parser

    add_device_plugin_parser(commands)
    from runtimekit.kube.dra.cli import add_dra_parser

    add_dra_parser(commands)
    from runtimekit.kube.gang.serve_cli import add_gang_parser  # gang serve (the controller), gang plan (offline)

    add_gang_parser(commands)
    from runtimekit.cli_slice import add_parsers as add_api_parsers  # slice, device, node: runtimekit.v1's client

    add_api_parsers(commands)
    from runtimekit.cli_topo import add_topo_parser  # topo: runtimekit.v1's client; topo allocate: offline
    from runtimekit.topology.allocator import allocate

    add_topo_parser(commands, _scenario_topology, allocate)
    from runtimekit.cli_status import add_status_parser  # status: the node at a glance, over HTTP

    add_status_parser(commands)
    return root


def _scenario_topology(name: str) -> Topology:
    """A scenario's topology without an agent (``runtimekit topo allocate``): only this module may
    import the simulator."""
    from runtimekit import sim
    from runtimekit.topology.offline import topology_from_scenario

    return topology_from_scenario(sim.load_scenario(name))


def _run_serve(args: argparse.Namespace) -> int:
    from runtimekit import service

    overrides = {
        "listen": args.listen,
        "state_dir": args.state_dir,
        "sampling.interval_seconds": args.interval,
        "log_level": args.log_level,
    }
    sim_overrides = {
        "sim.scenario": args.sim,
        "sim.seed": args.seed,
        "sim.processes": args.sim_processes,
        "sim.load": args.sim_load,
        "sim.pods": args.sim_pods,
    }
    simulation = None
    try:
        check_versions()
    except UnsupportedVersion as error:
        print(f"runtimekit: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    try:
        if args.sim is None:
            given = [f"--{key.replace('sim.', 'sim-')}" for key, value in sim_overrides.items() if value is not None]
            if given:
                raise ValueError(f"{', '.join(given).replace('--sim-seed', '--seed')}: only with --sim SCENARIO")
            config = config_module.load(args.config, overrides)
        else:
            from runtimekit.sim.component import SIM_SCHEMA, Simulation

            config = config_module.load(args.config, {**overrides, **sim_overrides}, extra_schema=SIM_SCHEMA)
        _setup_logging(config.log_level)
        from runtimekit.exporter import enabled_collectors

        enabled_collectors(config.exporter.collectors)
        if config.health.enabled:
            from runtimekit.healthcheck.thresholds import load_thresholds

            load_thresholds(config.health.thresholds)  # a bad thresholds file is a usage error too
        check_state_dir(config.state_dir)  # state that could never be persisted is refused, not lived with
        lock_state_dir(config.state_dir)  # held until the process ends: one agent per state directory
        if config.api.enabled:  # after the lock: a second agent on this state directory is named as that
            from runtimekit.grpc_unix import check_server_socket

            check_server_socket(config.api_socket, "api.socket")  # a path it could never serve at: refused now
            if config.api.tcp_listen is not None:
                from runtimekit.api.server import check_tcp_listen

                check_tcp_listen(config.api.tcp_listen, config.listen)  # a port taken: refused now, not every restart
        if config.slicer.enabled:
            Journal.in_state_dir(config.state_dir).close()  # a corrupt or foreign journal: refused, by name
        if args.sim is not None:
            simulation = Simulation(config)  # a bad scenario is a usage error, before anything starts
            config = simulation.configure(config)
    except (ValueError, JournalError) as error:
        print(f"runtimekit: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as error:  # the simulated node's own files (its /dev/shm tree, its boot id)
        print(f"runtimekit: error: cannot set up the simulated node: {error.strerror or error}: "
              f"{error.filename or ''} (state_dir: {args.state_dir or 'the configured one'})", file=sys.stderr)
        return EXIT_USAGE
    registrations = [simulation.registration()] if simulation is not None else []
    code = 0
    try:
        with tuned_for_serving():
            asyncio.run(service.serve(config, registrations))
    except OSError as error:  # the port is taken, say
        logging.getLogger("runtimekit").error("cannot serve on %s: %s", config.listen, error.strerror or error)
        code = 1
    finally:
        if simulation is not None:
            simulation.remove()
    _exit_past_stuck_threads(code)
    return code


def _exit_past_stuck_threads(code: int, grace_seconds: float = 0.5) -> None:
    """Exit now if a thread is still in a call that does not return (an NVML call stuck in the
    driver): Python would otherwise wait for it at exit, and SIGTERM must stop the agent."""
    deadline = time.monotonic() + grace_seconds
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join(max(0.0, deadline - time.monotonic()))
    stuck = [t.name for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon and t.is_alive()]
    if stuck:
        logging.getLogger("runtimekit").warning("exiting without waiting for threads stuck in calls: %s", ", ".join(stuck))
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _setup_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def main(argv: Sequence[str] | None = None) -> int:
    # gRPC's C core logs connection chatter (GOAWAY on a kubelet restart) to stderr unless told not to.
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    args = parser().parse_args(argv)
    try:
        code: int = args.handler(args)
        sys.stdout.flush()  # here, not at exit: a closed pipe is then one more case of the handler's
    except BrokenPipeError:
        _discard_stdout()
        return EXIT_OUTPUT_CLOSED
    return code


def _discard_stdout() -> None:
    """The reader of our output went away (``| head``): say nothing, as ``cat`` does, and point
    stdout at /dev/null so that the interpreter's own flush at exit cannot fail again."""
    try:
        descriptor = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a real file (a test's capture)
        return
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, descriptor)
    os.close(null)


if __name__ == "__main__":
    sys.exit(main())
