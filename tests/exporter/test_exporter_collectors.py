"""Each collector: values and units, Unavailable omitted, lost and vanished GPUs/links disappear."""

from __future__ import annotations

import dataclasses

import pytest
from exporter_factories import (
    MHZ,
    SAMPLED_AT,
    GiB,
    make_gpu,
    make_lost_gpu,
    make_nvlink,
    make_snapshot,
    make_state,
    names,
    uuid_for,
    value,
)

from runtimekit.exporter.collectors.clocks import CLOCK_EVENT_REASONS, ClocksCollector
from runtimekit.exporter.collectors.ecc import EccCollector
from runtimekit.exporter.collectors.info import InfoCollector
from runtimekit.exporter.collectors.memory import MemoryCollector
from runtimekit.exporter.collectors.modes import ModesCollector
from runtimekit.exporter.collectors.nvlink import NvLinkCollector
from runtimekit.exporter.collectors.pcie import PcieCollector
from runtimekit.exporter.collectors.power import PowerCollector
from runtimekit.exporter.collectors.remap import RemapCollector
from runtimekit.exporter.collectors.self import SelfCollector
from runtimekit.exporter.collectors.thermal import ThermalCollector
from runtimekit.exporter.collectors.utilization import UtilizationCollector
from runtimekit.exporter.collectors.xid import XidCollector
from runtimekit.gpu.types import NOT_SUPPORTED, Clocks, Modes, Thermal, Unavailable, Utilization
from runtimekit.state import SamplerStats

CARD_COLLECTORS = [
    UtilizationCollector, MemoryCollector, ThermalCollector, PowerCollector, ClocksCollector,
    PcieCollector, EccCollector, RemapCollector, NvLinkCollector, ModesCollector,
]
G0 = {"gpu": "0", "uuid": uuid_for(0)}


def collect(collector_cls, state, **kwargs):
    """The families ``collector_cls(**kwargs)`` yields for the state's current view."""
    return list(collector_cls(**kwargs).collect(state.view()))


def one_gpu_state(**overrides):
    return make_state(make_snapshot((make_gpu(0, **overrides),)))


# --- values and units -----------------------------------------------------------------------


def test_utilization_ratios():
    fams = collect(UtilizationCollector, one_gpu_state())
    assert value(fams, "runtimekit_gpu_utilization_ratio", **G0) == 0.75
    assert value(fams, "runtimekit_gpu_memory_utilization_ratio", **G0) == 0.5
    assert value(fams, "runtimekit_gpu_encoder_utilization_ratio", **G0) == 0.0


def test_memory_bytes_and_total_falls_back_to_limits():
    fams = collect(MemoryCollector, one_gpu_state())
    assert value(fams, "runtimekit_gpu_memory_used_bytes", **G0) == 10 * GiB
    assert value(fams, "runtimekit_gpu_memory_free_bytes", **G0) == 69 * GiB
    assert value(fams, "runtimekit_gpu_memory_total_bytes", **G0) == 80 * GiB
    assert value(fams, "runtimekit_gpu_memory_reserved_bytes", **G0) == 1 * GiB
    assert value(fams, "runtimekit_gpu_bar1_total_bytes", **G0) == 128 * GiB
    fams = collect(MemoryCollector, one_gpu_state(memory=None))
    assert names(fams) == {"runtimekit_gpu_memory_total_bytes", "runtimekit_gpu_bar1_total_bytes"}


def test_thermal_and_thresholds_fan_not_supported_is_omitted():
    fams = collect(ThermalCollector, one_gpu_state())
    assert value(fams, "runtimekit_gpu_temperature_celsius", **G0) == 41.0
    assert value(fams, "runtimekit_gpu_memory_temperature_celsius", **G0) == 38.0
    for threshold, expected in [("slowdown", 90.0), ("shutdown", 92.0), ("gpu_max", 87.0), ("memory_max", 95.0)]:
        assert value(fams, "runtimekit_gpu_temperature_threshold_celsius", threshold=threshold, **G0) == expected
    assert "runtimekit_gpu_fan_speed_ratio" not in names(fams)  # SXM board: NOT_SUPPORTED
    fams = collect(ThermalCollector, one_gpu_state(thermal=Thermal(50.0, NOT_SUPPORTED, 0.3)))
    assert value(fams, "runtimekit_gpu_fan_speed_ratio", **G0) == 0.3
    assert "runtimekit_gpu_memory_temperature_celsius" not in names(fams)


