"""MIG over the simulator's control API and command line: a GPU reset (the pending MIG mode takes
effect; refused while processes run), an XID raised in a MIG instance, a process started in one."""

from __future__ import annotations

import asyncio
import json

import pynvml
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from runtimekit import cli
from runtimekit.sim import SimulatedNode, install, load_scenario, uninstall
from runtimekit.sim.control import add_control_routes

GPU = 3


@pytest.fixture
def idle(clock) -> SimulatedNode:
    """A dgx-h100 node with no load profile job (nothing runs unless a test starts it)."""
    return SimulatedNode(load_scenario("dgx-h100"), seed=7, clock=clock, load="idle")


async def serve(node: SimulatedNode) -> TestClient:
    app = web.Application()
    add_control_routes(app, node)
    client = TestClient(TestServer(app, host="127.0.0.1"))
    await client.start_server()
    return client


@pytest.fixture
async def client(idle):
    c = await serve(idle)
    yield c
    await c.close()


def mig_card(node: SimulatedNode) -> tuple[int, int]:
    """Put GPU ``GPU`` in MIG mode with one 3g.40gb instance at 0 and its compute instance: (gi, ci)."""
    node.set_mig_mode(GPU, True)
    node.reset_gpu(GPU)
    gi = node.create_gpu_instance(GPU, 9, 0)
    ci = node.create_compute_instance(GPU, gi.id, pynvml.NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE)
    return gi.id, ci.id


async def error_of(response) -> str:
    assert response.status == 400, await response.text()
    return (await response.json())["error"]


# ---- GPU reset ---------------------------------------------------------------------------------
async def test_a_reset_applies_the_pending_mig_mode(client, idle):
    assert idle.set_mig_mode(GPU, True) is True
    r = await client.post("/sim/v1/reset", json={"gpu": GPU})
    assert r.status == 200
    assert await r.json() == {"gpu": GPU, "cleared": 0, "mig": {"current": True, "pending": True}}
    assert idle.mig_mode(GPU) == (True, True)
    idle.create_gpu_instance(GPU, 9, 0)
    await client.post("/sim/v1/reset", json={"gpu": GPU})
    assert idle.gpu_instances(GPU) == []  # instances do not survive a reset


async def test_a_reset_clears_the_gpus_faults(client, idle):
    idle.inject(GPU, "power-brake")  # not gpu-lost: a GPU off the bus cannot be reset (test_sim_lost_gpu.py)
    idle.inject(GPU, "driver-error", error="reset-required")
    r = await client.post("/sim/v1/reset", json={"gpu": GPU})
    assert (await r.json())["cleared"] == 2 and idle.active_faults() == []


async def test_a_reset_is_refused_while_processes_run(client, idle):
    gi, ci = mig_card(idle)
    idle.set_mig_mode(GPU, True)
    pid = idle.add_process(GPU, 1 << 30, name="train.py", gpu_instance=gi, compute_instance=ci)
    error = await error_of(await client.post("/sim/v1/reset", json={"gpu": GPU}))
    assert error.startswith(f"gpu: GPU {GPU} is in use by 1 process") and f"{pid} (train.py)" in error
    assert [g.id for g in idle.gpu_instances(GPU)] == [gi]  # nothing changed
    assert pid in idle.process_instances()
    idle.remove_process(pid)
    assert (await client.post("/sim/v1/reset", json={"gpu": GPU})).status == 200


async def test_the_load_profiles_job_holds_the_gpu_too(clock):
    busy = SimulatedNode(load_scenario("dgx-h100"), seed=7, clock=clock, load="training")
    assert busy.processes_on(GPU), "the training load runs a job on every GPU"
    busy.set_mig_mode(GPU, True)
    client = await serve(busy)
    try:
        error = await error_of(await client.post("/sim/v1/reset", json={"gpu": GPU}))
    finally:
        await client.close()
    assert error.startswith(f"gpu: GPU {GPU} is in use") and busy.mig_mode(GPU) == (False, True)


@pytest.mark.parametrize("body, field", [({}, "gpu"), ({"gpu": "3"}, "gpu"), ({"gpu": 99}, "gpu"), ({"gpu": True}, "gpu")])
async def test_reset_bad_input_names_the_field(client, idle, body, field):
    idle.set_mig_mode(GPU, True)
    assert (await error_of(await client.post("/sim/v1/reset", json=body))).startswith(field + ":")
    assert idle.mig_mode(GPU) == (False, True)


# ---- XID in a MIG instance -----------------------------------------------------------------------
async def test_an_xid_in_an_instance_carries_its_ids(client, idle):
    gi, ci = mig_card(idle)
    install(idle)
    try:
        pynvml.nvmlInit()
        events = pynvml.nvmlEventSetCreate()
        pynvml.nvmlDeviceRegisterEvents(pynvml.nvmlDeviceGetHandleByIndex(GPU), pynvml.nvmlEventTypeXidCriticalError, events)
        r = await client.post("/sim/v1/mig/xid", json={"gpu": GPU, "xid": 43, "gpu_instance": gi, "compute_instance": ci})
        assert r.status == 200 and await r.json() == {"delivered": 1}
        data = pynvml.nvmlEventSetWait_v2(events, 1000)
        assert (data.eventData, data.gpuInstanceId, data.computeInstanceId) == (43, gi, ci)
        await client.post("/sim/v1/mig/xid", json={"gpu": GPU, "xid": 31, "gpu_instance": gi})
        data = pynvml.nvmlEventSetWait_v2(events, 1000)
        assert (data.eventData, data.gpuInstanceId, data.computeInstanceId) == (31, gi, 0xFFFFFFFF)
        pynvml.nvmlEventSetFree(events)
    finally:
        uninstall()


