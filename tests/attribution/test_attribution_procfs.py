"""ProcessReader over the recorded /proc fixture trees, and the static-facts cache."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import psutil
import pytest

from runtimekit.attribution.cgroup import CgroupIdentity
from runtimekit.attribution.procfs import CLOCK_TICKS, PAGE_SIZE, ProcessInfo, ProcessReader, _read_small

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "proc"

# The identities the fixture trees carry (tests/fixtures/proc/README.md).
UID_TRAIN = "6f1c2d3e-4a5b-4c6d-8e7f-9a0b1c2d3e4f"
UID_INFER = "0b7e5c1a-93d2-4f08-a6b1-2c4d6e8f0a1b"
UID_NB = "d41f0e2c-7b6a-4958-8c3d-1e2f3a4b5c6d"
UID_STATIC = "5c1e8f3a9b2d4e6f7a8b9c0d1e2f3a4b"
C_TRAIN = "3f4e5d6c7b8a99887766554433221100ffeeddccbbaa00112233445566778899"
C_SANDBOX = "9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b"
C_INFER = "c0ffee00deadbeef0123456789abcdef0123456789abcdef0123456789abcdef"
C_NB = "1d2c3b4a59687766554433221100aabbccddeeff00112233445566778899aabb"
C_STATIC = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
C_KIND_NODE = "7d865e959b2466918c9863afca942d0fb89d7c9ac0c99bafc3749504ded97730"
C_STANDALONE = "4b227777d4dd1fc61c6f884f48641d02b4d121d3fd328cb08b5531fcacdabf8a"

NONE = CgroupIdentity()

# pid -> (name, cmdline, utime + stime ticks, resident pages), common to the GPU-node trees.
SHIM = ("containerd-shim-runc-v2", None, 51233 + 23110, 3211)  # cmdline differs per runtime
GPU_PROCS = {
    1203: ("pause", ("/pause",), 3 + 7, 128),
    48213: ("python3", ("python3", "-m", "torch.distributed.run", "--nproc_per_node=8", "train.py",
                        "--config", "/etc/train/llama-70b.yaml"), 8812345 + 412301, 4718592),
    48377: ("pt_main_thread", ("/usr/bin/python3", "-u", "train.py", "--local-rank=0"),
            12093411 + 998213, 6291456),
    51002: ("tritonserver", ("tritonserver", "--model-repository=/models", "--http-port=8000",
                             "--grpc-port=8001"), 2231230 + 553120, 3145728),
    52210: ("jupyter-lab", ("/opt/conda/bin/python3.11", "/opt/conda/bin/jupyter-lab",
                            "--ip=0.0.0.0", "--no-browser"), 99812 + 12011, 262144),
}
STANDALONE = ("python", ("python", "bench.py", "--gpus", "all"), 120331 + 9912, 524288)


def _pods(runtime: str | None) -> dict[int, CgroupIdentity]:
    return {
        1203: CgroupIdentity(C_SANDBOX, UID_TRAIN, runtime, "burstable"),
        48213: CgroupIdentity(C_TRAIN, UID_TRAIN, runtime, "burstable"),
        48377: CgroupIdentity(C_TRAIN, UID_TRAIN, runtime, "burstable"),
        51002: CgroupIdentity(C_INFER, UID_INFER, runtime, "guaranteed"),
        52210: CgroupIdentity(C_NB, UID_NB, runtime, "besteffort"),
    }


CONMON = CgroupIdentity(None, UID_TRAIN, "cri-o", "burstable")
KIND_NODE = CgroupIdentity(C_KIND_NODE, None, "docker", None)
DOCKER_RUN = CgroupIdentity(C_STANDALONE, None, "docker", None)

# tree -> pid -> expected cgroup identity
TREES: dict[str, dict[int, CgroupIdentity]] = {
    "containerd-v2-systemd": {1187: NONE, **_pods("containerd")},
    "containerd-v1-systemd": {1187: NONE, **_pods("containerd")},
    "containerd-v1-systemd-literal": {1187: NONE, **_pods("containerd")},
    "containerd-v2-cgroupfs": {1187: NONE, **_pods(None)},
    "containerd-v1-cgroupfs": {1187: NONE, **_pods(None)},
    "crio-v2-systemd": {1187: CONMON, **_pods("cri-o")},
    "crio-v1-cgroupfs": {1187: CONMON, **_pods("cri-o")},
    "docker-v1-cgroupfs": {1187: NONE, **_pods(None), 60123: DOCKER_RUN},
    "docker-v2-systemd": {1187: NONE, **_pods("docker"), 60123: DOCKER_RUN},
    "kind-containerd-v2-systemd": {
        1187: KIND_NODE,  # the shim runs inside the kind node's container
        980: KIND_NODE,
        70411: CgroupIdentity(C_STATIC, UID_STATIC, "containerd", "burstable"),
        **_pods("containerd"),
    },
    "host-process": {1: NONE, 2: NONE, 1012: NONE, 2033: NONE, 40112: NONE},
}

HOST_PROCS = {
    1: ("systemd", ("/sbin/init", "splash"), 4312 + 9921, 3300),
    2: ("kthreadd", (), 41, 0),  # a kernel thread: empty cmdline, no mm
    # sshd rewrites its argv into one NUL-terminated string with spaces; psutil splits it
    1012: ("sshd", ("sshd:", "/usr/sbin/sshd", "-D", "[listener]", "0", "of", "10-100", "startups"),
           12 + 9, 2304),
    # comm is truncated to 15 characters; psutil extends it from argv[0]
    2033: ("nvidia-persistenced", ("/usr/bin/nvidia-persistenced", "--user", "nvidia-persistenced",
                                   "--persistence-mode"), 133 + 4122, 512),
    40112: ("python3", ("python3", "/home/ada/scratch/matmul.py", "--size", "16384"), 51233 + 1203,
            1048576),
}
KIND_EXTRA = {
    980: ("systemd", ("/sbin/init",), 1201 + 2230, 3012),
    70411: ("etcd", ("etcd", "--data-dir=/var/lib/etcd", "--name=kind-control-plane"), 88123 + 41230,
            30123),
}


def expected_facts(tree: str, pid: int) -> tuple[str, tuple[str, ...], int, int]:
    if tree == "host-process":
        return HOST_PROCS[pid]
    if pid in KIND_EXTRA and tree.startswith("kind"):
        return KIND_EXTRA[pid]
    if pid == 60123:
        return STANDALONE
    if pid == 1187:
        cmdline = tuple((FIXTURES / tree / "1187" / "cmdline").read_bytes().rstrip(b"\0").decode().split("\0"))
        name = "conmon" if tree.startswith("crio") else SHIM[0]
        return name, cmdline, SHIM[2], SHIM[3]
    return GPU_PROCS[pid]


CASES = [(tree, pid) for tree, pids in TREES.items() for pid in pids]


@pytest.fixture(autouse=True)
def _restore_procfs_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """psutil.PROCFS_PATH is process-global: put it back after each test."""
    monkeypatch.setattr(psutil, "PROCFS_PATH", psutil.PROCFS_PATH)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A private, writable copy of the containerd-v2-systemd tree."""
    dst = tmp_path / "proc"
    shutil.copytree(FIXTURES / "containerd-v2-systemd", dst)
    return dst


