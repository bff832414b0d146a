"""The simulator's /proc tree: cgroup_line round-trips through parse_cgroup, and a tree written by
ProcTreeWriter reads back through ProcessReader (and psutil) as written, atomically."""

from __future__ import annotations

import itertools
import os
import threading
from pathlib import Path

import psutil
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtimekit.attribution.cgroup import CgroupIdentity, parse_cgroup
from runtimekit.attribution.procfs import ProcessReader
from runtimekit.sim.procfs import (
    CLOCK_TICKS,
    PAGE_SIZE,
    ProcTreeWriter,
    cgroup_line,
    host_cgroup_line,
)

BOOT = 1_767_225_600.0
UID = "6f1c2d3e-4a5b-4c6d-8e7f-9a0b1c2d3e4f"
CID = "3f4e5d6c7b8a99887766554433221100ffeeddccbbaa00112233445566778899"
NODE = "7d865e959b2466918c9863afca942d0fb89d7c9ac0c99bafc3749504ded97730"


@pytest.fixture(autouse=True)
def _restore_procfs_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """psutil.PROCFS_PATH is process-global: put it back after each test."""
    monkeypatch.setattr(psutil, "PROCFS_PATH", psutil.PROCFS_PATH)


# ---- cgroup_line ---------------------------------------------------------------------------

COMBOS = [
    (runtime, driver, version, qos, container, conmon, root, outer)
    for runtime, driver, version, qos, container, conmon, root, outer in itertools.product(
        ("containerd", "cri-o", "docker"),
        ("systemd", "cgroupfs", "systemd-literal"),
        (1, 2),
        ("guaranteed", "burstable", "besteffort"),
        (CID, None),
        (False, True),
        ("", "/kubelet"),
        ("", f"/system.slice/docker-{NODE}.scope"),
    )
    if (not conmon or (runtime == "cri-o" and container is not None and driver != "systemd-literal"))
    and (driver != "systemd-literal" or runtime == "containerd")
]


def expected_identity(runtime, driver, qos, container, conmon) -> CgroupIdentity:
    if container is None:
        return CgroupIdentity(None, UID, None, qos)
    if conmon:
        return CgroupIdentity(None, UID, "cri-o", qos)
    told = None if driver == "cgroupfs" and runtime != "cri-o" else runtime
    return CgroupIdentity(container, UID, told, qos)


@pytest.mark.parametrize(
    ("runtime", "driver", "version", "qos", "container", "conmon", "root", "outer"),
    COMBOS,
    ids=["-".join(str(x) if x not in (CID,) else "ctr" for x in c[:6]) + ("-root" if c[6] else "")
         + ("-outer" if c[7] else "") for c in COMBOS],
)
def test_cgroup_line_round_trips(runtime, driver, version, qos, container, conmon, root, outer) -> None:
    text = cgroup_line(UID, container, qos, runtime, driver, version,
                       conmon=conmon, cgroup_root=root, outer=outer)
    assert text.endswith("\n")
    assert len(text.splitlines()) == (1 if version == 2 else 13)
    assert parse_cgroup(text) == expected_identity(runtime, driver, qos, container, conmon)


def test_cgroup_line_shapes() -> None:
    """Spot checks against the shapes in tests/fixtures/proc/README.md."""
    uid_ = UID.replace("-", "_")
    assert cgroup_line(UID, CID, "burstable") == (
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid_}.slice/"
        f"cri-containerd-{CID}.scope\n")
    assert cgroup_line(UID, CID, "guaranteed", "cri-o") == (
        f"0::/kubepods.slice/kubepods-pod{uid_}.slice/crio-{CID}.scope\n")
    assert cgroup_line(UID, CID, "besteffort", "docker", "cgroupfs") == (
        f"0::/kubepods/besteffort/pod{UID}/{CID}\n")
    assert cgroup_line(UID, CID, "guaranteed", driver="systemd-literal") == (
        f"0::/system.slice/kubepods-pod{uid_}.slice:cri-containerd:{CID}\n")
    assert (f"1:name=systemd:/system.slice/containerd.service/kubepods-burstable-pod{uid_}.slice"
            f":cri-containerd:{CID}") in cgroup_line(UID, CID, "burstable", driver="systemd-literal",
                                                     version=1).splitlines()
    assert cgroup_line(UID, CID, "burstable", cgroup_root="/kubelet") == (
        f"0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/"
        f"kubelet-kubepods-burstable-pod{uid_}.slice/cri-containerd-{CID}.scope\n")
    v1 = cgroup_line(UID, CID, "burstable", driver="cgroupfs", version=1).splitlines()
    assert v1[0] == "12:rdma:/"
    assert f"1:name=systemd:/kubepods/burstable/pod{UID}/{CID}" in v1
    assert v1[-1] == "0::/system.slice/containerd.service"  # hybrid: runc left v2 alone


@pytest.mark.parametrize("version", [1, 2])
def test_host_cgroup_line_is_nobody(version: int) -> None:
    assert parse_cgroup(host_cgroup_line(version=version)) == CgroupIdentity()
    assert parse_cgroup(host_cgroup_line("/system.slice/ssh.service", version)) == CgroupIdentity()


