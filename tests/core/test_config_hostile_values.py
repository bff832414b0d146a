"""Values of the agent's configuration that broke a rule in an unusual way now break a rule by name:
Unicode digits in a port, a NUL byte or nothing in a path (one rule for every path-valued key), a
CDI vendor that is no CDI name. Each is a ConfigError naming the dotted key, and at the command
line one line with exit 2."""

from __future__ import annotations

import subprocess
import sys

import pytest

from runtimekit import config as agent_config
from runtimekit.config import SCHEMA, ConfigError, load
from runtimekit.kube.dra.config import _cdi_kind as dra_cdi_kind
from runtimekit.schema import file_path
from runtimekit.slicer import cdi

#: Every key of the agent's configuration whose value is a path (of a file, a folder or a socket).
PATH_KEYS = ("state_dir", "attribution.kubelet_socket", "attribution.cri_socket", "attribution.proc_root",
             "health.thresholds", "health.boot_id_path", "listener.web_config_file", "slicer.cdi_dir",
             "topology.sys_root", "api.socket", "api.web_config_file")


@pytest.mark.parametrize("port", ["\u00b2", "\u0663", "\uff18\uff10", "1\u0660"], ids=["superscript", "arabic", "fullwidth", "mixed"])
def test_a_port_in_unicode_digits_is_refused_naming_the_key(port):
    with pytest.raises(ConfigError, match=r"^listen: port must be a number 0\.\.65535"):
        load(None, {"listen": f"127.0.0.1:{port}"})


def test_a_host_in_unicode_letters_or_digits_is_refused_naming_the_key():
    with pytest.raises(ConfigError, match=r"^listen: host must be an IP address or a hostname"):
        load(None, {"listen": "\uff11\uff12\uff17.0.0.1:9445"})


def test_every_path_valued_key_has_the_one_path_rule():
    assert [key for key in PATH_KEYS if SCHEMA[key].check is not file_path] == []


@pytest.mark.parametrize("key", PATH_KEYS)
def test_a_nul_byte_in_a_path_is_refused_naming_the_key(key):
    with pytest.raises(ConfigError, match=rf"^{key}: must be a path: .*, got '/var/a\\x00b'$"):
        load(None, {key: "/var/a\0b"})


@pytest.mark.parametrize("key", PATH_KEYS)
def test_an_empty_path_is_refused_naming_the_key(key):
    with pytest.raises(ConfigError, match=rf"^{key}: must be a path: not empty"):
        load(None, {key: ""})


def test_an_empty_state_dir_in_the_file_is_refused(tmp_path):
    (tmp_path / "agent.yaml").write_text('state_dir: ""\n')
    with pytest.raises(ConfigError, match=r"^state_dir: must be a path: not empty"):
        load(tmp_path / "agent.yaml")


VENDORS_OK = ["runtimekit.io", "nvidia.com", "k8s.gpu.nvidia.com", "a", "vendor-1.example"]
VENDORS_BAD = ["x/../../escaped", "runtimekit.io/slice", "", "Runtimekit.io", "1vendor.io", "a_b.io", "x..y",
               "vendor.", "-v.io", "v\u00e9ndor.io", "a" * 254]


@pytest.mark.parametrize("vendor", VENDORS_OK)
def test_a_cdi_vendor_accepted_makes_a_kind_the_cdi_rule_accepts(vendor):
    assert load(None, {"slicer.cdi_vendor": vendor}).slicer.cdi_vendor == vendor
    assert dra_cdi_kind(cdi.kind(vendor)) is None


@pytest.mark.parametrize("vendor", VENDORS_BAD, ids=lambda vendor: vendor[:20] or "empty")
def test_a_cdi_vendor_that_is_no_cdi_name_is_refused_naming_the_key(vendor):
    with pytest.raises(ConfigError, match=r"^slicer\.cdi_vendor: must be a CDI vendor"):
        load(None, {"slicer.cdi_vendor": vendor})


def test_the_cdi_vendor_rule_is_the_keys_check():
    assert SCHEMA["slicer.cdi_vendor"].check is agent_config.cdi_vendor_problem


@pytest.mark.parametrize("yaml_text,expected", [
    ('listen: "127.0.0.1:\u00b2"\n', "listen: port must be a number 0..65535"),
    ('health: {thresholds: "/etc/a\\0b"}\n', "health.thresholds: must be a path"),
], ids=["port", "nul"])
def test_the_agent_stops_with_one_line_naming_the_key(tmp_path, yaml_text, expected):
    """(Only values the agent refused before too, with another message: one it accepted would start it.)"""
    (tmp_path / "agent.yaml").write_text(yaml_text, encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "runtimekit.cli", "serve", "--sim", "dgx-h100", "--listen",
                           "127.0.0.1:0", "--config", str(tmp_path / "agent.yaml"), "--state-dir",
                           str(tmp_path / "state")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"runtimekit: error: {expected}"), done.stderr
    assert sorted(path.name for path in tmp_path.iterdir()) == ["agent.yaml"]  # nothing written, no state in cwd
