"""Faults whose signals move together on real hardware, observed through pynvml.

A contained uncorrectable ECC error (gpu-faults.md §2.2): ECC counters, row remapping and XID 94
together; an NVLink CRC error and its replay (§2.3); the hardware clock-event reason bits.
"""

import pynvml as N
import pytest

from runtimekit.sim import FaultError, SimulatedNode, load_scenario

UNC, VOL, AGG = N.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, N.NVML_VOLATILE_ECC, N.NVML_AGGREGATE_ECC


def H(i):
    return N.nvmlDeviceGetHandleByIndex(i)


def _events(h, mask):
    es = N.nvmlEventSetCreate()
    N.nvmlDeviceRegisterEvents(h, mask, es)
    return es


def _drain(es):
    out = []
    while True:
        try:
            d = N.nvmlEventSetWait_v2(es, 0)
        except N.NVMLError_Timeout:
            return out
        out.append((d.eventType, d.eventData))


def test_ecc_contained_moves_counters_remaps_and_sends_xid_94(nvml, node):
    h = H(1)
    es = _events(h, N.nvmlEventTypeXidCriticalError | N.nvmlEventTypeDoubleBitEccError)
    assert N.nvmlDeviceGetRemappedRows(h) == (0, 0, 0, 0)
    fault = node.inject(1, "ecc-contained", count=2)
    assert fault["params"] == {"count": 2}
    assert N.nvmlDeviceGetTotalEccErrors(h, UNC, VOL) == 2
    assert N.nvmlDeviceGetTotalEccErrors(h, UNC, AGG) == 2
    corr, unc, pending, failure = N.nvmlDeviceGetRemappedRows(h)
    assert (corr, unc, pending, failure) == (0, 2, 1, 0)
    events = _drain(es)
    assert (N.nvmlEventTypeXidCriticalError, 94) in events
    assert (N.nvmlEventTypeDoubleBitEccError, 0) in events
    xids = [d for t, d in events if t == N.nvmlEventTypeXidCriticalError]
    assert xids == [94, 63]  # contained error first, then the row remap it recorded
    N.nvmlEventSetFree(es)
    # Other GPUs are untouched.
    assert N.nvmlDeviceGetTotalEccErrors(H(0), UNC, VOL) == 0


def test_ecc_contained_default_count_and_clear_keeps_counters(nvml, node):
    h = H(2)
    node.inject(2, "ecc-contained")
    assert N.nvmlDeviceGetTotalEccErrors(h, UNC, VOL) == 1
    assert N.nvmlDeviceGetRemappedRows(h) == (0, 1, 1, 0)
    assert node.clear(2, "ecc-contained") == 1
    assert N.nvmlDeviceGetRemappedRows(h) == (0, 1, 0, 0)  # remap count is permanent
    assert N.nvmlDeviceGetTotalEccErrors(h, UNC, AGG) == 1


def test_bare_xid_94_moves_no_counter(nvml, node):
    """The ``xid`` fault stays "an XID with no counter movement" (unexplained events)."""
    h = H(3)
    es = _events(h, N.nvmlEventTypeXidCriticalError)
    node.inject(3, "xid", xid=94)
    assert _drain(es) == [(N.nvmlEventTypeXidCriticalError, 94)]
    assert N.nvmlDeviceGetTotalEccErrors(h, UNC, VOL) == 0
    assert N.nvmlDeviceGetRemappedRows(h) == (0, 0, 0, 0)
    N.nvmlEventSetFree(es)


def test_ecc_contained_refused_without_row_remapping(clock):
    node = SimulatedNode(load_scenario("dgx-h100"), seed=1, clock=clock)
    model = node.gpu(0).model
    object.__setattr__(model, "row_remapping", False)  # a pre-Ampere part (frozen dataclass)
    try:
        with pytest.raises(FaultError, match="row remapping"):
            node.inject(0, "ecc-contained")
    finally:
        object.__setattr__(model, "row_remapping", True)


