"""Run ``runtimekit`` with every metric family the exporter builds recorded, for the metrics reference.

    python -m docgen.metrics_probe CATALOGUE.json serve --sim dgx-a100 ...

A family is recorded when a collector *builds* it, before anything is filtered: the collectors drop
a family that got no sample (``_common.nonempty``), so an exposition alone would miss every family
whose condition the node happens not to meet (a fan on a passively cooled board, a pending mode
change, a slice fault). Recorded per family: the name as the exposition writes it (a counter with
``_total``, an info family with ``_info``), its type, its HELP text, its label names (an info
family's also from its samples' values) and the collector that built it (the module of the
calling frame under ``runtimekit.exporter.collectors``; the exposition's own families under
``exposition``). CATALOGUE is rewritten, whole and atomically, whenever it grows, so it can be read
while the agent runs. Only this process is affected: the agent is the installed one, unchanged.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from prometheus_client.core import InfoMetricFamily

from runtimekit import cli
from runtimekit.exporter.family import COUNTER, Family

COLLECTORS_PACKAGE = "runtimekit.exporter.collectors."
EXPOSITION_MODULES = {"runtimekit.exporter.timing", "runtimekit.exporter.exposition"}


class Recorder:
    """The catalogue: exposed name -> {type, help, labels, collector}, written to ``path`` on change."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.families: dict[str, dict[str, Any]] = {}
        self.lock = threading.Lock()

    def record(self, name: str, kind: str, documentation: str, labels: Sequence[str]) -> None:
        with self.lock:
            entry = self.families.get(name)
            changed = entry is None
            if entry is None:
                entry = self.families[name] = {"type": kind, "help": documentation, "labels": [], "collector": _collector()}
            new = [label for label in labels if label not in entry["labels"]]
            if new or changed:
                entry["labels"] += new
                self._write()

    def _write(self) -> None:
        scratch = self.path.with_suffix(".tmp")
        scratch.write_text(json.dumps(self.families, indent=1))
        os.replace(scratch, self.path)


def _collector() -> str:
    """The collector whose code is building a family: the first calling module under the collectors
    package other than their shared helpers."""
    frame: FrameType | None = sys._getframe(2)
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if module.startswith(COLLECTORS_PACKAGE) and not module.endswith("._common"):
            return module.removeprefix(COLLECTORS_PACKAGE)
        if module in EXPOSITION_MODULES:
            return "exposition"
        frame = frame.f_back
    return "unknown"


def install(recorder: Recorder) -> None:
    """Wrap the constructors of ``Family`` and of prometheus_client's ``InfoMetricFamily`` (and the
    latter's ``add_metric``, where an info family's value labels are given)."""
    family_init = Family.__init__
    info_init = InfoMetricFamily.__init__
    info_add = InfoMetricFamily.add_metric

    def recording_family_init(self: Family, *args: Any, **kwargs: Any) -> None:
        family_init(self, *args, **kwargs)
        recorder.record(self.sample_name if self.type == COUNTER else self.name, self.type, self.documentation,
                        self.labelnames)

    def recording_info_init(self: InfoMetricFamily, name: str, documentation: str, value: Any = None,
                            labels: Sequence[str] | None = None) -> None:
        info_init(self, name, documentation, value, labels)
        self._recorded_labels = list(labels or [])  # type: ignore[attr-defined]
        recorder.record(f"{self.name}_info", "gauge", documentation, self._recorded_labels)  # type: ignore[attr-defined]

    def recording_info_add(self: InfoMetricFamily, labels: Sequence[str], value: dict[str, str], timestamp: Any = None) -> None:
        info_add(self, labels, value, timestamp)
        fixed = getattr(self, "_recorded_labels", [])
        recorder.record(f"{self.name}_info", "gauge", self.documentation, [*fixed, *value])

    Family.__init__ = recording_family_init  # type: ignore[method-assign]
    InfoMetricFamily.__init__ = recording_info_init  # type: ignore[method-assign]
    InfoMetricFamily.add_metric = recording_info_add  # type: ignore[method-assign]


def main(argv: Sequence[str]) -> int:
    if len(argv) < 2:
        print("usage: python -m docgen.metrics_probe CATALOGUE.json RUNTIMEKIT-ARGUMENTS...", file=sys.stderr)
        return 2
    install(Recorder(Path(argv[0])))
    return cli.main(list(argv[1:]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
