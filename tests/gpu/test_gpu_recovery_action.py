"""The driver's announced recovery action (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, with XID 154),
read in the cycle's one batched field-values call."""

from __future__ import annotations

import pytest


def test_no_action_is_none_on_every_gpu(make_node, make_reader) -> None:
    make_node("dgx-h100")
    snapshot = make_reader().sample()
    assert {gpu.recovery_action for gpu in snapshot.gpus} == {"none"}


@pytest.mark.parametrize("action", ["gpu_reset", "node_reboot", "drain_p2p", "drain_and_reset"])
def test_an_announced_action_is_read_on_its_gpu_only(make_node, make_reader, clock, action) -> None:
    node = make_node("dgx-h100")
    reader = make_reader()
    node.inject(4, "recovery-action", action=action)
    clock.advance(1.0)
    gpus = reader.sample().gpus
    assert gpus[4].recovery_action == action
    assert all(gpu.recovery_action == "none" for gpu in gpus if gpu.index != 4)
    node.clear(4)
    clock.advance(1.0)
    assert reader.sample().gpus[4].recovery_action == "none"
