"""The base's shared state and vocabulary: typed topics and the immutable node view
(``node``), GPU and MIG references and device ids (``refs``), the health verdict (``health``), slices (``slices``), topology (``topology``)."""

from runtimekit.state.node import (
    ATTRIBUTION,
    COMPONENTS,
    HEALTH,
    SAMPLE,
    SLICES,
    TOPICS,
    TOPOLOGY,
    XID_LOG_SIZE,
    XIDS,
    ComponentStatus,
    NodeState,
    NodeView,
    SamplerStats,
    XidKey,
    XidLog,
)

__all__ = [
    "ATTRIBUTION",
    "COMPONENTS",
    "ComponentStatus",
    "HEALTH",
    "SAMPLE",
    "SLICES",
    "TOPOLOGY",
    "TOPICS",
    "XIDS",
    "XID_LOG_SIZE",
    "NodeState",
    "NodeView",
    "SamplerStats",
    "XidKey",
    "XidLog",
]
