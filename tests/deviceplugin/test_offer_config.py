"""The offer annotation's configuration: off by default (no Kubernetes API access needed); on, it
needs a node name (--node-name, $NODE_NAME or the key) and a usable kubeconfig or service account,
and a mistake in either is one line naming the key and the rule, exit 2, no traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from runtimekit.kube.deviceplugin.config import POD_RESOURCES_SOCKET, load
from runtimekit.schema import ConfigError


def test_off_by_default() -> None:
    config = load()
    settings = config.offer_annotation
    assert (settings.enabled, config.node_name, config.kubernetes.kubeconfig) == (False, None, None)
    assert (settings.pod_resources_socket, settings.poll_seconds, settings.resync_seconds) == (
        POD_RESOURCES_SOCKET, 5.0, 60.0)


@pytest.mark.parametrize("text,message", [
    ("offer_annotation: {enabled: true}\n", "node_name: required with offer_annotation.enabled: pass --node-name, "
                                             "set NODE_NAME"),
    ("node_name: GPU_Node\n", "node_name: must be a Node's name: a lower-case DNS subdomain"),
    ("offer_annotation: {poll_seconds: 0}\n", "offer_annotation.poll_seconds: must be between 0.05 and 3600"),
    ("offer_annotation: {resync_seconds: 0.5}\n", "offer_annotation.resync_seconds: must be between 1 and 86400"),
    ("offer_annotation: {pod_resources_socket: kubelet.sock}\n", "offer_annotation.pod_resources_socket: must be an "
                                                                 "absolute path"),
    ("offer_annotation: {enabled: true, annotation: x}\n", "offer_annotation.annotation: unknown key"),
    ("node_name: gpu-node-1\noffer_annotation: {enabled: true}\n", None),
])
def test_bad_keys_are_named(tmp_path: Path, text: str, message: str | None) -> None:
    path = tmp_path / "plugin.yaml"
    path.write_text(text)
    if message is None:
        assert load(path).node_name == "gpu-node-1"
        return
    with pytest.raises(ConfigError) as error:
        load(path)
    assert str(error.value).startswith(message)


def serve(tmp_path: Path, text: str, *flags: str, node_name: str | None = None) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "plugin.yaml"
    path.write_text(text)
    env = {key: value for key, value in os.environ.items() if key != "NODE_NAME"}
    if node_name is not None:
        env["NODE_NAME"] = node_name
    return subprocess.run([sys.executable, "-m", "runtimekit.kube.deviceplugin", "serve", "--config", str(path), *flags],
                          capture_output=True, text=True, timeout=60, env=env)


def test_the_command_refuses_a_missing_node_name_or_a_bad_kubeconfig(tmp_path: Path) -> None:
    enabled = f"offer_annotation: {{enabled: true}}\nkubernetes: {{kubeconfig: {tmp_path / 'none'}}}\n"
    unnamed = serve(tmp_path, enabled)
    assert unnamed.returncode == 2 and unnamed.stderr.startswith("runtimekit: error: node_name: required"), unnamed.stderr

    missing = serve(tmp_path, enabled, node_name="gpu-node-1")  # the name from $NODE_NAME, as the DaemonSet sets it
    assert missing.returncode == 2
    assert missing.stderr == f"runtimekit: error: kubernetes.kubeconfig: {tmp_path / 'none'}: no such file\n"

    (tmp_path / "none").write_text("clusters: 12\n")
    broken = serve(tmp_path, enabled, "--node-name", "gpu-node-1")
    assert broken.returncode == 2 and "Traceback" not in broken.stderr
    assert broken.stderr.startswith(f"runtimekit: error: kubernetes.kubeconfig: {tmp_path / 'none'} is not a usable "
                                    "kubeconfig")
