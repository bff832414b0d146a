"""bench/topology.py --quick runs as the README says and ends with one well-formed RESULT line; its
go-gpuallocator model reproduces upstream's own expected answers (its figures are checked for
sense, not for speed: that is the benchmark's job)."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from itertools import combinations
from pathlib import Path
from types import MappingProxyType, ModuleType

from runtimekit.state.refs import GpuRef
from runtimekit.state.topology import GpuPlace, Link, Topology

ROOT = Path(__file__).resolve().parents[2]
RESULT = re.compile(r"RESULT optimal=(\S+) cases=(\d+) p99_ms_8=(\S+) p99_ms_16=(\S+) frag_ours=(\S+) "
                    r"frag_firstfit=(\S+) frag_gpuallocator=(\S+) gpuallocator_padding=(\d+)")


def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_topology", ROOT / "bench" / "topology.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_quick_run_prints_a_result_line() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "topology.py"), "--quick"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert sum(line.startswith("RESULT ") for line in lines) == 1
    match = RESULT.fullmatch(lines[-1])
    assert match is not None, lines[-1]
    assert float(match[1]) == 1.0  # the allocator equals brute force on every case
    assert int(match[2]) > 0
    assert all(float(match[i]) > 0 for i in (3, 4))
    assert all(0 <= float(match[i]) <= 1 for i in (5, 6, 7))


def dgx1_volta() -> Topology:
    """go-gpuallocator's NewDGX1VoltaNode (gpuallocator/common_test.go): the hybrid cube-mesh, one or
    two NVLinks per linked pair, as upstream builds it; the PCIe places here are approximate (the
    expected answers follow from the NVLink scores)."""
    links = {(0, 1): 1, (0, 2): 1, (0, 3): 2, (0, 4): 2, (1, 2): 2, (1, 3): 1, (1, 5): 2, (2, 3): 2, (2, 6): 1,
             (3, 7): 1, (4, 5): 1, (4, 6): 1, (4, 7): 2, (5, 6): 2, (5, 7): 1, (6, 7): 2}
    gpus = tuple(GpuPlace(GpuRef(f"GPU-{i}", i), numa_node=i // 4, socket=i // 4, pcie_switches=(f"root{i // 4}", f"sw{i // 2}"),
                          nvlinks=MappingProxyType({b if a == i else a: n for (a, b), n in links.items() if i in (a, b)}))
                 for i in range(8))
    pairs = {(a, b): Link("nvlink", links[(a, b)]) if (a, b) in links else Link("system") for a, b in combinations(range(8), 2)}
    return Topology(gpus, (), MappingProxyType(pairs), MappingProxyType({}))


def test_gpuallocator_model_gives_upstreams_expected_answers() -> None:
    """besteffort_test.go's table (../shared/reference/topology.md §1), on its DGX-1V."""
    topology = dgx1_volta()
    upstream = bench().GpuAllocator(topology)
    assert upstream(topology, [0, 2, 4, 5], 2) == (4, 5)
    assert upstream(topology, [0, 4, 5, 6], 2) == (5, 6)
    assert upstream(topology, [0, 1, 3], 2) == (0, 3)
    assert upstream(topology, [0, 1, 4], 2) == (0, 4)
    assert upstream(topology, [0, 1, 2, 3], 1) == (0,)  # size 1: the first free GPU