def test_every_tree_is_covered() -> None:
    on_disk = {p.name for p in FIXTURES.iterdir() if p.is_dir()}
    assert on_disk == set(TREES)
    for name, pids in TREES.items():
        assert {int(p.name) for p in (FIXTURES / name).iterdir() if p.name.isdigit()} == set(pids)


@pytest.mark.parametrize(("tree_name", "pid"), CASES, ids=[f"{t}-{p}" for t, p in CASES])
def test_fixture_process(tree_name: str, pid: int) -> None:
    reader = ProcessReader(str(FIXTURES / tree_name))
    info = reader.read(pid)
    name, cmdline, ticks, pages = expected_facts(tree_name, pid)
    assert info == ProcessInfo(
        pid=pid,
        name=name,
        cmdline=cmdline,
        cpu_seconds=ticks / CLOCK_TICKS,
        rss_bytes=pages * PAGE_SIZE,
        cgroup=TREES[tree_name][pid],
    )


@pytest.mark.parametrize("tree_name", sorted(TREES))
def test_fixture_agrees_with_psutil(tree_name: str) -> None:
    """Our stat/statm parse gives what psutil's cpu_times()/memory_info() give."""
    reader = ProcessReader(str(FIXTURES / tree_name))
    for pid in TREES[tree_name]:
        info = reader.read(pid)
        proc = psutil.Process(pid)
        times = proc.cpu_times()
        assert info is not None
        assert info.cpu_seconds == pytest.approx(times.user + times.system)
        assert info.rss_bytes == proc.memory_info().rss
        assert info.name == proc.name()
        assert list(info.cmdline) == proc.cmdline()


