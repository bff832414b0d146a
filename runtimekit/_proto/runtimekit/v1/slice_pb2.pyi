import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SliceState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SLICE_STATE_UNSPECIFIED: _ClassVar[SliceState]
    SLICE_STATE_CREATING: _ClassVar[SliceState]
    SLICE_STATE_READY: _ClassVar[SliceState]
    SLICE_STATE_DELETING: _ClassVar[SliceState]
SLICE_STATE_UNSPECIFIED: SliceState
SLICE_STATE_CREATING: SliceState
SLICE_STATE_READY: SliceState
SLICE_STATE_DELETING: SliceState

class DeviceRef(_message.Message):
    __slots__ = ("kind", "vendor", "uuid", "index", "pci_address")
    KIND_FIELD_NUMBER: _ClassVar[int]
    VENDOR_FIELD_NUMBER: _ClassVar[int]
    UUID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    PCI_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    kind: str
    vendor: str
    uuid: str
    index: int
    pci_address: str
    def __init__(self, kind: _Optional[str] = ..., vendor: _Optional[str] = ..., uuid: _Optional[str] = ..., index: _Optional[int] = ..., pci_address: _Optional[str] = ...) -> None: ...

class Partition(_message.Message):
    __slots__ = ("gpu_instance_id", "compute_instance_id", "uuid", "profile_id", "placement_start", "placement_size", "profile")
    GPU_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    COMPUTE_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    UUID_FIELD_NUMBER: _ClassVar[int]
    PROFILE_ID_FIELD_NUMBER: _ClassVar[int]
    PLACEMENT_START_FIELD_NUMBER: _ClassVar[int]
    PLACEMENT_SIZE_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    gpu_instance_id: int
    compute_instance_id: int
    uuid: str
    profile_id: int
    placement_start: int
    placement_size: int
    profile: str
    def __init__(self, gpu_instance_id: _Optional[int] = ..., compute_instance_id: _Optional[int] = ..., uuid: _Optional[str] = ..., profile_id: _Optional[int] = ..., placement_start: _Optional[int] = ..., placement_size: _Optional[int] = ..., profile: _Optional[str] = ...) -> None: ...

class PartitionProfile(_message.Message):
    __slots__ = ("profile_id", "name", "compute_slices", "memory_slices", "memory_bytes", "placements")
    PROFILE_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    COMPUTE_SLICES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_SLICES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    PLACEMENTS_FIELD_NUMBER: _ClassVar[int]
    profile_id: int
    name: str
    compute_slices: int
    memory_slices: int
    memory_bytes: int
    placements: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, profile_id: _Optional[int] = ..., name: _Optional[str] = ..., compute_slices: _Optional[int] = ..., memory_slices: _Optional[int] = ..., memory_bytes: _Optional[int] = ..., placements: _Optional[_Iterable[int]] = ...) -> None: ...

class Owner(_message.Message):
    __slots__ = ("pod_uid", "container", "owner_id")
    POD_UID_FIELD_NUMBER: _ClassVar[int]
    CONTAINER_FIELD_NUMBER: _ClassVar[int]
    OWNER_ID_FIELD_NUMBER: _ClassVar[int]
    pod_uid: str
    container: str
    owner_id: str
    def __init__(self, pod_uid: _Optional[str] = ..., container: _Optional[str] = ..., owner_id: _Optional[str] = ...) -> None: ...

class Slice(_message.Message):
    __slots__ = ("id", "mode", "state", "device", "partition", "profile", "compute_percent", "memory_bytes", "requested_compute_percent", "requested_memory_bytes", "requested_device", "owner", "priority", "cdi_device", "created_at", "reason")
    ID_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    COMPUTE_PERCENT_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_COMPUTE_PERCENT_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_DEVICE_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    CDI_DEVICE_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    id: str
    mode: str
    state: SliceState
    device: DeviceRef
    partition: Partition
    profile: str
    compute_percent: int
    memory_bytes: int
    requested_compute_percent: int
    requested_memory_bytes: int
    requested_device: str
    owner: Owner
    priority: int
    cdi_device: str
    created_at: _timestamp_pb2.Timestamp
    reason: str
    def __init__(self, id: _Optional[str] = ..., mode: _Optional[str] = ..., state: _Optional[_Union[SliceState, str]] = ..., device: _Optional[_Union[DeviceRef, _Mapping]] = ..., partition: _Optional[_Union[Partition, _Mapping]] = ..., profile: _Optional[str] = ..., compute_percent: _Optional[int] = ..., memory_bytes: _Optional[int] = ..., requested_compute_percent: _Optional[int] = ..., requested_memory_bytes: _Optional[int] = ..., requested_device: _Optional[str] = ..., owner: _Optional[_Union[Owner, _Mapping]] = ..., priority: _Optional[int] = ..., cdi_device: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., reason: _Optional[str] = ...) -> None: ...
