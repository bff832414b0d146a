"""The shared wrapper every collector runs through: timing, failure isolation, transition logging.

``CollectorSet`` is what the exposition renders. Each ``collect(view)`` runs every named collector
over that one view, materialising its families so that one that raises half-way contributes
nothing (its series vanish for that scrape; the others are unaffected), and then appends
``runtimekit_collector_duration_seconds{collector}`` and ``runtimekit_collector_success{collector}``.
Failures are logged once per transition (ok -> failing, with the traceback; failing -> ok), never
on every scrape. The timer is injectable so golden files can pin durations.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping

from prometheus_client.core import Metric

from runtimekit.exporter.collectors._common import SAMPLED, Collector
from runtimekit.exporter.family import GAUGE, Family
from runtimekit.state import NodeView

LOG = logging.getLogger("runtimekit.exporter")


class CollectorSet:
    """Runs named collectors through one timing wrapper; register this in a ``CollectorRegistry``."""

    def __init__(
        self,
        collectors: Mapping[str, Collector],
        *,
        timer: Callable[[], float] = time.perf_counter,
        logger: logging.Logger = LOG,
    ) -> None:
        self._collectors = dict(collectors)
        self._timer = timer
        self._log = logger
        self._failing: dict[str, bool] = {name: False for name in self._collectors}
        # Text and OpenMetrics renders may run in two executor threads at once.
        self._lock = threading.Lock()

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._collectors)

    def collect(self, view: NodeView) -> list[Family | Metric]:
        duration = Family(
            GAUGE,
            "runtimekit_collector_duration_seconds",
            f"Seconds each collector took to build its families at render time. {SAMPLED}",
            ["collector"],
            unit="seconds",
        )
        success = Family(
            GAUGE,
            "runtimekit_collector_success",
            "1 when the collector succeeded at the last render, 0 when it raised (its series are then absent).",
            ["collector"],
        )
        out: list[Family | Metric] = []
        with self._lock:
            for name, collector in self._collectors.items():
                start = self._timer()
                try:
                    families = list(collector.collect(view))
                except Exception:  # noqa: BLE001 - one collector must never break the scrape
                    ok = False
                    families = []
                    if not self._failing[name]:
                        self._log.exception("collector %s failed; its series are omitted until it recovers", name)
                else:
                    ok = True
                    if self._failing[name]:
                        self._log.info("collector %s recovered", name)
                self._failing[name] = not ok
                elapsed = self._timer() - start
                out.extend(families)
                duration.add_metric([name], max(0.0, elapsed))
                success.add_metric([name], 1.0 if ok else 0.0)
        out.extend((duration, success))
        return out
