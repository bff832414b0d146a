import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from runtimekit._proto.runtimekit.v1 import slice_pb2 as _slice_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class HealthState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    HEALTH_STATE_UNSPECIFIED: _ClassVar[HealthState]
    HEALTH_STATE_HEALTHY: _ClassVar[HealthState]
    HEALTH_STATE_SUSPECT: _ClassVar[HealthState]
    HEALTH_STATE_UNHEALTHY: _ClassVar[HealthState]
    HEALTH_STATE_RECOVERING: _ClassVar[HealthState]
HEALTH_STATE_UNSPECIFIED: HealthState
HEALTH_STATE_HEALTHY: HealthState
HEALTH_STATE_SUSPECT: HealthState
HEALTH_STATE_UNHEALTHY: HealthState
HEALTH_STATE_RECOVERING: HealthState

class Fault(_message.Message):
    __slots__ = ("fault", "severity", "action", "evidence", "clears", "first_seen", "last_seen", "fault_class", "partition_gpu_instance_id")
    FAULT_FIELD_NUMBER: _ClassVar[int]
    SEVERITY_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    EVIDENCE_FIELD_NUMBER: _ClassVar[int]
    CLEARS_FIELD_NUMBER: _ClassVar[int]
    FIRST_SEEN_FIELD_NUMBER: _ClassVar[int]
    LAST_SEEN_FIELD_NUMBER: _ClassVar[int]
    FAULT_CLASS_FIELD_NUMBER: _ClassVar[int]
    PARTITION_GPU_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    fault: str
    severity: str
    action: str
    evidence: str
    clears: str
    first_seen: _timestamp_pb2.Timestamp
    last_seen: _timestamp_pb2.Timestamp
    fault_class: str
    partition_gpu_instance_id: int
    def __init__(self, fault: _Optional[str] = ..., severity: _Optional[str] = ..., action: _Optional[str] = ..., evidence: _Optional[str] = ..., clears: _Optional[str] = ..., first_seen: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_seen: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., fault_class: _Optional[str] = ..., partition_gpu_instance_id: _Optional[int] = ...) -> None: ...

class DeviceHealth(_message.Message):
    __slots__ = ("state", "schedulable", "action", "since", "faults", "partition_faults")
    STATE_FIELD_NUMBER: _ClassVar[int]
    SCHEDULABLE_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    FAULTS_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FAULTS_FIELD_NUMBER: _ClassVar[int]
    state: HealthState
    schedulable: bool
    action: str
    since: _timestamp_pb2.Timestamp
    faults: _containers.RepeatedCompositeFieldContainer[Fault]
    partition_faults: _containers.RepeatedCompositeFieldContainer[Fault]
    def __init__(self, state: _Optional[_Union[HealthState, str]] = ..., schedulable: _Optional[bool] = ..., action: _Optional[str] = ..., since: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., faults: _Optional[_Iterable[_Union[Fault, _Mapping]]] = ..., partition_faults: _Optional[_Iterable[_Union[Fault, _Mapping]]] = ...) -> None: ...

class SliceHealth(_message.Message):
    __slots__ = ("slice_id", "ref", "partition_gpu_instance_id", "state", "action", "since", "faults", "memory_used_bytes", "utilization")
    SLICE_ID_FIELD_NUMBER: _ClassVar[int]
    REF_FIELD_NUMBER: _ClassVar[int]
    PARTITION_GPU_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    FAULTS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    UTILIZATION_FIELD_NUMBER: _ClassVar[int]
    slice_id: str
    ref: _slice_pb2.DeviceRef
    partition_gpu_instance_id: int
    state: HealthState
    action: str
    since: _timestamp_pb2.Timestamp
    faults: _containers.RepeatedCompositeFieldContainer[Fault]
    memory_used_bytes: int
    utilization: float
    def __init__(self, slice_id: _Optional[str] = ..., ref: _Optional[_Union[_slice_pb2.DeviceRef, _Mapping]] = ..., partition_gpu_instance_id: _Optional[int] = ..., state: _Optional[_Union[HealthState, str]] = ..., action: _Optional[str] = ..., since: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., faults: _Optional[_Iterable[_Union[Fault, _Mapping]]] = ..., memory_used_bytes: _Optional[int] = ..., utilization: _Optional[float] = ...) -> None: ...

class Capacity(_message.Message):
    __slots__ = ("compute_percent_total", "compute_percent_free", "memory_bytes_total", "memory_bytes_usable", "memory_bytes_free")
    COMPUTE_PERCENT_TOTAL_FIELD_NUMBER: _ClassVar[int]
    COMPUTE_PERCENT_FREE_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_USABLE_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FREE_FIELD_NUMBER: _ClassVar[int]
    compute_percent_total: int
    compute_percent_free: int
    memory_bytes_total: int
    memory_bytes_usable: int
    memory_bytes_free: int
    def __init__(self, compute_percent_total: _Optional[int] = ..., compute_percent_free: _Optional[int] = ..., memory_bytes_total: _Optional[int] = ..., memory_bytes_usable: _Optional[int] = ..., memory_bytes_free: _Optional[int] = ...) -> None: ...

