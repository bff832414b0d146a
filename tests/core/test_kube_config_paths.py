"""Every path key of the cluster-side services (device plugin, DRA driver, remediation service) is
refused at load, naming the key, when it holds a NUL byte: no system call takes one, so a path like
that used to pass the schema and end in a traceback (``ValueError: embedded null byte``) when the
service opened it, or went unnoticed while the feature using it was off."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from runtimekit.kube.deviceplugin import config as deviceplugin
from runtimekit.kube.dra import config as dra
from runtimekit.kube.remediation import config as remediation
from runtimekit.schema import ConfigError

SERVICES = {"deviceplugin": deviceplugin, "dra": dra, "remediation": remediation}
NEEDED = {"dra": {"node_name": "gpu-node-07"}, "deviceplugin": {}, "remediation": {}}
PATH_WORDS = ("socket", "file", "path", "dir", "kubeconfig")


def path_keys() -> list[tuple[str, str]]:
    return [(name, key) for name, module in SERVICES.items() for key in module.SCHEMA
            if any(word in key.rsplit(".", 1)[-1] for word in PATH_WORDS)]


def test_the_services_have_the_path_keys_this_test_expects() -> None:
    keys = set(path_keys())
    assert {("dra", "cdi_dir"), ("deviceplugin", "offer_annotation.pod_resources_socket"),
            ("remediation", "auth.token_file"), ("remediation", "db_path")} <= keys


@pytest.mark.parametrize("service,key", path_keys())
def test_a_nul_byte_in_a_path_is_refused_naming_the_key(service: str, key: str) -> None:
    with pytest.raises(ConfigError) as error:
        SERVICES[service].load(None, {**NEEDED[service], key: "/var/lib/run\0timekit"})
    assert str(error.value).startswith(f"{key}: must be")
    assert "NUL byte" in str(error.value)


def test_the_remediation_command_says_so_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "remediation.yaml"
    path.write_text('auth:\n  token_file: "/etc/runtimekit/to\\0ken"\n')
    done = subprocess.run([sys.executable, "-m", "runtimekit.kube.remediation", "serve", "--config", str(path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.startswith("runtimekit: error: auth.token_file: must be a path: not empty, without a NUL byte")
