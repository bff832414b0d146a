"""Parse ``/proc/PID/cgroup`` into the container and pod a process belongs to.

A pure function over the file's text: no I/O, no globals, never raises. The path shapes it reads
are the ones the node software writes (see ``tests/fixtures/proc/README.md`` for the upstream
sources of each):

- the kubelet names a pod's cgroup ``pod<UID>`` under ``kubepods[/<qos>]`` (cgroupfs driver), or,
  with the systemd driver, ``kubepods[-<qos>]-pod<UID with "-" escaped to "_">.slice`` expanded
  into nested slices (``/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod….slice``);
  Guaranteed pods have no QoS level in the path. A kubelet ``--cgroup-root`` (kind uses
  ``/kubelet``) prefixes every name (``kubelet-kubepods-….slice``).
- the runtime names the container's cgroup below the pod: containerd ``cri-containerd-<id>.scope``
  (systemd) or ``<id>`` (cgroupfs); CRI-O ``crio-<id>.scope`` / ``crio-<id>``, and its monitor
  ``crio-conmon-<id>[.scope]`` (not a container); Docker (cri-dockerd) ``docker-<id>.scope`` or
  ``<id>``. containerd with a systemd-style parent but runc's cgroupfs manager leaves the
  systemd ``cgroupsPath`` literally in the tree, under the runtime's own cgroup:
  ``/system.slice/containerd.service/kubepods-…-pod<UID>.slice:cri-containerd:<id>``.
- a node inside a container (kind) or a host seen without a cgroup namespace adds an outer prefix
  (``/system.slice/docker-<node>.scope/kubelet.slice/…``); the innermost pod and container win.

cgroup v2 files hold one ``0::<path>`` line; v1 files hold one ``N:controllers:<path>`` line per
hierarchy (``name=systemd`` included), and hybrid hosts add a ``0::`` line that may still point at
the runtime's service. The line that says the most wins (pod and container, then pod, then
container), ties going to the first such line in file order, so the choice does not depend on
which controllers a host mounts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["CgroupIdentity", "parse_cgroup", "QOS_CLASSES", "RUNTIMES"]

QOS_CLASSES = ("guaranteed", "burstable", "besteffort")
RUNTIMES = ("containerd", "cri-o", "docker")


@dataclass(frozen=True, slots=True)
class CgroupIdentity:
    """Who a process belongs to, as its cgroup path tells it.

    ``container_id``: the runtime's 64-hex container id (the CRI ``ContainerStatus.id``), or None.
    ``pod_uid``: the pod UID with dashes (``1a2b3c4d-…``) as the API server shows it; static pods'
    32-hex config-hash UIDs are returned as they are. None outside a pod.
    ``runtime``: "containerd", "cri-o" or "docker" when the path names it; None when it cannot be
    told (the cgroupfs driver writes a bare id for containerd and Docker alike).
    ``qos``: "guaranteed", "burstable" or "besteffort" for a pod, else None.
    """

    container_id: str | None = None
    pod_uid: str | None = None
    runtime: str | None = None
    qos: str | None = None


NONE = CgroupIdentity()

_HEX64 = r"[0-9a-f]{64}"
# A pod UID: a UUID (dashes in cgroupfs, underscores after systemd escaping) or, for static pods,
# the 32-hex hash the kubelet derives from the manifest.
_UID = r"(?:[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}|[0-9a-f]{32})"

# systemd driver: "[<root>-]kubepods[-burstable|-besteffort]-pod<uid>.slice"; the cgroup-root
# prefix (kind's "kubelet-") is any dash-terminated run before "kubepods".
_POD_SLICE = re.compile(rf"(?:^|-)kubepods(?:-(burstable|besteffort))?-pod({_UID})\.slice$")
# cgroupfs driver: "pod<uid>", its QoS (if any) being the parent segment.
_POD_DIR = re.compile(rf"pod({_UID})$")
# containerd's systemd cgroupsPath written literally by a cgroupfs runc: "<slice>:<prefix>:<id>".
_COLON = re.compile(
    rf"(?:^|-)kubepods(?:-(burstable|besteffort))?-pod({_UID})\.slice:(cri-containerd|crio|docker):({_HEX64})$"
)
# Container segments, most specific first. Group 1: the id.
_CONTAINER_SEGMENTS: tuple[tuple[re.Pattern[str], str | None], ...] = (
    (re.compile(rf"cri-containerd-({_HEX64})\.scope$"), "containerd"),
    (re.compile(rf"crio-({_HEX64})(?:\.scope)?$"), "cri-o"),
    (re.compile(rf"docker-({_HEX64})\.scope$"), "docker"),
    (re.compile(rf"({_HEX64})$"), None),
)
_CONMON = re.compile(rf"crio-conmon-{_HEX64}(?:\.scope)?$")
_COLON_RUNTIME = {"cri-containerd": "containerd", "crio": "cri-o", "docker": "docker"}


def _uid(raw: str) -> str:
    return raw.replace("_", "-")


def _container(segment: str) -> tuple[str, str | None] | None:
    """(id, runtime) when ``segment`` is a container's cgroup, else None."""
    for pattern, runtime in _CONTAINER_SEGMENTS:
        m = pattern.fullmatch(segment)
        if m:
            return m.group(1), runtime
    return None


