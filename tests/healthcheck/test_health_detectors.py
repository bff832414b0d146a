"""The detectors, table-driven over hand-built snapshots: positive, negative, flapping, recovery,
Unavailable readings and counter resets for each; the registry and ``run_detectors``."""

from __future__ import annotations

import copy
import dataclasses
import json

import pytest
from health_factories import (
    ERR,
    LINKS,
    NA,
    STEP,
    T0,
    GiB,
    MiB,
    faults,
    links,
    make_gpu,
    make_input,
    make_lost_gpu,
    make_snapshot,
    marked,
    nvml_down,
    one,
    raised,
    run_sequence,
    uuid_for,
    with_,
    xid,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtimekit.gpu.types import GpuProcess, Unavailable
from runtimekit.healthcheck.detectors import DETECTORS, run_detectors
from runtimekit.healthcheck.detectors.compute_mode import compute_mode
from runtimekit.healthcheck.detectors.driver import driver
from runtimekit.healthcheck.detectors.ecc import ecc
from runtimekit.healthcheck.detectors.lost_card import lost_card
from runtimekit.healthcheck.detectors.memory_leak import memory_leak
from runtimekit.healthcheck.detectors.nvlink import nvlink
from runtimekit.healthcheck.detectors.pcie import pcie
from runtimekit.healthcheck.detectors.thermal_power import thermal_power
from runtimekit.healthcheck.types import (
    ACTIONS,
    CLEARS_ON_REBOOT,
    CLEARS_ON_RESET,
    CLEARS_WHEN_CLEAN,
    CRITICAL,
    DRAIN_AND_RESET_GPU,
    INFO,
    NONE,
    REBOOT_NODE,
    REPLACE_NODE,
    RESTART_APPLICATION,
    SEEN_AGAIN,
    SEVERITIES,
    WARNING,
)

HOUR = 3600.0


def node(*gpus, at=None):
    return make_snapshot(*gpus, at=at)


def series(make, count, start=T0, step=STEP):
    """``count`` snapshots; ``make(i, at)`` returns the GPUs of sample i."""
    return [node(*make(i, start + i * step), at=start + i * step) for i in range(count)]


def single(detector, snapshot, previous=None, **kw):
    return detector(None, make_input(snapshot, previous, **kw))[1]


# --- the registry ---------------------------------------------------------------------------

def test_registry_names_are_unique_and_complete() -> None:
    names = [d.name for d in DETECTORS]
    assert names == ["lost_card", "driver", "ecc", "nvlink", "memory_leak", "thermal_power", "pcie", "compute_mode", "inforom",
                     "slices"]
    assert len(set(names)) == len(names)


def test_healthy_node_has_no_findings_from_any_detector() -> None:
    states: dict = {}
    for snapshot in series(lambda i, at: (make_gpu(0, at=at), make_gpu(1, at=at)), 12):
        states, found = run_detectors(states, make_input(snapshot, None))
        assert raised(found) == []


def test_run_detectors_passes_each_its_own_state_and_section() -> None:
    config = {"thermal_power": {"power_brake_seconds": 0}, "compute_mode": {"expected": "exclusive_process"}}
    states: dict = {}
    for at in (T0, T0 + 1):
        braked = node(with_(make_gpu(0, at=at), "clocks", event_reasons=0x8 | 0x80))
        states, found = run_detectors(states, make_input(braked, config=config))
    assert set(states) == {d.name for d in DETECTORS}
    assert faults(found) == {(0, "power_brake"), (0, "compute_mode_drift")}
    assert states["thermal_power"]["power"][uuid_for(0)] == [T0, 2]


def test_states_survive_json_and_are_not_mutated() -> None:
    snapshots = series(lambda i, at: (with_(make_gpu(0, at=at, processes=()), "clocks", event_reasons=0x40),), 4)
    states: dict = {}
    previous = None
    for snapshot in snapshots:
        data = make_input(snapshot, previous, xids=[xid(13, at=snapshot.sampled_at)])
        before = copy.deepcopy(states)
        new_states, found = run_detectors(states, data)
        assert states == before  # the old state was not touched
        # The same input from a JSON round trip of the state gives the same answer.
        assert run_detectors(json.loads(json.dumps(states)), data) == (json.loads(json.dumps(new_states)), found)
        states, previous = new_states, snapshot
    assert (0, "thermal_slowdown") in faults(found)


@pytest.mark.parametrize("detector", DETECTORS, ids=lambda d: d.name)
def test_findings_are_well_formed(detector) -> None:
    """Every detector's findings on a bad node use the vocabulary and carry evidence with numbers."""
    bad = with_(
        with_(make_gpu(0, at=T0 + 10), "ecc", uncorrected_volatile=2), "clocks", event_reasons=0x80 | 0x40,
    )
    bad = with_(bad, "pcie", width=8, generation=3)
    bad = links(bad, replay_errors=9, crc_flit_errors=lambda n: 5000, active=lambda n: n != 1)
    bad = with_(bad, "modes", compute_mode="prohibited")
    snapshots = [node(make_gpu(0), at=T0), node(bad, at=T0 + 10), node(dataclasses.replace(bad, sampled_at=T0 + 20), at=T0 + 20),
                 node(dataclasses.replace(bad, sampled_at=T0 + 30), at=T0 + 30)]
    _, per_sample = run_sequence(detector, snapshots, xids={1: [xid(119, at=T0 + 10)]},
                                 config={"power_brake_samples": 1})
    for found in per_sample:
        for f in found:
            assert f.severity in SEVERITIES and f.action in ACTIONS
            assert f.clears in (CLEARS_WHEN_CLEAN, CLEARS_ON_RESET, CLEARS_ON_REBOOT)
            assert f.evidence and any(ch.isdigit() for ch in f.evidence), f


# --- lost_card ------------------------------------------------------------------------------

def test_gpu_is_lost_is_critical_reboot() -> None:
    found = single(lost_card, node(make_gpu(0), make_lost_gpu(1)))
    f = one(found, "gpu_lost", 1)
    assert (f.severity, f.action, f.clears) == (CRITICAL, REBOOT_NODE, CLEARS_ON_REBOOT)
    assert "GPU_IS_LOST" in f.evidence and "00000000:19:00.0" in f.evidence


def test_xid_79_marks_the_gpu_lost() -> None:
    found = single(lost_card, node(make_gpu(0), make_gpu(1)), xids=[xid(79, gpu=1, at=T0 - 1)])
    f = one(found, "gpu_lost", 1)
    assert (f.severity, f.action, f.clears) == (CRITICAL, REBOOT_NODE, CLEARS_ON_REBOOT)
    assert "XID 79" in f.evidence and "22:13:19 UTC" in f.evidence


def test_xid_79_and_lost_flag_merge_into_one_finding() -> None:
    found = single(lost_card, node(make_gpu(0), make_lost_gpu(1)), xids=[xid(79, gpu=1)])
    f = one(found, "gpu_lost", 1)
    assert "XID 79" in f.evidence and "GPU_IS_LOST" in f.evidence


def test_vanished_gpu_is_named_from_the_previous_snapshot() -> None:
    before = node(make_gpu(0), make_gpu(1), make_gpu(2))
    after = node(make_gpu(0, at=T0 + 10), make_gpu(1, at=T0 + 10, identity=make_gpu(2).identity), at=T0 + 10)
    found = single(lost_card, after, before, expected_gpus=3)
    f = one(found, "gpu_missing", 1)
    assert f.uuid == uuid_for(1) and "vanished" in f.evidence and "2 of 3 expected" in f.evidence
    assert (f.severity, f.action) == (CRITICAL, REBOOT_NODE)


def test_missing_gpu_without_history_is_a_node_level_finding() -> None:
    found = single(lost_card, node(make_gpu(0), make_gpu(1)), expected_gpus=8)
    f = one(found, "gpu_count_low", None)
    assert f.node_level and f.uuid is None and "2 of 8 expected" in f.evidence


def test_missing_gpu_is_inferred_from_state_after_restart_of_the_sample_stream() -> None:
    state, _ = lost_card(None, make_input(node(make_gpu(0), make_gpu(1))))
    state = json.loads(json.dumps(state))
    found = lost_card(state, make_input(node(make_gpu(0)), None, expected_gpus=2))[1]
    assert faults(found) == {(1, "gpu_missing")}


def test_bus_id_change_is_a_missing_gpu() -> None:
    moved = make_gpu(1, at=T0 + 10, identity=dataclasses.replace(make_gpu(1).identity, pci_bus_id="00000000:99:00.0"))
    found = single(lost_card, node(make_gpu(0, at=T0 + 10), moved), node(make_gpu(0), make_gpu(1)))
    assert "moved from PCI bus id 00000000:19:00.0 to 00000000:99:00.0" in one(found, "gpu_missing", 1).evidence


@pytest.mark.parametrize(
    "case",
    ["healthy", "nvml down", "uuid unavailable", "count above expected", "bus unavailable"],
)
def test_lost_card_negatives(case) -> None:
    before = node(make_gpu(0), make_gpu(1))
    after = node(make_gpu(0, at=T0 + 10), make_gpu(1, at=T0 + 10), at=T0 + 10)
    expected = 2
    if case == "nvml down":
        after = nvml_down(T0 + 10)
    elif case == "uuid unavailable":  # still enumerated, just unreadable: not missing
        unreadable = dataclasses.replace(make_gpu(1).identity, uuid=ERR, pci_bus_id=ERR)
        after = node(make_gpu(0, at=T0 + 10), make_gpu(1, at=T0 + 10, identity=unreadable, errors=(("device", "x"),)))
    elif case == "count above expected":
        expected = 1
    elif case == "bus unavailable":
        after = node(make_gpu(0, at=T0 + 10), make_gpu(1, at=T0 + 10, identity=dataclasses.replace(
            make_gpu(1).identity, pci_bus_id=NA)))
    assert single(lost_card, after, before, expected_gpus=expected) == []


def no_uuid(gpu):
    """``gpu`` as the reader gives a GPU whose UUID the driver could not give."""
    return dataclasses.replace(gpu, identity=dataclasses.replace(gpu.identity, uuid=Unavailable("gpu_lost")))


def test_a_lost_gpu_without_uuid_is_named_by_the_uuid_known_at_its_index() -> None:
    found = single(lost_card, node(make_gpu(0, at=T0 + 10), no_uuid(make_lost_gpu(1, at=T0 + 10)), at=T0 + 10),
                   node(make_gpu(0), make_gpu(1)))
    f = one(found, "gpu_lost", 1)
    assert f.uuid == uuid_for(1)


def test_a_lost_gpu_never_identified_is_a_node_level_gpu_lost() -> None:
    found = single(lost_card, node(make_gpu(0), no_uuid(make_lost_gpu(1))))
    f = one(found, "gpu_lost", None)
    assert f.uuid is None and "GPU 1 (UUID unreadable: gpu_lost)" in f.evidence and "GPU_IS_LOST" in f.evidence


def test_read_errors_of_a_gpu_without_uuid_are_node_level() -> None:
    _, per_sample = run_sequence(driver, series(lambda i, at: (make_gpu(0, at=at), no_uuid(make_gpu(
        1, at=at, errors=(("uuid", "NVML_ERROR_UNKNOWN"),)))), 3))
    assert [faults(f) for f in per_sample] == [set(), {(None, "nvml_errors")}, {(None, "nvml_errors")}]
    assert "GPU 1 (UUID unreadable: gpu_lost)" in one(per_sample[1], "nvml_errors", None).evidence


def test_per_gpu_detectors_skip_a_gpu_without_uuid() -> None:
    """It cannot be followed from sample to sample: no run, no finding (the same GPU with its UUID fires)."""
    def hot(gpu):
        return with_(with_(gpu, "clocks", event_reasons=0x48), "thermal", gpu_celsius=93.0)

    config = {"thermal_seconds": 10, "thermal_critical_seconds": 30}
    _, per_sample = run_sequence(thermal_power, series(lambda i, at: (no_uuid(hot(make_gpu(1, at=at))),), 5),
                                 config=config)
    assert per_sample == [[]] * 5
    _, per_sample = run_sequence(thermal_power, series(lambda i, at: (hot(make_gpu(1, at=at)),), 5), config=config)
    assert per_sample[-1]


def test_lost_gpu_recovery_means_no_more_findings() -> None:
    """Sticky until reboot is the state machine's job; the detector reports only what it sees."""
    _, per_sample = run_sequence(lost_card, [node(make_gpu(0), make_lost_gpu(1)), node(make_gpu(0), make_gpu(1))])
    assert faults(per_sample[0]) == {(1, "gpu_lost")}
    assert per_sample[1] == []


# --- ecc ------------------------------------------------------------------------------------

def test_unexplained_uncorrectable_jump_is_critical_once_the_xid_window_passed() -> None:
    """A counter jump no XID explains waits contained_xid_window_seconds (5 s) for its XID, then
    is critical, with both counts; 10 s samples: judged at the next sample."""
    _, per_sample = run_sequence(ecc, series(
        lambda i, at: (with_(make_gpu(0, at=at), "ecc", uncorrected_volatile=[0, 2, 2, 2][i]),), 4))
    assert [bool(raised(f)) for f in per_sample] == [False, False, True, False]  # held by the machine (gpu_reset)
    f = one(per_sample[2], "ecc_uncorrectable")
    assert (f.severity, f.action, f.clears, f.schedulable) == (CRITICAL, DRAIN_AND_RESET_GPU, CLEARS_ON_RESET, False)
    assert "0 → 2" in f.evidence and "no contained-error XID 94" in f.evidence


@pytest.mark.parametrize("interval", [10.0, 30.0])
def test_a_contained_error_is_explained_by_its_xid_at_any_sampling_interval(interval: float) -> None:
    """XID 94 one second after the sample before the jump: the error happened between the two
    samples, so the XID explains it even when the sample that sees the jump comes 10 or 30 s later
    (it used to be measured from that sample alone: critical beyond a 5 s interval)."""
    _, per_sample = run_sequence(ecc, series(lambda i, at: (with_(
        make_gpu(0, at=at), "ecc", uncorrected_volatile=[0, 1, 1, 1][i]),), 4, step=interval),
        xids={1: [xid(94, at=T0 + 1)]})
    assert [faults(found) for found in per_sample] == [set(), {(0, "ecc_contained")}, set(), set()]


def test_one_unreadable_volatile_count_is_not_a_jump_of_the_lifetime_count() -> None:
    """The volatile count unreadable for one sample: that sample is not judged; the aggregate
    (lifetime) count, with its errors of long ago, never stands in for it (it used to be judged from
    0: critical). A jump across the unreadable sample is still one."""
    volatile = [0, NA, 0, 0]
    _, per_sample = run_sequence(ecc, series(lambda i, at: (with_(
        make_gpu(0, at=at), "ecc", uncorrected_volatile=volatile[i], uncorrected_aggregate=1),), 4))
    assert per_sample == [[], [], [], []]
    volatile = [0, NA, 2, 2, 2]
    _, per_sample = run_sequence(ecc, series(lambda i, at: (with_(
        make_gpu(0, at=at), "ecc", uncorrected_volatile=volatile[i], uncorrected_aggregate=7),), 5))
    assert [faults(found) for found in per_sample] == [set(), set(), set(), {(0, "ecc_uncorrectable")}, set()]


def test_xid_48_is_uncorrectable_at_once_and_explains_its_counter_jump() -> None:
    state, per_sample = run_sequence(ecc, series(
        lambda i, at: (with_(make_gpu(0, at=at), "ecc", uncorrected_volatile=[0, 1, 1][i]),), 3),
        xids={1: [xid(48, at=T0 + 7)]})
    f = one(per_sample[1], "ecc_uncorrectable")
    assert "XID 48" in f.evidence and "22:13:27 UTC" in f.evidence
    assert per_sample[2] == [] and state["pending"] == {}


def test_uncorrectable_decrease_is_a_reset_not_a_fault() -> None:
    """Counter reset: the volatile count dropped to 0 after a GPU reset: the baseline follows it."""
    state, per_sample = run_sequence(ecc, series(
        lambda i, at: (with_(make_gpu(0, at=at), "ecc", uncorrected_volatile=[0, 3, 3, 0, 0][i]),), 5))
    assert [bool(raised(f)) for f in per_sample] == [False, False, True, False, False]
    assert state["base"][uuid_for(0)] == ["uncorrected_volatile", 0]


@pytest.mark.parametrize(
    ("group", "changes", "fault", "severity", "action"),
    [
        ("remapped_rows", dict(pending=True), "row_remap_pending", WARNING, DRAIN_AND_RESET_GPU),
        ("remapped_rows", dict(failure=True), "row_remap_failure", CRITICAL, REPLACE_NODE),
        ("remapped_rows", dict(uncorrectable=512), "remapped_rows_exhausted", WARNING, REPLACE_NODE),
        ("retired_pages", dict(pending=True, single_bit_ecc=1, double_bit_ecc=1), "retired_pages_pending", WARNING,
         DRAIN_AND_RESET_GPU),
        ("retired_pages", dict(pending=False, single_bit_ecc=50, double_bit_ecc=10), "retired_pages_limit", CRITICAL,
         REPLACE_NODE),
    ],
)
def test_memory_repair_faults(group, changes, fault, severity, action) -> None:
    f = one(single(ecc, node(with_(make_gpu(0), group, **changes))), fault)
    assert (f.severity, f.action) == (severity, action)


@pytest.mark.parametrize(
    ("code", "fault", "severity", "action"),
    [
        (94, "ecc_contained", WARNING, DRAIN_AND_RESET_GPU),
        (95, "ecc_uncontained", CRITICAL, DRAIN_AND_RESET_GPU),
        (140, "ecc_uncontained", CRITICAL, DRAIN_AND_RESET_GPU),
        (63, "row_remap_pending", WARNING, DRAIN_AND_RESET_GPU),
    ],
)
def test_ecc_xids(code, fault, severity, action) -> None:
    f = one(single(ecc, node(make_gpu(0)), xids=[xid(code)]), fault)
    assert (f.severity, f.action) == (severity, action)
    assert f"XID {code}" in f.evidence


def test_xid_63_on_a_pre_ampere_gpu_is_a_page_retirement() -> None:
    volta = with_(with_(make_gpu(0), "remapped_rows", pending=NA, failure=NA, correctable=NA, uncorrectable=NA),
                  "retired_pages", pending=False, single_bit_ecc=0, double_bit_ecc=0)
    assert faults(single(ecc, node(volta), xids=[xid(63)])) == {(0, "retired_pages_pending")}


def test_xid_64_is_the_drivers_and_the_failure_flag_asks_for_replacement() -> None:
    gpu = node(with_(make_gpu(0), "remapped_rows", failure=True))
    f = one(single(ecc, gpu, xids=[xid(64)]), "row_remap_failure")
    assert f.action == REPLACE_NODE and f.clears == CLEARS_ON_REBOOT
    x = one(single(driver, gpu, xids=[xid(64)]), "xid_64")
    assert (x.severity, x.action, x.clears) == (CRITICAL, DRAIN_AND_RESET_GPU, CLEARS_ON_RESET)


def test_ecc_ignores_xids_owned_by_others_and_correctable_counts() -> None:
    gpu = with_(make_gpu(0), "ecc", corrected_volatile=10_000, corrected_aggregate=10**6)
    assert single(ecc, node(gpu), xids=[xid(13), xid(79), xid(119), xid(92)]) == []


def test_ecc_unavailable_readings_raise_nothing() -> None:
    gpu = with_(make_gpu(0), "ecc", enabled=NA, uncorrected_volatile=NA, corrected_volatile=NA)
    gpu = with_(gpu, "remapped_rows", pending=ERR, failure=NA, uncorrectable=NA, correctable=NA)
    gpu = with_(gpu, "retired_pages", pending=NA, single_bit_ecc=NA, double_bit_ecc=50)
    assert single(ecc, node(gpu), node(with_(make_gpu(0), "ecc", uncorrected_volatile=NA))) == []
    assert single(ecc, node(dataclasses.replace(make_gpu(0), ecc=None, remapped_rows=None, retired_pages=None))) == []


def test_row_remap_pending_recovers_after_reset() -> None:
    _, per_sample = run_sequence(ecc, series(
        lambda i, at: (with_(make_gpu(0, at=at), "remapped_rows", pending=i < 2),), 4))
    assert [faults(f) for f in per_sample] == [{(0, "row_remap_pending")}] * 2 + [set()] * 2


# --- driver ---------------------------------------------------------------------------------

def test_nvml_down_is_node_level_critical_and_recovers() -> None:
    _, per_sample = run_sequence(driver, [nvml_down(T0), nvml_down(T0 + 10), node(make_gpu(0, at=T0 + 20))])
    f = one(per_sample[0], "nvml_down", None)
    assert (f.gpu_index, f.uuid, f.severity, f.action, f.clears) == (None, None, CRITICAL, REBOOT_NODE, CLEARS_WHEN_CLEAN)
    assert "NVML_ERROR_DRIVER_NOT_LOADED" in f.evidence
    assert per_sample[2] == []


def test_read_errors_need_consecutive_samples_and_recover() -> None:
    errors = [True, False, True, True, True, True, False]  # flaps first, then sustained, then recovers
    _, per_sample = run_sequence(driver, series(lambda i, at: (make_gpu(
        0, at=at, errors=(("memory.used_bytes", "NVML_ERROR_UNKNOWN"),) if errors[i] else ()),), len(errors)))
    assert [bool(raised(f)) for f in per_sample] == [False, False, False, True, True, True, False]
    f = one(per_sample[3], "nvml_errors")
    assert (f.severity, f.action) == (WARNING, DRAIN_AND_RESET_GPU)
    assert "since 22:13:40 UTC (10 s, threshold 2 s)" in f.evidence
    assert "memory.used_bytes (NVML_ERROR_UNKNOWN)" in f.evidence


def test_windows_are_seconds_not_samples() -> None:
    """The same threshold (error_seconds 2) means the same at a 0.5 s and a 10 s interval."""
    for step, first in ((0.5, 4), (10.0, 1)):
        _, per_sample = run_sequence(driver, series(lambda i, at: (make_gpu(
            0, at=at, errors=(("memory.used_bytes", "NVML_ERROR_UNKNOWN"),)),), 8, step=step))
        assert next(n for n, f in enumerate(per_sample) if f) == first, step


def test_lost_gpu_errors_are_not_driver_errors() -> None:
    _, per_sample = run_sequence(driver, series(lambda i, at: (make_lost_gpu(0, at=at),), 4))
    assert per_sample[-1] == []


def test_xid_13_alone_changes_no_health() -> None:
    found = single(driver, node(make_gpu(0)), xids=[xid(13)])
    f = one(found, "xid_13")
    assert (f.severity, f.action) == (INFO, RESTART_APPLICATION)


def test_xid_13_in_five_bursts_within_a_day_escalates() -> None:
    state = None
    times = [T0 + n * 4 * HOUR for n in range(5)]  # 5 bursts, 4 h apart: all within 24 h
    found = []
    for number, at in enumerate(times):
        events = [xid(13, at=at), xid(13, at=at + 2), xid(13, at=at + 5)]  # one burst of 3
        state, found = driver(state, make_input(node(make_gpu(0, at=at + 6)), xids=events, now=at + 6))
        warnings = [f for f in found if f.severity != INFO]
        assert bool(warnings) == (number == 4), number
    f = one(found, "xid_13_repeated")
    assert (f.severity, f.action, f.clears) == (WARNING, DRAIN_AND_RESET_GPU, CLEARS_WHEN_CLEAN)
    assert "5 bursts within 24 h" in f.evidence and "(3 events)" in f.evidence
    # It stays while the window holds 5 bursts, and ends once the first burst ages out.
    state, found = driver(state, make_input(node(make_gpu(0, at=times[0] + 23 * HOUR)), now=times[0] + 23 * HOUR))
    assert faults(found) == {(0, "xid_13_repeated")}
    state, found = driver(state, make_input(node(make_gpu(0, at=times[0] + 25 * HOUR)), now=times[0] + 25 * HOUR))
    assert found == []


def test_a_reset_or_reboot_forgets_the_bursts_it_was_asked_for() -> None:
    """xid_13_repeated asks for a reset: once the GPU is reset (or the node rebooted), its bursts are
    done with — the warning ends at once, not when the bursts age out a day later — and an XID
    after the reset starts a new burst, however close to the last one."""
    state = None
    for n in range(5):
        at = T0 + n * HOUR
        state, found = driver(state, make_input(node(make_gpu(0, at=at), make_gpu(1, at=at)),
                                                xids=[xid(13, at=at), xid(13, gpu=1, at=at)], now=at))
    assert faults(found) >= {(0, "xid_13_repeated"), (1, "xid_13_repeated")}
    at = T0 + 4 * HOUR + 5
    repaired = dataclasses.replace(make_input(node(make_gpu(0, at=at), make_gpu(1, at=at)), xids=[xid(13, at=at)], now=at),
                       repaired=frozenset({uuid_for(0)}))
    state, found = driver(state, repaired)
    assert faults(found) == {(0, "xid_13"), (1, "xid_13_repeated")}  # GPU 1 was not reset
    assert [b[2] for b in state["bursts"][uuid_for(0)]["13"]] == [1]  # 5 s after the last: a new burst


@pytest.mark.parametrize(
    ("events", "escalates"),
    [
        ([(13, 0, n * 11.0) for n in range(5)], True),  # 11 s apart: 5 separate bursts
        ([(13, 0, n * 9.0) for n in range(20)], False),  # 9 s apart: one long burst
        ([(13, n % 2, n * 60.0) for n in range(8)], False),  # spread over two GPUs: 4 each
        ([(c, 0, n * 60.0) for n, c in enumerate([13, 31, 43, 68, 69])], False),  # different codes
        ([(45, 0, n * 60.0) for n in range(10)], False),  # 45 follows killed processes: never escalates
        ([(13, 0, n * 7 * HOUR) for n in range(5)], False),  # 5 bursts over 28 h: never 5 within 24 h
        ([(777, 0, n * 60.0) for n in range(5)], True),  # unknown codes escalate too
    ],
)
def test_application_xid_escalation_table(events, escalates) -> None:
    state = None
    found = []
    for code, gpu, offset in events:
        at = T0 + offset
        state, found = driver(state, make_input(node(make_gpu(0, at=at), make_gpu(1, at=at)),
                                                xids=[xid(code, gpu=gpu, at=at)], now=at))
    repeated = [f for f in found if f.fault.endswith("_repeated")]
    assert bool(repeated) == escalates, found


@pytest.mark.parametrize(
    ("code", "fault", "severity", "action", "clears"),
    [
        (119, "xid_119", CRITICAL, DRAIN_AND_RESET_GPU, CLEARS_ON_RESET),
        (109, "xid_109", CRITICAL, DRAIN_AND_RESET_GPU, CLEARS_ON_RESET),
        (74, "xid_74", CRITICAL, DRAIN_AND_RESET_GPU, CLEARS_ON_RESET),
        (92, "xid_92", INFO, NONE, CLEARS_WHEN_CLEAN),
        (31, "xid_31", INFO, RESTART_APPLICATION, CLEARS_WHEN_CLEAN),
        (999, "xid_999", WARNING, RESTART_APPLICATION, CLEARS_WHEN_CLEAN),
    ],
)
def test_xids_follow_the_catalog(code, fault, severity, action, clears) -> None:
    f = one(single(driver, node(make_gpu(0)), xids=[xid(code)]), fault)
    assert (f.severity, f.action, f.clears) == (severity, action, clears)


def test_driver_leaves_owned_xids_to_their_detectors() -> None:
    assert single(driver, node(make_gpu(0)), xids=[xid(48), xid(79), xid(94), xid(63)]) == []


def test_xid_154_follows_its_companion() -> None:
    found = single(driver, node(make_gpu(0)), xids=[xid(119, at=T0 - 2), xid(154, at=T0 - 1)])
    f = one(found, "xid_154")
    assert (f.severity, f.action, f.clears) == (CRITICAL, DRAIN_AND_RESET_GPU, CLEARS_ON_RESET)
    assert "following XID 119" in f.evidence


def test_xid_154_follows_a_companion_from_the_previous_run_and_ecc_codes() -> None:
    state, _ = driver(None, make_input(node(make_gpu(0)), xids=[xid(48, at=T0 - 1)]))
    state, found = driver(state, make_input(node(make_gpu(0, at=T0 + 5)), xids=[xid(154, at=T0 + 4)], now=T0 + 5))
    assert one(found, "xid_154").action == DRAIN_AND_RESET_GPU


def test_xid_154_alone_or_late_is_info() -> None:
    assert one(single(driver, node(make_gpu(0)), xids=[xid(154)]), "xid_154").severity == INFO
    late = single(driver, node(make_gpu(0)), xids=[xid(119, at=T0 - 60), xid(154, at=T0)])
    assert one(late, "xid_154").severity == INFO
    other_gpu = single(driver, node(make_gpu(0), make_gpu(1)), xids=[xid(119, gpu=1), xid(154, gpu=0)])
    assert one(other_gpu, "xid_154").severity == INFO


def test_xid_flood_is_one_finding_and_mig_instance_is_kept() -> None:
    events = [xid(13, at=T0 + n, gpu_instance_id=2) for n in range(50)]
    found = single(driver, node(make_gpu(0, at=T0 + 50)), xids=events, now=T0 + 50)
    f = one(found, "xid_13")
    assert f.gpu_instance_id == 2 and "50 times" in f.evidence


# --- memory_leak ----------------------------------------------------------------------------

def idle_gpu(at, used=4 * GiB, util=0.0, **kw):
    gpu = make_gpu(0, at=at, processes=(), **kw)
    return with_(with_(gpu, "memory", used_bytes=used), "utilization", gpu=util)


def busy_node(at):
    return make_gpu(1, at=at)  # keeps a process visible on the node


def test_orphaned_memory_needs_n_samples_and_recovers() -> None:
    orphan = [True] * 6 + [False]
    _, per_sample = run_sequence(memory_leak, series(
        lambda i, at: (idle_gpu(at, used=4 * GiB if orphan[i] else 10 * MiB), busy_node(at)), len(orphan)))
    assert [bool(raised(f)) for f in per_sample] == [False] + [True] * 5 + [False]
    f = one(per_sample[1], "memory_orphaned")
    assert (f.severity, f.action, f.clears) == (WARNING, DRAIN_AND_RESET_GPU, CLEARS_WHEN_CLEAN)
    assert "4.0 GiB used with no process" in f.evidence and "(10 s; threshold 1.0 GiB for 10 s)" in f.evidence


@pytest.mark.parametrize(
    ("process_bytes", "fires"),
    [(9 * GiB, False), (6 * GiB, True), (NA, False)],  # gap just under 1 GiB; 4 GiB; unreadable: skipped
)
def test_memory_no_process_accounts_for(process_bytes, fires) -> None:
    def make(i, at):
        gpu = make_gpu(0, at=at, processes=(GpuProcess(pid=7, used_memory_bytes=process_bytes, kind="compute"),))
        return (with_(gpu, "memory", used_bytes=10 * GiB - 1),)
    _, per_sample = run_sequence(memory_leak, series(make, 5))
    assert bool(raised(per_sample[-1])) == fires
    if fires:
        assert "1 processes hold 6.0 GiB, 4.0 GiB held by none" in one(per_sample[-1], "memory_orphaned").evidence


def test_orphan_flapping_never_fires() -> None:
    _, per_sample = run_sequence(memory_leak, series(
        lambda i, at: ((idle_gpu(at) if i % 2 else make_gpu(0, at=at)), busy_node(at)), 12))
    assert not any(map(raised, per_sample))


@pytest.mark.parametrize(
    "variant",
    ["small baseline", "processes listed", "listing failed", "mig", "used unavailable", "no visible process"],
)
def test_orphan_negatives(variant) -> None:
    def make(i, at):
        gpu = idle_gpu(at)
        if variant == "small baseline":
            gpu = idle_gpu(at, used=512 * MiB)
        elif variant == "processes listed":
            gpu = dataclasses.replace(gpu, processes=make_gpu(0).processes)
        elif variant == "listing failed":
            gpu = dataclasses.replace(gpu, errors=(("processes", "NVML_ERROR_NO_PERMISSION"),))
        elif variant == "mig":
            gpu = with_(gpu, "modes", mig_mode_current=True)
        elif variant == "used unavailable":
            gpu = with_(gpu, "memory", used_bytes=NA)
        if variant == "no visible process":  # e.g. a containerised agent without hostPID
            return (gpu, dataclasses.replace(make_gpu(1, at=at), processes=()))
        return (gpu, busy_node(at))
    _, per_sample = run_sequence(memory_leak, series(make, 8))
    assert not any(map(raised, per_sample)), variant


def test_unavailable_sample_keeps_the_orphan_count() -> None:
    used = [4 * GiB, NA, 4 * GiB]  # the unreadable sample neither breaks the run nor counts
    _, per_sample = run_sequence(memory_leak, series(
        lambda i, at: (with_(idle_gpu(at), "memory", used_bytes=used[i]), busy_node(at)), len(used)))
    assert [bool(raised(f)) for f in per_sample] == [False, False, True]


def test_ghost_gpu_busy_with_no_process() -> None:
    _, per_sample = run_sequence(memory_leak, series(
        lambda i, at: (idle_gpu(at, used=0, util=1.0), busy_node(at)), 2))
    f = one(per_sample[-1], "gpu_ghost_busy")
    assert "100% busy with no process since 22:13:20 UTC (10 s" in f.evidence
    assert not any(map(raised, per_sample[:-1]))


def grow(rate_per_sample, count=70, flat_after=None):
    """Process 4242 on GPU 0 growing by ``rate_per_sample`` bytes each 10 s sample."""
    def make(i, at):
        steps = i if flat_after is None else min(i, flat_after)
        held = 1 * GiB + steps * rate_per_sample
        process = GpuProcess(pid=4242, used_memory_bytes=held, kind="compute")
        return (with_(make_gpu(0, at=at, processes=(process,)), "memory", used_bytes=held + 100 * MiB),)
    return series(make, count)


def test_process_memory_growth_over_the_window() -> None:
    _, per_sample = run_sequence(memory_leak, grow(20 * MiB))  # 2 MiB/s for 700 s
    first = next(n for n, f in enumerate(per_sample) if raised(f))
    assert 40 <= first <= 50  # needs ~75 % of the 600 s window
    f = one(per_sample[-1], "process_memory_growth")
    assert (f.severity, f.action) == (WARNING, RESTART_APPLICATION)
    assert "PID 4242" in f.evidence and "2.0 MiB/s" in f.evidence


@pytest.mark.parametrize(
    "snapshots",
    [grow(5 * MiB), grow(2 * GiB, flat_after=5), grow(20 * MiB, count=30)],
    ids=["too slow", "load then flat", "window not covered"],
)
def test_process_memory_growth_negatives(snapshots) -> None:
    _, per_sample = run_sequence(memory_leak, snapshots)
    assert not any(map(raised, per_sample))


def test_growth_recovers_when_memory_stops_growing() -> None:
    snapshots = grow(20 * MiB, count=150, flat_after=70)
    _, per_sample = run_sequence(memory_leak, snapshots)
    assert per_sample[69] and not per_sample[-1]


# --- nvlink ---------------------------------------------------------------------------------

def test_link_down_is_critical_and_recovers() -> None:
    down = [False, True, True, False]
    _, per_sample = run_sequence(nvlink, series(
        lambda i, at: (links(make_gpu(0, at=at), active=lambda n: not (down[i] and n == 2)),), 4))
    f = one(per_sample[1], "nvlink_down")
    assert (f.severity, f.action) == (CRITICAL, DRAIN_AND_RESET_GPU)
    assert f"3 of {LINKS} expected NVLinks active (links 2 down)" in f.evidence
    assert [bool(raised(f)) for f in per_sample] == down


@pytest.mark.parametrize(
    "variant", ["mig", "state unavailable", "no links", "link count unavailable", "expected override"],
)
def test_link_down_negatives(variant) -> None:
    gpu = links(make_gpu(0), active=lambda n: n != 2)
    config = {}
    if variant == "mig":
        gpu = with_(gpu, "modes", mig_mode_current=True)
    elif variant == "state unavailable":
        gpu = links(make_gpu(0), active=lambda n: NA if n == 2 else True)
    elif variant == "no links":
        gpu = make_gpu(0, link_count=0)
    elif variant == "link count unavailable":
        gpu = dataclasses.replace(gpu, limits=dataclasses.replace(gpu.limits, nvlink_count=NA))
    elif variant == "expected override":
        config = {"expected_active_links": 3}
    found = single(nvlink, node(gpu), config=config)
    assert raised(found) == []
    # an unreadable state that would make up the count neither raises nor clears nvlink_down
    assert marked(found) == ({(0, "nvlink_down")} if variant == "state unavailable" else set())


def test_recovery_increase_is_critical_and_sticky() -> None:
    values = [3, 3, 4, 4, 0, 0]  # +1, then a counter reset (GPU reset) which is no fault
    _, per_sample = run_sequence(nvlink, series(
        lambda i, at: (links(make_gpu(0, at=at), recovery_errors=lambda n: values[i] if n == 1 else 3),), len(values)))
    assert [faults(f) for f in per_sample] == [set(), set(), {(0, "nvlink_recovery_errors")}, set(), set(), set()]
    f = one(per_sample[2], "nvlink_recovery_errors")
    assert (f.severity, f.action, f.clears) == (CRITICAL, DRAIN_AND_RESET_GPU, CLEARS_ON_RESET)
    assert "link 1: 3 → 4" in f.evidence


@pytest.mark.parametrize(
    ("replays", "expected"),
    [
        ([3, 4, 4], [set(), set(), set()]),  # one replay in 10 s: 0.1/s, not a fault (was critical at >= 1)
        ([3, 23, 23, 23], [set(), {"nvlink_errors"}, set(), set()]),  # 2/s: warning; clean samples: gone
        ([3, 2003, 2003], [set(), {"nvlink_error_storm"}, set()]),  # 200/s: critical, clears when clean
    ],
)
def test_replays_are_a_rate_with_crc_errors_and_clear_on_clean_samples(replays, expected) -> None:
    _, per_sample = run_sequence(nvlink, series(
        lambda i, at: (links(make_gpu(0, at=at), replay_errors=lambda n: replays[i] if n == 1 else 3),), len(replays)))
    assert [{f.fault for f in found} for found in per_sample] == expected
    for found in per_sample:
        for f in found:
            assert f.clears == CLEARS_WHEN_CLEAN and "replays +" in f.evidence


def test_a_crc_error_and_its_replay_are_one_event() -> None:
    """Each CRC error is replayed, so it moves two counters: a link's events are the larger of its
    CRC errors (flit + data) and its replays. 40 CRC errors a second, each replayed, are 40/s, not
    80/s (counted twice, a storm was called at 50 errors a second: half the critical threshold)."""
    before = node(make_gpu(0))
    after = node(links(make_gpu(0, at=T0 + 10), crc_flit_errors=lambda n: 1 + 50, crc_data_errors=lambda n: 2 + 50,
                       replay_errors=lambda n: 3 + 100), at=T0 + 10)
    f = one(single(nvlink, after, before), "nvlink_errors")  # 4 links x 100 events / 10 s = 40/s
    assert "40.0/s" in f.evidence and "CRC flit +200" in f.evidence and "replays +400" in f.evidence


def test_crc_errors_and_replays_beyond_them_both_count() -> None:
    before = node(make_gpu(0))
    after = node(links(make_gpu(0, at=T0 + 10), crc_flit_errors=1 + 2, replay_errors=3 + 1), at=T0 + 10)
    assert not single(nvlink, after, before)  # 4 links x max(2 CRC, 1 replay) / 10 s = 0.8/s: below 1/s
    after = node(links(make_gpu(0, at=T0 + 10), crc_flit_errors=1 + 2, replay_errors=3 + 5), at=T0 + 10)
    f = one(single(nvlink, after, before), "nvlink_errors")  # 4 links x max(2 CRC, 5 replays) / 10 s = 2/s
    assert "2.0/s" in f.evidence and "CRC flit +8" in f.evidence and "replays +20" in f.evidence


@pytest.mark.parametrize(
    ("per_link_increase", "expected"),
    [(0, None), (1, None), (5, WARNING), (100, WARNING), (125, CRITICAL), (300, CRITICAL)],
)
def test_crc_rate(per_link_increase, expected) -> None:
    # 4 links, flit + data each grow by per_link_increase in 10 s: rate = 4 * 2 * inc / 10
    before = node(make_gpu(0))
    after = node(links(make_gpu(0, at=T0 + 10), crc_flit_errors=1 + per_link_increase,
                       crc_data_errors=2 + per_link_increase), at=T0 + 10)
    found = single(nvlink, after, before)
    if expected is None:
        assert found == []
    else:
        f = one(found, "nvlink_error_storm" if expected == CRITICAL else "nvlink_errors")
        assert f.severity == expected
        rate = LINKS * 2 * per_link_increase / 10
        assert f"{rate:.1f}/s over 10 s" in f.evidence


def test_crc_counter_reset_and_unavailable_are_skipped() -> None:
    before = node(links(make_gpu(0), crc_flit_errors=10_000, crc_data_errors=NA))
    after = node(links(make_gpu(0, at=T0 + 10), crc_flit_errors=5, crc_data_errors=9_999), at=T0 + 10)
    found = single(nvlink, after, before)
    assert raised(found) == [] and marked(found) == set()  # not supported: a fact, the rate is what is measured
    failing = node(links(make_gpu(0), crc_flit_errors=10_000, crc_data_errors=ERR))
    found = single(nvlink, after, failing)
    assert raised(found) == []
    # data counters failing before: the rate is a lower bound, so neither rate fault may clear
    assert marked(found) == {(0, "nvlink_errors"), (0, "nvlink_error_storm")}
    same_time = node(links(make_gpu(0), crc_flit_errors=10**6))
    assert single(nvlink, same_time, node(make_gpu(0))) == []  # no elapsed time: no rate


# --- compute_mode ---------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("mode", "expected", "fault", "severity"),
    [
        ("default", "default", None, None),
        ("exclusive_process", "default", "compute_mode_drift", WARNING),
        ("default", "exclusive_process", "compute_mode_drift", WARNING),
        ("prohibited", "default", "compute_mode_prohibited", CRITICAL),
        ("prohibited", None, "compute_mode_prohibited", CRITICAL),
        ("exclusive_process", None, None, None),
        (NA, "default", None, None),
        (ERR, "default", None, None),
    ],
)
def test_compute_mode(mode, expected, fault, severity) -> None:
    found = single(compute_mode, node(with_(make_gpu(0), "modes", compute_mode=mode)), config={"expected": expected})
    if fault is None:
        assert raised(found) == []
        # an unreadable mode neither raises nor clears either fault
        unread = isinstance(mode, Unavailable)
        assert marked(found) == ({(0, "compute_mode_prohibited"), (0, "compute_mode_drift")} if unread else set())
    else:
        f = one(found, fault)
        assert (f.severity, f.action, f.clears) == (severity, NONE, CLEARS_WHEN_CLEAN)
        assert "nvidia-smi -i 0 -c" in f.evidence


