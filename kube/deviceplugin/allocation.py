"""GetPreferredAllocation's choice and Allocate's answer for one container.

- **Preferred** (``Allocator.preferred``): for whole GPUs the agent's AllocateDevices (the topology
  allocator: the best-connected set among the kubelet's available devices, must-include ones
  included). It never fails: when the agent cannot answer (down, UNAVAILABLE, the deadline, any
  error) or answers with a set the kubelet could not use, the answer is ``fallback`` and the
  reason is logged. MIG devices have no topology of their own in the agent's model: their
  preference is ``fallback``.
- **Allocate** (``Allocator.container``): the devices' UUIDs in ``NVIDIA_VISIBLE_DEVICES`` and/or
  as CDI names (``cdi_kind=UUID``, nvidia-ctk's uuid device names); with ``with_nics``, the agent
  pairs each whole GPU with its nearest RDMA NIC and the container gets exactly the device nodes
  the agent names for those NICs (``Nic.device_nodes``: ``/dev/infiniband/uverbsN``, and
  ``/dev/infiniband/rdma_cm`` only where the host has it; a node the host lacks would make the
  runtime fail to create the container), each once, and ``NCCL_IB_HCA`` naming exactly those
  NICs. If the agent cannot pair NICs the container starts without them (logged).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from runtimekit._proto.deviceplugin.v1beta1 import api_pb2
from runtimekit.grpc_unix import UnixRpcError

from ..agentclient import AgentClient, Nic
from .config import DevicePluginConfig

log = logging.getLogger(__name__)

VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"  # read by the NVIDIA container runtime
#: NCCL's RDMA device list; the "=" prefix means exactly these (NCCL environment variables docs).
NCCL_IB_HCA = "NCCL_IB_HCA"


def fallback(available: Sequence[str], must_include: Sequence[str], size: int) -> list[str]:
    """A set the kubelet accepts without the agent: the must-include devices first, then the first
    available ones, ``size`` in all (fewer when fewer exist), each once."""
    chosen = list(dict.fromkeys(must_include))
    for device in available:
        if len(chosen) >= size:
            break
        if device not in chosen:
            chosen.append(device)
    return chosen


def choice_problem(chosen: Sequence[str], available: Sequence[str], must_include: Sequence[str], size: int) -> str:
    """Why the agent's ``chosen`` cannot answer the kubelet's request ("" when it can)."""
    if len(set(chosen)) != len(chosen) or len(chosen) != size:
        return f"it chose {len(chosen)} devices ({', '.join(chosen)}), {size} distinct were asked for"
    outside = sorted(set(chosen) - set(available))
    if outside:
        return f"it chose devices the kubelet did not offer: {', '.join(outside)}"
    missing = sorted(set(must_include) - set(chosen))
    return f"it left out must-include devices: {', '.join(missing)}" if missing else ""


def container_response(devices: Sequence[str], nics: Sequence[Nic], config: DevicePluginConfig
                       ) -> api_pb2.ContainerAllocateResponse:
    """What the kubelet passes to the runtime for one container holding ``devices``."""
    response = api_pb2.ContainerAllocateResponse()
    if config.visible_devices_env:
        response.envs[VISIBLE_DEVICES] = ",".join(devices)
    if config.cdi:
        response.cdi_devices.extend(api_pb2.CDIDevice(name=f"{config.cdi_kind}={device}") for device in devices)
    nodes = list(dict.fromkeys(node for nic in nics for node in nic.device_nodes))
    if nodes:
        response.devices.extend(api_pb2.DeviceSpec(container_path=node, host_path=node, permissions="rw")
                                for node in nodes)
        response.envs[NCCL_IB_HCA] = "=" + ",".join(dict.fromkeys(nic.name for nic in nics))
    return response


class Allocator:
    """The preferred set and the container answers of one plugin process (all resources)."""

    def __init__(self, agent: AgentClient, config: DevicePluginConfig) -> None:
        self.agent = agent
        self.config = config

    async def preferred(self, resource: str, available: Sequence[str], must_include: Sequence[str], size: int
                        ) -> list[str]:
        """The devices to prefer; never raises (``fallback`` on any failure, logged)."""
        plain = fallback(available, must_include, size)
        if resource != self.config.resource_name:
            return plain  # MIG devices: no topology to weigh
        try:
            choice = await self.agent.allocate(size, available, must_include, with_nics=False)
            problem = choice_problem(choice.devices, available, must_include, size)
        except UnixRpcError as error:
            problem = str(error)
        except Exception as error:  # the kubelet must get an answer whatever happened: a bug, logged whole
            log.exception("GetPreferredAllocation: the agent's answer could not be used")
            problem = f"{type(error).__name__}: {error}"
        if problem:
            log.warning("GetPreferredAllocation %s of %d: the agent's choice is not used (%s); falling back to %s",
                        resource, size, problem, ", ".join(plain))
            return plain
        return list(choice.devices)

    async def container(self, resource: str, devices: Sequence[str]) -> api_pb2.ContainerAllocateResponse:
        """Allocate's answer for one container (the NICs from the agent when ``with_nics``)."""
        nics: tuple[Nic, ...] = ()
        if self.config.with_nics and resource == self.config.resource_name and devices:
            try:
                nics = (await self.agent.allocate(len(devices), devices, devices, with_nics=True)).nics
            except UnixRpcError as error:
                log.warning("Allocate %s (%s): no RDMA NICs for the container: %s", resource, ", ".join(devices), error)
        return container_response(devices, nics, self.config)
