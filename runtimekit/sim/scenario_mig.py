"""A scenario GPU's ``mig:`` entry: MIG mode and the GPU and compute instances it starts with.

Checked against the model's geometry with the driver's own placement rules (``mig_profiles``:
the same ``gi_conflict`` / ``pick_gi_start`` the simulated driver applies), so a scenario that
loads is one the driver would have built; a broken entry raises ``ScenarioError`` naming the key.
"""

from __future__ import annotations

from typing import Any

from .mig_profiles import ci_profiles, geometry_for, gi_conflict, pick_ci_start, pick_gi_start
from .scenario_types import GpuModel, MigInstanceSpec, MigSpec, ScenarioError

__all__ = ["parse_mig"]


def parse_mig(path: str, m: dict[str, Any] | None, model: GpuModel) -> MigSpec | None:
    """A GPU's ``mig:`` entry, checked against its model's geometry with the driver's own
    placement rules (``mig_profiles``): profiles, placements, overlaps, compute instances."""
    if m is None:
        return None
    entries = m.get("instances", [])
    if not m["enabled"]:
        if entries:
            raise ScenarioError(f"{path}.instances: instances need enabled: true")
        return MigSpec(False)
    geometry = geometry_for(model.name, model.memory_total_mib) if model.mig_capable else None
    if geometry is None:
        raise ScenarioError(f"{path}.enabled: model {model.key} ({model.name}) has no MIG geometry "
                            "(MIG-capable A100 40/80 GB, H100 80 GB, H200 141 GB only)")
    taken: list[Any] = []
    instances = []
    for i, inst in enumerate(entries):
        ipath = f"{path}.instances[{i}]"
        profile = geometry.by_name(inst["profile"])
        if profile is None:
            names = ", ".join(p.name for p in geometry.profiles)
            raise ScenarioError(f"{ipath}.profile: {inst['profile']!r} is not a MIG profile of {model.name} ({names})")
        start = inst.get("placement")
        if start is None:
            start = pick_gi_start(taken, profile)
            if start is None:
                raise ScenarioError(f"{ipath}.profile: no free placement for {profile.name} after the instances before it")
        conflict = gi_conflict(taken, profile, start)
        if conflict is not None:
            raise ScenarioError(f"{ipath}.placement: {conflict[1]}")
        taken.append((profile, start))
        by_name = {c.name: c for c in ci_profiles(profile)}
        ci_names = tuple(inst.get("compute_instances", [profile.name]))
        cis: list[Any] = []
        for j, name in enumerate(ci_names):
            ci = by_name.get(name)
            if ci is None:
                raise ScenarioError(f"{ipath}.compute_instances[{j}]: {name!r} is not a compute instance profile of "
                                    f"{profile.name} ({', '.join(by_name)})")
            at = pick_ci_start(cis, ci)
            if at is None:
                raise ScenarioError(f"{ipath}.compute_instances[{j}]: no room left for {name} in {profile.name}")
            cis.append((ci, at))
        instances.append(MigInstanceSpec(profile.name, inst.get("placement"), ci_names))
    return MigSpec(True, tuple(instances))
