"""NodeReader.sample() on whole simulated nodes: identity, base-unit conversions, NVLink, processes.

Every converted value is checked against what the simulated driver answers through pynvml
directly at the same (pinned) clock reading, so the test checks the conversion, not the simulator.
"""

from __future__ import annotations

import pynvml
import pytest

from runtimekit.gpu import fields
from runtimekit.gpu.types import Unavailable, is_available
from runtimekit.state.refs import normal_pci

EXPECTED = {  # scenario -> (architecture, compute capability, NVLink links)
    "dgx-h100": ("hopper", "9.0", 18),
    "dgx-a100": ("ampere", "8.0", 12),
    "hgx-h200": ("hopper", "9.0", 18),
}


def field_values(handle, requests):
    """{(field id, scope): value} straight from pynvml."""
    out = {}
    for answer in pynvml.nvmlDeviceGetFieldValues(handle, requests):
        assert answer.nvmlReturn == pynvml.NVML_SUCCESS
        member = "uiVal" if answer.valueType == pynvml.NVML_VALUE_TYPE_UNSIGNED_INT else "ullVal"
        out[(answer.fieldId, answer.scopeId)] = getattr(answer.value, member)
    return out


@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_full_sample_matches_the_driver_in_base_units(scenario, make_node, make_reader, clock):
    node = make_node(scenario, load="training")
    node.set_process_count(16)
    node.now()  # simulated time 0 is the first clock reading
    clock.advance(120.0)  # counters (energy, PCIe, NVLink) have grown
    snapshot = make_reader().sample()
    job_gpus = {p["gpu"] for p in node.processes() if p["pod"] is not None}

    architecture, capability, links = EXPECTED[scenario]
    assert (snapshot.nvml_up, snapshot.nvml_error, snapshot.device_count) == (True, "", 8)
    assert snapshot.sampled_at == clock.t
    assert snapshot.driver.driver_version == node.scenario.driver_version
    assert snapshot.driver.nvml_version == node.scenario.nvml_version
    cuda = node.scenario.cuda_driver_version
    assert snapshot.driver.cuda_driver_version == f"{cuda // 1000}.{cuda % 1000 // 10}"
    assert [gpu.index for gpu in snapshot.gpus] == list(range(8))

    for gpu in snapshot.gpus:
        spec = node.gpu(gpu.index)
        model = spec.model
        handle = pynvml.nvmlDeviceGetHandleByIndex(gpu.index)
        assert not gpu.lost
        assert gpu.errors == ()
        assert gpu.sampled_at == clock.t

        # Identity, read once at discovery.
        identity = gpu.identity
        assert identity.uuid == gpu.uuid == spec.uuid
        assert identity.name == model.name
        assert identity.pci_bus_id == normal_pci(spec.pci_bus_id)  # one spelling: 0000:07:00.0
        assert identity.pci_bus_id == identity.pci_bus_id.lower() and identity.pci_bus_id.count(":") == 2
        assert identity.serial == spec.serial
        assert identity.vbios_version == model.vbios_version
        assert identity.board_part_number == model.board_part_number
        assert identity.architecture == architecture
        assert identity.cuda_compute_capability == capability

        # Limits.
        limits = gpu.limits
        assert limits.nvlink_count == links
        assert limits.sm_clock_max_hertz == pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM) * 1e6
        assert limits.memory_clock_max_hertz == pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_MEM) * 1e6
        assert limits.graphics_clock_max_hertz == pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_GRAPHICS) * 1e6
        assert limits.sm_clock_max_hertz == model.clocks_max_mhz["sm"] * 1_000_000
        thresholds = model.temperature_thresholds_c
        assert (limits.temperature_slowdown_celsius, limits.temperature_shutdown_celsius) == (
            thresholds["slowdown"], thresholds["shutdown"])
        assert (limits.temperature_gpu_max_celsius, limits.temperature_memory_max_celsius) == (
            thresholds["gpu_max"], thresholds["mem_max"])
        assert (limits.pcie_max_generation, limits.pcie_max_width) == (model.pcie_generation, model.pcie_width)

        # Utilisation: percent -> ratio.
        if node.mig_mode(gpu.index)[0]:  # no whole-GPU utilization in MIG mode, as on real hardware
            assert not is_available(gpu.utilization.gpu) and not is_available(gpu.utilization.memory)
        else:
            rates = pynvml.nvmlDeviceGetUtilizationRates(handle)
            assert gpu.utilization.gpu == pytest.approx(rates.gpu / 100)
            assert gpu.utilization.memory == pytest.approx(rates.memory / 100)
            assert 0.0 <= gpu.utilization.gpu <= 1.0
        assert gpu.utilization.encoder == pytest.approx(pynvml.nvmlDeviceGetEncoderUtilization(handle)[0] / 100)
        assert gpu.utilization.decoder == pytest.approx(pynvml.nvmlDeviceGetDecoderUtilization(handle)[0] / 100)

        # Memory: bytes, v2 struct (reserved separate from used).
        memory = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
        bar1 = pynvml.nvmlDeviceGetBAR1MemoryInfo(handle)
        assert (gpu.memory.total_bytes, gpu.memory.used_bytes, gpu.memory.free_bytes, gpu.memory.reserved_bytes) == (
            memory.total, memory.used, memory.free, memory.reserved)
        assert gpu.memory.total_bytes == limits.memory_total_bytes == model.memory_total_mib << 20
        assert (gpu.memory.bar1_total_bytes, gpu.memory.bar1_used_bytes, gpu.memory.bar1_free_bytes) == (
            bar1.bar1Total, bar1.bar1Used, bar1.bar1Free)

        # Thermal.
        assert gpu.thermal.gpu_celsius == pynvml.nvmlDeviceGetTemperatureV(handle, pynvml.NVML_TEMPERATURE_GPU)
        values = field_values(handle, [fields.MEMORY_TEMP, fields.PCIE_TX_BYTES, fields.PCIE_RX_BYTES])
        assert gpu.thermal.memory_celsius == values[(fields.MEMORY_TEMP, 0)]
        assert gpu.thermal.fan_speed_ratio.reason == "not_supported"  # SXM: chassis-cooled

        # Power: mW -> W, mJ -> J.
        assert gpu.power.draw_watts == pytest.approx(pynvml.nvmlDeviceGetPowerUsage(handle) / 1000)
        assert gpu.power.limit_watts == pytest.approx(pynvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000)
        assert gpu.power.limit_watts == model.power_limit_w
        assert gpu.power.energy_joules == pytest.approx(pynvml.nvmlDeviceGetTotalEnergyConsumption(handle) / 1000)
        assert gpu.power.energy_joules > 0

        # Clocks: MHz -> Hz.
        for reading, kind in ((gpu.clocks.sm_hertz, pynvml.NVML_CLOCK_SM), (gpu.clocks.memory_hertz, pynvml.NVML_CLOCK_MEM),
                              (gpu.clocks.graphics_hertz, pynvml.NVML_CLOCK_GRAPHICS)):
            assert reading == pynvml.nvmlDeviceGetClockInfo(handle, kind) * 1e6
        assert gpu.clocks.event_reasons == pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle)
        assert gpu.clocks.performance_state == pynvml.nvmlDeviceGetPerformanceState(handle)

        # PCIe: byte counters from the batched field read.
        assert (gpu.pcie.generation, gpu.pcie.width) == (model.pcie_generation, model.pcie_width)
        assert gpu.pcie.tx_bytes == values[(fields.PCIE_TX_BYTES, 0)] > 0
        assert gpu.pcie.rx_bytes == values[(fields.PCIE_RX_BYTES, 0)] > 0
        assert gpu.pcie.replay_count == pynvml.nvmlDeviceGetPcieReplayCounter(handle)

        # ECC, retired pages (not on Hopper/Ampere), row remapping.
        assert gpu.ecc.enabled is True
        assert gpu.ecc.uncorrected_volatile == 0
        for name in ("single_bit_ecc", "double_bit_ecc", "pending"):
            assert getattr(gpu.retired_pages, name).reason == "not_supported"
        assert (gpu.remapped_rows.correctable, gpu.remapped_rows.uncorrectable) == (0, 0)
        assert (gpu.remapped_rows.pending, gpu.remapped_rows.failure) == (False, False)

        # NVLink: one entry per link, KiB -> bytes.
        assert [link.link for link in gpu.nvlinks] == list(range(links))
        link_values = field_values(handle, [(f, link) for link in range(links)
                                            for f in (fields.LINK_TX_KIB, fields.LINK_RX_KIB)])
        for link in gpu.nvlinks:
            assert link.active is True
            assert link.tx_bytes == link_values[(fields.LINK_TX_KIB, link.link)] * 1024
            assert link.rx_bytes == link_values[(fields.LINK_RX_KIB, link.link)] * 1024
            if gpu.index in job_gpus:  # GPUs no pod holds stay idle: no NVLink traffic
                assert link.tx_bytes > 0
            assert (link.crc_flit_errors, link.crc_data_errors, link.replay_errors, link.recovery_errors) == (0, 0, 0, 0)

        # Modes.
        assert (gpu.modes.compute_mode, gpu.modes.persistence_mode) == ("default", True)
        mig = spec.mig is not None and spec.mig.enabled  # dgx-a100 starts GPUs 0 and 1 in MIG mode
        assert (gpu.modes.mig_mode_current, gpu.modes.mig_mode_pending) == (mig, mig)

        # Processes, with their memory in bytes.
        expected = sorted((p.pid, p.usedGpuMemory) for p in pynvml.nvmlDeviceGetComputeRunningProcesses_v3(handle))
        # Training load and 16 background processes: every GPU has some, but those in MIG mode with
        # no instance (no process can run outside an instance there).
        assert bool(expected) != mig, "processes on a whole GPU, none on a MIG GPU without instances"
        assert sorted((p.pid, p.used_memory_bytes) for p in gpu.processes) == expected
        assert {p.kind for p in gpu.processes} == (set() if mig else {"compute"})
        assert all(p.gpu_instance_id.reason == "not_supported" for p in gpu.processes)  # no MIG: NVML's 0xFFFFFFFF
        simulated = sorted((p["pid"], p["used_memory_bytes"]) for p in node.processes() if p["gpu"] == gpu.index)
        assert sorted((p.pid, p.used_memory_bytes) for p in gpu.processes) == simulated


