"""``runtimekit gang serve`` as a process: its exit codes and one-line errors (a web configuration
file it cannot serve the webhook with among them), and the whole service end to end against the
fake API server (the admission webhook over HTTPS from its web configuration file gating a pod,
the controller releasing the gang, SIGTERM stopping it with 0)."""

from __future__ import annotations

import asyncio
import base64
import json
import signal
import socket
import ssl
import sys
from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest

from runtimekit.kube.gang import serve_cli
from runtimekit.kube.gang.gangs import GATE
from runtimekit.kube.gang.offer import Offer
from tests.gang.fake_cluster_api import FakeClusterApi
from tests.gang.fake_patches import apply_json_patch
from tests.gang.gang_rig import LEAF, SPINE, pinned_node, pod_group_pod
from tests.gang.test_webhook import review, self_signed
from tests.kube_fakes import serve


def _config(tmp_path: Path, text: str) -> str:
    path = tmp_path / "gang.yaml"
    path.write_text(text)
    return str(path)


def _kubeconfig(tmp_path: Path, url: str = "http://127.0.0.1:1") -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(FakeClusterApi().kubeconfig(url))
    return path


@pytest.mark.parametrize("text, web_config, message", [
    ("colour: red\n", None, "colour: unknown key"),
    ("tiers: {keys: []}\n", None, "tiers.keys: must list at least one label key"),
    ("webhook: {listen: '0.0.0.0:9443'}\n", None, "listener.web_config_file: required while webhook.listen is set"),
    ("offers: {source: guess}\n", None, "offers.source: must be one of annotation, resourceslices"),
    ("kubernetes: {kubeconfig: /nonexistent/kubeconfig}\nwebhook: {listen: null}\n", None,
     "kubernetes.kubeconfig: /nonexistent/kubeconfig: no such file"),
    ("listener: {web_config_file: /nonexistent/web.yml}\n", None,
     "listener.web_config_file: cannot read /nonexistent/web.yml"),
    ("listener: {web_config_file: WEB}\n", "basic_auth_users: {}\n", "listener.web_config_file: WEB: needs a tls_server_config"),
    ("listener: {web_config_file: WEB}\n", "tls_server_config: {cert_file: none.pem, key_file: none.key}\n",
     "listener.web_config_file: WEB: tls_server_config.cert_file: cannot read"),
    ("listener: {web_config_file: WEB}\n", "tls_server_config: {cert_file: a.pem, key_file: a.key, colour: red}\n",
     "listener.web_config_file: WEB: tls_server_config.colour: unknown key"),
])
def test_configuration_mistakes_exit_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str,
                                                      web_config: str | None, message: str) -> None:
    if web_config is not None:
        (tmp_path / "web.yml").write_text(web_config)
        text, message = text.replace("WEB", str(tmp_path / "web.yml")), message.replace("WEB", str(tmp_path / "web.yml"))
    if "kubernetes:" not in text:
        text += f"kubernetes: {{kubeconfig: {_kubeconfig(tmp_path)}}}\n"
    assert serve_cli.main(["serve", "--config", _config(tmp_path, text)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("runtimekit: error: ") and message in err and "\n" not in err and "Traceback" not in err


def _web_config(tmp_path: Path, require_tool: Callable[..., str]) -> tuple[Path, Path]:
    """(the web configuration file, the certificate it serves): TLS from a self-signed certificate."""
    cert, _ = self_signed(require_tool("openssl", "openssl"), tmp_path, "tls")
    (tmp_path / "web.yml").write_text("tls_server_config: {cert_file: tls.pem, key_file: tls.key}\n")
    return tmp_path / "web.yml", cert


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_webhook_port_taken_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str], require_tool: Callable[..., str]) -> None:
    web_config, _ = _web_config(tmp_path, require_tool)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = _config(tmp_path, f"kubernetes: {{kubeconfig: {_kubeconfig(tmp_path)}}}\n"
                                   f"webhook: {{listen: '127.0.0.1:{port}'}}\nlistener: {{web_config_file: {web_config}}}\n")
        assert serve_cli.main(["serve", "--config", config]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"runtimekit: cannot serve the webhook on 127.0.0.1:{port}")


async def _until(check: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        assert asyncio.get_running_loop().time() < deadline, f"not within {timeout} s: {what}"
        await asyncio.sleep(0.05)


async def test_gang_serve_gates_places_and_stops_cleanly(tmp_path: Path, require_tool: Callable[..., str]) -> None:
    web_config, cert = _web_config(tmp_path, require_tool)
    api = FakeClusterApi()
    runner, url = await serve(api.app)
    port = _free_port()
    config = _config(tmp_path, f"kubernetes: {{kubeconfig: {_kubeconfig(tmp_path, url)}}}\n"
                               f"webhook: {{listen: '127.0.0.1:{port}'}}\nlistener: {{web_config_file: {web_config}}}\n"
                               f"tiers: {{keys: [{SPINE}, {LEAF}]}}\ncontroller: {{settle_seconds: 0.05, resync_seconds: 1}}\n")
    process = await asyncio.create_subprocess_exec(sys.executable, "-m", "runtimekit.cli", "gang", "serve", "--config", config,
                                                   stderr=asyncio.subprocess.PIPE)
    try:
        for i in range(2):
            api.add_node(f"n{i}", {SPINE: "s1", LEAF: "l0"}, Offer.of([4, 4]))
        trust = ssl.create_default_context(cafile=str(cert))
        pods = []
        async with aiohttp.ClientSession() as session:
            for i in range(4):
                pod = pod_group_pod("g", i, size=4, gpus=4)
                del pod["spec"]["schedulingGates"]  # as the JobSet's template writes it: the webhook adds the gate
                answer = None
                for _ in range(200):  # the service is starting: its port opens within seconds
                    try:
                        async with session.post(f"https://127.0.0.1:{port}/mutate", json=review(pod), ssl=trust) as response:
                            answer = await response.json()
                        break
                    except aiohttp.ClientConnectorError:
                        await asyncio.sleep(0.05)
                assert answer is not None, "the webhook never answered"
                pods.append(apply_json_patch(pod, json.loads(base64.b64decode(answer["response"]["patch"]))))
        for pod in pods[:3]:
            api.add_pod(pod)
        assert all(api.pod("default", f"g-{i}")["spec"]["schedulingGates"] == [{"name": GATE}] for i in range(3))
        api.add_pod(pods[3])
        await _until(lambda: all(not api.pod("default", f"g-{i}")["spec"].get("schedulingGates") for i in range(4)),
                     "every pod of the gang released")
        nodes = sorted(pinned_node(api.pod("default", f"g-{i}")) for i in range(4))
        assert nodes == ["n0", "n0", "n1", "n1"], "two pods of 4 GPUs on each 8-GPU node"
        process.send_signal(signal.SIGTERM)
        try:
            assert await asyncio.wait_for(process.wait(), 15) == 0
        except TimeoutError:
            process.kill()
            said = (await process.stderr.read()).decode() if process.stderr else ""
            pytest.fail(f"gang serve did not stop within 15 s of SIGTERM; its stderr:\n{said}")
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        api.close()
        await runner.cleanup()
    stderr = (await process.stderr.read()).decode() if process.stderr else ""
    assert "Traceback" not in stderr
    assert "gang default/g placed" in stderr
