"""nvmlEventSetWait_v2: injected XIDs arrive promptly; timeouts otherwise."""

import threading
import time

import pynvml as N
import pytest


def test_wait_times_out_when_nothing_came(nvml):
    es = N.nvmlEventSetCreate()
    N.nvmlDeviceRegisterEvents(N.nvmlDeviceGetHandleByIndex(0), N.nvmlEventTypeXidCriticalError, es)
    start = time.monotonic()
    with pytest.raises(N.NVMLError_Timeout):
        N.nvmlEventSetWait_v2(es, 50)
    assert 0.045 <= time.monotonic() - start < 0.5
    N.nvmlEventSetFree(es)


def test_injected_xid_wakes_a_waiter_promptly(nvml, node):
    h = N.nvmlDeviceGetHandleByIndex(4)
    assert N.nvmlDeviceGetSupportedEventTypes(h) & N.nvmlEventTypeXidCriticalError
    es = N.nvmlEventSetCreate()
    N.nvmlDeviceRegisterEvents(h, N.nvmlEventTypeXidCriticalError, es)
    got = {}

    def waiter():
        data = N.nvmlEventSetWait_v2(es, 5000)
        got["at"] = time.monotonic()
        got["data"] = data

    t = threading.Thread(target=waiter)
    t.start()
    time.sleep(0.05)
    sent = time.monotonic()
    node.inject(4, "xid", xid=31)
    t.join(2)
    assert got["at"] - sent < 0.1
    d = got["data"]
    assert d.eventType == N.nvmlEventTypeXidCriticalError and d.eventData == 31
    assert N.nvmlDeviceGetIndex(d.device) == 4
    assert d.gpuInstanceId == d.computeInstanceId == 0xFFFFFFFF
    N.nvmlEventSetFree(es)


def test_events_only_for_registered_gpus_and_lost_once(nvml, node):
    es = N.nvmlEventSetCreate()
    N.nvmlDeviceRegisterEvents(N.nvmlDeviceGetHandleByIndex(1), N.nvmlEventTypeXidCriticalError, es)
    node.inject(0, "xid", xid=13)  # not registered
    node.inject(1, "row-remap-failure")
    assert N.nvmlEventSetWait_v2(es, 10).eventData == 64
    node.inject(1, "xid", xid=79)
    assert N.nvmlEventSetWait_v2(es, 10).eventData == 79
    with pytest.raises(N.NVMLError_GpuIsLost):
        N.nvmlEventSetWait_v2(es, 10)
    with pytest.raises(N.NVMLError_Timeout):
        N.nvmlEventSetWait_v2(es, 10)
    N.nvmlEventSetFree(es)
    with pytest.raises(N.NVMLError_InvalidArgument):
        N.nvmlEventSetWait_v2(es, 10)


def test_unsupported_event_types_are_refused(nvml):
    es = N.nvmlEventSetCreate()
    with pytest.raises(N.NVMLError_NotSupported):
        N.nvmlDeviceRegisterEvents(N.nvmlDeviceGetHandleByIndex(0), N.nvmlEventTypeAll, es)