def test_read_many_leaves_out_the_missing() -> None:
    reader = ProcessReader(str(FIXTURES / "containerd-v2-systemd"))
    got = reader.read_many([48213, 99999, 51002, 0])
    assert sorted(got) == [48213, 51002]
    assert reader.read(99999) is None


def test_static_facts_are_read_once(tree: Path) -> None:
    reader = ProcessReader(str(tree))
    first = reader.read(48213)
    assert first is not None and reader.cached == 1
    # The static files vanish; CPU time moves on. The cached facts stay, the CPU time follows.
    for f in ("cmdline", "comm", "cgroup", "status"):
        (tree / "48213" / f).unlink()
    stat = (tree / "48213" / "stat").read_text().split(" ")
    stat[13] = str(int(stat[13]) + 500)  # utime
    (tree / "48213" / "stat").write_text(" ".join(stat))
    second = reader.read(48213)
    assert second is not None
    assert (second.name, second.cmdline, second.cgroup) == (first.name, first.cmdline, first.cgroup)
    assert second.cpu_seconds == pytest.approx(first.cpu_seconds + 500 / CLOCK_TICKS)


def test_recycled_pid_is_read_afresh(tree: Path) -> None:
    reader = ProcessReader(str(tree))
    assert reader.read(48213).name == "python3"  # type: ignore[union-attr]
    # Same pid, a new process: a later start time, another command and cgroup.
    stat = (tree / "48213" / "stat").read_text().split(" ")
    stat[1] = "(nvidia-smi)"
    stat[21] = str(int(stat[21]) + 100_000)  # starttime
    (tree / "48213" / "stat").write_text(" ".join(stat))
    (tree / "48213" / "cmdline").write_bytes(b"nvidia-smi\0-q\0")
    (tree / "48213" / "cgroup").write_text("0::/system.slice/nvidia-smi.scope\n")
    info = reader.read(48213)
    assert info is not None
    assert (info.name, info.cmdline, info.cgroup) == ("nvidia-smi", ("nvidia-smi", "-q"), NONE)


def test_without_cache_everything_is_reread(tree: Path) -> None:
    reader = ProcessReader(str(tree), cache_static=False)
    assert reader.read(48213).cmdline[0] == "python3"  # type: ignore[union-attr]
    (tree / "48213" / "cmdline").write_bytes(b"python3.12\0x.py\0")
    assert reader.read(48213).cmdline == ("python3.12", "x.py")  # type: ignore[union-attr]
    assert reader.cached == 0


def test_gone_process_is_forgotten(tree: Path) -> None:
    reader = ProcessReader(str(tree))
    assert reader.read(48213) is not None
    shutil.rmtree(tree / "48213")
    assert reader.read(48213) is None
    assert reader.cached == 0


