"""A GPU off the bus (XID 79, ``gpu-lost``) stays off it until a reboot: no later XID brings it back
or comes from it, and it cannot be reset (gpu-faults.md §2.3: XID 79 => RESTART_BM, "reset
impossible — device unreachable")."""

import pynvml as N
import pytest

from runtimekit.sim import FaultError


def H(i):
    return N.nvmlDeviceGetHandleByIndex(i)


def _xid_set(gpu):
    es = N.nvmlEventSetCreate()
    N.nvmlDeviceRegisterEvents(H(gpu), N.nvmlEventTypeXidCriticalError | N.nvmlEventTypeDoubleBitEccError, es)
    return es


def _drain(es):
    out = []
    while True:
        try:
            d = N.nvmlEventSetWait_v2(es, 0)
        except N.NVMLError_Timeout:
            return out
        except N.NVMLError_GpuIsLost:
            out.append("lost")
            continue
        out.append(d.eventData)


@pytest.mark.parametrize("later", [13, 31, 48, 79])
def test_a_later_xid_does_not_bring_back_a_gpu_off_the_bus(nvml, node, later):
    es = _xid_set(3)
    node.inject(3, "xid", xid=79)
    with pytest.raises(FaultError, match=r"^gpu: GPU 3 is off the bus .*reboot"):
        node.inject(3, "xid", xid=later)
    with pytest.raises(N.NVMLError_GpuIsLost):
        N.nvmlDeviceGetName(_handle(3))
    assert [f["params"] for f in node.active_faults()] == [{"xid": 79}]
    assert _drain(es) == [79, "lost"]  # the later XID is not delivered
    N.nvmlEventSetFree(es)


def test_no_event_comes_from_a_lost_gpu(nvml, node):
    es = _xid_set(4)
    node.inject(4, "gpu-lost")
    assert _drain(es) == ["lost"]
    with pytest.raises(FaultError, match="^gpu: GPU 4 is off the bus"):
        node.inject(4, "xid", xid=13)
    node.inject(4, "ecc-uncorrectable")  # recorded, but no XID 48 or DBE event from a GPU off the bus
    assert _drain(es) == []
    node.clear(4, "gpu-lost")
    node.inject(4, "xid", xid=13)  # back on the bus (the fault was undone): events flow again
    assert _drain(es) == [13]
    N.nvmlEventSetFree(es)


@pytest.mark.parametrize("fault, params", [("gpu-lost", {}), ("xid", {"xid": 79})])
def test_a_lost_gpu_cannot_be_reset_only_rebooted(nvml, node, fault, params):
    node.inject(2, fault, **params)
    with pytest.raises(FaultError, match=r"^gpu: GPU 2 is off the bus .*cannot be reset.*reboot"):
        node.reset_gpu(2)
    with pytest.raises(N.NVMLError_GpuIsLost):
        N.nvmlDeviceGetPowerUsage(_handle(2))
    assert node.reboot() == 1
    assert N.nvmlDeviceGetPowerUsage(H(2)) > 0
    node.reset_gpu(2)  # back on the bus: a reset works again


def _handle(i):
    """A handle to GPU i made by hand (GetHandleByIndex refuses a lost GPU)."""
    import ctypes

    h = N.c_nvmlDevice_t()
    ctypes.c_void_p.from_buffer(h).value = 0x7E57_0000_1000 + i
    return h


def test_no_mig_instance_xid_from_a_lost_gpu(clock):
    from runtimekit.sim import SimulatedNode, load_scenario

    node = SimulatedNode(load_scenario("dgx-a100"), seed=1, clock=clock, load="idle")
    node.set_mig_mode(0, True)
    node.reset_gpu(0)
    gi = node.create_gpu_instance(0, 19)
    node.inject(0, "xid", xid=79)
    with pytest.raises(FaultError, match=r"^gpu: GPU 0 is off the bus \(XID 79\)"):
        node.inject_instance_xid(0, 43, gi.id)
