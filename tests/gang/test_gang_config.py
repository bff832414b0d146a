"""The configuration of ``runtimekit gang serve`` (kube/gang/config.py) against docs/gang.md: the
example there lists every key with its default and loads; mistakes are refused naming the key,
the webhook's web configuration file among them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from runtimekit.kube.gang.config import SCHEMA, check_webhook_web_config, load
from runtimekit.schema import ConfigError, flatten

DOC = Path(__file__).resolve().parents[2] / "docs" / "gang.md"
NO_DEFAULT = {"listener.web_config_file"}  # required with webhook.listen; the example shows a path


def documented() -> str:
    section = DOC.read_text().split("### Configuration", 1)[1]
    block = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert block, "docs/gang.md: no yaml block under Configuration"
    return block.group(1)


def test_the_documented_example_lists_every_key_with_its_default(tmp_path: Path) -> None:
    values = flatten(yaml.safe_load(documented()), SCHEMA)
    assert set(values) == set(SCHEMA)
    for key, spec in SCHEMA.items():
        if key not in NO_DEFAULT:
            default = list(spec.default) if isinstance(spec.default, tuple) else spec.default
            assert values[key] == default, f"{key}: documented {values[key]!r}, default {default!r}"
    path = tmp_path / "gang.yaml"
    path.write_text(documented())
    config = load(path)
    assert config.tiers.tiers().names == ("core", "spine", "leaf")
    assert config.webhook.listen == "0.0.0.0:9443"
    assert config.listener.web_config_file == "/etc/runtimekit-gang/web-config.yaml"


@pytest.mark.parametrize("text, message", [
    ("tiers: {keys: [a/b, a/b]}\n", "tiers.keys: each entry may appear once"),
    ("tiers: {keys: [zone, node]}\n", "the short names must differ"),
    ("namespaces: [ML]\n", "namespaces: entry 0 ('ML'): a namespace is a DNS label"),
    ("demand: {gpu_resource: gpu}\n", "demand.gpu_resource: must be DOMAIN/NAME"),
    ("demand: {nic_resource: nvidia.com/gpu}\n", "demand.nic_resource: must differ from demand.gpu_resource"),
    ("demand: {nic_device_classes: [gpu.runtimekit.io]}\n", "a DeviceClass cannot be both"),
    ("controller: {resync_seconds: 0}\n", "controller.resync_seconds: must be between 0.05 and 3600"),
    ("webhook: {listen: 'nowhere'}\n", "webhook.listen: must be HOST:PORT"),
    ("listener: {max_connections: 0}\n", "listener.max_connections: must be between 1 and 1000000"),
    ("listener: {web_config_file: null}\n", "listener.web_config_file: required while webhook.listen is set"),
])
def test_mistakes_name_the_key(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "gang.yaml"
    path.write_text("listener: {web_config_file: /w}\n" + text if "listener:" not in text else text)
    with pytest.raises(ConfigError, match=re.escape(message)):
        load(path)


@pytest.mark.parametrize("web_config, message", [
    (None, "listener.web_config_file: cannot read"),
    ("basic_auth_users: {}\n", "needs a tls_server_config (cert_file, key_file) while webhook.listen is set"),
    ("tls_server_config: {cert_file: a.pem, key_file: a.key, client_auth_type: RequireAndVerifyClientCert}\n",
     "tls_server_config.client_ca_file: required with client_auth_type RequireAndVerifyClientCert"),
    ("tls_server_config: {cert_file: missing.pem, key_file: missing.key}\n", "tls_server_config.cert_file: cannot read"),
])
def test_the_webhook_needs_a_usable_web_config_with_tls(tmp_path: Path, web_config: str | None, message: str) -> None:
    if web_config is not None:
        (tmp_path / "web.yml").write_text(web_config)
    (tmp_path / "gang.yaml").write_text(f"listener: {{web_config_file: {tmp_path / 'web.yml'}}}\n")
    config = load(tmp_path / "gang.yaml")  # reads no file but its own: checked before serving
    with pytest.raises(ConfigError, match=re.escape(message)) as refused:
        check_webhook_web_config(config)
    assert str(refused.value).startswith("listener.web_config_file: ")
    (tmp_path / "gang.yaml").write_text(f"webhook: {{listen: null}}\nlistener: {{web_config_file: {tmp_path / 'web.yml'}}}\n")
    check_webhook_web_config(load(tmp_path / "gang.yaml"))  # no webhook, no listener: nothing to check