def parse_path(path: str) -> CgroupIdentity:
    """The identity one cgroup path (``/kubepods.slice/…``) names; never raises."""
    segments = [s for s in path.strip().split("/") if s]
    pod_at = -1
    pod_uid = qos = None
    colon: tuple[str, str] | None = None
    for i, seg in enumerate(segments):
        m = _COLON.search(seg)
        if m:  # pod and container in one literal segment
            pod_at, pod_uid, qos = i, _uid(m.group(2)), m.group(1) or "guaranteed"
            colon = (m.group(4), _COLON_RUNTIME[m.group(3)])
            continue
        m = _POD_SLICE.search(seg)
        if m:
            pod_at, pod_uid, qos = i, _uid(m.group(2)), m.group(1) or "guaranteed"
            colon = None
            continue
        m = _POD_DIR.fullmatch(seg)
        if m and i > 0 and (segments[i - 1] in ("burstable", "besteffort")
                            or segments[i - 1].endswith("kubepods")):
            parent = segments[i - 1]
            pod_at, pod_uid = i, _uid(m.group(1))
            qos = parent if parent in ("burstable", "besteffort") else "guaranteed"
            colon = None

    if pod_at >= 0:
        if colon is not None:
            return CgroupIdentity(colon[0], pod_uid, colon[1], qos)
        # The container is the pod's child; deeper segments are cgroups the container made itself.
        if pod_at + 1 < len(segments):
            child = segments[pod_at + 1]
            found = _container(child)
            if found:
                return CgroupIdentity(found[0], pod_uid, found[1], qos)
            if _CONMON.fullmatch(child):
                return CgroupIdentity(None, pod_uid, "cri-o", qos)
        return CgroupIdentity(None, pod_uid, None, qos)

    # Not in a pod: a plain container (docker run, a kind node) is still worth naming; the
    # innermost one wins. "/docker/<id>" is Docker's own cgroupfs parent.
    for i in range(len(segments) - 1, -1, -1):
        seg = segments[i]
        if _CONMON.fullmatch(seg):
            return NONE
        found = _container(seg)
        if found:
            runtime = found[1]
            if runtime is None and i > 0 and segments[i - 1] == "docker":
                runtime = "docker"
            return CgroupIdentity(found[0], None, runtime, None)
    return NONE


def _score(identity: CgroupIdentity) -> int:
    return (2 if identity.pod_uid else 0) + (1 if identity.container_id else 0)


def parse_cgroup(text: str) -> CgroupIdentity:
    """Parse the text of ``/proc/PID/cgroup`` (v1, v2 or hybrid); never raises.

    Non-Kubernetes processes (``/user.slice/…``, ``/system.slice/sshd.service``, ``/``) and
    unparseable text give ``CgroupIdentity()`` (all None).
    """
    if not isinstance(text, str):
        return NONE
    best, best_score = NONE, 0
    for line in text.splitlines():
        parts = line.split(":", 2)  # the path itself may contain ":" (containerd's literal form)
        if len(parts) != 3:
            continue
        identity = parse_path(parts[2])
        score = _score(identity)
        if score > best_score:
            best, best_score = identity, score
            if score == 3:
                break
    return best