@pytest.mark.parametrize(
    "kwargs",
    [dict(runtime="rkt"), dict(driver="systemd-ish"), dict(version=3), dict(qos="gold"),
     dict(conmon=True), dict(runtime="cri-o", driver="systemd-literal")],
)
def test_cgroup_line_rejects_unknown_combinations(kwargs) -> None:
    args = dict(pod_uid=UID, container_id=CID, qos="burstable") | kwargs
    with pytest.raises(ValueError):
        cgroup_line(**args)


# ---- the tree, read back -------------------------------------------------------------------


def expected_name(name: str, cmdline: list[str]) -> str:
    """psutil's rule: comm keeps 15 bytes; a 15-byte comm is extended from argv[0]'s basename."""
    comm = name.encode()[:15].decode(errors="ignore")
    if len(comm) >= 15 and cmdline and os.path.basename(cmdline[0]).startswith(comm):
        return os.path.basename(cmdline[0])
    return comm


PROCESSES = [
    # pid, name, cmdline, cgroup text, cpu seconds, rss bytes, started (s after boot)
    (48213, "python3", ["python3", "-m", "torch.distributed.run", "train.py"],
     cgroup_line(UID, CID, "burstable"), 88123.45, 18 << 30, 3125.3),
    (51002, "tritonserver", ["tritonserver", "--model-repository=/models"],
     cgroup_line(UID, CID, "guaranteed", "cri-o", "cgroupfs", 1), 22312.3, 12 << 30, 4201.13),
    (52210, "pt_data_worker", ["/usr/bin/python3", "-c", "from multiprocessing.spawn import x"],
     cgroup_line(UID, CID, "besteffort", "docker", "systemd", 1), 0.0, PAGE_SIZE, 5011.2),
    (60123, "nvidia-persistenced", ["/usr/bin/nvidia-persistenced", "--persistence-mode"],
     host_cgroup_line("/system.slice/nvidia-persistenced.service"), 41.22, 2 << 20, 28.11),
    (70411, "weird ) name", ["weird", "arg with\ttab"], cgroup_line(UID, None, "burstable"), 1.0,
     7 * PAGE_SIZE + 123, 9.0),
]


@pytest.fixture
def writer(tmp_path: Path) -> ProcTreeWriter:
    w = ProcTreeWriter(tmp_path / "proc", BOOT)
    for pid, name, cmdline, cg, cpu, rss, started in PROCESSES:
        w.write_process(pid, name, cmdline, cg, cpu, rss, BOOT + started)
    return w


def test_written_tree_reads_back(writer: ProcTreeWriter) -> None:
    reader = ProcessReader(str(writer.root))
    got = reader.read_many(p[0] for p in PROCESSES)
    assert sorted(got) == sorted(p[0] for p in PROCESSES)
    for pid, name, cmdline, cg, cpu, rss, _ in PROCESSES:
        info = got[pid]
        assert info.name == expected_name(name, cmdline)
        assert info.cmdline == tuple(cmdline)
        assert info.cpu_seconds == pytest.approx(cpu, abs=0.5 / CLOCK_TICKS)
        assert info.rss_bytes == rss // PAGE_SIZE * PAGE_SIZE
        assert info.cgroup == parse_cgroup(cg)


def test_psutil_reads_the_tree_too(writer: ProcTreeWriter) -> None:
    """Everything psutil needs for the calls the agent (and nvitop) make is there."""
    psutil.PROCFS_PATH = str(writer.root)
    assert psutil.boot_time() == BOOT
    assert sorted(psutil.pids()) == writer.pids()
    for pid, name, cmdline, _, cpu, rss, started in PROCESSES:
        proc = psutil.Process(pid)
        with proc.oneshot():
            assert proc.name() == expected_name(name, cmdline)
            assert proc.cmdline() == cmdline
            assert proc.create_time() == pytest.approx(BOOT + started, abs=0.5 / CLOCK_TICKS)
            times = proc.cpu_times()
            assert times.user + times.system == pytest.approx(cpu, abs=0.5 / CLOCK_TICKS)
            assert proc.memory_info().rss == rss // PAGE_SIZE * PAGE_SIZE
            assert proc.ppid() == 1
            assert proc.status() == psutil.STATUS_SLEEPING
            assert proc.num_threads() == 1
            assert proc.uids().real == 0


def test_update_rewrites_the_changing_facts(writer: ProcTreeWriter) -> None:
    reader = ProcessReader(str(writer.root))
    before = reader.read(48213)
    stat_before = (writer.root / "48213" / "statm").stat().st_ino
    writer.update_process(48213, cpu_seconds=90000.0)
    assert (writer.root / "48213" / "statm").stat().st_ino == stat_before  # untouched
    after = reader.read(48213)
    assert after is not None and before is not None
    assert after.cpu_seconds == pytest.approx(90000.0)
    assert after.rss_bytes == before.rss_bytes
    writer.update_process(48213, rss_bytes=20 << 30)
    assert reader.read(48213).rss_bytes == 20 << 30  # type: ignore[union-attr]
    status = (writer.root / "48213" / "status").read_text()
    assert f"VmRSS:\t{(20 << 30) // 1024:8d} kB" in status
    writer.update_process(48213)  # nothing changed: nothing written
    with pytest.raises(KeyError):
        writer.update_process(99999, cpu_seconds=1.0)


