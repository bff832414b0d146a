"""The one table of collectors: name -> (factory, enabled by default, description).

It produces the configuration switches (``{name: bool}``), the start-up line "enabled collectors: …"
and the ``CollectorSet`` the exposition renders (one view at a time). The timer (for collector
durations) is injectable so that golden expositions can be byte-for-byte stable; no collector
reads a clock (times are exported as timestamps of the view).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric

from runtimekit.exporter.collectors._common import Collector
from runtimekit.exporter.collectors.attribution import AttributionCollector
from runtimekit.exporter.collectors.clocks import ClocksCollector
from runtimekit.exporter.collectors.components import ComponentsCollector
from runtimekit.exporter.collectors.ecc import EccCollector
from runtimekit.exporter.collectors.health import HealthCollector
from runtimekit.exporter.collectors.info import InfoCollector
from runtimekit.exporter.collectors.memory import MemoryCollector
from runtimekit.exporter.collectors.mig import MigCollector
from runtimekit.exporter.collectors.modes import ModesCollector
from runtimekit.exporter.collectors.nvlink import NvLinkCollector
from runtimekit.exporter.collectors.pcie import PcieCollector
from runtimekit.exporter.collectors.pod import PodCollector
from runtimekit.exporter.collectors.power import PowerCollector
from runtimekit.exporter.collectors.process import ProcessCollector
from runtimekit.exporter.collectors.remap import RemapCollector
from runtimekit.exporter.collectors.self import SelfCollector
from runtimekit.exporter.collectors.slices import SlicesCollector
from runtimekit.exporter.collectors.thermal import ThermalCollector
from runtimekit.exporter.collectors.topology import TopologyCollector
from runtimekit.exporter.collectors.utilization import UtilizationCollector
from runtimekit.exporter.collectors.xid import XidCollector
from runtimekit.exporter.family import Family
from runtimekit.exporter.timing import LOG, CollectorSet
from runtimekit.schema import shown
from runtimekit.state import NodeState

CollectorFactory = Callable[..., Collector]  # keyword options -> collector


@dataclass(frozen=True, slots=True)
class CollectorSpec:
    factory: CollectorFactory
    enabled_by_default: bool
    description: str


# Order here is the order of families in the exposition.
COLLECTORS: Mapping[str, CollectorSpec] = {
    "self": CollectorSpec(SelfCollector, True, "the agent itself: NVML up, sampler cycles and failures, the last sample's time, build info"),
    "components": CollectorSpec(ComponentsCollector, True, "supervised components: up, restarts, last success"),
    "info": CollectorSpec(InfoCollector, True, "GPU identity (runtimekit_gpu_info) and lost GPUs"),
    "utilization": CollectorSpec(UtilizationCollector, True, "GPU, memory, encoder and decoder busy ratios"),
    "memory": CollectorSpec(MemoryCollector, True, "framebuffer and BAR1 memory in bytes"),
    "thermal": CollectorSpec(ThermalCollector, True, "GPU and HBM temperatures, thermal thresholds, fan speed"),
    "power": CollectorSpec(PowerCollector, True, "power draw and limit, energy counter"),
    "clocks": CollectorSpec(ClocksCollector, True, "clocks, clock event (throttle) reasons, performance state"),
    "pcie": CollectorSpec(PcieCollector, True, "PCIe link generation and width, traffic and replay counters"),
    "ecc": CollectorSpec(EccCollector, True, "ECC mode and error counts"),
    "remap": CollectorSpec(RemapCollector, True, "retired pages and row remapping"),
    "nvlink": CollectorSpec(NvLinkCollector, True, "NVLink state, error and traffic counters per link"),
    "xid": CollectorSpec(XidCollector, True, "XID error counters per GPU and code"),
    "modes": CollectorSpec(ModesCollector, True, "compute, persistence and MIG modes"),
    "mig": CollectorSpec(MigCollector, True, "MIG devices: identity, memory and compute slices per GPU instance"),
    # options: {"process": {"cmdline": True, "cmdline_redact": <regex>, "cmdline_max_length": 256}}
    "process": CollectorSpec(ProcessCollector, True, "GPU processes with their pod: GPU memory and busy ratios, CPU and resident memory, opt-in command line"),
    "pod": CollectorSpec(PodCollector, True, "per-container GPU memory, SM share and process count; devices allocated by the kubelet"),
    "attribution": CollectorSpec(AttributionCollector, True, "attribution sources up (kubelet, cri, procfs) and the last refresh's time"),
    "health": CollectorSpec(HealthCollector, True, "health verdict per GPU and node, active faults, fault events and state transitions"),
    "slices": CollectorSpec(SlicesCollector, True, "slices: identity, compute and memory quotas against use, health and faults per slice; each card's slicing mode"),
    "topology": CollectorSpec(TopologyCollector, True, "where GPUs and RDMA NICs sit (NUMA node, socket, PCIe switch) and the distance of every pair"),
}

COLLECTOR_NAMES: tuple[str, ...] = tuple(COLLECTORS)
#: The configuration key that switches collectors (runtimekit/config.py), named by its errors.
KEY = "exporter.collectors"


def enabled_collectors(config: Mapping[str, bool] | None = None) -> tuple[str, ...]:
    """Names of the collectors to run: the defaults, overridden by ``config`` (``{name: bool}``).

    Raises ``ValueError`` naming the key (``exporter.collectors``) with an unknown collector and the
    allowed names, or a non-boolean value.
    """
    config = dict(config or {})
    for name, value in config.items():
        if name not in COLLECTORS:
            raise ValueError(f"{KEY}: unknown collector {shown(name)}; allowed: {', '.join(COLLECTOR_NAMES)}")
        if not isinstance(value, bool):
            raise ValueError(f"{KEY}: collector {shown(name)}: expected true or false, got {shown(value)}")
    return tuple(name for name, spec in COLLECTORS.items() if config.get(name, spec.enabled_by_default))


def build_collector_set(
    config: Mapping[str, bool] | None = None,
    *,
    timer: Callable[[], float] = time.perf_counter,
    logger: logging.Logger = LOG,
    options: Mapping[str, Mapping[str, Any]] | None = None,
) -> CollectorSet:
    """The enabled collectors behind one timing wrapper; ``options[name]`` are extra keyword
    arguments for that collector's factory (e.g. ``{"self": {"version": "0.0.0"}}`` to pin build
    info in golden files)."""
    names = enabled_collectors(config)
    logger.info("enabled collectors: %s", ", ".join(names) if names else "(none)")
    options = options or {}
    collectors = {name: COLLECTORS[name].factory(**options.get(name, {})) for name in names}
    return CollectorSet(collectors, timer=timer, logger=logger)


def build_registry(
    state: NodeState,
    config: Mapping[str, bool] | None = None,
    *,
    timer: Callable[[], float] = time.perf_counter,
    logger: logging.Logger = LOG,
    options: Mapping[str, Mapping[str, Any]] | None = None,
) -> CollectorRegistry:
    """A fresh ``CollectorRegistry`` (never the global one) rendering the enabled collectors over
    ``state``'s latest view — for prometheus_client's own tools (``generate_latest``)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ViewCollector(state, build_collector_set(config, timer=timer, logger=logger, options=options)))
    return registry


class ViewCollector:
    """prometheus_client's collector interface over a ``CollectorSet``: each ``collect()`` renders the
    state's view at that moment."""

    def __init__(self, state: NodeState, collectors: CollectorSet) -> None:
        self._state = state
        self.collectors = collectors

    def collect(self) -> Iterable[Metric]:
        families = self.collectors.collect(self._state.view())
        return [family.to_metric() if isinstance(family, Family) else family for family in families]
