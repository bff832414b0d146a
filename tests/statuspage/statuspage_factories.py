"""A hand-built node for the status page's tests: the exporter tests' snapshot of two H100s (GPU 1
lost), their attribution and health verdict, a TDM slice on GPU 0 and a two-GPU topology with one NIC."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import MappingProxyType

from exporter_factories import (
    EVALUATED_AT,
    make_attribution,
    make_gpu,
    make_health,
    make_lost_gpu,
    make_snapshot,
    make_state,
    uuid_for,
)

from runtimekit.state import NodeState
from runtimekit.state.health import SliceHealth
from runtimekit.state.refs import GpuRef
from runtimekit.state.slices import DeviceModeInfo, Owner, Slice, SliceSpec, SliceTable
from runtimekit.state.topology import GpuPlace, Link, NicPlace, Topology

MiB = 1 << 20
SLICE_ID = "s-00000000abcd"


def make_slices(utilization: float | None = 0.3) -> tuple[SliceTable, SliceHealth]:
    """One ready TDM slice on GPU 0 (50 %, 2 GiB, owner "me"), and its verdict using 1 GiB and ``utilization``."""
    ref = GpuRef(uuid_for(0), 0)
    slice_ = Slice(SLICE_ID, SliceSpec("tdm", 50, 2048, owner=Owner(owner_id="me")), ref, "ready",
                   created_at=EVALUATED_AT, compute=50, memory_mib=2048, cdi_device=f"runtimekit.io/slice={SLICE_ID}")
    devices = {0: DeviceModeInfo(ref, "tdm", memory_mib=81920, usable_memory_mib=80000, compute_free=50,
                                 memory_free_mib=80000 - 2048, slices=(SLICE_ID,))}
    health = SliceHealth(SLICE_ID, 0, uuid_for(0), None, "healthy", memory_used_bytes=1 << 30, utilization=utilization)
    return SliceTable(MappingProxyType({SLICE_ID: slice_}), MappingProxyType(devices)), health


def make_topology() -> Topology:
    gpus = (GpuPlace(GpuRef(uuid_for(0), 0), numa_node=0, socket=0, nvlinks=MappingProxyType({1: 18})),
            GpuPlace(GpuRef(uuid_for(1), 1), numa_node=1, socket=1, nvlinks=MappingProxyType({0: 18})))
    return Topology(gpus=gpus, nics=(NicPlace("mlx5_0", "0000:1a:00.0", numa_node=0, socket=0),),
                    gpu_links=MappingProxyType({(0, 1): Link("nvlink", 18)}),
                    nic_links=MappingProxyType({(0, "mlx5_0"): Link("pcie_switch"), (1, "mlx5_0"): Link("system")}),
                    discovered_at=EVALUATED_AT, errors=("GPU 1: its NVLinks were not read",))


def make_node(slice_utilization: float | None = 0.3) -> NodeState:
    """Every topic published: sample, attribution, health (GPU 1 unhealthy), slices, topology."""
    state = make_state(make_snapshot((make_gpu(0), make_lost_gpu(1))))
    state.publish_attribution(make_attribution())
    slices, slice_health = make_slices(slice_utilization)
    state.publish_slices(slices)
    state.publish_health(make_health(slices=(slice_health,)))
    state.publish_topology(make_topology())
    return state


class _Json(BaseHTTPRequestHandler):
    """Answers every GET with ``server.body`` as JSON."""

    def do_GET(self) -> None:
        body = self.server.body  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        return None


@contextmanager
def serving_json(body: bytes) -> Iterator[str]:
    """A local HTTP server answering every GET with ``body`` (JSON) — a stand-in agent for the
    ``runtimekit status`` command; yields its address (host:port)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Json)
    server.body = body  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
