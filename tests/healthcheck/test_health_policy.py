"""policy.yaml and its loader: the policy decisions (XIDs and detector faults), and malformed input."""

from __future__ import annotations

import copy
import re

import pytest
import yaml

from runtimekit.healthcheck.policy import DEFAULT_PATH, PolicyError, default_policy, load_policy, parse_policy
from runtimekit.healthcheck.types import (
    CLEARS_ON_REBOOT,
    CLEARS_ON_RESET,
    CLEARS_WHEN_CLEAN,
    CRITICAL,
    DRAIN_AND_RESET_GPU,
    INFO,
    REBOOT_NODE,
    REPLACE_NODE,
    RESTART_APPLICATION,
    WARNING,
)

REQUIRED = (13, 31, 32, 43, 45, 46, 48, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 109, 119, 120, 136, 140, 143,
            144, 145, 146, 147, 148, 149, 150, 154, 155, 156, 158)
APPLICATION = (13, 31, 32, 43, 45, 68, 69)  # gpu-faults.md §6 "App-level XIDs"
RESET_GPU = (46, 48, 62, 64, 95, 109, 119, 120, 136, 140, 143, 155, 156, 158)  # catalog immediate RESET_GPU


def test_required_codes_are_present() -> None:
    assert not [code for code in REQUIRED if code not in default_policy().xids]


@pytest.mark.parametrize("code", APPLICATION)
def test_application_xids_never_change_health_on_their_own(code) -> None:
    entry = default_policy().xid(code)
    assert entry.policy.fault_class == "application" and entry.policy.schedulable
    assert entry.severity == INFO
    assert entry.action in ("none", RESTART_APPLICATION)


@pytest.mark.parametrize("code", RESET_GPU)
def test_reset_gpu_xids_drain_and_reset(code) -> None:
    entry = default_policy().xid(code)
    assert (entry.severity, entry.action, entry.clears, entry.policy.schedulable) == (
        CRITICAL, DRAIN_AND_RESET_GPU, CLEARS_ON_RESET, False)


@pytest.mark.parametrize(
    ("fault", "severity", "action", "schedulable", "clears"),
    [
        ("ecc_contained", WARNING, DRAIN_AND_RESET_GPU, True, CLEARS_ON_RESET),  # XID 94: reset when idle
        ("row_remap_pending", WARNING, DRAIN_AND_RESET_GPU, True, CLEARS_ON_RESET),  # follows 94: same warning
        ("ecc_uncorrectable", CRITICAL, DRAIN_AND_RESET_GPU, False, CLEARS_ON_RESET),
        ("ecc_uncontained", CRITICAL, DRAIN_AND_RESET_GPU, False, CLEARS_ON_RESET),
        ("row_remap_failure", CRITICAL, REPLACE_NODE, False, CLEARS_ON_REBOOT),
        ("gpu_lost", CRITICAL, REBOOT_NODE, False, CLEARS_ON_REBOOT),
        ("power_brake", CRITICAL, "none", False, CLEARS_WHEN_CLEAN),
        ("thermal_slowdown", WARNING, "none", True, CLEARS_WHEN_CLEAN),
        ("nvlink_errors", WARNING, "none", True, CLEARS_WHEN_CLEAN),
        ("nvlink_recovery_errors", CRITICAL, DRAIN_AND_RESET_GPU, False, CLEARS_ON_RESET),
        ("health_check_failed", WARNING, "none", True, CLEARS_WHEN_CLEAN),
    ],
)
def test_detector_fault_policy(fault, severity, action, schedulable, clears) -> None:
    p = default_policy().fault(fault)
    assert (p.severity, p.action, p.schedulable, p.clears) == (severity, action, schedulable, clears)


def test_contained_ecc_never_asks_for_a_node() -> None:
    policy = default_policy()
    for fault in ("ecc_contained", "row_remap_pending"):
        assert policy.fault(fault).action not in (REBOOT_NODE, REPLACE_NODE)
    assert policy.xid(94).fault == "ecc_contained"
    assert {code: policy.xid(code).fault for code in (48, 95, 140)} == {
        48: "ecc_uncorrectable", 95: "ecc_uncontained", 140: "ecc_uncontained"}
    assert all(policy.xid(code).severity == CRITICAL for code in (48, 95, 140))


