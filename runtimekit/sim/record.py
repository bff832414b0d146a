"""``runtimekit sim record``: capture the node this runs on as a scenario YAML.

Reads identity and limits through pynvml (one pass, at record time; the only pynvml user in
``sim`` besides ``install``, because recording *is* reading the driver), NUMA nodes from
``/sys/devices/system/node`` and RDMA NICs from ``/sys/class/infiniband`` (host paths are
parameters). The result is validated with ``parse_scenario`` before it is returned. Facts NVML
cannot give (idle clocks, idle power, PCIe switch names) are estimated and marked in comments.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from .scenario import ARCHITECTURES, parse_scenario

__all__ = ["record_scenario"]

_ARCH_NAMES = {v: k for k, v in ARCHITECTURES.items()}


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower().removeprefix("nvidia ")).strip("-") or "gpu"


def _try(fn: Any, *args: Any, default: Any = None) -> Any:
    import pynvml

    try:
        return fn(*args)
    except pynvml.NVMLError:
        return default


def _numa_nodes(sys_root: Path) -> list[dict[str, Any]]:
    out = []
    for d in sorted((sys_root / "devices/system/node").glob("node[0-9]*"), key=lambda p: int(p.name[4:])):
        cpus = (d / "cpulist").read_text().strip() if (d / "cpulist").is_file() else ""
        if cpus:
            out.append({"id": int(d.name[4:]), "cpus": cpus})
    return out or [{"id": 0, "cpus": "0"}]


def _nics(sys_root: Path) -> list[dict[str, Any]]:
    out = []
    for d in sorted((sys_root / "class/infiniband").glob("*")):
        dev = (d / "device").resolve()
        numa = (dev / "numa_node").read_text().strip() if (dev / "numa_node").is_file() else "0"
        bus = dev.name.upper()
        if re.match(r"^[0-9A-F]{4}:[0-9A-F]{2}:[0-9A-F]{2}\.[0-7]$", bus):
            bus = "0000" + bus
        out.append({"name": d.name, "pci_bus_id": bus, "numa_node": max(0, int(numa)),
                    "pcie_switch": "unknown", "rate_gbps": 0})
    return out


def _cpulist(words: Any) -> str:
    cpus = [w * 64 + b for w, word in enumerate(words) for b in range(64) if int(word) >> b & 1]
    ranges: list[str] = []
    for c in cpus:
        if ranges and int(ranges[-1].split("-")[-1]) == c - 1:
            ranges[-1] = f"{ranges[-1].split('-')[0]}-{c}"
        else:
            ranges.append(str(c))
    return ",".join(ranges) or "0"


def record_scenario(name: str = "recorded", *, sys_root: str = "/sys") -> str:
    """The scenario YAML of this node (RuntimeError when NVML is not usable)."""
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise RuntimeError(f"cannot record: NVML is not usable here ({exc})") from None
    try:
        root = Path(sys_root)
        numa = _numa_nodes(root)
        numa_ids = {n["id"] for n in numa}
        models: dict[str, dict[str, Any]] = {}
        switches: list[str] = []
        gpus = []
        driver = {
            "version": pynvml.nvmlSystemGetDriverVersion(),
            "cuda_version": pynvml.nvmlSystemGetCudaDriverVersion_v2(),
            "nvml_version": pynvml.nvmlSystemGetNVMLVersion(),
        }
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            gname = pynvml.nvmlDeviceGetName(h)
            key = _slug(gname)
            mem = _try(pynvml.nvmlDeviceGetMemoryInfo, h, pynvml.nvmlMemory_v2)
            pci = pynvml.nvmlDeviceGetPciInfo(h)
            links = 0
            fv = _try(pynvml.nvmlDeviceGetFieldValues, h, [pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT])
            if fv and fv[0].nvmlReturn == 0:
                links = int(fv[0].value.uiVal)
            nvlinks = []
            for link in range(links):
                remote = _try(pynvml.nvmlDeviceGetNvLinkRemotePciInfo, h, link)
                bus = remote.busId if remote is not None else "00000000:00:00.0"
                bus = bus.decode() if isinstance(bus, bytes) else bus
                if bus not in switches:
                    switches.append(bus)
                nvlinks.append(switches.index(bus))
            mx = {k: _try(pynvml.nvmlDeviceGetMaxClockInfo, h, c, default=0)
                  for k, c in (("sm", 1), ("memory", 2), ("graphics", 0))}
            limit_w = (_try(pynvml.nvmlDeviceGetEnforcedPowerLimit, h, default=300_000) or 300_000) // 1000
            th = {k: _try(pynvml.nvmlDeviceGetTemperatureThreshold, h, c, default=0)
                  for k, c in (("shutdown", 0), ("slowdown", 1), ("mem_max", 2), ("gpu_max", 3))}
            models.setdefault(key, {
                "name": gname,
                "architecture": _ARCH_NAMES.get(_try(pynvml.nvmlDeviceGetArchitecture, h), "hopper"),
                "compute_capability": list(_try(pynvml.nvmlDeviceGetCudaComputeCapability, h, default=(9, 0))),
                "pci_device_id": int(pci.pciDeviceId),
                "pci_subsystem_id": int(pci.pciSubSystemId),
                "vbios_version": _try(pynvml.nvmlDeviceGetVbiosVersion, h, default=""),
                "board_part_number": _try(pynvml.nvmlDeviceGetBoardPartNumber, h, default=""),
                "memory_total_mib": int(mem.total >> 20) if mem else 1,
                "memory_reserved_mib": int(mem.reserved >> 20) if mem else 0,
                "bar1_total_mib": int(_try(pynvml.nvmlDeviceGetBAR1MemoryInfo, h).bar1Total >> 20),
                "power_limit_w": int(limit_w),
                "power_idle_w": max(1, int(limit_w) // 10),  # estimate
                "clocks_max_mhz": mx,
                "clocks_idle_mhz": {k: max(1, v // 5) if k != "memory" else v for k, v in mx.items()},  # estimate
                "temperature_thresholds_c": th,
                "pcie": {"generation": _try(pynvml.nvmlDeviceGetMaxPcieLinkGeneration, h, default=4),
                         "width": _try(pynvml.nvmlDeviceGetMaxPcieLinkWidth, h, default=16)},
                "nvlink": {"version": _try(getattr(pynvml, "nvmlDeviceGetNvLinkVersion", None), h, 0, default=0)
                           if links else 0, "links": links, "link_gbps": 25},
                "mig_capable": _try(pynvml.nvmlDeviceGetMigMode, h) is not None,
                "fan": _try(pynvml.nvmlDeviceGetFanSpeed, h) is not None,
                "retired_pages": _try(pynvml.nvmlDeviceGetRetiredPagesPendingStatus, h) is not None,
                "row_remapping": _try(pynvml.nvmlDeviceGetRemappedRows, h) is not None,
            })
            node_id = _try(getattr(pynvml, "nvmlDeviceGetNumaNodeId", None), h, default=0)
            words = _try(pynvml.nvmlDeviceGetCpuAffinity, h, 16)
            gpus.append({
                "index": i,
                "model": key,
                "uuid": pynvml.nvmlDeviceGetUUID(h),
                "serial": _try(pynvml.nvmlDeviceGetSerial, h, default="") or "",
                "pci_bus_id": pci.busId.decode() if isinstance(pci.busId, bytes) else pci.busId,
                "numa_node": node_id if node_id in numa_ids else min(numa_ids),
                "cpu_affinity": _cpulist(words) if words is not None else numa[0]["cpus"],
                "pcie_switch": "unknown",
                "nics": [],
                "nvlinks": nvlinks,
            })
    finally:
        _try(pynvml.nvmlShutdown)
    data = {
        "name": name,
        "description": f"recorded from a node with {len(gpus)} GPUs",
        "driver": driver,
        "models": models,
        "node": {"sockets": 1, "numa_nodes": numa},
        "nvswitches": [{"id": i, "pci_bus_id": b} for i, b in enumerate(switches)],
        "nics": _nics(root),
        "gpus": gpus,
    }
    parse_scenario(data, "recorded")
    header = "# Recorded with `runtimekit sim record`; power_idle_w and clocks_idle_mhz are estimates.\n"
    return header + yaml.safe_dump(data, sort_keys=False, width=120)