def test_nvlink_crc_errors_are_replayed(nvml, node, clock):
    """``rate`` CRC errors a second: each one a flit OR a data CRC error, each followed by one replay."""
    h = H(6)
    node.inject(6, "nvlink-crc", rate=500, link=3)
    clock.advance(4)
    flit = N.nvmlDeviceGetNvLinkErrorCounter(h, 3, N.NVML_NVLINK_ERROR_DL_CRC_FLIT)
    data = N.nvmlDeviceGetNvLinkErrorCounter(h, 3, N.NVML_NVLINK_ERROR_DL_CRC_DATA)
    replay = N.nvmlDeviceGetNvLinkErrorCounter(h, 3, N.NVML_NVLINK_ERROR_DL_REPLAY)
    assert flit + data == 2000 and flit > 0 and data > 0  # 500/s for 4 s, counted once
    assert replay == 2000
    assert N.nvmlDeviceGetNvLinkErrorCounter(h, 3, N.NVML_NVLINK_ERROR_DL_RECOVERY) == 0
    assert N.nvmlDeviceGetNvLinkErrorCounter(h, 2, N.NVML_NVLINK_ERROR_DL_REPLAY) == 0
    fv = N.nvmlDeviceGetFieldValues(h, [(N.NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY, 3), (N.NVML_FI_DEV_NVLINK_ERROR_DL_CRC, 3),
                                        (N.NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL, 0),
                                        (N.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL, 0),
                                        (N.NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL, 0)])
    assert [f.value.ullVal for f in fv] == [2000, flit, 2000, flit, data]  # DL_CRC per link: the flit counter


def test_nvlink_recovery_is_separate(nvml, node):
    h = H(4)
    node.inject(4, "nvlink-recovery", link=1, count=2)
    assert N.nvmlDeviceGetNvLinkErrorCounter(h, 1, N.NVML_NVLINK_ERROR_DL_RECOVERY) == 2
    assert N.nvmlDeviceGetNvLinkErrorCounter(h, 1, N.NVML_NVLINK_ERROR_DL_REPLAY) == 0
    assert N.nvmlDeviceGetNvLinkErrorCounter(h, 1, N.NVML_NVLINK_ERROR_DL_CRC_FLIT) == 0
    fv = N.nvmlDeviceGetFieldValues(h, [(N.NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY, 1)])
    assert fv[0].value.ullVal == 2


@pytest.mark.parametrize("kind, required, forbidden", [("power-brake", 0x8 | 0x80, 0x40), ("thermal-slowdown", 0x8 | 0x40, 0x80)])
def test_hardware_slowdown_reason_bits(nvml, node, kind, required, forbidden):
    node.inject(5, kind)
    reasons = N.nvmlDeviceGetCurrentClocksEventReasons(H(5))
    assert reasons & required == required and not reasons & forbidden


@pytest.mark.parametrize("kind", ["row-remap-pending", "row-remap-failure", "ecc-contained"])
def test_row_remap_kinds_refused_without_row_remapping(clock, kind):
    """dgx-2's V100s retire pages; nvmlDeviceGetRemappedRows is NOT_SUPPORTED there."""
    node = SimulatedNode(load_scenario("dgx-2"), seed=1, clock=clock)
    with pytest.raises(FaultError, match=rf"^fault: {kind} needs row remapping .*Tesla V100"):
        node.inject(0, kind)
    assert node.active_faults() == [] and node.remapped_rows(0) == (0, 0, 0, 0)


def test_remapped_rows_stop_at_the_remapper_capacity_and_the_rest_fail(nvml, node):
    """512 rows a GPU (8 per bank, MEM row-remapping): an error past them cannot be remapped, so the
    remap fails (failureOccurred, XID 64); the ECC counters still count every error."""
    h = H(1)
    es = _events(h, N.nvmlEventTypeXidCriticalError)
    node.inject(1, "ecc-contained", count=500)
    assert _drain(es) == [(N.nvmlEventTypeXidCriticalError, 94), (N.nvmlEventTypeXidCriticalError, 63)]
    node.inject(1, "ecc-contained", count=20)
    assert N.nvmlDeviceGetRemappedRows(h) == (0, 512, 1, 1)
    assert [d for _, d in _drain(es)] == [94, 63, 64]
    node.inject(1, "ecc-contained", count=512)
    assert N.nvmlDeviceGetRemappedRows(h) == (0, 512, 1, 1)
    assert [d for _, d in _drain(es)] == [94, 64]  # nothing recorded: no XID 63
    node.inject(1, "row-remap-pending")
    assert N.nvmlDeviceGetRemappedRows(h) == (0, 512, 1, 1)
    assert N.nvmlDeviceGetTotalEccErrors(h, UNC, AGG) == 1032
    N.nvmlEventSetFree(es)


def test_nvlink_fault_on_a_gpu_without_nvlink_says_so(clock):
    node = SimulatedNode(load_scenario("pcie-inference"), seed=1, clock=clock)
    for kind in ("nvlink-down", "nvlink-crc", "nvlink-recovery"):
        with pytest.raises(FaultError, match=rf"^fault: {kind} needs NVLink; GPU 0 \(NVIDIA L40S\) has none"):
            node.inject(0, kind)
    assert node.active_faults() == []