def test_power_brake_and_thermal_have_their_own_classes() -> None:
    policy = default_policy()
    assert policy.fault("power_brake").fault_class == "power"
    assert {policy.fault(f).fault_class for f in ("thermal_slowdown", "thermal_slowdown_sustained")} == {"thermal"}


def test_catalog_wins_where_the_device_plugin_disagrees() -> None:
    policy = default_policy()
    assert policy.xid(94).severity == WARNING and policy.xid(94).policy.schedulable  # DP: unhealthy
    assert policy.xid(109).severity == CRITICAL  # DP: ignored
    assert policy.xid(32).policy.fault_class == "application"  # DP: unhealthy
    assert policy.xid(69).policy.fault_class == "application"  # DP: unhealthy
    assert {policy.xid(c).policy.fault_class for c in (61, 62)} == {"firmware"}  # DCGM: thermal


def test_xid_79_is_a_node_reboot_owned_by_lost_card() -> None:
    entry = default_policy().xid(79)
    assert (entry.severity, entry.action, entry.clears, entry.detector, entry.fault) == (
        CRITICAL, REBOOT_NODE, CLEARS_ON_REBOOT, "lost_card", "gpu_lost")


def test_owners_and_special_entries() -> None:
    policy = default_policy()
    assert {c for c, e in policy.xids.items() if e.detector == "ecc"} == {48, 63, 94, 95, 140}
    assert policy.xid(154).follows_companions and policy.xid(154).severity == INFO
    assert policy.xid(45).follows_companions and not policy.xid(45).repeats_escalate
    assert policy.xid(13).repeats_escalate and not policy.xid(94).repeats_escalate


def test_unknown_codes_get_the_conservative_default() -> None:
    entry = default_policy().xid(777)
    assert not entry.known
    assert (entry.code, entry.fault, entry.severity, entry.action, entry.detector) == (
        777, "xid_777", WARNING, RESTART_APPLICATION, "driver")
    assert entry.repeats_escalate


def test_strongest() -> None:
    policy = default_policy()
    assert policy.strongest([13, 119, 94]).code == 119
    assert policy.strongest([13, 79]).code == 79
    assert policy.strongest([]) is None


def test_finding_carries_the_whole_policy() -> None:
    f = default_policy().finding(2, "GPU-2", "ecc_contained", "XID 94")
    assert (f.severity, f.action, f.clears, f.fault_class, f.schedulable) == (
        WARNING, DRAIN_AND_RESET_GPU, CLEARS_ON_RESET, "memory", True)
    with pytest.raises(KeyError, match="not in the fault policy"):
        default_policy().finding(2, "GPU-2", "no_such_fault", "")