def test_compute_mode_recovers() -> None:
    modes = ["default", "prohibited", "default"]
    _, per_sample = run_sequence(compute_mode, series(
        lambda i, at: (with_(make_gpu(0, at=at), "modes", compute_mode=modes[i]),), 3))
    assert [bool(raised(f)) for f in per_sample] == [False, True, False]


# --- thermal_power --------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("reasons", "fires"),
    [
        # Bit combinations as hardware reports them: a power brake is HW slowdown + power brake
        # (0x8|0x80), over-temperature HW slowdown + HW thermal slowdown (0x8|0x40).
        ([0x8 | 0x80] * 2, {"power_brake"}),  # a power brake only: never thermal
        ([0x8 | 0x80 | 0x4] * 20, {"power_brake"}),  # however long it lasts (with the SW power cap)
        ([0x8 | 0x80], set()),  # not yet sustained
        ([0x88, 0, 0x88, 0, 0x88, 0], set()),  # flapping never holds
        ([0x8 | 0x40] * 3, {"thermal_slowdown"}),
        ([0x40] * 3, {"thermal_slowdown"}),
        ([0x8] * 3, {"thermal_slowdown"}),  # HW slowdown with no power brake: thermal
        ([0x8, 0x48, 0x48], {"thermal_slowdown"}),  # either thermal form continues the run
        ([0x8, 0x88, 0x88], {"power_brake"}),  # the brake explains 0x8: the thermal run ends
        ([0x8 | 0x40 | 0x80] * 3, {"power_brake", "thermal_slowdown"}),  # both causes named
        ([0x1 | 0x2 | 0x4 | 0x10 | 0x20 | 0x100] * 5, set()),  # normal reasons never fault
        ([0x88, NA, 0x88], {"power_brake"}),  # an unreadable sample neither breaks nor counts
        ([0x88, NA], set()),
    ],
)
def test_clock_event_reasons(reasons, fires) -> None:
    _, per_sample = run_sequence(thermal_power, series(
        lambda i, at: (with_(make_gpu(0, at=at), "clocks", event_reasons=reasons[i]),), len(reasons)))
    assert {f.fault for f in raised(per_sample[-1])} == fires