def test_power_and_energy_counter():
    fams = collect(PowerCollector, one_gpu_state())
    assert value(fams, "runtimekit_gpu_power_draw_watts", **G0) == 312.5
    assert value(fams, "runtimekit_gpu_power_limit_watts", **G0) == 700.0
    assert value(fams, "runtimekit_gpu_energy_joules_total", **G0) == 123456.789
    energy = next(f for f in fams if f.name == "runtimekit_gpu_energy_joules")
    assert energy.type == "counter"


def test_clocks_event_reasons_one_series_per_bit():
    fams = collect(ClocksCollector, one_gpu_state())
    assert value(fams, "runtimekit_gpu_clock_hertz", clock="sm", **G0) == 1755 * MHZ
    assert value(fams, "runtimekit_gpu_clock_max_hertz", clock="memory", **G0) == 2619 * MHZ
    active = {
        reason: value(fams, "runtimekit_gpu_clock_event_active", reason=reason, **G0) for reason, _ in CLOCK_EVENT_REASONS
    }
    assert active == {r: (1.0 if r in ("sw_power_cap", "sw_thermal_slowdown") else 0.0) for r, _ in CLOCK_EVENT_REASONS}
    assert value(fams, "runtimekit_gpu_performance_state", **G0) == 0.0


def test_clock_event_reasons_unavailable_omits_every_reason():
    clocks = Clocks(1.0, 2.0, 3.0, event_reasons=Unavailable("no_permission"), performance_state=NOT_SUPPORTED)
    fams = collect(ClocksCollector, one_gpu_state(clocks=clocks))
    assert "runtimekit_gpu_clock_event_active" not in names(fams)
    assert "runtimekit_gpu_performance_state" not in names(fams)
    assert value(fams, "runtimekit_gpu_clock_hertz", clock="graphics", **G0) == 3.0


def test_pcie():
    fams = collect(PcieCollector, one_gpu_state())
    assert value(fams, "runtimekit_gpu_pcie_link_generation", **G0) == 5
    assert value(fams, "runtimekit_gpu_pcie_link_max_width", **G0) == 16
    assert value(fams, "runtimekit_gpu_pcie_tx_bytes_total", **G0) == 1_000_000
    assert value(fams, "runtimekit_gpu_pcie_rx_bytes_total", **G0) == 2_000_000
    assert value(fams, "runtimekit_gpu_pcie_replay_total", **G0) == 0


def test_ecc_gauge_by_type_and_counter():
    fams = collect(EccCollector, one_gpu_state())
    assert value(fams, "runtimekit_gpu_ecc_enabled", **G0) == 1.0
    assert value(fams, "runtimekit_gpu_ecc_errors", type="corrected", counter="volatile", **G0) == 3
    assert value(fams, "runtimekit_gpu_ecc_errors", type="uncorrected", counter="aggregate", **G0) == 1
    assert next(f for f in fams if f.name == "runtimekit_gpu_ecc_errors").type == "gauge"


def test_remap_rows_present_retired_pages_not_supported_absent():
    fams = collect(RemapCollector, one_gpu_state())
    assert value(fams, "runtimekit_gpu_remapped_rows", type="correctable", **G0) == 2
    assert value(fams, "runtimekit_gpu_remapped_rows_pending", **G0) == 0
    assert value(fams, "runtimekit_gpu_remapped_rows_failure", **G0) == 0
    assert not {"runtimekit_gpu_retired_pages", "runtimekit_gpu_retired_pages_pending"} & names(fams)


