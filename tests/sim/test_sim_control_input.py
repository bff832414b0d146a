"""The control API refuses what it cannot honour: 400 naming the field and the rule (415 for a body
that is not declared JSON), and nothing changes; never a 500 or a sampler that dies later."""

import pynvml as N
import pytest

from runtimekit.sim import SimulatedNode, load_scenario

H100_TOTAL = 81559 << 20  # dgx-h100's memory_total_mib, in bytes


async def _error(response, status=400):
    assert response.status == status, await response.text()
    return (await response.json())["error"]


# ---- used_memory_bytes is packed into nvmlProcessInfo_t.usedGpuMemory (unsigned long long) ------
async def test_process_larger_than_the_gpu_is_refused(client, node):
    before = node.processes()
    r = await client.post("/sim/v1/processes", json={"gpu": 0, "used_memory_bytes": 10**23})
    error = await _error(r)
    assert error.startswith("used_memory_bytes: ") and str(H100_TOTAL) in error
    r = await client.post("/sim/v1/processes", json={"gpu": 0, "used_memory_bytes": H100_TOTAL + 1})
    assert (await _error(r)).startswith("used_memory_bytes: ")
    assert node.processes() == before


def test_a_process_of_the_whole_gpu_is_listed_by_nvml(nvml, node):
    pid = node.add_process(0, H100_TOTAL)
    procs = N.nvmlDeviceGetComputeRunningProcesses(N.nvmlDeviceGetHandleByIndex(0))
    assert [p.usedGpuMemory for p in procs if p.pid == pid] == [H100_TOTAL]


def test_a_process_larger_than_its_mig_instance_is_refused(clock):
    from runtimekit.sim import FaultError

    node = SimulatedNode(load_scenario("dgx-a100"), seed=1, clock=clock, load="idle")
    node.set_mig_mode(0, True)
    node.reset_gpu(0)
    gi = node.create_gpu_instance(0, 19)  # 1g.10gb on an A100 80 GB
    ci = node.create_compute_instance(0, gi.id, 0)
    total = gi.profile.memory_mib << 20
    node.add_process(0, total, gpu_instance=gi.id, compute_instance=ci.id)
    with pytest.raises(FaultError, match=rf"^used_memory_bytes: .*{total}"):
        node.add_process(0, total + 1, gpu_instance=gi.id, compute_instance=ci.id)


# ---- fault parameters named like inject()'s own arguments ---------------------------------------
@pytest.mark.parametrize("name", ["gpu", "kind", "self", "params"])
async def test_a_param_named_like_an_argument_is_refused(client, node, name):
    r = await client.post("/sim/v1/faults", json={"gpu": 0, "fault": "xid", "params": {"xid": 31, name: 1}})
    assert await _error(r) == f"params.{name}: not a parameter of xid (parameters: xid)"
    assert node.active_faults() == []


@pytest.mark.parametrize("params", [[], 0, False, "", None, [79]])
async def test_params_must_be_an_object(client, node, params):
    r = await client.post("/sim/v1/faults", json={"gpu": 0, "fault": "gpu-lost", "params": params})
    assert await _error(r) == "params: must be an object"
    assert node.active_faults() == []


# ---- unknown top-level keys ---------------------------------------------------------------------
async def test_delete_with_a_misspelt_key_clears_nothing(client, node):
    node.inject(5, "nvlink-down", link=5)
    node.inject(5, "power-brake")
    r = await client.delete("/sim/v1/faults", json={"gpu": 5, "kind": "nvlink-down"})
    assert await _error(r) == "kind: unknown field (fields: fault, gpu)"
    assert len(node.active_faults()) == 2


async def test_post_with_a_misspelt_key_injects_nothing(client, node):
    r = await client.post("/sim/v1/faults", json={"gpu": 5, "fault": "nvlink-down", "param": {"link": 5}})
    assert await _error(r) == "param: unknown field (fields: fault, gpu, params)"
    assert node.active_faults() == []