def test_power_brake_evidence_and_recovery() -> None:
    reasons = [0x88, 0x88, 0x88, 0x8C, 0x4]
    _, per_sample = run_sequence(thermal_power, series(
        lambda i, at: (with_(make_gpu(0, at=at), "clocks", event_reasons=reasons[i]),), len(reasons)))
    f = one(per_sample[3], "power_brake")
    assert (f.severity, f.action, f.fault_class) == (CRITICAL, NONE, "power")
    assert "since 22:13:20 UTC (30 s" in f.evidence and "0x8c" in f.evidence and "not by temperature" in f.evidence
    assert per_sample[4] == []


def test_thermal_becomes_critical_when_very_sustained() -> None:
    config = {"thermal_seconds": 10, "thermal_critical_seconds": 30}

    def hot(i, at):
        return (with_(with_(make_gpu(0, at=at), "clocks", event_reasons=0x48), "thermal", gpu_celsius=93.0),)

    _, per_sample = run_sequence(thermal_power, series(hot, 5), config=config)
    per_sample = [raised(found) for found in per_sample]
    assert [f[0].severity if f else None for f in per_sample] == [None, WARNING, WARNING, CRITICAL, CRITICAL]
    assert per_sample[-1][0].fault == "thermal_slowdown_sustained" and per_sample[-1][0].fault_class == "thermal"
    assert "GPU at 93 °C, slowdown threshold 90 °C" in per_sample[-1][0].evidence


