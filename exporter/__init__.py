"""The card-level Prometheus exporter: collectors over NodeState, the exposition cache, /metrics."""

from runtimekit.exporter.exposition import ExpositionCache
from runtimekit.exporter.registry import COLLECTOR_NAMES, COLLECTORS, build_collector_set, build_registry, enabled_collectors
from runtimekit.exporter.routes import add_exporter_routes
from runtimekit.exporter.timing import CollectorSet

__all__ = [
    "COLLECTORS",
    "COLLECTOR_NAMES",
    "CollectorSet",
    "ExpositionCache",
    "add_exporter_routes",
    "build_collector_set",
    "build_registry",
    "enabled_collectors",
]
