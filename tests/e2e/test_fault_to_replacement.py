"""From a fatal GPU fault to one spare-node request, with real Prometheus and Alertmanager.

Real processes on loopback: the agent on the simulated dgx-h100 node, Debian's ``prometheus``
(scrape and rule evaluation every 1 s, loading alerts/runtimekit.rules.yml), Debian's
``prometheus-alertmanager`` (routing as deploy/alertmanager/alertmanager.yml does, re-sending every
2 s so that duplicates happen), and ``runtimekit remediate serve``. The Kubernetes API server
cannot run here: a small fake (tests/kube_fakes.py) validates node PATCHes as the real one does.

XID 79 on GPU 3 must end with the node cordoned and tainted and exactly one call to the spare-node
endpoint although Alertmanager re-sends, naming GPU 3 by the UUID the agent exports (the alert's
``uuid`` and ``gpu`` labels); an application XID (13) must trigger nothing. The remediation
service runs with its breaker at the defaults on this 4-node cluster (breaker.min_nodes). The
fault-to-replacement latency is printed.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest
import yaml

from runtimekit.client import inject_remote
from tests.agent_process import ROOT, free_port, start_agent
from tests.kube_fakes import FakeKube, FakeReplacement, serve
from tests.prometheus_process import scrape_config

NODE = "gpu-1"  # the Kubernetes node the agent runs on (a target label added by the scrape)
TOKEN = "e2e-token"
pytestmark = pytest.mark.tool("prometheus", "prometheus-alertmanager")  # missing: fails under CI, skips elsewhere


def binary(name: str) -> str:
    found = shutil.which(name) or f"/usr/bin/{name}"
    assert Path(found).exists(), f"{name} is not installed (scripts/test installs it)"
    return found


def spawn(command: list[str], log: Path) -> subprocess.Popen:
    return subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=open(log, "w"))


async def wait_http(url: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            try:
                async with session.get(url) as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.2)
    raise AssertionError(f"{url} did not come up")


@pytest.fixture
async def cluster(tmp_path):
    kube, replacement = FakeKube(), FakeReplacement()
    kube_runner, kube_url = await serve(kube.app)
    replacement_runner, replacement_url = await serve(replacement.app)
    (tmp_path / "kubeconfig").write_text(kube.kubeconfig(kube_url))
    (tmp_path / "token").write_text(TOKEN + "\n")
    processes: list[subprocess.Popen] = []
    agent = start_agent(tmp_path, "--sim", "dgx-h100", "--interval", "1", "--seed", "11")
    try:
        remediation_port = free_port()
        (tmp_path / "remediation.yaml").write_text(yaml.safe_dump({
            "listen": f"127.0.0.1:{remediation_port}", "db_path": str(tmp_path / "journal.db"),
            "auth": {"token_file": str(tmp_path / "token")},
            "kubernetes": {"kubeconfig": str(tmp_path / "kubeconfig")},
            "replacement": {"url": replacement_url + "/replace", "backoff_seconds": 0.05},
            "worker_interval_seconds": 0.1,  # the breaker keeps its defaults: one node of 4 is 25 % > 10 %
        }))
        processes.append(spawn([sys.executable, "-m", "runtimekit.cli", "remediate", "serve", "--config",
                                str(tmp_path / "remediation.yaml")], tmp_path / "remediation.log"))
        await wait_http(f"http://127.0.0.1:{remediation_port}/healthz")

        am_port = free_port()
        shipped = yaml.safe_load((ROOT / "deploy" / "alertmanager" / "alertmanager.yml").read_text())
        webhook = shipped["receivers"][1]["webhook_configs"][0]
        webhook["url"] = f"http://127.0.0.1:{remediation_port}/api/v1/alerts"
        webhook["http_config"]["authorization"]["credentials_file"] = str(tmp_path / "token")
        shipped["route"].update(group_wait="0s", group_interval="1s", repeat_interval="2s")
        shipped["route"]["routes"][0].update(group_wait="0s")
        (tmp_path / "alertmanager.yml").write_text(yaml.safe_dump(shipped))
        processes.append(spawn([binary("prometheus-alertmanager"), f"--config.file={tmp_path / 'alertmanager.yml'}",
                                f"--storage.path={tmp_path / 'am'}", f"--web.listen-address=127.0.0.1:{am_port}",
                                "--cluster.listen-address="], tmp_path / "alertmanager.log"))
        await wait_http(f"http://127.0.0.1:{am_port}/-/ready")

        prometheus_port = free_port()
        (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(scrape_config(
            agent.url.removeprefix("http://"), node=NODE, rule_files=[str(ROOT / "alerts" / "runtimekit.rules.yml")],
            alertmanager=f"127.0.0.1:{am_port}",
        )))
        processes.append(spawn([binary("prometheus"), f"--config.file={tmp_path / 'prometheus.yml'}",
                                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                f"--web.listen-address=127.0.0.1:{prometheus_port}"], tmp_path / "prometheus.log"))
        await wait_http(f"http://127.0.0.1:{prometheus_port}/-/ready")
        await asyncio.sleep(3)  # a few scrapes and evaluations of a healthy node
        yield agent, kube, replacement, tmp_path, f"http://127.0.0.1:{remediation_port}", \
            f"http://127.0.0.1:{prometheus_port}"
    finally:
        for process in reversed(processes):
            process.terminate()
        for process in processes:
            try:  # off the event loop: the remediation service may be stopping mid-call to the fake API on it
                await asyncio.to_thread(process.wait, 10)
            except subprocess.TimeoutExpired:
                process.kill()
        agent.stop()
        await kube_runner.cleanup()
        await replacement_runner.cleanup()


def gpu_uuid(agent, index: int) -> str:
    """The UUID the agent exports for GPU ``index`` (runtimekit_gpu_info{gpu, uuid})."""
    found = [dict(labels)["uuid"] for (name, labels), _ in agent.samples().items()
             if name == "runtimekit_gpu_info" and dict(labels).get("gpu") == str(index)]
    assert len(found) == 1, f"runtimekit_gpu_info for GPU {index}: {found}"
    return found[0]


async def test_xid_79_requests_one_spare_node_and_xid_13_nothing(cluster):
    agent, kube, replacement, folder, remediation, _ = cluster
    uuid = gpu_uuid(agent, 3)
    assert uuid.startswith("GPU-")

    inject_remote(agent.url, 2, "xid", {"xid": 13})  # an application error: nothing may happen
    await asyncio.sleep(6)
    assert replacement.calls == []
    assert not kube.nodes[NODE]["spec"].get("unschedulable")

    injected = time.monotonic()
    inject_remote(agent.url, 3, "xid", {"xid": 79})
    deadline = injected + 30
    while not replacement.calls and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    latency = time.monotonic() - injected
    if not replacement.calls:
        async with aiohttp.ClientSession() as session:
            async with session.get(remediation + "/api/v1/actions") as response:
                actions = await response.text()
        raise AssertionError(f"no replacement call; actions: {actions[-3000:]}")
    print(f"\nfault-to-replacement latency: {latency:.2f} s (1 s scrape and evaluation intervals)")

    await asyncio.sleep(8)  # Alertmanager re-sends every 2 s: still one request
    assert len(replacement.calls) == 1
    key, body = replacement.calls[0]
    assert key and body["node"] == NODE
    assert body["gpu_uuids"] == [uuid], body  # from the alert's `uuid` label
    assert body["gpu_indices"] == ["3"], body  # from the alert's `gpu` label
    assert body["fault"] == "gpu_lost", body  # the agent's fault, from the alert's `fault` label
    node = kube.nodes[NODE]
    assert node["spec"]["unschedulable"] is True
    assert any(t["key"] == "runtimekit.io/gpu-unhealthy" for t in node["spec"].get("taints", []))
    assert latency <= 10.0, f"fault-to-replacement took {latency:.2f} s"


async def query(prometheus: str, expr: str) -> list:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{prometheus}/api/v1/query", params={"query": expr}) as response:
            answer = await response.json()
    assert answer["status"] == "success", answer
    return answer["data"]["result"]


async def test_a_contained_ecc_error_is_a_warning_and_requests_no_spare_node(cluster):
    """XID 94 as hardware delivers it (the uncorrected counters move, a row remap goes pending, then
    XID 94): the GPU stays schedulable with a warning asking for a reset when idle, and nothing in
    the shipped pipeline asks for a node to be taken out or replaced."""
    agent, kube, replacement, folder, remediation, prometheus = cluster
    uuid = gpu_uuid(agent, 5)
    inject_remote(agent.url, 5, "ecc-contained", {})
    deadline = time.monotonic() + 30
    faults: list = []
    while not faults and time.monotonic() < deadline:
        faults = await query(prometheus, f'runtimekit_gpu_fault_active{{uuid="{uuid}"}} == 1')
        await asyncio.sleep(0.5)
    assert faults, "the contained ECC error never showed in Prometheus"
    assert {f["metric"]["severity"] for f in faults} == {"warning"}, faults
    assert {f["metric"]["action"] for f in faults} <= {"drain_and_reset_gpu", "none"}, faults
    health = await query(prometheus, f'runtimekit_gpu_health{{uuid="{uuid}"}} == 1')
    assert [h["metric"]["state"] for h in health] == ["suspect"], health
    await asyncio.sleep(8)  # evaluations and Alertmanager re-sends: still nothing acted on
    firing = await query(prometheus, f'ALERTS{{uuid="{uuid}",alertstate="firing"}}')
    assert all(a["metric"]["action"] not in ("replace_node", "reboot_node") for a in firing), firing
    assert replacement.calls == []
    assert not kube.nodes[NODE]["spec"].get("unschedulable")
