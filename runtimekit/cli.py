"""The ``runtimekit`` command line. Exit codes: ``runtimekit.cli_args``."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence

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


def _sim_parser(commands: argparse._SubParsersAction) -> None:
    from runtimekit.sim.cli_args import add_fault_arguments, add_instance_arguments

    sim = commands.add_parser("sim", help="the simulated GPU node: scenarios, fault injection, recording")
    sim_commands = sim.add_subparsers(dest="sim_command", required=True, metavar="COMMAND")

    inject = sim_commands.add_parser("inject", help="inject (or --clear) a fault into a running agent on the simulator")
    inject.add_argument("--agent", required=True, metavar="URL", help="the agent, e.g. http://127.0.0.1:9445")
    inject.add_argument("--gpu", required=True, type=int, metavar="N", help="GPU index")
    inject.add_argument("--clear", action="store_true",
                        help="undo the fault: every --fault KIND fault on the GPU (all its links), or every fault "
                             "without --fault; parameter options (--link, --xid, ...) are refused with it")
    add_fault_arguments(inject)
    add_instance_arguments(inject, "the XID is raised in (--fault xid only)")
    inject.set_defaults(handler=_run_inject)

    pod = sim_commands.add_parser("pod", help="list, add, finish (a Job done) or delete simulated pods on a running agent")
    pod.add_argument("action", choices=("list", "add", "finish", "delete"))
    pod.add_argument("--agent", required=True, metavar="URL")
    pod.add_argument("--namespace", default="default")
    pod.add_argument("--name", help="pod name (add, finish, delete)")
    pod.add_argument("--phase", default="Succeeded", choices=("Succeeded", "Failed"), help="how it finished (finish)")
    pod.add_argument("--container", default="main", help="the pod's one container (add)")
    pod.add_argument("--gpus", default="", metavar="I,J", help="GPU indices the container holds (add)")
    pod.add_argument("--idle", action="store_true", help="hold the GPUs but run nothing on them (add)")
    pod.add_argument("--qos", default="burstable", choices=("guaranteed", "burstable", "besteffort"))
    pod.set_defaults(handler=_run_pod)

    process = sim_commands.add_parser("process", help="list, add or delete simulated GPU processes")
    process.add_argument("action", choices=("list", "add", "delete"))
    process.add_argument("--agent", required=True, metavar="URL")
    process.add_argument("--gpu", type=int, help="GPU index (add)")
    process.add_argument("--bytes", type=int, default=1 << 30, help="GPU memory it holds (add)")
    process.add_argument("--name", default="python", help="process name (add)")
    process.add_argument("--pid", type=int, help="pid (add: optional; delete: required)")
    process.add_argument("--namespace", help="run it in this pod's container (add)")
    process.add_argument("--pod")
    process.add_argument("--container")
    add_instance_arguments(process, "the process runs in (add; required on a GPU in MIG mode)")
    process.set_defaults(handler=_run_process)

    source = sim_commands.add_parser("source", help="stop or start the fake kubelet or CRI runtime")
    source.add_argument("action", choices=("stop", "start"))
    source.add_argument("source", choices=("kubelet", "cri"))
    source.add_argument("--agent", required=True, metavar="URL")
    source.set_defaults(handler=_run_source)

    reboot = sim_commands.add_parser(
        "reboot", help="simulate a reboot of the simulated node: a new boot id, faults cleared, GPUs back"
    )
    reboot.add_argument("--agent", required=True, metavar="URL")
    reboot.set_defaults(handler=_run_reboot)

    reset = sim_commands.add_parser(
        "reset", help="reset one simulated GPU (nvidia-smi -r): a pending MIG mode takes effect; refused while processes run"
    )
    reset.add_argument("--agent", required=True, metavar="URL")
    reset.add_argument("--gpu", required=True, type=int, metavar="N", help="GPU index")
    reset.set_defaults(handler=_run_reset)

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


def _run_inject(args: argparse.Namespace) -> int:
    from runtimekit.client import inject_remote, request_json
    from runtimekit.sim.cli_args import clear_refusal, fault_params_from_args, instance_ids_from_args

    if not args.clear and not args.fault:
        print("runtimekit: error: --fault is required unless --clear is given", file=sys.stderr)
        return EXIT_USAGE
    refused = clear_refusal(args) if args.clear else None
    if refused:  # --clear clears whole kinds: a parameter it would ignore is refused, not dropped
        print(f"runtimekit: error: {refused}", file=sys.stderr)
        return EXIT_USAGE

    def call() -> dict:
        instance = instance_ids_from_args(args)
        if instance and (args.clear or args.fault != "xid"):
            raise ValueError("--gpu-instance: applies to --fault xid only (an XID raised in a MIG instance)")
        params = fault_params_from_args(args.fault, args) if args.fault and not args.clear else {}
        if instance:
            body = {"gpu": args.gpu, **params, **instance}
            return request_json("POST", args.agent.rstrip("/") + "/sim/v1/mig/xid", body)
        return inject_remote(args.agent, args.gpu, args.fault, params, clear=args.clear)

    return _print_answer(call)


def _control(method: str, agent: str, path: str, body: dict | None = None) -> int:
    """One call to the simulator's control API; prints the answer as JSON."""
    from runtimekit.client import request_json

    return _print_answer(lambda: request_json(method, agent.rstrip("/") + path, body))


