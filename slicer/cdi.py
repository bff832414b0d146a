"""CDI specifications of slices: the JSON a container runtime (containerd, CRI-O, podman) reads to
inject a slice by its name ``{vendor}/slice={id}``.

Format: the Container Device Interface spec (github.com/cncf-tags/container-device-interface,
SPEC.md): ``cdiVersion`` (we write "0.6.0": the first with ``annotations``; fields used here need at
most that, and a runtime reads every version up to its own), ``kind`` "vendor/class", one device
named by the slice id, whose ``containerEdits.env`` the runtime appends to the container's
environment. One file per slice, ``{cdi_dir}/{vendor with dots as underscores}-slice-{id}.json``;
the CDI cache reads ``*.json`` and ``*.yaml`` only, so the temporary file (``.*.tmp``) is never
read half-written. Written atomically: tmp file, fsync, rename, fsync of the folder; mode 0644.

What a TDM slice hands over (its limits in the forms the CUDA-intercepting layers read; facts in
../shared/reference/slicing.md §1-2):

- ``CUDA_VISIBLE_DEVICES`` / ``NVIDIA_VISIBLE_DEVICES``: the GPU's UUID (CUDA accepts UUIDs; the
  NVIDIA container runtime reads NVIDIA_VISIBLE_DEVICES). The container sees the card as device 0.
- ``CUDA_DEVICE_MEMORY_LIMIT=<MiB>m``: HAMi-core's memory cap (suffix g/m/k; HAMi-core
  src/multiprocess/multiprocess_memory_limit.c).
- ``CUDA_DEVICE_SM_LIMIT=<percent>``: HAMi-core's SM share (0 or absent = unlimited: omitted then).
- ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=<percent>``: MPS's client-side SM share (it can only tighten
  the daemon's limit; docs.nvidia.com/deploy/mps, "Environment Variables"); omitted when unlimited.
- ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=<MiB>M``: MPS's per-device memory cap, "<device
  ordinal>=<limit>" as the client numbers devices: 0, the one device CUDA_VISIBLE_DEVICES leaves.

A MIG slice's spec names its MIG device (``MIG-…`` UUID) in the same two variables; the instance
itself is the isolation, so no limits are written.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from runtimekit.fileio import sync_dir, write_atomically
from runtimekit.state.slices import SLICE_ID

CDI_VERSION = "0.6.0"
CDI_CLASS = "slice"
FILE_MODE = 0o644


def kind(vendor: str) -> str:
    """The CDI kind of slices: ``{vendor}/slice``."""
    return f"{vendor}/{CDI_CLASS}"


def device_name(vendor: str, slice_id: str) -> str:
    """The fully qualified CDI name a runtime injects a slice by: ``{vendor}/slice={id}``."""
    return f"{kind(vendor)}={slice_id}"


def _prefix(vendor: str) -> str:
    return f"{vendor.replace('.', '_')}-{CDI_CLASS}-"


def spec_path(cdi_dir: str | Path, vendor: str, slice_id: str) -> Path:
    """Where the CDI spec of a slice lives."""
    return Path(cdi_dir) / f"{_prefix(vendor)}{slice_id}.json"


def tdm_env(gpu_uuid: str, memory_mib: int, compute: int) -> list[str]:
    """The environment a TDM slice's container gets (memory in MiB, compute in percent, 0 = unlimited)."""
    env = [
        f"CUDA_VISIBLE_DEVICES={gpu_uuid}",
        f"NVIDIA_VISIBLE_DEVICES={gpu_uuid}",
        f"CUDA_DEVICE_MEMORY_LIMIT={memory_mib}m",
        f"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0={memory_mib}M",
    ]
    if compute:
        env += [f"CUDA_DEVICE_SM_LIMIT={compute}", f"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE={compute}"]
    return env


def mig_env(mig_uuid: str) -> list[str]:
    """The environment a MIG slice's container gets: its MIG device only."""
    return [f"CUDA_VISIBLE_DEVICES={mig_uuid}", f"NVIDIA_VISIBLE_DEVICES={mig_uuid}"]


def spec_document(vendor: str, slice_id: str, env: list[str], annotations: dict[str, str]) -> dict[str, Any]:
    """The CDI spec (a JSON object) of one slice."""
    return {
        "cdiVersion": CDI_VERSION,
        "kind": kind(vendor),
        "devices": [{"name": slice_id, "annotations": annotations, "containerEdits": {"env": env}}],
    }


def write_spec(path: Path, document: dict[str, Any]) -> None:
    """Write ``document`` to ``path`` atomically (``runtimekit.fileio``), mode 0644. The folder is
    created when missing. OSError when it cannot be written."""
    path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    write_atomically(path, (json.dumps(document, indent=2, sort_keys=True) + "\n").encode(), mode=FILE_MODE)


def remove_spec(path: Path) -> bool:
    """Remove a spec (and a temporary file left beside it); True when the spec was there (not
    when it is missing, nor when its folder is not a folder)."""
    try:
        for leftover in path.parent.glob(f".{path.name}.tmp*"):  # a writer killed mid-write
            leftover.unlink(missing_ok=True)
        path.unlink()
    except (FileNotFoundError, NotADirectoryError):
        return False
    sync_dir(path.parent)
    return True


def slice_specs(cdi_dir: str | Path, vendor: str) -> dict[str, Path]:
    """slice id -> path of every slice spec of this vendor in ``cdi_dir`` (other files are not ours)."""
    folder = Path(cdi_dir)
    prefix = _prefix(vendor)
    found: dict[str, Path] = {}
    if not folder.is_dir():
        return found
    for entry in folder.iterdir():
        name = entry.name
        if name.startswith(prefix) and name.endswith(".json") and SLICE_ID.fullmatch(name[len(prefix):-5]):
            found[name[len(prefix):-5]] = entry
    return found