def test_nvlink_per_link_and_vanished_link():
    fams = collect(NvLinkCollector, one_gpu_state())
    assert value(fams, "runtimekit_gpu_nvlink_links", **G0) == 18
    assert value(fams, "runtimekit_gpu_nvlink_up", link="1", **G0) == 1.0
    assert value(fams, "runtimekit_gpu_nvlink_errors_total", link="0", counter="replay", **G0) == 3
    assert value(fams, "runtimekit_gpu_nvlink_tx_bytes_total", link="1", **G0) == 2048
    assert value(fams, "runtimekit_gpu_nvlink_rx_bytes_total", link="0", **G0) == 2048
    state = one_gpu_state(nvlinks=(make_nvlink(0, active=False, crc_flit_errors=NOT_SUPPORTED),))
    fams = collect(NvLinkCollector, state)
    assert value(fams, "runtimekit_gpu_nvlink_up", link="0", **G0) == 0.0
    assert value(fams, "runtimekit_gpu_nvlink_up", link="1", **G0) is None
    assert value(fams, "runtimekit_gpu_nvlink_errors_total", link="0", counter="crc_flit", **G0) is None


def test_modes_compute_mode_enum_one_series_per_mode():
    modes = Modes(compute_mode="exclusive_process", persistence_mode=False, mig_mode_current=True, mig_mode_pending=NOT_SUPPORTED)
    fams = collect(ModesCollector, one_gpu_state(modes=modes))
    per_mode = {m: value(fams, "runtimekit_gpu_compute_mode", mode=m, **G0) for m in ("default", "exclusive_thread", "prohibited", "exclusive_process")}
    assert per_mode == {"default": 0.0, "exclusive_thread": 0.0, "prohibited": 0.0, "exclusive_process": 1.0}
    assert value(fams, "runtimekit_gpu_persistence_mode", **G0) == 0.0
    assert value(fams, "runtimekit_gpu_mig_mode", state="current", **G0) == 1.0
    assert value(fams, "runtimekit_gpu_mig_mode", state="pending", **G0) is None


def test_info_labels_and_unavailable_label_is_empty():
    identity = dataclasses.replace(make_gpu(0).identity, serial=NOT_SUPPORTED)
    fams = collect(InfoCollector, one_gpu_state(identity=identity))
    info = [s for f in fams for s in f.samples if s.name == "runtimekit_gpu_info"]
    assert len(info) == 1 and info[0].value == 1
    assert info[0].labels == {
        "gpu": "0", "uuid": uuid_for(0), "name": "NVIDIA H100 80GB HBM3", "pci_bus_id": "00000000:18:00.0",
        "serial": "", "vbios_version": "96.00.74.00.01", "driver_version": "550.54.15",
        "cuda_driver_version": "12.4", "architecture": "hopper", "compute_capability": "9.0",
    }
    assert value(fams, "runtimekit_gpu_lost", **G0) == 0.0


def test_xid_counter_per_code():
    state = make_state(make_snapshot(), xids={(0, uuid_for(0), 79): 2, (0, uuid_for(0), 48): 1, (1, uuid_for(1), 13): 5})
    fams = collect(XidCollector, state)
    assert fams[0].type == "counter"
    assert value(fams, "runtimekit_gpu_xid_errors_total", xid="79", **G0) == 2
    assert value(fams, "runtimekit_gpu_xid_errors_total", xid="48", **G0) == 1
    assert value(fams, "runtimekit_gpu_xid_errors_total", gpu="1", xid="13") == 5
    assert collect(XidCollector, make_state(make_snapshot())) == []


# --- Unavailable, lost and vanished ---------------------------------------------------------


def test_unavailable_is_never_exported():
    everything_unavailable = Unavailable("not_supported")
    state = one_gpu_state(utilization=Utilization(*([everything_unavailable] * 4)))
    assert collect(UtilizationCollector, state) == []


