"""Scenario files: the machine a simulated node pretends to be.

A scenario is YAML (built-ins live in ``runtimekit/sim/scenarios/``): driver versions, a
``models:`` section with the facts of each GPU model written once, the node's NUMA layout,
NVSwitches, NICs and one entry per GPU (identity, PCI bus id, NUMA node, CPU affinity, PCIe switch,
NICs, for each NVLink the index of the NVSwitch at its far end, and optionally its MIG state:
``scenario_mig``). Top-level keys starting with
``x-`` are free (YAML anchors live there). Loading validates everything: an unknown key, a wrong
type or a broken cross-reference raises ``ScenarioError`` naming the key path and the rule. The
spec types (``Scenario``, ``GpuSpec``, ``GpuModel``, ...) live in ``scenario_types``, re-exported here.
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path
from typing import Any

from runtimekit.documents import DocumentError, load_yaml, load_yaml_file
from runtimekit.schema import check_shape

from .pods import (
    CGROUP_DRIVERS,
    GPU_RESOURCE,
    QOS_CLASSES,
    RUNTIMES,
    KubernetesSpec,
    SimContainer,
    SimDevice,
    SimPod,
    container_id_for,
    pod_uid_for,
)
from .scenario_bounds import I32, MAX_NUMA_NODES, check_between, check_cpulist, check_model_numbers
from .scenario_mig import parse_mig
from .scenario_pcie import SWITCH_SCHEMA, parse_pcie_switches
from .scenario_types import (
    ARCHITECTURES,
    LOAD_PROFILES,
    GpuModel,
    GpuSpec,
    NicSpec,
    NumaNodeSpec,
    NvSwitchSpec,
    PcieSwitchSpec,
    Scenario,
    ScenarioError,
)

__all__ = [
    "ScenarioError",
    "Scenario",
    "GpuModel",
    "GpuSpec",
    "NvSwitchSpec",
    "NicSpec",
    "NumaNodeSpec",
    "PcieSwitchSpec",
    "load_scenario",
    "list_scenarios",
    "parse_scenario",
    "ARCHITECTURES",
    "LOAD_PROFILES",
]

_BUS_ID = re.compile(r"^[0-9A-Fa-f]{8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$")
_UUID = re.compile(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_POD_UID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_CONTAINER_ID = re.compile(r"^[0-9a-f]{64}$")



# ---- schema ---------------------------------------------------------------------------------
# A spec is a Python type (or tuple of types), a dict (object with exactly these keys; a key
# ending in "?" is optional), or a one-element list (list of that spec).

_CLOCKS = {"sm": int, "memory": int, "graphics": int}
_MODEL = {
    "name": str,
    "architecture": str,
    "compute_capability": [int],
    "pci_device_id": int,
    "pci_subsystem_id": int,
    "vbios_version": str,
    "board_part_number": str,
    "memory_total_mib": int,
    "memory_reserved_mib": int,
    "bar1_total_mib": int,
    "power_limit_w": int,
    "power_idle_w": int,
    "clocks_max_mhz": _CLOCKS,
    "clocks_idle_mhz": _CLOCKS,
    "temperature_thresholds_c": {"shutdown": int, "slowdown": int, "gpu_max": int, "mem_max": int},
    "pcie": {"generation": int, "width": int},
    "nvlink": {"version": int, "links": int, "link_gbps": int},
    "mig_capable": bool,
    "fan": bool,
    "retired_pages": bool,
    "row_remapping": bool,
}
_GPU = {
    "index": int,
    "model": str,
    "uuid": str,
    "serial": str,
    "pci_bus_id": str,
    "numa_node": int,
    "cpu_affinity": str,
    "pcie_switch": str,
    "nics": [str],
    "nvlinks": [int],
    "mig?": {
        "enabled": bool,
        "instances?": [{"profile": str, "placement?": int, "compute_instances?": [str]}],
    },
}
_SCHEMA = {
    "name": str,
    "description?": str,
    "driver": {"version": str, "cuda_version": int, "nvml_version": str},
    "models": dict,  # name -> _MODEL, checked below
    "node": {"sockets": int, "cpu_model?": str, "numa_nodes": [{"id": int, "cpus": str, "socket?": int}]},
    "nvswitches?": [{"id": int, "pci_bus_id": str}],
    "pcie_switches?": [SWITCH_SCHEMA],
    "nics?": [{"name": str, "pci_bus_id": str, "numa_node": int, "pcie_switch": str, "rate_gbps": int}],
    "gpus": [_GPU],
    "load?": {"profile": str},
    "kubernetes?": {
        "runtime": str,
        "cgroup_driver": str,
        "cgroup_version": int,
        "pods?": [
            {
                "name": str,
                "namespace": str,
                "uid?": str,
                "qos?": str,
                "containers": [{"name": str, "id?": str, "gpus?": [int], "idle?": bool}],
            }
        ],
    },
}


def _model(key: str, m: dict[str, Any]) -> GpuModel:
    path = f"models.{key}"
    check_shape(m, _MODEL, path, ScenarioError)
    if m["architecture"] not in ARCHITECTURES:
        raise ScenarioError(f"{path}.architecture: must be one of {', '.join(ARCHITECTURES)}")
    if len(m["compute_capability"]) != 2:
        raise ScenarioError(f"{path}.compute_capability: must be [major, minor]")
    for k in ("memory_total_mib", "bar1_total_mib", "power_limit_w", "power_idle_w"):
        if m[k] <= 0:
            raise ScenarioError(f"{path}.{k}: must be > 0")
    if not 0 <= m["memory_reserved_mib"] < m["memory_total_mib"]:
        raise ScenarioError(f"{path}.memory_reserved_mib: must be in 0..memory_total_mib-1")
    if m["power_idle_w"] >= m["power_limit_w"]:
        raise ScenarioError(f"{path}.power_idle_w: must be below power_limit_w")
    if not 1 <= m["pcie"]["generation"] <= 6:
        raise ScenarioError(f"{path}.pcie.generation: must be in 1..6")
    if m["pcie"]["width"] not in (1, 2, 4, 8, 16, 32):
        raise ScenarioError(f"{path}.pcie.width: must be one of 1, 2, 4, 8, 16, 32")
    if not 0 <= m["nvlink"]["links"] <= 18:
        raise ScenarioError(f"{path}.nvlink.links: must be in 0..18")
    check_model_numbers(path, m)
    return GpuModel(
        key=key,
        name=m["name"],
        architecture=m["architecture"],
        compute_capability=(m["compute_capability"][0], m["compute_capability"][1]),
        pci_device_id=m["pci_device_id"],
        pci_subsystem_id=m["pci_subsystem_id"],
        vbios_version=m["vbios_version"],
        board_part_number=m["board_part_number"],
        memory_total_mib=m["memory_total_mib"],
        memory_reserved_mib=m["memory_reserved_mib"],
        bar1_total_mib=m["bar1_total_mib"],
        power_limit_w=m["power_limit_w"],
        power_idle_w=m["power_idle_w"],
        clocks_max_mhz=dict(m["clocks_max_mhz"]),
        clocks_idle_mhz=dict(m["clocks_idle_mhz"]),
        temperature_thresholds_c=dict(m["temperature_thresholds_c"]),
        pcie_generation=m["pcie"]["generation"],
        pcie_width=m["pcie"]["width"],
        nvlink_version=m["nvlink"]["version"],
        nvlink_links=m["nvlink"]["links"],
        nvlink_link_gbps=m["nvlink"]["link_gbps"],
        mig_capable=m["mig_capable"],
        fan=m["fan"],
        retired_pages=m["retired_pages"],
        row_remapping=m["row_remapping"],
    )


def parse_scenario(data: Any, source: str = "<data>") -> Scenario:
    """Validate parsed YAML ``data`` and build a Scenario (ScenarioError on any rule broken)."""
    check_shape(data, _SCHEMA, "", ScenarioError)
    check_between("driver.cuda_version", data["driver"]["cuda_version"], 0, I32,
                  "nvmlSystemGetCudaDriverVersion answers an int")
    if not data["models"]:
        raise ScenarioError("models: at least one model is required")
    models = {str(k): _model(str(k), v) for k, v in data["models"].items()}
    switches = tuple(NvSwitchSpec(s["id"], s["pci_bus_id"]) for s in data.get("nvswitches", []))
    for i, s in enumerate(switches):
        if s.id != i:
            raise ScenarioError(f"nvswitches[{i}].id: must equal its position ({i})")
        if not _BUS_ID.match(s.pci_bus_id):
            raise ScenarioError(f"nvswitches[{i}].pci_bus_id: must look like 00000000:05:00.0")
    nics = tuple(NicSpec(**n) for n in data.get("nics", []))
    nic_names = {n.name for n in nics}
    for i, n in enumerate(nics):
        if not _BUS_ID.match(n.pci_bus_id):
            raise ScenarioError(f"nics[{i}].pci_bus_id: must look like 00000000:1A:00.0")
    numa = _numa_nodes(data["node"])
    numa_ids = {n.id for n in numa}
    if not data["gpus"]:
        raise ScenarioError("gpus: at least one GPU is required")
    gpus = []
    seen_uuid: set[str] = set()
    seen_bus: set[str] = set()
    for i, g in enumerate(data["gpus"]):
        p = f"gpus[{i}]"
        if g["index"] != i:
            raise ScenarioError(f"{p}.index: must equal its position ({i})")
        if g["model"] not in models:
            raise ScenarioError(f"{p}.model: unknown model {g['model']!r} (models: {', '.join(models)})")
        model = models[g["model"]]
        if not _UUID.match(g["uuid"]):
            raise ScenarioError(f"{p}.uuid: must look like GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx (lowercase hex)")
        if g["uuid"] in seen_uuid:
            raise ScenarioError(f"{p}.uuid: duplicate {g['uuid']}")
        if not _BUS_ID.match(g["pci_bus_id"]):
            raise ScenarioError(f"{p}.pci_bus_id: must look like 00000000:18:00.0")
        if g["pci_bus_id"].upper() in seen_bus:
            raise ScenarioError(f"{p}.pci_bus_id: duplicate {g['pci_bus_id']}")
        if g["numa_node"] not in numa_ids:
            raise ScenarioError(f"{p}.numa_node: {g['numa_node']} is not in node.numa_nodes")
        check_cpulist(f"{p}.cpu_affinity", g["cpu_affinity"])
        for nic in g["nics"]:
            if nic not in nic_names:
                raise ScenarioError(f"{p}.nics: unknown NIC {nic!r} (not in nics)")
        if len(g["nvlinks"]) != model.nvlink_links:
            raise ScenarioError(
                f"{p}.nvlinks: has {len(g['nvlinks'])} entries, model {model.key} has {model.nvlink_links} links"
            )
        for sw in g["nvlinks"]:
            if not 0 <= sw < len(switches):
                raise ScenarioError(f"{p}.nvlinks: switch index {sw} out of range 0..{len(switches) - 1}")
        seen_uuid.add(g["uuid"])
        seen_bus.add(g["pci_bus_id"].upper())
        gpus.append(
            GpuSpec(
                index=i,
                model=model,
                uuid=g["uuid"],
                serial=g["serial"],
                pci_bus_id=g["pci_bus_id"].upper(),
                numa_node=g["numa_node"],
                cpu_affinity=g["cpu_affinity"],
                pcie_switch=g["pcie_switch"],
                nics=tuple(g["nics"]),
                nvlinks=tuple(g["nvlinks"]),
                mig=parse_mig(f"{p}.mig", g.get("mig"), model),
            )
        )
    for i, n in enumerate(nics):
        if n.numa_node not in numa_ids:
            raise ScenarioError(f"nics[{i}].numa_node: {n.numa_node} is not in node.numa_nodes")
    placed = [(f"gpus[{g.index}]", g.pci_bus_id, g.pcie_switch, g.numa_node) for g in gpus]
    placed += [(f"nics[{i}]", n.pci_bus_id.upper(), n.pcie_switch, n.numa_node) for i, n in enumerate(nics)]
    pcie_switches = parse_pcie_switches(data.get("pcie_switches", []), placed)
    kubernetes = _kubernetes(data.get("kubernetes"), gpus)
    profile = data.get("load", {}).get("profile", "training")
    if profile not in LOAD_PROFILES:
        raise ScenarioError(f"load.profile: must be one of {', '.join(LOAD_PROFILES)}")
    return Scenario(
        name=data["name"],
        description=data.get("description", ""),
        driver_version=data["driver"]["version"],
        cuda_driver_version=data["driver"]["cuda_version"],
        nvml_version=data["driver"]["nvml_version"],
        models=models,
        gpus=tuple(gpus),
        nvswitches=switches,
        nics=nics,
        numa_nodes=numa,
        sockets=data["node"]["sockets"],
        pcie_switches=pcie_switches,
        cpu_model=data["node"].get("cpu_model", ""),
        load_profile=profile,
        kubernetes=kubernetes,
        source=source,
        raw=data,
    )


def _numa_nodes(node: dict[str, Any]) -> tuple[NumaNodeSpec, ...]:
    """``node.numa_nodes``, each on a socket: its ``socket``, or by default the nodes shared evenly
    over ``node.sockets`` in list order (2 sockets, 8 nodes: nodes 0-3 on socket 0, as AMD's NPS4
    numbers them)."""
    sockets, listed = node["sockets"], node["numa_nodes"]
    if sockets < 1:
        raise ScenarioError("node.sockets: must be >= 1")
    out = []
    for i, n in enumerate(listed):
        check_cpulist(f"node.numa_nodes[{i}].cpus", n["cpus"])
        check_between(f"node.numa_nodes[{i}].id", n["id"], 0, MAX_NUMA_NODES - 1,
                      "Linux numbers at most 1024 NUMA nodes; nvmlDeviceGetNumaNodeId answers an unsigned int")
        socket = n.get("socket", i * sockets // len(listed))
        if not 0 <= socket < sockets:
            raise ScenarioError(f"node.numa_nodes[{i}].socket: must be in 0..{sockets - 1} (node.sockets)")
        out.append(NumaNodeSpec(n["id"], n["cpus"], socket))
    if len({n.id for n in out}) != len(out):
        raise ScenarioError("node.numa_nodes: ids must be unique")
    return tuple(out)


def _kubernetes(k: dict[str, Any] | None, gpus: list[GpuSpec]) -> KubernetesSpec:
    """The ``kubernetes:`` section: runtime and cgroup layout, and the pods the node starts with."""
    if k is None:
        return KubernetesSpec()
    if k["runtime"] not in RUNTIMES:
        raise ScenarioError(f"kubernetes.runtime: must be one of {', '.join(RUNTIMES)}")
    if k["cgroup_driver"] not in CGROUP_DRIVERS:
        raise ScenarioError(f"kubernetes.cgroup_driver: must be one of {', '.join(CGROUP_DRIVERS)}")
    if k["cgroup_version"] not in (1, 2):
        raise ScenarioError("kubernetes.cgroup_version: must be 1 or 2")
    pods = []
    seen: set[tuple[str, str]] = set()
    for i, p in enumerate(k.get("pods", [])):
        path = f"kubernetes.pods[{i}]"
        if (p["namespace"], p["name"]) in seen:
            raise ScenarioError(f"{path}: duplicate pod {p['namespace']}/{p['name']}")
        seen.add((p["namespace"], p["name"]))
        qos = p.get("qos", "burstable")
        if qos not in QOS_CLASSES:
            raise ScenarioError(f"{path}.qos: must be one of {', '.join(QOS_CLASSES)}")
        uid = p.get("uid") or pod_uid_for(p["namespace"], p["name"])
        if not _POD_UID.match(uid):
            raise ScenarioError(f"{path}.uid: must be a UUID like 1b4e28ba-2fa1-11d2-883f-0016d3cca427")
        containers = []
        for j, c in enumerate(p["containers"]):
            cpath = f"{path}.containers[{j}]"
            cid = c.get("id") or container_id_for(p["namespace"], p["name"], c["name"])
            if not _CONTAINER_ID.match(cid):
                raise ScenarioError(f"{cpath}.id: must be 64 lowercase hex digits")
            devices = []
            for g in c.get("gpus", []):
                if not 0 <= g < len(gpus):
                    raise ScenarioError(f"{cpath}.gpus: GPU {g} out of range 0..{len(gpus) - 1}")
                devices.append(SimDevice(GPU_RESOURCE, gpus[g].uuid))
            containers.append(SimContainer(c["name"], cid, tuple(devices), idle=c.get("idle", False)))
        pods.append(SimPod(p["name"], p["namespace"], uid, tuple(containers), qos_class=qos))
    return KubernetesSpec(k["runtime"], k["cgroup_driver"], k["cgroup_version"], tuple(pods))


def _builtin_dir() -> Any:
    return resources.files("runtimekit.sim").joinpath("scenarios")


def list_scenarios() -> list[str]:
    """Names of the built-in scenarios (``dgx-2``, ``dgx-a100``, ``dgx-h100``, ``hgx-h200``, ``pcie-inference``)."""
    return sorted(p.name[: -len(".yaml")] for p in _builtin_dir().iterdir() if p.name.endswith(".yaml"))


def load_scenario(name_or_path: str) -> Scenario:
    """Load a built-in scenario by name, or a YAML file by path; validated (ScenarioError)."""
    builtin = _builtin_dir().joinpath(f"{name_or_path}.yaml")
    try:
        if "/" not in name_or_path and builtin.is_file():
            source = f"builtin:{name_or_path}"
            data = load_yaml(builtin.read_bytes(), what=source)
        else:
            path = Path(name_or_path)
            if not path.is_file():
                raise ScenarioError(
                    f"scenario {name_or_path!r}: no such file and not a built-in "
                    f"(built-ins: {', '.join(list_scenarios())})"
                )
            source = str(path)
            data = load_yaml_file(path, what=source)
    except OSError as exc:
        raise ScenarioError(f"scenario {name_or_path!r}: cannot read: {exc.strerror}") from exc
    except DocumentError as exc:
        raise ScenarioError(str(exc)) from None
    try:
        return parse_scenario(data, source)
    except ScenarioError as exc:
        raise ScenarioError(f"{source}: {exc}") from None
