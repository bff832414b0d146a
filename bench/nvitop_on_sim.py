#!/usr/bin/env python3
"""Run PyPI's nvitop-exporter on a simulated node: install the simulator below pynvml, then hand over.

Shows that any pynvml program runs on the simulated node after one call, and gives the scrape
benchmark a neighbour measured on the same machine. Arguments after ``--`` go to nvitop-exporter.
"""

from __future__ import annotations

import argparse
import sys

from runtimekit import sim


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="dgx-h100")
    parser.add_argument("--processes", type=int, default=64)
    parser.add_argument("--seed", type=int)
    parser.add_argument("exporter_args", nargs=argparse.REMAINDER)
    args = parser.parse_args()

    node = sim.SimulatedNode(sim.load_scenario(args.scenario), seed=args.seed)
    node.set_process_count(args.processes)
    sim.install(node)

    from nvitop_exporter.cli import main as nvitop_exporter_main

    sys.argv = ["nvitop-exporter", *[a for a in args.exporter_args if a != "--"]]
    return nvitop_exporter_main() or 0


if __name__ == "__main__":
    sys.exit(main())
