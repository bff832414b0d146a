"""parse_cgroup: one table row per real-world path shape, plus property tests (never raises)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtimekit.attribution.cgroup import CgroupIdentity, parse_cgroup

UID = "1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d"
UID_ = UID.replace("-", "_")
STATIC_UID = "5c1e8f3a9b2d4e6f7a8b9c0d1e2f3a4b"  # static pods: the kubelet's 32-hex config hash
CID = "3f4e5d6c7b8a99887766554433221100ffeeddccbbaa00112233445566778899"
NODE = "7d865e959b2466918c9863afca942d0fb89d7c9ac0c99bafc3749504ded97730"

BURSTABLE_SLICE = f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice"
BESTEFFORT_SLICE = f"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice"
GUARANTEED_SLICE = f"/kubepods.slice/kubepods-pod{UID_}.slice"


def v1(path: str, unified: str | None = None) -> str:
    """A cgroup v1 (hybrid) file as a Ubuntu 22.04-era host writes it."""
    controllers = ["hugetlb", "cpuset", "devices", "memory", "pids", "blkio", "freezer",
                   "net_cls,net_prio", "perf_event", "cpu,cpuacct"]
    lines = ["12:rdma:/"] + [f"{11 - i}:{c}:{path}" for i, c in enumerate(controllers)]
    lines += [f"1:name=systemd:{path}", f"0::{unified if unified is not None else path}"]
    return "\n".join(lines) + "\n"


def ident(cid=None, uid=None, runtime=None, qos=None) -> CgroupIdentity:
    return CgroupIdentity(container_id=cid, pod_uid=uid, runtime=runtime, qos=qos)


CASES: list[tuple[str, str, CgroupIdentity]] = [
    # ---- cgroup v2, systemd driver --------------------------------------------------------
    ("v2-systemd-containerd-burstable",
     f"0::{BURSTABLE_SLICE}/cri-containerd-{CID}.scope\n",
     ident(CID, UID, "containerd", "burstable")),
    ("v2-systemd-containerd-besteffort",
     f"0::{BESTEFFORT_SLICE}/cri-containerd-{CID}.scope\n",
     ident(CID, UID, "containerd", "besteffort")),
    ("v2-systemd-containerd-guaranteed",  # Guaranteed pods have no QoS slice
     f"0::{GUARANTEED_SLICE}/cri-containerd-{CID}.scope\n",
     ident(CID, UID, "containerd", "guaranteed")),
    ("v2-systemd-crio",
     f"0::{BURSTABLE_SLICE}/crio-{CID}.scope\n",
     ident(CID, UID, "cri-o", "burstable")),
    ("v2-systemd-crio-conmon",  # CRI-O's monitor: in the pod, not a container
     f"0::{BURSTABLE_SLICE}/crio-conmon-{CID}.scope\n",
     ident(None, UID, "cri-o", "burstable")),
    ("v2-systemd-crio-nested-container-cgroup",  # crun's systemd "container" sub-cgroup
     f"0::{BURSTABLE_SLICE}/crio-{CID}.scope/container\n",
     ident(CID, UID, "cri-o", "burstable")),
    ("v2-systemd-docker",
     f"0::{GUARANTEED_SLICE}/docker-{CID}.scope\n",
     ident(CID, UID, "docker", "guaranteed")),
    ("v2-systemd-pod-level",  # a process in the pod slice itself
     f"0::{BURSTABLE_SLICE}\n",
     ident(None, UID, None, "burstable")),
    ("v2-systemd-static-pod-uid",
     f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{STATIC_UID}.slice/"
     f"cri-containerd-{CID}.scope\n",
     ident(CID, STATIC_UID, "containerd", "burstable")),
    # ---- cgroup v2, cgroupfs driver -------------------------------------------------------
    ("v2-cgroupfs-burstable",
     f"0::/kubepods/burstable/pod{UID}/{CID}\n",
     ident(CID, UID, None, "burstable")),
    ("v2-cgroupfs-guaranteed",
     f"0::/kubepods/pod{UID}/{CID}\n",
     ident(CID, UID, None, "guaranteed")),
    ("v2-cgroupfs-besteffort",
     f"0::/kubepods/besteffort/pod{UID}/{CID}\n",
     ident(CID, UID, None, "besteffort")),
    ("v2-cgroupfs-crio",
     f"0::/kubepods/burstable/pod{UID}/crio-{CID}\n",
     ident(CID, UID, "cri-o", "burstable")),
    ("v2-cgroupfs-crio-conmon",
     f"0::/kubepods/burstable/pod{UID}/crio-conmon-{CID}\n",
     ident(None, UID, "cri-o", "burstable")),
    # ---- cgroup v1 ------------------------------------------------------------------------
    ("v1-systemd-containerd",
     v1(f"{BURSTABLE_SLICE}/cri-containerd-{CID}.scope"),
     ident(CID, UID, "containerd", "burstable")),
    ("v1-cgroupfs-hybrid-unified-points-at-service",  # the 0:: line must not win
     v1(f"/kubepods/besteffort/pod{UID}/{CID}", "/system.slice/containerd.service"),
     ident(CID, UID, None, "besteffort")),
    ("v1-cgroupfs-docker",
     v1(f"/kubepods/pod{UID}/{CID}", "/system.slice/containerd.service"),
     ident(CID, UID, None, "guaranteed")),
    # containerd SystemdCgroup=false under a systemd kubelet: runc's cgroupfs manager makes the
    # relative cgroupsPath "<pod slice>:cri-containerd:<id>" a directory under its own cgroup (v1)
    # or that cgroup's parent (v2)
    ("v1-systemd-literal-cgroupspath",
     v1(f"/system.slice/containerd.service/kubepods-burstable-pod{UID_}.slice:cri-containerd:{CID}",
        "/system.slice/containerd.service"),
     ident(CID, UID, "containerd", "burstable")),
    ("v2-systemd-literal-guaranteed",
     f"0::/system.slice/kubepods-pod{UID_}.slice:cri-containerd:{CID}\n",
     ident(CID, UID, "containerd", "guaranteed")),
    ("systemd-literal-under-expanded-slices",
     f"0::{BESTEFFORT_SLICE}:cri-containerd:{CID}\n",
     ident(CID, UID, "containerd", "besteffort")),
    ("v1-only-name-systemd-carries-kubepods",
     "3:memory:/\n2:cpu,cpuacct:/\n"
     f"1:name=systemd:{BURSTABLE_SLICE}/cri-containerd-{CID}.scope\n",
     ident(CID, UID, "containerd", "burstable")),
    ("v1-best-line-wins-over-pod-only-line",
     f"4:memory:{BURSTABLE_SLICE}\n3:pids:{BURSTABLE_SLICE}/cri-containerd-{CID}.scope\n",
     ident(CID, UID, "containerd", "burstable")),
    # ---- nested: kind, and a node-in-a-container seen from the host ------------------------
    ("kind-inside-node",
     f"0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/"
     f"kubelet-kubepods-burstable-pod{UID_}.slice/cri-containerd-{CID}.scope\n",
     ident(CID, UID, "containerd", "burstable")),
    ("kind-seen-from-host",
     f"0::/system.slice/docker-{NODE}.scope/kubelet.slice/kubelet-kubepods.slice/"
     f"kubelet-kubepods-pod{UID_}.slice/cri-containerd-{CID}.scope\n",
     ident(CID, UID, "containerd", "guaranteed")),
    ("kind-cgroupfs-root",
     f"0::/kubelet/kubepods/besteffort/pod{UID}/{CID}\n",
     ident(CID, UID, None, "besteffort")),
    ("cgroupns-relative-path",  # a reader in a private cgroup namespace sees "/../.."
     f"0::/../../kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/"
     f"cri-containerd-{CID}.scope\n",
     ident(CID, UID, "containerd", "burstable")),
    # ---- containers outside Kubernetes -----------------------------------------------------
    ("docker-run-cgroupfs", v1(f"/docker/{CID}", "/system.slice/containerd.service"),
     ident(CID, None, "docker", None)),
    ("docker-run-systemd", f"0::/system.slice/docker-{CID}.scope\n",
     ident(CID, None, "docker", None)),
    ("kind-node-init", f"0::/system.slice/docker-{NODE}.scope/init.scope\n",
     ident(NODE, None, "docker", None)),
    ("crio-conmon-outside-pod", f"0::/system.slice/crio-conmon-{CID}.scope\n", ident()),
    # ---- not Kubernetes, not a container ---------------------------------------------------
    ("user-session", "0::/user.slice/user-1000.slice/session-4.scope\n", ident()),
    ("sshd", "0::/system.slice/ssh.service\n", ident()),
    ("root", "0::/\n", ident()),
    ("init", "0::/init.scope\n", ident()),
    ("containerd-service", "0::/system.slice/containerd.service\n", ident()),
    ("kubepods-qos-slice-only", "0::/kubepods.slice/kubepods-burstable.slice\n", ident()),
    ("v1-host", v1("/user.slice", "/user.slice/user-1000.slice/session-1.scope"), ident()),
    ("empty", "", ident()),
    # ---- near misses: not our shapes -------------------------------------------------------
    ("short-id", f"0::/kubepods/burstable/pod{UID}/{CID[:63]}\n", ident(None, UID, None, "burstable")),
    ("uppercase-id-not-a-runtime-id", f"0::/kubepods/pod{UID}/{CID.upper()}\n",
     ident(None, UID, None, "guaranteed")),
    ("pod-dir-outside-kubepods", f"0::/user.slice/pod{UID}/{CID}\n", ident(CID, None, None, None)),
    ("no-colons", f"/kubepods/pod{UID}/{CID}\n", ident()),
    ("crlf-line-endings", f"0::/kubepods/pod{UID}/{CID}\r\n", ident(CID, UID, None, "guaranteed")),
]


@pytest.mark.parametrize(("text", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_parse_cgroup(text: str, expected: CgroupIdentity) -> None:
    assert parse_cgroup(text) == expected


def test_case_ids_are_unique() -> None:
    assert len({c[0] for c in CASES}) == len(CASES)


def test_identity_is_frozen_and_hashable() -> None:
    a = parse_cgroup(f"0::/kubepods/pod{UID}/{CID}\n")
    with pytest.raises(AttributeError):
        a.pod_uid = "x"  # type: ignore[misc]
    assert {a, parse_cgroup(f"0::/kubepods/pod{UID}/{CID}\n")} == {a}


def test_v1_choice_does_not_depend_on_line_order() -> None:
    text = v1(f"/kubepods/burstable/pod{UID}/{CID}", "/system.slice/containerd.service")
    lines = text.splitlines()
    assert parse_cgroup("\n".join(reversed(lines))) == parse_cgroup(text)


def test_non_string_input_gives_nothing() -> None:
    assert parse_cgroup(None) == ident()  # type: ignore[arg-type]
    assert parse_cgroup(b"0::/")  == ident()  # type: ignore[arg-type]


# ---- properties ---------------------------------------------------------------------------

_TOKENS = st.sampled_from([
    "kubepods", "kubepods.slice", "kubepods-burstable.slice", f"kubepods-pod{UID_}.slice",
    f"kubepods-besteffort-pod{UID_}.slice", f"pod{UID}", "burstable", "besteffort", CID,
    f"cri-containerd-{CID}.scope", f"crio-{CID}", f"crio-conmon-{CID}.scope",
    f"docker-{CID}.scope", f"kubepods-burstable-pod{UID_}.slice:cri-containerd:{CID}",
    "system.slice", "docker", "..", "", ":", "pod", "pod-", ".slice", ".scope",
])


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_garbage_never_raises(text: str) -> None:
    assert isinstance(parse_cgroup(text), CgroupIdentity)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.text(alphabet="0123456789:=a,", max_size=6),
                          st.lists(_TOKENS | st.text(max_size=12), max_size=8)), max_size=6))
def test_near_miss_structure_never_raises(lines) -> None:
    text = "\n".join(f"{head}:{'/'.join(segs)}" for head, segs in lines)
    result = parse_cgroup(text)
    assert isinstance(result, CgroupIdentity)
    # whatever it says is well-formed
    if result.container_id is not None:
        assert len(result.container_id) == 64
    if result.pod_uid is not None:
        assert "_" not in result.pod_uid
    assert result.runtime in (None, "containerd", "cri-o", "docker")
    assert result.qos in (None, "guaranteed", "burstable", "besteffort")
    assert (result.qos is None) == (result.pod_uid is None)
