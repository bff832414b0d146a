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
    memo = Memo()
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
    assert len(memo.rows) == 1


def _two_gpus(first: tuple[GpuProcess, ...], second: tuple[GpuProcess, ...], *, lost: bool = False) -> NodeSnapshot:
    limits = GpuLimits(*([0] * 12))
    gpus = tuple(
        GpuSnapshot(index, replace(NA, uuid=f"GPU-{index}"), limits, 1.0, lost and index == 1, None, None, None, None,
                    None, None, None, None, None, (), None, processes)
        for index, processes in enumerate((first, second))
    )
    return NodeSnapshot(1.0, 0.01, True, "", None, 2, gpus)


def test_a_memo_never_changes_what_a_join_returns():
    """Whatever the next snapshot keeps, changes, reorders or loses, a join with the memo of the
    last ones returns what a join without memo returns (rows, their order, the usage, the drops)."""
    a, b, c = (GpuProcess(pid=pid, used_memory_bytes=100 * pid, kind="compute", sm_utilization=0.25) for pid in (1, 2, 3))
    d = GpuProcess(pid=4, used_memory_bytes=50, kind="compute", sm_utilization=0.5)
    facts = {pid: _facts(pid, f"pod-{pid % 2}") for pid in (1, 2, 3, 4)}
    steps = [
        (_two_gpus((a, b), (c, d)), facts),
        (_two_gpus((a, b), (c, d)), facts),  # everything the same
        (_two_gpus((b, a), (c, d)), facts),  # listed in another order
        (_two_gpus((a, replace(b, used_memory_bytes=900)), (c, d)), facts),  # one grew: the order changes
        (_two_gpus((a, b), (c, d)), {**facts, 3: _facts(3, "pod-1")}),  # another owner
        (_two_gpus((a, b), (c, d), lost=True), facts),  # GPU 1 lost
        (_two_gpus((a,), (c, d)), {pid: f for pid, f in facts.items() if pid != 2}),  # one gone
    ]
    memo = Memo()
    for snapshot, known in steps:
        for cap in (1, 10):
            assert join_processes(snapshot, known, cap, memo) == join_processes(snapshot, known, cap)
