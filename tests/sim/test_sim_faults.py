"""Each fault kind and its clear, observed through pynvml."""

import pynvml as N
import pytest

from runtimekit.sim import FAULT_KINDS, FaultError


def H(i):
    return N.nvmlDeviceGetHandleByIndex(i)


def test_every_kind_has_a_test():
    assert set(FAULT_KINDS) == {
        "xid", "ecc-uncorrectable", "row-remap-pending", "row-remap-failure", "gpu-lost", "nvlink-down",
        "nvlink-crc", "compute-mode", "memory-leak", "driver-error", "thermal-slowdown", "power-brake",
        "pcie-downtrain", "ecc-contained", "nvlink-recovery", "recovery-action", "pcie-replays", "inforom-corrupt",
    }  # ecc-contained, nvlink-recovery and the NVLink replay coupling: test_sim_fault_couplings.py;
    # recovery-action: tests/gpu/test_gpu_recovery_action.py and test_recovery_action_delivers_xid_154 here


def test_recovery_action_delivers_xid_154(nvml, node):
    event_set = N.nvmlEventSetCreate()
    N.nvmlDeviceRegisterEvents(H(3), N.nvmlEventTypeXidCriticalError, event_set)
    node.inject(3, "recovery-action", action="node_reboot")
    data = N.nvmlEventSetWait(event_set, 100)
    assert data.eventData == 154
    with pytest.raises(FaultError, match="params.action"):
        node.inject(3, "recovery-action", action="format_disk")


def test_gpu_lost_only_that_gpu_and_clear(nvml, node):
    fault = node.inject(2, "gpu-lost")
    assert fault == {"gpu": 2, "fault": "gpu-lost", "params": {}, "since_s": 0.0}
    h2 = H(0)  # handles taken before stay valid for the others
    with pytest.raises(N.NVMLError_GpuIsLost):
        N.nvmlDeviceGetPowerUsage(_handle(2))
    with pytest.raises(N.NVMLError_GpuIsLost):
        H(2)
    assert N.nvmlDeviceGetCount() == 8
    assert N.nvmlDeviceGetPowerUsage(h2) > 0
    assert node.clear(2, "gpu-lost") == 1
    assert N.nvmlDeviceGetPowerUsage(H(2)) > 0


def _handle(i):
    """A handle to GPU i made by hand (GetHandleByIndex refuses a lost GPU, as nvml.h says)."""
    import ctypes

    h = N.c_nvmlDevice_t()
    ctypes.c_void_p.from_buffer(h).value = 0x7E57_0000_1000 + i
    return h


def test_xid_79_loses_the_gpu(nvml, node):
    h = H(3)
    node.inject(3, "xid", xid=79)
    with pytest.raises(N.NVMLError_GpuIsLost):
        N.nvmlDeviceGetName(h)
    node.clear(3)
    assert N.nvmlDeviceGetName(h).startswith("NVIDIA")
    node.inject(3, "xid", xid=13)
    assert N.nvmlDeviceGetName(h).startswith("NVIDIA")


def test_ecc_uncorrectable_counts_and_stays(nvml, node):
    h = H(1)
    node.inject(1, "ecc-uncorrectable", count=3)
    node.inject(1, "ecc-uncorrectable")
    for c in (N.NVML_VOLATILE_ECC, N.NVML_AGGREGATE_ECC):
        assert N.nvmlDeviceGetTotalEccErrors(h, N.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, c) == 4
    assert node.clear(1, "ecc-uncorrectable") == 1
    assert N.nvmlDeviceGetTotalEccErrors(h, N.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, N.NVML_VOLATILE_ECC) == 4


def test_row_remap_pending_and_failure(nvml, node):
    h = H(0)
    node.inject(0, "row-remap-pending")
    assert N.nvmlDeviceGetRemappedRows(h) == (0, 1, 1, 0)
    node.inject(0, "row-remap-failure")
    assert N.nvmlDeviceGetRemappedRows(h) == (0, 1, 1, 1)
    assert node.clear(0) == 2
    assert N.nvmlDeviceGetRemappedRows(h) == (0, 1, 0, 0)


def test_nvlink_down_stops_that_link(nvml, node, clock):
    h = H(5)
    node.inject(5, "nvlink-down", link=4)
    assert N.nvmlDeviceGetNvLinkState(h, 4) == 0 and N.nvmlDeviceGetNvLinkState(h, 3) == 1
    ids = [(N.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 4), (N.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 3),
           (N.NVML_FI_DEV_NVLINK_GET_STATE, 4)]
    a = N.nvmlDeviceGetFieldValues(h, ids)
    clock.advance(5)
    b = N.nvmlDeviceGetFieldValues(h, ids)
    assert b[0].value.ullVal == a[0].value.ullVal and b[1].value.ullVal > a[1].value.ullVal
    assert b[2].value.uiVal == 0
    node.clear(5, "nvlink-down")
    assert N.nvmlDeviceGetNvLinkState(h, 4) == 1


