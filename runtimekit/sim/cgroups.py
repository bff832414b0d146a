"""The text of /proc/PID/cgroup for a simulated process, as kubelet and the runtime lay it out.

``cgroup_line`` writes what a container's process sees for a pod (QoS class, pod UID, container
id) under a runtime (containerd, CRI-O, docker), a cgroup driver (systemd, cgroupfs, or
"systemd-literal": kubelet on systemd, runc on cgroupfs) and a cgroup version (1 hybrid or 2
unified); ``host_cgroup_line`` a host process in a systemd unit. Split from ``procfs`` (which
writes these texts into /proc/PID/cgroup) because it is its own job: cgroup layout, not files.
"""

from __future__ import annotations

__all__ = ["DRIVERS", "QOS_CLASSES", "RUNTIMES", "cgroup_line", "host_cgroup_line"]


_SYSTEMD_PREFIX = {"containerd": "cri-containerd", "cri-o": "crio", "docker": "docker"}
# The service whose cgroup a container's shim inherits in the unified hierarchy of a hybrid
# (v1 + v2) host when runc manages only v1 controllers (cgroupfs driver).
_RUNTIME_SERVICE = {
    "containerd": "/system.slice/containerd.service",
    "cri-o": "/system.slice/crio.service",
    "docker": "/system.slice/containerd.service",  # dockerd's shims run under containerd
}
# cgroup v1 hierarchies of a typical Ubuntu 20.04/22.04-era hybrid host, highest id first.
_V1_CONTROLLERS = (
    "hugetlb",
    "cpuset",
    "devices",
    "memory",
    "pids",
    "blkio",
    "freezer",
    "net_cls,net_prio",
    "perf_event",
    "cpu,cpuacct",
)
DRIVERS = ("systemd", "cgroupfs", "systemd-literal")
QOS_CLASSES = ("guaranteed", "burstable", "besteffort")
RUNTIMES = tuple(_SYSTEMD_PREFIX)


def _kubelet_components(pod_uid: str, qos: str, cgroup_root: str) -> list[str]:
    if qos not in QOS_CLASSES:
        raise ValueError(f"qos must be one of {QOS_CLASSES}, not {qos!r}")
    parts = [p for p in cgroup_root.split("/") if p]
    parts.append("kubepods")
    if qos != "guaranteed":
        parts.append(qos)
    parts.append("pod" + pod_uid)
    return parts


def _systemd_path(components: list[str]) -> str:
    """The kubelet's ToSystemd: escape "-" to "_" and expand into nested slices."""
    escaped = [c.replace("-", "_") for c in components]
    return "".join("/" + "-".join(escaped[: i + 1]) + ".slice" for i in range(len(escaped)))


def _v1_text(path: str, unified: str) -> str:
    n = len(_V1_CONTROLLERS) + 2
    lines = [f"{n}:rdma:/"]
    lines += [f"{n - 1 - i}:{c}:{path}" for i, c in enumerate(_V1_CONTROLLERS)]
    lines += [f"1:name=systemd:{path}", f"0::{unified}"]
    return "\n".join(lines) + "\n"


def cgroup_line(
    pod_uid: str,
    container_id: str | None,
    qos: str,
    runtime: str = "containerd",
    driver: str = "systemd",
    version: int = 2,
    *,
    conmon: bool = False,
    cgroup_root: str = "",
    outer: str = "",
) -> str:
    """The exact ``/proc/PID/cgroup`` text of a process of ``container_id`` in pod ``pod_uid``.

    ``runtime``: "containerd", "cri-o" or "docker". ``driver``: "systemd" (``…pod<uid>.slice/
    cri-containerd-<id>.scope``), "cgroupfs" (``/kubepods/<qos>/pod<uid>/<id>``, ``crio-<id>`` for
    CRI-O) or "systemd-literal" (containerd only: kubelet on systemd, runc on cgroupfs
    (``SystemdCgroup = false``); containerd's ``cgroupsPath`` ``<pod slice>:cri-containerd:<id>``
    is then a relative directory name, which runc's cgroupfs manager puts under its own cgroup
    on v1 (``/system.slice/containerd.service/…``) and under that cgroup's parent on v2
    (``/system.slice/…``)). ``version``: 2 (one ``0::`` line) or 1 (one line
    per v1 hierarchy plus the hybrid ``0::`` line). ``container_id=None``: a process in the pod's
    own cgroup. ``conmon``: CRI-O's container monitor instead of the container. ``cgroup_root``:
    the kubelet's ``--cgroup-root`` (kind: "/kubelet"). ``outer``: a prefix the host sees in front
    of it all (a kind node: "/system.slice/docker-<node id>.scope").
    """
    if runtime not in _SYSTEMD_PREFIX:
        raise ValueError(f"runtime must be one of {RUNTIMES}, not {runtime!r}")
    if driver not in DRIVERS:
        raise ValueError(f"driver must be one of {DRIVERS}, not {driver!r}")
    if version not in (1, 2):
        raise ValueError(f"version must be 1 or 2, not {version!r}")
    if conmon and runtime != "cri-o":
        raise ValueError("conmon is CRI-O's")
    if driver == "systemd-literal" and runtime != "containerd":
        raise ValueError("only containerd writes the literal systemd cgroupsPath")
    components = _kubelet_components(pod_uid, qos, cgroup_root)
    prefix = _SYSTEMD_PREFIX[runtime]
    if driver == "cgroupfs":
        path = "/" + "/".join(components)
        if container_id is not None:
            if conmon:
                path += f"/crio-conmon-{container_id}"
            elif runtime == "cri-o":
                path += f"/crio-{container_id}"
            else:
                path += f"/{container_id}"
    else:
        path = _systemd_path(components)
        if container_id is not None:
            if driver == "systemd-literal":
                service = _RUNTIME_SERVICE[runtime]
                under = service if version == 1 else service.rsplit("/", 1)[0]
                path = f"{under}/{path.rsplit('/', 1)[1]}:{prefix}:{container_id}"
            elif conmon:
                path += f"/crio-conmon-{container_id}.scope"
            else:
                path += f"/{prefix}-{container_id}.scope"
    path = outer.rstrip("/") + path
    if version == 2:
        return f"0::{path}\n"
    unified = path if driver == "systemd" else outer.rstrip("/") + _RUNTIME_SERVICE[runtime]
    return _v1_text(path, unified)


def host_cgroup_line(
    unit: str = "/user.slice/user-1000.slice/session-1.scope", version: int = 2
) -> str:
    """The cgroup text of a process outside Kubernetes, in systemd unit ``unit``."""
    if version == 2:
        return f"0::{unit}\n"
    top = "/" + unit.strip("/").split("/")[0] if unit.strip("/") else "/"
    n = len(_V1_CONTROLLERS) + 2
    lines = [f"{n}:rdma:/"]
    lines += [f"{n - 1 - i}:{c}:{top}" for i, c in enumerate(_V1_CONTROLLERS)]
    lines += [f"1:name=systemd:{unit}", f"0::{unit}"]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------
# the tree