# --- pcie -----------------------------------------------------------------------------------

def pcie_gpu(at, *, width=16, gen=5, util=0.9, pstate=0):
    gpu = with_(make_gpu(0, at=at), "pcie", width=width, generation=gen)
    gpu = with_(gpu, "utilization", gpu=util)
    return with_(gpu, "clocks", performance_state=pstate)


@pytest.mark.parametrize(
    ("samples", "fault"),
    [
        ([dict(width=8)] * 2, "pcie_width_degraded"),
        ([dict(width=8, util=0.0, pstate=8)] * 2, "pcie_width_degraded"),  # width: at any load
        ([dict(gen=3)] * 2, "pcie_generation_degraded"),
        ([dict(gen=3, util=0.1, pstate=0)] * 2, "pcie_generation_degraded"),  # P0 counts as load
        ([dict(gen=1, util=0.0, pstate=8)] * 4, None),  # idle downshift is normal
        ([dict(gen=3)], None),  # one sample is not a fault
        ([dict(gen=3), dict(), dict(gen=3)], None),  # flapping
        ([dict(width=8), dict(width=NA), dict(width=8)], "pcie_width_degraded"),  # unreadable keeps the count
        ([dict(gen=3, util=NA, pstate=NA)] * 3, None),  # load unknown: not judged
        ([dict(width=8)] * 2 + [dict()], None),  # recovered
    ],
)
def test_pcie(samples, fault) -> None:
    _, per_sample = run_sequence(pcie, series(lambda i, at: (pcie_gpu(at, **samples[i]),), len(samples)))
    if fault is None:
        assert raised(per_sample[-1]) == []
    else:
        f = one(per_sample[-1], fault)
        assert (f.severity, f.action, f.clears) == (WARNING, DRAIN_AND_RESET_GPU, CLEARS_WHEN_CLEAN)
        assert "reseat" in f.evidence


