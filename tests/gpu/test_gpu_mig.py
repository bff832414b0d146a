"""MigControl (runtimekit.gpu.mig) against the simulated driver: profiles discovered from NVML,
GPU and compute instances created at a placement and destroyed, NVML's refusals as MigOpError
kinds, the mode pending until a GPU reset."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from runtimekit import sim
from runtimekit.gpu.mig import ComputeInstanceInfo, GpuInstanceInfo, MigControl, MigOpError, MigProfile, profile_name
from runtimekit.gpu.nvml import GpuLostError, NvmlSession

GPU = 3  # a dgx-a100 card (A100-SXM4-80GB) that starts with MIG off


@pytest.fixture
def a100(make_node: Callable[..., sim.SimulatedNode]) -> sim.SimulatedNode:
    return make_node("dgx-a100")


@pytest.fixture
def control(a100: sim.SimulatedNode) -> Iterator[MigControl]:
    session = NvmlSession()
    session.init()
    yield MigControl(session)
    session.shutdown()


@pytest.fixture
def mig(a100: sim.SimulatedNode, control: MigControl) -> MigControl:
    """``control`` with GPU ``GPU`` in MIG mode (set, then reset) and no instance."""
    control.set_mode(GPU, True)
    a100.reset_gpu(GPU)
    return control


def kind_of(call: Callable[[], Any]) -> str:
    with pytest.raises(MigOpError) as caught:
        call()
    return caught.value.kind


def test_profiles_are_the_drivers_for_an_a100_80gb(a100: sim.SimulatedNode, mig: MigControl) -> None:
    geometry = a100.mig_geometry(GPU)
    assert geometry is not None and geometry.key == "a100-80gb"
    by_enum = sorted(geometry.profiles, key=lambda p: p.enum)  # the walk goes through the enum in order
    expected = tuple(MigProfile(p.id, p.name, p.compute_slices, p.memory_slices, p.memory_mib, p.starts, p.instance_count)
                     for p in by_enum)
    assert mig.profiles(GPU) == expected
    # enum 5, 6 and 8 are NOT_SUPPORTED on an A100: skipped, and 9 (1g.20gb, id 15) still found after them
    assert [p.name for p in expected][-1] == "1g.20gb" and expected[-1].id == 15
    assert {p.name: p.placements for p in expected}["3g.40gb"] == (0, 4)


def test_no_profiles_while_mig_is_off(control: MigControl) -> None:
    assert control.profiles(GPU) == ()


def test_the_profile_walk_stops_at_invalid_argument(mig: MigControl, patch_lib: Callable[..., Any]) -> None:
    lib = patch_lib(count=["nvmlDeviceGetGpuInstanceProfileInfoV"])
    mig.profiles(GPU)
    assert lib.calls["nvmlDeviceGetGpuInstanceProfileInfoV"] == pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT + 1


def test_a_driver_without_the_v2_profile_info_gets_derived_names(mig: MigControl, patch_lib: Callable[..., Any]) -> None:
    named = mig.profiles(GPU)
    patch_lib(hide=["nvmlDeviceGetGpuInstanceProfileInfoV", "nvmlGpuInstanceGetComputeInstanceProfileInfoV"])
    fresh = MigControl(mig.session)
    assert fresh.profiles(GPU) == named  # v1 has no name: derived as mig-parted does, the same names
    gi = fresh.create_gpu_instance(GPU, 14, 2)
    assert fresh.create_compute_instance(GPU, gi.id).profile_id == pynvml.NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE
    assert [len(g.compute_instances) for g in fresh.instances(GPU)] == [1]


def test_profile_names_drop_nvmls_prefix_or_are_derived_as_mig_parted_does() -> None:
    card = 81920 << 20  # A100-SXM4-80GB, bytes
    named = SimpleNamespace(name=b"MIG 3g.40gb", sliceCount=3, memorySizeMB=40192)
    assert profile_name(2, named, card) == "3g.40gb"
    assert profile_name(0x0, SimpleNamespace(name=b"", sliceCount=1, memorySizeMB=9856), card) == "1g.10gb"
    assert profile_name(0x7, SimpleNamespace(name=b"", sliceCount=1, memorySizeMB=9856), card) == "1g.10gb+me"
    assert profile_name(0x9, SimpleNamespace(name=b"", sliceCount=1, memorySizeMB=19968), card) == "1g.20gb"
    assert profile_name(0x4, SimpleNamespace(name=b"", sliceCount=7, memorySizeMB=80384), card) == "7g.80gb"
    assert profile_name(0x2, SimpleNamespace(name=b"", sliceCount=3, memorySizeMB=19968), 40960 << 20) == "3g.20gb"


def test_create_and_destroy_at_a_placement(a100: sim.SimulatedNode, mig: MigControl) -> None:
    gi = mig.create_gpu_instance(GPU, 9, 4)  # 3g.40gb in memory slices 4..7
    assert (gi.profile_id, gi.start, gi.size, gi.compute_instances) == (9, 4, 4, ())
    ci = mig.create_compute_instance(GPU, gi.id)
    assert ci.profile_id == pynvml.NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE  # the whole GI, not 1c or 2c
    (device_gi, device_ci), = a100.mig_devices(GPU)
    assert (device_gi.id, device_gi.start, device_ci.id) == (gi.id, 4, ci.id)
    assert ci.uuid == device_ci.uuid and ci.uuid.startswith("MIG-")
    assert mig.instances(GPU) == (GpuInstanceInfo(gi.id, 9, 4, 4, (ComputeInstanceInfo(ci.id, ci.profile_id, ci.uuid),)),)

    mig.destroy_compute_instance(GPU, gi.id, ci.id)
    assert mig.instances(GPU) == (GpuInstanceInfo(gi.id, 9, 4, 4, ()),)
    mig.destroy_gpu_instance(GPU, gi.id)
    assert mig.instances(GPU) == () and a100.gpu_instances(GPU) == []


def test_instances_lists_every_profile_by_id(mig: MigControl) -> None:
    small = mig.create_gpu_instance(GPU, 19, 0)  # 1g.10gb at 0
    pair = mig.create_gpu_instance(GPU, 14, 2)  # 2g.20gb at 2..3
    big = mig.create_gpu_instance(GPU, 9, 4)
    ci = mig.create_compute_instance(GPU, pair.id)
    found = mig.instances(GPU)
    assert [(g.id, g.profile_id, g.start, g.size) for g in found] == sorted(
        [(small.id, 19, 0, 1), (pair.id, 14, 2, 2), (big.id, 9, 4, 4)])
    assert {g.id: g.compute_instances for g in found}[pair.id] == (ci,)
    assert ci.profile_id == pynvml.NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE


@pytest.mark.parametrize(
    ("kind", "act"),
    [
        ("insufficient_resources", lambda m: (m.create_gpu_instance(GPU, 9, 4), m.create_gpu_instance(GPU, 14, 4))),
        ("invalid_argument", lambda m: m.create_gpu_instance(GPU, 9, 2)),  # a 3g starts at 0 or 4
        ("invalid_argument", lambda m: m.create_gpu_instance(GPU, 99, 0)),  # no such profile id
        ("not_found", lambda m: m.create_compute_instance(GPU, 5)),
        ("not_found", lambda m: m.destroy_gpu_instance(GPU, 5)),
        ("in_use", lambda m: (m.create_gpu_instance(GPU, 19, 0), m.set_mode(GPU, False))),  # instances left
        ("invalid_argument", lambda m: m.mode(99)),  # no GPU 99
    ],
)
def test_refusals_keep_nvmls_error(mig: MigControl, kind: str, act: Callable[[MigControl], Any]) -> None:
    assert kind_of(lambda: act(mig)) == kind


def test_instances_in_use_are_not_destroyed(a100: sim.SimulatedNode, mig: MigControl) -> None:
    gi = mig.create_gpu_instance(GPU, 19, 6)
    ci = mig.create_compute_instance(GPU, gi.id)
    assert kind_of(lambda: mig.destroy_gpu_instance(GPU, gi.id)) == "in_use"  # it still has a compute instance
    pid = a100.add_process(GPU, 1 << 30, gpu_instance=gi.id, compute_instance=ci.id)
    assert kind_of(lambda: mig.destroy_compute_instance(GPU, gi.id, ci.id)) == "in_use"  # a process runs in it
    assert len(mig.instances(GPU)[0].compute_instances) == 1
    a100.remove_process(pid)
    mig.destroy_compute_instance(GPU, gi.id, ci.id)
    mig.destroy_gpu_instance(GPU, gi.id)


def test_instances_on_a_gpu_without_mig_mode_are_not_supported(control: MigControl) -> None:
    assert kind_of(lambda: control.create_gpu_instance(GPU, 9, 0)) == "not_supported"
    assert kind_of(lambda: control.create_compute_instance(GPU, 1)) == "not_supported"
    assert control.instances(GPU) == ()


def test_other_nvml_errors_are_kind_error(mig: MigControl, patch_lib: Callable[..., Any]) -> None:
    patch_lib(errors={"nvmlDeviceCreateGpuInstanceWithPlacement": pynvml.NVML_ERROR_UNKNOWN})
    with pytest.raises(MigOpError) as caught:
        mig.create_gpu_instance(GPU, 9, 0)
    assert caught.value.kind == "error"
    assert "nvmlDeviceCreateGpuInstanceWithPlacement: NVML_ERROR_UNKNOWN" in str(caught.value)


def test_a_lost_gpu_raises_gpu_lost(a100: sim.SimulatedNode, mig: MigControl) -> None:
    gi = mig.create_gpu_instance(GPU, 9, 0)
    a100.inject(GPU, "gpu-lost")
    for call in (lambda: mig.mode(GPU), lambda: mig.profiles(GPU), lambda: mig.destroy_gpu_instance(GPU, gi.id)):
        with pytest.raises(GpuLostError):
            call()


def test_mode_is_pending_until_a_gpu_reset(a100: sim.SimulatedNode, control: MigControl) -> None:
    assert control.mode(GPU) == (False, False)
    assert control.set_mode(GPU, True) is True  # a reset is needed
    assert control.mode(GPU) == (False, True)
    assert kind_of(lambda: control.create_gpu_instance(GPU, 9, 0)) == "not_supported"
    a100.reset_gpu(GPU)
    assert control.mode(GPU) == (True, True)
    assert control.set_mode(GPU, True) is False  # already on: nothing pending
    control.create_gpu_instance(GPU, 9, 0)
    assert control.set_mode(GPU, True) is False
    a100.reset_gpu(GPU)
    assert control.instances(GPU) == ()  # a reset takes every instance with it
