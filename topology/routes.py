"""``GET /api/v1/topology``: the node's topology as JSON, read from the node state (published by the
topology component); the handler never discovers anything itself. 503 before the first discovery.

The body::

    {"discovered_at": "2024-…Z", "discovered_at_unix": 1700000000.0,
     "levels": {"nvlink": 40, "pcie_switch": 50, "numa": 60, "socket": 70, "system": 80},
     "gpus": [{"index": 0, "uuid": "GPU-…", "pci": "0000:18:00.0", "numa_node": 0, "socket": 0,
               "pcie_switches": ["0000:16:00.0"], "pcie_root": "pci0000:15", "nvswitch": true,
               "nvlinks": {"1": 18, …}}, …],
     "nics": [{"name": "mlx5_0", "pci": "0000:1a:00.0", "numa_node": 0, "socket": 0,
               "pcie_switches": ["0000:16:00.0"], "pcie_root": "pci0000:15", "rate_gbps": 400,
               "device_nodes": ["/dev/infiniband/uverbs0"], "nearest_gpus": [0]}, …],
     "gpu_links": [{"gpu": 0, "peer": 1, "level": "nvlink", "nvlinks": 18, "cost": 22}, …],
     "nic_links": [{"gpu": 0, "nic": "mlx5_0", "level": "pcie_switch", "cost": 50}, …],
     "errors": []}

``levels``: each level's base cost (``runtimekit.state.topology.LEVEL_COST``; an NVLink pair costs
its base less one per link). ``nearest_gpus``: the GPUs nearest the NIC (least cost). ``pcie_root``:
the PCIe root complex, the host bridge its sysfs path starts at (Kubernetes'
resource.kubernetes.io/pcieRoot). Unknown NUMA nodes, sockets and PCIe roots are null.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from runtimekit.state import NodeState
from runtimekit.state.distance import nearest_gpus
from runtimekit.state.topology import LEVEL_COST, Topology

TOPOLOGY_PATH = "/api/v1/topology"


def render_topology(topology: Topology) -> dict[str, Any]:
    """The JSON body above."""
    return {
        "discovered_at": datetime.fromtimestamp(topology.discovered_at, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "discovered_at_unix": topology.discovered_at,
        "levels": dict(LEVEL_COST),
        "gpus": [{
            "index": gpu.ref.index, "uuid": gpu.ref.uuid, "pci": str(gpu.ref.pci) if gpu.ref.pci else None,
            "numa_node": gpu.numa_node, "socket": gpu.socket, "pcie_switches": list(gpu.pcie_switches),
            "pcie_root": gpu.pcie_root or None, "nvswitch": gpu.nvswitch, "nvlinks": {str(peer): links for peer, links in sorted(gpu.nvlinks.items())},
        } for gpu in topology.gpus],
        "nics": [{
            "name": nic.name, "pci": nic.pci, "numa_node": nic.numa_node, "socket": nic.socket,
            "pcie_switches": list(nic.pcie_switches), "pcie_root": nic.pcie_root or None, "rate_gbps": nic.rate_gbps,
            "device_nodes": list(nic.device_nodes),
            "nearest_gpus": list(nearest_gpus(topology, nic.name)),
        } for nic in topology.nics],
        "gpu_links": [{"gpu": a, "peer": b, "level": link.level, "nvlinks": link.nvlinks, "cost": link.cost}
                      for (a, b), link in sorted(topology.gpu_links.items())],
        "nic_links": [{"gpu": gpu, "nic": nic, "level": link.level, "cost": link.cost}
                      for (gpu, nic), link in topology.nic_links_in_order()],
        "errors": list(topology.errors),
    }


def add_topology_routes(app: web.Application, state: NodeState) -> None:
    """Serve ``GET /api/v1/topology`` from ``state``."""

    async def topology(request: web.Request) -> web.Response:
        found = state.view().topology
        if found is None:
            return web.json_response(
                {"error": "not discovered yet", "detail": "topology discovery runs after the first sample "
                 "(or topology.enabled is false on this node)"},
                status=503,
            )
        return web.json_response(render_topology(found))

    app.router.add_get(TOPOLOGY_PATH, topology)
