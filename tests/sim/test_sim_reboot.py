"""A simulated node reboot: new boot id, faults gone, GPUs back, driver counters restarted."""

import asyncio
from pathlib import Path

import pynvml as N
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from runtimekit.client import reboot_remote
from runtimekit.sim.control import add_control_routes
from runtimekit.sim.host import SimulatedHost

UNC, COR, VOL, AGG = (N.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, N.NVML_MEMORY_ERROR_TYPE_CORRECTED,
                      N.NVML_VOLATILE_ECC, N.NVML_AGGREGATE_ECC)


def H(i):
    return N.nvmlDeviceGetHandleByIndex(i)


def test_node_reboot_clears_faults_and_restarts_driver_counters(nvml, node, clock):
    node.inject(0, "ecc-contained", count=3)
    node.inject(1, "gpu-lost")
    node.inject(2, "nvlink-crc", rate=100, link=0)
    node.inject(3, "compute-mode", mode="prohibited")
    pid = node.add_process(4, 1 << 30)
    node.set_process_count(8)
    clock.advance(10)
    workers = {p["pid"] for p in node.processes() if p["name"] == "worker"}
    energy = N.nvmlDeviceGetTotalEnergyConsumption(H(0))
    crc = [N.nvmlDeviceGetNvLinkErrorCounter(H(2), 0, c) for c in (N.NVML_NVLINK_ERROR_DL_CRC_FLIT, N.NVML_NVLINK_ERROR_DL_CRC_DATA)]
    assert energy > 0 and sum(crc) == 1000  # 100/s for 10 s

    assert node.reboot() == 4
    assert node.active_faults() == [] and node.boots == 1
    assert N.nvmlDeviceGetName(H(1)).startswith("NVIDIA")  # the lost GPU is back
    assert N.nvmlDeviceGetComputeMode(H(3)) == N.NVML_COMPUTEMODE_DEFAULT
    h0 = H(0)
    assert N.nvmlDeviceGetTotalEccErrors(h0, UNC, VOL) == 0  # volatile: reset by the driver reload
    assert N.nvmlDeviceGetTotalEccErrors(h0, UNC, AGG) == 3  # aggregate: kept in the InfoROM
    assert N.nvmlDeviceGetRemappedRows(h0) == (0, 3, 0, 0)  # the pending remap was applied
    assert N.nvmlDeviceGetTotalEnergyConsumption(h0) < energy
    assert N.nvmlDeviceGetNvLinkErrorCounter(H(2), 0, N.NVML_NVLINK_ERROR_DL_CRC_FLIT) == 0
    assert N.nvmlDeviceGetNvLinkErrorCounter(H(2), 0, N.NVML_NVLINK_ERROR_DL_REPLAY) == 0
    pids = {p["pid"] for p in node.processes()}
    assert pid not in pids  # an added process is gone for good
    restarted = {p["pid"] for p in node.processes() if p["name"] == "worker"}
    assert len(workers) == len(restarted) == 8 and not workers & restarted  # --sim-processes: running again, new pids
    with pytest.raises(KeyError):
        node.remove_process(pid)


def test_corrected_ecc_volatile_resets_aggregate_keeps(nvml, node, clock):
    node.now()  # time 0
    clock.advance(5000)  # corrected errors arrive at random, about one per 500 ticks per GPU
    before = {i: (N.nvmlDeviceGetTotalEccErrors(H(i), COR, VOL), N.nvmlDeviceGetTotalEccErrors(H(i), COR, AGG))
              for i in range(8)}
    assert any(v for v, _ in before.values())
    node.reboot()
    for i, (_, aggregate) in before.items():
        assert N.nvmlDeviceGetTotalEccErrors(H(i), COR, VOL) == 0
        assert N.nvmlDeviceGetTotalEccErrors(H(i), COR, AGG) == aggregate


def test_job_processes_restart_with_new_pids(node):
    before = {p["pid"] for p in node.processes() if p["name"] == "python"}
    assert before
    node.reboot()
    after = {p["pid"] for p in node.processes() if p["name"] == "python"}
    assert after and not after & before


async def test_host_reboot_writes_a_new_boot_id_and_empties_proc(node, tmp_path):
    host = SimulatedHost(node, tmp_path)
    first = Path(host.boot_id_path).read_text()
    assert host.boot_id_path == str(tmp_path / "proc/sys/kernel/random/boot_id")
    assert first.strip() == host.boot_id and len(first.strip()) == 36 and first.endswith("\n")
    pid = node.add_process(0, 1 << 20)
    host.sync_proc(node.processes())
    assert (tmp_path / "proc" / str(pid)).is_dir()
    node.inject(5, "xid", xid=79)

    answer = host.reboot()
    assert answer["cleared"] == 1 and answer["boot_id"] == host.boot_id
    assert Path(host.boot_id_path).read_text().strip() == host.boot_id != first.strip()
    assert not (tmp_path / "proc" / str(pid)).exists()
    assert node.active_faults() == []


async def test_reboot_route_and_client(node, tmp_path):
    host = SimulatedHost(node, tmp_path)
    app = web.Application()
    add_control_routes(app, node, host)
    node.inject(2, "gpu-lost")
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        old = host.boot_id
        answer = await asyncio.to_thread(reboot_remote, str(client.make_url("/")))
        assert answer == {"boot_id": host.boot_id, "cleared": 1} and host.boot_id != old
        assert node.active_faults() == []


async def test_reboot_route_without_host(node):
    app = web.Application()
    add_control_routes(app, node)
    node.inject(0, "power-brake")
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        r = await client.post("/sim/v1/reboot", headers={"Content-Type": "application/json"})
        assert r.status == 200 and await r.json() == {"boot_id": None, "cleared": 1}


def test_row_remap_failure_is_kept_in_the_inforom(nvml, node):
    """failureOccurred says a remap ever failed: like the remapped-row counts it lives in the
    InfoROM and survives a GPU reset and a reboot (only clearing the injected fault, before either,
    undoes it)."""
    node.inject(0, "row-remap-failure")
    node.inject(1, "row-remap-failure")
    node.inject(1, "row-remap-pending")
    assert node.reboot() == 3
    assert N.nvmlDeviceGetRemappedRows(H(0)) == (0, 0, 0, 1)
    assert N.nvmlDeviceGetRemappedRows(H(1)) == (0, 1, 0, 1)
    assert node.active_faults() == []
    node.reboot()
    assert N.nvmlDeviceGetRemappedRows(H(0)) == (0, 0, 0, 1)


def test_row_remap_failure_survives_a_gpu_reset(nvml, node):
    node.inject(3, "row-remap-failure")
    assert node.reset_gpu(3) == 1
    assert N.nvmlDeviceGetRemappedRows(H(3)) == (0, 0, 0, 1)
