"""The node agent's status page: ``GET /`` draws the node at a glance (each GPU's health,
utilization and memory, its slices, processes and pods, the topology matrix) and refreshes itself
from ``GET /api/v1/node``, the same document ``runtimekit status`` prints. See docs/status.md."""

from runtimekit.statuspage.node_json import NODE_PATH, render_node
from runtimekit.statuspage.routes import add_status_routes

__all__ = ["NODE_PATH", "add_status_routes", "render_node"]
