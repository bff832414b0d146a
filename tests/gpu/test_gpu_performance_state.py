"""The P-state is 0..15 or Unavailable: NVML_PSTATE_UNKNOWN (32) is never exported as P-state 32."""

from __future__ import annotations

import pynvml
import pytest

from runtimekit.gpu.types import Unavailable
from runtimekit.sim.nvml._base import _out


@pytest.mark.parametrize(("answered", "reading"), [
    (0, 0),
    (15, 15),
    (pynvml.NVML_PSTATE_UNKNOWN, Unavailable("not_supported", "nvmlDeviceGetPerformanceState: NVML_PSTATE_UNKNOWN")),
    (16, Unavailable("error", "nvmlDeviceGetPerformanceState: unknown nvmlPstates_t 16")),
])
def test_a_p_state_outside_0_to_15_is_unavailable(make_node, make_reader, monkeypatch, answered, reading):
    make_node("dgx-h100")

    def performance_state(handle, ref):
        _out(ref, answered)
        return pynvml.NVML_SUCCESS

    monkeypatch.setattr(pynvml.nvmlLib, "nvmlDeviceGetPerformanceState", performance_state)
    gpu = make_reader().sample().gpus[0]
    assert gpu.clocks.performance_state == reading
    failed = isinstance(reading, Unavailable) and reading.reason == "error"  # "not supported" is a fact, not an error
    assert [e for e in gpu.errors if e[0] == "clocks.performance_state"] == ([("clocks.performance_state", reading.detail)] if failed else [])