@pytest.mark.parametrize(
    ("sample", "unread", "seen"),
    [
        (dict(), set(), set()),  # full width and generation: clean, counts towards clearing
        (dict(gen=5, util=0.0, pstate=8), set(), set()),  # full generation while idle is clean too
        (dict(width=NA, gen=ERR), {"pcie_width_degraded", "pcie_generation_degraded"}, set()),  # unreadable
        (dict(gen=1, util=0.0, pstate=8), {"pcie_generation_degraded"}, set()),  # idle below the maximum
        (dict(gen=3, util=NA, pstate=NA), {"pcie_generation_degraded"}, set()),  # load unknown
        (dict(width=8, gen=3), set(), {"pcie_width_degraded", "pcie_generation_degraded"}),  # back, unconfirmed
    ],
)
def test_pcie_only_a_full_reading_clears(sample, unread, seen) -> None:
    # the link degraded long enough to raise both, then one sample of each kind after a clean one
    samples = [dict(width=8, gen=3)] * 2 + [dict()] + [sample]
    _, per_sample = run_sequence(pcie, series(lambda i, at: (pcie_gpu(at, **samples[i]),), len(samples)))
    assert faults(per_sample[1]) == {(0, "pcie_width_degraded"), (0, "pcie_generation_degraded")}
    assert raised(per_sample[-1]) == []
    link = {(0, "pcie_width_degraded"), (0, "pcie_generation_degraded")}  # not the replay rate's window
    assert marked(per_sample[-1]) & link == {(0, fault) for fault in unread}
    assert marked(per_sample[-1], SEEN_AGAIN) == {(0, fault) for fault in seen}


