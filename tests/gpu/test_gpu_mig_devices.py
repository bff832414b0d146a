"""The reader sees MIG devices: instances created through the simulated node's driver model appear
in the next sample with their ids, profile and memory; processes inside carry their instance ids."""

from __future__ import annotations

import pynvml
from gpu_helpers import UNKNOWN

from runtimekit.gpu.types import Unavailable, is_available
from runtimekit.sim.mig_profiles import ci_profiles
from runtimekit.state.refs import GpuRef, PciAddress

GiB = 1 << 30
MiB = 1 << 20
THREE_G, ONE_G = 9, 19  # GPU instance profile ids (3g.40gb, 1g.10gb on H100 80 GB)


def mig_on(node, gpu):
    """MIG mode in effect on ``gpu`` (set, then a GPU reset applies it)."""
    node.set_mig_mode(gpu, True)
    node.reset_gpu(gpu)


def instance(node, gpu, profile_id, start):
    """A GPU instance at ``start`` with one compute instance taking all of it; (GI, CI)."""
    gi = node.create_gpu_instance(gpu, profile_id, start)
    full = next(p for p in ci_profiles(gi.profile) if p.compute_slices == gi.profile.compute_slices)
    return gi, node.create_compute_instance(gpu, gi.id, full.id)


def test_reader_sees_mig_devices_created_through_the_node(make_node, make_reader):
    node = make_node("dgx-h100")
    mig_on(node, 0)
    big_gi, big_ci = instance(node, 0, THREE_G, 4)
    small_gi, small_ci = instance(node, 0, ONE_G, 0)
    node.add_process(0, 5 * GiB, gpu_instance=big_gi.id, compute_instance=big_ci.id)

    snapshot = make_reader().sample()
    gpu = snapshot.gpus[0]
    assert gpu.mig_enabled and not snapshot.gpus[1].mig_enabled
    parent = GpuRef(gpu.uuid, 0, PciAddress.parse(gpu.identity.pci_bus_id))
    by_gi = {d.gpu_instance_id: d for d in gpu.mig_devices}
    assert set(by_gi) == {big_gi.id, small_gi.id}
    big, small = by_gi[big_gi.id], by_gi[small_gi.id]
    assert big.ref.parent == parent and big.uuid == big_ci.uuid and big.uuid.startswith("MIG-")
    assert (big.compute_instance_id, big.profile, big.profile_id, big.placement_start) == (big_ci.id, "3g.40gb", THREE_G, 4)
    assert (big.compute_slices, big.multiprocessors) == (3, big_gi.profile.sms)
    assert big.memory_total_bytes == big_gi.profile.memory_mib * MiB and big.memory_used_bytes == 5 * GiB
    assert (small.profile, small.placement_start, small.memory_used_bytes) == ("1g.10gb", 0, 0)
    assert sorted(d.index for d in gpu.mig_devices) == [0, 1]
    assert gpu.mig_device(big_gi.id, big_ci.id) is big and gpu.mig_device(7, 0) is None
    assert all(g.mig_devices == () for g in snapshot.gpus[1:])
    assert not any(name == "mig_devices" for name, _ in gpu.errors)


def test_a_process_in_an_instance_carries_its_ids_and_no_utilization(make_node, make_reader):
    node = make_node("dgx-h100", load="busy")
    mig_on(node, 0)
    gi, ci = instance(node, 0, THREE_G, 0)
    inside = node.add_process(0, 2 * GiB, gpu_instance=gi.id, compute_instance=ci.id)
    whole = node.add_process(1, 2 * GiB)

    gpus = make_reader().sample().gpus
    [row] = [p for p in gpus[0].processes if p.pid == inside]
    assert (row.gpu_instance_id, row.compute_instance_id, row.used_memory_bytes) == (gi.id, ci.id, 2 * GiB)
    # NVML cannot attribute utilization to a MIG instance: not supported, never 0.
    for ratio in (row.sm_utilization, row.memory_utilization, row.encoder_utilization, row.decoder_utilization):
        assert isinstance(ratio, Unavailable) and ratio.reason == "not_supported"
    assert gpus[0].mig_device(row.gpu_instance_id, row.compute_instance_id).uuid == ci.uuid
    [other] = [p for p in gpus[1].processes if p.pid == whole]
    assert not is_available(other.gpu_instance_id) and not is_available(other.compute_instance_id)
    assert is_available(other.sm_utilization)


