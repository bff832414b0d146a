"""``runtimekit topo allocate``: the allocator (topology/allocator.py) over a scenario's
topology, without an agent, for scripts and checks::

    runtimekit topo allocate --scenario pcie-inference --free 0,1,2,5 --count 2 [--required 5] [--nics] [-o json]

``--free`` defaults to every GPU of the scenario; ``--nics`` pairs each chosen GPU with its nearest
NIC (all the scenario's NICs are free). Output: a table (GPU, NIC) and the set's cost, or with
``-o json`` ``{"gpus": [...], "nics": [...], "cost": n}`` (``nics`` per GPU in the same order,
``""`` where none was asked or none is left; ``cost``: Σ ``Link.cost`` over the chosen pairs).

The scenario reaches this module as a function (``ScenarioTopology``: name or YAML path →
``Topology``) that the command line's composition root passes in, since only runtimekit/cli.py
may import the simulator (tests/core/test_layering.py). Exit codes, as ``runtimekit.cli``'s: 0
done; 2 bad usage (an unknown scenario, a bad ``--free`` list, ``--count`` 0 or above the free
GPUs): one line naming the flag and the rule, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable

from runtimekit.cli_args import EXIT_USAGE
from runtimekit.cli_slice import table
from runtimekit.state.topology import AllocationError, Allocator, Topology

__all__ = ["ScenarioTopology", "add_allocate_parser", "parse_indices"]


#: A scenario's topology by name (or YAML path); raises ValueError for an unknown or bad scenario.
ScenarioTopology = Callable[[str], Topology]

#: The allocator's argument -> the flag that carries it.
FLAGS = {"count": "--count", "free": "--free", "required": "--required", "free_nics": "--nics"}


def parse_indices(text: str) -> list[int]:
    """``0,1,2,5`` -> [0, 1, 2, 5]; ValueError naming the rule for anything else."""
    indices = []
    for part in text.split(","):
        if not part.strip().isdigit():
            raise ValueError(f"{part.strip()!r} is not a GPU index (a comma-separated list of indices, like 0,1,2,5)")
        indices.append(int(part))
    return indices


def add_allocate_parser(topo_commands: argparse._SubParsersAction, scenario_topology: ScenarioTopology,
                        allocate: Allocator) -> None:
    """Register ``allocate`` under ``runtimekit topo``'s subcommands; the composition root hands in
    the scenario reader and the allocator (``runtimekit.topology.allocator.allocate``)."""
    command = topo_commands.add_parser("allocate", help="the best-connected GPUs (and their NICs) of a scenario, without an agent")
    command.add_argument("--scenario", required=True, metavar="NAME", help="a built-in scenario or a YAML file")
    command.add_argument("--free", metavar="LIST", help="free GPU indices, e.g. 0,1,2,5 (default: all)")
    command.add_argument("--required", metavar="LIST", help="GPU indices the set must hold, e.g. 5")
    command.add_argument("--count", required=True, type=int, metavar="N", help="how many GPUs")
    command.add_argument("--nics", action="store_true", help="pair each GPU with its nearest free RDMA NIC")
    command.add_argument("-o", "--output", choices=("table", "json"), default="table", help="output format")
    command.set_defaults(handler=lambda args: run_allocate(args, scenario_topology, allocate))


def run_allocate(args: argparse.Namespace, scenario_topology: ScenarioTopology, allocate: Allocator) -> int:
    try:
        free = parse_indices(args.free) if args.free is not None else None
    except ValueError as error:
        return _usage("--free", str(error))
    try:
        required = parse_indices(args.required) if args.required is not None else []
    except ValueError as error:
        return _usage("--required", str(error))
    try:
        topology = scenario_topology(args.scenario)
    except (ValueError, OSError) as error:
        return _usage("--scenario", str(error))
    try:
        chosen = allocate(topology, free if free is not None else (g.ref.index for g in topology.gpus), args.count,
                          required=required, with_nics=args.nics)
    except AllocationError as error:
        return _usage(FLAGS[error.field], str(error).removeprefix(f"{error.field}: "))
    if args.output == "json":
        print(json.dumps({"gpus": list(chosen.gpus), "nics": list(chosen.nics), "cost": chosen.cost}))
    else:
        print(table(("GPU", "NIC"), [(str(g), nic or "-") for g, nic in zip(chosen.gpus, chosen.nics, strict=True)]))
        print(f"cost {chosen.cost}")
    return 0


def _usage(flag: str, rule: str) -> int:
    print(f"runtimekit topo allocate: error: {flag}: {rule}", file=sys.stderr)
    return EXIT_USAGE