def test_pcie_max_unavailable_is_skipped() -> None:
    gpu = pcie_gpu(T0, width=8, gen=3)
    gpu = dataclasses.replace(gpu, limits=dataclasses.replace(gpu.limits, pcie_max_width=NA, pcie_max_generation=ERR))
    _, per_sample = run_sequence(pcie, [node(dataclasses.replace(gpu, sampled_at=T0 + n)) for n in range(3)])
    assert not any(raised(found) for found in per_sample)
    assert all(marked(found) >= {(0, "pcie_width_degraded"), (0, "pcie_generation_degraded")}
               for found in per_sample)


# --- robustness -----------------------------------------------------------------------------

def test_no_snapshot_and_nvml_down_are_quiet_except_driver() -> None:
    for detector in DETECTORS:
        state, found = detector(None, make_input(None, None, expected_gpus=2))
        assert found == []
        _, found = detector(state, make_input(nvml_down(), node(make_gpu(0)), expected_gpus=1))
        assert {f.fault for f in found} <= {"nvml_down"}, detector.name


def test_empty_reading_groups_are_skipped() -> None:
    bare = dataclasses.replace(make_gpu(0), utilization=None, memory=None, thermal=None, power=None, clocks=None,
                               pcie=None, ecc=None, retired_pages=None, remapped_rows=None, nvlinks=(), modes=None,
                               processes=())
    states: dict = {}
    for n in range(6):
        states, found = run_detectors(states, make_input(node(dataclasses.replace(bare, sampled_at=T0 + n))))
        assert raised(found) == []


