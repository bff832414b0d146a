"""The PCIe replay rate (pcie detector, ``pcie_replay_rate``): judged as a rate over a window that
the counts must span, as DCGM's PCIe watch; one replay is no fault; state bounded at any rate."""

from __future__ import annotations

import pytest
from health_factories import ERR, T0, faults, make_gpu, make_snapshot, marked, raised, run_sequence, with_

from runtimekit.healthcheck.detectors.pcie import REPLAY_POINTS, pcie
from runtimekit.healthcheck.types import NONE, WARNING


def replays(counts, step: float = 10.0) -> list:
    """Snapshots of GPU 0 whose replay counter reads ``counts[i]`` at T0 + i * step."""
    return [make_snapshot(with_(make_gpu(0, at=T0 + i * step), "pcie", replay_count=c), at=T0 + i * step)
            for i, c in enumerate(counts)]


def test_a_rate_at_the_limit_over_a_full_window_warns() -> None:
    _, per_sample = run_sequence(pcie, replays([0, 2, 4, 6, 8, 10, 12, 14]))  # 12/min
    assert [bool(raised(found)) for found in per_sample] == [False] * 6 + [True] * 2  # the window spanned from 60 s
    assert marked(per_sample[3]) >= {(0, "pcie_replay_rate")}  # before: neither raised nor cleared
    f = next(f for f in raised(per_sample[-1]) if f.fault == "pcie_replay_rate")
    assert (f.severity, f.action, f.schedulable) == (WARNING, NONE, True)
    assert "PCIe replays at 12.0/min over 70 s (+14, counter 14; threshold 8/min)" in f.evidence  # from the count before the window


@pytest.mark.parametrize("counts", [
    [0] * 8,  # a quiet link
    [0, 0, 0, 1, 1, 1, 1, 1],  # one replay: a healthy link shows a few an hour
    [0, 1, 2, 3, 4, 5, 6, 7],  # 6/min: under the limit
    [50, 52, 54, 0, 2, 4, 6, 8],  # the counter went back (driver reload): the window starts again
])
def test_no_warning(counts) -> None:
    _, per_sample = run_sequence(pcie, replays(counts))
    assert not any(faults(found) for found in per_sample)


def test_the_rate_clears_once_the_window_is_quiet_and_an_unreadable_count_holds() -> None:
    counts = [0, 10, 20, 30, 40, 50, 60, 60, 60, 60, 60, 60, 60, 60, ERR, 60]
    _, per_sample = run_sequence(pcie, replays(counts))
    judged = [("raised" if raised(found) else "unread" if (0, "pcie_replay_rate") in marked(found) else "clean")
              for found in per_sample]
    assert judged[6] == "raised" and judged[-3] == "clean"
    assert judged[14] == "unread"  # the counter unreadable: no clean sample


def test_the_state_is_bounded_at_any_sampling_rate() -> None:
    state, _ = run_sequence(pcie, replays(range(3000), step=0.1))  # 300 s at 10 samples a second
    assert len(state["replays"][make_gpu(0).uuid]) <= REPLAY_POINTS + 3  # the window, the one before, the newest


def test_a_gap_in_the_counts_is_not_judged_until_the_window_is_full_again() -> None:
    """Replays counted before an hour without a readable counter would dilute today's burst."""
    counts = [0, 0, 0, 0, 0, 0, 0, 0]
    later = [60, 90, 120]  # a burst after the gap: 180/min
    snapshots = replays(counts) + [make_snapshot(with_(make_gpu(0, at=T0 + 3600 + 10 * i), "pcie", replay_count=c),
                                                 at=T0 + 3600 + 10 * i) for i, c in enumerate(later)]
    _, per_sample = run_sequence(pcie, snapshots)
    assert all((0, "pcie_replay_rate") in marked(found) and not raised(found) for found in per_sample[8:])
