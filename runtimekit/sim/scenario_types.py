"""The spec types of a scenario: the machine a simulated node pretends to be, as frozen data.

``Scenario`` holds driver versions, the NUMA layout, NVSwitches, NICs, one ``GpuSpec`` per GPU
(with its ``GpuModel``: the facts of the part, written once per model) and the Kubernetes side
(``pods.KubernetesSpec``). ``scenario.parse_scenario`` builds and validates them from YAML.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .pods import KubernetesSpec

__all__ = ["ARCHITECTURES", "LOAD_PROFILES", "ScenarioError", "GpuModel", "NvSwitchSpec", "NicSpec", "NumaNodeSpec",
           "PcieSwitchSpec", "MigInstanceSpec", "MigSpec", "GpuSpec", "Scenario"]

#: architecture name -> NVML_DEVICE_ARCH_* value (pynvml constants).
ARCHITECTURES = {"volta": 5, "turing": 6, "ampere": 7, "ada": 8, "hopper": 9, "blackwell": 10}
#: simulated load profiles (see ``runtimekit.sim.load``).
LOAD_PROFILES = ("training", "idle", "busy")


class ScenarioError(ValueError):
    """A scenario file is missing, malformed, or breaks a rule; the message names the key."""


@dataclass(frozen=True)
class GpuModel:
    """Facts shared by every GPU of one model (units in the field names)."""

    key: str
    name: str
    architecture: str
    compute_capability: tuple[int, int]
    pci_device_id: int
    pci_subsystem_id: int
    vbios_version: str
    board_part_number: str
    memory_total_mib: int
    memory_reserved_mib: int
    bar1_total_mib: int
    power_limit_w: int
    power_idle_w: int
    clocks_max_mhz: dict[str, int]
    clocks_idle_mhz: dict[str, int]
    temperature_thresholds_c: dict[str, int]
    pcie_generation: int
    pcie_width: int
    nvlink_version: int
    nvlink_links: int
    nvlink_link_gbps: int  # GB/s per direction per link
    mig_capable: bool
    fan: bool
    retired_pages: bool
    row_remapping: bool

    @property
    def arch_code(self) -> int:
        """NVML_DEVICE_ARCH_* for ``architecture``."""
        return ARCHITECTURES[self.architecture]


@dataclass(frozen=True)
class NvSwitchSpec:
    id: int
    pci_bus_id: str


@dataclass(frozen=True)
class NicSpec:
    name: str
    pci_bus_id: str
    numa_node: int
    pcie_switch: str
    rate_gbps: int


@dataclass(frozen=True)
class NumaNodeSpec:
    """A NUMA node with CPUs: its id, its CPUs (a kernel cpu list) and the CPU socket it is on."""

    id: int
    cpus: str
    socket: int = 0


@dataclass(frozen=True)
class PcieSwitchSpec:
    """A PCIe switch, seen as sysfs shows it: its upstream port's bus id, and where that port
    hangs: below ``root_port`` (a root port of the host bridge ``pci<domain>:<root port bus>``)
    for a top-level switch, or below a downstream port of the switch ``parent``. Bus ids in NVML's
    spelling ("00000000:16:00.0"); ``root_port`` is "" when ``parent`` is set and vice versa."""

    name: str
    upstream_port: str
    root_port: str = ""
    parent: str = ""


@dataclass(frozen=True)
class MigInstanceSpec:
    """A GPU instance the GPU starts with: its profile name (``1g.10gb``), its placement start in
    memory slices (None: where the driver would put it) and its compute instances' profile names
    (``3g.40gb`` for the full-size one, ``1c.3g.40gb`` ...)."""

    profile: str
    placement: int | None
    compute_instances: tuple[str, ...]


@dataclass(frozen=True)
class MigSpec:
    """A GPU's MIG state at start: the mode and, in MIG mode, its GPU instances in creation order."""

    enabled: bool
    instances: tuple[MigInstanceSpec, ...] = ()


@dataclass(frozen=True)
class GpuSpec:
    """One GPU of the node; ``nvlinks[i]`` is the NVSwitch index at the far end of link i."""

    index: int
    model: GpuModel
    uuid: str
    serial: str
    pci_bus_id: str
    numa_node: int
    cpu_affinity: str
    pcie_switch: str
    nics: tuple[str, ...]
    nvlinks: tuple[int, ...]
    mig: MigSpec | None = None  # None: MIG disabled (the default of a MIG-capable part)


@dataclass(frozen=True)
class Scenario:
    """A validated scenario; ``raw`` keeps the parsed YAML for later readers."""

    name: str
    description: str
    driver_version: str
    cuda_driver_version: int
    nvml_version: str
    models: dict[str, GpuModel]
    gpus: tuple[GpuSpec, ...]
    nvswitches: tuple[NvSwitchSpec, ...]
    nics: tuple[NicSpec, ...]
    numa_nodes: tuple[NumaNodeSpec, ...]
    sockets: int
    pcie_switches: tuple[PcieSwitchSpec, ...]
    cpu_model: str
    load_profile: str
    kubernetes: KubernetesSpec = field(default_factory=KubernetesSpec)
    source: str = ""
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
