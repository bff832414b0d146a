"""The node's topology: where each GPU and RDMA NIC sits, and the distance of every pair.

From the view's topology topic (``runtimekit.topology.discovery``: NVML for NVLinks, sysfs for PCIe
switches, NUMA nodes, sockets and NICs), discovered at the agent's start and again when the GPUs
change — not on the sampling interval. Nothing is exported before the first discovery. Distances
are ``runtimekit.state.topology.Link``: ``level`` nearest first ``nvlink``, ``pcie_switch``,
``numa``, ``socket``, ``system``, and ``cost`` as one integer (lower is nearer; what the allocator
sums). Pairs are exported in both directions (``gpu`` → ``peer`` and back) so that one GPU's
neighbours are one selector. An unknown NUMA node or socket is the label value ``""``.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import InfoMetricFamily, Metric

from runtimekit.exporter.collectors._common import CardCollector, nonempty
from runtimekit.exporter.family import GAUGE, Family
from runtimekit.state import NodeView
from runtimekit.state.distance import nearest_gpus
from runtimekit.state.topology import Topology

DISCOVERED = "Discovered at the agent's start and again when the GPUs change."
GBPS_TO_BYTES = 1e9 / 8  # Gb/s -> bytes per second


def _label(value: int | None) -> str:
    return "" if value is None else str(value)


class TopologyCollector(CardCollector):
    """The topology's families, built once per discovery: the view's topology is immutable, so the
    families made from the same object are handed out again (every render would rebuild them)."""

    def __init__(self) -> None:
        self._made: tuple[Topology, list[Family | Metric]] | None = None

    def collect(self, view: NodeView) -> Iterable[Family | Metric]:
        topology = view.topology
        if topology is None:
            return ()
        if self._made is None or self._made[0] is not topology:
            self._made = (topology, list(self._families(topology)))
        return self._made[1]

    @staticmethod
    def _families(topology: Topology) -> Iterable[Family | Metric]:
        place = InfoMetricFamily(
            "runtimekit_gpu_topology",
            "Where each GPU sits: its NUMA node (sysfs numa_node), CPU socket (the node's physical_package_id), "
            "the PCIe switch nearest it (its upstream port's PCI address; \"\" under a root port) and whether its "
            f"NVLinks end at NVSwitches; the value is always 1. {DISCOVERED}",
            labels=["gpu", "uuid", "numa_node", "socket", "pcie_switch", "nvswitch"],
        )
        cost = Family(GAUGE, "runtimekit_gpu_link_cost",
                      "Distance between two GPUs as one integer, lower is nearer (any NVLink < the same PCIe switch < "
                      f"the same NUMA node < the same socket < system); level names the nearest shared level. {DISCOVERED}",
                      ("gpu", "uuid", "peer", "level"))
        nvlinks = Family(GAUGE, "runtimekit_gpu_link_nvlinks",
                         f"NVLinks between two GPUs, direct or through the NVSwitch fabric (pairs with any). {DISCOVERED}",
                         ("gpu", "uuid", "peer"))
        nic = InfoMetricFamily(
            "runtimekit_nic",
            "Each RDMA NIC (/sys/class/infiniband): its PCI address, NUMA node, socket, nearest PCIe switch, and the "
            f"GPUs nearest it (comma-separated indices); the value is always 1. {DISCOVERED}",
            labels=["nic", "pci_bus_id", "numa_node", "socket", "pcie_switch", "nearest_gpus"],
        )
        rate = Family(GAUGE, "runtimekit_nic_rate_bytes_per_second",
                      f"Port 1's rate (sysfs ports/1/rate, Gb/s -> bytes per second). {DISCOVERED}", ("nic",), "bytes_per_second")
        nic_cost = Family(GAUGE, "runtimekit_gpu_nic_link_cost",
                          f"Distance between a GPU and an RDMA NIC, as runtimekit_gpu_link_cost. {DISCOVERED}", ("gpu", "uuid", "nic", "level"))
        errors = Family(GAUGE, "runtimekit_topology_errors",
                        f"Facts discovery could not read (GET /api/v1/topology lists them); 0 when every device was placed. {DISCOVERED}", ())
        discovered = Family(GAUGE, "runtimekit_topology_discovered_timestamp_seconds",
                            "When the topology was last discovered, in unix seconds.", (), "seconds")
        uuids = {gpu.ref.index: gpu.ref.uuid for gpu in topology.gpus}
        for gpu in topology.gpus:
            place.add_metric([str(gpu.ref.index), gpu.ref.uuid, _label(gpu.numa_node), _label(gpu.socket),
                              gpu.pcie_switches[-1] if gpu.pcie_switches else "", str(gpu.nvswitch).lower()], {})
        for (a, b), link in sorted(topology.gpu_links.items()):
            for one, other in ((a, b), (b, a)):
                cost.add_metric((str(one), uuids.get(one, ""), str(other), link.level), link.cost)
                if link.nvlinks:
                    nvlinks.add_metric((str(one), uuids.get(one, ""), str(other)), link.nvlinks)
        for card in topology.nics:
            near = ",".join(map(str, nearest_gpus(topology, card.name)))
            nic.add_metric([card.name, card.pci, _label(card.numa_node), _label(card.socket),
                            card.pcie_switches[-1] if card.pcie_switches else "", near], {})
            if card.rate_gbps:
                rate.add_metric((card.name,), card.rate_gbps * GBPS_TO_BYTES)
        for (index, name), link in sorted(topology.nic_links.items()):
            nic_cost.add_metric((str(index), uuids.get(index, ""), name, link.level), link.cost)
        errors.add_metric((), len(topology.errors))
        discovered.add_metric((), topology.discovered_at)
        return nonempty(place, cost, nvlinks, nic, rate, nic_cost, errors, discovered)
