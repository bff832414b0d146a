"""Every answered NVML function, driven through pynvml's real public wrappers."""

import ctypes

import pynvml as N
import pytest

from runtimekit.sim import SimulatedNode, install, load_scenario, uninstall

MiB = 1 << 20


def test_system_and_handles(nvml):
    assert N.nvmlSystemGetDriverVersion() == "550.54.15"
    assert N.nvmlSystemGetNVMLVersion() == "12.550.54.15"
    assert N.nvmlSystemGetCudaDriverVersion() == N.nvmlSystemGetCudaDriverVersion_v2() == 12040
    assert N.nvmlDeviceGetCount() == 8
    h = N.nvmlDeviceGetHandleByIndex(5)
    assert N.nvmlDeviceGetIndex(h) == 5 and N.nvmlDeviceGetMinorNumber(h) == 5
    uuid = N.nvmlDeviceGetUUID(h)
    assert uuid == "GPU-b6c581ef-66ef-4431-8a9b-88449c88ba63"
    assert N.nvmlDeviceGetIndex(N.nvmlDeviceGetHandleByUUID(uuid)) == 5
    assert N.nvmlDeviceGetIndex(N.nvmlDeviceGetHandleByPciBusId("00000000:AB:00.0")) == 5
    with pytest.raises(N.NVMLError_NotFound):
        N.nvmlDeviceGetHandleByUUID("GPU-00000000-0000-0000-0000-000000000000")
    with pytest.raises(N.NVMLError_InvalidArgument):
        N.nvmlDeviceGetHandleByIndex(8)


def test_identity(nvml):
    h = N.nvmlDeviceGetHandleByIndex(0)
    assert N.nvmlDeviceGetName(h) == "NVIDIA H100 80GB HBM3"
    pci = N.nvmlDeviceGetPciInfo(h)
    assert pci.busId == "00000000:18:00.0" and pci.bus == 0x18 and pci.pciDeviceId == 0x233010DE
    assert N.nvmlDeviceGetPciInfo_v3(h).busId == "00000000:18:00.0"
    assert N.nvmlDeviceGetSerial(h) == "1654922004210"
    assert N.nvmlDeviceGetVbiosVersion(h) == "96.00.74.00.0D"
    assert N.nvmlDeviceGetBoardPartNumber(h) == "692-2G520-0200-000"
    assert N.nvmlDeviceGetArchitecture(h) == N.NVML_DEVICE_ARCH_HOPPER
    assert N.nvmlDeviceGetCudaComputeCapability(h) == (9, 0)
    assert N.nvmlDeviceGetNumaNodeId(N.nvmlDeviceGetHandleByIndex(6)) == 1
    mask = N.nvmlDeviceGetCpuAffinity(h, 4)
    assert mask[0] == (1 << 56) - 1 and mask[1] == 0xFFFF << 48
    assert N.nvmlDeviceGetPersistenceMode(h) == 1
    assert N.nvmlDeviceGetMigMode(h) == [0, 0]
    assert N.nvmlDeviceGetComputeMode(h) == N.NVML_COMPUTEMODE_DEFAULT


def test_memory(nvml, node):
    h = N.nvmlDeviceGetHandleByIndex(0)
    v2 = N.nvmlDeviceGetMemoryInfo(h, version=N.nvmlMemory_v2)
    assert v2.total == 81559 * MiB and v2.reserved == 588 * MiB
    assert v2.used == sum(p["used_memory_bytes"] for p in node.processes() if p["gpu"] == 0) > 0
    assert v2.free == v2.total - v2.reserved - v2.used
    v1 = N.nvmlDeviceGetMemoryInfo(h)
    assert v1.used == v2.used + v2.reserved and v1.free == v2.free
    bar1 = N.nvmlDeviceGetBAR1MemoryInfo(h)
    assert bar1.bar1Total == 131072 * MiB and bar1.bar1Used + bar1.bar1Free == bar1.bar1Total


