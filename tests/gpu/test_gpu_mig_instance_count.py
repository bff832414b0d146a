"""Each GPU instance profile's instance limit (NVML ``nvmlGpuInstanceProfileInfo_t.instanceCount``)
as MigControl.profiles reads it from the simulated driver, checked against the reference's table
(../shared/reference/slicing.md §3, "max inst"; the same on A100-80, H100-80 and H200-141), through
the v2 profile info and the v1 fallback alike."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from runtimekit import sim
from runtimekit.gpu.mig import MigControl, MigProfile
from runtimekit.gpu.nvml import NvmlSession

# profile id -> max instances per GPU (slicing.md §3: 1g, 1g+me, 1g two memory slices, 2g, 3g, 4g, 7g)
MAX_INSTANCES = {19: 7, 20: 1, 15: 4, 14: 3, 9: 2, 5: 1, 0: 1}


def profiles_in_mig_mode(node: sim.SimulatedNode, gpu: int) -> tuple[MigProfile, ...]:
    session = NvmlSession()
    session.init()
    try:
        control = MigControl(session)
        control.set_mode(gpu, True)
        node.reset_gpu(gpu)
        return control.profiles(gpu)
    finally:
        session.shutdown()


@pytest.mark.parametrize(("scenario", "gpu", "media"), [
    ("dgx-a100", 3, "1g.10gb+me"),
    ("dgx-h100", 0, "1g.10gb+me"),
    ("hgx-h200", 0, "1g.18gb+me"),
])
def test_instance_counts_are_the_drivers(make_node: Callable[..., sim.SimulatedNode], scenario: str, gpu: int,
                                         media: str) -> None:
    profiles = profiles_in_mig_mode(make_node(scenario), gpu)
    assert {p.id: p.instance_count for p in profiles} == MAX_INSTANCES
    by_name = {p.name: p for p in profiles}
    assert by_name[media].instance_count == 1 and len(by_name[media].placements) == 7  # 7 starts, one instance


def test_the_v1_profile_info_carries_the_instance_count_too(make_node: Callable[..., sim.SimulatedNode],
                                                            patch_lib: Callable[..., Any]) -> None:
    node = make_node("dgx-a100")
    patch_lib(hide=["nvmlDeviceGetGpuInstanceProfileInfoV"])
    assert {p.id: p.instance_count for p in profiles_in_mig_mode(node, 3)} == MAX_INSTANCES


def test_a_profile_made_by_hand_has_no_limit_but_its_placements() -> None:
    assert MigProfile(19, "1g.10gb", 1, 1, 9856, (0, 1)).instance_count is None
