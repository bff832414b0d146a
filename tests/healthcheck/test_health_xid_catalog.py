"""xid_catalog.yaml and its loader: the policy decisions, and malformed input."""

from __future__ import annotations

import copy
import re

import pytest
import yaml

from runtimekit.healthcheck.types import (
    CLEARS_ON_REBOOT,
    CLEARS_ON_RESET,
    CRITICAL,
    DRAIN_AND_RESET_GPU,
    INFO,
    REBOOT_NODE,
    RESTART_APPLICATION,
    WARNING,
)
from runtimekit.healthcheck.xid_catalog import DEFAULT_PATH, XidCatalogError, default_catalog, load_catalog, parse_catalog

REQUIRED = (13, 31, 32, 43, 45, 46, 48, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 109, 119, 120, 136, 140, 143,
            144, 145, 146, 147, 148, 149, 150, 154, 155, 156, 158)
APPLICATION = (13, 31, 32, 43, 45, 68, 69)  # gpu-faults.md §6 "App-level XIDs"
RESET_GPU = (46, 48, 62, 64, 95, 109, 119, 120, 136, 140, 143, 155, 156, 158)  # catalog immediate RESET_GPU


def test_required_codes_are_present() -> None:
    catalog = default_catalog()
    missing = [code for code in REQUIRED if code not in catalog.entries]
    assert not missing


@pytest.mark.parametrize("code", APPLICATION)
def test_application_xids_never_change_health_on_their_own(code) -> None:
    entry = default_catalog().get(code)
    assert entry.xid_class == "application"
    assert entry.severity == INFO
    assert entry.action in ("none", RESTART_APPLICATION)


@pytest.mark.parametrize("code", RESET_GPU)
def test_reset_gpu_xids_drain_and_reset(code) -> None:
    entry = default_catalog().get(code)
    assert (entry.severity, entry.action, entry.clears) == (CRITICAL, DRAIN_AND_RESET_GPU, CLEARS_ON_RESET)


def test_catalog_wins_where_the_device_plugin_disagrees() -> None:
    catalog = default_catalog()
    assert catalog.get(94).severity == WARNING and catalog.get(94).action == RESTART_APPLICATION  # DP: unhealthy
    assert catalog.get(109).severity == CRITICAL  # DP: ignored
    assert catalog.get(32).xid_class == "application"  # DP: unhealthy
    assert catalog.get(69).xid_class == "application"  # DP: unhealthy
    assert catalog.get(61).xid_class == "firmware" and catalog.get(62).xid_class == "firmware"  # DCGM: thermal


def test_xid_79_is_a_node_reboot_owned_by_lost_card() -> None:
    entry = default_catalog().get(79)
    assert (entry.severity, entry.action, entry.clears, entry.detector, entry.fault) == (
        CRITICAL, REBOOT_NODE, CLEARS_ON_REBOOT, "lost_card", "gpu_lost")


def test_owners_and_special_entries() -> None:
    catalog = default_catalog()
    assert {c for c, e in catalog.entries.items() if e.detector == "ecc"} == {48, 63, 64, 94, 95, 140}
    assert catalog.get(154).follows_companions and catalog.get(154).severity == INFO
    assert catalog.get(45).follows_companions and not catalog.get(45).repeats_escalate
    assert catalog.get(13).repeats_escalate and not catalog.get(94).repeats_escalate


def test_unknown_codes_get_the_conservative_default() -> None:
    entry = default_catalog().get(777)
    assert not entry.known
    assert (entry.code, entry.fault, entry.severity, entry.action, entry.detector) == (
        777, "xid_777", WARNING, RESTART_APPLICATION, "driver")
    assert entry.repeats_escalate


def test_strongest() -> None:
    catalog = default_catalog()
    assert catalog.strongest([13, 119, 94]).code == 119
    assert catalog.strongest([13, 79]).code == 79
    assert catalog.strongest([]) is None


def test_every_entry_is_commented() -> None:
    """Policy as commented data: a comment block directly above each code."""
    lines = DEFAULT_PATH.read_text().splitlines()
    for number, line in enumerate(lines):
        match = re.match(r"^  (\d+):\s*$", line)
        if match:
            assert lines[number - 1].strip().startswith("#"), f"XID {match.group(1)} has no comment"