def test_live_readings(nvml):
    h = N.nvmlDeviceGetHandleByIndex(2)
    u = N.nvmlDeviceGetUtilizationRates(h)
    assert 85 <= u.gpu <= 100 and 0 < u.memory <= 100
    assert N.nvmlDeviceGetEncoderUtilization(h)[0] == 0 and N.nvmlDeviceGetDecoderUtilization(h)[1] > 0
    assert 400_000 < N.nvmlDeviceGetPowerUsage(h) <= 700_000
    assert N.nvmlDeviceGetEnforcedPowerLimit(h) == N.nvmlDeviceGetPowerManagementLimit(h) == 700_000
    t = N.nvmlDeviceGetTemperature(h, N.NVML_TEMPERATURE_GPU)
    assert 50 < t < 89 and N.nvmlDeviceGetTemperatureV(h, N.NVML_TEMPERATURE_GPU) == t
    th = {k: N.nvmlDeviceGetTemperatureThreshold(h, getattr(N, f"NVML_TEMPERATURE_THRESHOLD_{k}"))
          for k in ("SHUTDOWN", "SLOWDOWN", "MEM_MAX", "GPU_MAX")}
    assert th == {"SHUTDOWN": 92, "SLOWDOWN": 89, "MEM_MAX": 95, "GPU_MAX": 87}
    with pytest.raises(N.NVMLError_NotSupported):
        N.nvmlDeviceGetFanSpeed(h)
    assert N.nvmlDeviceGetMaxClockInfo(h, N.NVML_CLOCK_SM) == 1980
    assert N.nvmlDeviceGetMaxClockInfo(h, N.NVML_CLOCK_MEM) == 2619
    assert 1000 < N.nvmlDeviceGetClockInfo(h, N.NVML_CLOCK_SM) <= 1980
    assert N.nvmlDeviceGetClockInfo(h, N.NVML_CLOCK_GRAPHICS) <= N.nvmlDeviceGetMaxClockInfo(h, N.NVML_CLOCK_GRAPHICS)
    assert N.nvmlDeviceGetPerformanceState(h) == 0
    r = N.nvmlDeviceGetCurrentClocksEventReasons(h)
    assert r == N.nvmlDeviceGetCurrentClocksThrottleReasons(h) and not r & 0x1
    assert N.nvmlDeviceGetPcieThroughput(h, N.NVML_PCIE_UTIL_TX_BYTES) > 0


