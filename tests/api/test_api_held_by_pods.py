"""runtimekit.v1 Device.held_by_pods: the pods the kubelet allocated a GPU to, whole or as a
time-slicing replica ("GPU-…::N"), as attribution resolves pod-resources rows
(``AttributionSnapshot.held_whole``); "namespace/name", sorted, each once; empty while the kubelet
source is down. The conversion alone (convert.py) over a real NodeState (api_fakes.py)."""

from __future__ import annotations

import pytest
from api_fakes import gpu_ref, make_state, uuid_for

from runtimekit.api.convert import mode_device, node_message
from runtimekit.attribution.join import resolve_allocations
from runtimekit.attribution.types import AttributionSnapshot, Owner, SourceStatus
from runtimekit.state import NodeState
from runtimekit.state.slices import DeviceModeInfo


def allocate(state: NodeState, *, kubelet_up: bool = True) -> None:
    """GPU 0 whole to ml/trainer-0; GPU 1 as three replicas, two to ml/infer-0's containers and one
    to batch/eval-3; GPU 2 to nobody."""
    rows = [(Owner("ml", "trainer-0", "main", "uid-trainer"), "nvidia.com/gpu", uuid_for(0)),
            (Owner("ml", "infer-0", "server", "uid-infer"), "nvidia.com/gpu.shared", f"{uuid_for(1)}::0"),
            (Owner("ml", "infer-0", "sidecar", "uid-infer"), "nvidia.com/gpu.shared", f"{uuid_for(1)}::1"),
            (Owner("batch", "eval-3", "main", "uid-eval"), "nvidia.com/gpu.shared", f"{uuid_for(1)}::2")]
    state.publish_attribution(AttributionSnapshot(
        refreshed_at=0.0, allocations=resolve_allocations(rows, state.view().snapshot),
        sources={"kubelet": SourceStatus(up=kubelet_up)}))


@pytest.mark.parametrize(("kubelet_up", "held"), [
    (True, [["ml/trainer-0"], ["batch/eval-3", "ml/infer-0"], []]),
    (False, [[], [], []]),  # what the kubelet last said may be stale: unknown, not held
], ids=["kubelet-up", "kubelet-down"])
def test_get_node_lists_the_pods_holding_each_gpu_whole_or_as_replicas(kubelet_up: bool, held: list[list[str]]) -> None:
    state = make_state(gpus=3)
    allocate(state, kubelet_up=kubelet_up)
    node = node_message(state.view(), slicer_enabled=True)
    assert [list(device.held_by_pods) for device in node.devices] == held


def test_without_attribution_no_gpu_is_held() -> None:
    node = node_message(make_state(gpus=2).view(), slicer_enabled=True)
    assert [list(device.held_by_pods) for device in node.devices] == [[], []]


def test_the_device_set_device_mode_answers_lists_its_pods() -> None:
    state = make_state(gpus=3)
    allocate(state)
    info = DeviceModeInfo(gpu_ref(1), "tdm", mig_capable=True, memory_mib=81920)
    assert list(mode_device(state.view(), info).held_by_pods) == ["batch/eval-3", "ml/infer-0"]