def _maybe(value, draw):
    return draw(st.sampled_from([value, NA, ERR]))


@st.composite
def random_gpu(draw, index, at):
    gpu = make_gpu(index, at=at, link_count=draw(st.integers(0, 4)))
    counter = st.one_of(st.integers(0, 10**6), st.just(NA), st.just(ERR))
    ratio = st.one_of(st.floats(0, 1), st.just(NA))
    gpu = with_(gpu, "ecc", uncorrected_volatile=draw(counter))
    gpu = with_(gpu, "remapped_rows", pending=draw(st.one_of(st.booleans(), st.just(NA))),
                failure=draw(st.one_of(st.booleans(), st.just(ERR))), uncorrectable=draw(counter))
    gpu = with_(gpu, "retired_pages", pending=draw(st.one_of(st.booleans(), st.just(NA))),
                single_bit_ecc=draw(counter), double_bit_ecc=draw(counter))
    gpu = with_(gpu, "clocks", event_reasons=draw(st.one_of(st.integers(0, 0x1FF), st.just(NA))),
                performance_state=draw(st.one_of(st.integers(0, 15), st.just(NA))))
    gpu = with_(gpu, "pcie", width=draw(st.one_of(st.sampled_from([1, 4, 8, 16]), st.just(NA))),
                generation=draw(st.one_of(st.integers(1, 5), st.just(ERR))))
    gpu = with_(gpu, "utilization", gpu=draw(ratio))
    gpu = with_(gpu, "memory", used_bytes=draw(counter))
    gpu = with_(gpu, "modes", compute_mode=draw(st.sampled_from(["default", "prohibited", "exclusive_process", NA])),
                mig_mode_current=draw(st.one_of(st.booleans(), st.just(NA))))
    gpu = links(gpu, active=lambda n: draw(st.one_of(st.booleans(), st.just(NA))),
                crc_flit_errors=lambda n: draw(counter), replay_errors=lambda n: draw(counter))
    if draw(st.booleans()):
        gpu = dataclasses.replace(gpu, processes=())
    if draw(st.integers(0, 9)) == 0:
        gpu = make_lost_gpu(index, at=at)
    if draw(st.integers(0, 9)) == 0:
        gpu = dataclasses.replace(gpu, ecc=None, pcie=None, clocks=None, modes=None, memory=None)
    return gpu


