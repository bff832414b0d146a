"""``runtimekit dra serve``'s command line (kube/dra/cli.py), called in this process: a mistake in
the configuration exits 2 with one line naming the key and the rule; a driver that cannot run
(another one holds the plugin directory, a checkpoint of another version) exits 1 with one line;
never a traceback. (The crash and done-when tests run it as a process and stop it with SIGTERM.)"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest

from runtimekit.kube.dra.checkpoint import DirectoryLock
from runtimekit.kube.dra.cli import NODE_NAME_ENV, main
from tests.kube_fake_resource import FakeResourceApi


def write_config(directory: Path, **settings: object) -> Path:
    kubeconfig = directory / "kubeconfig"
    kubeconfig.write_text(FakeResourceApi().kubeconfig("http://127.0.0.1:9"))  # never reached by these tests
    values = {"node_name": "node-a", "agent_socket": str(directory / "agent.sock"), "registry_dir": str(directory / "registry"),
              "plugin_dir": str(directory / "plugin"), "cdi_dir": str(directory / "cdi"),
              "kubernetes": {"kubeconfig": str(kubeconfig)}, **settings}
    path = directory / "dra.yaml"
    path.write_text(json.dumps(values))
    return path


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["serve", *args])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, err


@pytest.mark.parametrize(("settings", "line"), [
    ({"agent_sockett": "/x"}, "runtimekit: error: agent_sockett: unknown key"),
    ({"driver_name": "GPU.example"}, "runtimekit: error: driver_name: must be a lower-case DNS subdomain"),
    ({"agent_timeout_seconds": 60}, "runtimekit: error: agent_timeout_seconds: must be between 0.05 and 40"),
    ({"whole_gpu_cdi_kind": "nvidia.com"}, "runtimekit: error: whole_gpu_cdi_kind: a CDI kind is VENDOR/CLASS"),
    ({"registry_dir": "/tmp/" + "r" * 100}, "runtimekit: error: registry_dir: the socket /tmp/rrr"),
    ({"kubernetes": {"kubeconfig": "/nonexistent/kubeconfig"}},
     "runtimekit: error: kubernetes.kubeconfig: /nonexistent/kubeconfig: no such file"),
    ({"kubernetes": {"kubeconfig": "/"}}, "runtimekit: error: kubernetes.kubeconfig: /: a directory, not a file\n"),
    ({"agent_socket": "/tmp/" + "a" * 110}, "runtimekit: error: agent_socket: the path is 115 bytes, a unix socket path at most 107\n"),
])
def test_a_configuration_mistake_exits_2_with_one_line_naming_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                      settings: dict[str, object], line: str) -> None:
    code, err = run(capsys, "--config", str(write_config(tmp_path, **settings)))
    assert code == 2
    assert err.startswith(line) and err.count("\n") == 1, err


def test_the_node_name_is_required_and_the_flag_or_environment_gives_it(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    config = write_config(tmp_path)
    document = json.loads(config.read_text())
    del document["node_name"]
    config.write_text(json.dumps(document))
    monkeypatch.delenv(NODE_NAME_ENV, raising=False)
    code, err = run(capsys, "--config", str(config))
    assert (code, err.strip()) == (2, "runtimekit: error: node_name: required: pass --node-name, set NODE_NAME "
                                      "(the pod's spec.nodeName) or the key")
    code, err = run(capsys, "--config", str(config), "--node-name", "Node_A")
    assert code == 2 and err.startswith("runtimekit: error: node_name: must be a Node's name")


def test_a_second_driver_on_the_same_plugin_directory_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path)
    held = DirectoryLock(tmp_path / "plugin" / "driver.lock")
    held.acquire()  # the first driver
    try:
        code, err = run(capsys, "--config", str(config))
    finally:
        held.release()
    assert (code, err.strip()) == (1, f"runtimekit: {tmp_path}/plugin/driver.lock is locked: another DRA driver serves "
                                      f"this plugin directory (pid {os.getpid()} on {socket.gethostname()})")


def test_a_checkpoint_this_version_cannot_read_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path)
    (tmp_path / "plugin").mkdir()
    (tmp_path / "plugin" / "checkpoint.json").write_text(json.dumps({"version": 2, "claims": {}}))
    code, err = run(capsys, "--config", str(config))
    assert code == 1
    assert err.strip() == (f"runtimekit: cannot read the checkpoint: {tmp_path}/plugin/checkpoint.json: version 2, "
                           "this driver reads version 1 only (do not delete it to start: without it the driver deletes "
                           "every slice it made, those of running pods included; see docs/dra.md)")
    assert not (tmp_path / "registry").exists() or list((tmp_path / "registry").iterdir()) == []  # never registered


def test_a_plugin_directory_that_cannot_be_made_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path)
    (tmp_path / "plugin").write_text("a file where the directory should be")
    code, err = run(capsys, "--config", str(config))
    assert code == 1 and err.count("\n") == 1, err
    assert err.startswith(f"runtimekit: {tmp_path}/plugin") and "cannot lock the plugin directory" in err, err


def test_a_kubeconfig_that_is_no_mapping_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kubeconfig = tmp_path / "list-kubeconfig"
    kubeconfig.write_text("- clusters\n- users\n")
    code, err = run(capsys, "--config", str(write_config(tmp_path, kubernetes={"kubeconfig": str(kubeconfig)})))
    assert (code, err) == (2, f"runtimekit: error: kubernetes.kubeconfig: {kubeconfig} is not a usable kubeconfig: "
                              "it is no YAML mapping of clusters, users and contexts\n")
