"""join_processes' memo: a row is reused only for the very same GpuProcess and ProcessFacts."""

from dataclasses import replace

from runtimekit.attribution.join import Memo, join_processes
from runtimekit.attribution.types import Owner, ProcessFacts
from runtimekit.gpu.types import GpuIdentity, GpuLimits, GpuProcess, GpuSnapshot, NodeSnapshot

NA = GpuIdentity(*(["x"] * 8))


def _snapshot(*processes: GpuProcess) -> NodeSnapshot:
    limits = GpuLimits(*([0] * 12))
    gpu = GpuSnapshot(0, replace(NA, uuid="GPU-0"), limits, 1.0, False, None, None, None, None, None, None, None,
                      None, None, (), None, processes)
    return NodeSnapshot(1.0, 0.01, True, "", None, 1, (gpu,))


def _facts(pid: int, pod: str) -> ProcessFacts:
    return ProcessFacts(pid, "python", ("python",), 1.0, 1, Owner(namespace="ns", pod=pod, container="c"))


def test_rows_are_reused_for_the_same_objects_and_rebuilt_for_new_ones():
    memo: Memo = {}
    process = GpuProcess(pid=7, used_memory_bytes=100, kind="compute")
    facts = {7: _facts(7, "a")}
    first, _, _ = join_processes(_snapshot(process), facts, 10, memo)
    again, _, _ = join_processes(_snapshot(process), facts, 10, memo)
    assert again[0] is first[0]
    moved, _, _ = join_processes(_snapshot(process), {7: _facts(7, "b")}, 10, memo)
    assert moved[0] is not first[0] and moved[0].owner.pod == "b"
    grown = replace(process, used_memory_bytes=200)
    bigger, _, _ = join_processes(_snapshot(grown), {7: _facts(7, "b")}, 10, memo)
    assert bigger[0].used_memory_bytes == 200
    assert join_processes(_snapshot(grown), {7: _facts(7, "b")}, 10)[0] == bigger
    assert len(memo) == 1