def test_nvlink_crc_grows_at_rate(nvml, node, clock):
    h = H(6)
    node.inject(6, "nvlink-crc", rate=1000, link=2)
    clock.advance(3)
    assert N.nvmlDeviceGetNvLinkErrorCounter(h, 2, N.NVML_NVLINK_ERROR_DL_CRC_FLIT) == 1500  # 3000 CRC errors,
    assert N.nvmlDeviceGetNvLinkErrorCounter(h, 2, N.NVML_NVLINK_ERROR_DL_CRC_DATA) == 1500  # each flit or data
    fv = N.nvmlDeviceGetFieldValues(h, [(N.NVML_FI_DEV_NVLINK_ERROR_DL_CRC, 2), (N.NVML_FI_DEV_NVLINK_ERROR_DL_CRC, 1)])
    assert (fv[0].value.ullVal, fv[1].value.ullVal) == (1500, 0)  # per link, DL_CRC is the flit counter
    node.clear(6, "nvlink-crc")
    clock.advance(3)
    assert N.nvmlDeviceGetNvLinkErrorCounter(h, 2, N.NVML_NVLINK_ERROR_DL_CRC_FLIT) == 1500  # stays, stops


def test_pcie_replays_grow_at_rate_and_stay(nvml, node, clock):
    h = H(4)
    assert N.nvmlDeviceGetPcieReplayCounter(h) == 0
    node.inject(4, "pcie-replays", rate=2.5)
    clock.advance(4)
    assert (N.nvmlDeviceGetPcieReplayCounter(h), N.nvmlDeviceGetPcieReplayCounter(H(5))) == (10, 0)
    node.clear(4, "pcie-replays")
    clock.advance(4)
    assert N.nvmlDeviceGetPcieReplayCounter(h) == 10  # a counter: stops, never goes back


def test_inforom_corrupt_fails_its_validation_on_that_gpu_only(nvml, node):
    assert N.nvmlDeviceValidateInforom(H(5)) is None
    node.inject(5, "inforom-corrupt")
    with pytest.raises(N.NVMLError_CorruptedInforom):
        N.nvmlDeviceValidateInforom(H(5))
    assert N.nvmlDeviceValidateInforom(H(4)) is None
    node.clear(5, "inforom-corrupt")
    assert N.nvmlDeviceValidateInforom(H(5)) is None


def test_compute_mode(nvml, node):
    node.inject(7, "compute-mode", mode="prohibited")
    assert N.nvmlDeviceGetComputeMode(H(7)) == N.NVML_COMPUTEMODE_PROHIBITED
    node.inject(7, "compute-mode", mode="exclusive-process")
    assert N.nvmlDeviceGetComputeMode(H(7)) == N.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS
    node.clear(7, "compute-mode")
    assert N.nvmlDeviceGetComputeMode(H(7)) == N.NVML_COMPUTEMODE_DEFAULT


def test_memory_leak(nvml, node):
    h = H(6)
    before = N.nvmlDeviceGetMemoryInfo(h, version=N.nvmlMemory_v2).used
    node.inject(6, "memory-leak", bytes=8 << 30)
    assert N.nvmlDeviceGetMemoryInfo(h, version=N.nvmlMemory_v2).used == before + (8 << 30)
    procs = N.nvmlDeviceGetComputeRunningProcesses(h)
    assert sum(p.usedGpuMemory for p in procs) == before
    node.clear(6, "memory-leak")
    assert N.nvmlDeviceGetMemoryInfo(h, version=N.nvmlMemory_v2).used == before


@pytest.mark.parametrize("error, exc", [("unknown", N.NVMLError_Unknown), ("timeout", N.NVMLError_Timeout),
                                        ("driver-not-loaded", N.NVMLError_DriverNotLoaded)])
def test_driver_error(nvml, node, error, exc):
    h = H(0)
    node.inject(0, "driver-error", error=error)
    with pytest.raises(exc):
        N.nvmlDeviceGetPowerUsage(h)
    assert N.nvmlDeviceGetPowerUsage(H(1)) > 0
    node.clear(0)
    assert N.nvmlDeviceGetPowerUsage(h) > 0


