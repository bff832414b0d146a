"""Same seed + same clock readings => same answers, however many calls came in between."""

import pytest

from runtimekit.sim import SimulatedNode, load_scenario


def _trace(node, clock, times, extra_calls):
    out = []
    for t in times:
        clock.t = 1_700_000_000.0 + t
        for _ in range(extra_calls):
            node.reading(0)
            node.processes()
        for g in (0, 5):
            s, c = node.reading(g)
            out.append((s, c.energy_mj, c.pcie_tx_bytes, c.nvlink_tx_kib[3], c.ecc_corrected,
                        tuple(p["pid"] for p in node.processes())))
    return out


@pytest.mark.parametrize("profile", ["training", "busy"])
def test_same_seed_same_answers_regardless_of_call_count(profile, clock_factory):
    times = [0, 0.5, 1, 7.25, 60, 61, 500, 1300, 2500]
    runs = []
    for extra in (0, 3):
        clock = clock_factory()
        node = SimulatedNode(load_scenario("dgx-h100"), seed=42, clock=clock, load=profile)
        runs.append(_trace(node, clock, times, extra))
    assert runs[0] == runs[1]
    clock = clock_factory()
    other = SimulatedNode(load_scenario("dgx-h100"), seed=43, clock=clock, load=profile)
    assert _trace(other, clock, times, 0) != runs[0]


def test_counters_never_go_back_across_faults(clock_factory):
    clock = clock_factory()
    node = SimulatedNode(load_scenario("dgx-h100"), seed=1, clock=clock, load="busy")
    last = None
    for step in range(40):
        clock.advance(0.37)
        if step == 10:
            node.inject(0, "nvlink-down", link=3)
        if step == 15:
            node.inject(0, "power-brake")
        if step == 25:
            node.clear(0)
        _, c = node.reading(0)
        now = (c.energy_mj, c.pcie_tx_bytes, c.pcie_rx_bytes, *c.nvlink_tx_kib, *c.nvlink_crc, *c.nvlink_replay, c.ecc_corrected)
        if last is not None:
            assert all(a <= b for a, b in zip(last, now, strict=True))
        last = now


def test_training_profile_changes_over_time(clock_factory):
    clock = clock_factory()
    node = SimulatedNode(load_scenario("dgx-h100"), seed=5, clock=clock)
    phases, utils = set(), set()
    for _ in range(130):
        phases.add(node.sample(0).phase)
        utils.add(node.sample(0).util_gpu)
        clock.advance(10)
    assert {"idle", "train", "checkpoint"} <= phases and len(utils) > 10


def test_energy_is_the_integral_of_power(clock_factory):
    clock = clock_factory()
    node = SimulatedNode(load_scenario("dgx-h100"), seed=3, clock=clock, load="busy")
    node.reading(0)
    expected = 0.0
    for _ in range(20):
        expected += node.sample(0).power_mw * 1.0  # mW x 1 s = mJ
        clock.advance(1)
    assert node.reading(0)[1].energy_mj == pytest.approx(expected)


def test_repeated_calls_in_a_tick_are_cached(clock_factory):
    clock = clock_factory()
    node = SimulatedNode(load_scenario("dgx-h100"), seed=3, clock=clock, load="busy")
    a = node.sample(0)
    assert node.sample(0) is a
    clock.advance(1)
    assert node.sample(0) is not a