def test_pcie_ecc_and_rows(nvml):
    h = N.nvmlDeviceGetHandleByIndex(1)
    assert N.nvmlDeviceGetCurrPcieLinkGeneration(h) == N.nvmlDeviceGetMaxPcieLinkGeneration(h) == 5
    assert N.nvmlDeviceGetGpuMaxPcieLinkGeneration(h) == 5
    assert N.nvmlDeviceGetCurrPcieLinkWidth(h) == N.nvmlDeviceGetMaxPcieLinkWidth(h) == 16
    assert N.nvmlDeviceGetPcieReplayCounter(h) == 0
    assert N.nvmlDeviceGetEccMode(h) == [1, 1]
    for e in (N.NVML_MEMORY_ERROR_TYPE_CORRECTED, N.NVML_MEMORY_ERROR_TYPE_UNCORRECTED):
        for c in (N.NVML_VOLATILE_ECC, N.NVML_AGGREGATE_ECC):
            assert N.nvmlDeviceGetTotalEccErrors(h, e, c) >= 0
    with pytest.raises(N.NVMLError_NotSupported):
        N.nvmlDeviceGetRetiredPages(h, N.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
    with pytest.raises(N.NVMLError_NotSupported):
        N.nvmlDeviceGetRetiredPagesPendingStatus(h)
    assert N.nvmlDeviceGetRemappedRows(h) == (0, 0, 0, 0)


def test_nvlink(nvml, node):
    h = N.nvmlDeviceGetHandleByIndex(0)
    remote = [N.nvmlDeviceGetNvLinkRemotePciInfo(h, link).busId for link in range(18)]
    assert [remote.count(f"00000000:0{s}:00.0") for s in (5, 6, 7, 8)] == [4, 5, 5, 4]
    assert {N.nvmlDeviceGetNvLinkRemoteDeviceType(h, link) for link in range(18)} == {N.NVML_NVLINK_DEVICE_TYPE_SWITCH}
    assert all(N.nvmlDeviceGetNvLinkState(h, link) == 1 for link in range(18))
    assert N.nvmlDeviceGetNvLinkErrorCounter(h, 0, N.NVML_NVLINK_ERROR_DL_CRC_DATA) == 0
    with pytest.raises(N.NVMLError_InvalidArgument):
        N.nvmlDeviceGetNvLinkState(h, 18)


def test_field_values(nvml, node, clock):
    h = N.nvmlDeviceGetHandleByIndex(0)
    ids = [N.NVML_FI_DEV_MEMORY_TEMP, N.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, N.NVML_FI_DEV_PCIE_COUNT_RX_BYTES,
           N.NVML_FI_DEV_NVLINK_LINK_COUNT, (N.NVML_FI_DEV_NVLINK_GET_STATE, 3),
           (N.NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY, 3), (N.NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY, 3),
           (N.NVML_FI_DEV_NVLINK_ERROR_DL_CRC, 3), (N.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 3),
           (N.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, 3), 9999, (N.NVML_FI_DEV_NVLINK_GET_STATE, 40)]
    clock.advance(10)
    first = N.nvmlDeviceGetFieldValues(h, ids)
    clock.advance(10)
    second = N.nvmlDeviceGetFieldValues(h, ids)
    rets = [f.nvmlReturn for f in second]
    assert rets[:10] == [0] * 10 and rets[10] == N.NVML_ERROR_NOT_SUPPORTED and rets[11] == N.NVML_ERROR_INVALID_ARGUMENT
    assert second[0].valueType == N.NVML_VALUE_TYPE_UNSIGNED_INT and 40 < second[0].value.uiVal < 100
    assert second[3].value.uiVal == 18 and second[4].value.uiVal == 1
    for i in (1, 2, 8, 9):
        assert second[i].valueType == N.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
        assert second[i].value.ullVal > first[i].value.ullVal >= 0  # time 0 is the first reading
    assert second[0].timestamp - first[0].timestamp == 10_000_000


def test_processes_two_call_protocol(nvml, node):
    h = N.nvmlDeviceGetHandleByIndex(4)
    before = N.nvmlDeviceGetComputeRunningProcesses(h)
    pid = node.add_process(4, 3 << 30, name="trainer")
    procs = N.nvmlDeviceGetComputeRunningProcesses(h)
    assert len(procs) == len(before) + 1
    mine = next(p for p in procs if p.pid == pid)
    assert mine.usedGpuMemory == 3 << 30 and mine.gpuInstanceId == 0xFFFFFFFF
    assert N.nvmlSystemGetProcessName(pid) == "trainer"
    assert N.nvmlDeviceGetGraphicsRunningProcesses(h) == []
    # raw protocol: the first call with no array says how many, INSUFFICIENT_SIZE
    count = ctypes.c_uint(0)
    fn = N._nvmlGetFunctionPointer("nvmlDeviceGetComputeRunningProcesses_v3")
    assert fn(h, ctypes.byref(count), None) == N.NVML_ERROR_INSUFFICIENT_SIZE and count.value == len(procs)
    small = (N.c_nvmlProcessInfo_v3_t * 1)()
    count = ctypes.c_uint(1)
    assert fn(h, ctypes.byref(count), small) == N.NVML_ERROR_INSUFFICIENT_SIZE and count.value == len(procs)
    samples = N.nvmlDeviceGetProcessUtilization(h, 0)
    assert {s.pid for s in samples} == {p.pid for p in procs}
    node.remove_process(pid)
    assert len(N.nvmlDeviceGetComputeRunningProcesses(h)) == len(before)


def test_idle_gpu_has_no_processes_and_idles(clock):
    node = SimulatedNode(load_scenario("dgx-a100"), seed=1, clock=clock, load="idle")
    install(node)
    try:
        N.nvmlInit()
        h = N.nvmlDeviceGetHandleByIndex(2)  # GPUs 0 and 1 start in MIG mode: no whole-GPU utilization there
        assert N.nvmlDeviceGetComputeRunningProcesses(h) == []
        with pytest.raises(N.NVMLError_NotFound):
            N.nvmlDeviceGetProcessUtilization(h, 0)
        assert N.nvmlDeviceGetUtilizationRates(h).gpu == 0
        assert N.nvmlDeviceGetCurrentClocksEventReasons(h) & N.nvmlClocksEventReasonGpuIdle
        assert N.nvmlDeviceGetName(h) == "NVIDIA A100-SXM4-80GB"
        assert N.nvmlDeviceGetArchitecture(h) == N.NVML_DEVICE_ARCH_AMPERE
        assert N.nvmlDeviceGetMemoryInfo(h, version=N.nvmlMemory_v2).used == 0
        with pytest.raises(N.NVMLError_NotSupported):  # GPU 0 is in MIG mode
            N.nvmlDeviceGetUtilizationRates(N.nvmlDeviceGetHandleByIndex(0))
    finally:
        uninstall()


def test_error_mapping(node):
    uninstall()
    install(node)
    with pytest.raises(N.NVMLError_Uninitialized):
        N.nvmlDeviceGetCount()
    N.nvmlInit()
    with pytest.raises(N.NVMLError_FunctionNotFound):
        N.nvmlDeviceGetGpuFabricInfo(N.nvmlDeviceGetHandleByIndex(0), N.c_nvmlGpuFabricInfo_t())
    with pytest.raises(N.NVMLError_InvalidArgument):
        N.nvmlDeviceGetName(N.c_nvmlDevice_t())  # NULL handle
    N.nvmlShutdown()
    with pytest.raises(N.NVMLError_Uninitialized):
        N.nvmlDeviceGetCount()
    uninstall()
    assert N.nvmlLib is None


def test_install_replaces(clock):
    a = SimulatedNode(load_scenario("dgx-h100"), seed=1, clock=clock)
    b = SimulatedNode(load_scenario("dgx-a100"), seed=1, clock=clock)
    try:
        install(a)
        N.nvmlInit()
        assert N.nvmlDeviceGetName(N.nvmlDeviceGetHandleByIndex(0)).startswith("NVIDIA H100")
        install(b)
        N.nvmlInit()
        assert N.nvmlDeviceGetName(N.nvmlDeviceGetHandleByIndex(0)).startswith("NVIDIA A100")
    finally:
        uninstall()
