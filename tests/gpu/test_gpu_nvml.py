"""NvmlSession's error policy seen through NodeReader: error codes -> Unavailable reasons, what is
listed in GpuSnapshot.errors, functions missing from the driver (logged once), versioned symbols
probed newest first with the choice remembered, NVML init failure and retry, limits cadence.

Errors and missing symbols are produced by ``PatchedLib`` (gpu_helpers) wrapped around the
simulator's fake library; the simulator itself is unchanged.
"""

from __future__ import annotations

import ctypes.util
import logging

import pynvml
import pytest
from gpu_helpers import FUNCTION_NOT_FOUND, NO_PERMISSION, NOT_SUPPORTED, TIMEOUT, UNKNOWN

from runtimekit import sim
from runtimekit.gpu.nvml import NvmlSession
from runtimekit.gpu.types import Unavailable

NVML_LOGGER = "runtimekit.gpu.nvml"


def missing_warnings(caplog, name):
    return [r for r in caplog.records if r.name == NVML_LOGGER and r.levelno >= logging.WARNING and name in r.getMessage()]


# GpuSnapshot.errors names a reading "<snapshot attribute>.<field>".
REMAP_PATHS = ("remapped_rows.correctable", "remapped_rows.uncorrectable", "remapped_rows.pending", "remapped_rows.failure")


def reading(gpu, path):
    group, name = path.split(".")
    return getattr(getattr(gpu, group), name)


# -- not supported -----------------------------------------------------------------------------


def test_not_supported_is_unavailable_and_not_listed_as_an_error(node, make_reader):
    snapshot = make_reader().sample()
    for gpu in snapshot.gpus:
        assert gpu.thermal.fan_speed_ratio.reason == "not_supported"  # SXM: no fan of its own
        assert gpu.retired_pages.single_bit_ecc.reason == "not_supported"  # Hopper remaps rows instead
        assert gpu.retired_pages.double_bit_ecc.reason == "not_supported"
        assert gpu.retired_pages.pending.reason == "not_supported"
        assert gpu.errors == ()


# -- forced error codes ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("symbol", "code", "paths", "reason", "listed"),
    [
        ("nvmlDeviceGetPowerUsage", NO_PERMISSION, ("power.draw_watts",), "no_permission", True),
        ("nvmlDeviceGetUtilizationRates", UNKNOWN, ("utilization.gpu", "utilization.memory"), "error", True),
        ("nvmlDeviceGetEnforcedPowerLimit", TIMEOUT, ("power.limit_watts",), "error", True),
        ("nvmlDeviceGetRemappedRows", UNKNOWN, REMAP_PATHS, "error", True),
        ("nvmlDeviceGetTotalEnergyConsumption", NOT_SUPPORTED, ("power.energy_joules",), "not_supported", False),
        ("nvmlDeviceGetPcieReplayCounter", FUNCTION_NOT_FOUND, ("pcie.replay_count",), "function_not_found", False),
    ],
    ids=["no-permission", "unknown", "timeout", "remap-unknown", "not-supported", "function-not-found-code"],
)
def test_error_code_maps_to_reason_and_errors(node, make_reader, patch_lib, symbol, code, paths, reason, listed):
    patch_lib(errors={symbol: code})
    snapshot = make_reader().sample()
    assert snapshot.nvml_up
    name = next(n for n, v in vars(pynvml).items() if n.startswith("NVML_ERROR_") and v == code)
    for gpu in snapshot.gpus:
        for path in paths:
            value = reading(gpu, path)
            assert isinstance(value, Unavailable) and value.reason == reason, (path, value)
        if listed:
            assert {path for path, _ in gpu.errors} == set(paths)
            assert all(detail == f"{symbol}: {name}" for _, detail in gpu.errors), gpu.errors
        else:
            assert gpu.errors == ()
        assert gpu.utilization is not None and gpu.nvlinks  # the rest of the GPU is read as usual


