"""Bounds of a scenario's numbers: each one as wide as the C type NVML answers it in (a value past
it would wrap silently in a ctypes field or fail to pack, mid-sampling) or as a real machine has it.

``scenario.parse_scenario`` calls these after the shapes are checked; each raises ``ScenarioError``
naming the key path, the value and the rule. Sources: nvml.h for the C types (nvmlPciInfo_t,
nvmlMemory_t, nvmlBAR1Memory_t, nvmlDeviceGetPowerManagementLimit in mW, clocks in MHz, CUDA
version as int); the Linux kernel's Kconfig for CPU and NUMA node ids (x86_64: ``NR_CPUS`` at
most 8192 with MAXSMP, ``NODES_SHIFT`` at most 10; arm64's limits are lower).
"""

from __future__ import annotations

import re
from typing import Any

from .scenario_types import ScenarioError

__all__ = ["MAX_CPUS", "MAX_NUMA_NODES", "U32", "I32", "check_model_numbers", "check_cpulist", "check_between"]

MiB = 1 << 20
U32 = (1 << 32) - 1  # unsigned int
I32 = (1 << 31) - 1  # int
MAX_MIB = ((1 << 64) - 1) // MiB  # MiB whose bytes still fit an unsigned long long
MAX_CPUS = 8192  # CPU ids 0..8191: Linux NR_CPUS is at most 8192
MAX_NUMA_NODES = 1024  # node ids 0..1023: Linux MAX_NUMNODES = 1 << NODES_SHIFT, NODES_SHIFT <= 10
MAX_TEMPERATURE_C = 200  # no GPU has a threshold past ~110 °C; NVML answers °C as unsigned int

#: Model key -> (low, high, why): the C field or call each one ends up in.
_MODEL_BOUNDS: dict[str, tuple[int, int, str]] = {
    "pci_device_id": (0, U32, "nvmlPciInfo_t.pciDeviceId is an unsigned int"),
    "pci_subsystem_id": (0, U32, "nvmlPciInfo_t.pciSubSystemId is an unsigned int"),
    "memory_total_mib": (1, MAX_MIB, "nvmlMemory_t.total is bytes in an unsigned long long"),
    "bar1_total_mib": (1, MAX_MIB, "nvmlBAR1Memory_t.bar1Total is bytes in an unsigned long long"),
    "power_limit_w": (1, U32 // 1000, "nvmlDeviceGetPowerManagementLimit answers mW in an unsigned int"),
}


def check_between(path: str, value: int, low: int, high: int, why: str) -> None:
    """ScenarioError naming ``path`` unless ``low <= value <= high`` (``why``: the rule's source)."""
    if not low <= value <= high:
        raise ScenarioError(f"{path}: got {value}; must be in {low}..{high} ({why})")


def check_model_numbers(path: str, m: dict[str, Any]) -> None:
    """Bound the numbers of model ``m`` (at ``path``, shapes already checked): the C types NVML
    answers them in, clocks in MHz (unsigned int) with each idle clock at most its max, and
    temperature thresholds in 0..``MAX_TEMPERATURE_C`` °C."""
    for key, (low, high, why) in _MODEL_BOUNDS.items():
        check_between(f"{path}.{key}", m[key], low, high, why)
    for i, part in enumerate(m["compute_capability"]):
        check_between(f"{path}.compute_capability[{i}]", part, 0, I32, "nvmlDeviceGetCudaComputeCapability answers ints")
    for kind in ("clocks_max_mhz", "clocks_idle_mhz"):
        for name, mhz in m[kind].items():
            check_between(f"{path}.{kind}.{name}", mhz, 0, U32, "NVML answers MHz in an unsigned int")
    for name, idle in m["clocks_idle_mhz"].items():
        top = m["clocks_max_mhz"][name]
        if idle > top:
            raise ScenarioError(f"{path}.clocks_idle_mhz.{name}: got {idle}; must be at most "
                                f"clocks_max_mhz.{name} ({top}): a GPU idles below its max clock")
    for name, celsius in m["temperature_thresholds_c"].items():
        check_between(f"{path}.temperature_thresholds_c.{name}", celsius, 0, MAX_TEMPERATURE_C,
                      "°C; real parts' thresholds are 80-110")
    check_between(f"{path}.nvlink.link_gbps", m["nvlink"]["link_gbps"], 0, U32, "GB/s per direction")


#: A kernel cpu list, "0-55,112-167": ASCII digits (``\d`` takes any Unicode digit), nothing after it.
_CPULIST = re.compile(r"[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*")


def check_cpulist(path: str, text: str) -> None:
    """ScenarioError naming ``path`` for what is not a cpu list ("0-55,112-167"), or one with a
    range that goes backwards or a CPU id past ``MAX_CPUS`` - 1 (no kernel runs that many: an empty
    or a huge CPU mask otherwise, built on every nvmlDeviceGetCpuAffinity call)."""
    if not _CPULIST.fullmatch(text):
        raise ScenarioError(f"{path}: must be a cpu list like 0-55,112-167")
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        first, last = int(lo), int(hi or lo)
        if last < first:
            raise ScenarioError(f"{path}: range {part} goes backwards (a cpu list like 0-55,112-167)")
        if last >= MAX_CPUS:
            raise ScenarioError(f"{path}: CPU {last} is past {MAX_CPUS - 1} (Linux runs at most {MAX_CPUS} CPUs: NR_CPUS)")
