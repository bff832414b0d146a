"""``runtimekit gang plan --cluster FILE --gangs FILE [-o table|json]``: the placer of ``gang serve``
run offline on a cluster description (``cluster.py``), for scripts, checks and capacity planning.

The gangs are placed in the file's order, each reserving what it gets, as the controller does.
Output: per gang its node per pod, the tiers spanned, the lower bound and the common domain, or
the reason it was refused. ``-o json`` prints one document::

    {"gangs": [{"key": "team-a/llama", "placed": true, "nodes": {"launcher": "dgx-000", ...},
                "tiers_spanned": 1, "tiers_spanned_name": "leaf", "lower_bound": 1,
                "lower_bound_name": "leaf", "domain": "leaf c0/s0/l0"},
               {"key": "team-b/big", "placed": false, "reason": "..."}],
     "placed": 1, "refused": 1}

Exit codes (``runtimekit.kube.cli_common``): 0 every gang placed; 1 at least one refused (the
output says why); 2 bad input (a flag, an unreadable file, a field that breaks its rule: one line
on stderr naming the file, the field and the rule, never a traceback).

Only the standard library is imported at import time: ``runtimekit.cli`` builds its parser from here.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from runtimekit.kube.cli_common import EXIT_FAILURE, EXIT_USAGE, fail

if TYPE_CHECKING:
    from .network import Tiers
    from .placer import Placement, Refusal

__all__ = ["add_plan_parser", "run_plan"]


def add_plan_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``plan`` on the ``gang`` command's subcommands."""
    plan = sub.add_parser("plan", help="place gangs offline on a cluster description, with the placer of gang serve")
    plan.add_argument("--cluster", required=True, metavar="FILE",
                      help="the cluster: tiers, nodes with labels and offers, or ResourceSlices (YAML or .json)")
    plan.add_argument("--gangs", required=True, metavar="FILE", help="the gangs to place, in order (YAML or .json)")
    plan.add_argument("-o", "--output", choices=("table", "json"), default="table", help="output format (default table)")
    plan.set_defaults(handler=run_plan)


def run_plan(args: argparse.Namespace) -> int:
    from runtimekit.schema import ConfigError

    from .cluster import load_cluster, load_gangs
    from .placer import Placement

    try:
        cluster = load_cluster(args.cluster)
        gangs = load_gangs(args.gangs)
    except ConfigError as error:
        return fail(EXIT_USAGE, str(error))
    placer = cluster.placer()
    results: list[Placement | Refusal] = []
    for gang in gangs:
        result = placer.place(gang)
        if isinstance(result, Placement):
            placer.reserve(result)
        results.append(result)
    print(as_json(results, cluster.tiers) if args.output == "json" else as_table(results, cluster.tiers))
    return 0 if all(isinstance(result, Placement) for result in results) else EXIT_FAILURE


def as_json(results: Sequence[Placement | Refusal], tiers: Tiers) -> str:
    from .placer import Placement

    gangs: list[dict[str, Any]] = []
    for result in results:
        if isinstance(result, Placement):
            gangs.append({"key": result.key, "placed": True, "nodes": dict(result.nodes), "tiers_spanned": result.tiers_spanned,
                          "tiers_spanned_name": tiers.level_name(result.tiers_spanned), "lower_bound": result.lower_bound,
                          "lower_bound_name": tiers.level_name(result.lower_bound), "domain": result.domain})
        else:
            gangs.append({"key": result.key, "placed": False, "reason": _why(result)})
    placed = sum(gang["placed"] for gang in gangs)
    return json.dumps({"gangs": gangs, "placed": placed, "refused": len(gangs) - placed}, indent=2)


def as_table(results: Sequence[Placement | Refusal], tiers: Tiers) -> str:
    from .placer import Placement

    rows = [("GANG", "PODS", "NODES", "SPANS", "LOWER BOUND", "DOMAIN OR REASON")]
    for result in results:
        if isinstance(result, Placement):
            rows.append((result.key, str(len(result.nodes)), str(len(set(result.nodes.values()))),
                         tiers.level_name(result.tiers_spanned), tiers.level_name(result.lower_bound), result.domain))
        else:
            rows.append((result.key, "", "", "refused", "", _why(result)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)) + "  " + row[-1]
                     for row in rows)


def _why(refusal: Refusal) -> str:
    """The refusal's reason with its live counts, when it has them."""
    return f"{refusal.reason}; {refusal.detail}" if refusal.detail else refusal.reason
