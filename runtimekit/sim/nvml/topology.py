"""GPU topology: common PCIe ancestor, nearest GPUs, peer-to-peer status.

Answered from the scenario's PCIe switches, NUMA nodes and sockets (``runtimekit.sim.topology``,
the same facts the simulated host's sysfs tree shows) and its NVLinks:

- ``nvmlDeviceGetTopologyCommonAncestor``: the PCIe level (``SimTopology.level``), NVLink aside;
- ``nvmlDeviceGetTopologyNearestGpus``: the other GPUs at ``level`` or nearer, by index (so
  SYSTEM answers every other GPU); the first call, with no array, answers the count;
- ``nvmlDeviceGetP2PStatus`` (``nvmlGpuP2PStatus_t``, as ``nvidia-smi topo -p2p`` shows it):
  NVLINK is OK between GPUs that both have an NVLink up — on an NVSwitch system every pair, the
  switches being one fabric (a DGX-2's two baseboards are trunked) —, else NOT_SUPPORTED. READ and
  WRITE are OK over NVLink, or over PCIe within one CPU socket; across sockets without NVLink
  CHIPSET_NOT_SUPPORTED (drivers refuse PCIe P2P over QPI/UPI). ATOMICS: OK over NVLink only. PCI:
  OK within a socket, CHIPSET_NOT_SUPPORTED across. A GPU with itself: NOT_SUPPORTED.

A second device handle goes through the same checks as the first (INVALID_ARGUMENT, the GPU's
injected error such as GPU_IS_LOST). MIG device handles are not GPUs here: INVALID_ARGUMENT.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

from ..topology import LEVELS, SimTopology
from ._base import _DEV_BASE, INVALID_ARGUMENT, SUCCESS, _device, _LibraryBase, _out, _v
from .mig import put_handles

__all__ = ["TopologyMixin"]

#: nvmlGpuP2PCapsIndex_t
_READ, _WRITE, _NVLINK, _ATOMICS, _PCI = 0, 1, 2, 3, 4
#: nvmlGpuP2PStatus_t
_OK, _CHIPSET_NOT_SUPPORTED, _NOT_SUPPORTED = 0, 1, 5


class TopologyMixin(_LibraryBase):
    """GPU topology: common PCIe ancestor, nearest GPUs, peer-to-peer status."""

    @cached_property
    def _topology(self) -> SimTopology:
        return SimTopology(self.node.scenario)

    def _peer(self, handle: Any) -> tuple[int | None, int]:
        """The GPU index of a second handle and the return code for it (SUCCESS when usable)."""
        gpu = self._gpu_of(handle)
        if gpu is None:
            return None, INVALID_ARGUMENT
        return gpu, self.node.device_error(gpu) or SUCCESS

    def _nvlinked(self, a: int, b: int) -> bool:
        """Both GPUs have an NVLink up (into the one NVSwitch fabric)."""
        return all(any(self.node.link_up(g, link) for link in range(self._model(g).nvlink_links)) for g in (a, b))

    @_device
    def nvmlDeviceGetTopologyCommonAncestor(self, gpu: int, other: Any, ref: Any) -> int:
        peer, rc = self._peer(other)
        if peer is None or rc != SUCCESS:
            return rc
        _out(ref, self._topology.level(gpu, peer))
        return SUCCESS

    @_device
    def nvmlDeviceGetTopologyNearestGpus(self, gpu: int, level: Any, count_ref: Any, array: Any) -> int:
        lvl = _v(level)
        if lvl not in LEVELS:
            return INVALID_ARGUMENT
        near = [_DEV_BASE + j for j in range(self.node.gpu_count) if j != gpu and self._topology.level(gpu, j) <= lvl]
        return put_handles(array, count_ref, near)

    @_device
    def nvmlDeviceGetP2PStatus(self, gpu: int, other: Any, index: Any, ref: Any) -> int:
        peer, rc = self._peer(other)
        if peer is None or rc != SUCCESS:
            return rc
        caps = _v(index)
        if caps not in (_READ, _WRITE, _NVLINK, _ATOMICS, _PCI):
            return INVALID_ARGUMENT
        _out(ref, self._p2p(gpu, peer, caps))
        return SUCCESS

    def _p2p(self, a: int, b: int, caps: int) -> int:
        if a == b:
            return _NOT_SUPPORTED
        nvlink = self._nvlinked(a, b)
        pcie = _OK if self._topology.gpu_socket(a) == self._topology.gpu_socket(b) else _CHIPSET_NOT_SUPPORTED
        if caps == _NVLINK or caps == _ATOMICS:
            return _OK if nvlink else _NOT_SUPPORTED
        if caps == _PCI:
            return pcie
        return _OK if nvlink else pcie
