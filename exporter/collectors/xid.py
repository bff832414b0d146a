"""XID errors as one counter per (GPU, code), from ``state.xid_counts`` (filled by the event thread
waiting on nvmlEventSetWait). Never a "last XID" gauge: that would lose repeats."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import Metric

from runtimekit.exporter.collectors._common import GPU_LABELS, CardCollector, counter, nonempty, text
from runtimekit.exporter.family import Family
from runtimekit.state import NodeView


class XidCollector(CardCollector):
    """XID counts are events, not readings: they stay exported for a lost GPU (XID 79 is how it got lost)."""

    def collect(self, view: NodeView) -> Iterable[Family | Metric]:
        xids = counter(
            "runtimekit_gpu_xid_errors_total",
            "XID errors reported by the driver since the agent started, by XID code "
            "(delivered as events through nvmlEventSetWait, counted as they arrive).",
            labels=(*GPU_LABELS, "xid"),
            sampled=False,
        )
        # An unreadable UUID (a lost GPU) is an absent label, and never breaks the sort.
        rows = sorted(((index, text(uuid), code), count) for (index, uuid, code), count in view.xid_counts.items())
        for (index, uuid, code), count in rows:
            xids.add_metric([str(index), uuid, str(code)], float(count))
        yield from nonempty(xids)
