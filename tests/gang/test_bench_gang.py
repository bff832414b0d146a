"""bench/gang.py --quick runs as its docstring says and ends with one well-formed RESULT line (the
figures are checked for sense, not for speed: that is the benchmark's job); its replay catches the
violations it counts; its Kueue BestFit follows Kueue's own functions (tas_flavor_snapshot.go)."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
FIELDS = ("violations", "at_lower_bound", "placed", "leaves", "frag_leaf")


def bench_cluster() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gang_cluster", ROOT / "bench" / "support" / "gang_cluster.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while they are made
    spec.loader.exec_module(module)
    return module


def test_quick_run_prints_a_result_line() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "gang.py"), "--quick"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert sum(line.startswith("RESULT ") for line in lines) == 1 and lines[-1].startswith("RESULT ")
    result = dict(re.findall(r"(\w+)=(\S+)", lines[-1]))
    expected = {f"{prefix}{name}" for prefix in ("", "kueue_", "firstfit_") for name in FIELDS}
    expected |= {"p50_ms", "p99_ms", "p99_ms_512", "largest_nodes", "frag_node"}
    assert set(result) == expected
    assert result["violations"] == "0" and result["kueue_violations"] == "0"
    assert int(result["firstfit_violations"]) > 0  # per-pod placement leaves gangs in part
    for prefix in ("", "kueue_", "firstfit_"):
        assert 0 < float(result[f"{prefix}at_lower_bound"]) <= 1 and 0 < float(result[f"{prefix}placed"]) <= 1
        assert float(result[f"{prefix}leaves"]) >= 1 and 0 <= float(result[f"{prefix}frag_leaf"]) <= 1
    assert float(result["at_lower_bound"]) > float(result["firstfit_at_lower_bound"])


def test_the_replay_catches_splits_and_double_booking() -> None:
    module = bench_cluster()
    cluster = module.ClusterShape(32, 32, 32, 16)
    replay = module.Replay(cluster)
    gang = module.Gang("ns/a", 2, 8, True)
    replay.apply(gang, {"w0": 0, "w1": 1, "launcher": 0})
    assert (replay.split, replay.double_booked) == (0, 0)
    replay.apply(module.Gang("ns/b", 2, 4, False), {"w0": 1})  # half a gang, on a node already full
    assert (replay.split, replay.double_booked) == (1, 1)
    replay.leave("ns/a")
    replay.leave("ns/b")
    assert replay.gpus == [8] * 32 and replay.fragmentation() == (0.0, 0.0)


def test_the_kueue_port_follows_kueue() -> None:
    module = bench_cluster()
    state = [5, 9, 3, 9, 4]
    ordered = module.most_first(range(5), state)
    assert ordered == [1, 3, 0, 4, 2]  # capacity, the most first; ties by position
    assert ordered[module.best_fit(ordered, state, 4)] == 4  # the least capacity that still fits
    assert ordered[module.best_fit(ordered, state, 9)] == 1  # the first of equals
    assert ordered[module.best_fit(ordered, state, 20)] == 1  # none fits: the most free
    assert module.to_minimum(ordered, state, 12) == [(1, 9), (2, 3)]  # the most free whole, then the tightest for the rest
    assert module.to_minimum(ordered, state, 40) is None
    cluster = module.ClusterShape(64, 64, 32, 16)
    kueue = module.KueueBestFit(cluster)
    first = kueue.place(module.Gang("ns/a", 8, 8, False))
    assert first is not None and len({cluster.domain(n, 1) for n in first.values()}) == 1
    second = kueue.place(module.Gang("ns/b", 10, 8, False))  # 8 left in the first leaf: another leaf fits
    assert second is not None and cluster.spanned(second.values()) == 1
    assert not set(first.values()) & set(second.values())