def _base() -> dict:
    return yaml.safe_load(DEFAULT_PATH.read_text())


def _with(path: tuple, value) -> dict:
    data = copy.deepcopy(_base())
    target = data
    for key in path[:-1]:
        target = target[key]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return data


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ("just text", "must be a mapping"),
        ({"default": _base()["default"], "xids": {13: _base()["xids"][13]}, "extra": 1}, "unknown top-level key 'extra'"),
        (_with(("default",), KeyError), "missing 'default'"),
        (_with(("xids",), {}), "'xids' must be a non-empty mapping"),
        (_with(("xids", "13"), _base()["xids"][13]), "XID '13': the code must be an integer"),
        (_with(("xids", 0), _base()["xids"][13]), "XID 0: the code must be an integer"),
        (_with(("xids", True), _base()["xids"][13]), "XID True"),
        (_with(("xids", 48), "critical"), "XID 48: must be a mapping"),
        (_with(("xids", 48, "sevrity"), "critical"), "XID 48: unknown field 'sevrity'"),
        (_with(("xids", 48, "action"), KeyError), "XID 48: missing field 'action'"),
        (_with(("xids", 48, "severity"), "fatal"), "XID 48: severity 'fatal' is not one of"),
        (_with(("xids", 48, "action"), "reboot"), "XID 48: action 'reboot' is not one of"),
        (_with(("xids", 48, "clears"), "never"), "XID 48: clears 'never' is not one of"),
        (_with(("xids", 48, "class"), "hardware"), "XID 48: class 'hardware' is not one of"),
        (_with(("xids", 48, "detector"), "nvlink"), "XID 48: detector 'nvlink' is not one of"),
        (_with(("xids", 48, "fault"), "ECC Error"), "XID 48: fault 'ECC Error' must be a snake_case name"),
        (_with(("xids", 48, "meaning"), " "), "XID 48: meaning must be a non-empty string"),
        (_with(("xids", 13, "repeats_escalate"), "yes"), "XID 13: repeats_escalate must be true or false"),
        (_with(("xids", 13, "clears"), "gpu_reset"), "XID 13: an info entry cannot be sticky"),
        (_with(("xids", 119, "action"), "none"), "XID 119: a critical entry needs a GPU or node action"),
        (_with(("xids", 13, "severity"), "critical"), "XID 13: a critical entry needs"),
        (_with(("xids", 31, "severity"), "critical"), "XID 31"),
        (_with(("default", "detector"), "ecc"), "default: detector must be 'driver'"),
        (_with(("default", "severity"), "bad"), "default: severity 'bad'"),
    ],
)
def test_malformed_catalog_names_code_and_field(data, message) -> None:
    with pytest.raises(XidCatalogError, match=re.escape(message)):
        parse_catalog(data)


def test_application_entry_cannot_be_critical() -> None:
    data = _with(("xids", 13, "severity"), "critical")
    data["xids"][13]["action"] = "drain_and_reset_gpu"
    data["xids"][13]["clears"] = "gpu_reset"
    with pytest.raises(XidCatalogError, match="XID 13: an application XID never changes health"):
        parse_catalog(data)


def test_load_catalog_errors_name_the_file(tmp_path) -> None:
    with pytest.raises(XidCatalogError, match="cannot read"):
        load_catalog(tmp_path / "absent.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("xids: {13: [\n")
    with pytest.raises(XidCatalogError, match="not valid YAML"):
        load_catalog(bad)
    wrong = tmp_path / "wrong.yaml"
    data = _with(("xids", 95, "action"), "explode")
    wrong.write_text(yaml.safe_dump(data))
    with pytest.raises(XidCatalogError, match=r"wrong\.yaml: XID 95: action 'explode'"):
        load_catalog(wrong)


def test_load_catalog_round_trips_the_packaged_file(tmp_path) -> None:
    path = tmp_path / "copy.yaml"
    path.write_text(DEFAULT_PATH.read_text())
    assert load_catalog(path) == default_catalog()
