"""GET /api/v1/node (the status page's data), GET / and its assets, served from a hand-built node
state by the real routes over a real socket (aiohttp's test server)."""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace
from html.parser import HTMLParser
from importlib.resources import files

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from exporter_factories import GiB, make_attribution, make_gpu, make_process, make_snapshot, make_state, uuid_for
from statuspage_factories import SLICE_ID, make_node

from runtimekit.gpu.types import GpuProcess, Unavailable, Utilization
from runtimekit.state import NodeState
from runtimekit.statuspage import NODE_PATH, add_status_routes


def strict_json(text: str) -> object:
    """JSON as a browser's JSON.parse reads it: NaN and Infinity are errors."""
    def refuse(constant: str) -> object:
        raise ValueError(f"not JSON: {constant}")
    return json.loads(text, parse_constant=refuse)


async def fetch(state: NodeState, path: str, node: str = "test node") -> tuple[int, dict[str, str], str]:
    app = web.Application()
    add_status_routes(app, state, node)
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        response = await client.get(path)
        return response.status, dict(response.headers), await response.text()


async def node_document(state: NodeState) -> dict:
    status, headers, body = await fetch(state, NODE_PATH)
    assert status == 200 and headers["Content-Type"].startswith("application/json")
    assert headers["Cache-Control"] == "no-store"
    document = strict_json(body)
    assert isinstance(document, dict)
    return document


async def test_before_the_first_sample_the_document_says_what_is_missing():
    document = await node_document(NodeState())
    assert (document["sample"], document["health"], document["topology"]) == (None, None, None)
    assert (document["gpus"], document["slices"]) == ([], [])
    assert document["agent"]["ready"] is False and document["agent"]["ready_detail"] == "no snapshot yet"
    status, _, body = await fetch(NodeState(), "/")
    assert status == 200 and "waiting for the first sample" in body


async def test_each_gpu_with_health_readings_processes_pods_and_slices():
    document = await node_document(make_node())
    assert document["agent"]["node"] == "test node" and document["agent"]["ready"] is True
    assert document["sample"]["driver_version"] == "550.54.15" and document["sample"]["device_count"] == 2
    assert document["health"]["state"] == "unhealthy" and document["health"]["faults"][0]["fault"] == "gpu_count_low"
    healthy, lost = document["gpus"]
    assert (healthy["index"], healthy["uuid"], healthy["name"]) == (0, uuid_for(0), "NVIDIA H100 80GB HBM3")
    assert healthy["health"]["state"] == "healthy" and healthy["health"]["schedulable"] is True
    assert (healthy["utilization"], healthy["memory_used_bytes"], healthy["memory_total_bytes"]) == (0.75, 10 * GiB, 80 * GiB)
    assert (healthy["temperature_celsius"], healthy["power_watts"], healthy["power_limit_watts"]) == (41.0, 312.5, 700.0)
    assert healthy["processes"] == [{"pid": 4242, "name": "python3", "used_memory_bytes": 9 * GiB,
                                     "sm_utilization": 0.6, "container": "ml/trainer-0/main"}]
    assert healthy["pods"] == [{"namespace": "ml", "pod": "trainer-0", "container": "main", "via": ["allocation", "process"]}]
    assert healthy["slices"] == [SLICE_ID]
    assert healthy["slicer"] == {"mode": "tdm", "pending_mode": None, "compute_free_percent": 50,
                                 "memory_free_bytes": (80000 - 2048) << 20, "usable_memory_bytes": 80000 << 20}
    # A lost GPU: no readings (null, never 0), its verdict and faults, no slicer row.
    assert lost["lost"] is True and lost["health"]["state"] == "unhealthy" and lost["health"]["schedulable"] is False
    assert [f["fault"] for f in lost["health"]["faults"]] == ["xid_79", "thermal_slowdown"]
    assert lost["health"]["faults"][1]["clearing"] is True
    assert (lost["utilization"], lost["memory_used_bytes"], lost["memory_total_bytes"], lost["power_watts"]) == (None,) * 4
    assert (lost["slicer"], lost["slices"], lost["processes"], lost["processes_total"]) == (None, [], [], 0)


