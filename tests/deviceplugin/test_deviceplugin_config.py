"""The device plugin's configuration: bad input is one line naming the key and the rule (exit 2,
no traceback), through ``load`` and through ``runtimekit device-plugin serve``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from runtimekit.kube.deviceplugin.config import load
from runtimekit.schema import ConfigError


def test_defaults() -> None:
    config = load()
    assert (config.kubelet_socket, config.socket_dir, config.resource_name, config.mig_prefix) == (
        "/var/lib/kubelet/device-plugins/kubelet.sock", "/var/lib/kubelet/device-plugins", "nvidia.com/gpu",
        "nvidia.com/mig-")
    assert (config.cdi, config.visible_devices_env, config.with_nics, config.cdi_kind) == (True, True, True, "nvidia.com/gpu")


@pytest.mark.parametrize("text,message", [
    ("resource_name: gpu\n", "resource_name: must be DOMAIN/NAME (nvidia.com/gpu), got 'gpu'"),
    ("resource_name: kubernetes.io/gpu\n", "resource_name: its domain must not be kubernetes.io"),
    ("mig_prefix: 'nvidia.com/mig_'\n", None),  # valid: "_" is allowed inside a name
    ("mig_prefix: 'Nvidia/mig-'\n", "mig_prefix: with a profile appended, Nvidia/mig-1g.10gb is no resource name: its "
                                    "domain must be"),
    ("mig_prefix: 'nvidia.com/MIG '\n", "mig_prefix: with a profile appended, nvidia.com/MIG 1g.10gb is no resource name: "
                                        "its name must be 1-63 characters"),
    ("agent_socket: relative.sock\n", "agent_socket: must be an absolute path, without a NUL byte, got 'relative.sock'"),
    ("health_poll_seconds: 0\n", "health_poll_seconds: must be between 0.05 and 3600, got 0"),
    ("cdi: false\nvisible_devices_env: false\n", "cdi: set it or visible_devices_env"),
    ("with_nics: yes please\n", "with_nics: must be true or false, got str 'yes please'"),
    ("kubelet: {socket: /x}\n", "kubelet.socket: unknown key"),
    ("cdi_kind: nvidia.com\n", "cdi_kind: a CDI kind is vendor/class: must be DOMAIN/NAME"),
])
def test_bad_keys_are_named(tmp_path: Path, text: str, message: str | None) -> None:
    path = tmp_path / "plugin.yaml"
    path.write_text(text)
    if message is None:
        load(path)
        return
    with pytest.raises(ConfigError) as error:
        load(path)
    assert str(error.value).startswith(message)


def test_the_command_reports_a_bad_file_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "plugin.yaml"
    path.write_text("resource_name: gpu\n")
    done = subprocess.run([sys.executable, "-m", "runtimekit.kube.deviceplugin", "serve", "--config", str(path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr == "runtimekit: error: resource_name: must be DOMAIN/NAME (nvidia.com/gpu), got 'gpu'\n"
    missing = subprocess.run([sys.executable, "-m", "runtimekit.kube.deviceplugin", "serve", "--config",
                              str(tmp_path / "none.yaml")], capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert missing.stderr.startswith("runtimekit: error: --config: cannot read")
