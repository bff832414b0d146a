"""The agent's supervised components (``runtimekit.supervisor``): up, restarts, last success.

Read from the view's ``components`` topic, which the supervisor publishes on every change, and
from the publication times of the topics the components produce. Times are unix timestamps, so
``time() - runtimekit_component_last_success_timestamp_seconds`` is a staleness that is right
whichever cached exposition is served.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import Metric

from runtimekit.exporter.collectors._common import CardCollector, counter, gauge, nonempty
from runtimekit.exporter.family import Family
from runtimekit.state import ATTRIBUTION, HEALTH, NodeView

# The topic whose publication is each component's success (components without one have no series);
# the sampler's is its last cycle that could use NVML (a cycle with NVML down is published too).
SUCCESS_TOPIC = {"attribution": ATTRIBUTION, "health": HEALTH}


class ComponentsCollector(CardCollector):
    def collect(self, view: NodeView) -> Iterable[Family | Metric]:
        up = gauge(
            "runtimekit_component_up",
            "1 while the supervised component runs, 0 while it is down (died and waiting to be restarted).",
            labels=("component",),
        )
        restarts = counter(
            "runtimekit_component_restarts_total",
            "Times the component died (raised, returned or failed to start) and was restarted by the supervisor.",
            labels=("component",),
            sampled=False,
        )
        success = gauge(
            "runtimekit_component_last_success_timestamp_seconds",
            "Unix time of the component's last success (sampler: the start of its last cycle that could use "
            "NVML; attribution: a refresh; health: a verdict).",
            labels=("component",),
            unit="seconds",
        )
        for name, status in view.components.items():
            up.add_metric([name], 1.0 if status.up else 0.0)
            restarts.add_metric([name], float(status.restarts_total))
            topic = SUCCESS_TOPIC.get(name)
            if topic is not None and topic in view.published_at:
                success.add_metric([name], view.published_at[topic])
            elif name == "sampler" and view.sampler.last_success_at is not None:
                success.add_metric([name], view.sampler.last_success_at)
        yield from nonempty(up, restarts, success)