def test_devices_follow_instances_and_are_identified_once(make_node, make_reader, patch_lib):
    node = make_node("dgx-h100")
    mig_on(node, 2)
    gi, ci = instance(node, 2, THREE_G, 0)
    lib = patch_lib(count=("nvmlDeviceGetGpuInstanceId", "nvmlDeviceGetGpuInstanceProfileInfoByIdV",
                           "nvmlDeviceGetUtilizationRates"))
    reader = make_reader()
    first = reader.sample().gpus[2].mig_devices
    assert [d.uuid for d in first] == [ci.uuid]
    pid = node.add_process(2, 3 * GiB, gpu_instance=gi.id, compute_instance=ci.id)
    again = reader.sample().gpus[2].mig_devices
    assert again[0].memory_used_bytes == 3 * GiB  # memory every cycle
    assert lib.calls["nvmlDeviceGetGpuInstanceId"] == 1  # identity once per MIG UUID
    assert lib.calls["nvmlDeviceGetGpuInstanceProfileInfoByIdV"] == 1
    assert lib.calls["nvmlDeviceGetUtilizationRates"] == 2 * 8  # parents only: never a MIG handle

    node.remove_process(pid)
    node.destroy_compute_instance(2, gi.id, ci.id)
    node.destroy_gpu_instance(2, gi.id)
    new_gi, new_ci = instance(node, 2, ONE_G, 6)
    [now] = reader.sample().gpus[2].mig_devices
    assert (now.uuid, now.gpu_instance_id, now.profile, now.placement_start) == (new_ci.uuid, new_gi.id, "1g.10gb", 6)


def test_pending_mig_mode_has_no_devices(make_node, make_reader):
    node = make_node("dgx-h100")
    node.set_mig_mode(3, True)  # pending until a GPU reset
    gpu = make_reader().sample().gpus[3]
    assert gpu.modes.mig_mode_pending is True and not gpu.mig_enabled and gpu.mig_devices == ()


def test_mig_mode_with_no_instances_has_no_devices_and_no_error(make_node, make_reader):
    node = make_node("dgx-h100")
    mig_on(node, 0)
    gpu = make_reader().sample().gpus[0]
    assert gpu.mig_enabled and gpu.mig_devices == () and gpu.errors == ()


def test_a_failing_listing_is_an_error_of_its_own(make_node, make_reader, patch_lib):
    node = make_node("dgx-h100")
    mig_on(node, 0)
    instance(node, 0, THREE_G, 0)
    patch_lib(errors={"nvmlDeviceGetMigDeviceHandleByIndex": UNKNOWN})
    gpu = make_reader().sample().gpus[0]
    assert gpu.mig_devices == ()
    assert ("mig_devices", f"nvmlDeviceGetMigDeviceHandleByIndex: {pynvml_error_name(UNKNOWN)}") in gpu.errors
    assert gpu.memory is not None and is_available(gpu.memory.used_bytes)  # the rest is read as usual



def test_a_failed_profile_read_is_a_reading_error_and_is_read_again_next_cycle(make_node, make_reader, monkeypatch):
    node = make_node("dgx-h100")
    mig_on(node, 0)
    gi, ci = instance(node, 0, THREE_G, 0)
    lib = pynvml.nvmlLib
    profile_info = lib.nvmlDeviceGetGpuInstanceProfileInfoByIdV
    calls: list[tuple] = []

    def flaky(*args):  # the first read fails, the next ones answer
        calls.append(args)
        return UNKNOWN if len(calls) == 1 else profile_info(*args)

    monkeypatch.setattr(lib, "nvmlDeviceGetGpuInstanceProfileInfoByIdV", flaky)
    reader = make_reader()
    first = reader.sample().gpus[0]
    [device] = first.mig_devices
    assert (device.uuid, device.gpu_instance_id, device.placement_start) == (ci.uuid, gi.id, 0)
    assert not is_available(device.profile) and not is_available(device.compute_slices)
    failed = f"nvmlDeviceGetGpuInstanceProfileInfoByIdV: {pynvml_error_name(UNKNOWN)}"
    assert {name for name, error in first.errors if error == failed} == {
        "mig_devices[0].profile", "mig_devices[0].compute_slices", "mig_devices[0].multiprocessors"}
    assert not any(name == "mig_devices" for name, _ in first.errors)  # listed: the count is known
    again = reader.sample().gpus[0]
    [device] = again.mig_devices
    assert (device.profile, device.compute_slices) == ("3g.40gb", 3) and again.errors == ()

def pynvml_error_name(code: int) -> str:
    return next(name for name, value in vars(pynvml).items() if name.startswith("NVML_ERROR_") and value == code)