class Device(_message.Message):
    __slots__ = ("ref", "model", "memory_bytes", "lost", "mode", "pending_mode", "partition_capable", "capacity", "slice_ids", "health", "partitions", "partition_profiles", "partition_memory_slices", "partition_compute_slices", "architecture", "held_by_pods")
    REF_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    LOST_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    PENDING_MODE_FIELD_NUMBER: _ClassVar[int]
    PARTITION_CAPABLE_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    SLICE_IDS_FIELD_NUMBER: _ClassVar[int]
    HEALTH_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    PARTITION_PROFILES_FIELD_NUMBER: _ClassVar[int]
    PARTITION_MEMORY_SLICES_FIELD_NUMBER: _ClassVar[int]
    PARTITION_COMPUTE_SLICES_FIELD_NUMBER: _ClassVar[int]
    ARCHITECTURE_FIELD_NUMBER: _ClassVar[int]
    HELD_BY_PODS_FIELD_NUMBER: _ClassVar[int]
    ref: _slice_pb2.DeviceRef
    model: str
    memory_bytes: int
    lost: bool
    mode: str
    pending_mode: str
    partition_capable: bool
    capacity: Capacity
    slice_ids: _containers.RepeatedScalarFieldContainer[str]
    health: DeviceHealth
    partitions: _containers.RepeatedCompositeFieldContainer[_slice_pb2.Partition]
    partition_profiles: _containers.RepeatedCompositeFieldContainer[_slice_pb2.PartitionProfile]
    partition_memory_slices: int
    partition_compute_slices: int
    architecture: str
    held_by_pods: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, ref: _Optional[_Union[_slice_pb2.DeviceRef, _Mapping]] = ..., model: _Optional[str] = ..., memory_bytes: _Optional[int] = ..., lost: _Optional[bool] = ..., mode: _Optional[str] = ..., pending_mode: _Optional[str] = ..., partition_capable: _Optional[bool] = ..., capacity: _Optional[_Union[Capacity, _Mapping]] = ..., slice_ids: _Optional[_Iterable[str]] = ..., health: _Optional[_Union[DeviceHealth, _Mapping]] = ..., partitions: _Optional[_Iterable[_Union[_slice_pb2.Partition, _Mapping]]] = ..., partition_profiles: _Optional[_Iterable[_Union[_slice_pb2.PartitionProfile, _Mapping]]] = ..., partition_memory_slices: _Optional[int] = ..., partition_compute_slices: _Optional[int] = ..., architecture: _Optional[str] = ..., held_by_pods: _Optional[_Iterable[str]] = ...) -> None: ...

class NodeHealth(_message.Message):
    __slots__ = ("state", "action", "evaluated_at", "faults", "devices", "slices")
    STATE_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    EVALUATED_AT_FIELD_NUMBER: _ClassVar[int]
    FAULTS_FIELD_NUMBER: _ClassVar[int]
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    SLICES_FIELD_NUMBER: _ClassVar[int]
    state: HealthState
    action: str
    evaluated_at: _timestamp_pb2.Timestamp
    faults: _containers.RepeatedCompositeFieldContainer[Fault]
    devices: _containers.RepeatedCompositeFieldContainer[DeviceHealthEntry]
    slices: _containers.RepeatedCompositeFieldContainer[SliceHealth]
    def __init__(self, state: _Optional[_Union[HealthState, str]] = ..., action: _Optional[str] = ..., evaluated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., faults: _Optional[_Iterable[_Union[Fault, _Mapping]]] = ..., devices: _Optional[_Iterable[_Union[DeviceHealthEntry, _Mapping]]] = ..., slices: _Optional[_Iterable[_Union[SliceHealth, _Mapping]]] = ...) -> None: ...

class DeviceHealthEntry(_message.Message):
    __slots__ = ("ref", "health")
    REF_FIELD_NUMBER: _ClassVar[int]
    HEALTH_FIELD_NUMBER: _ClassVar[int]
    ref: _slice_pb2.DeviceRef
    health: DeviceHealth
    def __init__(self, ref: _Optional[_Union[_slice_pb2.DeviceRef, _Mapping]] = ..., health: _Optional[_Union[DeviceHealth, _Mapping]] = ...) -> None: ...