def test_thermal_slowdown(nvml, node):
    h = H(1)
    sm = N.nvmlDeviceGetClockInfo(h, N.NVML_CLOCK_SM)
    node.inject(1, "thermal-slowdown")
    r = N.nvmlDeviceGetCurrentClocksEventReasons(h)
    assert r & 0x8 and r & 0x40
    assert N.nvmlDeviceGetTemperature(h, 0) >= 87
    assert N.nvmlDeviceGetClockInfo(h, N.NVML_CLOCK_SM) < sm
    node.clear(1)
    assert not N.nvmlDeviceGetCurrentClocksEventReasons(h) & 0x48


def test_power_brake(nvml, node):
    h = H(2)
    sm = N.nvmlDeviceGetClockInfo(h, N.NVML_CLOCK_SM)
    node.inject(2, "power-brake")
    r = N.nvmlDeviceGetCurrentClocksEventReasons(h)
    assert r & 0x8 and r & 0x80 and N.nvmlDeviceGetClockInfo(h, N.NVML_CLOCK_SM) < sm
    node.clear(2, "power-brake")
    assert not N.nvmlDeviceGetCurrentClocksEventReasons(h) & 0x88


def test_pcie_downtrain(nvml, node):
    h = H(3)
    f = node.inject(3, "pcie-downtrain")
    assert f["params"] == {"width": 8, "gen": 4}
    assert (N.nvmlDeviceGetCurrPcieLinkGeneration(h), N.nvmlDeviceGetCurrPcieLinkWidth(h)) == (4, 8)
    assert N.nvmlDeviceGetMaxPcieLinkWidth(h) == 16
    node.clear(3)
    assert (N.nvmlDeviceGetCurrPcieLinkGeneration(h), N.nvmlDeviceGetCurrPcieLinkWidth(h)) == (5, 16)


@pytest.mark.parametrize(
    "gpu, kind, params, message",
    [
        (8, "gpu-lost", {}, "gpu: .* 0..7"),
        (0, "meteor", {}, "fault: unknown kind"),
        (0, "xid", {}, "params.xid: required"),
        (0, "xid", {"xid": 0}, "params.xid: .* 1..999"),
        (0, "xid", {"xid": "79"}, "params.xid"),
        (0, "compute-mode", {"mode": "sideways"}, "params.mode: .* one of default, prohibited, exclusive-process"),
        (0, "nvlink-down", {"link": 18}, "params.link: .*0..17"),
        (0, "driver-error", {"error": "boom"}, "params.error: .*one of unknown"),
        (0, "pcie-downtrain", {"gen": 6}, "params.gen"),
        (0, "memory-leak", {"size": 1}, "params.size: not a parameter"),
    ],
)
def test_bad_injection_names_the_parameter_and_changes_nothing(node, gpu, kind, params, message):
    with pytest.raises(FaultError, match=message):
        node.inject(gpu, kind, **params)
    assert node.active_faults() == []


def test_active_faults_and_clear_counts(node):
    node.inject(0, "nvlink-down", link=1)
    node.inject(0, "nvlink-down", link=2)
    node.inject(1, "power-brake")
    assert [(f["gpu"], f["fault"]) for f in node.active_faults()] == [(0, "nvlink-down")] * 2 + [(1, "power-brake")]
    assert node.clear(0, "nvlink-down") == 2
    assert node.clear(0) == 0
    with pytest.raises(FaultError, match="fault: unknown kind"):
        node.clear(0, "meteor")


def test_parameters_are_schema_keys_and_their_defaults_are_valid():
    """Each parameter is one runtimekit.schema Key (type, default, doc, range or choices), and
    validate_params goes through it: defaults pass, JSON's 3.0 is an integer, a boolean is no number."""
    from runtimekit.schema import Key, validate
    from runtimekit.sim.faults import validate_params

    for spec in FAULT_KINDS.values():
        for p in spec.params:
            assert isinstance(p.key, Key) and p.help and p.type in (int, float, str)
            if p.default is not None:
                assert validate(spec.schema(), f"params.{p.name}", p.default) == p.default
    assert validate_params("ecc-uncorrectable", {"count": 3.0}) == {"count": 3}
    assert validate_params("nvlink-crc", {"rate": 5}) == {"rate": 5.0, "link": 0}
    with pytest.raises(FaultError, match=r"params\.count: got True; must be an integer in 1\.\.1000000"):
        validate_params("ecc-uncorrectable", {"count": True})
    with pytest.raises(FaultError, match=r"params\.rate: got nan; must be a number in 0\.\.1000000000"):
        validate_params("nvlink-crc", {"rate": float("nan")})
    with pytest.raises(FaultError, match="params: must be an object"):
        validate_params("xid", [79])  # type: ignore[arg-type]