def test_remove_process(writer: ProcTreeWriter) -> None:
    reader = ProcessReader(str(writer.root))
    assert reader.read(51002) is not None
    writer.remove_process(51002)
    writer.remove_process(51002)  # twice is fine
    assert reader.read(51002) is None
    assert 51002 not in writer.pids()
    assert not [p for p in os.listdir(writer.root) if p.startswith(".")]


def test_rewriting_a_pid_is_a_new_process(writer: ProcTreeWriter) -> None:
    reader = ProcessReader(str(writer.root))
    assert reader.read(48213).name == "python3"  # type: ignore[union-attr]
    writer.write_process(48213, "nvidia-smi", ["nvidia-smi"], host_cgroup_line(), 0.02, 1 << 20,
                         BOOT + 9000)
    info = reader.read(48213)
    assert info is not None
    assert (info.name, info.cmdline, info.cgroup) == ("nvidia-smi", ("nvidia-smi",), CgroupIdentity())


def test_writer_rejects_nonsense(tmp_path: Path) -> None:
    w = ProcTreeWriter(tmp_path / "proc", BOOT)
    with pytest.raises(ValueError):
        w.write_process(5, "x", ["x"], host_cgroup_line(), 1.0, 1, BOOT - 10)
    with pytest.raises(ValueError):
        w.write_process(0, "x", ["x"], host_cgroup_line(), 1.0, 1, BOOT)


def test_boot_time_is_whole_seconds(tmp_path: Path) -> None:
    w = ProcTreeWriter(tmp_path / "proc", BOOT + 0.75)
    assert f"btime {int(BOOT)}\n" in (w.root / "stat").read_text()


def test_readers_never_see_half_a_process(tmp_path: Path) -> None:
    """A reader racing the writer sees a process whole or not at all, and CPU time only grows."""
    w = ProcTreeWriter(tmp_path / "proc", BOOT)
    reader = ProcessReader(str(w.root))
    cg = cgroup_line(UID, CID, "burstable")
    stop = threading.Event()
    seen: list[float] = []
    errors: list[BaseException] = []

    def read_loop() -> None:
        try:
            while not stop.is_set():
                for pid in (100, 101):
                    info = reader.read(pid)
                    if info is None:
                        continue
                    facts = (info.name, info.cmdline, info.cgroup.container_id)
                    if pid == 100:
                        assert facts == ("python3", ("python3", "train.py"), CID)
                        seen.append(info.cpu_seconds)
                    else:  # pid 101 is recycled between two processes: never a mix of them
                        assert facts in (("python3", ("python3", "train.py"), CID),
                                         ("nvidia-smi", ("nvidia-smi", "-q"), None))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    w.write_process(100, "python3", ["python3", "train.py"], cg, 0.0, 1 << 20, BOOT + 1)
    thread = threading.Thread(target=read_loop)
    thread.start()
    try:
        for i in range(1, 400):
            w.update_process(100, cpu_seconds=i, rss_bytes=(1 << 20) + i * PAGE_SIZE)
            if i % 3 == 0:
                w.remove_process(101)
            elif i % 3 == 1:
                w.write_process(101, "python3", ["python3", "train.py"], cg, 1.0, 1 << 20, BOOT + i)
            else:
                w.write_process(101, "nvidia-smi", ["nvidia-smi", "-q"], host_cgroup_line(), 0.1,
                                1 << 20, BOOT + i)
    finally:
        stop.set()
        thread.join()
    assert not errors, errors[0]
    assert seen and seen == sorted(seen)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    name=st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E) | st.just(" "),
                 min_size=1, max_size=24),
    cmdline=st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs", "Zs", "Cc")),
                             min_size=1, max_size=16), max_size=5),
    cpu=st.floats(min_value=0, max_value=1e7, allow_nan=False),
    rss=st.integers(min_value=0, max_value=1 << 44),
    started=st.floats(min_value=0, max_value=1e7, allow_nan=False),
)
def test_any_process_round_trips(tmp_path_factory, name, cmdline, cpu, rss, started) -> None:
    w = ProcTreeWriter(tmp_path_factory.mktemp("proc"), BOOT)
    w.write_process(4242, name, cmdline, cgroup_line(UID, CID, "besteffort"), cpu, rss,
                    BOOT + started)
    info = ProcessReader(str(w.root)).read(4242)
    assert info is not None
    assert info.name == expected_name(name, cmdline)
    assert info.cmdline == tuple(cmdline)
    assert info.cpu_seconds == pytest.approx(round(cpu * CLOCK_TICKS) / CLOCK_TICKS)
    assert info.rss_bytes == rss // PAGE_SIZE * PAGE_SIZE
    assert info.cgroup == CgroupIdentity(CID, UID, "containerd", "besteffort")