@st.composite
def random_snapshot(draw, at):
    if draw(st.integers(0, 9)) == 0:
        return nvml_down(at)
    count = draw(st.integers(0, 3))
    return node(*(draw(random_gpu(i, at)) for i in range(count)), at=at) if count else make_snapshot(
        make_gpu(0, at=at), gpus=(), device_count=0, sampled_at=at)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_no_detector_raises_on_random_snapshots(data) -> None:
    states: dict = {}
    previous = None
    for n in range(3):
        at = T0 + n * data.draw(st.sampled_from([0.0, 0.5, 10.0]))
        snapshot = data.draw(random_snapshot(at))
        events = data.draw(st.lists(st.builds(
            xid, st.sampled_from([13, 45, 48, 63, 79, 94, 119, 154, 500]), st.integers(0, 3), st.just(at)), max_size=4))
        states, found = run_detectors(states, make_input(snapshot, previous, xids=events,
                                                         expected_gpus=data.draw(st.integers(0, 4)), now=at))
        json.dumps(states)  # states stay JSON-friendly
        for f in found:
            assert f.severity in SEVERITIES and f.action in ACTIONS
        previous = snapshot


def test_xid_only_evaluations_do_not_advance_sample_counts() -> None:
    """The checker re-runs the detectors on the same snapshot when only XIDs arrived
    (``snapshot is previous``): sustained-sample detectors must not count it again."""
    bad = with_(with_(idle_gpu(T0), "clocks", event_reasons=0x80), "pcie", width=8)
    bad = dataclasses.replace(bad, errors=(("ecc.uncorrected_volatile", "NVML_ERROR_UNKNOWN"),))
    snapshot = node(bad, busy_node(T0))
    states: dict = {}
    for n in range(6):  # one sample, then five XID-only evaluations of it
        states, found = run_detectors(states, make_input(snapshot, snapshot if n else None,
                                                         xids=[xid(13, at=T0 + n)], now=T0 + n))
        assert {f.fault for f in raised(found)} <= {"xid_13"}, n
    next_sample = node(dataclasses.replace(bad, sampled_at=T0 + 10), busy_node(T0 + 10), at=T0 + 10)
    states, found = run_detectors(states, make_input(next_sample, snapshot, now=T0 + 10))
    # the second sample: every two-sample confirmation is met (power brake, PCIe width, read
    # errors, the idle GPU's orphaned memory)
    assert {"pcie_width_degraded", "power_brake", "nvml_errors", "memory_orphaned"} == {f.fault for f in raised(found)}