@pytest.mark.parametrize(
    "body, field",
    [
        ({"xid": 43, "gpu_instance": 1}, "gpu"),
        ({"gpu": GPU, "gpu_instance": 1}, "xid"),
        ({"gpu": GPU, "xid": 0, "gpu_instance": 1}, "xid"),
        ({"gpu": GPU, "xid": 43}, "gpu_instance"),
        ({"gpu": GPU, "xid": 43, "gpu_instance": "1"}, "gpu_instance"),
        ({"gpu": GPU, "xid": 43, "gpu_instance": 9}, "gpu_instance"),  # no such instance
        ({"gpu": GPU, "xid": 43, "gpu_instance": 1, "compute_instance": "0"}, "compute_instance"),
        ({"gpu": GPU, "xid": 43, "gpu_instance": 1, "compute_instance": 5}, "compute_instance"),
        ({"gpu": 0, "xid": 43, "gpu_instance": 1}, "gpu"),  # GPU 0 is not in MIG mode
    ],
)
async def test_xid_bad_input_names_the_field(client, idle, body, field):
    mig_card(idle)
    assert (await error_of(await client.post("/sim/v1/mig/xid", json=body))).startswith(field + ":")


# ---- processes in an instance --------------------------------------------------------------------
async def test_a_process_runs_in_a_mig_instance(client, idle):
    gi, ci = mig_card(idle)
    r = await client.post("/sim/v1/processes", json={
        "gpu": GPU, "used_memory_bytes": 1 << 30, "name": "infer", "gpu_instance": gi, "compute_instance": ci})
    pid = (await r.json())["pid"]
    assert idle.process_instances() == {pid: (gi, ci)}
    assert idle.instance_memory(GPU, gi)[1] == 1 << 30


@pytest.mark.parametrize(
    "extra, field",
    [
        ({}, "gpu_instance"),  # a MIG card: the instance is required
        ({"gpu_instance": "1", "compute_instance": 0}, "gpu_instance"),
        ({"gpu_instance": 1, "compute_instance": None}, "compute_instance"),
        ({"gpu_instance": 1, "compute_instance": 4}, "compute_instance"),
        ({"gpu_instance": 7, "compute_instance": 0}, "gpu_instance"),
    ],
)
async def test_process_instance_bad_input_names_the_field(client, idle, extra, field):
    mig_card(idle)
    r = await client.post("/sim/v1/processes", json={"gpu": GPU, "used_memory_bytes": 1 << 20, **extra})
    assert (await error_of(r)).startswith(field + ":")
    assert idle.process_instances() == {}


# ---- command line --------------------------------------------------------------------------------
async def run_cli(capsys, *argv: str) -> tuple[int, dict | str]:
    code = await asyncio.to_thread(cli.main, list(argv))
    out, err = capsys.readouterr()
    return code, json.loads(out) if code == 0 else err


async def test_cli_resets_injects_into_an_instance_and_starts_a_process_there(client, idle, capsys):
    agent = str(client.make_url("/"))
    idle.set_mig_mode(GPU, True)
    assert await run_cli(capsys, "sim", "reset", "--agent", agent, "--gpu", str(GPU)) == (
        0, {"gpu": GPU, "cleared": 0, "mig": {"current": True, "pending": True}})
    gi = idle.create_gpu_instance(GPU, 9, 4).id
    ci = idle.create_compute_instance(GPU, gi, pynvml.NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE).id
    code, answer = await run_cli(capsys, "sim", "process", "add", "--agent", agent, "--gpu", str(GPU),
                                 "--gpu-instance", str(gi), "--compute-instance", str(ci))
    assert code == 0 and idle.process_instances() == {answer["pid"]: (gi, ci)}
    assert await run_cli(capsys, "sim", "inject", "--agent", agent, "--gpu", str(GPU), "--fault", "xid", "--xid", "43",
                         "--gpu-instance", str(gi), "--compute-instance", str(ci)) == (0, {"delivered": 0})
    code, err = await run_cli(capsys, "sim", "reset", "--agent", agent, "--gpu", str(GPU))
    assert code == 2 and f"gpu: GPU {GPU} is in use" in err


async def test_cli_instance_options_apply_to_xid_only(client, capsys):
    agent = str(client.make_url("/"))
    code, err = await run_cli(capsys, "sim", "inject", "--agent", agent, "--gpu", "0", "--fault", "gpu-lost",
                              "--gpu-instance", "1")
    assert code == 2 and "--gpu-instance: applies to --fault xid only" in err
    code, err = await run_cli(capsys, "sim", "inject", "--agent", agent, "--gpu", "0", "--fault", "xid", "--xid", "43",
                              "--compute-instance", "0")
    assert code == 2 and "--compute-instance: needs --gpu-instance" in err
