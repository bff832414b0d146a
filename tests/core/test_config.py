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


def test_shown_never_raises_and_stays_short():
    from runtimekit.schema import Key, between, check_value, shown

    huge = int("f" * 5000, 16)  # YAML's hex ints pass Python's int/str conversion limit
    assert shown(huge) == shown(-huge) == "an integer of more than 4300 digits"
    assert shown([1, huge]) == "a list that cannot be shown"
    assert shown("x" * 10_000) == "'" + "x" * 76 + "..." and shown("abc") == "'abc'"
    with pytest.raises(ConfigError, match="^max_body_bytes: must be between 1 and 2, got an integer of more than 4300 digits$"):
        check_value("max_body_bytes", huge, Key(int, 1, "doc", between(1, 2)))
    with pytest.raises(ConfigError, match="^x: must be an integer, got list a list that cannot be shown$"):
        check_value("x", [huge], Key(int, 1, "doc"))


@pytest.mark.parametrize("section", ["breaker", "kubernetes"])
@pytest.mark.parametrize("value, got", [("[]", "list []"), ("5", "int 5"), ("", "null")])
def test_a_section_that_is_not_a_mapping_says_so(tmp_path, section, value, got):
    from runtimekit.kube.remediation import config as remediation

    with pytest.raises(ConfigError) as error:
        remediation.load(write(tmp_path, f"{section}: {value}\n"))
    assert str(error.value) == f"{section}: must be a mapping (a section of keys {section}.*), got {got}"


def test_an_agent_section_that_is_a_list_says_so(tmp_path):
    with pytest.raises(ConfigError, match=r"^sampling: must be a mapping \(a section of keys sampling\.\*\), got list \[1\]$"):
        config.load(write(tmp_path, "sampling: [1]\n"))


def test_a_number_yaml_1_1_reads_as_a_string_is_the_number_for_a_number_key(tmp_path):
    for written, meant in [("5e-1", 0.5), ("1e0", 1.0), ("2.5e0", 2.5), ("+.3E+1", 3.0)]:
        cfg = config.load(write(tmp_path, f"sampling:\n  interval_seconds: {written}\n"))
        assert cfg.sampling.interval_seconds == meant, written
    with pytest.raises(ConfigError, match=r"^sampling.interval_seconds: must be between 0.1 and 60, got 1e\+300$"):
        config.load(write(tmp_path, "sampling:\n  interval_seconds: 1e300\n"))
    with pytest.raises(ConfigError, match="^log_level: must be one of debug, info, warning, error, got '1e3'$"):
        config.load(write(tmp_path, "log_level: 1e3\n"))  # a string key keeps its string
    with pytest.raises(ConfigError, match="sampling.interval_seconds: must be an integer or a number, got str '1e3x'"):
        config.load(write(tmp_path, "sampling:\n  interval_seconds: 1e3x\n"))
    with pytest.raises(ConfigError, match="got str '1e0'"):  # validate itself never converts: a JSON string stays one
        config.validate(config.SCHEMA, "sampling.interval_seconds", "1e0")
