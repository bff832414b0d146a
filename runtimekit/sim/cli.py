"""``runtimekit sim``: the simulated node's commands — fault injection, pods, processes, the fake
kubelet and CRI runtime, reboots and GPU resets on a running agent (its ``/sim/v1`` control API),
the built-in scenarios, and recording the scenario of a real node. Registered by ``runtimekit.cli``;
exit codes as its (``runtimekit.cli_args``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable

from runtimekit.cli_args import EXIT_USAGE
from runtimekit.cli_status import agent_address
from runtimekit.client import inject_remote, reboot_remote, request_json
from runtimekit.sim.cli_args import (
    add_fault_arguments,
    add_instance_arguments,
    clear_refusal,
    fault_params_from_args,
    instance_ids_from_args,
)
from runtimekit.sim.scenario import list_scenarios, load_scenario


def agent_url(text: str) -> str:
    """``--agent``: the agent's URL, or HOST:PORT read as http://HOST:PORT (as ``runtimekit status
    --address`` reads it); the rule it breaks otherwise."""
    checked = agent_address(text)
    return checked if "://" in checked else f"http://{checked}"


def add_sim_parser(commands: argparse._SubParsersAction) -> None:
    sim = commands.add_parser("sim", help="the simulated GPU node: scenarios, fault injection, recording")
    sim_commands = sim.add_subparsers(dest="sim_command", required=True, metavar="COMMAND")

    inject = sim_commands.add_parser("inject", help="inject (or --clear) a fault into a running agent on the simulator")
    inject.add_argument("--agent", required=True, type=agent_url, metavar="URL", help="the agent, e.g. http://127.0.0.1:9445")
    inject.add_argument("--gpu", required=True, type=int, metavar="N", help="GPU index")
    inject.add_argument("--clear", action="store_true",
                        help="undo the fault: every --fault KIND fault on the GPU (all its links), or every fault "
                             "without --fault; parameter options (--link, --xid, ...) are refused with it")
    add_fault_arguments(inject)
    add_instance_arguments(inject, "the XID is raised in (--fault xid only)")
    inject.set_defaults(handler=_run_inject)

    pod = sim_commands.add_parser("pod", help="list, add, finish (a Job done) or delete simulated pods on a running agent")
    pod.add_argument("action", choices=("list", "add", "finish", "delete"))
    pod.add_argument("--agent", required=True, type=agent_url, metavar="URL")
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
    process.add_argument("--agent", required=True, type=agent_url, metavar="URL")
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
    source.add_argument("--agent", required=True, type=agent_url, metavar="URL")
    source.set_defaults(handler=_run_source)

    reboot = sim_commands.add_parser(
        "reboot", help="simulate a reboot of the simulated node: a new boot id, faults cleared, GPUs back"
    )
    reboot.add_argument("--agent", required=True, type=agent_url, metavar="URL")
    reboot.set_defaults(handler=_run_reboot)

    reset = sim_commands.add_parser(
        "reset", help="reset one simulated GPU (nvidia-smi -r): a pending MIG mode takes effect; refused while processes run"
    )
    reset.add_argument("--agent", required=True, type=agent_url, metavar="URL")
    reset.add_argument("--gpu", required=True, type=int, metavar="N", help="GPU index")
    reset.set_defaults(handler=_run_reset)

    scenarios = sim_commands.add_parser("scenarios", help="list the built-in scenarios")
    scenarios.set_defaults(handler=_run_scenarios)

    record = sim_commands.add_parser("record", help="write the scenario of the real node this runs on")
    record.add_argument("--name", default="recorded", help="scenario name")
    record.add_argument("--output", "-o", metavar="FILE", help="write here instead of standard output")
    record.set_defaults(handler=_run_record)


def _run_inject(args: argparse.Namespace) -> int:

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
    return _print_answer(lambda: reboot_remote(args.agent))


def _run_reset(args: argparse.Namespace) -> int:
    return _control("POST", args.agent, "/sim/v1/reset", {"gpu": args.gpu})


def _run_scenarios(args: argparse.Namespace) -> int:
    for name in list_scenarios():
        scenario = load_scenario(name)
        print(f"{name}\t{scenario.description}")
    return 0


def _run_record(args: argparse.Namespace) -> int:
    from runtimekit.sim.record import record_scenario  # the reader: loaded only to record

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
