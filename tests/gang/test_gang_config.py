"""The configuration of ``runtimekit gang serve`` (kube/gang/config.py) against docs/gang.md: the
example there lists every key with its default and loads; mistakes are refused naming the key."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from runtimekit.kube.gang.config import SCHEMA, load
from runtimekit.schema import ConfigError, flatten

DOC = Path(__file__).resolve().parents[2] / "docs" / "gang.md"
NO_DEFAULT = {"webhook.cert_file", "webhook.key_file"}  # required with webhook.listen; the example shows paths


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
    assert config.webhook.cert_file == "/etc/runtimekit/webhook/tls.crt"


@pytest.mark.parametrize("text, message", [
    ("tiers: {keys: [a/b, a/b]}\n", "tiers.keys: each entry may appear once"),
    ("tiers: {keys: [zone, node]}\n", "the short names must differ"),
    ("namespaces: [ML]\n", "namespaces: entry 0 ('ML'): a namespace is a DNS label"),
    ("demand: {gpu_resource: gpu}\n", "demand.gpu_resource: must be DOMAIN/NAME"),
    ("demand: {nic_resource: nvidia.com/gpu}\n", "demand.nic_resource: must differ from demand.gpu_resource"),
    ("demand: {nic_device_classes: [gpu.runtimekit.io]}\n", "a DeviceClass cannot be both"),
    ("controller: {resync_seconds: 0}\n", "controller.resync_seconds: must be between 0.05 and 3600"),
    ("webhook: {listen: 'nowhere'}\n", "webhook.listen: must be HOST:PORT"),
])
def test_mistakes_name_the_key(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "gang.yaml"
    path.write_text("webhook: {cert_file: /c, key_file: /k}\n" + text if "webhook:" not in text else text)
    with pytest.raises(ConfigError, match=re.escape(message)):
        load(path)