def test_failed_field_batch_makes_its_readings_errors(node, make_reader, patch_lib):
    patch_lib(errors={"nvmlDeviceGetFieldValues": UNKNOWN})
    snapshot = make_reader().sample()
    for gpu in snapshot.gpus:
        assert gpu.limits.nvlink_count.reason == "error"  # the link count comes from the same call
        assert gpu.thermal.memory_celsius.reason == "error"
        assert gpu.pcie.tx_bytes.reason == "error"
        listed = {path for path, _ in gpu.errors}
        assert {"thermal.memory_celsius", "pcie.tx_bytes", "pcie.rx_bytes"} <= listed
        assert gpu.power.draw_watts > 0


@pytest.mark.parametrize(
    ("symbol", "check"),
    [
        pytest.param("nvmlDeviceGetNvLinkErrorCounter", lambda gpu: all(link.crc_data_errors.reason == "error" for link in gpu.nvlinks),
                     id="nvlink-error-counter"),
        pytest.param("nvmlDeviceGetMaxClockInfo", lambda gpu: gpu.limits.sm_clock_max_hertz.reason == "error",
                     id="limits-max-clock"),
        pytest.param("nvmlDeviceGetComputeRunningProcesses_v3", lambda gpu: gpu.processes == (),
                     id="process-listing"),
        pytest.param("nvmlDeviceGetPerformanceState", lambda gpu: gpu.clocks.performance_state.reason == "error",
                     id="performance-state"),
    ],
)
def test_every_real_error_is_listed_in_errors(make_node, make_reader, patch_lib, symbol, check):
    node = make_node("dgx-h100", load="training")
    node.set_process_count(16)
    patch_lib(errors={symbol: UNKNOWN})
    snapshot = make_reader().sample()
    for gpu in snapshot.gpus:
        assert check(gpu)
        assert any(detail == f"{symbol}: NVML_ERROR_UNKNOWN" for _, detail in gpu.errors), gpu.errors


# -- functions missing from the driver ---------------------------------------------------------


def test_missing_function_is_logged_once_across_cycles(node, make_reader, patch_lib, clock, caplog):
    caplog.set_level(logging.INFO)
    lib = patch_lib(hide={"nvmlDeviceGetPcieReplayCounter"})
    reader = make_reader()
    for _ in range(3):
        snapshot = reader.sample()
        clock.advance(1.0)
        for gpu in snapshot.gpus:
            assert gpu.pcie.replay_count == Unavailable("function_not_found", "nvmlDeviceGetPcieReplayCounter")
            assert gpu.pcie.generation == 5  # the rest of the group is read
            assert gpu.errors == ()  # a fact of the driver, not an error
    assert len(missing_warnings(caplog, "nvmlDeviceGetPcieReplayCounter")) == 1
    assert lib.lookups["nvmlDeviceGetPcieReplayCounter"] == 24  # pynvml asks the driver every time: 3 cycles x 8


def test_wrapper_missing_from_pynvml_is_logged_once(node, caplog):
    session = NvmlSession()
    session.init()
    try:
        results = [session.call("nvmlDeviceGetSomethingFromTheFuture", None) for _ in range(5)]
    finally:
        session.shutdown()
    assert results == [Unavailable("function_not_found", "nvmlDeviceGetSomethingFromTheFuture")] * 5
    assert len(missing_warnings(caplog, "nvmlDeviceGetSomethingFromTheFuture")) == 1


def test_versioned_call_with_every_variant_missing_is_logged_once(node, make_reader, patch_lib, clock, caplog):
    lib = patch_lib(hide={"nvmlDeviceGetTemperatureV", "nvmlDeviceGetTemperature"})
    reader = make_reader()
    for _ in range(3):
        snapshot = reader.sample()
        clock.advance(1.0)
        for gpu in snapshot.gpus:
            assert gpu.thermal.gpu_celsius.reason == "function_not_found"
            assert gpu.thermal.memory_celsius > 0
            assert gpu.errors == ()
    assert len(missing_warnings(caplog, "nvmlDeviceGetTemperature")) == 1
    # Probed once each, then remembered as missing: no symbol lookup per GPU and cycle.
    assert lib.lookups == {"nvmlDeviceGetTemperatureV": 1, "nvmlDeviceGetTemperature": 1}


# -- versioned symbols -------------------------------------------------------------------------


def _temperature(gpu, handle):
    assert gpu.thermal.gpu_celsius == pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU)


def _reasons(gpu, handle):
    assert gpu.clocks.event_reasons == pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle)