def test_process_exiting_between_reads_is_gone(tree: Path) -> None:
    """stat still there, cmdline already gone (the kernel tears /proc/PID down as it exits)."""
    reader = ProcessReader(str(tree))
    (tree / "48213" / "cgroup").unlink()
    assert reader.read(48213) is None
    assert reader.cached == 0


def test_zombie_is_none(tree: Path) -> None:
    stat = (tree / "48213" / "stat").read_text().split(" ")
    stat[2] = "Z"
    (tree / "48213" / "stat").write_text(" ".join(stat))
    (tree / "48213" / "cmdline").write_bytes(b"")
    assert ProcessReader(str(tree)).read(48213) is None


def test_access_denied_is_none(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def denied(pid: int) -> psutil.Process:
        raise psutil.AccessDenied(pid)

    monkeypatch.setattr(psutil, "Process", denied)
    assert ProcessReader(str(tree)).read(48213) is None


def test_unparseable_stat_is_none(tree: Path) -> None:
    (tree / "48213" / "stat").write_text("48213 (python3)\n")
    assert ProcessReader(str(tree)).read(48213) is None


def test_cache_is_bounded(tree: Path) -> None:
    reader = ProcessReader(str(tree), max_cached=2)
    reader.read_many([48213, 48377, 51002, 52210])
    assert reader.cached == 2
    reader.forget(52210)
    assert reader.cached == 1


def test_procfs_path_is_checked(tree: Path) -> None:
    reader = ProcessReader(str(tree))
    psutil.PROCFS_PATH = "/proc"
    with pytest.raises(RuntimeError, match="process-global"):
        reader.read(48213)
    with pytest.raises(RuntimeError, match="process-global"):
        reader.read_many([48213])


def test_reads_the_real_proc() -> None:
    reader = ProcessReader()
    me = reader.read(os.getpid())
    assert me is not None
    psutil.PROCFS_PATH = "/proc"
    proc = psutil.Process()
    assert me.name == proc.name()
    assert list(me.cmdline) == proc.cmdline()
    assert me.rss_bytes > 0 and me.cpu_seconds > 0


def _tree_of(n: int, root: Path) -> list[int]:
    """n copies of a training process, as a busy node might have."""
    src = FIXTURES / "containerd-v2-systemd"
    shutil.copy(src / "stat", root / "stat")
    pids = list(range(100_000, 100_000 + n))
    for pid in pids:
        d = root / str(pid)
        shutil.copytree(src / "48377", d)
        stat = (d / "stat").read_text()
        (d / "stat").write_text(f"{pid}{stat[stat.index(' '):]}")
    return pids


def test_after_the_first_read_a_cycle_reads_only_what_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cached path is what every cycle pays: stat and statm only. A process's name, command
    line and cgroup (psutil and /proc/PID/cgroup, the costly part: module doc) are read once, and
    every cycle without the cache. What that costs is bench/scrape.py's to measure, not a test's."""
    root = tmp_path / "proc"
    root.mkdir()
    pids = _tree_of(64, root)
    static_reads: list[int] = []
    original = ProcessReader._read_static

    def counted(self: ProcessReader, pid: int, start_ticks: int) -> object:
        static_reads.append(pid)
        return original(self, pid, start_ticks)

    monkeypatch.setattr(ProcessReader, "_read_static", counted)
    for cache_static, expected in ((True, []), (False, pids)):
        reader = ProcessReader(str(root), cache_static=cache_static)
        assert len(reader.read_many(pids)) == len(pids)
        static_reads.clear()
        assert len(reader.read_many(pids)) == len(pids)
        assert sorted(static_reads) == expected


def test_small_reads_return_whole_files_of_any_length(tmp_path):
    for size in (0, 100, 4095, 4096, 4097, 70_000):
        path = tmp_path / f"f{size}"
        path.write_bytes(bytes(i % 251 for i in range(size)))
        assert _read_small(str(path)) == path.read_bytes()
    with pytest.raises(FileNotFoundError):
        _read_small(str(tmp_path / "gone"))