def _print_answer(call: Callable[[], dict]) -> int:
    """Run a call to a running agent: its JSON answer on stdout and 0; a refused request (bad
    input) exits 2, an unreachable agent 1."""
    try:
        answer = call()
    except ValueError as error:
        print(f"runtimekit: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except (OSError, RuntimeError) as error:
        print(f"runtimekit: {error}", file=sys.stderr)
        return 1
    print(json.dumps(answer, indent=2, sort_keys=True))
    return 0


def _run_pod(args: argparse.Namespace) -> int:
    if args.action == "list":
        return _control("GET", args.agent, "/sim/v1/pods")
    if not args.name:
        print(f"runtimekit: error: --name is required to {args.action} a pod", file=sys.stderr)
        return EXIT_USAGE
    if args.action == "delete":
        return _control("DELETE", args.agent, "/sim/v1/pods", {"namespace": args.namespace, "name": args.name})
    if args.action == "finish":
        return _control("POST", args.agent, "/sim/v1/pods/phase", {"namespace": args.namespace, "name": args.name,
                                                                   "phase": args.phase})
    try:
        gpus = [int(g) for g in args.gpus.split(",") if g.strip()]
    except ValueError:
        print(f"runtimekit: error: --gpus: must be comma-separated GPU indices, got {args.gpus!r}", file=sys.stderr)
        return EXIT_USAGE
    container = {"name": args.container, "gpus": gpus, "idle": args.idle}
    body = {"namespace": args.namespace, "name": args.name, "qos": args.qos, "containers": [container]}
    return _control("POST", args.agent, "/sim/v1/pods", body)


def _run_process(args: argparse.Namespace) -> int:
    from runtimekit.sim.cli_args import instance_ids_from_args

    if args.action == "list":
        return _control("GET", args.agent, "/sim/v1/processes")
    if args.action == "delete":
        if args.pid is None:
            print("runtimekit: error: --pid is required to delete a process", file=sys.stderr)
            return EXIT_USAGE
        return _control("DELETE", args.agent, "/sim/v1/processes", {"pid": args.pid})
    if args.gpu is None:
        print("runtimekit: error: --gpu is required to add a process", file=sys.stderr)
        return EXIT_USAGE
    body = {"gpu": args.gpu, "used_memory_bytes": args.bytes, "name": args.name}
    if args.pid is not None:
        body["pid"] = args.pid
    for key in ("namespace", "pod", "container"):
        if getattr(args, key) is not None:
            body[key] = getattr(args, key)
    try:
        body.update(instance_ids_from_args(args))
    except ValueError as error:
        print(f"runtimekit: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    return _control("POST", args.agent, "/sim/v1/processes", body)


def _run_source(args: argparse.Namespace) -> int:
    body = {"source": args.source, "running": args.action == "start"}
    return _control("POST", args.agent, "/sim/v1/sources", body)


def _run_reboot(args: argparse.Namespace) -> int:
    from runtimekit.client import reboot_remote

    return _print_answer(lambda: reboot_remote(args.agent))


def _run_reset(args: argparse.Namespace) -> int:
    return _control("POST", args.agent, "/sim/v1/reset", {"gpu": args.gpu})


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