def test_every_reading_is_a_value_or_unavailable_never_a_sentinel(make_node, make_reader):
    """Nothing is exported as 0/-1 for "missing": every unsupported reading is an Unavailable."""
    make_node("dgx-a100", load="busy")
    snapshot = make_reader().sample()
    for gpu in snapshot.gpus:
        for group in (gpu.utilization, gpu.memory, gpu.thermal, gpu.power, gpu.clocks, gpu.pcie, gpu.ecc,
                      gpu.retired_pages, gpu.remapped_rows, gpu.modes, *gpu.nvlinks):
            for name in group.__slots__:
                value = getattr(group, name)
                assert isinstance(value, (Unavailable, bool, int, float, str)), (name, value)
                if is_available(value) and isinstance(value, (int, float)) and not isinstance(value, bool):
                    assert value >= 0, (type(group).__name__, name, value)


def test_identity_is_read_once_and_counters_grow_between_cycles(make_node, make_reader, patch_lib, clock):
    node = make_node("dgx-h100", load="training")
    node.now()
    lib = patch_lib(count=("nvmlDeviceGetUUID", "nvmlDeviceGetSerial"))
    reader = make_reader()
    first = reader.sample()
    clock.advance(30.0)
    second = reader.sample()
    assert lib.calls["nvmlDeviceGetUUID"] == lib.calls["nvmlDeviceGetSerial"] == 8
    for before, after in zip(first.gpus, second.gpus, strict=True):
        assert after.identity == before.identity
        assert after.power.energy_joules > before.power.energy_joules
        assert after.pcie.tx_bytes >= before.pcie.tx_bytes  # counters never go back (traffic may pause)
        assert all(b.tx_bytes <= a.tx_bytes for b, a in zip(before.nvlinks, after.nvlinks, strict=True))
        assert after.sampled_at == before.sampled_at + 30.0
