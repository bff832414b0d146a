from runtimekit._proto.runtimekit.v1 import node_pb2 as _node_pb2
from runtimekit._proto.runtimekit.v1 import slice_pb2 as _slice_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CreateSliceRequest(_message.Message):
    __slots__ = ("mode", "compute", "memory", "device", "pod_uid", "container", "owner_id", "priority", "profile", "placement_start")
    MODE_FIELD_NUMBER: _ClassVar[int]
    COMPUTE_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    POD_UID_FIELD_NUMBER: _ClassVar[int]
    CONTAINER_FIELD_NUMBER: _ClassVar[int]
    OWNER_ID_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    PLACEMENT_START_FIELD_NUMBER: _ClassVar[int]
    mode: str
    compute: int
    memory: str
    device: str
    pod_uid: str
    container: str
    owner_id: str
    priority: int
    profile: str
    placement_start: int
    def __init__(self, mode: _Optional[str] = ..., compute: _Optional[int] = ..., memory: _Optional[str] = ..., device: _Optional[str] = ..., pod_uid: _Optional[str] = ..., container: _Optional[str] = ..., owner_id: _Optional[str] = ..., priority: _Optional[int] = ..., profile: _Optional[str] = ..., placement_start: _Optional[int] = ...) -> None: ...

class CreateSliceResponse(_message.Message):
    __slots__ = ("slice",)
    SLICE_FIELD_NUMBER: _ClassVar[int]
    slice: _slice_pb2.Slice
    def __init__(self, slice: _Optional[_Union[_slice_pb2.Slice, _Mapping]] = ...) -> None: ...

class DeleteSliceRequest(_message.Message):
    __slots__ = ("slice_id",)
    SLICE_ID_FIELD_NUMBER: _ClassVar[int]
    slice_id: str
    def __init__(self, slice_id: _Optional[str] = ...) -> None: ...

class DeleteSliceResponse(_message.Message):
    __slots__ = ("slice",)
    SLICE_FIELD_NUMBER: _ClassVar[int]
    slice: _slice_pb2.Slice
    def __init__(self, slice: _Optional[_Union[_slice_pb2.Slice, _Mapping]] = ...) -> None: ...

class GetSliceRequest(_message.Message):
    __slots__ = ("slice_id",)
    SLICE_ID_FIELD_NUMBER: _ClassVar[int]
    slice_id: str
    def __init__(self, slice_id: _Optional[str] = ...) -> None: ...

class GetSliceResponse(_message.Message):
    __slots__ = ("slice",)
    SLICE_FIELD_NUMBER: _ClassVar[int]
    slice: _slice_pb2.Slice
    def __init__(self, slice: _Optional[_Union[_slice_pb2.Slice, _Mapping]] = ...) -> None: ...

class ListSlicesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListSlicesResponse(_message.Message):
    __slots__ = ("slices",)
    SLICES_FIELD_NUMBER: _ClassVar[int]
    slices: _containers.RepeatedCompositeFieldContainer[_slice_pb2.Slice]
    def __init__(self, slices: _Optional[_Iterable[_Union[_slice_pb2.Slice, _Mapping]]] = ...) -> None: ...

class WatchSlicesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class WatchSlicesResponse(_message.Message):
    __slots__ = ("slices",)
    SLICES_FIELD_NUMBER: _ClassVar[int]
    slices: _containers.RepeatedCompositeFieldContainer[_slice_pb2.Slice]
    def __init__(self, slices: _Optional[_Iterable[_Union[_slice_pb2.Slice, _Mapping]]] = ...) -> None: ...

class SetDeviceModeRequest(_message.Message):
    __slots__ = ("device", "mode")
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    device: str
    mode: str
    def __init__(self, device: _Optional[str] = ..., mode: _Optional[str] = ...) -> None: ...

class SetDeviceModeResponse(_message.Message):
    __slots__ = ("device",)
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    device: _node_pb2.Device
    def __init__(self, device: _Optional[_Union[_node_pb2.Device, _Mapping]] = ...) -> None: ...

class GetNodeRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetNodeResponse(_message.Message):
    __slots__ = ("node",)
    NODE_FIELD_NUMBER: _ClassVar[int]
    node: _node_pb2.Node
    def __init__(self, node: _Optional[_Union[_node_pb2.Node, _Mapping]] = ...) -> None: ...

class WatchHealthRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class WatchHealthResponse(_message.Message):
    __slots__ = ("health",)
    HEALTH_FIELD_NUMBER: _ClassVar[int]
    health: _node_pb2.NodeHealth
    def __init__(self, health: _Optional[_Union[_node_pb2.NodeHealth, _Mapping]] = ...) -> None: ...

class GetTopologyRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetTopologyResponse(_message.Message):
    __slots__ = ("topology",)
    TOPOLOGY_FIELD_NUMBER: _ClassVar[int]
    topology: _node_pb2.Topology
    def __init__(self, topology: _Optional[_Union[_node_pb2.Topology, _Mapping]] = ...) -> None: ...

class AllocateDevicesRequest(_message.Message):
    __slots__ = ("count", "candidate_device_uuids", "required_device_uuids", "with_nics")
    COUNT_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_DEVICE_UUIDS_FIELD_NUMBER: _ClassVar[int]
    REQUIRED_DEVICE_UUIDS_FIELD_NUMBER: _ClassVar[int]
    WITH_NICS_FIELD_NUMBER: _ClassVar[int]
    count: int
    candidate_device_uuids: _containers.RepeatedScalarFieldContainer[str]
    required_device_uuids: _containers.RepeatedScalarFieldContainer[str]
    with_nics: bool
    def __init__(self, count: _Optional[int] = ..., candidate_device_uuids: _Optional[_Iterable[str]] = ..., required_device_uuids: _Optional[_Iterable[str]] = ..., with_nics: _Optional[bool] = ...) -> None: ...

class AllocatedDevice(_message.Message):
    __slots__ = ("device", "nic")
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    NIC_FIELD_NUMBER: _ClassVar[int]
    device: _slice_pb2.DeviceRef
    nic: _node_pb2.Nic
    def __init__(self, device: _Optional[_Union[_slice_pb2.DeviceRef, _Mapping]] = ..., nic: _Optional[_Union[_node_pb2.Nic, _Mapping]] = ...) -> None: ...

class AllocateDevicesResponse(_message.Message):
    __slots__ = ("devices", "cost")
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    COST_FIELD_NUMBER: _ClassVar[int]
    devices: _containers.RepeatedCompositeFieldContainer[AllocatedDevice]
    cost: int
    def __init__(self, devices: _Optional[_Iterable[_Union[AllocatedDevice, _Mapping]]] = ..., cost: _Optional[int] = ...) -> None: ...
