"""The DRA driver's names: its devices in ResourceSlices, its slices' owners in the agent, its
counter sets. Published names and parsed names are the same functions, so what the scheduler
allocates always maps back to what was published.

Device names are DNS labels (at most 63 characters, lower case, ``[a-z0-9-]``), unique in the pool
(resource.k8s.io/v1 ``Device.name``):

- ``gpu-<index>``: a whole GPU in TDM mode (also what TDM shares are cut from);
- ``gpu-<index>-mig-<profile>-<profile id>-<start>``: one placement of a MIG profile, the profile
  lower-cased with dots removed (``1g.10gb`` -> ``1g10gb``), as NVIDIA's DRA driver names them
  (kubernetes-sigs/dra-driver-nvidia-gpu, ``MigSpecTuple.ToCanonicalName``);
- ``nic-<name>``: an RDMA NIC, its kernel name lower-cased with ``_`` as ``-`` (``mlx5_0`` ->
  ``nic-mlx5-0``).

A slice the driver makes for a claim is owned, in the agent, by the free owner id
``dra:<claim uid>:<n>@<driver>:<checkpoint id>``, ``n`` the position of the device among the
claim's allocation results: the key that makes prepare idempotent across crashes (the driver finds
what it made by owner). The driver's name and its checkpoint's random id (``checkpoint.Checkpoint.id``)
tell one driver's slices from another's on the same agent (another ``driver_name``, another plugin
directory or hostPath), so a driver sweeps only its own. At most 125 characters (4 + 36 + 1 + 3 +
1 + 63 + 1 + 16), within the agent's 128 (slicer/spec.py ``_OWNER_ID``). Slices made before the
suffix existed are owned by ``dra:<claim uid>:<n>``: they are parsed, with no driver.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "OWNER_PREFIX", "DeviceName", "DraOwner", "compact_profile", "counter_set_name", "gpu_device_name",
    "mig_device_name", "nic_device_name", "owner_id", "parse_device_name", "parse_owner_id",
]

OWNER_PREFIX = "dra:"
_GPU = re.compile(r"gpu-(?P<index>0|[1-9][0-9]{0,3})")
_MIG = re.compile(r"gpu-(?P<index>0|[1-9][0-9]{0,3})-mig-(?P<profile>[a-z0-9]+)-(?P<profile_id>0|[1-9][0-9]{0,3})-(?P<start>0|[1-9][0-9]?)")
_NIC = re.compile(r"nic-(?P<name>[a-z0-9](?:[a-z0-9-]{0,58}[a-z0-9])?)")
_OWNER = re.compile(r"dra:(?P<uid>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}):(?P<n>0|[1-9][0-9]{0,2})"
                    r"(?:@(?P<driver>[a-z0-9][a-z0-9.-]{0,62}):(?P<checkpoint>[0-9a-f]{16}))?")


@dataclass(frozen=True, slots=True)
class DeviceName:
    """A published device name, parsed. ``kind`` is "gpu", "mig" or "nic"; ``gpu_index`` is set for
    "gpu" and "mig"; ``profile`` (the name's compact form: "1g10gb"), ``profile_id`` and ``start``
    for "mig"."""

    kind: str
    gpu_index: int | None = None
    profile: str = ""
    profile_id: int | None = None
    start: int | None = None


def compact_profile(profile: str) -> str:
    """A MIG profile's name as device names carry it: lower case, dots removed ("1g.10gb+me" ->
    "1g10gbme"; characters outside ``[a-z0-9]`` are dropped)."""
    return re.sub(r"[^a-z0-9]", "", profile.lower())


def gpu_device_name(index: int) -> str:
    return f"gpu-{index}"


def mig_device_name(index: int, profile: str, profile_id: int, start: int) -> str:
    return f"gpu-{index}-mig-{compact_profile(profile)}-{profile_id}-{start}"


def nic_device_name(nic: str) -> str:
    """``nic-`` and the kernel name lower-cased, ``_`` and other characters outside ``[a-z0-9-]`` as ``-``."""
    return "nic-" + re.sub(r"[^a-z0-9-]", "-", nic.lower()).strip("-")


def counter_set_name(index: int) -> str:
    """The counter set of GPU ``index``'s memory slices (a DNS label)."""
    return f"gpu-{index}-counter-set"


def parse_device_name(name: str) -> DeviceName | None:
    """The device a published name stands for; None when the name is none of ours."""
    if match := _GPU.fullmatch(name):
        return DeviceName("gpu", gpu_index=int(match["index"]))
    if match := _MIG.fullmatch(name):
        return DeviceName("mig", gpu_index=int(match["index"]), profile=match["profile"],
                          profile_id=int(match["profile_id"]), start=int(match["start"]))
    if _NIC.fullmatch(name):
        return DeviceName("nic")
    return None


@dataclass(frozen=True, slots=True)
class DraOwner:
    """A parsed DRA owner id. ``driver`` and ``checkpoint`` are "" in the old form ``dra:<uid>:<n>``,
    which does not say which driver made the slice."""

    uid: str
    position: int
    driver: str = ""
    checkpoint: str = ""


def owner_id(claim_uid: str, position: int, driver: str, checkpoint: str) -> str:
    """The agent owner id of the slice made for the ``position``-th device of claim ``claim_uid`` by
    driver ``driver`` under the checkpoint whose id is ``checkpoint``."""
    return f"{OWNER_PREFIX}{claim_uid}:{position}@{driver}:{checkpoint}"


def parse_owner_id(owner: str) -> DraOwner | None:
    """The claim, position and (new form only) driver and checkpoint of a slice a DRA driver made;
    None for any other owner."""
    match = _OWNER.fullmatch(owner)
    if match is None:
        return None
    return DraOwner(match["uid"], int(match["n"]), match["driver"] or "", match["checkpoint"] or "")
