"""Configuration: defaults, file + flags, and errors that name the key and the rule."""

import pytest

from runtimekit import config
from runtimekit.config import ConfigError


def write(tmp_path, text):
    path = tmp_path / "runtimekit.yaml"
    path.write_text(text)
    return path


def test_defaults_hold_without_a_file():
    cfg = config.load()
    assert cfg.sampling.interval_seconds == 1.0
    assert cfg.listen_port == config.DEFAULT_PORT
    assert cfg.extra == {}


def test_file_values_and_flag_overrides(tmp_path):
    path = write(tmp_path, "listen: 127.0.0.1:9000\nsampling:\n  interval_seconds: 2.5\n")
    cfg = config.load(path, {"sampling.interval_seconds": 0.5, "listen": None})
    assert cfg.listen_host == "127.0.0.1" and cfg.listen_port == 9000
    assert cfg.sampling.interval_seconds == 0.5  # the flag wins


def test_the_simulator_keys_exist_only_when_its_component_is_registered(tmp_path):
    from runtimekit.sim.component import SIM_SCHEMA

    path = write(tmp_path, "sim:\n  scenario: dgx-a100\n  pods: 3\n")
    with pytest.raises(ConfigError, match="sim.scenario: unknown key"):
        config.load(path)
    assert not any(key.startswith("sim.") for key in config.SCHEMA)
    cfg = config.load(path, extra_schema=SIM_SCHEMA)
    assert cfg.extra["sim.scenario"] == "dgx-a100" and cfg.extra["sim.pods"] == 3
    with pytest.raises(ConfigError, match="sim.pods: must be between"):
        config.load(path, {"sim.pods": -1}, extra_schema=SIM_SCHEMA)


@pytest.mark.parametrize(
    "text, key, rule",
    [
        ("sampling:\n  intervall_seconds: 1\n", "sampling.intervall_seconds", "unknown key"),
        ("sampling:\n  interval_seconds: fast\n", "sampling.interval_seconds", "must be an integer or a number"),
        ("sampling:\n  interval_seconds: 0.01\n", "sampling.interval_seconds", "between 0.1 and 60"),
        ("sampling:\n  interval_seconds: true\n", "sampling.interval_seconds", "got a boolean"),
        ("log_level: loud\n", "log_level", "one of debug, info, warning, error"),
        ("listen: nowhere\n", "listen", "HOST:PORT"),
        ("listen: 127.0.0.1:99999\n", "listen", "0..65535"),
        ("exporter:\n  collectors:\n    nvlink: maybe\n", "exporter.collectors", "true or false"),
    ],
)
def test_bad_values_name_the_key_and_the_rule(tmp_path, text, key, rule):
    with pytest.raises(ConfigError) as error:
        config.load(write(tmp_path, text))
    assert str(error.value).startswith(key)
    assert rule in str(error.value)


def test_unknown_key_lists_the_allowed_ones(tmp_path):
    with pytest.raises(ConfigError, match="allowed keys are .*sampling.interval_seconds"):
        config.load(write(tmp_path, "colour: blue\n"))


def test_unreadable_and_malformed_files(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        config.load(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match="not valid YAML"):
        config.load(write(tmp_path, "a: [1, 2\n"))
    with pytest.raises(ConfigError, match="mapping at the top level"):
        config.load(write(tmp_path, "- 1\n- 2\n"))


def test_flag_values_are_validated_too():
    with pytest.raises(ConfigError, match="sampling.interval_seconds: must be between"):
        config.load(None, {"sampling.interval_seconds": 1000.0})


def test_ipv6_listen_address():
    assert config.parse_listen("[::1]:9445") == ("::1", 9445)


@pytest.mark.parametrize(
    "listen, rule",
    [
        ("nowhere", "listen: must be HOST:PORT, got 'nowhere'"),
        ("127.0.0.1:99999", "listen: port must be a number 0..65535 (it is '99999'), got '127.0.0.1:99999'"),
        ("a b:9445", "listen: host must be an IP address or a hostname (it is 'a b'), got 'a b:9445'"),
    ],
)
def test_a_bad_listen_address_is_named_once_with_its_rule(tmp_path, listen, rule):
    with pytest.raises(ConfigError) as error:
        config.load(write(tmp_path, f"listen: {listen}\n"))
    assert str(error.value) == rule


def test_the_example_file_names_every_key_with_its_default():
    from pathlib import Path

    import yaml

    example = Path(__file__).parents[2] / "deploy" / "runtimekit.example.yaml"
    cfg = config.load(example)
    flat = config.flatten(yaml.safe_load(example.read_text()), config.SCHEMA)
    assert set(flat) == set(config.SCHEMA), "the example and the schema list different keys"
    for key, spec in config.SCHEMA.items():
        assert config.value_at(cfg, key) == spec.default, key


def test_a_backoff_cap_below_its_start_is_refused(tmp_path):
    path = write(tmp_path, "components:\n  initial_backoff_seconds: 5\n  max_backoff_seconds: 1\n")
    with pytest.raises(ConfigError, match="components.max_backoff_seconds: must be at least"):
        config.load(path)