def test_every_entry_is_commented() -> None:
    """Policy as commented data: a comment line directly above each fault and each code."""
    lines = DEFAULT_PATH.read_text().splitlines()
    entries, section = 0, ""
    for number, line in enumerate(lines):
        top = re.match(r"^(\w+):", line)
        if top:
            section = top.group(1)
            assert lines[number - 1].strip().startswith("#"), f"{section} has no comment"
        match = re.match(r"^  (\w+):", line)
        if match and section in ("faults", "xids"):
            entries += 1
            assert lines[number - 1].strip().startswith("#"), f"{section}.{match.group(1)} has no comment"
    assert entries == len(default_policy().faults) + len(default_policy().xids)


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
        ({**_base(), "extra": 1}, "extra: unknown top-level key"),
        (_with(("default",), KeyError), "default: missing"),
        (_with(("faults",), {}), "faults: must be a non-empty mapping"),
        (_with(("faults", "xid_repeated"), KeyError), "faults.xid_repeated: missing"),
        (_with(("faults", "ecc_contained", "severity"), "fatal"),
         "faults.ecc_contained.severity: must be one of info, warning, critical, got 'fatal'"),
        (_with(("faults", "ecc_contained", "schedulable"), "yes"), "faults.ecc_contained.schedulable: must be"),
        (_with(("faults", "ecc_contained", "sevrity"), "warning"), "faults.ecc_contained.sevrity: unknown key"),
        (_with(("faults", "ecc_contained", "action"), KeyError), "faults.ecc_contained.action: missing"),
        (_with(("faults", "ecc_contained", "detector"), "nvml"), "faults.ecc_contained.detector: must be one of"),
        (_with(("faults", "ecc_contained", "class"), "silicon"), "faults.ecc_contained.class: must be one of"),
        (_with(("faults", "power_brake", "schedulable"), True), "faults.power_brake.schedulable: a critical fault"),
        (_with(("faults", "Bad Name"), _base()["faults"]["gpu_lost"]), "faults.Bad Name: the fault name"),
        (_with(("faults", "ecc_contained"), "warning"), "faults.ecc_contained: must be a mapping"),
        (_with(("xids",), {}), "xids: must be a non-empty mapping"),
        (_with(("xids", "13"), _base()["xids"][13]), "xids.'13': the code must be an integer"),
        (_with(("xids", 0), _base()["xids"][13]), "xids.0: the code must be an integer"),
        (_with(("xids", True), _base()["xids"][13]), "xids.True"),
        (_with(("xids", 119, "sevrity"), "critical"), "xids.119.sevrity: unknown key"),
        (_with(("xids", 119, "action"), KeyError), "xids.119.action: missing"),
        (_with(("xids", 119, "severity"), "fatal"), "xids.119.severity: must be one of"),
        (_with(("xids", 119, "action"), "reboot"), "xids.119.action: must be one of"),
        (_with(("xids", 119, "clears"), "never"), "xids.119.clears: must be one of"),
        (_with(("xids", 119, "meaning"), " "), "xids.119.meaning: must not be empty"),
        (_with(("xids", 119, "meaning"), KeyError), "xids.119.meaning: missing"),
        (_with(("xids", 48, "fault"), "ECC Error"), "xids.48.fault: must be a snake_case name"),
        (_with(("xids", 48, "fault"), "no_such"), "xids.48.fault: 'no_such' is not in faults"),
        (_with(("xids", 48, "fault"), "power_brake"), "xids.48.fault: 'power_brake' belongs to the thermal_power"),
        (_with(("xids", 48, "severity"), "warning"), "xids.48.severity: an XID that names a fault"),
        (_with(("xids", 13, "repeats_escalate"), "yes"), "xids.13.repeats_escalate: must be"),
        (_with(("xids", 13, "clears"), "gpu_reset"), "xids.13: an info fault changes nothing"),
        (_with(("xids", 119, "action"), "none"), "xids.119.action: a critical XID needs a GPU or node action"),
        (_with(("default", "fault"), "gpu_lost"), "default"),
        (_with(("default", "severity"), "bad"), "default.severity: must be one of"),
    ],
)
def test_malformed_policy_names_entry_and_field(data, message) -> None:
    with pytest.raises(PolicyError, match=re.escape(message)):
        parse_policy(data)


def test_application_entry_cannot_be_critical() -> None:
    data = _with(("xids", 13, "severity"), "critical")
    data["xids"][13].update(action="drain_and_reset_gpu", clears="gpu_reset", schedulable=False)
    with pytest.raises(PolicyError, match="xids.13.severity: an application XID never changes health"):
        parse_policy(data)


def test_load_policy_errors_name_the_file(tmp_path) -> None:
    with pytest.raises(PolicyError, match="cannot read"):
        load_policy(tmp_path / "absent.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("xids: {13: [\n")
    with pytest.raises(PolicyError, match="not valid YAML"):
        load_policy(bad)
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text(yaml.safe_dump(_with(("xids", 119, "action"), "explode")))
    with pytest.raises(PolicyError, match=r"wrong\.yaml: xids\.119\.action: must be one of"):
        load_policy(wrong)


def test_load_policy_round_trips_the_packaged_file(tmp_path) -> None:
    path = tmp_path / "copy.yaml"
    path.write_text(DEFAULT_PATH.read_text())
    assert load_policy(path) == default_policy()
