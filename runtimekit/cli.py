"""The ``runtimekit`` command line.

Exit codes: 0 success, 1 a runtime failure (an agent unreachable, say), 2 bad usage or
configuration (the message names the flag or key and the rule).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from typing import Sequence

from runtimekit import __version__, config as config_module

EXIT_USAGE = 2


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
    serve.add_argument("--log-level", choices=("debug", "info", "warning", "error"))
    serve.set_defaults(handler=_run_serve)


def _sim_parser(commands: argparse._SubParsersAction) -> None:
    from runtimekit.sim.cli_args import add_fault_arguments

    sim = commands.add_parser("sim", help="the simulated GPU node: scenarios, fault injection, recording")
    sim_commands = sim.add_subparsers(dest="sim_command", required=True, metavar="COMMAND")

    inject = sim_commands.add_parser("inject", help="inject (or --clear) a fault into a running agent on the simulator")
    inject.add_argument("--agent", required=True, metavar="URL", help="the agent, e.g. http://127.0.0.1:9445")
    inject.add_argument("--gpu", required=True, type=int, metavar="N", help="GPU index")
    inject.add_argument("--clear", action="store_true", help="undo the fault (all faults on the GPU without --fault)")
    add_fault_arguments(inject)
    inject.set_defaults(handler=_run_inject)

    scenarios = sim_commands.add_parser("scenarios", help="list the built-in scenarios")
    scenarios.set_defaults(handler=_run_scenarios)

    record = sim_commands.add_parser("record", help="write the scenario of the real node this runs on")
    record.add_argument("--name", default="recorded", help="scenario name")
    record.add_argument("--output", "-o", metavar="FILE", help="write here instead of standard output")
    record.set_defaults(handler=_run_record)


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="runtimekit", description="GPU node agent: exporter, health checker, slicer")
    root.add_argument("--version", action="version", version=f"runtimekit {__version__}")
    commands = root.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _serve_parser(commands)
    _sim_parser(commands)
    return root


def _run_serve(args: argparse.Namespace) -> int:
    from runtimekit import service

    overrides = {
        "sim.scenario": args.sim,
        "listen": args.listen,
        "state_dir": args.state_dir,
        "sampling.interval_seconds": args.interval,
        "sim.seed": args.seed,
        "sim.processes": args.sim_processes,
        "sim.load": args.sim_load,
        "log_level": args.log_level,
    }
    try:
        config = config_module.load(args.config, overrides)
        _setup_logging(config.log_level)
        if config.sim_scenario:
            from runtimekit import sim

            sim.load_scenario(config.sim_scenario)  # a bad scenario is a usage error, before anything starts
        from exporter import enabled_collectors

        enabled_collectors(config.exporter_collectors)
    except ValueError as error:
        print(f"runtimekit: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    try:
        asyncio.run(service.serve(config))
    except OSError as error:  # the port is taken, say
        logging.getLogger("runtimekit").error("cannot serve on %s: %s", config.listen, error.strerror or error)
        return 1
    return 0


def _run_inject(args: argparse.Namespace) -> int:
    from runtimekit.sim.cli_args import fault_params_from_args
    from runtimekit.sim.client import inject_remote

    if not args.clear and not args.fault:
        print("runtimekit: error: --fault is required unless --clear is given", file=sys.stderr)
        return EXIT_USAGE
    try:
        params = fault_params_from_args(args.fault, args) if args.fault and not args.clear else {}
        answer = inject_remote(args.agent, args.gpu, args.fault, params, clear=args.clear)
    except ValueError as error:
        print(f"runtimekit: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except (OSError, RuntimeError) as error:
        print(f"runtimekit: {error}", file=sys.stderr)
        return 1
    print(json.dumps(answer, indent=2, sort_keys=True))
    return 0


def _run_scenarios(args: argparse.Namespace) -> int:
    from runtimekit import sim

    for name in sim.list_scenarios():
        scenario = sim.load_scenario(name)
        print(f"{name}\t{scenario.description}")
    return 0


def _run_record(args: argparse.Namespace) -> int:
    from runtimekit.sim.record import record_scenario

    try:
        text = record_scenario(args.name)
    except RuntimeError as error:
        print(f"runtimekit: {error}", file=sys.stderr)
        return 1
    if args.output:
        with open(args.output, "w", encoding="utf-8") as out:
            out.write(text)
    else:
        sys.stdout.write(text)
    return 0


def _setup_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
