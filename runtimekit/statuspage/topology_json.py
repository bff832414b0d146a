"""The topology matrix of ``GET /api/v1/node``, as ``nvidia-smi topo -m`` draws it: one row per GPU,
one column per GPU and then per RDMA NIC; each cell the nearest level the pair shares.

Cells are ``{"level": ..., "label": ...}``: ``self`` "X"; ``nvlink`` "NV<links>"; ``pcie_switch``
"PIX"; ``numa`` "NODE"; ``socket`` "SOCK"; ``system`` "SYS"; ``unknown`` "-" (a pair discovery
did not link). Read from the topology topic (``runtimekit.state.topology``); None before the first
discovery. The full document, places included, is ``GET /api/v1/topology``.
"""

from __future__ import annotations

from typing import Any

from runtimekit.state.topology import Link, Topology

#: A level's cell label, nvidia-smi's names where it has them (SOCK is ours).
LABELS = {"pcie_switch": "PIX", "numa": "NODE", "socket": "SOCK", "system": "SYS"}


def cell(link: Link | None) -> dict[str, str]:
    if link is None:
        return {"level": "unknown", "label": "-"}
    label = f"NV{link.nvlinks}" if link.level == "nvlink" else LABELS.get(link.level, link.level.upper())
    return {"level": link.level, "label": label}


def render_matrix(topology: Topology | None) -> dict[str, Any] | None:
    """``{"columns": ["GPU0", …, "NIC0", …], "nics": [names], "rows": [{"gpu": 0, "numa_node",
    "socket", "cells": [...]}, …], "errors": [...]}``."""
    if topology is None:
        return None
    indices = [place.ref.index for place in topology.gpus]
    nics = [nic.name for nic in topology.nics]
    rows = []
    for place in topology.gpus:
        index = place.ref.index
        cells = [{"level": "self", "label": "X"} if peer == index else cell(topology.gpu_links.get((min(index, peer), max(index, peer))))
                 for peer in indices]
        cells += [cell(topology.nic_links.get((index, nic))) for nic in nics]
        rows.append({"gpu": index, "numa_node": place.numa_node, "socket": place.socket, "cells": cells})
    return {
        "columns": [f"GPU{index}" for index in indices] + [f"NIC{position}" for position in range(len(nics))],
        "nics": nics,
        "rows": rows,
        "errors": list(topology.errors),
    }
