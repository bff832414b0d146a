"""The simulated driver's MIG state kept in a file, so it outlives the agent's process.

On a real node the driver holds MIG modes and instances: an agent killed with SIGKILL and started
again finds every instance it made, and must reconcile with them. The simulated NVML lives in the
agent's process, so the simulation saves the layout (each GPU's current and pending MIG mode, its
GPU instances with profile and placement, their compute instances and MIG UUIDs) after every change
and restores it at the next start in the same state directory — the same "boot". A simulated
reboot or GPU reset clears instances exactly as the driver does, and that is saved too.

The file is JSON, written atomically (``runtimekit.fileio``), as the simulation's own
state: nothing here is the agent's logic.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from runtimekit.documents import DocumentError, load_json_file
from runtimekit.fileio import write_atomically

from .faults import FaultError
from .mig_profiles import ci_profile
from .node import SimulatedNode
from .node.state import _ComputeInstance, _GpuInstance

__all__ = ["MigLayoutFile"]

MAX_LAYOUT_BYTES = 1 << 20


def layout(node: SimulatedNode) -> dict[str, Any]:
    """Every GPU's MIG mode and instances, as JSON-ready data."""
    gpus = []
    for index in range(node.gpu_count):
        current, pending = node.mig_mode(index)
        gpus.append({
            "index": index,
            "current": current,
            "pending": pending,
            "gpu_instances": [
                {"id": gi.id, "profile_id": gi.profile.id, "start": gi.start,
                 "compute_instances": [{"id": ci.id, "profile_id": ci.profile.id, "start": ci.start, "uuid": ci.uuid}
                                       for _, ci in sorted(gi.cis.items())]}
                for gi in node.gpu_instances(index)
            ],
        })
    return {"gpus": gpus}


def restore(node: SimulatedNode, doc: Any) -> None:
    """Put ``doc`` (from ``layout``) back into ``node``; FaultError when it does not fit the scenario."""
    gpus = doc.get("gpus") if isinstance(doc, dict) else None
    if not isinstance(gpus, list) or len(gpus) != node.gpu_count:
        raise FaultError(f"gpus: the saved layout has {len(gpus) if isinstance(gpus, list) else 'no'} GPUs, "
                         f"the scenario {node.gpu_count}")
    with node._lock:
        for entry, g in zip(gpus, node._gpus, strict=True):
            geometry = node.mig_geometry(g.spec.index)
            g.mig_current, g.mig_pending = bool(entry["current"]), bool(entry["pending"])
            g.gis.clear()
            for gi_doc in entry["gpu_instances"]:
                profile = geometry.by_id(gi_doc["profile_id"]) if geometry is not None else None
                if profile is None:
                    raise FaultError(f"gpus[{g.spec.index}].gpu_instances: profile {gi_doc['profile_id']} is not this model's")
                gi = _GpuInstance(int(gi_doc["id"]), profile, int(gi_doc["start"]))
                for ci_doc in gi_doc["compute_instances"]:
                    ci_prof = ci_profile(profile, ci_doc["profile_id"])
                    if ci_prof is None:
                        raise FaultError(f"gpus[{g.spec.index}].compute_instances: profile {ci_doc['profile_id']} "
                                         f"is not one of {profile.name}")
                    gi.cis[int(ci_doc["id"])] = _ComputeInstance(int(ci_doc["id"]), ci_prof, int(ci_doc["start"]), str(ci_doc["uuid"]))
                g.gis[gi.id] = gi
        node._proc_gen += 1


class MigLayoutFile:
    """The layout file of one simulated node: restored at start when present, saved on every change."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def attach(self, node: SimulatedNode) -> None:
        """Restore the saved layout (if any) into ``node``, then save after each of its MIG changes."""
        if self.path.exists():
            try:
                restore(node, load_json_file(self.path, what="the simulated MIG layout", max_bytes=MAX_LAYOUT_BYTES))
            except (DocumentError, KeyError, TypeError, ValueError) as error:
                raise FaultError(f"{self.path}: not a saved MIG layout ({error})") from None
        node.mig_listener = lambda: self.save(node)
        self.save(node)

    def save(self, node: SimulatedNode) -> None:
        write_atomically(self.path, json.dumps(layout(node)).encode())
