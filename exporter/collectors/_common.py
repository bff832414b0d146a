"""Helpers shared by the card collectors: label sets, family builders, Unavailable filtering.

Every family a collector yields is built fresh on each ``collect(view)`` from one ``NodeView``: a GPU,
link or label value that is no longer in the snapshot is simply not in the next exposition.
A reading that is ``Unavailable`` is skipped (never exported as 0, -1 or NaN), and a family that
ends up with no samples is not yielded at all.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Protocol

from prometheus_client.core import Metric

from runtimekit.exporter.family import COUNTER, GAUGE, Family
from runtimekit.gpu.types import GpuSnapshot, Unavailable, is_available
from runtimekit.state import NodeView
from runtimekit.state.health import ActiveFault

GPU_LABELS: tuple[str, ...] = ("gpu", "uuid")

SAMPLED = "Sampled on the agent's interval; the exposition is cached per sample."


class Collector(Protocol):
    """The one contract: yield fresh metric families built from one view of the node (never two
    moments mixed: the exposition renders every collector from the same view)."""

    def collect(self, view: NodeView) -> Iterable[Family | Metric]: ...


class CardCollector:
    """Base for collectors: a pure function of the view they are given; no clock, no state of their own."""

    def collect(self, view: NodeView) -> Iterable[Family | Metric]:  # pragma: no cover - overridden
        raise NotImplementedError


def gpu_labels(gpu: GpuSnapshot) -> list[str]:
    """Label values for ``GPU_LABELS``: the NVML index as a string and the UUID."""
    return [str(gpu.index), text(gpu.uuid)]


def all_gpus(view: NodeView) -> tuple[GpuSnapshot, ...]:
    """Every GPU of the view's snapshot, lost ones included (none before the first sample)."""
    snapshot = view.snapshot
    return () if snapshot is None else snapshot.gpus


def live_gpus(view: NodeView) -> Iterator[GpuSnapshot]:
    """GPUs of the view's snapshot that are not lost: a lost GPU exports only its info and lost gauge."""
    return (gpu for gpu in all_gpus(view) if not gpu.lost)


def gauge(name: str, doc: str, labels: Sequence[str] = GPU_LABELS, unit: str = "") -> Family:
    return Family(GAUGE, name, f"{doc} {SAMPLED}", labels, unit)


def counter(
    name: str, doc: str, labels: Sequence[str] = GPU_LABELS, unit: str = "", *, sampled: bool = True
) -> Family:
    """A counter family; ``name`` ends in ``_total`` (stripped from the family, written on its samples,
    as prometheus_client does). ``sampled=False`` for event counts (XIDs), not read on the interval."""
    return Family(COUNTER, name, f"{doc} {SAMPLED}" if sampled else doc, labels, unit)


def add(family: Family, labels: Sequence[str], value: object) -> None:
    """Add one sample unless the reading is missing (``None``) or ``Unavailable``; bools become 0/1.
    ``Family.add_metric`` inlined: called for every series of every render (5,000 at 512 processes)."""
    if value is None or isinstance(value, Unavailable):
        return
    family.rows.append((labels if type(labels) is tuple else tuple(labels), float(value) + 0.0))  # type: ignore[arg-type]


def nonempty(*families: Family | Metric) -> Iterator[Family | Metric]:
    """Yield only the families that got at least one sample."""
    return (family for family in families if (family.rows if isinstance(family, Family) else family.samples))


def text(value: object) -> str:
    """A label value: the string, or "" when the reading is Unavailable (same as an absent label)."""
    if value is None or not is_available(value):
        return ""
    return str(value)


def policy_labels(fault: ActiveFault) -> list[str]:
    """fault, severity, action, class ("" for a fault recorded before the policy carried classes)."""
    return [fault.fault, fault.severity, fault.action, fault.fault_class]


def unique_faults(faults: Iterable[ActiveFault]) -> Iterator[ActiveFault]:
    """One series per label set (``policy_labels``): a card-wide fault raised from several MIG
    instances is one fault on the GPU; a slice's faults likewise (the health and slices collectors)."""
    seen = set()
    for fault in faults:
        key = tuple(policy_labels(fault))
        if key not in seen:
            seen.add(key)
            yield fault
