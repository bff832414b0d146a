"""NUMA nodes and CPU sockets from sysfs, and the kernel's cpu-list format.

Sources (Linux ``Documentation/ABI``): ``stable/sysfs-devices-node`` (``node/nodeN/cpulist``),
``stable/sysfs-devices-system-cpu`` (``cpuN/topology/physical_package_id``: the socket).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

__all__ = ["DEFAULT_SYS_ROOT", "NumaNode", "cpu_sockets", "format_cpulist", "numa_nodes", "parse_cpulist", "read_fact"]

#: Where sysfs is mounted on a real node; every function takes ``sys_root`` instead.
DEFAULT_SYS_ROOT = "/sys"

_T = TypeVar("_T")


def read_fact(path: Path, parse: Callable[[str], _T], unknown: _T, what: str, errors: list[str] | None) -> _T:
    """``parse`` of the text of sysfs file ``path`` (stripped); ``unknown`` when it is absent.
    When it cannot be read (OSError, bytes that are not UTF-8, ``parse``'s ValueError): with
    ``errors`` a list, "<what>: reading <path> failed: <why>" is appended and ``unknown`` returned;
    with ``errors`` None the failure is raised."""
    try:
        return parse(path.read_text().strip()) if path.is_file() else unknown
    except (OSError, ValueError) as error:
        if errors is None:
            raise
        errors.append(f"{what}: reading {path} failed: {error}")
        return unknown


@dataclass(frozen=True, slots=True)
class NumaNode:
    """One NUMA node with CPUs: its id and its CPUs as a kernel cpu list ("0-55,112-167")."""

    id: int
    cpus: str


def parse_cpulist(text: str) -> set[int]:
    """CPU ids of a kernel cpu list: "0-2,5" -> {0, 1, 2, 5}; "" -> set()."""
    out: set[int] = set()
    for part in filter(None, text.strip().split(",")):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def format_cpulist(cpus: Iterable[int]) -> str:
    """CPU ids as a kernel cpu list, ascending: (0, 1, 2, 5) -> "0-2,5"."""
    ranges: list[list[int]] = []
    for c in sorted(set(cpus)):
        if ranges and ranges[-1][1] == c - 1:
            ranges[-1][1] = c
        else:
            ranges.append([c, c])
    return ",".join(f"{a}-{b}" if a != b else str(a) for a, b in ranges)


def numa_nodes(sys_root: str | Path = DEFAULT_SYS_ROOT, errors: list[str] | None = None) -> list[NumaNode]:
    """NUMA nodes that have CPUs, by id (memory-only nodes, e.g. GPU memory on Grace, are left
    out); [] when sysfs has no node directory. A node whose ``cpulist`` cannot be read is left out
    and said in ``errors`` (``read_fact``; with ``errors`` None it is raised)."""
    out = []
    nodes = [d for d in (Path(sys_root) / "devices/system/node").glob("node*") if re.fullmatch(r"node\d+", d.name)]
    for d in sorted(nodes, key=lambda p: int(p.name[4:])):
        cpus = read_fact(d / "cpulist", str, "", f"NUMA node {d.name[4:]}", errors)
        if cpus:
            out.append(NumaNode(int(d.name[4:]), cpus))
    return out


def cpu_sockets(sys_root: str | Path = DEFAULT_SYS_ROOT) -> int | None:
    """Number of CPU sockets (distinct ``physical_package_id``); None when sysfs does not say."""
    ids = set()
    for f in (Path(sys_root) / "devices/system/cpu").glob("cpu[0-9]*/topology/physical_package_id"):
        ids.add(f.read_text().strip())
    return len(ids) or None
