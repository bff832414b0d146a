"""read_processes' ``known``: an unchanged process is the same GpuProcess; a changed one is new."""

from runtimekit.gpu.nvml import NvmlSession
from runtimekit.gpu.processes import read_processes
from runtimekit.gpu.reader import NodeReader


def test_unchanged_processes_are_the_same_objects_and_changes_make_new_ones(make_node, clock):
    node = make_node()
    pid = node.add_process(0, 1 << 30)
    session = NvmlSession()
    session.init()
    handle = NodeReader(session)._device(0, clock()).handle
    known: dict = {}
    first, _ = read_processes(session, handle, clock(), known)
    again, _ = read_processes(session, handle, clock(), known)
    assert [p for p in again if p.pid == pid][0] is [p for p in first if p.pid == pid][0]
    node.remove_process(pid)
    node.add_process(0, 2 << 30, pid=pid)
    changed, _ = read_processes(session, handle, clock(), known)
    assert [p.used_memory_bytes for p in changed if p.pid == pid] == [2 << 30]
    assert set(known.values()) == set(changed)
    session.shutdown()
