"""The driver's own CDI specs: one per claim, for the RDMA NICs it hands over.

GPU shares and MIG slices are named by the agent's CDI specs (``Slice.cdi_device``: the agent wrote
them, they hold the limits); a whole GPU by the node's NVIDIA spec (``nvidia.com/gpu=<uuid>``). A
NIC has no slice, so the driver writes ``<cdi_dir>/runtimekit.io-claim_<claim uid>.json``
(container-device-interface ``GenerateTransientSpecName(vendor, class, uid)``), kind
``runtimekit.io/claim``, one device per NIC named ``<claim uid>-<device name>`` (the claim uid in the
name, as the Go helper advises, so a runtime's cached spec is never taken for another claim's):

- each device's ``containerEdits.deviceNodes``: the NIC's character devices, as the agent lists
  them (``Nic.device_nodes``: ``/dev/infiniband/uverbs0``…), host path = container path;
- the spec's ``containerEdits.env``: ``NCCL_IB_HCA==<names>`` (NCCL's "=" prefix: these exact HCA
  names, docs.nvidia.com/deeplearning/nccl, Environment Variables), applied once when any NIC of
  the spec is given to a container.

Format: CDI SPEC.md, ``cdiVersion`` "0.6.0" (``deviceNodes[].hostPath`` and names starting with a
digit need 0.5.0; the project writes 0.6.0 everywhere). Written atomically (``runtimekit.fileio``),
mode 0644: the container runtime reads it. ``*.json`` only: the temporary file is never read.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtimekit.fileio import sync_dir, write_atomically

__all__ = ["CDI_VERSION", "KIND", "NicDevice", "device_id", "remove_claim_spec", "spec_path", "write_claim_spec"]

CDI_VERSION = "0.6.0"
VENDOR, CDI_CLASS = "runtimekit.io", "claim"
KIND = f"{VENDOR}/{CDI_CLASS}"


@dataclass(frozen=True, slots=True)
class NicDevice:
    """One NIC of a claim: its published device name ("nic-mlx5-0"), kernel name and device nodes."""

    device: str
    nic: str
    device_nodes: tuple[str, ...]


def spec_path(cdi_dir: str | Path, claim_uid: str) -> Path:
    """``<cdi_dir>/runtimekit.io-claim_<uid>.json``."""
    return Path(cdi_dir) / f"{VENDOR}-{CDI_CLASS}_{claim_uid}.json"


def device_id(claim_uid: str, device: str) -> str:
    """The fully qualified CDI name of a claim's NIC: ``runtimekit.io/claim=<uid>-<device>``."""
    return f"{KIND}={claim_uid}-{device}"


def spec_document(claim_uid: str, nics: Sequence[NicDevice]) -> dict[str, Any]:
    return {
        "cdiVersion": CDI_VERSION,
        "kind": KIND,
        "annotations": {"runtimekit.io/claim-uid": claim_uid},
        "devices": [{"name": f"{claim_uid}-{nic.device}",
                     "containerEdits": {"deviceNodes": [{"path": node, "hostPath": node} for node in nic.device_nodes]}}
                    for nic in nics],
        "containerEdits": {"env": ["NCCL_IB_HCA==" + ",".join(nic.nic for nic in nics)]},
    }


def write_claim_spec(cdi_dir: str | Path, claim_uid: str, nics: Sequence[NicDevice]) -> Path:
    """Write the claim's spec (replacing one there); OSError when it cannot be written."""
    path = spec_path(cdi_dir, claim_uid)
    path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    document = spec_document(claim_uid, nics)
    write_atomically(path, (json.dumps(document, indent=2, sort_keys=True) + "\n").encode(), mode=0o644)
    return path


def remove_claim_spec(cdi_dir: str | Path, claim_uid: str) -> bool:
    """Remove the claim's spec and a temporary file a killed writer left; True when the spec was there."""
    path = spec_path(cdi_dir, claim_uid)
    with suppress(FileNotFoundError, NotADirectoryError):
        for leftover in path.parent.glob(f".{path.name}.tmp*"):
            leftover.unlink(missing_ok=True)
    try:
        path.unlink()
    except (FileNotFoundError, NotADirectoryError):
        return False
    sync_dir(path.parent)
    return True