class Node(_message.Message):
    __slots__ = ("devices", "health", "slicer_enabled", "driver_version", "sampled_at")
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    HEALTH_FIELD_NUMBER: _ClassVar[int]
    SLICER_ENABLED_FIELD_NUMBER: _ClassVar[int]
    DRIVER_VERSION_FIELD_NUMBER: _ClassVar[int]
    SAMPLED_AT_FIELD_NUMBER: _ClassVar[int]
    devices: _containers.RepeatedCompositeFieldContainer[Device]
    health: NodeHealth
    slicer_enabled: bool
    driver_version: str
    sampled_at: _timestamp_pb2.Timestamp
    def __init__(self, devices: _Optional[_Iterable[_Union[Device, _Mapping]]] = ..., health: _Optional[_Union[NodeHealth, _Mapping]] = ..., slicer_enabled: _Optional[bool] = ..., driver_version: _Optional[str] = ..., sampled_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class DevicePlace(_message.Message):
    __slots__ = ("ref", "numa_node", "socket", "pcie_switches", "switched_fabric", "pcie_root")
    REF_FIELD_NUMBER: _ClassVar[int]
    NUMA_NODE_FIELD_NUMBER: _ClassVar[int]
    SOCKET_FIELD_NUMBER: _ClassVar[int]
    PCIE_SWITCHES_FIELD_NUMBER: _ClassVar[int]
    SWITCHED_FABRIC_FIELD_NUMBER: _ClassVar[int]
    PCIE_ROOT_FIELD_NUMBER: _ClassVar[int]
    ref: _slice_pb2.DeviceRef
    numa_node: int
    socket: int
    pcie_switches: _containers.RepeatedScalarFieldContainer[str]
    switched_fabric: bool
    pcie_root: str
    def __init__(self, ref: _Optional[_Union[_slice_pb2.DeviceRef, _Mapping]] = ..., numa_node: _Optional[int] = ..., socket: _Optional[int] = ..., pcie_switches: _Optional[_Iterable[str]] = ..., switched_fabric: _Optional[bool] = ..., pcie_root: _Optional[str] = ...) -> None: ...

class Nic(_message.Message):
    __slots__ = ("name", "pci_address", "numa_node", "socket", "pcie_switches", "rate_gbps", "device_nodes", "pcie_root")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PCI_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    NUMA_NODE_FIELD_NUMBER: _ClassVar[int]
    SOCKET_FIELD_NUMBER: _ClassVar[int]
    PCIE_SWITCHES_FIELD_NUMBER: _ClassVar[int]
    RATE_GBPS_FIELD_NUMBER: _ClassVar[int]
    DEVICE_NODES_FIELD_NUMBER: _ClassVar[int]
    PCIE_ROOT_FIELD_NUMBER: _ClassVar[int]
    name: str
    pci_address: str
    numa_node: int
    socket: int
    pcie_switches: _containers.RepeatedScalarFieldContainer[str]
    rate_gbps: int
    device_nodes: _containers.RepeatedScalarFieldContainer[str]
    pcie_root: str
    def __init__(self, name: _Optional[str] = ..., pci_address: _Optional[str] = ..., numa_node: _Optional[int] = ..., socket: _Optional[int] = ..., pcie_switches: _Optional[_Iterable[str]] = ..., rate_gbps: _Optional[int] = ..., device_nodes: _Optional[_Iterable[str]] = ..., pcie_root: _Optional[str] = ...) -> None: ...

class DeviceLink(_message.Message):
    __slots__ = ("device_index", "peer_index", "level", "links", "cost")
    DEVICE_INDEX_FIELD_NUMBER: _ClassVar[int]
    PEER_INDEX_FIELD_NUMBER: _ClassVar[int]
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    LINKS_FIELD_NUMBER: _ClassVar[int]
    COST_FIELD_NUMBER: _ClassVar[int]
    device_index: int
    peer_index: int
    level: str
    links: int
    cost: int
    def __init__(self, device_index: _Optional[int] = ..., peer_index: _Optional[int] = ..., level: _Optional[str] = ..., links: _Optional[int] = ..., cost: _Optional[int] = ...) -> None: ...

class NicLink(_message.Message):
    __slots__ = ("device_index", "nic", "level", "cost")
    DEVICE_INDEX_FIELD_NUMBER: _ClassVar[int]
    NIC_FIELD_NUMBER: _ClassVar[int]
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    COST_FIELD_NUMBER: _ClassVar[int]
    device_index: int
    nic: str
    level: str
    cost: int
    def __init__(self, device_index: _Optional[int] = ..., nic: _Optional[str] = ..., level: _Optional[str] = ..., cost: _Optional[int] = ...) -> None: ...

class Topology(_message.Message):
    __slots__ = ("devices", "nics", "device_links", "nic_links", "discovered_at", "errors")
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    NICS_FIELD_NUMBER: _ClassVar[int]
    DEVICE_LINKS_FIELD_NUMBER: _ClassVar[int]
    NIC_LINKS_FIELD_NUMBER: _ClassVar[int]
    DISCOVERED_AT_FIELD_NUMBER: _ClassVar[int]
    ERRORS_FIELD_NUMBER: _ClassVar[int]
    devices: _containers.RepeatedCompositeFieldContainer[DevicePlace]
    nics: _containers.RepeatedCompositeFieldContainer[Nic]
    device_links: _containers.RepeatedCompositeFieldContainer[DeviceLink]
    nic_links: _containers.RepeatedCompositeFieldContainer[NicLink]
    discovered_at: _timestamp_pb2.Timestamp
    errors: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, devices: _Optional[_Iterable[_Union[DevicePlace, _Mapping]]] = ..., nics: _Optional[_Iterable[_Union[Nic, _Mapping]]] = ..., device_links: _Optional[_Iterable[_Union[DeviceLink, _Mapping]]] = ..., nic_links: _Optional[_Iterable[_Union[NicLink, _Mapping]]] = ..., discovered_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., errors: _Optional[_Iterable[str]] = ...) -> None: ...