@pytest.mark.parametrize("method, path, body, unknown", [
    ("POST", "/sim/v1/processes", {"gpu": 0, "used_memory_bytes": 1, "size": 2}, "size"),
    ("POST", "/sim/v1/processes", {"count": 3, "gpu": 0}, "gpu"),  # the {"count"} form takes count alone
    ("DELETE", "/sim/v1/processes", {"pid": 1, "gpu": 0}, "gpu"),
    ("POST", "/sim/v1/pods", {"namespace": "a", "name": "b", "containers": [{"name": "c"}], "labels": {}}, "labels"),
    ("POST", "/sim/v1/pods", {"count": 2, "name": "x"}, "name"),
    ("DELETE", "/sim/v1/pods", {"namespace": "a", "name": "b", "force": True}, "force"),
    ("POST", "/sim/v1/sources", {"source": "cri", "running": False, "now": 1}, "now"),
    ("POST", "/sim/v1/reboot", {"gpu": 1}, "gpu"),
    ("POST", "/sim/v1/reset", {"gpu": 1, "force": True}, "force"),
    ("POST", "/sim/v1/mig/xid", {"gpu": 0, "xid": 43, "gpu_instance": 1, "ci": 0}, "ci"),
])
async def test_every_route_refuses_unknown_keys(client, node, method, path, body, unknown):
    pods, procs = node.pods(), node.processes()
    r = await client.request(method, path, json=body)
    assert (await _error(r)).startswith(f"{unknown}: unknown field (fields: ")
    assert node.pods() == pods and node.processes() == procs and node.active_faults() == [] and node.boots == 0


# ---- Content-Type -------------------------------------------------------------------------------
@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data", None])
async def test_a_body_not_declared_json_is_415(client, node, content_type):
    headers = {} if content_type is None else {"Content-Type": content_type}
    r = await client.post("/sim/v1/faults", data=b'{"gpu": 0, "fault": "gpu-lost"}', headers=headers)
    error = await _error(r, 415)
    assert error.startswith("Content-Type: ") and "application/json" in error
    assert node.active_faults() == []


async def test_a_bodiless_post_must_be_declared_json_too(client, node):
    """A page can POST cross-site with no body and no preflight (fetch, mode no-cors): a reboot."""
    r = await client.post("/sim/v1/reboot")
    assert (await _error(r, 415)).startswith("Content-Type: ")
    assert node.boots == 0
    r = await client.post("/sim/v1/reboot", headers={"Content-Type": "application/json; charset=utf-8"})
    assert r.status == 200 and node.boots == 1


async def test_get_needs_no_content_type(client):
    r = await client.get("/sim/v1/faults")
    assert r.status == 200


# ---- reset of a GPU off the bus -----------------------------------------------------------------
@pytest.mark.parametrize("fault, params", [("gpu-lost", {}), ("xid", {"xid": 79})])
async def test_reset_of_a_lost_gpu_is_refused(client, node, fault, params):
    node.set_process_count(0)
    node.inject(2, fault, **params)
    r = await client.post("/sim/v1/reset", json={"gpu": 2})
    error = await _error(r)
    assert error.startswith("gpu: GPU 2 ") and "reboot" in error
    assert [f["fault"] for f in node.active_faults()] == [fault]


# ---- errors name the field that is wrong ---------------------------------------------------------
@pytest.mark.parametrize("owner, field", [
    ({"namespace": 5, "pod": "p", "container": "c"}, "namespace"),
    ({"namespace": "default", "pod": ["p"], "container": "c"}, "pod"),
    ({"namespace": "default", "pod": "p"}, "container"),
    ({"namespace": "default", "pod": "nope", "container": "c"}, "pod"),
])
async def test_process_owner_errors_name_the_field(client, node, owner, field):
    before = node.processes()
    r = await client.post("/sim/v1/processes", json={"gpu": 0, "used_memory_bytes": 1, **owner})
    assert (await _error(r)).startswith(f"{field}: ")
    assert node.processes() == before


async def test_pod_with_a_bad_gpu_index_names_the_container_entry(client, node):
    before = node.pods()
    body = {"namespace": "default", "name": "p", "containers": [{"name": "a", "gpus": [0]}, {"name": "b", "gpus": [1, 99]}]}
    r = await client.post("/sim/v1/pods", json=body)
    assert (await _error(r)).startswith("containers[1].gpus[1]: got 99; must be a GPU index in 0..7")
    assert node.pods() == before
