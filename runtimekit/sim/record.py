"""``runtimekit sim record``: capture the node this runs on as a scenario YAML.

Everything NVML knows comes through the NVML layer (``runtimekit/gpu/``, the only importer of
pynvml): one ``NodeReader`` snapshot gives identity, limits, driver versions, NVLink counts,
modes, memory and the current readings; ``runtimekit.gpu.topology`` adds PCI ids, NUMA node, CPU
affinity and the far end of every NVLink. The host's NUMA layout, CPU sockets and RDMA NICs come
from sysfs under ``sys_root`` (a parameter, like every host path) through ``runtimekit.host``.

What neither can tell is written as a marked placeholder and listed under ``x-recorded`` (a
free top-level key that ``parse_scenario`` ignores), with the reason: PCIe switch names, which
NIC serves which GPU, NIC rates, the bus id of an NVLink far end NVML does not give, idle power
and clocks when no GPU of the model was idle while recording. The result is validated with
``parse_scenario`` before it is returned.

A GPU in MIG mode is recorded with its GPU instances (profile name, placement) and their compute
instances (``mig:`` in its entry), read through the same session with pynvml's MIG wrappers
(``record_mig``); a driver without the MIG instance API, or a geometry the simulator has no table
for, leaves its instances out and says so under ``x-recorded``.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from runtimekit.gpu.nvml import GpuLostError, NvmlSession
from runtimekit.gpu.reader import NodeReader
from runtimekit.gpu.topology import GpuTopology, read_topology
from runtimekit.gpu.types import GpuSnapshot, NodeSnapshot, Reading, is_available
from runtimekit.host import DEFAULT_SYS_ROOT, cpu_sockets, format_cpulist, normalise_bus_id, numa_nodes, parse_cpulist, rdma_nics
from runtimekit.state.refs import PciAddress

from .record_mig import read_mig
from .record_pcie import record_switches
from .record_yaml import Dumper, Flow, FlowList, Hex, Q
from .scenario import ARCHITECTURES, ScenarioError, parse_scenario

__all__ = ["record_scenario", "PLACEHOLDER_SWITCH", "UNKNOWN_SWITCH"]

MiB = 1 << 20
#: ``pcie_switch`` of GPUs and NICs before ``record_pcie`` names them from sysfs.
PLACEHOLDER_SWITCH = "unknown"
#: Bus id of the invented NVSwitch at the far end of links whose far end NVML does not name
#: (no real PCI domain is this large); ``x-recorded.placeholders`` says which links.
UNKNOWN_SWITCH = "FFFFFFFF:FF:00.0"
#: GB/s per direction per link, by NVLink generation (NVML has no per-link bandwidth query).
_LINK_GBPS = {1: 20, 2: 25, 3: 25, 4: 25, 5: 50, 6: 100}
_UUID = re.compile(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower().removeprefix("nvidia ")).strip("-") or "gpu"


def _or(value: Reading[Any], default: Any) -> Any:
    return value if is_available(value) else default


# ---- host facts from sysfs --------------------------------------------------------------------


def _sys_numa_nodes(sys_root: Path) -> list[dict[str, Any]]:
    return [Flow(id=n.id, cpus=Q(n.cpus)) for n in numa_nodes(sys_root)]


def _sys_nics(sys_root: Path, numa_ids: set[int]) -> list[dict[str, Any]]:
    """RDMA NICs as scenario entries; a NIC with no NUMA node (or an unknown one) goes on the lowest."""
    return [
        Flow(name=n.name, pci_bus_id=Q(_nvml_bus_id(n.pci_bus_id)),
              numa_node=n.numa_node if n.numa_node in numa_ids else min(numa_ids),
              pcie_switch=PLACEHOLDER_SWITCH, rate_gbps=n.rate_gbps)
        for n in rdma_nics(sys_root)
    ]


# ---- the recording ------------------------------------------------------------------------------


class _Notes:
    """What ``x-recorded`` lists: placeholders (facts unknown) and estimates (facts derived)."""

    def __init__(self) -> None:
        self.placeholders: list[str] = []
        self.estimates: list[str] = []

    def placeholder(self, text: str) -> None:
        if text not in self.placeholders:
            self.placeholders.append(text)

    def estimate(self, text: str) -> None:
        if text not in self.estimates:
            self.estimates.append(text)


def _check_gpu(gpu: GpuSnapshot) -> None:
    if gpu.lost or gpu.memory is None:
        why = "; ".join(f"{k}: {v}" for k, v in gpu.errors) or "lost"
        raise RuntimeError(f"cannot record: GPU {gpu.index} does not answer NVML ({why})")
    if not is_available(gpu.uuid) or not _UUID.match(gpu.uuid):
        raise RuntimeError(f"cannot record: GPU {gpu.index} has no readable UUID ({gpu.uuid})")
    arch = gpu.identity.architecture
    if not is_available(arch) or arch not in ARCHITECTURES:
        raise RuntimeError(
            f"cannot record: GPU {gpu.index} architecture {arch!r} is not one a scenario can describe "
            f"({', '.join(ARCHITECTURES)})"
        )


def _idle(gpu: GpuSnapshot) -> bool:
    """No work on the GPU: its power and clocks now are idle values."""
    util = gpu.utilization.gpu if gpu.utilization else None
    return util == 0 and not gpu.processes


def _model(gpu: GpuSnapshot, topo: GpuTopology, key: str, notes: _Notes) -> dict[str, Any]:
    ident, limits = gpu.identity, gpu.limits
    power_limit = gpu.power.limit_watts if gpu.power else None
    if not is_available(power_limit) or power_limit is None or power_limit < 2:
        notes.placeholder(f"models.{key}.power_limit_w: NVML gave no enforced power limit")
        power_limit = 300.0
    limit_w = int(round(power_limit))
    max_mhz = {
        "sm": limits.sm_clock_max_hertz,
        "memory": limits.memory_clock_max_hertz,
        "graphics": limits.graphics_clock_max_hertz,
    }
    for name, value in max_mhz.items():
        if not is_available(value):
            notes.placeholder(f"models.{key}.clocks_max_mhz.{name}: not given by NVML")
    clocks_max = {k: int(round(_or(v, 0) / 1e6)) for k, v in max_mhz.items()}
    thresholds = {
        "shutdown": limits.temperature_shutdown_celsius,
        "slowdown": limits.temperature_slowdown_celsius,
        "gpu_max": limits.temperature_gpu_max_celsius,
        "mem_max": limits.temperature_memory_max_celsius,
    }
    for name, value in thresholds.items():
        if not is_available(value):
            notes.placeholder(f"models.{key}.temperature_thresholds_c.{name}: not given by NVML (0)")
    assert gpu.memory is not None  # _check_gpu refuses a GPU without memory readings
    memory_total = limits.memory_total_bytes
    if not is_available(memory_total):
        raise RuntimeError(f"cannot record: GPU {gpu.index} memory size is unreadable ({memory_total})")
    links = int(_or(limits.nvlink_count, 0))
    generation = int(_or(topo.nvlink_generation, 0)) if links else 0
    if links and not generation:
        notes.placeholder(f"models.{key}.nvlink.version: nvmlDeviceGetNvLinkVersion gave {topo.nvlink_version}")
    if links:
        notes.estimate(f"models.{key}.nvlink.link_gbps: from the NVLink generation, not measured")
    cc = _or(ident.cuda_compute_capability, "0.0").split(".")
    if not is_available(topo.pci_device_id):
        notes.placeholder(f"models.{key}.pci_device_id/pci_subsystem_id: nvmlDeviceGetPciInfo failed (0)")
    return {
        "name": _or(ident.name, key),
        "architecture": ident.architecture,
        "compute_capability": FlowList([int(cc[0]), int(cc[1])]),
        "pci_device_id": Hex(_or(topo.pci_device_id, 0)),
        "pci_subsystem_id": Hex(_or(topo.pci_subsystem_id, 0)),
        "vbios_version": Q(_or(ident.vbios_version, "")),
        "board_part_number": Q(_or(ident.board_part_number, "")),
        "memory_total_mib": int(memory_total) // MiB,
        "memory_reserved_mib": int(_or(gpu.memory.reserved_bytes, 0)) // MiB,
        "bar1_total_mib": max(1, int(_or(limits.bar1_total_bytes, MiB)) // MiB),
        "power_limit_w": limit_w,
        "power_idle_w": 0,  # filled in by _idle_facts
        "clocks_max_mhz": Flow(clocks_max),
        "clocks_idle_mhz": {},  # filled in by _idle_facts
        "temperature_thresholds_c": Flow({k: int(round(_or(v, 0))) for k, v in thresholds.items()}),
        "pcie": Flow(generation=int(_or(limits.pcie_max_generation, 4)), width=int(_or(limits.pcie_max_width, 16))),
        "nvlink": Flow(version=generation, links=links, link_gbps=_LINK_GBPS.get(generation, 25) if links else 0),
        "mig_capable": gpu.modes is not None and is_available(gpu.modes.mig_mode_current),
        "fan": gpu.thermal is not None and is_available(gpu.thermal.fan_speed_ratio),
        "retired_pages": gpu.retired_pages is not None and is_available(gpu.retired_pages.single_bit_ecc),
        "row_remapping": gpu.remapped_rows is not None and is_available(gpu.remapped_rows.correctable),
    }


def _idle_facts(model: dict[str, Any], key: str, gpus: list[GpuSnapshot], notes: _Notes) -> None:
    """power_idle_w and clocks_idle_mhz: read from an idle GPU of the model, else estimated."""
    limit_w = model["power_limit_w"]
    clocks_max = model["clocks_max_mhz"]
    for gpu in gpus:
        if not _idle(gpu) or gpu.power is None or gpu.clocks is None:
            continue
        draw = gpu.power.draw_watts
        sm, memory, graphics = gpu.clocks.sm_hertz, gpu.clocks.memory_hertz, gpu.clocks.graphics_hertz
        if not (is_available(draw) and is_available(sm) and is_available(memory) and is_available(graphics)):
            continue
        model["power_idle_w"] = min(limit_w - 1, max(1, int(round(draw))))
        idle = {"sm": sm, "memory": memory, "graphics": graphics}
        # at most the max clock (a scenario refuses an idle clock above it; 0 max: NVML gave none)
        model["clocks_idle_mhz"] = Flow({k: min(int(round(v / 1e6)), clocks_max[k]) for k, v in idle.items()})
        notes.estimate(f"models.{key}.power_idle_w, clocks_idle_mhz: read from idle GPU {gpu.index} while recording")
        return
    model["power_idle_w"] = max(1, limit_w // 10)
    model["clocks_idle_mhz"] = Flow({k: min(v, max(1, v // 5)) if k != "memory" else v for k, v in clocks_max.items()})
    notes.estimate(
        f"models.{key}.power_idle_w, clocks_idle_mhz: no GPU of the model was idle; 10 % of the limit, "
        "a fifth of the max SM/graphics clock"
    )


def _numa_nodes(
    sys_nodes: list[dict[str, Any]], topos: list[GpuTopology], notes: _Notes
) -> list[dict[str, Any]]:
    """The host's NUMA nodes from sysfs, or when sysfs has none, from the GPUs' NUMA and affinity."""
    if sys_nodes:
        return sys_nodes
    derived: dict[int, set[int]] = {}
    for t in topos:
        if is_available(t.numa_node) and is_available(t.cpu_affinity):
            derived.setdefault(int(t.numa_node), set()).update(t.cpu_affinity)
    if derived:
        notes.estimate("node.numa_nodes: no NUMA nodes in sysfs; derived from the GPUs' NUMA node and CPU affinity")
        return [Flow(id=i, cpus=Q(format_cpulist(cpus))) for i, cpus in sorted(derived.items())]
    notes.placeholder("node.numa_nodes: neither sysfs nor NVML gave a NUMA layout (one node, CPU 0)")
    return [Flow(id=0, cpus=Q("0"))]


def _gpu_numa(topo: GpuTopology, numa: list[dict[str, Any]]) -> int:
    """The GPU's NUMA node: NVML's answer if the host has it, else the node holding its CPUs."""
    ids = {n["id"] for n in numa}
    if is_available(topo.numa_node) and topo.numa_node in ids:
        return int(topo.numa_node)
    if is_available(topo.cpu_affinity) and topo.cpu_affinity:
        first = topo.cpu_affinity[0]
        for n in numa:
            if first in parse_cpulist(n["cpus"]):
                return int(n["id"])
    return min(ids)


def _nvlinks(topo: GpuTopology, switches: list[str], notes: _Notes) -> list[int]:
    """Per link, the index into ``switches`` (bus ids) of its far end, adding new ones.

    A link whose far end NVML does not name goes to one invented NVSwitch (``UNKNOWN_SWITCH``);
    a far end that is not an NVSwitch (a GPU, say) is written as one, since a scenario describes
    NVSwitch fabrics only. Both are listed in the notes, per GPU.
    """
    out, unknown, other = [], [], []
    for peer in topo.nvlinks:
        bus = peer.remote_pci_bus_id
        if not is_available(bus) or normalise_bus_id(bus) is None:
            unknown.append(peer.link)
            bus = UNKNOWN_SWITCH
        elif is_available(peer.remote_type) and peer.remote_type != "switch":
            other.append(f"{peer.link}: {peer.remote_type} {bus}")
        if bus not in switches:
            switches.append(bus)
        out.append(switches.index(bus))
    if unknown:
        notes.placeholder(
            f"gpus[{topo.index}].nvlinks {unknown}: far-end bus id not given by NVML; written as the invented "
            f"NVSwitch {UNKNOWN_SWITCH}"
        )
    if other:
        notes.placeholder(f"gpus[{topo.index}].nvlinks: far ends that are not NVSwitches, written as if they were ({'; '.join(other)})")
    return out


def _sample(session: NvmlSession, notes: _Notes) -> tuple[NodeSnapshot, list[GpuTopology], list[dict[str, Any] | None]]:
    """The node's snapshot, each GPU's topology and its MIG entry, read in one NVML session."""
    reader = NodeReader(session)
    try:
        snapshot = reader.sample()
        if not snapshot.nvml_up:
            raise RuntimeError(f"cannot record: NVML is not usable here ({snapshot.nvml_error})")
        if not snapshot.gpus:
            raise RuntimeError("cannot record: NVML reports no GPUs on this node")
        topos = []
        for gpu in snapshot.gpus:
            _check_gpu(gpu)
            try:
                topo = read_topology(session, gpu.index, int(_or(gpu.limits.nvlink_count, 0)))
            except GpuLostError as lost:
                raise RuntimeError(f"cannot record: GPU {gpu.index} was lost while recording ({lost})") from None
            if not is_available(topo):
                raise RuntimeError(f"cannot record: GPU {gpu.index} has no NVML handle ({topo.detail or topo.reason})")
            topos.append(topo)
        migs = [read_mig(session, gpu, notes.placeholder, notes.estimate) for gpu in snapshot.gpus]
        return snapshot, topos, migs
    finally:
        reader.close()


def _cuda_version(text: Reading[str]) -> int:
    """"12.4" -> 12040 (NVML's 1000 * major + 10 * minor)."""
    if not is_available(text):
        return 0
    major, _, minor = text.partition(".")
    return int(major) * 1000 + int(minor or 0) * 10


def record_scenario(name: str = "recorded", *, sys_root: str = DEFAULT_SYS_ROOT) -> str:
    """The scenario YAML of this node (RuntimeError with the reason when NVML is not usable)."""
    notes = _Notes()
    snapshot, topos, migs = _sample(NvmlSession(), notes)
    root = Path(sys_root)
    driver = snapshot.driver
    assert driver is not None  # nvml_up implies the driver was read
    driver_version = _or(driver.driver_version, "unknown")
    numa = _numa_nodes(_sys_numa_nodes(root), topos, notes)
    models: dict[str, dict[str, Any]] = {}
    members: dict[str, list[GpuSnapshot]] = {}
    switches: list[str] = []
    gpus = []
    for gpu, topo, mig in zip(snapshot.gpus, topos, migs, strict=True):
        key = _slug(_or(gpu.identity.name, "gpu"))
        if key not in models:
            models[key] = _model(gpu, topo, key, notes)
        members.setdefault(key, []).append(gpu)
        if is_available(topo.cpu_affinity):
            affinity = format_cpulist(topo.cpu_affinity)
        else:
            affinity = next(n["cpus"] for n in numa if n["id"] == _gpu_numa(topo, numa))
            notes.estimate(f"gpus[{gpu.index}].cpu_affinity: NVML gave none; the CPUs of its NUMA node")
        nvlinks = _nvlinks(topo, switches, notes)
        if len(nvlinks) != models[key]["nvlink"]["links"]:
            raise RuntimeError(
                f"cannot record: GPU {gpu.index} has {len(nvlinks)} NVLinks, the first {key} had "
                f"{models[key]['nvlink']['links']}"
            )
        gpus.append(Flow(
            index=gpu.index,
            model=key,
            uuid=gpu.uuid,
            serial=Q(_or(gpu.identity.serial, "")),
            pci_bus_id=Q(_nvml_bus_id(gpu.identity.pci_bus_id)),
            numa_node=_gpu_numa(topo, numa),
            cpu_affinity=Q(affinity),
            pcie_switch=PLACEHOLDER_SWITCH,
            nics=[],
            nvlinks=nvlinks,
            **({"mig": mig} if mig is not None else {}),
        ))
    for key, model in models.items():
        _idle_facts(model, key, members[key], notes)
    nics = _sys_nics(root, {n["id"] for n in numa})
    switch_of, pcie_switches, unplaced = record_switches(root, [d["pci_bus_id"] for d in (*gpus, *nics)])
    for d in (*gpus, *nics):
        d["pcie_switch"] = switch_of[d["pci_bus_id"]]
    if unplaced:
        notes.placeholder(f"pcie_switches: a placeholder switch of its own (ports in domain FFFFFFFF) for "
                          f"{', '.join(unplaced)}: no PCIe switch above it under {root / 'bus/pci/devices'}")
    notes.placeholder("gpus[*].nics: [] (which NIC serves which GPU is not known to NVML)")
    if any(n["rate_gbps"] == 0 for n in nics):
        notes.placeholder("nics[*].rate_gbps: 0 where ports/1/rate was unreadable")
    if not nics:
        notes.placeholder(f"nics: none found under {root / 'class/infiniband'}")
    sockets = cpu_sockets(root)
    if sockets is None:
        notes.placeholder(f"node.sockets: 1 (no CPU topology under {root / 'devices/system/cpu'})")
    recorded_at = datetime.now(UTC).replace(microsecond=0).isoformat()
    data: dict[str, Any] = {
        "name": name,
        "description": f"recorded from a node with {len(gpus)} GPUs "
                       f"({', '.join(m['name'] for m in models.values())}; driver {driver_version})",
        "x-recorded": {
            "by": "runtimekit sim record",
            "at": recorded_at,
            "driver": Q(driver_version),
            "placeholders": notes.placeholders,
            "estimates": notes.estimates,
        },
        "driver": {
            "version": Q(driver_version),
            "cuda_version": _cuda_version(driver.cuda_driver_version),
            "nvml_version": Q(_or(driver.nvml_version, "unknown")),
        },
        "models": models,
        "node": {"sockets": sockets or 1, "numa_nodes": numa},
        "nvswitches": [Flow(id=i, pci_bus_id=Q(b if b == UNKNOWN_SWITCH else _nvml_bus_id(b))) for i, b in enumerate(switches)],
        "pcie_switches": [Flow(**{k: Q(v) for k, v in e.items()}) for e in pcie_switches],
        "nics": nics,
        "gpus": gpus,
        "load": {"profile": "training"},
    }
    try:
        parse_scenario(data, "recorded")
    except ScenarioError as exc:
        raise RuntimeError(f"cannot record: the recording is not a valid scenario ({exc})") from None
    header = (
        f"# Recorded by `runtimekit sim record` at {recorded_at} from NVIDIA driver {driver_version} "
        f"(NVML {data['driver']['nvml_version']}).\n"
        "# Placeholders (facts NVML cannot give) and estimates are listed under x-recorded.\n"
    )
    body = yaml.dump(data, Dumper=Dumper, sort_keys=False, width=100_000, default_flow_style=False)
    return header + body


def _nvml_bus_id(value: object) -> str:
    """The driver's spelling of a GPU's PCI address (scenarios hold what NVML answers), "" if unread."""
    text = _or(value, "")
    return PciAddress.parse(text).nvml if text else ""
