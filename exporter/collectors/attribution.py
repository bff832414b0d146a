"""Attribution health: which sources (kubelet pod-resources, the CRI runtime, /proc) answered, and
when the published attribution was last refreshed. Also the owner label helpers the process and pod collectors
share.

Everything here reads ``state.attribution`` (an ``AttributionSnapshot`` the attributor publishes
after each sampling cycle). Before the first attribution, or with attribution switched off, these
collectors yield nothing: ``absent(runtimekit_attribution_last_refresh_timestamp_seconds)`` is how to alert on that.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import Metric

from runtimekit.attribution.types import SOURCES, Owner
from runtimekit.exporter.collectors._common import CardCollector, gauge, nonempty
from runtimekit.exporter.family import Family
from runtimekit.state import NodeView

# The Kubernetes owner of a series, outermost first. Always present on the families that carry
# it: "" (which Prometheus treats exactly as an absent label) for a host process or one no source
# could place, so each family keeps one set of label names.
OWNER_LABELS: tuple[str, ...] = ("namespace", "pod", "container")


def owner_labels(owner: Owner) -> list[str]:
    """Label values for ``OWNER_LABELS``; all "" unless a source named the pod."""
    if not owner.known:
        return ["", "", ""]
    return [owner.namespace, owner.pod, owner.container]


def label_text(value: str) -> str:
    """A label value that is always valid UTF-8.

    /proc names and command lines are bytes; psutil decodes them with ``surrogateescape``, so a
    non-UTF-8 byte becomes a lone surrogate that would make the whole exposition fail to encode.
    """
    return value.encode("utf-8", "replace").decode("utf-8")


class AttributionCollector(CardCollector):
    def collect(self, view: NodeView) -> Iterable[Family | Metric]:
        attribution = view.attribution
        if attribution is None:
            return
        up = gauge(
            "runtimekit_attribution_source_up",
            "1 when the attribution source answered at its last refresh, else 0 "
            "(kubelet: pod-resources List; cri: the container runtime's ListContainers and ListPodSandbox; procfs: the "
            "/proc root).",
            labels=("source",),
        )
        known = [name for name in SOURCES if name in attribution.sources]
        others = sorted(name for name in attribution.sources if name not in SOURCES)
        for name in (*known, *others):
            up.add_metric([name], 1.0 if attribution.sources[name].up else 0.0)
        last = gauge(
            "runtimekit_attribution_last_refresh_timestamp_seconds",
            "Unix time of the last attribution refresh (AttributionSnapshot.refreshed_at); time() - this is its staleness.",
            labels=(),
            unit="seconds",
        )
        last.add_metric([], attribution.refreshed_at)
        yield from nonempty(up, last)