async def test_a_slice_shows_its_quota_against_its_use():
    [slice_] = (await node_document(make_node()))["slices"]
    assert slice_ == {"id": SLICE_ID, "gpu": 0, "mode": "tdm", "state": "ready", "profile": None,
                      "compute_percent": 50, "memory_bytes": 2 * GiB, "owner": "me",
                      "cdi_device": f"runtimekit.io/slice={SLICE_ID}", "health": "healthy",
                      "used_memory_bytes": GiB, "utilization": 0.3}


async def test_the_topology_matrix_has_a_row_per_gpu_and_a_column_per_gpu_and_nic():
    topology = (await node_document(make_node()))["topology"]
    assert topology["columns"] == ["GPU0", "GPU1", "NIC0"] and topology["nics"] == ["mlx5_0"]
    first, second = topology["rows"]
    assert [c["label"] for c in first["cells"]] == ["X", "NV18", "PIX"]
    assert [c["level"] for c in second["cells"]] == ["nvlink", "self", "system"]
    assert (second["gpu"], second["numa_node"], second["socket"]) == (1, 1, 1)
    assert topology["errors"] == ["GPU 1: its NVLinks were not read"]


async def test_without_attribution_processes_come_from_nvml_most_memory_first():
    gpu = make_gpu(0, processes=(GpuProcess(4242, 9 * GiB, "compute"), GpuProcess(7, 20 * GiB, "compute")))
    [listed] = (await node_document(make_state(make_snapshot((gpu,)))))["gpus"]
    assert [(p["pid"], p["name"], p["container"]) for p in listed["processes"]] == [(7, None, None), (4242, None, None)]
    assert listed["health"] is None and listed["slicer"] is None



async def test_a_memory_total_this_cycle_could_not_read_falls_back_to_discovery_as_in_the_metrics():
    base = make_gpu(0)
    failed = replace(base.memory, total_bytes=Unavailable("error", "nvmlDeviceGetMemoryInfo: NVML_ERROR_UNKNOWN"))
    [listed] = (await node_document(make_state(make_snapshot((replace(base, memory=failed),)))))["gpus"]
    assert listed["memory_total_bytes"] == base.limits.memory_total_bytes == 80 * GiB


async def test_processes_total_counts_every_nvml_process_not_the_attributors_capped_rows():
    listed = tuple(GpuProcess(pid, GiB, "compute") for pid in (10, 11, 12))
    state = make_state(make_snapshot((make_gpu(0, processes=listed),)))
    state.publish_attribution(make_attribution((make_process(10), make_process(11))))  # capped at 2 per GPU
    [gpu] = (await node_document(state))["gpus"]
    assert (len(gpu["processes"]), gpu["processes_total"]) == (2, 3)

async def test_non_finite_readings_are_null_never_invalid_json():
    nan = float("nan")
    gpu = make_gpu(0, utilization=Utilization(gpu=nan, memory=math.inf, encoder=0.0, decoder=0.0))
    state = make_state(make_snapshot((gpu,)))
    document = await node_document(state)
    assert document["gpus"][0]["utilization"] is None
    document = await node_document(make_node(slice_utilization=math.inf))
    assert document["slices"][0]["utilization"] is None


class Links(HTMLParser):
    """Every URL the page's markup loads (src, href)."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.urls += [value for name, value in attrs if name in ("src", "href") and value]


async def test_the_page_is_self_contained_and_escapes_the_node_name():
    status, headers, body = await fetch(make_node(), "/", node='<script>alert("x")</script> & co')
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert "<script>alert" not in body and "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; co" in body
    assert "2 GPUs" in body and 'href="/metrics"' in body  # what it says before its script runs
    policy = headers["Content-Security-Policy"]
    assert "default-src 'none'" in policy and "connect-src 'self'" in policy and "unsafe-inline" not in policy
    links = Links()
    links.feed(body)
    assert links.urls and all(url.startswith("/") and not url.startswith("//") or url == "data:," for url in links.urls), links.urls


async def test_the_script_and_style_are_served_from_package_data():
    for path, kind in (("/ui/status.js", "text/javascript"), ("/ui/status.css", "text/css")):
        status, headers, body = await fetch(NodeState(), path)
        assert status == 200 and headers["Content-Type"].startswith(kind)
        assert body == files("runtimekit.statuspage").joinpath("static", path.rsplit("/", 1)[1]).read_text()
    script = files("runtimekit.statuspage").joinpath("static", "status.js").read_text()
    # Text from the node is only ever set as text, and nothing is loaded from elsewhere.
    assert not re.search(r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(", script)
    assert not re.search(r"https?://", script)