def test_lost_gpu_exports_only_info_and_lost():
    state = make_state(make_snapshot((make_lost_gpu(0),)), xids={(0, uuid_for(0), 79): 1})
    for cls in CARD_COLLECTORS:
        assert collect(cls, state) == [], cls.__name__
    fams = collect(InfoCollector, state)
    assert value(fams, "runtimekit_gpu_lost", **G0) == 1.0
    assert value(fams, "runtimekit_gpu_info", **G0) == 1.0
    # XIDs are events, not readings: the one that lost the GPU stays visible.
    assert value(collect(XidCollector, state), "runtimekit_gpu_xid_errors_total", xid="79", **G0) == 1
    self_fams = collect(SelfCollector, state)
    assert value(self_fams, "runtimekit_gpu_reading_errors", **G0) is None


@pytest.mark.parametrize("cls", CARD_COLLECTORS + [InfoCollector])
def test_vanished_gpu_disappears(cls):
    state = make_state(make_snapshot((make_gpu(0), make_gpu(1))))
    before = {s.labels.get("gpu") for f in collect(cls, state) for s in f.samples}
    assert before == {"0", "1"}
    state.publish_snapshot(make_snapshot((make_gpu(0),)), SamplerStats())
    after = {s.labels.get("gpu") for f in collect(cls, state) for s in f.samples}
    assert after == {"0"}


@pytest.mark.parametrize("cls", CARD_COLLECTORS + [InfoCollector, XidCollector])
def test_no_snapshot_yields_nothing(cls):
    assert collect(cls, make_state()) == []


# --- self ------------------------------------------------------------------------------------


def test_self_before_first_snapshot_nvml_down():
    fams = collect(SelfCollector, make_state(), version="9.9.9", python_version="3.11.0")
    assert value(fams, "runtimekit_nvml_up") == 0.0
    assert value(fams, "runtimekit_samples_total") == 0
    assert value(fams, "runtimekit_build_info", version="9.9.9", python_version="3.11.0") == 1
    assert "runtimekit_last_sample_timestamp_seconds" not in names(fams)


def test_self_with_snapshot():
    gpu1 = make_gpu(1, errors=(("power", "NVML_ERROR_UNKNOWN"), ("ecc", "NVML_ERROR_TIMEOUT")))
    state = make_state(make_snapshot((make_gpu(0), gpu1)))
    fams = collect(SelfCollector, state)
    assert value(fams, "runtimekit_nvml_up") == 1.0
    assert value(fams, "runtimekit_last_sample_timestamp_seconds") == SAMPLED_AT  # a timestamp, not an age
    assert value(fams, "runtimekit_sample_duration_seconds") == 0.05
    assert value(fams, "runtimekit_samples_total") == 7
    assert value(fams, "runtimekit_sample_failures_total") == 1
    assert value(fams, "runtimekit_gpus") == 2
    assert value(fams, "runtimekit_gpu_reading_errors", gpu="1") == 2
    assert value(fams, "runtimekit_gpu_reading_errors", gpu="0") == 0


def test_collectors_are_pure_functions_of_the_view():
    """Same view, same families: no clock, no state of their own (a later publication changes nothing
    in a view already taken)."""
    state = make_state(make_snapshot(), xids={(0, uuid_for(0), 79): 1})
    view = state.view()
    for cls in CARD_COLLECTORS + [InfoCollector, XidCollector, SelfCollector]:
        first = samples_of(cls().collect(view))
        state.publish_snapshot(make_snapshot((make_gpu(0, power=None),)), SamplerStats(cycles_total=99))
        assert samples_of(cls().collect(view)) == first, cls.__name__


def samples_of(families):
    return [(s.name, s.labels, s.value) for f in families for s in f.samples]


def test_self_nvml_down_snapshot():
    state = make_state(make_snapshot((), nvml_up=False, nvml_error="NVML_ERROR_DRIVER_NOT_LOADED", driver=None))
    fams = collect(SelfCollector, state)
    assert value(fams, "runtimekit_nvml_up") == 0.0
    assert "runtimekit_gpus" not in names(fams)
