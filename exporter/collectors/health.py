"""The health checker's verdict (``NodeState.health``) as metric families.

Health states are exported the Prometheus way for enums, like the compute mode: one series per
state, 1 for the current one and 0 for the others. ``runtimekit_gpu_health{state="unhealthy"} == 1``
reads plainly and alerts directly; a numeric code would need a lookup table in every query and
would suggest an order (is "recovering" better or worse than "suspect"?) that comparisons with
``>`` would then silently rely on. The label set is fixed (4 states) and small.

Active faults are a 0/1 gauge present only while the fault is held (a cleared fault leaves the
exposition); fault events and state transitions are counters — "how often", never a last value
(gpu-faults.md §7.6). Counters are kept by the health store, so they survive agent restarts.
Node-level faults (NVML down, fewer GPUs than expected, the checker failing: ``health_check_failed``)
have their own families without GPU labels. Active faults carry the fault policy's ``action`` and
``class`` labels, on which the alert rules route. Retired GPUs (replaced or gone for good) are not
in the verdict, so each GPU index has one ``runtimekit_gpu_health`` series set. Everything is
absent until the checker's first evaluation.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import Metric

from runtimekit.exporter.collectors._common import GPU_LABELS, CardCollector, counter, gauge, nonempty, policy_labels, unique_faults
from runtimekit.exporter.family import Family
from runtimekit.state import NodeView
from runtimekit.state.health import STATES  # the base's vocabulary: one order of states

FAULT_LABELS = (*GPU_LABELS, "fault", "severity")
# The active-fault gauges also carry the fault policy's action and class (healthcheck/policy.yaml):
# alert rules route on them (action="replace_node", class="power", ...) instead of copying the policy.
ACTIVE_LABELS = (*FAULT_LABELS, "action", "class")
NODE_ACTIVE_LABELS = ("fault", "severity", "action", "class")


class HealthCollector(CardCollector):
    def collect(self, view: NodeView) -> Iterable[Family | Metric]:
        health = view.health
        if health is None:
            return
        gpu_state = gauge(
            "runtimekit_gpu_health",
            "1 for the GPU's health state (healthy, suspect, unhealthy, recovering), 0 for the others.",
            labels=(*GPU_LABELS, "state"),
        )
        active = gauge(
            "runtimekit_gpu_fault_active",
            "1 while the health checker holds the fault on the GPU (absent once cleared); action and class "
            "are the fault policy's.",
            labels=ACTIVE_LABELS,
        )
        events = counter(
            "runtimekit_gpu_fault_events_total",
            "Times the fault became active on the GPU at this severity (kept across agent restarts).",
            labels=FAULT_LABELS,
            sampled=False,
        )
        transitions = counter(
            "runtimekit_health_transitions_total",
            "GPU health state transitions (kept across agent restarts).",
            labels=(*GPU_LABELS, "from", "to"),
            sampled=False,
        )
        node = gauge(
            "runtimekit_node_health",
            "1 for the node's health state (the worst of its GPUs and node-level faults), 0 for the others.",
            labels=("state",),
        )
        node_active = gauge(
            "runtimekit_node_fault_active",
            "1 while the health checker holds the node-level fault (NVML down, GPUs missing, checker failing: "
            "health_check_failed); action and class are the fault policy's.",
            labels=NODE_ACTIVE_LABELS,
        )
        node_events = counter(
            "runtimekit_node_fault_events_total",
            "Times the node-level fault became active at this severity (kept across agent restarts).",
            labels=("fault", "severity"),
            sampled=False,
        )
        seconds = gauge(
            "runtimekit_health_evaluation_seconds",
            "CPU seconds the detectors took in the last health evaluation.",
            labels=(), unit="seconds",
        )
        index_of = {}
        for gpu in health.gpus:
            labels = [str(gpu.index), gpu.uuid]
            index_of[gpu.uuid] = labels[0]
            for state in STATES:
                gpu_state.add_metric([*labels, state], 1.0 if state == gpu.state else 0.0)
            for held in unique_faults(gpu.faults):
                active.add_metric([*labels, *policy_labels(held)], 1.0)
        for state in STATES:
            node.add_metric([state], 1.0 if state == health.state else 0.0)
        for held in unique_faults(health.faults):
            node_active.add_metric(policy_labels(held), 1.0)
        for (fault, severity), count in sorted(health.node_fault_events_total.items()):
            node_events.add_metric([fault, severity], float(count))
        for (uuid, fault, severity), count in sorted(health.fault_events_total.items()):
            if uuid in index_of:
                events.add_metric([index_of[uuid], uuid, fault, severity], float(count))
        for (uuid, before, after), count in sorted(health.transitions_total.items()):
            if uuid in index_of:
                transitions.add_metric([index_of[uuid], uuid, before, after], float(count))
        seconds.add_metric([], health.detector_seconds)
        yield from nonempty(gpu_state, active, events, transitions, node, node_active, node_events, seconds)
