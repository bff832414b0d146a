"""thresholds.yaml and its loader: the packaged defaults, overrides, and malformed input."""

from __future__ import annotations

import re

import pytest
import yaml

from runtimekit.healthcheck.detectors import DETECTORS
from runtimekit.healthcheck.thresholds import (
    DEFAULT_PATH,
    SCHEMA,
    SECTIONS,
    ThresholdError,
    Thresholds,
    defaults,
    for_detector,
    load_thresholds,
    parse_thresholds,
    typed,
)
from runtimekit.schema import REQUIRED


def test_packaged_thresholds_are_complete_and_valid() -> None:
    data = yaml.safe_load(DEFAULT_PATH.read_text())
    values = parse_thresholds(data, complete=True)
    assert set(values) == set(SCHEMA)
    for section, keys in SCHEMA.items():
        assert set(values[section]) == set(keys)
    assert values["driver"]["app_xid_bursts"] == 5
    assert values["driver"]["app_xid_window_seconds"] == 86400
    assert values["nvlink"]["error_per_second_critical"] == 100.0
    assert values["thermal_power"]["power_brake_seconds"] == 3


def test_the_yaml_and_the_dataclasses_list_the_same_keys() -> None:
    """The dataclasses declare the keys (type, rule, meaning), the YAML their values (and reasons):
    neither lists a key the other lacks, and the dataclasses carry no second copy of a number."""
    data = yaml.safe_load(DEFAULT_PATH.read_text())
    assert list(data) == list(SECTIONS)
    for section, keys in SCHEMA.items():
        assert set(data[section] or {}) == set(keys), section
        for name, key in keys.items():
            assert key.default is REQUIRED, f"{section}.{name}: the value belongs in thresholds.yaml"
            assert key.doc, f"{section}.{name} has no doc"
    values = typed(load_thresholds())
    assert isinstance(values, Thresholds)
    assert values.ecc.retired_pages_limit == 60 and values.compute_mode.expected == "default"


def test_every_detector_has_a_section() -> None:
    assert {d.name for d in DETECTORS} <= set(SCHEMA)


def test_every_key_is_commented() -> None:
    """Policy as commented data: each key has a comment on it or in the lines just above."""
    lines = DEFAULT_PATH.read_text().splitlines()
    for number, line in enumerate(lines):
        match = re.match(r"^  ([a-z_]+):", line)
        if match:
            above = lines[number - 1].strip()
            assert above.startswith("#") or "#" in line, f"{match.group(1)} has no comment"


def test_override_file_changes_only_its_keys(tmp_path) -> None:
    path = tmp_path / "thresholds.yaml"
    path.write_text("ecc:\n  retired_pages_limit: 63  # DCGM's number\ncompute_mode:\n  expected: null\n")
    values = load_thresholds(path)
    assert values["ecc"]["retired_pages_limit"] == 63
    assert values["ecc"]["remapped_rows_uncorrectable_limit"] == 512
    assert values["compute_mode"]["expected"] is None
    assert values["driver"] == defaults()["driver"]


def test_load_without_path_is_the_defaults_and_a_copy() -> None:
    values = load_thresholds()
    values["ecc"]["retired_pages_limit"] = 1
    assert defaults()["ecc"]["retired_pages_limit"] == 60


def test_for_detector_merges_over_defaults() -> None:
    assert for_detector("pcie", {"degraded_seconds": 5})["degraded_seconds"] == 5
    assert for_detector("pcie", {})["load_utilization"] == 0.5
    assert for_detector("pcie", None) == defaults()["pcie"]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([1, 2], "must be a mapping"),
        ({"eccc": {}}, "eccc: unknown section"),
        ({"ecc": {"retired_pages_limt": 60}}, "ecc.retired_pages_limt: unknown key"),
        ({"lost_card": {"anything": 1}}, "lost_card.anything: unknown key"),
        ({"ecc": [1]}, "ecc: must be a mapping"),
        ({"ecc": {"retired_pages_limit": "60"}}, "ecc.retired_pages_limit: must be an integer"),
        ({"ecc": {"retired_pages_limit": True}}, "ecc.retired_pages_limit: must be an integer"),
        ({"ecc": {"retired_pages_limit": 65}}, "ecc.retired_pages_limit: must be between 1 and 64"),
        ({"driver": {"app_xid_bursts": 0}}, "driver.app_xid_bursts: must be >= 1"),
        ({"driver": {"app_xid_burst_seconds": 0}}, "driver.app_xid_burst_seconds: must be > 0"),
        ({"driver": {"app_xid_burst_seconds": 90000}}, "app_xid_burst_seconds must be shorter"),
        ({"memory_leak": {"ghost_utilization": 1.5}}, "memory_leak.ghost_utilization: must be > 0 and <= 1, got 1.5"),
        ({"memory_leak": {"ghost_seconds": -1}}, "memory_leak.ghost_seconds: must be >= 0, got -1"),
        ({"pcie": {"load_utilization": 2}}, "pcie.load_utilization: must be between 0 and 1"),
        ({"ecc": {"contained_xid_window_seconds": float("inf")}}, "must be a finite number"),
        ({"nvlink": {"recovery_increase": 1.5}}, "nvlink.recovery_increase: must be an integer"),
        ({"memory_leak": {"leak_bytes_per_second": float("nan")}}, "must be a finite number"),
        ({"memory_leak": {"require_visible_processes": "yes"}}, "must be true or false"),
        ({"nvlink": {"error_per_second_warning": 200.0}}, "error_per_second_warning must not exceed"),
        ({"nvlink": {"expected_active_links": -1}}, "nvlink.expected_active_links"),
        ({"compute_mode": {"expected": "shared"}}, "compute_mode.expected: must be one of"),
        ({"thermal_power": {"thermal_critical_seconds": 1}}, "thermal_critical_seconds must be >="),
    ],
)
def test_malformed_thresholds_name_the_key(data, message) -> None:
    with pytest.raises(ThresholdError, match=re.escape(message)):
        parse_thresholds(data)


def test_complete_mode_reports_a_missing_key() -> None:
    data = yaml.safe_load(DEFAULT_PATH.read_text())
    del data["pcie"]["judge_in_p0"]
    with pytest.raises(ThresholdError, match=r"pcie\.judge_in_p0: missing"):
        parse_thresholds(data, complete=True)


def test_empty_override_file_is_the_defaults(tmp_path) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text("# nothing changed\n")
    assert load_thresholds(path) == defaults()


def test_unreadable_and_invalid_files(tmp_path) -> None:
    with pytest.raises(ThresholdError, match="cannot read"):
        load_thresholds(tmp_path / "absent.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("ecc: [unclosed\n")
    with pytest.raises(ThresholdError, match="not valid YAML"):
        load_thresholds(bad)
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text("pcie:\n  degraded_sample: 2\n")
    with pytest.raises(ThresholdError, match=r"wrong\.yaml: pcie\.degraded_sample: unknown key"):
        load_thresholds(wrong)


def test_a_number_written_with_an_exponent_is_that_number(tmp_path) -> None:
    """YAML 1.1 reads ``1e6`` (no dot) as a string; for a key that takes a number it is the number meant."""
    path = tmp_path / "thresholds.yaml"
    path.write_text("memory_leak:\n  leak_bytes_per_second: 2e6\n")
    assert load_thresholds(path)["memory_leak"]["leak_bytes_per_second"] == 2_000_000.0