def _processes(gpu, handle):
    expected = sorted((p.pid, p.usedGpuMemory) for p in pynvml.nvmlDeviceGetComputeRunningProcesses_v2(handle))
    assert expected
    assert sorted((p.pid, p.used_memory_bytes) for p in gpu.processes) == expected


def _memory_v1(gpu, handle):
    v1 = pynvml.nvmlDeviceGetMemoryInfo(handle)
    assert (gpu.memory.total_bytes, gpu.memory.used_bytes, gpu.memory.free_bytes) == (v1.total, v1.used, v1.free)
    assert gpu.memory.reserved_bytes.reason == "not_supported"  # only the v2 struct has it
    assert gpu.limits.memory_total_bytes == v1.total


@pytest.mark.parametrize(
    ("hidden", "check"),
    [
        ("nvmlDeviceGetTemperatureV", _temperature),
        ("nvmlDeviceGetCurrentClocksEventReasons", _reasons),
        ("nvmlDeviceGetComputeRunningProcesses_v3", _processes),
        ("nvmlDeviceGetMemoryInfo_v2", _memory_v1),
    ],
    ids=["temperature", "clock-event-reasons", "processes-v3", "memory-info-v2"],
)
def test_versioned_symbol_falls_back_and_remembers(make_node, make_reader, patch_lib, clock, caplog, hidden, check):
    node = make_node("dgx-h100", load="training")
    node.set_process_count(16)
    lib = patch_lib(hide={hidden})
    reader = make_reader()
    for _ in range(3):
        snapshot = reader.sample()
        for gpu in snapshot.gpus:
            check(gpu, pynvml.nvmlDeviceGetHandleByIndex(gpu.index))
            assert gpu.errors == ()
        clock.advance(1.0)
    assert lib.lookups[hidden] == 1  # probed once, the older variant is remembered
    assert not [r for r in caplog.records if r.name == NVML_LOGGER and r.levelno >= logging.WARNING]


# -- NVML cannot be loaded ---------------------------------------------------------------------


@pytest.mark.skipif(ctypes.util.find_library("nvidia-ml") is not None, reason="a real libnvidia-ml is installed")
def test_nvml_init_failure_then_retry_succeeds(make_node, make_reader):
    sim.uninstall()
    assert pynvml.nvmlLib is None
    reader = make_reader()
    for _ in range(2):
        snapshot = reader.sample()
        assert snapshot.nvml_up is False
        assert "NVML_ERROR_LIBRARY_NOT_FOUND" in snapshot.nvml_error
        assert (snapshot.gpus, snapshot.device_count, snapshot.driver) == ((), 0, None)
    make_node("dgx-h100")
    snapshot = reader.sample()
    assert (snapshot.nvml_up, snapshot.nvml_error, snapshot.device_count, len(snapshot.gpus)) == (True, "", 8, 8)
    assert snapshot.driver.driver_version == "550.54.15"


# -- limits cadence ----------------------------------------------------------------------------


def test_limits_are_reread_only_every_limits_refresh_seconds(node, make_reader, patch_lib, clock):
    lib = patch_lib(count=("nvmlDeviceGetMaxClockInfo", "nvmlDeviceGetTemperatureThreshold", "nvmlDeviceGetPowerUsage"))
    reader = make_reader(limits_refresh_seconds=60.0)
    start = clock.t
    offsets = (0.0, 10.0, 59.5, 60.0, 61.0, 119.0, 120.5)
    seen = []
    for offset in offsets:
        clock.t = start + offset
        snapshot = reader.sample()
        assert all(gpu.limits.sm_clock_max_hertz == 1_980_000_000.0 for gpu in snapshot.gpus)
        # limit reads so far, per GPU: 3 max clocks and 4 thresholds per refresh
        seen.append((lib.calls["nvmlDeviceGetMaxClockInfo"] / 8 / 3, lib.calls["nvmlDeviceGetTemperatureThreshold"] / 8 / 4))
    assert seen == [(1, 1), (1, 1), (1, 1), (2, 2), (2, 2), (2, 2), (3, 3)]
    assert lib.calls["nvmlDeviceGetPowerUsage"] == 8 * len(offsets)  # per-cycle readings: every cycle
